"""`armload run`: load modules, verify every branch, run init (and exit) on an emulated CPU."""
from __future__ import annotations

import argparse
import json
import sys

from ..errors import EmulationError

DESCRIPTION = """\
Load one or more modules (in order; later ones may import from earlier ones), check that every
branch site and PLT entry reaches its target, then run each module's init_module on an emulated
ARM CPU with a simulated kernel. printk output appears as on the kernel console.
Exit status 0 only when every init returned 0 and every branch verified."""


# --- shared by run / verify / disasm ---------------------------------------------------------
def add_module_args(p: argparse.ArgumentParser) -> None:
    """Kernel, config and placement options: the `load` command's, or a compatible fallback."""
    try:
        from .load import add_common_args
    except ImportError:
        add_common_args = None
    if add_common_args is not None:
        add_common_args(p)
        return
    p.add_argument("--kernel", "-k", action="append", default=[], metavar="FILE",
                   help="Module.symvers, System.map or /proc/kallsyms text (repeatable)")
    p.add_argument("--thumb2", action="store_true", help="simulate a Thumb-2 kernel (CONFIG_THUMB2_KERNEL)")
    p.add_argument("--placement", default="window",
                   help="window (default), vmalloc, or a hex address for the module memory")


def build_session(args):
    try:
        from .load import session_from_args
    except ImportError:
        session_from_args = None
    if session_from_args is not None:
        return session_from_args(args)
    from ..config import DEBIAN_ARMMP
    from ..kernel import Kernel
    from ..loader import Session
    config = DEBIAN_ARMMP.with_(thumb2=bool(getattr(args, "thumb2", False)))
    placement = args.placement
    if isinstance(placement, str) and placement.lower().startswith("0x"):
        placement = int(placement, 16)
    kernel = Kernel.from_files(list(args.kernel or []), config)
    return Session(kernel, config, placement)


def load_all(args):
    session = build_session(args)
    modules = [session.load(p, object=getattr(args, "object", False)) for p in args.modules]
    return session, modules


def _int(s: str) -> int:
    try:
        return int(s, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {s!r}") from None


def register(sub) -> None:
    p = sub.add_parser("run", help="run init_module in the emulator and verify every branch",
                       description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("modules", nargs="+", metavar="MODULE.ko")
    add_module_args(p)
    p.add_argument("--call", metavar="NAME", help="run the named function of the last module instead of init")
    p.add_argument("--arg", dest="call_args", action="append", type=_int, default=[], metavar="N",
                   help="argument for --call (repeatable, r0 first)")
    p.add_argument("--exit", action="store_true", help="after init succeeds, run cleanup_module too")
    p.add_argument("--trace", action="store_true", help="list every kernel call with arguments and result")
    p.add_argument("--budget", type=_int, default=50_000_000, metavar="N",
                   help="instruction budget per call (default 50M)")
    p.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                   help="wall-clock limit per call (default 10 s)")
    p.add_argument("--no-verify", action="store_true", help="skip branch-reach verification")
    p.add_argument("--json", action="store_true", help="machine-readable result on stdout")
    p.set_defaults(func=cmd_run)


def cmd_run(args) -> int:
    from ..emulate import Machine
    from ..verify import verify_module

    if args.budget <= 0:
        raise EmulationError("--budget must be positive")
    session, modules = load_all(args)
    as_json = args.json
    out = sys.stdout

    def say(text: str = "") -> None:
        if not as_json:
            print(text, file=out, flush=True)

    def trace(rec) -> None:
        say("  call " + rec.format())

    report = {"ok": True, "modules": []}
    ok = True
    verified = {}
    if not args.no_verify:
        for m in modules:
            v = verify_module(m, session.kernel)
            verified[m.name] = v
            ok &= v.ok

    machine = Machine(modules, session.kernel, budget=args.budget, timeout=args.timeout,
                      trace=trace if args.trace and not as_json else None,
                      console=(lambda line: say(line)) if not as_json else None)
    entries = {m.name: {"name": m.name, "path": m.path} for m in modules}
    for m in modules:
        if m.name in verified:
            entries[m.name]["verify"] = verified[m.name].to_dict()
    failed = False
    inits_ok = []
    for i, m in enumerate(modules):
        last = i == len(modules) - 1
        if last and args.call:
            res = machine.call(args.call, args.call_args, module=m)
            ok_run = res.status == "returned"
        else:
            res = machine.run_init(m)
            ok_run = res.ok
        entries[m.name]["run"] = res.to_dict()
        _print_result(say, res, show_value=bool(last and args.call))
        if not ok_run:
            ok = False
            failed = True
            break
        inits_ok.append(m)
    if args.exit and not failed:
        for m in reversed(inits_ok):
            res = machine.run_exit(m)
            entries[m.name]["exit"] = res.to_dict()
            _print_result(say, res, void=True)
            if res.status not in ("returned", "no-function"):
                ok = False
                break
    for m in modules:
        if m.name in verified:
            say(verified[m.name].format())
    leaks = machine.heap.live
    if leaks:
        say(f"heap: {len(leaks)} allocation(s) still live: " +
            ", ".join(f"{a.kind}({a.size}) at {a.addr:#x} by {machine.symbolize(a.caller)}"
                      for a in list(leaks.values())[:5]))
    report["ok"] = ok
    report["modules"] = [entries[m.name] for m in modules]
    report["heap_live"] = [{"addr": a.addr, "size": a.size, "kind": a.kind, "caller": machine.symbolize(a.caller)}
                           for a in leaks.values()]
    if as_json:
        json.dump(report, out, indent=2)
        print(file=out)
    return 0 if ok else 1


def _print_result(say, res, *, show_value: bool = False, void: bool = False) -> None:
    if res.fault is not None:
        say(res.fault.format())
    if void and res.status == "returned":
        say(f"{res.module}: {res.function} returned")
    elif show_value and res.status == "returned":
        say(f"{res.module}: {res.function} returned {res.retval} ({res.retval & 0xFFFFFFFF:#x})")
    else:
        say(res.summary())
    counts: dict[str, int] = {}
    for c in res.calls:
        counts[c.name] = counts.get(c.name, 0) + 1
    if counts:
        say(f"{res.module}: {len(res.calls)} kernel call(s): " +
            ", ".join(f"{n} x{k}" if k > 1 else n for n, k in counts.items()))
    for r in res.registrations:
        extra = ", ".join(f"{k}={v:#x}" if isinstance(v, int) and k in ("addr", "fops", "probe") else f"{k}={v}"
                          for k, v in r.items() if k not in ("call",))
        say(f"{res.module}: registered {r['call']}: {extra}")
