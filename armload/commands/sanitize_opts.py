"""`--sanitize LIST|none` for the commands that run modules in the booted kernel (run): the
sanitizers (armload/emu/sanitize) are on by default; any report fails the run (exit 1).

    san = attach(run, args)                 # after BootedRun(...), before the first load
    r = load(san, run, path, params, budget=...)
    ... after_unload(san, name)             # lock-held and leak checks after exit
    ok &= finish(san, say, as_json)         # prints the reports; False when there is one
"""
from __future__ import annotations


def add_args(p, default: str = "all", what: str = "on by default; a report fails the run") -> None:
    p.add_argument("--sanitize", default=default, metavar="LIST|none",
                   help=f"detectors inside the booted kernel ({what}): "
                        "heap (KASAN's out-of-bounds, use-after-free, double/invalid free), stack (DWARF-described "
                        "stack arrays), leak (kmemleak's scan after init and exit), locks (lockdep's: sleeping in "
                        "atomic context, locks held on return, bad unlock, circular dependencies); comma-separated, "
                        "all, or none")


def attach(run, args):
    from ..emu.sanitize import Sanitizer, parse_classes
    classes = parse_classes(getattr(args, "sanitize", "all"))
    return Sanitizer(run, classes) if classes else None


def load(san, run, path: str, params: str, **kw):
    return san.load(path, params, **kw) if san is not None else run.load(path, params, **kw)


def after_unload(san, name: str) -> None:
    if san is not None:
        from ..emu.sanitize.lifecycle import after_exit
        after_exit(san, name)


def finish(san, say, as_json: bool) -> tuple[bool, dict | None]:
    """(no report, the JSON section)."""
    if san is None:
        return True, None
    reps = san.formatted()
    for r in reps:
        for line in r.lines:
            say(line)
    by = {}
    for r in reps:
        by[r.kind] = by.get(r.kind, 0) + 1
    say(f"armload: sanitizers ({', '.join(sorted(san.classes))}): "
        + (f"{len(reps)} report(s): " + ", ".join(f"{k} {v}" for k, v in sorted(by.items())) if reps else "no report")
        + "".join(f"; {n}" for n in san.notes()))
    return not reps, {"classes": sorted(san.classes), "reports": [r.to_dict() for r in reps], "counts": san.counts,
                      "notes": san.notes()}
