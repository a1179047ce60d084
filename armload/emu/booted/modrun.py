"""Modules run inside the booted kernel, with armload's loader checked against the kernel's own.

For each module, in order (dependencies first), in one restored copy of the booted kernel:
1. the kernel's own `load_module` loads it (modload.kernel_load): its module_alloc, its relocation,
   its struct module, sysfs, parameters, ftrace and jump labels, then `do_init_module` runs init;
2. armload's loader loads the same `.ko` into a Session whose allocator hands out the addresses the
   kernel's module_alloc and per-cpu allocator returned (and whose temporary copy is the kernel's
   buffer), and the two images are compared byte for byte where the kernel has finished loading:
   as prepare_coming_module starts (ftrace_module_enable, before any MODULE_STATE_COMING notifier:
   relocation, kallsyms, module_finalize, ftrace_module_init and complete_formation done), every word but the jump-label notifier's;
   at do_init_module, the jump-label words (sorted table, key links, patched sites). Only struct
   module (`.gnu.linkonce.this_module`, the kernel's own object: list links, kobject, state,
   layouts) is left out, and the list links dynamic_debug_setup puts in each `__dyndbg_classes` entry.
   Every other differing word is an armload loader bug, reported with its
   section. What the other notifiers and parse_args write into module data afterwards (trace
   event types and lists, parameters) is the kernel running, counted but not compared. A refusal
   must be the kernel's refusal (same errno).
The verdict (init's return value, the kernel's own console lines and oops) is the kernel's.
"""
from __future__ import annotations

import os

import numpy as np
from unicorn import arm_const as A

from ...errors import ENOMEM, ArmloadError, LayoutError
from ...loader.elf import MODULE_NAME_LEN, MODULE_NAME_OFF, read_object
from ...kernel.kofile import module_stem, read_module
from ...loader.layout import ModuleAllocator
from ...loader.session import Session
from .hostile import status_of
from .kernel import CALL_BUDGET, BootedKernel, CallError
from .machine import GuestFault
from .decode import decode_result
from .result import LoaderCheck, Result
from ...kernel.modtree import alias_index, load_order, tree_index
from .modload import LOAD_BUDGET, KernelLoadResult, _signed, kernel_load, user_string

THIS_MODULE = ".gnu.linkonce.this_module"
DDEBUG_CLASS_MAP = 32                  # struct ddebug_class_map: list_head link (the kernel's), mod, mod_name, ...
O_NONBLOCK = 0o4000                    # rmmod's delete_module flags (ARM's O_NONBLOCK)
MAX_LISTED = 20                        # differing words listed per module (all are counted)
BootedResult = Result                  # the one result type (result.py)


def insmod_args(words) -> str:
    """insmod's argument string: words joined by spaces; a value with spaces quoted."""
    out = []
    for a in words:
        if " " in a and '"' not in a:
            k, eq, v = a.partition("=")
            a = f'{k}="{v}"' if eq else f'"{a}"'
        out.append(a)
    return " ".join(out)


class _Replay(ModuleAllocator):
    """module_alloc as the kernel answered it, in order; a size the kernel did not ask for is a
    layout difference and is recorded."""

    def __init__(self, config):
        super().__init__(config, "window")
        self.queue = []
        self.percpu = None
        self.mismatch: list[tuple[int, int]] = []

    def alloc(self, size: int) -> int:
        if not self.queue:
            raise ArmloadError(f"armload's layout asks module_alloc({size:#x}) where the kernel made no "
                               f"further allocation")
        a = self.queue.pop(0)
        if not a.base:
            raise LayoutError(f"module_alloc({size:#x}) failed in the booted kernel (its vmalloc returned NULL)",
                              errno=-ENOMEM)
        if a.size != size:
            self.mismatch.append((size, a.size))
        return a.base

    def alloc_percpu(self, size: int, align: int) -> int:
        if self.percpu is None or not self.percpu.base:
            raise ArmloadError(f"armload's layout asks for {size} bytes of per-cpu data where the kernel "
                               f"allocated none")
        if self.percpu.size != size:
            self.mismatch.append((size, self.percpu.size))
        return self.percpu.base

    def free(self, base: int) -> None:
        pass

    def free_percpu(self, base: int) -> None:
        pass


def package_tree(vmlinuz: str) -> str | None:
    """The module tree of the Debian package a vmlinuz came from (boot/vmlinuz-REL ->
    lib/modules/REL/kernel), where modprobe would look; None when it is not there."""
    rel = os.path.basename(vmlinuz).removeprefix("vmlinuz-")
    d = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(vmlinuz))), "lib", "modules", rel, "kernel")
    return d if rel and os.path.isdir(d) else None


# struct subprocess_info (include/linux/umh.h, 32-bit, no LOCKDEP): work_struct (16), complete,
# path, argv, envp, wait, retval, init, cleanup, data
UMH_PATH, UMH_ARGV, UMH_CLEANUP = 20, 24, 44
REQUEST_BUDGET = 1_000_000_000        # instructions per module modprobe loads (its load_module and init)
MODPROBE_FAILED = 1 << 8               # modprobe's exit status 1, as call_usermodehelper_exec returns it
UMH_WAIT_PROC, UMH_WAIT_MASK = 2, 0x3  # include/linux/umh.h: UMH_NO_WAIT 0, EXEC 1, PROC 2; KILLABLE 4


class BootedRun:
    """One restored copy of the booted kernel with modules loaded into it in order.

    User space is not simulated, with one exception: when the kernel runs its usermode helper
    /sbin/modprobe (request_module: `call_usermodehelper_exec`), armload does what modprobe does,
    inside the same kernel: it finds the module by name or by a `.modinfo` alias in `tree` and
    loads it, dependencies first, with the kernel's own load_module; the helper then returns
    modprobe's exit status (0, or 1 << 8 when nothing could be loaded). Every request is recorded
    in `requests`. Without a tree, a request fails as modprobe would without the module."""

    def __init__(self, vmlinuz: str, kernel, config, cmdline: str | None = None, tree: str | None = None):
        kw = {} if cmdline is None else {"cmdline": cmdline}
        self.bk = BootedKernel.get(vmlinuz, **kw)
        self.session = Session(kernel, config)
        self.replay = _Replay(config)
        self.session.allocator = self.replay
        self.session.kernel_word = self.bk.u32
        self.results: list[BootedResult] = []
        self.tree = tree
        self._index = None
        self._aliases = None
        self.requests: list[dict] = []
        self.loading: set[str] = set()         # modules whose load_module is running (nested requests skip them)
        self.pending: list[dict] = []          # request_module_nowait requests, served after the current load
        self.budget = LOAD_BUDGET
        self.coming: list = []                 # fn(module name) at do_init_module's entry (on_coming)
        self.exit_stopped = ""                 # why the last unload did not return
        self.dead: str | None = None           # what pid 1 died in (an oops): nothing more runs in it
        self._resume = None                    # the struct module whose coming stop is to be resumed
        umh = self.bk.image.symbols.get("call_usermodehelper_exec")
        if umh:
            self.bk.hook_code(umh, self._umh)
        self.bk.service_handler = self._serve
        self.bk.watch.modules = lambda: self.session.modules      # names in a stop's text

    def on_coming(self, fn) -> None:
        """Call fn(name) when a module is formed and about to run its init (do_init_module's entry,
        state MODULE_STATE_COMING): the host may then call into the kernel (register probes on the
        module's functions, its init included) before init runs."""
        if not self.coming:
            dim = self.bk.image.symbols["do_init_module"]
            self.bk.hook_code(dim, self._coming_hook)
        self.coming.append(fn)

    def _coming_hook(self, uc, addr, size, _):
        mod = uc.reg_read(A.UC_ARM_REG_R0)
        # the first hit after the stop is its resumption at the same entry. Not every later hit with
        # that address: a module whose init failed is freed, and the next one's struct module may be
        # there (crct10dif_generic after crct10dif_arm_ce, both request_module'd by crc-t10dif's init)
        if mod == self._resume:
            self._resume = None
            return
        self._resume = mod
        sm = self.session.config.struct_module        # the kernel's layout; else state (4) + list (8)
        self.bk.m.service = {"coming": self.bk.cstr(mod + (sm.name if sm else MODULE_NAME_OFF), MODULE_NAME_LEN)}
        uc.emu_stop()

    def load(self, path: str, params: str | list[str] = "", budget: int = LOAD_BUDGET,
             timeout: float | None = None) -> BootedResult:
        """The kernel's load_module of `path` (init included), with armload's image checked against the
        kernel's. `params`: insmod's argument string, or its words (a value with spaces is quoted, as
        the kernel's next_arg reads it). `timeout`: the wall-clock safety net (seconds; status
        "stopped" when it ends the load)."""
        if not isinstance(params, str):
            params = insmod_args(params)
        if self.dead is not None:
            return BootedResult(os.path.basename(path).removesuffix(".ko"), path, None, "refused-dead", [], "", 0,
                                loader=LoaderCheck(), stopped=f"pid 1 died in an oops in {self.dead}: no "
                                                              f"further load runs in this kernel")
        self.budget = budget
        self._resume = None                    # a coming stop a stopped load left is not this load's
        with open(path, "rb") as f:
            ko = f.read()
        busy = module_stem(path)
        self.loading.add(busy)
        from .call import Watchdog
        try:
            with Watchdog(self.bk.m, timeout) as wd:
                r = kernel_load(self.bk, ko, params, name=os.path.basename(path), budget=budget)
        finally:
            self.loading.discard(busy)
        check, name = self._check(path, ko, r)
        status = status_of(r.ret, r.core_bytes, r.oops_text, r.stopped, r.console_lines)
        if r.ret is None and wd.fired:
            status = "stopped"                          # the wall-clock safety net, not the module
        r.stopped = self.bk.watch.named(r.stopped)    # a spin's address with armload's module symbol
        res = BootedResult(name, path, r.ret, status, r.console_lines, r.oops_text, r.instructions, r.core_base,
                           r.init_base, check, r.stopped, decompressed_by=r.decompressed_by)
        decode_result(res, self.session.modules, self.session.kernel.vmlinux_debug)
        self.results.append(res)
        if res.status == "returned" and res.ret and r.core_bytes:
            self._forget(name)        # do_init_module's fail_free_freeinit: init failed, the kernel freed it
        if status not in ("returned", "refused"):   # an oops, a panic, or a hostile end (hostile.py)
            self.dead = f"{name}: init"
        while self.pending and not self.bk.servicing and res.status == "returned":
            self._modprobe(self.pending.pop(0))
        return res

    def _forget(self, name: str) -> None:
        mod = next((m for m in self.session.modules if m.name == name), None)
        if mod is not None:
            self.session.forget(mod)

    def call(self, name: str, *args, budget: int | None = None, timeout: float | None = None) -> BootedResult:
        """`name(*args)` of a loaded module from pid 1's kernel context (call.py): int, str, bytes and
        call.Buffer arguments; the Result's ret is r0 (signed), an oops is the kernel's."""
        from .call import call
        return call(self, name, *args, budget=budget or CALL_BUDGET, timeout=timeout)

    def live(self) -> set[str]:
        """Modules whose load_module returned 0 (init ran and its memory is freed)."""
        return {r.name for r in self.results if r.ok}

    def unload(self, name: str) -> tuple[int | None, list[str]]:
        """delete_module(name, O_NONBLOCK) as rmmod calls it: the module's exit and the kernel's
        own freeing. Returns (ret, console lines); ret None when it did not return (exit_stopped says why)."""
        if self.dead is not None:
            raise ArmloadError(f"delete_module({name}): pid 1 died in an oops in {self.dead}; nothing more runs in it")
        mark = len(self.bk.console)
        try:
            ret = _signed(self.bk.call("sys_delete_module", user_string(self.bk, name), O_NONBLOCK))
        except (CallError, GuestFault) as e:          # an exit that never returns (hostile.py's stops)
            self.exit_stopped = str(e)
            self.dead = f"{name}: exit"
            return None, self.bk.console[mark:]
        if ret == 0:                  # gone from the kernel: its exports and memory from armload's session
            self._forget(name.replace("-", "_"))
        return ret, self.bk.console[mark:]

    # --- /sbin/modprobe ----------------------------------------------------------------------------
    def _umh(self, uc, addr, size, _):
        info = uc.reg_read(A.UC_ARM_REG_R0)
        path = self.bk.cstr(self.bk.u32(info + UMH_PATH), 64)
        if not path.endswith("/modprobe"):
            return                                     # another helper: the kernel's own path runs
        argv, at = [], self.bk.u32(info + UMH_ARGV)
        for i in range(8):
            p = self.bk.u32(at + 4 * i)
            if not p:
                break
            argv.append(self.bk.cstr(p, 128))
        self.bk.m.service = {"helper": path, "argv": argv, "info": info, "wait": uc.reg_read(A.UC_ARM_REG_R1)}
        uc.emu_stop()

    def _serve(self, req: dict) -> int | None:
        if "coming" in req:
            for fn in self.coming:
                fn(req["coming"])
            return None                        # do_init_module goes on
        if req["wait"] & UMH_WAIT_MASK != UMH_WAIT_PROC:
            # request_module_nowait (UMH_WAIT_EXEC): the kernel does not wait for modprobe to finish,
            # which runs once the caller is done (here: after the current top-level load), as a
            # separate process would
            self.pending.append(req)
            return 0
        return self._modprobe(req)

    def _modprobe(self, req: dict) -> int:
        want = req["argv"][-1] if req["argv"] else ""
        found = self._resolve(want)
        rec = {"request": want, "argv": req["argv"], "modules": [], "status": 0}
        loaded = {r.name for r in self.results if r.ok} | self.loading   # insmod of a module being loaded: EEXIST
        ok = False
        for path in found:
            for p in load_order(path, self.index):
                name = module_stem(p)
                if name in loaded:
                    continue
                r = self.load(p, budget=min(self.budget, REQUEST_BUDGET))
                rec["modules"].append({"module": r.name, "status": r.status, "ret": r.ret})
                if not r.ok:
                    break
                loaded.add(name)
            else:
                ok = True
        rec["status"] = 0 if ok else MODPROBE_FAILED
        if not found:
            rec["note"] = "no module of that name or alias in the tree" if self.tree else "no module tree given"
        self.requests.append(rec)
        cleanup = self.bk.u32(req["info"] + UMH_CLEANUP)        # call_usermodehelper_freeinfo
        if cleanup:
            self.bk.call(cleanup, req["info"])
        self.bk.kfree(req["info"])
        return rec["status"]

    @property
    def index(self) -> dict[str, str]:
        if self._index is None:
            self._index = tree_index(self.tree) if self.tree else {}
        return self._index

    @property
    def aliases(self):
        """The tree's modules.alias (kernel/modtree.Aliases), read once: the fork server computes it
        before forking (forkserver.warm), so the forks share it."""
        if self._aliases is None:
            self._aliases = alias_index(self.index)
        return self._aliases

    def _resolve(self, want: str) -> list[str]:
        """modprobe's lookup: a module name (dashes as underscores), else every module one of whose
        `alias=` patterns matches (fnmatch, as modules.alias is used), in name order."""
        if not want or not self.tree:
            return []
        name = want.replace("-", "_")
        if name in self.index:
            return [self.index[name]]
        return self.aliases.lookup(want)

    def settle(self, budget_ns: int) -> dict:
        """Deferred work (kthreads, workqueues, timers, softirqs, RCU) under the kernel's scheduler."""
        mark = len(self.bk.console)
        out = self.bk.run_until_idle(budget_ns)
        out["console"] = self.bk.console[mark:]
        return out

    # --- the loader against the kernel ------------------------------------------------------
    def _check(self, path: str, ko: bytes, r: KernelLoadResult) -> tuple[LoaderCheck, str]:
        chk = LoaderCheck()
        name = module_stem(path)
        self.replay.queue = list(r.allocs)
        self.replay.percpu = r.percpu
        self.replay.mismatch = []
        if r.hdr:
            self.session.temp_copy_base = r.hdr
        try:
            mod = self.session.load(path, ko)
        except ArmloadError as e:
            try:
                name = read_object(path, ko).name
            except ArmloadError:
                pass                          # not even a module armload can name: keep the file's
            chk.refusal = str(e)
            chk.identical = False
            kernel_refused = not r.core_bytes and r.ret is not None and r.ret < 0
            chk.agrees = kernel_refused and (e.errno is None or e.errno == r.ret)
            return chk, name
        if not r.core_bytes and not r.formed:  # the kernel's loader refused, armload's accepted
            chk.agrees = chk.identical = False
            self.session.forget(mod)
            return chk, mod.name
        if not r.core_bytes:
            # Refused after loading (parse_args, sysfs, a notifier): the image is compared as formed;
            # the module is gone from the kernel, so it goes from armload's session too.
            self.session.forget(mod)
        for size, ksize in self.replay.mismatch:
            self._diff(chk, None, "(allocation size)", f"{size:#x}", f"{ksize:#x}")
        skip = [(s.addr, s.addr + s.size) for s in mod.sections if s.name == THIS_MODULE]
        for s in mod.sections:        # dynamic_debug_setup links each class map into the kernel's list
            if s.name == "__dyndbg_classes":
                skip += [(a, a + 8) for a in range(s.addr, s.addr + s.size - DDEBUG_CLASS_MAP + 1, DDEBUG_CLASS_MAP)]
        fin = mod.finalized
        final = dict(r.snaps or ((r.core_base, r.core_bytes), (r.init_base, r.init_bytes))) if r.core_bytes \
            else dict(r.formed)
        formed = dict(r.formed) if r.formed else final
        jump_final = bool(r.core_bytes)       # refused before do_init_module: the jump words are not compared
        for base, kb in final.items():
            if not kb:
                continue
            ours = next((x for x in mod.regions if x.base == base), None)
            if ours is None:
                self._diff(chk, base, "(allocation)", "none", f"{len(kb):#x} bytes")
                continue
            n = min(len(ours.data), len(kb)) // 4 * 4
            chk.compared += n
            a = np.frombuffer(bytes(ours.data[:n]), dtype="<u4")
            k = np.frombuffer(kb[:n], dtype="<u4")
            e = np.frombuffer(formed.get(base, kb)[:n], dtype="<u4")
            addrs = base + 4 * np.arange(n // 4, dtype=np.int64)
            keep = np.ones(n // 4, dtype=bool)
            for lo, hi in skip:                                    # struct module: the kernel's own
                keep &= (addrs < lo) | (addrs >= hi)
            jumped = np.zeros(n // 4, dtype=bool)
            if fin is not None:
                jumped = (addrs >= fin.jump_table[0]) & (addrs < fin.jump_table[1])
                jumped |= np.isin(addrs, np.fromiter(fin.jump_words, dtype=np.int64, count=len(fin.jump_words)))
            if not jump_final:
                keep &= ~jumped
            theirs = np.where(jumped, k, e)
            chk.runtime_words += int((keep & ~jumped & (e != k)).sum())
            for i in np.flatnonzero(keep & (a != theirs)).tolist():
                addr = base + 4 * i
                sec = mod.section_at(addr)
                self._diff(chk, addr, sec.name if sec is not None else "(symbol tables)",
                           int(a[i]).to_bytes(4, "little").hex(), int(theirs[i]).to_bytes(4, "little").hex())
        return chk, mod.name

    @staticmethod
    def _diff(chk: LoaderCheck, addr, section: str, ours: str, theirs: str) -> None:
        chk.identical = False
        chk.differences += 1
        chk.by_section[section] = chk.by_section.get(section, 0) + 1
        if len(chk.listed) < MAX_LISTED:
            chk.listed.append({"addr": addr, "section": section, "armload": ours, "kernel": theirs})
