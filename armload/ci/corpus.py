"""Check a whole tree of kernel modules: scan .modinfo, order by dependencies, and run the
pipeline (load, relocate, verify branches, run init) for every module, in parallel. The tree,
its .modinfo and the dependency order are kernel/modtree.py's; which modules, selection.py; one
module's check, worker.py (its booted half, booted.py); the outcome classes, outcomes.py.

Every module ends in exactly one outcome class (the `OUTCOMES` table): its own load, verify
or init result, or `dependency-failed` when a module it depends on did not load or its init
did not succeed in the same run (modprobe would have stopped there). A module is named by its
file path relative to the tree. Records hold no wall-clock data: timings travel separately
(`RunStats.timing`), so two runs on the same tree give identical records.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..kernel.modtree import Plan
from .outcomes import dependency_failure, init_class, mark_dependency_failed, unlabelled
from .worker import CheckOptions, Worker, new_record


@dataclass
class RunStats:
    records: list[dict]
    wall: float
    jobs: int
    timing: dict = field(default_factory=dict)   # module path -> stage -> wall seconds


def skip_record(name: str, plan: Plan) -> dict:
    """A module the plan refuses: a dependency missing from the tree or a cycle (load, stage
    "order"), or a dependency refused so (dependency-failed). It is never loaded."""
    why = plan.blocked[name]
    rec = new_record(plan.modules[name])
    because = next((d for d in plan.closure.get(name, []) if d in plan.blocked), None)
    if why.startswith("skipped: dependency ") and because is not None:
        mark_dependency_failed(rec, plan, because, f"cannot be loaded: {plan.blocked[because]}", outcome="load")
    else:
        rec.update(outcome="load", stage="order", reason=why)
    rec["error"] = {"message": f"{name}: {why}"}
    return rec


def run_checks(plan: Plan, kernel, config, options: CheckOptions, *, jobs: int = 1, names=None,
               progress=None, chunk: int = 24, executor=None) -> RunStats:
    """Check `names` (default: every module in plan.order). progress(done, total, failures, rec).
    `executor(groups)`, when given, runs Worker.check_group on each group of names elsewhere and yields
    their record lists in any order (ci/cluster.py); `jobs` then only sizes the groups."""
    if jobs < 1:
        raise ValueError("jobs must be at least 1")
    names = list(plan.order if names is None else names)
    worker = Worker(kernel, config, options, plan)
    try:
        return _run(worker, names, progress, chunk, executor, jobs)
    finally:
        worker.close()


def _run(worker: Worker, names: list[str], progress, chunk: int, executor, jobs: int) -> RunStats:
    plan = worker.plan
    records: dict[str, dict] = {}
    timing: dict[str, dict] = {}
    todo = []
    for n in names:
        if n in plan.blocked:
            records[n] = skip_record(n, plan)
        else:
            todo.append(n)
    total = len(names)
    failures = sum(1 for r in records.values() if r["outcome"] != "ok")
    done = len(records)
    t0 = time.perf_counter()
    if progress:
        progress(done, total, failures, None)
    # Neighbours share dependency-closure prefixes (the workers' sessions are reused); groups of
    # neighbours go to the workers, heaviest groups first so that no long task comes last.
    pos = {n: i for i, n in enumerate(plan.order)}
    todo.sort(key=lambda n: ([pos[d] for d in plan.closure[n]], pos[n]))
    size = max(1, min(chunk, len(todo) // (jobs * 4) or 1))
    groups = [todo[i:i + size] for i in range(0, len(todo), size)]
    weight = lambda g: sum(plan.modules[n].size for n in g)
    groups.sort(key=lambda g: -weight(g))
    by_rel = {plan.modules[n].rel: n for n in names}

    def take(rec):
        nonlocal done, failures
        t = rec.pop("_time", None)
        if t is not None:
            timing[rec["module"]] = {k: round(v, 6) for k, v in t.items()}
        records[by_rel[rec["module"]]] = rec
        done += 1
        if rec["outcome"] != "ok":
            failures += 1
        if progress:
            progress(done, total, failures, rec)

    if executor is not None:                 # e.g. ci/cluster.py: groups as Ray tasks
        for recs in executor(groups):
            for rec in recs:
                take(rec)
    elif jobs <= 1 or len(groups) <= 1:
        for g in groups:
            for n in g:
                take(worker.check_one(n))
        worker.release()
    else:                                    # isolated workers: limits, a dead one replaced (workers.py)
        from .workers import run_pool
        for rec in run_pool(groups, jobs, worker.check_one, worker.lost_record, release=worker.release):
            take(rec)
    wall = time.perf_counter() - t0
    apply_dependencies(plan, records)
    ordered = [records[n] for n in names]
    return RunStats(ordered, wall, jobs, {r["module"]: timing[r["module"]] for r in ordered
                                          if r["module"] in timing})


def apply_dependencies(plan: Plan, records: dict[str, dict]) -> None:
    """dependency-failed: a dependency (in load order, the first one) failed to load or its init
    did not succeed, either as checked in this run or when run before this module's own init.
    It replaces only an init result (which depends on what the dependencies' inits left behind):
    a module's own load or verify failure is a fact about the module and stays. The module's
    own init result stays in its record."""
    for n in plan.order:                     # dependencies come first: chains resolve in one pass
        rec = records.get(n)
        if rec is None or rec["stage"] not in (None, "init"):
            continue
        dep = why = where = None
        for d in plan.closure.get(n, []):
            dr = records.get(d)
            if dr is not None:
                why = dependency_failure(dr)
                if why:
                    dep, where = d, dr.get("where")
                    break
        if dep is None:
            for x in (rec.get("init") or {}).get("dependency_init_failures", []):
                dep, where = x["name"], x.get("where")
                cls = init_class(x)
                why = f"init {cls} when run before this module's own: {unlabelled(cls, x.get('reason'))}"
                break
        if dep is not None:
            mark_dependency_failed(rec, plan, dep, why, where=where,
                                   outcome=(records.get(dep) or {}).get("outcome", "init"))


def build_kernel(paths: list[str], config):
    from ..kernel.provider import Kernel
    return Kernel.from_files(list(paths), config)
