"""`armload run` inside the booted Debian kernel (the default when --kernel names a vmlinuz).

The kernel boots once (cached in .cache/boot); each run restores it copy-on-write, and the kernel's
own load_module loads the modules in order and runs their init through do_init_module. armload's
loader loads the same files at the same addresses and is compared with the kernel's image (see
armload/emu/booted/modrun.py). --probe registers the kernel's own kprobes, kretprobes, ftrace
and function_graph (commands/probe_booted.py); --trace, --coverage, --gdb, --image and the oops
decoded to file:line are commands/observe_booted.py's. Options that need armload's Python-model
runtime (calls into the module, armload's fentry/fexit trampolines, a chosen placement) select
that runtime instead, and the run says so. File operations (--open, --cat, --echo
...: commands/devio_booted.py) are real system calls after the inits.
"""
from __future__ import annotations

import json
import sys

from ..errors import ArmloadError

# option -> why it needs the model runtime; each is checked on the parsed args
MODEL_ONLY = {
    "calls": "--call", "call_args": "--arg",
}


def _has_image(paths) -> bool:
    from ..kernel.provider import _looks_like_image
    for p in paths or ():
        try:
            with open(p, "rb") as f:
                if _looks_like_image(f.read(0x28)):
                    return True
        except OSError:
            continue
    return False


def choose_runtime(args) -> tuple[str, str]:
    """("booted" | "models", why). --runtime decides when given; else booted with an image."""
    model_opts = [flag for attr, flag in MODEL_ONLY.items() if getattr(args, attr, None)]
    extension = [p for p in getattr(args, "probes", None) or () if p.split(":")[0] in ("fentry", "fexit")]
    if extension:
        model_opts.append(f"--probe {extension[0]} (armload's own trampoline: 32-bit ARM 6.1 has none)")
    if args.unmodelled != "fail":
        model_opts.append("--unmodelled")
    if args.placement != "window":
        model_opts.append("--placement (the booted kernel's module_alloc decides)")
    if args.thumb2:
        model_opts.append("--thumb2")
    image = _has_image(args.kernel)
    if args.runtime == "booted":
        if not image:
            raise ArmloadError("--runtime booted needs the kernel image (--kernel vmlinuz): it is the kernel that boots")
        if model_opts:
            raise ArmloadError(f"{', '.join(model_opts)}: not available inside the booted kernel yet; "
                               f"use --runtime models for armload's Python-model runtime")
        return "booted", ""
    if args.runtime == "models":
        return "models", "--runtime models"
    if not image:
        return "models", ""
    if model_opts:
        return "models", f"{', '.join(model_opts)} run on armload's Python-model runtime"
    return "booted", ""


def cmd_run_booted(args) -> int:
    from ..emu.booted.hostile import sentence, settle_line, stop_class
    from ..emu.booted.modrun import BootedRun, package_tree
    from .load import session_from_args
    from ..loader.elf import read_object
    from .modargs import assign_params, split_modules
    from .observe_booted import Observer, say_decoded
    session = session_from_args(args)
    pairs = split_modules(args.modules)
    names = [read_object(p).name for p, _ in pairs]
    per = assign_params(names, pairs, args.params)
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
    san = sanitize_opts.attach(run, args)
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
        r = sanitize_opts.load(san, run, path, " ".join(params), budget=args.budget)
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
                   "settled": settled, "devio": devio, "unloaded": unloaded, "request_module": run.requests,
                   "probes": dict(probe_report, hits=probes.all_hits()) if probes else None,
                   "tree": tree}, sys.stdout, indent=2)
        print()
    return 0 if ok else 1


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
