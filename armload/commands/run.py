"""`armload run`: load modules, verify every branch, run init (and exit) on an emulated CPU."""
from __future__ import annotations

import argparse
import json
import os
import sys

from ..errors import ArmloadError, EmulationError
from .modargs import assign_params, split_modules

NO_KERNEL_HINT = ("hint: without --kernel only the functions armload simulates resolve. Run against Debian's "
                  "kernel: `make test-inputs` fetches it into .cache, then --kernel .cache/linux-headers-6.1.0-50-armmp/"
                  "usr/src/linux-headers-6.1.0-50-armmp/Module.symvers --kernel .cache/linux-image-6.1.0-50-armmp/"
                  "boot/vmlinuz-6.1.0-50-armmp (or --simulate-symbols to invent every address)")

DESCRIPTION = """\
Load one or more modules (in order; later ones may import from earlier ones), check that every
branch site and PLT entry reaches its target, then run each module's init on an emulated ARM CPU.
With --kernel vmlinuz the kernel's own code runs from the Debian image; Python models stand in
where it needs boot-time state or hardware; a call to anything else ends the run as
`unmodelled: NAME called from SYM+0xOFF [module]` (see --unmodelled). Every trace line says
how the call was simulated: [real], [model], [fallback] (no image: a Python stand-in for real
code), [unmodelled].
Words after a module that are not module files are its parameters (insmod semantics; options
may come between them), set through its __param table before init. After the inits, each --call
runs in order on the same machine state (an unknown name, or a wrong argument count where DWARF
gives one, is refused before init); inside the booted kernel the file operations (--open PATH,
--write, --read, --lseek, --ioctl, --poll, --mmap, --close, --cat, --echo) follow, in order, as
real system calls through the kernel's VFS; --exit runs cleanup last. A fault prints the oops as 6.1's
__die prints it (Internal error, Modules linked in, CPU/Hardware name, registers, Stack: dump,
EHABI-unwound backtrace with file:line from DWARF, Code:), then armload's notes; a run that stops
at an unmodelled call or the budget says so and is not printed as an oops.
Exit status 0 only when every init returned 0, every --call and device operation returned, and
every branch verified."""


def add_module_args(p: argparse.ArgumentParser) -> None:
    from .load import add_common_args
    add_common_args(p)


def build_session(args):
    from .load import session_from_args
    return session_from_args(args)


def load_all(args):
    session, modules, _ = load_with_params(args)
    return session, modules


def load_with_params(args):
    """Load the positional modules; their parameters (positional words and --param) by module."""
    session = build_session(args)
    pairs = split_modules(args.modules)
    modules = [session.load(p, object=getattr(args, "object", False)) for p, _ in pairs]
    per = assign_params([m.name for m in modules], pairs, getattr(args, "params", None))
    return session, modules, {id(m): ps for m, ps in zip(modules, per)}


def check_calls(modules, calls) -> None:
    """Every --call names a function of a loaded module and, where DWARF says how many parameters
    it has, passes that many: refused before any init runs."""
    for name, cargs in calls:
        owner = next((m for m in reversed(modules) for sym in m.symbols
                      if sym.name == name and sym.section and sym.stype in ("func", "notype")), None)
        if owner is None:
            have = sorted({sym.name for m in modules for sym in m.symbols
                           if sym.section and sym.stype == "func" and not sym.name.startswith(("__", "$"))})
            raise EmulationError(f"--call {name}: no function {name!r} in {', '.join(m.name for m in modules)} "
                                 f"(functions: {', '.join(have[:20])}{', ...' if len(have) > 20 else ''})")
        from ..emu.debuginfo import line_table
        fn = next((f for f in line_table(owner).functions if f.name == name), None)
        if fn is not None and fn.params is not None and fn.params != len(cargs):
            raise EmulationError(f"--call {name}: {name} takes {fn.params} argument{'s' if fn.params != 1 else ''} "
                                 f"(DWARF of {owner.name}), {len(cargs)} given")


def _int(s: str) -> int:
    try:
        return int(s, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {s!r}") from None


def register(sub) -> None:
    from ..emu.limits import DEFAULT_BUDGET, DEFAULT_TIMEOUT
    p = sub.add_parser("run", help="run init_module in the emulator and verify every branch",
                       description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("modules", nargs="+", metavar="MODULE.ko [name=value ...]",
                   help="modules in load order, each followed by its parameters as for insmod")
    add_module_args(p)
    p.add_argument("--param", dest="params", action="append", default=[], metavar="[MODULE.]NAME=VALUE",
                   help="a parameter of the last module (or of MODULE); repeatable; set through the module's "
                        "__param table by the kernel's own param_set_* before init, as load_module does")
    p.add_argument("--call", dest="calls", action="append", nargs="+", default=[], metavar=("NAME", "ARG"),
                   help="after init, call NAME(ARG...) on the same machine state; repeatable, in order. "
                        "ARG: an integer, s:TEXT (a string in kernel memory), b:HEX (a buffer) or buf:N "
                        "(N zeroed bytes); buffers are printed after the call")
    p.add_argument("--arg", dest="call_args", action="append", type=_int, default=[], metavar="N",
                   help=argparse.SUPPRESS)      # deprecated: --call NAME --arg N (use --call NAME N)
    p.add_argument("--exit", action="store_true", help="after init (and the calls) succeed, run cleanup_module too")
    p.add_argument("--image", metavar="FILE", help="write each loaded module as an ELF executable at its load "
                                                   "addresses with its DWARF relocated (symbols for gdb/addr2line; "
                                                   "several modules: FILE gets a -NAME suffix)")
    p.add_argument("--coverage", metavar="OUT.info",
                   help="record which module instructions ran (init, calls, exit) and write an lcov tracefile "
                        "with line and function coverage from the modules' DWARF (genhtml renders it); "
                        "prints a summary line per module")
    p.add_argument("--gdb", type=int, metavar="PORT",
                   help="stop before the last module's init and serve the GDB remote protocol on PORT "
                        "(udbserver); load symbols with `file` on the --image FILE")
    p.add_argument("--trace", action="store_true", help="list every kernel call with its class, arguments and result")
    p.add_argument("--unmodelled", choices=("fail", "real", "zero"), default="fail",
                   help="a call to a kernel function armload does not simulate: fail (default: end the run "
                        "and say so), real (run the kernel's own code from the image), zero (return 0, marked)")
    p.add_argument("--budget", type=_int, default=None, metavar="N",
                   help=f"instruction budget per call, kernel code included (default {DEFAULT_BUDGET:,}; "
                        f"in the booted kernel per load_module, signature check and init included: "
                        f"1,000,000,000); the simulated clock is 1 instruction = 1 ns")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                   help=f"wall-clock safety net per call (default {DEFAULT_TIMEOUT:g} s); never part of a result")
    p.add_argument("--no-verify", action="store_true", help="skip branch-reach verification")
    p.add_argument("--probe", dest="probes", action="append", default=[], metavar="KIND:FUNC[+OFF]",
                   help="probe a module or (with --kernel vmlinuz) kernel function (repeatable): "
                        "kprobe:FUNC[+OFF], kprobe:MODULE:FUNC, kprobe:0xADDR, kretprobe:FUNC, ftrace:FUNC, "
                        "graph:FUNC (function_graph); inside the booted kernel these are the kernel's own "
                        "register_kprobe/kretprobe/ftrace/function_graph. fentry:FUNC/fexit:FUNC are armload's "
                        "own trampolines on the model runtime (an extension: 32-bit ARM 6.1 has none); "
                        "each hit is printed with its arguments or return value")
    from .devio_booted import add_devio_args
    add_devio_args(p)
    p.add_argument("--runtime", choices=("booted", "models"),
                   help="booted: inside the Debian kernel booted in Unicorn (the default with --kernel vmlinuz; "
                        "the kernel's own load_module loads and inits, armload's image is compared with its); "
                        "models: armload's Python-model runtime (the default without an image, and with "
                        "--call/--trace/--coverage/--gdb/--probe fentry|fexit/--placement)")
    p.add_argument("--tree", metavar="DIR",
                   help="booted runtime: the module tree request_module's modprobe loads from (default: the "
                        "lib/modules tree of the kernel package the vmlinuz comes from, when present)")
    p.add_argument("--settle-ms", type=int, default=1000, metavar="MS",
                   help="booted runtime: after the last init, let the kernel run its deferred work (timers, "
                        "workqueues, kthreads, RCU) for up to MS of simulated time, until idle (default 1000)")
    p.add_argument("--json", action="store_true", help="machine-readable result on stdout")
    from .sanitize_opts import add_args as add_sanitize_args
    add_sanitize_args(p)
    p.set_defaults(func=cmd_run, devio=[])


def cmd_run(args) -> int:
    from .run_booted import choose_runtime, cmd_run_booted
    runtime, why = choose_runtime(args)
    if runtime == "booted":
        from ..ci.corpus import BOOTED_BUDGET
        args.budget = BOOTED_BUDGET if args.budget is None else args.budget
        if args.budget <= 0:
            raise EmulationError("--budget must be positive")
        return cmd_run_booted(args)
    from ..emu.limits import DEFAULT_BUDGET
    args.budget = DEFAULT_BUDGET if args.budget is None else args.budget
    if why and not args.json:
        print(f"armload: {why}", flush=True)
    if args.devio:
        raise EmulationError("file operations (--open/--cat/--echo...) are real system calls inside the booted "
                             + (f"kernel, and {why}: run them in a separate command" if why else
                                "kernel: give the image with --kernel vmlinuz (`make test-inputs` fetches Debian's)"))
    from ..emu import Machine
    from ..loader.verify import verify_module

    if args.budget <= 0:
        raise EmulationError("--budget must be positive")
    if args.gdb is not None and args.json:
        raise EmulationError("--gdb cannot be combined with --json (the gdb server talks on stdout)")
    if args.gdb is not None and not 0 < args.gdb < 65536:
        raise EmulationError(f"--gdb: bad port {args.gdb}")
    if args.call_args and not args.calls:
        raise EmulationError("--arg needs --call NAME")
    if args.call_args:                 # the old form: --call NAME --arg N ...
        print("armload: --arg is deprecated: write --call NAME ARG... (arguments go to the last --call)",
              file=sys.stderr)
        args.calls[-1].extend(str(a) for a in args.call_args)
    from ..emu import callargs
    calls = [(c[0], [callargs.parse(a) for a in c[1:]]) for c in args.calls]
    try:
        session, modules, params = load_with_params(args)
    except ArmloadError as e:
        if args.kernel or "Unknown symbol" not in str(e):
            raise
        raise type(e)(f"{e}\n{NO_KERNEL_HINT}") from None
    check_calls(modules, calls)
    as_json = args.json
    out = sys.stdout

    def say(text: str = "") -> None:
        if not as_json:
            print(text, file=out, flush=True)

    def trace(rec) -> None:
        say("  call " + rec.format())

    report = {"ok": True, "kernel": session.kernel.describe(), "modules": []}
    ok = True
    verified = {}
    if not args.no_verify:
        for m in modules:
            v = verify_module(m, session.kernel)
            verified[m.name] = v
            ok &= v.ok

    machine = Machine(modules, session.kernel, budget=args.budget, timeout=args.timeout,
                      unmodelled=args.unmodelled, trace=trace if args.trace and not as_json else None,
                      console=(lambda line: say(line)) if not as_json else None)
    from .probe_options import attach as attach_probes
    attach_probes(machine, args.probes, say, report)
    if machine.image is None:
        say("armload: no kernel image (--kernel vmlinuz): Python models and fallbacks only; real kernel "
            "code that has no fallback is reported as unmodelled")
    entries = {m.name: {"name": m.name, "path": m.path} for m in modules}
    for m in modules:
        if m.name in verified:
            entries[m.name]["verify"] = verified[m.name].to_dict()
    cov = None
    if args.coverage:
        from ..emu.coverage import Coverage
        cov = Coverage(machine, modules)
    if args.image:
        from ..loader.debug_image import write_debug_image
        for m in modules:
            path = args.image
            if len(modules) > 1:
                stem, dot, ext = path.rpartition(".")
                path = f"{stem}-{m.name}.{ext}" if dot else f"{path}-{m.name}"
            try:
                write_debug_image(m, path)
            except OSError as e:
                raise EmulationError(f"--image: cannot write {path}: {e.strerror}") from None
            say(f"armload: wrote {path} ({m.name} at its load addresses, with its debug sections)")
    failed = False
    inits_ok = []
    for i, m in enumerate(modules):
        if params.get(id(m)):
            from ..emu.params import apply_params
            po = apply_params(machine, m, params[id(m)])
            entries[m.name]["params"] = po.to_dict()
            for note in po.notes:
                say(f"armload: {note}")
            if po.run is not None:
                _print_result(say, po.run)
            say(po.summary())
            if not po.ok:
                ok, failed = False, True
                break
        if args.gdb and m is modules[-1] and m.init_addr is not None:
            _serve_gdb(machine, m, args.gdb, say)
        res = machine.run_init(m)
        entries[m.name]["run"] = res.to_dict()
        _print_result(say, res)
        if not res.ok:
            ok = False
            failed = True
            break
        inits_ok.append(m)
    if not failed and calls:
        done = []
        for name, cargs in calls:
            words = callargs.place(machine, cargs)
            res = machine.call(name, words)
            after = callargs.read_back(machine, cargs)
            shown = ", ".join(a.spec if a.kind == "int" else f"{a.spec} @{a.addr:#x}" for a in cargs)
            rec = res.to_dict()
            rec["args"] = [a.to_dict(b) for a, b in zip(cargs, after)]
            done.append(rec)
            _print_result(say, res, show_value=True, label=f"{name}({shown})")
            for a, b in zip(cargs, after):
                if b is not None and a.kind == "buf":
                    say(f"{res.module}:   {a.spec} @{a.addr:#x} = {b.hex()}  '{callargs._printable(b)}'")
            if res.status != "returned":
                ok = False
                failed = True
                break
        entries[modules[-1].name]["calls"] = done
    if args.exit and not failed:
        for m in reversed(inits_ok):
            res = machine.run_exit(m)
            entries[m.name]["exit"] = res.to_dict()
            _print_result(say, res, void=True)
            if res.status not in ("returned", "no-function"):
                ok = False
                break
    if cov is not None:
        from ..emu.coverage import write_lcov
        reports = cov.report()
        try:
            write_lcov(reports, args.coverage)
        except OSError as e:
            raise EmulationError(f"--coverage: cannot write {args.coverage}: {e.strerror}") from None
        for r in reports:
            say(r.summary())
        say(f"armload: lcov tracefile {args.coverage} (genhtml {args.coverage} -o DIR renders it)")
        report["coverage"] = {"file": args.coverage, "modules": [r.to_dict() for r in reports]}
    for m in modules:
        if m.name in verified:
            say(verified[m.name].format())
    for note in machine.notes:
        say(f"armload: {note}")
    leaks = machine.leaks()
    if leaks:
        say(f"heap: {len(leaks)} allocation(s) still live: " +
            ", ".join(f"{a.kind}({a.size}) at {a.addr:#x} by {machine.symbolize(a.caller)}"
                      for a in leaks[:5]))
    report["ok"] = ok
    report["image"] = machine.image.path if machine.image is not None else None
    report["notes"] = machine.notes
    report["modules"] = [entries[m.name] for m in modules]
    report["heap_live"] = [{"addr": a.addr, "size": a.size, "kind": a.kind, "caller": machine.symbolize(a.caller)}
                           for a in leaks]
    if as_json:
        json.dump(report, out, indent=2)
        print(file=out)
    return 0 if ok else 1


def _print_result(say, res, *, show_value: bool = False, void: bool = False, label: str | None = None) -> None:
    if res.fault is not None:
        say(res.fault.format())
    if void and res.status == "returned":
        say(f"{res.module}: {res.function} returned")
    elif show_value and res.status == "returned":
        say(f"{res.module}: {label or res.function} returned {res.retval} ({res.retval & 0xFFFFFFFF:#x})")
    else:
        say(res.summary())
    say(f"{res.module}: {res.instructions:,} instructions, {res.sim_ns / 1e6:.3f} ms simulated")
    counts: dict[str, int] = {}
    for c in res.calls:
        key = f"{c.name} [{c.cls}]"
        counts[key] = counts.get(key, 0) + 1
    if counts:
        say(f"{res.module}: {len(res.calls)} kernel call(s): " +
            ", ".join(f"{n} x{k}" if k > 1 else n for n, k in counts.items()))
    for d in res.deferred:
        if d["kind"] == "stopped":
            say(f"{res.module}: deferred work stopped: {d['why']} ({d['pending']} pending)")
        else:
            say(f"{res.module}: deferred {d['kind']} {d['fn']}: {d['status']}"
                + (f" {d['retval']}" if d['retval'] is not None else "") + (f" ({d['note']})" if d.get('note') else ""))
    for r in res.registrations:
        extra = ", ".join(f"{k}={v:#x}" if isinstance(v, int) and k in ("addr", "fops", "probe") else f"{k}={v}"
                          for k, v in r.items() if k not in ("call",))
        say(f"{res.module}: registered {r['call']}: {extra}")


def _serve_gdb(machine, m, port: int, say) -> None:
    """udbserver: a GDB stub on the Unicorn CPU; it blocks at init's first instruction for gdb."""
    try:
        from udbserver import udbserver
    except ImportError:
        raise EmulationError("--gdb needs the udbserver package (pip install udbserver)") from None
    machine.map_module(m)
    machine.timeout = 0             # a debugger pauses for as long as it likes: no wall-clock safety net
    say(f"armload: gdb server on port {port}: stopped at init_module ({m.init_addr & ~1:#x}); "
        f"connect with gdb-multiarch -ex 'file IMAGE' -ex 'target remote :{port}'")
    try:
        udbserver(machine.uc, port, m.init_addr & ~1)
    except RuntimeError as e:
        raise EmulationError(f"--gdb: {e}") from None
