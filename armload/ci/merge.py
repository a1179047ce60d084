"""Shards of one `armload check` joined into the report a whole run gives.

`check --shard K/N` checks every N-th module of its selection and puts in its JSON what a merge
needs and a shard alone does not know: the selection in plan order, and for each module its
dependency closure and the paths of its dependencies (`shard_info`). The one rule that looks
across modules, dependency-failed ("a dependency ... failed to load or its init did not succeed
in the same run", corpus.apply_dependencies), is undone on the shards' records and applied again
over all of them (`merge`), so the merged JSON is the whole run's, byte for byte (timing aside).
"""
from __future__ import annotations

from collections import OrderedDict

from ..errors import ArmloadError
from .corpus import apply_dependencies
from .outcomes import apply_init, failed_modules, summarize
from ..kernel.modtree import ModuleInfo, Plan

# The parts of a shard's JSON that every shard of one run has in common.
SAME = ("tree", "kernel", "config", "options", "duplicates")


def shard_info(plan: Plan, k: int, n: int, selection: list[str]) -> dict:
    """What `merge` needs from shard K of N of `selection` (module names in plan order)."""
    need = set(selection)
    for m in selection:
        need.update(plan.closure.get(m, []))
    return {"index": k, "count": n,
            "selection": [plan.modules[m].rel for m in selection],
            "closure": {m: plan.closure.get(m, []) for m in selection},
            "paths": {m: plan.modules[m].rel for m in sorted(need)}}


def _undo_dependencies(rec: dict) -> None:
    """A record as check_one left it, before apply_dependencies marked it: only a loaded module
    whose result came from its init is ever marked so (its own load or verify failure stays)."""
    if rec["outcome"] != "dependency-failed" or "relocations" not in rec:
        return
    if (rec.get("verify") or {}).get("ok") is False:
        return
    rec.pop("dependency", None)
    rec.update(outcome="ok", stage=None, reason=None, where=None)
    init = rec.get("init")
    if init is not None:
        apply_init(rec, init)


def merge(docs: list[dict], names: list[str] | None = None) -> OrderedDict:
    """One `check --json` document from the JSON of shards 1..N of one run (any order).
    ArmloadError when they are not the shards of one run, or one is missing."""
    if not docs:
        raise ArmloadError("check-merge: no shard given")
    names = names or [f"shard {i + 1}" for i in range(len(docs))]
    for nm, d in zip(names, docs):
        if not isinstance(d, dict) or not isinstance(d.get("shard"), dict) or "modules" not in d:
            raise ArmloadError(f"check-merge: {nm}: not the --json output of `armload check --shard K/N`")
    first = docs[0]
    count = first["shard"]["count"]
    for nm, d in zip(names, docs):
        for k in SAME:
            if d.get(k) != first.get(k):
                raise ArmloadError(f"check-merge: {nm}: its {k!r} differs from {names[0]}'s: not shards of one run")
        if d["shard"]["count"] != count or d["shard"]["selection"] != first["shard"]["selection"]:
            raise ArmloadError(f"check-merge: {nm}: a shard of another selection (count or modules differ)")
    have = sorted(d["shard"]["index"] for d in docs)
    if have != list(range(1, count + 1)):
        missing = sorted(set(range(1, count + 1)) - set(have))
        dup = sorted({i for i in have if have.count(i) > 1})
        raise ArmloadError(f"check-merge: shards of {count}: " + "; ".join(
            x for x in (f"missing {', '.join(map(str, missing))}" if missing else "",
                        f"given twice {', '.join(map(str, dup))}" if dup else "") if x))
    by_rel: dict[str, dict] = {}
    closure: dict[str, list[str]] = {}
    paths: dict[str, str] = {}
    for d in docs:
        closure.update(d["shard"]["closure"])
        paths.update(d["shard"]["paths"])
        for r in d["modules"]:
            by_rel[r["module"]] = r
    order = first["shard"]["selection"]
    if set(order) != set(by_rel):
        raise ArmloadError("check-merge: the shards' modules are not their selection")
    recs = [by_rel[m] for m in order]
    for r in recs:
        _undo_dependencies(r)
    # A plan with what apply_dependencies reads: the order, each closure, each dependency's path.
    mods = {n: ModuleInfo(rel, n, [], None, 0, rel=rel) for n, rel in paths.items()}
    by_name = {r["name"]: r for r in recs}
    plan = Plan([r["name"] for r in recs], mods, closure)
    apply_dependencies(plan, by_name)
    fail_on = tuple(first["options"]["fail_on"])
    out = OrderedDict()
    for k, v in first.items():
        if k in ("shard", "timing", "baseline"):
            continue
        out[k] = v
    out["summary"] = summarize(recs)
    out["failed"] = failed_modules(recs, fail_on)
    sel = first.get("selection") or {}
    filters = [f for f in sel.get("filters", [])]
    out["selection"] = ({"filters": filters, "modules": len(recs), "of": sel.get("of")} if filters else None)
    out["modules"] = recs
    out["ok"] = not out["failed"]
    if all("timing" in d for d in docs):
        out["timing"] = {"shards": count, "jobs": sum(d["timing"]["jobs"] for d in docs),
                         "wall_seconds": max(d["timing"]["wall_seconds"] for d in docs),
                         "modules": {m: t for d in docs for m, t in d["timing"]["modules"].items()}}
    return out
