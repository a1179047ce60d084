"""Check a whole tree of kernel modules: scan .modinfo, order by dependencies, and run the
pipeline (load, relocate, verify branches, run init) for every module, in parallel.

Design: a module is checked in a fresh `Session` into which its dependency closure is loaded
first (in dependency order), so every result is independent of scheduling and of `--jobs`,
and workers share nothing but the read-only kernel export table (inherited through fork).

Every module ends in exactly one outcome class (the `OUTCOMES` table): its own load, verify
or init result, or `dependency-failed` when a module it depends on did not load or its init
did not succeed in the same run (modprobe would have stopped there). A module is named by its
file path relative to the tree. Records hold no wall-clock data: timings travel separately
(`RunStats.timing`), so two runs on the same tree give identical records.
"""
from __future__ import annotations

import os
import struct
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

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

# The booted kernel's init status (ci.corpus._booted_data) -> outcome class. "returned" with a negative value is
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

from . import sanitized
from ..emu.limits import BOOTED_BUDGET as DEFAULT_BUDGET    # per load_module (loading and init), as run's
from ..emu.limits import BOOTED_TIMEOUT as DEFAULT_TIMEOUT  # wall clock per load: only a safety net
BOOTED_BUDGET = DEFAULT_BUDGET


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
    rel: str = ""                    # path relative to the tree: how reports name the module

    def __post_init__(self):
        self.rel = self.rel or os.path.basename(self.path)


def read_modinfo(path: str) -> tuple[dict[str, list[str]], str | None]:
    """(.modinfo key -> values, error). Reads the section header table and .modinfo only."""
    from ..errors import ArmloadError
    from ..loader.kofile import read_module
    try:
        data = read_module(path)
    except ArmloadError as e:
        return {}, str(e).removeprefix(f"{path}: ")
    return parse_modinfo(data)


def file_sha256(data: bytes) -> str:
    import hashlib
    return hashlib.sha256(data).hexdigest()[:16]


NT_GNU_BUILD_ID = 3


def build_id(data: bytes) -> str | None:
    """The GNU build-id note (`ld --build-id`, in .note.gnu.build-id), as readelf -n prints it."""
    try:
        e_shoff, = struct.unpack_from("<I", data, 0x20)
        e_shentsize, e_shnum = struct.unpack_from("<HH", data, 0x2E)
        if e_shentsize != 40:
            return None
        shdrs = [struct.unpack_from("<10I", data, e_shoff + 40 * i) for i in range(e_shnum)]
        for sh in shdrs:
            if sh[1] != 7:                       # SHT_NOTE
                continue
            off, end = sh[4], min(sh[4] + sh[5], len(data))
            while off + 12 <= end:               # Elf32_Nhdr: namesz, descsz, type; padded to 4
                namesz, descsz, typ = struct.unpack_from("<3I", data, off)
                name = data[off + 12:off + 12 + namesz]
                desc_at = off + 12 + (namesz + 3) // 4 * 4
                if typ == NT_GNU_BUILD_ID and name == b"GNU\0" and desc_at + descsz <= end:
                    return data[desc_at:desc_at + descsz].hex()
                off = desc_at + (descsz + 3) // 4 * 4
        return None
    except (struct.error, IndexError):
        return None


def parse_modinfo(data: bytes) -> tuple[dict[str, list[str]], str | None]:
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
    from ..loader.kofile import module_stem
    return module_stem(path)


def scan_tree(root: str) -> list[ModuleInfo]:
    """Every *.ko and *.ko.{xz,zst,gz} under root (or the file itself), sorted by path."""
    from ..loader.kofile import is_module_file
    if os.path.isfile(root):
        paths = [root]
    else:
        paths = []
        for d, dirs, files in os.walk(root):
            dirs.sort()
            paths.extend(os.path.join(d, f) for f in files if is_module_file(f))
        paths.sort()
    out = []
    for p in paths:
        info, err = read_modinfo(p)
        name = (info.get("name") or [None])[0] or _name_from_path(p)
        deps = [d.replace("-", "_") for d in ",".join(info.get("depends", [])).split(",") if d]
        rel = os.path.basename(p) if p == root else os.path.relpath(p, root).replace(os.sep, "/")
        out.append(ModuleInfo(p, name, deps, (info.get("vermagic") or [None])[0], os.path.getsize(p), err, rel))
    return out


def fingerprint(info: ModuleInfo) -> tuple[str | None, str | None]:
    """(file SHA-256, build-id) of a module, read when its record is made (in the worker that
    checks it), so that a subset of a large tree hashes only its own modules."""
    from ..errors import ArmloadError
    from ..loader.kofile import decompress, read_raw
    try:
        data = read_raw(info.path)
    except ArmloadError:
        return None, None
    try:
        return file_sha256(data), build_id(decompress(data, info.path))     # the file's hash, the ELF's id
    except ArmloadError:
        return file_sha256(data), None


def scan_with_deps(tree: str, deps_from: str, *, rename: bool = True) -> tuple[list[ModuleInfo], list[str]]:
    """The modules of `tree` to check, with the dependencies they need taken from the full tree
    `deps_from`: (every module, the names of the ones to check). A module of `tree` replaces the
    full tree's module of the same name; one that lies inside `deps_from`, or replaces a module
    of it, is named by that module's path there (unless not `rename`), so its records match a
    baseline of the full tree."""
    full = scan_tree(deps_from)
    mine = scan_tree(tree)
    top = os.path.realpath(deps_from)
    in_full = {m.name: m.rel for m in full}
    for m in mine if rename else ():
        real = os.path.realpath(m.path)
        if os.path.isdir(top) and real.startswith(top + os.sep):
            m.rel = os.path.relpath(real, top).replace(os.sep, "/")
        elif m.name in in_full:              # a rebuilt or patched copy of a module of the tree
            m.rel = in_full[m.name]
    names = {m.name for m in mine}
    return [m for m in full if m.name not in names] + mine, sorted(names)


def select(plan: "Plan", patterns: list[str]) -> list[str]:
    """The modules (in plan order) that any pattern names: a module name (- and _ alike), a path
    relative to the tree, a directory of the tree (every module under it) or a glob over either
    (`drivers/net/can/*`, `*wifi*`). ValueError names the patterns that match nothing."""
    import fnmatch
    hit: set[str] = set()
    none = []
    for pat in patterns:
        p = pat.strip().rstrip("/")
        key = p.replace("-", "_")
        got = {n for n, m in plan.modules.items()
               if n == key or m.rel == p or m.rel.startswith(p + "/")
               or fnmatch.fnmatchcase(m.rel, p) or fnmatch.fnmatchcase(n, key)}
        if not got:
            none.append(pat)
        hit |= got
    if none:
        raise ValueError(", ".join(none))
    return [n for n in plan.order if n in hit]


def parse_shard(text: str) -> tuple[int, int]:
    """'K/N' -> (K, N) with 1 <= K <= N. ValueError otherwise."""
    try:
        k, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ValueError(f"{text!r} is not K/N (e.g. 1/4)") from None
    if not 1 <= k <= n:
        raise ValueError(f"{text!r}: need 1 <= K <= N")
    return k, n


def shard(names: list[str], k: int, n: int) -> list[str]:
    """Shard K of N: every N-th module of the selection, starting at the K-th."""
    return names[k - 1::n]


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
    emulate: bool = True            # run init inside the booted kernel (needs `image`)
    budget: int = DEFAULT_BUDGET
    timeout: float = DEFAULT_TIMEOUT
    placement: object = "window"    # the loader-only pass (the booted kernel's module_alloc places its own)
    modversions: bool = True
    params: dict = field(default_factory=dict)   # module name -> insmod parameter words
    image: str | None = None        # the vmlinuz the booted kernel boots
    settle_ns: int = 0              # deferred work after init (simulated ns)
    tree: str | None = None         # where request_module's modprobe finds modules
    no_init: str = "--no-emulate"   # why init is not run when emulate is False
    sanitize: tuple = ()            # the sanitizers' classes on the module's init (ci/sanitized.py)


_WORKER: dict = {}


def set_worker_context(kernel, config, options: CheckOptions, plan: Plan) -> None:
    """Called in the parent before forking (workers inherit it) or directly for jobs=1 (or in a
    Ray worker, ci/cluster.py). A kernel used before gets its simulated addresses back as they
    were before that use."""
    if _STACK.sims and _WORKER.get("kernel") is not None:
        sim_restore(_WORKER["kernel"], _STACK.sims[0])
    _WORKER.update(kernel=kernel, config=config, options=options, plan=plan)
    _STACK.__init__()
    if options.emulate and options.image:
        try:                                  # restored once here: the workers fork from it
            _booted_handle([], _WORKER, options)
        except Exception:
            pass                              # each module reports the failure (_run_booted)


def _err_dict(e) -> dict:
    from ..errors import ArmloadError
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
        self.sims: list = []         # simulated-address state before each level (see sim_state)

    def reset(self, ctx) -> None:
        from ..loader.session import Session
        opts = ctx["options"]
        if self.sims:                # back to the kernel as it was before this stack loaded anything
            sim_restore(ctx["kernel"], self.sims[0])
        self.session = Session(ctx["kernel"], ctx["config"], opts.placement, modversions=opts.modversions)
        self.names, self.mods, self.sims = [], [], [sim_state(ctx["kernel"])]

    def rewind(self, kernel) -> None:
        """The simulated addresses as they were after the last module of the stack was loaded,
        so that a module's own imports get the same addresses whatever was checked before."""
        sim_restore(kernel, self.sims[len(self.names)])

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
        del self.sims[len(self.names) + 1:]
        plan = ctx["plan"]
        for d in closure[i:]:
            self.rewind(ctx["kernel"])
            try:
                m = self.session.load(plan.modules[d].path)
            except Exception as e:
                return d, e
            self.names.append(d)
            self.mods.append(m)
            self.sims.append(sim_state(ctx["kernel"]))
        self.rewind(ctx["kernel"])
        return None


def sim_state(kernel) -> tuple:
    """The kernel's simulated-address allocator (Module.symvers or the built-in kernel give no
    addresses: armload hands them out in order of first use, provider.Kernel.address_of)."""
    return dict(kernel.simulated), kernel._next_text, kernel._next_data


def sim_restore(kernel, state: tuple) -> None:
    """Undo the addresses handed out since `state`: a module's simulated addresses then depend
    on its dependency closure and its own content only, never on which worker checked which
    modules before it (so the JSON is the same for any --jobs, shard or subset)."""
    sim, nt, nd = state
    if len(kernel.simulated) != len(sim) or kernel._next_text != nt or kernel._next_data != nd:
        kernel.simulated = dict(sim)
        kernel._next_text, kernel._next_data = nt, nd
        kernel._sorted = None


def unload_last(session, mod) -> None:
    """delete_module() for the most recently loaded module of a Session (LIFO, so nothing
    still uses its exports): its exports go and its memory is freed."""
    assert session.modules and session.modules[-1] is mod
    session.unload(mod)


_STACK = _Stack()


def check_group(names: list[str]) -> list[dict]:
    try:
        return [check_one(n) for n in names]
    finally:
        booted_release()


def _new_record(info: ModuleInfo) -> dict:
    sha, bid = fingerprint(info)
    return {"module": info.rel, "name": info.name, "size": info.size, "depends": info.depends,
            "sha256": sha, "build_id": bid,
            "outcome": "ok", "stage": None, "reason": None, "where": None}


def lost_record(name: str, why: str) -> dict:
    """The record of a module whose check worker died while checking it (ci/workers.py)."""
    rec = _new_record(_WORKER["plan"].modules[name])
    rec.update(outcome="internal", stage="worker", reason=why)
    return rec


def check_one(name: str) -> dict:
    """The full pipeline for one module; returns a JSON-ready record with its wall-clock
    timings under "_time" (run_checks moves them out). Never raises."""
    ctx = _WORKER
    plan: Plan = ctx["plan"]
    opts: CheckOptions = ctx["options"]
    info = plan.modules[name]
    rec = _new_record(info)
    t0 = time.perf_counter()
    try:
        bad = _STACK.enter(ctx, plan.closure[name])
    except Exception as e:                     # a bug: start over with a fresh session
        _STACK.reset(ctx)
        bad = ("?", e)
    if bad is not None:                        # normally caught by the parent's skip logic
        d, e = bad
        msg = _err_dict(e)["message"]
        mark_dependency_failed(rec, plan, d, f"failed to load: {_first_line(msg)}", outcome="load")
        rec["error"] = {"message": f"{name}: dependency {d} failed to load: {msg}"}
        rec["_time"] = {"total": time.perf_counter() - t0}
        return rec
    session = _STACK.session
    t_deps = time.perf_counter()
    try:
        mod = session.load(info.path)
    except Exception as e:
        err = _err_dict(e)
        rec.update(outcome="internal" if err["error"] == "InternalError" else "load", stage="load",
                   reason=_first_line(err["message"]), error=err)
        rec["_time"] = {"deps": t_deps - t0, "load": time.perf_counter() - t_deps,
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
            from ..loader.verify import verify_module
            vr = verify_module(mod, ctx["kernel"])
            rec["verify"] = {"ok": vr.ok, "branches": vr.branches_total, "branches_verified": vr.branches_ok,
                             "via_plt": vr.via_plt, "plt_entries": vr.plt_total, "plt_verified": vr.plt_ok,
                             "failures": [f.format() for f in (vr.branch_failures + vr.plt_failures)[:10]]}
            if not vr.ok:
                fails = rec["verify"]["failures"]
                rec.update(outcome="verify", stage="verify", reason=_first_line(vr.summary()),
                           where=fails[0] if fails else None)
        except Exception as e:
            msg = _err_dict(e)["message"]
            rec["verify"] = {"ok": False, "error": msg}
            rec.update(outcome="internal", stage="verify", reason=_first_line(msg))
        times["verify"] = time.perf_counter() - t
    if opts.emulate:
        t = time.perf_counter()
        init = _run_booted(info, [plan.modules[d] for d in plan.closure[name]], ctx, opts)
        times["init"] = time.perf_counter() - t
        times["init.emulator"] = init.pop("elapsed", None)
        dep_inits = init.pop("dependency_inits", [])
        failed = [d for d in dep_inits if init_class(d) != "ok"]
        if failed:
            init["dependency_init_failures"] = failed
        rec["init"] = init
        if rec["outcome"] == "ok":
            cls = init_class(init)
            if cls == "sanitizer":
                why, at = sanitized.reason(init)
                rec.update(outcome=cls, stage="init", reason=why, where=at)
            elif cls != "ok" or init.get("reason"):
                rec.update(outcome=cls, stage="init", reason=init.get("reason"), where=init.get("where"))
        differs = loader_differs(init)
        if differs and OUTCOMES[rec["outcome"]][0] != "harness":
            # the kernel's verdict stays in rec["init"]; the class says armload's loader is wrong
            rec.update(outcome="loader-differs", stage="compare", reason=differs[0], where=differs[1])
    times["total"] = time.perf_counter() - t0
    rec["_time"] = {k: v for k, v in times.items() if v is not None}
    return rec


def loader_differs(init: dict | None) -> tuple[str, str | None] | None:
    """(reason, where) when the booted comparison found armload's loader unlike the kernel's
    (modrun.LoaderCheck as a dict), else None."""
    lvk = (init or {}).get("loader_vs_kernel")
    if not (init or {}).get("loader_differs") or not lvk:
        return None
    if lvk.get("refusal") and not lvk.get("agrees"):
        kernel = (f"refused it with {init.get('retval')}" if init.get("status") == "refused"
                  else "loaded it")
        return f"armload's loader refused it where the kernel's load_module {kernel}: {_first_line(lvk['refusal'])}", None
    if not lvk.get("agrees"):
        return "armload's loader accepted what the kernel's load_module refused", None
    secs = ", ".join(f"{k}: {v}" for k, v in sorted(lvk.get("by_section", {}).items()))
    first = (lvk.get("listed") or [{}])[0]
    where = (f"{first['section']} {first['addr']:#x}: armload {first['armload']}, kernel {first['kernel']}"
             if first.get("addr") is not None else None)
    return f"armload's image differs from the kernel's in {lvk.get('differences')} word(s) ({secs})", where


def _first_line(s: str | None) -> str | None:
    return None if s is None else s.split("\n", 1)[0]


def image_hash(mod) -> str:
    """The loaded image: every allocation's name, address and relocated bytes (first 16 hex
    digits of a SHA-256). It changes with the file, the kernel's addresses or the loader."""
    import hashlib
    h = hashlib.sha256()
    for r in mod.regions:
        h.update(f"{r.name}@{r.base:#x}:{r.size}\0".encode())
        h.update(bytes(r.data))
    return h.hexdigest()[:16]


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
        "relocations_by_type": {str(k): v for k, v in sorted(mod.reloc_counts.items())},
        "plt": {"core_entries": used.get("core", 0), "init_entries": used.get("init", 0),
                "fixed_entries": dict(sorted(fixed.items())), "core_bytes": sizes.get(".plt", 0),
                "init_bytes": sizes.get(".init.plt", 0),
                "counts": {k: {"core": v.core, "init": v.init} for k, v in mod.plt_counts.items()}},
        "branches": {"sites": int(len(b)), "via_plt": int((b["plt"] != 0).sum()) if len(b) else 0},
        "symbols": {"undefined": len(mod.resolved), "from_kernel": from_kernel, "simulated": simulated,
                    "weak_undefined": weak, "crc_checked": crc_checked,
                    "from_modules": {k: sorted(v) for k, v in sorted(from_modules.items())}},
        "image_bytes": int(sum(r.size for r in mod.regions)),
        "image_sha256": image_hash(mod),
        "regions": {r.name: r.base for r in mod.regions},
        "has_init": mod.init_addr is not None,
        "warnings": len(mod.warnings),
    }


# --------------------------------------------------------------------------------------------
# The booted kernel: the only code here that runs module code or reads its results (a Result,
# armload/emu/booted/result.py).
# It returns plain data; everything else in this file works on that data.
# --------------------------------------------------------------------------------------------
def _run_booted(info, closure, ctx, opts: CheckOptions) -> dict:
    """The booted runtime: the closure then the module loaded by the kernel's own load_module (init
    and all), armload's image compared with the kernel's (modrun.py). The module runs in a fork of a
    process holding the restored kernel with its closure loaded (emu/booted/forkserver.py), which
    is the state a fresh restore plus the closure's loads gives. Returns {"status":
    returned | refused | oops | budget | timeout | a hostile end | not-run, "retval", "reason" (one
    line), "where" (the oops's PC), "loader_vs_kernel", the kernel's last console lines,
    "dependency_inits": [name, status, retval, reason]}."""
    from functools import partial
    from ..emu.booted import forkserver
    try:
        h = _booted_handle(closure, ctx, opts)
    except forkserver.ForkError as e:
        return {"status": "not-run", "reason": f"booted kernel: {str(e).strip().splitlines()[-1]}"}
    except Exception as e:
        return {"status": "not-run", "reason": f"booted kernel could not start: {_err_dict(e)['message']}"}
    dep_inits, failed = h.info or ([], None)
    if failed is not None:
        return dict(failed, dependency_inits=dep_inits)
    try:
        return forkserver.fork_run(h, partial(_booted_module, info, opts, dep_inits))
    except forkserver.ForkError as e:
        return {"status": "not-run", "reason": f"booted kernel: {str(e).strip().splitlines()[-1]}",
                "dependency_inits": dep_inits}


_BOOTED: dict = {}


def _booted_handle(closure, ctx, opts: CheckOptions):
    """This worker's fork-server handle for `closure`: the base restore for none, else a server
    holding the closure (one at a time: modules are checked in closure order)."""
    from functools import partial
    from ..emu.booted import forkserver
    base = forkserver.prepare([], vmlinuz=opts.image, kernel=ctx["kernel"], config=ctx["config"], tree=opts.tree)
    if not closure:
        return base
    key = (id(opts), id(ctx["kernel"]), tuple(d.name for d in closure))
    old = _BOOTED.get("server")
    if old is not None and _BOOTED.get("key") == key and old[0] == os.getpid():
        return old[1]
    if old is not None and old[0] == os.getpid():
        forkserver.close(old[1])
    _BOOTED.pop("server", None)
    h = forkserver.prepare(closure, base=base, load=partial(_booted_closure, opts))
    _BOOTED.update(key=key, server=(os.getpid(), h))
    return h


def booted_release() -> None:
    """End this worker's closure server (its CPU time is then its parent's children's)."""
    old = _BOOTED.pop("server", None)
    if old is not None and old[0] == os.getpid():
        from ..emu.booted import forkserver
        forkserver.close(old[1])


def _booted_closure(opts: CheckOptions, run, closure) -> tuple[list, dict | None]:
    """Load the closure (in the fork server): (dependency_inits, a not-run result or None)."""
    t0 = time.perf_counter()
    dep_inits = []
    for d in closure:
        try:
            r = run.load(d.path, opts.params.get(d.name, []), budget=opts.budget, timeout=opts.timeout)
        except Exception as e:
            return dep_inits, {"status": "not-run", "reason": f"dependency {d.name}: {_err_dict(e)['message']}"}
        x = _booted_data(r, run)
        dep_inits.append({"name": d.name, "status": x["status"], "retval": x.get("retval"),
                          "reason": x.get("reason"), "where": x.get("where")})
        if init_class(x) != "ok":            # insmod of the module never happens
            return dep_inits, {"status": "not-run", "reason": f"dependency {d.name} failed in the kernel: "
                               f"{x.get('reason')}", "elapsed": time.perf_counter() - t0}
    return dep_inits, None


def _booted_module(info, opts: CheckOptions, dep_inits: list, run) -> dict:
    """The module itself (in a fork of the process holding its closure)."""
    t0 = time.perf_counter()
    dep_inits = list(dep_inits)
    try:
        me = info.name.replace("-", "_")
        r = next((x for x in run.results if x.name.replace("-", "_") == me and x.ok), None)
        san = None
        if r is None:
            san = sanitized.attach(run, opts.sanitize)
            r = (san or run).load(info.path, opts.params.get(info.name, []), budget=opts.budget, timeout=opts.timeout)
        else:                                 # a dependency's request_module loaded it already (insmod: EEXIST)
            dep_inits.append({"name": info.name, "status": "returned", "retval": 0, "reason": "autoloaded"})
        if opts.settle_ns and r.ok:
            run.settle(opts.settle_ns)
    except Exception as e:
        return {"status": "not-run", "reason": f"booted kernel: {_err_dict(e)['message']}",
                "dependency_inits": dep_inits}
    out = _booted_data(r, run)
    if san is not None:
        out["sanitizer"] = sanitized.collect(san)
    out["dependency_inits"] = dep_inits
    out["elapsed"] = time.perf_counter() - t0
    return out


def _booted_data(r, run=None) -> dict:
    """A Result (emu/booted/result.py) as check's init data."""
    from ..emu.booted import hostile
    st = {"returned": "returned", "refused": "refused", "oops": "oops", "stopped": "timeout",
          "budget": "budget", **{k: k for k in HOSTILE_STATUSES}}.get(r.status, "not-run")
    out = {"status": st, "retval": r.ret, "instructions": r.instructions,
           "console": r.console[-5:], "loader_vs_kernel": r.loader.to_dict()}
    if r.ret is not None and r.ret < 0:
        out["errno_name"] = _errno_name(r.ret)
    if getattr(r, "decompressed_by", ""):
        out["decompressed_by"] = r.decompressed_by           # who inflated the .ko.xz/.zst/.gz
    if r.status == "refused":
        out["reason"] = f"load_module returned {r.ret} (-{_errno_name(r.ret)})"
    elif r.status == "returned" and r.ret and r.ret < 0:
        out["reason"] = f"init returned {r.ret} (-{_errno_name(r.ret)})"
    elif r.status in HOSTILE_STATUSES and r.status != "panic":
        out["reason"], out["where"] = hostile.reason(r.status, r.console, r.stopped)
    elif r.status in ("oops", "panic"):
        first = next((ln for ln in r.oops.splitlines() if ln.strip()), "")
        out["reason"] = first.split("] ", 1)[-1]
        out["where"] = next((ln.split("PC is at ", 1)[1] for ln in r.oops.splitlines() if "PC is at " in ln), None)
        if out["where"] and run is not None:        # with file:line, as decode_stacktrace.sh finds it
            from ..emu.booted.decode import where
            out["where"] = where(out["where"], run.session.modules, run.session.kernel.vmlinux_debug)
    elif r.status == "budget":
        out["reason"] = f"no return within {r.instructions:,} instructions"
    elif r.status == "stopped":
        # where the wall clock stopped the code depends on the machine's load: keep nothing of it
        return {"status": st, "retval": None, "reason": f"{r.stopped} (a harness failure, not module behaviour)"}
    elif r.status == "refused-dead":
        out["reason"] = r.stopped
    if not r.loader.agrees or not (r.loader.identical or r.status == "refused"):
        out["loader_differs"] = True
    return out


def _errno_name(v: int) -> str:
    from ..emu.errno import errno_name
    name = errno_name(v)
    if name.isdigit() and sys.platform.startswith("linux"):
        # The emulator's table is short; ARM Linux uses the generic errno numbers, as the host does.
        import errno
        name = errno.errorcode.get(-v, name)
    return name


# --------------------------------------------------------------------------------------------
# Running a whole tree
# --------------------------------------------------------------------------------------------
@dataclass
class RunStats:
    records: list[dict]
    wall: float
    jobs: int
    timing: dict = field(default_factory=dict)   # module path -> stage -> wall seconds


def mark_dependency_failed(rec: dict, plan: Plan, dep: str, why: str, *, where: str | None = None,
                           outcome: str | None = None) -> None:
    info = plan.modules.get(dep)
    rec.update(outcome="dependency-failed", stage="dependency",
               reason=f"dependency {dep} ({info.rel if info else 'not in the tree'}) {why}", where=where,
               dependency={"name": dep, "module": info.rel if info else None, "outcome": outcome})


def skip_record(name: str, plan: Plan) -> dict:
    """A module the plan refuses: a dependency missing from the tree or a cycle (load, stage
    "order"), or a dependency refused so (dependency-failed). It is never loaded."""
    why = plan.blocked[name]
    rec = _new_record(plan.modules[name])
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
    `executor(groups)`, when given, runs check_group on each group of names elsewhere and yields
    their record lists in any order (ci/cluster.py); `jobs` then only sizes the groups."""
    if jobs < 1:
        raise ValueError("jobs must be at least 1")
    names = list(plan.order if names is None else names)
    set_worker_context(kernel, config, options, plan)
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
                take(check_one(n))
        booted_release()
    else:                                    # isolated workers: limits, a dead one replaced (workers.py)
        from .workers import run_pool
        for rec in run_pool(groups, jobs, check_one, lost_record, release=booted_release):
            take(rec)
    wall = time.perf_counter() - t0
    apply_dependencies(plan, records)
    ordered = [records[n] for n in names]
    return RunStats(ordered, wall, jobs, {r["module"]: timing[r["module"]] for r in ordered
                                          if r["module"] in timing})


def _dependency_failure(dr: dict) -> str | None:
    """Why a dependency's record means its dependents cannot have worked, or None."""
    if dr["outcome"] == "dependency-failed":
        return dr["reason"]
    if dr["outcome"] in ("load", "internal") and dr["stage"] in ("order", "load"):
        return f"failed to load: {dr['reason']}"
    cls = init_class(dr.get("init"))
    if cls not in (None, "ok"):
        return f"init {labelled(cls, dr['init'].get('reason'))}"
    return None


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
                why = _dependency_failure(dr)
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


# --------------------------------------------------------------------------------------------
# Summaries
# --------------------------------------------------------------------------------------------
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


def stage_results(rec: dict, options: CheckOptions) -> dict[str, tuple[str | None, str | None]]:
    """Per stage (load, verify, init): (outcome class or None when not run, reason). The
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
        out["init"] = (cls, sanitized.reason(i)[0] if cls == "sanitizer" else
                       i.get("reason") or ("no init function" if i.get("status") == "no-function" else None))
    return out


# --------------------------------------------------------------------------------------------
# Kernel
# --------------------------------------------------------------------------------------------
def build_kernel(paths: list[str], config):
    from ..kernel.provider import Kernel
    return Kernel.from_files(list(paths), config)
