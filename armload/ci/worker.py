"""Checking one module, in a check worker (a forked process of ci/workers.py, the parent for
--jobs 1, or a Ray worker of ci/cluster.py): a `Worker` holds what the run shares (the kernel, the
plan, the options), the Session with the current dependency closure loaded, and the booted
kernel's fork server for that closure.

A module is checked in a Session into which its dependency closure is loaded first (in
dependency order), so every result is independent of scheduling and of `--jobs`, and workers
share nothing but the read-only kernel export table (inherited through fork). Records hold no
wall-clock data: timings travel separately under "_time"."""
from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass, field

from ..emu.limits import BOOTED_BUDGET as DEFAULT_BUDGET    # per load_module (loading and init), as run's
from ..emu.limits import BOOTED_TIMEOUT as DEFAULT_TIMEOUT  # wall clock per load: only a safety net
from ..kernel.modtree import ModuleInfo, Plan
from .booted import closure_inits, module_init
from .outcomes import OUTCOMES, apply_init, err_dict, first_line, init_class, loader_differs, mark_dependency_failed
from .selection import fingerprint

BOOTED_BUDGET = DEFAULT_BUDGET


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


class Worker:
    """One check worker's state for one run: made in the parent before the workers fork (they
    inherit it), or in a Ray worker per run (`run`: the run's id). A kernel used by an earlier
    Worker gets its simulated addresses back as they were before that use (close())."""

    def __init__(self, kernel, config, options: CheckOptions, plan: Plan, run: str | None = None):
        self.kernel, self.config, self.options, self.plan, self.run = kernel, config, options, plan, run
        self.stack = SessionStack()
        self._server = None                   # (pid, closure key, fork-server handle)
        if options.emulate and options.image:
            try:                              # restored once here: the workers fork from it
                self.booted_handle([])
            except Exception:
                pass                          # each module reports the failure (run_booted)

    def close(self) -> None:
        """The kernel's simulated addresses as before this worker's first load."""
        if self.stack.sims:
            sim_restore(self.kernel, self.stack.sims[0])

    def check_group(self, names: list[str]) -> list[dict]:
        try:
            return [self.check_one(n) for n in names]
        finally:
            self.release()

    def lost_record(self, name: str, why: str) -> dict:
        """The record of a module whose check worker died while checking it (ci/workers.py)."""
        rec = new_record(self.plan.modules[name])
        rec.update(outcome="internal", stage="worker", reason=why)
        return rec

    def check_one(self, name: str) -> dict:
        """The full pipeline for one module; returns a JSON-ready record with its wall-clock
        timings under "_time" (run_checks moves them out). Never raises."""
        plan, opts, stack = self.plan, self.options, self.stack
        info = plan.modules[name]
        rec = new_record(info)
        t0 = time.perf_counter()
        try:
            bad = stack.enter(self, plan.closure[name])
        except Exception as e:                     # a bug: start over with a fresh session
            stack.reset(self)
            bad = ("?", e)
        if bad is not None:                        # normally caught by the parent's skip logic
            d, e = bad
            msg = err_dict(e)["message"]
            mark_dependency_failed(rec, plan, d, f"failed to load: {first_line(msg)}", outcome="load")
            rec["error"] = {"message": f"{name}: dependency {d} failed to load: {msg}"}
            rec["_time"] = {"total": time.perf_counter() - t0}
            return rec
        session = stack.session
        t_deps = time.perf_counter()
        try:
            mod = session.load(info.path)
        except Exception as e:
            err = err_dict(e)
            rec.update(outcome="internal" if err["error"] == "InternalError" else "load", stage="load",
                       reason=first_line(err["message"]), error=err)
            rec["_time"] = {"deps": t_deps - t0, "load": time.perf_counter() - t_deps,
                            "total": time.perf_counter() - t0}
            return rec
        t_load = time.perf_counter()
        try:
            unload_last(session, mod)
        except Exception:
            stack.reset(self)
        rec.update(_module_record(mod))
        times = {"deps": t_deps - t0, "load": t_load - t_deps}
        times.update({f"load.{k}": v for k, v in mod.timings.items()})
        if opts.verify:
            t = time.perf_counter()
            try:
                from ..loader.verify import verify_module
                vr = verify_module(mod, self.kernel)
                rec["verify"] = {"ok": vr.ok, "branches": vr.branches_total, "branches_verified": vr.branches_ok,
                                 "via_plt": vr.via_plt, "plt_entries": vr.plt_total, "plt_verified": vr.plt_ok,
                                 "failures": [f.format() for f in (vr.branch_failures + vr.plt_failures)[:10]]}
                if not vr.ok:
                    fails = rec["verify"]["failures"]
                    rec.update(outcome="verify", stage="verify", reason=first_line(vr.summary()),
                               where=fails[0] if fails else None)
            except Exception as e:
                msg = err_dict(e)["message"]
                rec["verify"] = {"ok": False, "error": msg}
                rec.update(outcome="internal", stage="verify", reason=first_line(msg))
            times["verify"] = time.perf_counter() - t
        if opts.emulate:
            t = time.perf_counter()
            init = self.run_booted(info, [plan.modules[d] for d in plan.closure[name]])
            times["init"] = time.perf_counter() - t
            times["init.emulator"] = init.pop("elapsed", None)
            dep_inits = init.pop("dependency_inits", [])
            failed = [d for d in dep_inits if init_class(d) != "ok"]
            if failed:
                init["dependency_init_failures"] = failed
            rec["init"] = init
            if rec["outcome"] == "ok":
                apply_init(rec, init)
            differs = loader_differs(init)
            if differs and OUTCOMES[rec["outcome"]][0] != "harness":
                # the kernel's verdict stays in rec["init"]; the class says armload's loader is wrong
                rec.update(outcome="loader-differs", stage="compare", reason=differs[0], where=differs[1])
        times["total"] = time.perf_counter() - t0
        rec["_time"] = {k: v for k, v in times.items() if v is not None}
        return rec

    # --- the booted kernel ----------------------------------------------------------------------
    def run_booted(self, info, closure) -> dict:
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
            h = self.booted_handle(closure)
        except forkserver.ForkError as e:
            return {"status": "not-run", "reason": f"booted kernel: {str(e).strip().splitlines()[-1]}"}
        except Exception as e:
            return {"status": "not-run", "reason": f"booted kernel could not start: {err_dict(e)['message']}"}
        dep_inits, failed = h.info or ([], None)
        if failed is not None:
            return dict(failed, dependency_inits=dep_inits)
        try:
            return forkserver.fork_run(h, partial(module_init, info, self.options, dep_inits))
        except forkserver.ForkError as e:
            return {"status": "not-run", "reason": f"booted kernel: {str(e).strip().splitlines()[-1]}",
                    "dependency_inits": dep_inits}

    def booted_handle(self, closure):
        """This worker's fork-server handle for `closure`: the base restore for none, else a server
        holding the closure (one at a time: modules are checked in closure order)."""
        from functools import partial
        from ..emu.booted import forkserver
        opts = self.options
        base = forkserver.prepare([], vmlinuz=opts.image, kernel=self.kernel, config=self.config, tree=opts.tree)
        if not closure:
            return base
        key = tuple(d.name for d in closure)
        old = self._server
        if old is not None and old[1] == key and old[0] == os.getpid():
            return old[2]
        self.release()
        h = forkserver.prepare(closure, base=base, load=partial(closure_inits, opts))
        self._server = (os.getpid(), key, h)
        return h

    def release(self) -> None:
        """End this worker's closure server (its CPU time is then its parent's children's)."""
        old, self._server = self._server, None
        if old is not None and old[0] == os.getpid():
            from ..emu.booted import forkserver
            forkserver.close(old[2])


class SessionStack:
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

    def reset(self, w: "Worker") -> None:
        from ..loader.session import Session
        opts = w.options
        if self.sims:                # back to the kernel as it was before this stack loaded anything
            sim_restore(w.kernel, self.sims[0])
        self.session = Session(w.kernel, w.config, opts.placement, modversions=opts.modversions)
        self.names, self.mods, self.sims = [], [], [sim_state(w.kernel)]

    def rewind(self, kernel) -> None:
        """The simulated addresses as they were after the last module of the stack was loaded,
        so that a module's own imports get the same addresses whatever was checked before."""
        sim_restore(kernel, self.sims[len(self.names)])

    def enter(self, w: "Worker", closure: list[str]):
        """Make the session hold exactly `closure`; returns (dep name, error) on failure."""
        if self.session is None:
            self.reset(w)
        i = 0
        while i < len(self.names) and i < len(closure) and self.names[i] == closure[i]:
            i += 1
        while len(self.names) > i:
            unload_last(self.session, self.mods.pop())
            self.names.pop()
        del self.sims[len(self.names) + 1:]
        plan = w.plan
        for d in closure[i:]:
            self.rewind(w.kernel)
            try:
                m = self.session.load(plan.modules[d].path)
            except Exception as e:
                return d, e
            self.names.append(d)
            self.mods.append(m)
            self.sims.append(sim_state(w.kernel))
        self.rewind(w.kernel)
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


def new_record(info: ModuleInfo) -> dict:
    sha, bid = fingerprint(info)
    return {"module": info.rel, "name": info.name, "size": info.size, "depends": info.depends,
            "sha256": sha, "build_id": bid,
            "outcome": "ok", "stage": None, "reason": None, "where": None}



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
