"""Check a whole tree of kernel modules: scan .modinfo, order by dependencies, and run the
pipeline (load, relocate, verify branches, run init) for every module, in parallel.

Design: a module is checked in a fresh `Session` into which its dependency closure is loaded
first (in dependency order), so every result is independent of scheduling and of `--jobs`,
and workers share nothing but the read-only kernel export table (inherited through fork).
A module whose dependency failed to load (or was itself skipped, is missing from the tree, or
sits in a dependency cycle) is reported as skipped because of it.
"""
from __future__ import annotations

import os
import struct
import time
from collections import Counter
from dataclasses import dataclass, field

STATUSES = ("ok", "load-failed", "verify-failed", "skipped")
INIT_OUTCOMES = ("returned-0", "returned-error", "fault", "fault-kernel", "unmodelled", "budget", "timeout",
                 "no-init", "not-run")

DEFAULT_BUDGET = 5_000_000          # instructions per init run in a corpus check
DEFAULT_TIMEOUT = 60.0              # wall-clock safety net per init run (never a result)
DEP_BUDGET = 2_000_000              # dependencies' inits run first, with a smaller budget


# --------------------------------------------------------------------------------------------
# Scanning: .modinfo without a full ELF parse
# --------------------------------------------------------------------------------------------
@dataclass
class ModuleInfo:
    path: str
    name: str
    depends: list[str]
    vermagic: str | None
    size: int
    scan_error: str | None = None    # .modinfo could not be read (the loader will say why)


def read_modinfo(path: str) -> tuple[dict[str, list[str]], str | None]:
    """(.modinfo key -> values, error). Reads the section header table and .modinfo only."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        return {}, f"cannot read: {e.strerror}"
    try:
        if data[:4] != b"\x7fELF" or len(data) < 52:
            return {}, "not an ELF file"
        e_shoff, = struct.unpack_from("<I", data, 0x20)
        e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", data, 0x2E)
        if e_shentsize != 40 or e_shstrndx >= e_shnum or e_shoff + e_shnum * 40 > len(data):
            return {}, "section header table out of bounds"
        shdrs = [struct.unpack_from("<10I", data, e_shoff + 40 * i) for i in range(e_shnum)]
        stroff = shdrs[e_shstrndx][4]
        info: dict[str, list[str]] = {}
        for sh in shdrs:
            end = data.find(b"\0", stroff + sh[0])
            if data[stroff + sh[0]:end] != b".modinfo":
                continue
            off, size = sh[4], sh[5]
            if off + size > len(data):
                return {}, ".modinfo out of bounds"
            for item in data[off:off + size].split(b"\0"):
                if b"=" in item:
                    k, v = item.split(b"=", 1)
                    info.setdefault(k.decode("utf-8", "replace"), []).append(v.decode("utf-8", "replace"))
            return info, None
        return {}, "no .modinfo section"
    except (struct.error, IndexError) as e:
        return {}, f"malformed ELF: {e}"


def _name_from_path(path: str) -> str:
    return os.path.basename(path).split(".", 1)[0].replace("-", "_")


def scan_tree(root: str) -> list[ModuleInfo]:
    """Every *.ko under root (or the file itself), sorted by path."""
    if os.path.isfile(root):
        paths = [root]
    else:
        paths = []
        for d, dirs, files in os.walk(root):
            dirs.sort()
            paths.extend(os.path.join(d, f) for f in files if f.endswith(".ko"))
        paths.sort()
    out = []
    for p in paths:
        info, err = read_modinfo(p)
        name = (info.get("name") or [None])[0] or _name_from_path(p)
        deps = [d.replace("-", "_") for d in ",".join(info.get("depends", [])).split(",") if d]
        out.append(ModuleInfo(p, name, deps, (info.get("vermagic") or [None])[0], os.path.getsize(p), err))
    return out


# --------------------------------------------------------------------------------------------
# Ordering
# --------------------------------------------------------------------------------------------
@dataclass
class Plan:
    order: list[str]                          # every runnable module, dependencies first
    modules: dict[str, ModuleInfo]
    closure: dict[str, list[str]]             # name -> dependencies (transitive), in load order
    blocked: dict[str, str] = field(default_factory=dict)   # name -> why it cannot be loaded at all
    duplicates: list[tuple[str, str]] = field(default_factory=list)   # (name, ignored path)

    def dependents(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for n, m in self.modules.items():
            for d in m.depends:
                out.setdefault(d, set()).add(n)
        return out


def plan_order(mods: list[ModuleInfo]) -> Plan:
    """Topological order (Kahn, ties by name) with missing dependencies and cycles reported."""
    by_name: dict[str, ModuleInfo] = {}
    dups = []
    for m in mods:
        if m.name in by_name:
            dups.append((m.name, m.path))
            continue
        by_name[m.name] = m
    blocked: dict[str, str] = {}
    for n, m in by_name.items():
        missing = [d for d in m.depends if d not in by_name]
        if missing:
            blocked[n] = f"depends on {', '.join(missing)}, not found in the tree"
    indeg = {n: 0 for n in by_name}
    users: dict[str, list[str]] = {n: [] for n in by_name}
    for n, m in by_name.items():
        for d in set(m.depends):
            if d in by_name:
                indeg[n] += 1
                users[d].append(n)
    import heapq
    ready = [n for n, k in indeg.items() if k == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        n = heapq.heappop(ready)
        order.append(n)
        for u in users[n]:
            indeg[u] -= 1
            if indeg[u] == 0:
                heapq.heappush(ready, u)
    if len(order) < len(by_name):
        left = {n for n in by_name if indeg[n] > 0}
        for n in sorted(left):
            cyc = _find_cycle(n, by_name, left)
            if cyc and n in cyc:
                blocked[n] = "dependency cycle: " + " -> ".join(cyc + [cyc[0]])
            else:
                blocked.setdefault(n, "depends on a module in a dependency cycle")
        order += sorted(left)      # still listed, so that the report covers them
    pos = {n: i for i, n in enumerate(order)}
    closure: dict[str, list[str]] = {}
    for n in order:
        seen: set[str] = set()
        stack = [d for d in by_name[n].depends if d in by_name]
        while stack:
            d = stack.pop()
            if d in seen or d == n:
                continue
            seen.add(d)
            stack.extend(x for x in by_name[d].depends if x in by_name)
        closure[n] = sorted(seen, key=pos.__getitem__)
    # Transitive blocking: anything needing a blocked module is skipped because of it.
    for n in order:
        if n in blocked:
            continue
        bad = next((d for d in closure[n] if d in blocked), None)
        if bad is not None:
            blocked[n] = f"skipped: dependency {bad} cannot be loaded ({blocked[bad]})"
    return Plan(order, by_name, closure, blocked, dups)


def _find_cycle(start: str, by_name: dict[str, ModuleInfo], within: set[str]) -> list[str] | None:
    path, onpath = [], set()

    def dfs(n):
        path.append(n)
        onpath.add(n)
        for d in by_name[n].depends:
            if d not in within:
                continue
            if d == start:
                return list(path)
            if d not in onpath:
                r = dfs(d)
                if r:
                    return r
        path.pop()
        onpath.discard(n)
        return None
    return dfs(start)


# --------------------------------------------------------------------------------------------
# Checking one module (runs in a worker process)
# --------------------------------------------------------------------------------------------
@dataclass
class CheckOptions:
    verify: bool = True
    emulate: bool = True
    budget: int = DEFAULT_BUDGET
    timeout: float = DEFAULT_TIMEOUT
    dep_inits: bool = True          # run the dependencies' inits first (as the kernel would have)
    placement: object = "window"
    modversions: bool = True
    params: dict = field(default_factory=dict)   # module name -> insmod parameter words


_WORKER: dict = {}


def set_worker_context(kernel, config, options: CheckOptions, plan: Plan) -> None:
    """Called in the parent before forking (workers inherit it) or directly for jobs=1."""
    _WORKER.update(kernel=kernel, config=config, options=options, plan=plan)
    _STACK.__init__()


def _err_dict(e) -> dict:
    from .errors import ArmloadError
    if isinstance(e, ArmloadError):
        d = e.to_dict()
    else:
        d = {"error": "InternalError", "message": f"internal error: {type(e).__name__}: {e}", "errno": None}
    d["message"] = str(d.get("message", ""))
    return {k: v for k, v in d.items() if isinstance(v, (str, int, float, bool, type(None)))}


class _Stack:
    """A worker's Session with a dependency closure loaded, reused between modules.

    Modules are checked in an order where neighbours share closure prefixes; moving from one
    closure to the next unloads (LIFO) what is not shared and loads the rest. Because the
    module allocator is first fit and every later allocation is freed again, each module gets
    exactly the addresses it would get in a fresh Session loaded with its closure alone."""

    def __init__(self):
        self.session = None
        self.names: list[str] = []
        self.mods: list = []

    def reset(self, ctx) -> None:
        from .loader import Session
        opts = ctx["options"]
        self.session = Session(ctx["kernel"], ctx["config"], opts.placement, modversions=opts.modversions)
        self.names, self.mods = [], []

    def enter(self, ctx, closure: list[str]):
        """Make the session hold exactly `closure`; returns (dep name, error) on failure."""
        if self.session is None:
            self.reset(ctx)
        i = 0
        while i < len(self.names) and i < len(closure) and self.names[i] == closure[i]:
            i += 1
        while len(self.names) > i:
            unload_last(self.session, self.mods.pop())
            self.names.pop()
        plan = ctx["plan"]
        for d in closure[i:]:
            try:
                m = self.session.load(plan.modules[d].path)
            except Exception as e:
                return d, e
            self.names.append(d)
            self.mods.append(m)
        return None


def unload_last(session, mod) -> None:
    """delete_module() for the most recently loaded module of a Session (LIFO, so nothing
    still uses its exports): its exports go and its memory is freed."""
    assert session.modules and session.modules[-1] is mod
    session.unload(mod)


_STACK = _Stack()


def check_group(names: list[str]) -> list[dict]:
    return [check_one(n) for n in names]


def check_one(name: str) -> dict:
    """The full pipeline for one module; returns a JSON-ready record. Never raises."""
    ctx = _WORKER
    plan: Plan = ctx["plan"]
    opts: CheckOptions = ctx["options"]
    info = plan.modules[name]
    rec: dict = {"module": name, "path": info.path, "size": info.size, "depends": info.depends,
                 "status": "ok", "stage": None, "error": None}
    t0 = time.perf_counter()
    try:
        bad = _STACK.enter(ctx, plan.closure[name])
    except Exception as e:                     # a bug: start over with a fresh session
        _STACK.reset(ctx)
        bad = ("?", e)
    if bad is not None:                        # normally caught by the parent's skip logic
        d, e = bad
        rec.update(status="skipped", stage="dependency", skipped_because=d,
                   error={"message": f"{name}: dependency {d} failed to load: {_err_dict(e)['message']}"})
        rec["time"] = {"total": time.perf_counter() - t0}
        return rec
    session = _STACK.session
    deps = list(_STACK.mods)
    t_deps = time.perf_counter()
    try:
        mod = session.load(info.path)
    except Exception as e:
        rec.update(status="load-failed", stage="load", error=_err_dict(e))
        rec["time"] = {"deps": t_deps - t0, "load": time.perf_counter() - t_deps,
                       "total": time.perf_counter() - t0}
        return rec
    t_load = time.perf_counter()
    try:
        unload_last(session, mod)
    except Exception:
        _STACK.reset(ctx)
    rec.update(_module_record(mod))
    times = {"deps": t_deps - t0, "load": t_load - t_deps}
    times.update({f"load.{k}": v for k, v in mod.timings.items()})
    if opts.verify:
        t = time.perf_counter()
        try:
            from .verify import verify_module
            vr = verify_module(mod, ctx["kernel"])
            rec["verify"] = {"ok": vr.ok, "branches": vr.branches_total, "branches_verified": vr.branches_ok,
                             "via_plt": vr.via_plt, "plt_entries": vr.plt_total, "plt_verified": vr.plt_ok,
                             "failures": [f.format() for f in (vr.branch_failures + vr.plt_failures)[:10]]}
            if not vr.ok:
                rec.update(status="verify-failed", stage="verify",
                           error={"message": f"{name}: {vr.summary()}"})
        except Exception as e:
            rec["verify"] = {"ok": False, "error": _err_dict(e)["message"]}
            rec.update(status="verify-failed", stage="verify", error=_err_dict(e))
        times["verify"] = time.perf_counter() - t
    if opts.emulate:
        t = time.perf_counter()
        rec["init"] = _run_init(mod, deps, ctx["kernel"], opts)
        times["init"] = time.perf_counter() - t
    times["total"] = time.perf_counter() - t0
    rec["time"] = times
    return rec


def _module_record(mod) -> dict:
    from_kernel = 0
    simulated = 0
    weak = 0
    from_modules: dict[str, list[str]] = {}
    for r in mod.resolved.values():
        if r.source == "vmlinux":
            from_kernel += 1
        elif r.source == "simulated":
            simulated += 1
        elif r.source.startswith("module:"):
            from_modules.setdefault(r.source[7:], []).append(r.name)
        else:
            weak += 1
    crc_checked = sum(1 for r in mod.resolved.values() if r.crc_checked)
    used = Counter(e.plt for e in mod.plt_entries if not e.fixed)
    fixed = Counter(e.plt for e in mod.plt_entries if e.fixed)
    sizes = {s.name: s.size for s in mod.sections if s.name in (".plt", ".init.plt")}
    b = mod.branches
    return {
        "relocations": int(sum(mod.reloc_counts.values())),
        "relocations_by_type": dict(mod.reloc_counts),
        "plt": {"core_entries": used.get("core", 0), "init_entries": used.get("init", 0),
                "fixed_entries": dict(fixed), "core_bytes": sizes.get(".plt", 0),
                "init_bytes": sizes.get(".init.plt", 0),
                "counts": {k: {"core": v.core, "init": v.init} for k, v in mod.plt_counts.items()}},
        "branches": {"sites": int(len(b)), "via_plt": int((b["plt"] != 0).sum()) if len(b) else 0},
        "symbols": {"undefined": len(mod.resolved), "from_kernel": from_kernel, "simulated": simulated,
                    "weak_undefined": weak, "crc_checked": crc_checked,
                    "from_modules": {k: sorted(v) for k, v in sorted(from_modules.items())}},
        "image_bytes": int(sum(r.size for r in mod.regions)),
        "regions": {r.name: r.base for r in mod.regions},
        "has_init": mod.init_addr is not None,
        "warnings": len(mod.warnings),
    }


def _run_init(mod, deps, kernel, opts: CheckOptions) -> dict:
    from .emu import Machine
    out: dict = {"outcome": "not-run"}
    try:
        m = Machine(deps + [mod], kernel, budget=opts.budget, timeout=opts.timeout, console=_quiet,
                    unmodelled=getattr(opts, "unmodelled", "fail"))
    except Exception as e:
        out.update(outcome="not-run", error=_err_dict(e)["message"])
        return out
    dep_fail = None
    for d in deps:
        ok = False
        if opts.dep_inits:
            try:
                r = m.run_init(d.name, budget=min(opts.budget, DEP_BUDGET), timeout=opts.timeout)
                ok = r.ok
                if not ok and dep_fail is None:
                    dep_fail = r.summary()
            except Exception as e:
                if dep_fail is None:
                    dep_fail = f"{d.name}: {_err_dict(e)['message']}"
        # The kernel frees init memory after a successful init (and a later module may have been
        # given those addresses). Release it whatever happened, so that the module under test
        # can be mapped: a dependency whose init failed is treated as loaded, its init incomplete.
        _release_init(m, d)
    if dep_fail:
        out["dependency_init"] = dep_fail
    words = opts.params.get(mod.name.replace("-", "_"))
    if words:
        from .emu.params import apply_params
        try:
            po = apply_params(m, mod, words)
        except Exception as e:
            out.update(outcome="not-run", error=f"parameters: {_err_dict(e)['message']}")
            return out
        out["params"] = {"ok": po.ok, "error": po.error, "log": po.log, "notes": po.notes}
        if not po.ok:
            out.update(outcome="params-refused", error=po.summary())
            return out
    try:
        r = m.run_init(mod)
    except Exception as e:
        out.update(outcome="not-run", error=_err_dict(e)["message"])
        return out
    out.update(_init_summary(r))
    return out


def _release_init(machine, mod) -> None:
    """Free a dependency's init memory (mapping it first if its init did not run)."""
    if not any(r.init for r in mod.regions):
        return
    try:
        machine.free_init_memory(mod)
    except Exception:
        pass


def _quiet(*a, **k) -> None:
    pass


def _init_summary(r) -> dict:
    if r.status == "no-function":
        outcome = "no-init"
    elif r.status == "returned":
        outcome = "returned-0" if r.retval == 0 else "returned-error"
    elif r.status in ("budget", "timeout", "unmodelled"):
        outcome = r.status
    elif r.fault is not None and r.fault.in_kernel:
        outcome = "fault-kernel"
    else:
        outcome = "fault"
    d = {"outcome": outcome, "status": r.status, "retval": r.retval, "elapsed": round(r.elapsed, 6),
         "calls": len(r.calls), "log": r.log[-5:]}
    if r.retval is not None and r.retval < 0:
        from .emu.errno import errno_name
        d["errno_name"] = errno_name(r.retval)
    if r.fault is not None:
        f = r.fault
        d["fault"] = {"kind": f.kind, "message": f.message, "pc": f.pc, "pc_sym": f.pc_sym,
                      "access_addr": f.access_addr, "access_type": f.access_type, "lr_sym": f.lr_sym}
    real = [c for c in r.calls if c.name != "__gnu_mcount_nc"]
    if real:
        last = real[-1]
        d["last_call"] = {"name": last.name, "ret": last.ret, "caller_sym": last.caller_sym}
        errs = [c.name for c in r.calls if c.ret is not None and c.ret >= 0xFFFFF001]
        if errs:
            d["error_calls"] = errs[-3:]
    d["kernel_calls"] = sorted({c.name for c in r.calls})[:200]
    d["classes"] = r.class_counts()
    d["instructions"] = r.instructions
    if r.fault is not None and r.fault.unmodelled:
        d["unmodelled"] = r.fault.unmodelled
    return d


# --------------------------------------------------------------------------------------------
# Running a whole tree
# --------------------------------------------------------------------------------------------
@dataclass
class RunStats:
    records: list[dict]
    wall: float
    jobs: int


def skip_record(name: str, plan: Plan, reason: str, because: str | None = None) -> dict:
    info = plan.modules[name]
    return {"module": name, "path": info.path, "size": info.size, "depends": info.depends,
            "status": "skipped", "stage": "dependency", "skipped_because": because,
            "error": {"message": f"{name}: {reason}"}, "time": {"total": 0.0}}


def run_checks(plan: Plan, kernel, config, options: CheckOptions, *, jobs: int = 1, names=None,
               progress=None, chunk: int = 24) -> RunStats:
    """Check `names` (default: every module in plan.order). progress(done, total, failures, rec)."""
    names = list(plan.order if names is None else names)
    set_worker_context(kernel, config, options, plan)
    records: dict[str, dict] = {}
    todo = []
    for n in names:
        if n in plan.blocked:
            why = plan.blocked[n]
            because = None
            if why.startswith("skipped: dependency "):
                because = why.split()[2]
            rec = skip_record(n, plan, why, because)
            if not why.startswith("skipped"):
                rec["status"] = "load-failed"
                rec["stage"] = "order"
            records[n] = rec
        else:
            todo.append(n)
    total = len(names)
    failures = sum(1 for r in records.values() if r["status"] != "ok")
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

    def take(rec):
        nonlocal done, failures
        records[rec["module"]] = rec
        done += 1
        if rec["status"] != "ok":
            failures += 1
        if progress:
            progress(done, total, failures, rec)

    if jobs <= 1 or len(groups) <= 1:
        for g in groups:
            for n in g:
                take(check_one(n))
    else:
        import multiprocessing as mp
        ctx = mp.get_context("fork")
        with ctx.Pool(jobs) as pool:
            for recs in pool.imap_unordered(check_group, groups, chunksize=1):
                for rec in recs:
                    take(rec)
    wall = time.perf_counter() - t0
    _apply_skips(plan, records)
    ordered = [records[n] for n in names]
    return RunStats(ordered, wall, jobs)


def _apply_skips(plan: Plan, records: dict[str, dict]) -> None:
    """A module whose dependency failed to load is skipped because of it (whatever its worker
    found, it could not have loaded in the real kernel)."""
    for n in plan.order:
        rec = records.get(n)
        if rec is None or rec["status"] == "skipped" and rec.get("skipped_because"):
            continue
        for d in plan.closure.get(n, []):
            dr = records.get(d)
            if dr is not None and dr["status"] in ("load-failed", "skipped"):
                records[n] = skip_record(n, plan, f"skipped: dependency {d} "
                                         f"{'failed to load' if dr['status'] == 'load-failed' else 'was skipped'}"
                                         f" ({(dr.get('error') or {}).get('message', '')})", d)
                break


# --------------------------------------------------------------------------------------------
# Summaries
# --------------------------------------------------------------------------------------------
def summarize(records: list[dict]) -> dict:
    c = Counter()
    for r in records:
        c["modules"] += 1
        st = r["status"]
        if st == "skipped":
            c["skipped"] += 1
            continue
        if st == "load-failed":
            c["load_failed"] += 1
            continue
        c["loaded"] += 1
        c["relocated"] += 1
        c["relocations"] += r.get("relocations", 0)
        v = r.get("verify")
        if v is not None:
            if v.get("ok"):
                c["verified"] += 1
            else:
                c["verify_failed"] += 1
            c["branches"] += v.get("branches", 0)
            c["branches_verified"] += v.get("branches_verified", 0)
            c["plt_entries"] += v.get("plt_entries", 0)
            c["plt_verified"] += v.get("plt_verified", 0)
        i = r.get("init")
        if i is not None:
            c["init_" + i["outcome"].replace("-", "_")] += 1
            c["init_run"] += 1
    out = dict(c)
    run = c["init_run"]
    if run:
        out["init_ok_share"] = (c["init_returned_0"] + c["init_no_init"]) / run
    return out


def failing_apis(records: list[dict], top: int = 20) -> list[tuple[str, int, Counter]]:
    """Kernel functions most often the last call before an init fault/budget/error.
    Returns (function, modules, Counter of outcomes)."""
    per: dict[str, Counter] = {}
    for r in records:
        i = r.get("init")
        if not i or i["outcome"] not in ("fault", "returned-error", "budget", "timeout"):
            continue
        culprit = None
        if i["outcome"] == "returned-error" and i.get("error_calls"):
            culprit = i["error_calls"][-1]
        elif i.get("fault", {}).get("kind") in ("stub", "bug") and i.get("last_call"):
            culprit = i["last_call"]["name"]
        elif i.get("last_call"):
            culprit = i["last_call"]["name"]
        culprit = culprit or "(no kernel call)"
        per.setdefault(culprit, Counter())[i["outcome"] + (":" + i["fault"]["kind"] if i.get("fault") else "")] += 1
    rows = sorted(((k, sum(v.values()), v) for k, v in per.items()), key=lambda x: -x[1])
    return rows[:top]


# --------------------------------------------------------------------------------------------
# Kernel
# --------------------------------------------------------------------------------------------
def build_kernel(paths: list[str], config):
    from .kernel import Kernel
    return Kernel.from_files(list(paths), config)
