"""`armload run M --fail-sweep`: init again with the n-th of the module's allocations failing, for
each n the unfailed run reaches (emu/sanitize/faultsweep.py); the allocation sites whose failure
oopses, gives a sanitizer report (a leak on the error path) or returns success are listed and
fail the run (exit 1)."""
from __future__ import annotations

import json
import sys

from ..errors import ArmloadError

# run's options that do something else than the sweep: refused with it
_OTHER = (("calls", "--call"), ("exit", "--exit"), ("image", "--image"), ("coverage", "--coverage"),
          ("gdb", "--gdb"), ("trace", "--trace"), ("probes", "--probe"), ("devio", "--devio"))


def cmd_fail_sweep(args) -> int:
    from ..emu.booted.modrun import BootedRun, package_tree
    from ..emu.sanitize import parse_classes
    from ..emu.sanitize.faultsweep import VERDICTS, sweep
    from ..kernel.isa import refuse_thumb2_modules
    from ..loader.elf import read_object
    from .load import session_from_args
    from .modargs import assign_params, split_modules
    used = [flag for attr, flag in _OTHER if getattr(args, attr, None) not in (None, False, [], 0)
            or attr == "gdb" and getattr(args, attr, None) is not None]
    if used:
        raise ArmloadError(f"--fail-sweep runs init only: {', '.join(used)} cannot be combined with it")
    classes = parse_classes(args.sanitize)
    session = session_from_args(args)
    pairs = split_modules(args.modules)
    objs = [read_object(p) for p, _ in pairs]
    refuse_thumb2_modules(objs, session.kernel.image_path)
    per = assign_params([o.name for o in objs], pairs, args.params)
    image = session.kernel.image_path
    tree = args.tree or package_tree(image)
    say = (lambda t="": None) if args.json else (lambda t="": print(t, flush=True))

    def progress(n, total):
        if not args.json and sys.stderr.isatty():
            print(f"\rfail-sweep: {n}/{total}", end="", file=sys.stderr, flush=True)
    deps = [(p, ps) for (p, _), ps in zip(pairs[:-1], per[:-1])]
    d = sweep(lambda: BootedRun(image, session.kernel, session.config, tree=tree), pairs[-1][0], per[-1], deps,
              classes, budget=args.budget, progress=progress)
    if not args.json and sys.stderr.isatty():
        print(file=sys.stderr)
    say(f"armload: fault sweep of {d['module']}'s init: {d['allocations']} allocation(s) reached without a failure "
        f"({d['clean']['why']}); each failed in turn (fail_nth 1..{d['allocations']}) in a fresh copy of the booted "
        f"kernel, sanitizers {', '.join(classes) or 'off'}")
    for a in d["attempts"]:
        say(f"  {a['nth']:>3}  {a['verdict']:<8} {a['site']}")
        if a["verdict"] != "handled":
            say(f"       {a['why']}")
    if d["clean"]["reports"]:
        say(f"armload: the unfailed init has {len(d['clean']['reports'])} sanitizer report(s) of its own "
            f"(armload run without --fail-sweep prints them)")
    bad = d["bad"]
    say(f"armload: fault sweep: {len(bad)} of {d['allocations']} allocation failure(s) mishandled"
        + (": " + ", ".join(f"{v} {sum(1 for a in bad if a['verdict'] == v)}" for v in VERDICTS
                            if any(a["verdict"] == v for a in bad)) if bad else ""))
    ok = not bad and not d["clean"]["reports"]
    if args.json:
        json.dump({"ok": ok, "runtime": "booted", "fail_sweep": d, "sanitize": list(classes),
                   "verdicts": VERDICTS}, sys.stdout, indent=2)
        print()
    return 0 if ok else 1
