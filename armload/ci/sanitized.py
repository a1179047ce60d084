"""`check --sanitize LIST`: the sanitizers (emu/sanitize) on the module under check, inside its
forked copy of the booted kernel (its dependencies load before, unwatched: their reports are
their own check's). A module with a report gets the outcome class `sanitizer` (ci/corpus.py
OUTCOMES) whatever its init returned, unless a harness class decided it; its reports go into the
record's init as {"classes", "reports": [Report.to_dict()], "notes"}."""
from __future__ import annotations

import re


def attach(run, classes):
    """A Sanitizer on `run` before the module loads, or None for no classes."""
    if not classes:
        return None
    from ..emu.sanitize import Sanitizer
    return Sanitizer(run, classes)


def collect(san) -> dict:
    reps = san.formatted()
    return {"classes": sorted(san.classes), "reports": [r.to_dict() for r in reps], "notes": san.notes()}


def reports(init: dict | None) -> list[dict]:
    return ((init or {}).get("sanitizer") or {}).get("reports") or []


def reason(init: dict) -> tuple[str, str | None]:
    """(the record's reason, where) for the class: the first report's title and its file:line."""
    reps = reports(init)
    first = reps[0]
    more = f"; {len(reps) - 1} more report(s)" if len(reps) > 1 else ""
    line = first.get("line") or None
    return first["title"] + (f" ({line})" if line else "") + more, line or first.get("function") or None


def baseline_detail(init: dict) -> str:
    """The baseline's short detail: the report kinds and the first report's function without offsets
    (stable across trees and machines): `sanitizer slab-out-of-bounds in fill [sanbugs]`."""
    reps = reports(init)
    kinds = ",".join(sorted({r["kind"] for r in reps}))
    fn = re.sub(r"\+0x[0-9a-f]+(/0x[0-9a-f]+)?", "", reps[0].get("function") or "?")
    return f"{kinds} in {fn}"
