"""`armload run` inside the booted Debian kernel: the only way module code runs.

The kernel boots once (cached in .cache/boot); each run restores it copy-on-write, and the kernel's
own load_module loads the modules in order and runs their init through do_init_module. armload's
loader loads the same files at the same addresses and is compared with the kernel's image (see
armload/emu/booted/modrun.py). --probe registers the kernel's own kprobes, kretprobes, ftrace
and function_graph (commands/probe_booted.py); --trace, --coverage, --gdb, --image and the oops
decoded to file:line are commands/observe_booted.py's; --call calls module functions from pid 1's
kernel context (emu/booted/call.py). File operations (--open, --cat, --echo ...:
commands/devio_booted.py) are real system calls after the inits and the calls. Without a kernel
image nothing runs: run says how to get one; Thumb-2 modules are refused (kernel/isa.py).
"""
from __future__ import annotations

import json
import sys

from ..errors import ArmloadError, EmulationError
from ..kernel.debian import image_under

NO_IMAGE = ("run executes module code inside the booted Debian kernel, so it needs the kernel image: "
            f"`make test-inputs` fetches it, then add --kernel {image_under('.cache')} "
            "(load, verify, explain, disasm and report work without it)")


def has_image(paths) -> bool:
    from ..kernel.provider import _looks_like_image
    for p in paths or ():
        try:
            with open(p, "rb") as f:
                if _looks_like_image(f.read(0x28)):
                    return True
        except OSError:
            continue
    return False


def refuse_unsupported(args) -> None:
    """Everything run cannot do inside the booted kernel, refused before anything runs."""
    if not has_image(args.kernel):
        raise ArmloadError(NO_IMAGE)
    from ..probes.patch import parse_spec
    for p in args.probes or ():
        parse_spec(p)                  # fentry/fexit: the kernel's -ENOTSUPP, in probes/patch.py's words
    if args.budget <= 0:
        raise EmulationError("--budget must be positive")
    if args.timeout is not None and args.timeout < 0:
        raise EmulationError("--timeout must not be negative")


def parse_calls(args) -> list[tuple[str, list[str], list]]:
    """(name, the arguments as written, the arguments as call.parse_arg makes them) per --call."""
    from ..emu.booted.call import parse_arg
    return [(c[0], list(c[1:]), [parse_arg(a) for a in c[1:]]) for c in args.calls]


def check_calls(session, paths, calls) -> None:
    """Every --call names a function of one of the modules and, where DWARF says how many
    parameters it has, passes that many: refused before any module code runs (armload's own
    loader reads the files; the kernel has not run yet)."""
    if not calls:
        return
    from ..emu.booted.call import find_function
    from ..emu.debuginfo import line_table
    for p in paths:
        session.load(p)
    for name, specs, _ in calls:
        try:
            owner, _ = find_function(session, name)
        except ArmloadError as e:
            raise EmulationError(f"--{e}") from None
        fn = next((f for f in line_table(owner).functions if f.name == name), None)
        if fn is not None and fn.params is not None and fn.params != len(specs):
            raise EmulationError(f"--call {name}: {name} takes {fn.params} argument{'s' if fn.params != 1 else ''} "
                                 f"(DWARF of {owner.name}), {len(specs)} given")


def cmd_run_booted(args) -> int:
    from ..emu.booted.hostile import sentence, settle_line, stop_class
    from ..emu.booted.modrun import BootedRun, package_tree
    from .load import session_from_args
    from ..loader.elf import read_object
    from .modargs import assign_params, split_modules
    from .observe_booted import Observer, say_decoded
    from ..kernel.isa import refuse_thumb2_modules
    refuse_unsupported(args)
    calls = parse_calls(args)
    session = session_from_args(args)
    pairs = split_modules(args.modules)
    objs = [read_object(p) for p, _ in pairs]
    refuse_thumb2_modules(objs, session.kernel.image_path)
    check_calls(session, [p for p, _ in pairs], calls)
    names = [o.name for o in objs]
    per = assign_params(names, pairs, args.params)
    timeout = args.timeout or None
    as_json = args.json
    from .devio_booted import check_devio
    check_devio(args.devio)

    def say(text: str = "") -> None:
        if not as_json:
            print(text, flush=True)

    image = session.kernel.image_path
    tree = args.tree or package_tree(image)
    run = BootedRun(image, session.kernel, session.config, tree=tree)
    say(f"armload: inside the booted Debian kernel ({run.bk.meta.get('boot_insns', 0):,} boot instructions, "
        f"restored from {run.bk.directory}); the kernel's own load_module loads each module and runs its init")
    from . import sanitize_opts
    san = sanitize_opts.attach(run, args, say)
    probes = None
    if args.probes:
        from .probe_booted import BootedProbes
        probes = BootedProbes(run, args.probes)
        say("armload: probes are the kernel's own (register_kprobe, register_kretprobe, register_ftrace_function, "
            "register_ftrace_graph); a module's are registered when it is formed, before its init")

    observer = (Observer(run, args, say) if args.coverage or args.trace or args.gdb is not None or args.image
                else None)

    def console(lines, start):
        if observer is not None:
            lines = observer.interleave(lines, start, probes)
        elif probes:
            lines = probes.interleave(lines, start)
        for line in lines:
            say(line)

    results, ok = [], True
    for (path, _), params in zip(pairs, per):
        start = len(run.bk.console)
        if observer is not None:
            observer.before(path, last=path == pairs[-1][0])
        r = sanitize_opts.load(san, run, path, params, budget=args.budget, timeout=timeout)
        if observer is not None:
            observer.after(r)
        results.append(r)
        console(r.console, start)
        say_decoded(say, r.decoded, session.kernel.vmlinux_debug)       # filled by BootedRun.load
        say(_verdict(r))
        ok &= r.ok and r.loader.agrees and (r.loader.identical or (r.status == "refused" and bool(r.loader.refusal)))
        if not r.ok:
            break
    for q in run.requests:
        mods = ", ".join(f"{m['module']} ({m['ret']})" for m in q["modules"]) or q.get("note", "nothing")
        say(f"armload: request_module({q['request']}) served as /sbin/modprobe would: {mods}; exit status "
            f"{q['status'] >> 8}")
    verified = _verify(args, run, say) if ok else {}
    ok &= all(v["ok"] for v in verified.values())
    done = []
    if ok and calls:
        for name, specs, cargs in calls:
            start = len(run.bk.console)
            c = run.call(name, *cargs, budget=args.budget, timeout=timeout)
            done.append(c)
            console(c.console, start)
            say_decoded(say, c.decoded, session.kernel.vmlinux_debug)       # filled by BootedRun.call
            say(_call_line(c, specs, cargs))
            if c.status != "returned":
                ok = False
                break
    settled = None
    if ok and args.settle_ms:
        start = len(run.bk.console)
        settled = run.settle(args.settle_ms * 1_000_000)
        console(settled["console"], start)
        say(settle_line(settled))
    probe_report = None
    if probes:
        for line in probes.summary():
            say(line)
        probe_report = probes.to_dict()
        ok &= probes.ok
    devio = None
    if ok and args.devio:
        from .devio_booted import run_devio
        came_back, devio = run_devio(run, args.devio, say, session.kernel.vmlinux_debug)
        ok &= came_back
    elif args.devio:
        say("armload: the file operations were not run (a module did not load, or its probes failed)")
    unloaded = []
    if ok and args.exit:
        for r in reversed(results):
            start = len(run.bk.console)
            ret, lines = run.unload(r.name)
            sanitize_opts.after_unload(san, r.name)
            console(lines, start)
            say(f"{r.name}: delete_module returned {ret}" if ret is not None else
                sentence(r.name, "exit (delete_module)", stop_class(run.exit_stopped) or "budget", run.exit_stopped))
            unloaded.append({"module": r.name, "ret": ret, "console": lines,
                             **({"stopped": run.exit_stopped} if ret is None else {})})
            ok &= ret == 0
    observed = observer.finish(as_json) if observer is not None else {}
    clean, sanitized = sanitize_opts.finish(san, say, as_json)
    ok &= clean
    if as_json:
        json.dump({**observed, "ok": ok, "runtime": "booted", "sanitize": sanitized, "kernel": session.kernel.describe(),
                   "boot": run.bk.meta, "modules": [r.to_dict() for r in results],
                   "calls": [c.to_dict() for c in done], "verify": verified,
                   "settled": settled, "devio": devio, "unloaded": unloaded, "request_module": run.requests,
                   "probes": dict(probe_report, hits=probes.all_hits()) if probes else None,
                   "tree": tree}, sys.stdout, indent=2)
        print()
    return 0 if ok else 1


def _verify(args, run, say) -> dict:
    """Every branch of the loaded modules reaches its target (skipped with --no-verify)."""
    if args.no_verify:
        say("armload: branch verification skipped (--no-verify)")
        return {}
    from ..loader.verify import verify_module
    out = {}
    for m in run.session.modules:
        v = verify_module(m, run.session.kernel)
        say(v.format())
        out[m.name] = v.to_dict()
    return out


def _call_line(c, specs, cargs) -> str:
    from ..emu.booted.call import Buffer
    head = f"{c.name}: {c.function}({', '.join(specs)})"
    if c.status == "returned":
        line = f"{head} returned {c.ret} ({c.ret & 0xFFFFFFFF:#x})"
    elif c.status in ("oops", "panic"):
        line = f"{head}: {c.status} (the kernel's own report above)"
    else:
        line = f"{head}: {c.status}: {c.stopped}"
    line += f"; {c.instructions:,} instructions"
    for spec, a, rec in zip(specs, cargs, c.args):
        if isinstance(a, Buffer) and c.status == "returned":
            b = a.bytes
            line += f"\n{c.name}:   {spec} @{rec['addr']:#x} = {b.hex()}  '{_printable(b)}'"
    return line


def _printable(b: bytes) -> str:
    return "".join(chr(x) if 32 <= x < 127 else "." for x in b)


def _verdict(r) -> str:
    from ..emu.booted.hostile import SENTENCES, sentence
    c = r.loader
    if r.status == "refused":
        head = f"{r.name}: load_module refused it: {r.ret}"
    elif r.status == "returned":
        head = f"{r.name}: init returned {r.ret}"
    elif r.status == "budget":
        head = f"{r.name}: stopped: {r.stopped}"
    elif r.status in SENTENCES:
        head = sentence(r.name, "init", r.status, r.stopped)
    else:
        head = f"{r.name}: {r.status} in init (the kernel's own report above)"
    head += f"; {r.instructions:,} instructions"
    if r.status == "refused" and c.agrees and not c.refusal:
        loader = ("refused after loading (parameters, sysfs or a notifier); armload's image up to there "
                  + ("is identical to the kernel's" if c.identical else f"DIFFERS in {c.differences} word(s)"))
    elif r.status == "refused":
        loader = "armload refuses it the same way" if c.agrees else f"armload DISAGREES: {c.refusal or 'it accepts it'}"
    elif not c.agrees:
        loader = f"armload's loader refuses it: {c.refusal}"
    elif c.identical:
        loader = f"armload's image is identical to the kernel's ({c.compared:,} bytes, struct module aside)"
    else:
        loader = (f"armload's image DIFFERS from the kernel's in {c.differences} word(s): "
                  + ", ".join(f"{k} {v}" for k, v in sorted(c.by_section.items())))
    return f"{head}\n{r.name}: {loader}"
