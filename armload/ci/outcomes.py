"""Every checked module ends in exactly one outcome class (the `OUTCOMES` table): its own load,
verify or init result, or `dependency-failed`. The classes, the init statuses they come from,
and the summaries over a run's records (success ratio, per-stage results)."""
from __future__ import annotations

from collections import Counter

from . import sanitized

# Outcome classes, one row each: class -> (kind, meaning). Kind "ok" is success, "module" is the
# module's own behaviour, "harness" means armload could not decide (not counted as behaviour,
# so not in the success ratio). A new class is one row here (and, for init, one in INIT_STATUS).
OUTCOMES = {
    "ok":                ("ok", "loaded, verified, init returned 0 (or has none, or was not run)"),
    "load":              ("module", "the loader refused it (or a dependency is missing from the tree or cyclic)"),
    "verify":            ("module", "a branch site or PLT entry does not reach its target"),
    "dependency-failed": ("module", "a module it depends on failed to load or its init did not succeed"),
    "fault":             ("module", "init faulted"),
    "budget":            ("module", "init ran out of its instruction / simulated-time budget"),
    "error":             ("module", "init returned a negative errno"),
    "panic":             ("module", "the kernel panicked (its own report)"),
    "soft-lockup":       ("module", "init spun until the kernel's soft-lockup watchdog reported it"),
    "hung-task":         ("module", "init slept until the kernel's hung-task detector reported it"),
    "reboot":            ("module", "init restarted, halted or powered off the machine"),
    "hang":              ("module", "init spins with interrupts off: the kernel would hang silently (armload's stop)"),
    "sanitizer":         ("module", "a sanitizer (check --sanitize) reported a KASAN-, kmemleak- or lockdep-class bug "
                                    "of the module, whatever init returned"),
    "loader-differs":    ("harness", "armload's loaded image differs from the booted kernel's load_module, "
                                     "or one refused what the other loaded (a bug in armload)"),
    "timeout":           ("harness", "the wall-clock safety net stopped init (machine load, not the module)"),
    "internal":          ("harness", "armload could not run a stage (a bug in armload)"),
}
DEFAULT_FAIL_ON = ("load", "verify", "fault", "panic", "soft-lockup", "hung-task", "reboot", "hang", "sanitizer",
                   "loader-differs", "timeout", "internal")

# The booted kernel's init status (ci.booted.init_data) -> outcome class. "returned" with a negative value is
# "error" (do_init_module fails on ret < 0 and only warns on ret > 0). A status not listed here
# is "internal": never a success by default.
INIT_STATUS = {
    "returned": "ok",
    "budget": "budget",
    "timeout": "timeout",
    "refused": "error",              # the kernel's load_module returned -errno before init (parse_args too)
    "oops": "fault",                 # the kernel oopsed or panicked (its own report)
    "not-run": "internal",
    # booted runtime, the ends of hostile modules (emu/booted/hostile.py)
    "panic": "panic", "soft-lockup": "soft-lockup", "hung-task": "hung-task", "hang": "hang",
    "restart": "reboot", "halt": "reboot", "power-off": "reboot", "time-budget": "budget",
}
HOSTILE_STATUSES = ("panic", "soft-lockup", "hung-task", "hang", "restart", "halt", "power-off", "time-budget")


def labelled(label: str, text: str | None) -> str:
    """'label: text', without saying the label twice when the text already starts with it."""
    if not text:
        return label
    return text if text.startswith(label + ":") or text.startswith(label + " ") else f"{label}: {text}"


def unlabelled(label: str, text: str | None) -> str | None:
    """The text without a leading 'label: ' (for a sentence that names the label itself)."""
    return text[len(label) + 2:] if text and text.startswith(label + ": ") else text


def init_class(init: dict | None) -> str | None:
    """The outcome class of one init run (a record's "init" dict); None when init was not run."""
    if init is None:
        return None
    st = init.get("status")
    cls = INIT_STATUS.get(st, "internal")
    if st == "returned" and (init.get("retval") or 0) < 0:
        cls = "error"
    if OUTCOMES[cls][0] != "harness" and sanitized.reports(init):
        cls = "sanitizer"                    # the report says more than init's own end (ci/sanitized.py)
    return cls


def apply_init(rec: dict, init: dict) -> None:
    """A loaded, verified module's record takes its init's class, reason and place (check's worker,
    and the shards' merge when it undoes a dependency failure)."""
    cls = init_class(init)
    if cls == "sanitizer":
        why, at = sanitized.reason(init)
        rec.update(outcome=cls, stage="init", reason=why, where=at)
    elif cls != "ok" or init.get("reason"):
        rec.update(outcome=cls, stage="init", reason=init.get("reason"), where=init.get("where"))


def parse_fail_on(text: str) -> tuple[str, ...]:
    """'load,verify,fault' -> classes; 'all' and 'none' as shorthands. ValueError on a bad name."""
    want = [w.strip() for w in text.split(",") if w.strip()]
    if want == ["none"]:
        return ()
    if want == ["all"]:
        return tuple(c for c, (kind, _) in OUTCOMES.items() if kind != "ok")
    bad = [w for w in want if w not in OUTCOMES or w == "ok"]
    if bad or not want:
        raise ValueError(f"unknown outcome class {', '.join(bad) or repr(text)} (use "
                         f"{', '.join(c for c in OUTCOMES if c != 'ok')}, all or none)")
    return tuple(c for c in OUTCOMES if c in want)



def loader_differs(init: dict | None) -> tuple[str, str | None] | None:
    """(reason, where) when the booted comparison found armload's loader unlike the kernel's
    (modrun.LoaderCheck as a dict), else None."""
    lvk = (init or {}).get("loader_vs_kernel")
    if not (init or {}).get("loader_differs") or not lvk:
        return None
    if lvk.get("refusal") and not lvk.get("agrees"):
        kernel = (f"refused it with {init.get('retval')}" if init.get("status") == "refused"
                  else "loaded it")
        return f"armload's loader refused it where the kernel's load_module {kernel}: {first_line(lvk['refusal'])}", None
    if not lvk.get("agrees"):
        return "armload's loader accepted what the kernel's load_module refused", None
    secs = ", ".join(f"{k}: {v}" for k, v in sorted(lvk.get("by_section", {}).items()))
    first = (lvk.get("listed") or [{}])[0]
    where = (f"{first['section']} {first['addr']:#x}: armload {first['armload']}, kernel {first['kernel']}"
             if first.get("addr") is not None else None)
    return f"armload's image differs from the kernel's in {lvk.get('differences')} word(s) ({secs})", where


def first_line(s: str | None) -> str | None:
    return None if s is None else s.split("\n", 1)[0]


def dependency_failure(dr: dict) -> str | None:
    """Why a dependency's record means its dependents cannot have worked, or None."""
    if dr["outcome"] == "dependency-failed":
        return dr["reason"]
    if dr["outcome"] in ("load", "internal") and dr["stage"] in ("order", "load"):
        return f"failed to load: {dr['reason']}"
    cls = init_class(dr.get("init"))
    if cls not in (None, "ok"):
        return f"init {labelled(cls, dr['init'].get('reason'))}"
    return None


def success(outcomes: dict) -> dict:
    """The one success ratio: modules whose outcome is ok over modules whose outcome was
    decided (all but the harness classes, timeout and internal)."""
    decided = sum(n for c, n in outcomes.items() if OUTCOMES[c][0] != "harness")
    ok = outcomes.get("ok", 0)
    return {"ok": ok, "decided": decided, "ratio": round(ok / decided, 4) if decided else None}


def summarize(records: list[dict]) -> dict:
    c = Counter()
    outcomes = Counter(r["outcome"] for r in records)
    for r in records:
        c["modules"] += 1
        if "relocations" not in r:           # never loaded
            continue
        c["loaded"] += 1
        c["relocations"] += r.get("relocations", 0)
        v = r.get("verify")
        if v is not None:
            c["verified" if v.get("ok") else "verify_failed"] += 1
            c["branches"] += v.get("branches", 0)
            c["branches_verified"] += v.get("branches_verified", 0)
            c["plt_entries"] += v.get("plt_entries", 0)
            c["plt_verified"] += v.get("plt_verified", 0)
        i = r.get("init")
        if i is not None:
            c["init_run"] += 1
            c["init_" + (init_class(i) or "none").replace("-", "_")] += 1
    out = dict(sorted(c.items()))
    out["outcomes"] = {k: outcomes.get(k, 0) for k in OUTCOMES}
    out["success"] = success(out["outcomes"])
    return out


def failed_modules(records: list[dict], fail_on) -> dict[str, int]:
    """Outcome class -> modules in it, for the classes in `fail_on` that occur."""
    c = Counter(r["outcome"] for r in records if r["outcome"] in fail_on)
    return {k: c[k] for k in OUTCOMES if c.get(k)}


def stage_results(rec: dict, options) -> dict[str, tuple[str | None, str | None]]:
    """Per stage (load, verify, init): (outcome class or None when not run, reason), for a run
    with `options` (worker.CheckOptions). The
    record's own outcome is attributed to the stage that decided it; dependency-failed goes to
    load when the module was never loaded, else to init."""
    out: dict[str, tuple[str | None, str | None]] = {}
    loaded = "relocations" in rec
    o, why = rec["outcome"], rec.get("reason")
    if not loaded:
        out["load"] = (o, why)
        skip = "not run: the module did not load"
        return {**out, "verify": (None, skip), "init": (None, skip)}
    # armload's image against the kernel's (booted): a verdict on armload's load stage
    out["load"] = (o, why) if rec.get("stage") == "compare" else ("ok", None)
    v = rec.get("verify")
    if v is None:
        out["verify"] = (None, "not run (--no-verify)")
    elif rec["stage"] == "verify":
        out["verify"] = (o, why)
    else:
        out["verify"] = ("ok" if v.get("ok") else "verify", None)
    i = rec.get("init")
    if o == "dependency-failed":
        out["init"] = (o, why)
    elif i is None:
        out["init"] = (None, f"not run ({options.no_init})" if not options.emulate else "not run")
    else:
        cls = init_class(i)
        out["init"] = (cls, sanitized.reason(i)[0] if cls == "sanitizer" else i.get("reason"))
    return out


def err_dict(e) -> dict:
    """An exception as a record's JSON-ready "error" (ArmloadError's own fields, else InternalError)."""
    from ..errors import ArmloadError
    if isinstance(e, ArmloadError):
        d = e.to_dict()
    else:
        d = {"error": "InternalError", "message": f"internal error: {type(e).__name__}: {e}", "errno": None}
    d["message"] = str(d.get("message", ""))
    return {k: v for k, v in d.items() if isinstance(v, (str, int, float, bool, type(None)))}


def mark_dependency_failed(rec: dict, plan, dep: str, why: str, *, where: str | None = None,
                           outcome: str | None = None) -> None:
    """`rec` is dependency-failed because of `dep` (of `plan`, a modtree.Plan)."""
    info = plan.modules.get(dep)
    rec.update(outcome="dependency-failed", stage="dependency",
               reason=f"dependency {dep} ({info.rel if info else 'not in the tree'}) {why}", where=where,
               dependency={"name": dep, "module": info.rel if info else None, "outcome": outcome})
