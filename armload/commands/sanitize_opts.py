"""`--sanitize LIST|none` for the commands that run modules in the booted kernel (run): the
sanitizers (armload/emu/sanitize) are on by default; any report fails the run (exit 1).

    san = attach(run, args, say)            # after BootedRun(...), before the first load
    r = load(san, run, path, params, budget=...)
    ... after_unload(san, name)             # lock-held and leak checks after exit
    ok &= finish(san, say, as_json)         # prints the reports; False when there is one
"""
from __future__ import annotations


def add_args(p, default: str | None = None, what: str = "on by default; a report fails the run") -> None:
    p.add_argument("--sanitize", default=default, metavar="LIST|none",
                   help=f"detectors inside the booted kernel ({what}): "
                        "heap (KASAN's out-of-bounds, use-after-free, double/invalid free), stack (DWARF-described "
                        "stack arrays), leak (kmemleak's scan after init and exit), locks (lockdep's: sleeping in "
                        "atomic context, locks held on return, bad unlock, circular dependencies); comma-separated, "
                        "all, or none. By default all, where the kernel allows: on a kernel they cannot watch "
                        "(entry points not 6.1's or 6.12's, or 6.12 without its config) the run goes on "
                        "without them and says so; asked for by name there, it is an error")


class Off:
    """The default sanitizers on a kernel they cannot watch: the run goes on, and says so."""

    def __init__(self, reason: str):
        self.reason = reason


def attach(run, args, say=print):
    """A Sanitizer, None (--sanitize none) or Off (the default, on a kernel they cannot watch: said
    here and in the JSON). `--sanitize LIST` on such a kernel raises SanitizerUnsupported."""
    from ..emu.sanitize import Sanitizer, SanitizerUnsupported, parse_classes
    asked = getattr(args, "sanitize", None)
    classes = parse_classes(asked)
    if not classes:
        return None
    try:
        return Sanitizer(run, classes)
    except SanitizerUnsupported as e:
        if asked is not None:
            raise
        say(f"armload: not sanitized: {e}")
        return Off(str(e))


def load(san, run, path: str, params: str, **kw):
    return san.load(path, params, **kw) if _on(san) else run.load(path, params, **kw)


def _on(san) -> bool:
    return san is not None and not isinstance(san, Off)


def after_unload(san, name: str) -> None:
    if _on(san):
        from ..emu.sanitize.lifecycle import after_exit
        after_exit(san, name)


def finish(san, say, as_json: bool) -> tuple[bool, dict | None]:
    """(no report, the JSON section)."""
    if san is None:
        return True, None
    if isinstance(san, Off):
        return True, {"classes": [], "reports": [], "unsupported": san.reason}
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
