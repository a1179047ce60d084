"""The sanitizers attached to a BootedRun: the hooks and the events they turn into reports.

Hooks (BootedKernel.hook_code), installed before the first module loads:
- the module's memory as modmem.ModuleMemory sees it allocated and freed, do_init_module's
  entry (BootedRun.on_coming: the module's code hooks are added there, before init runs) and
  the instruction after do_init_module's `bl do_one_initcall` (init returned: locks still held,
  the leak scan);
- the entries of the allocators, the frees, the lock and sleeping functions and the kernel's
  mem*/str*/copy_*_user (checked when the module calls them);
- one code hook per module allocation that holds code (6.1: core, init; 6.4+: MOD_TEXT and
  MOD_INIT_TEXT): the module's own instructions; a load or store is decoded once (access.py) and
  checked against the heap shadow (heap.py), the stack arrays of the module's live frames
  (stack.py) and the spinlocks it holds (locks.py). The same hook sees the module's call sites
  run again when an allocator or trylock returns to them.
No hook runs Python for kernel instructions other than those entry points.
The allocator, free, mem*/str* and stack-array hooks are in heap_hooks.py, the lock and sleeper
hooks in lock_hooks.py (mixins of Sanitizer).
"""
from __future__ import annotations

import struct

from unicorn import UC_HOOK_CODE
from unicorn import arm_const as A

from ..booted import modmem
from ..booted.modmem import ModuleMemory, bl_sites
from ..hw import cpu
from . import heap as H
from . import locks as L
from .access import SP, cond_passes, decode
from .report import CLASSES, Report, Symbolizer
from .stack import StackFrames
from .support import SanitizerUnsupported, buckets, unsupported
from . import native as N
from .heap_hooks import FREES, MEMFUNCS, STRING_ALLOCS, HeapHooks, alloc_table
from .lock_hooks import TPIDRURO, LockHooks

R0, R1, R2, R3 = A.UC_ARM_REG_R0, A.UC_ARM_REG_R1, A.UC_ARM_REG_R2, A.UC_ARM_REG_R3
INIT_FRAME = 0x100                # do_init_module's own frame at its initcall's return (0x18 on armmp)
LR, PC, CPSR = A.UC_ARM_REG_LR, A.UC_ARM_REG_PC, A.UC_ARM_REG_CPSR
LIVE_AT_RETURN = (R0, A.UC_ARM_REG_R4, A.UC_ARM_REG_R5, A.UC_ARM_REG_R6, A.UC_ARM_REG_R7, A.UC_ARM_REG_R8,
                  A.UC_ARM_REG_R9, A.UC_ARM_REG_R10, A.UC_ARM_REG_R11)     # the result and callee-saved


class Sanitizer(HeapHooks, LockHooks):
    """KASAN-, kmemleak- and lockdep-class detectors on the booted kernel for the modules a
    BootedRun loads. `classes`: a subset of report.CLASSES."""

    def __init__(self, run, classes=CLASSES):
        self.run, self.bk = run, run.bk
        self.uc = self.bk.m.uc
        self.classes = set(classes)
        img = self.bk.image
        self.sym = img.symbols
        from ...kernel.identity import identify
        self.config = identify(img.path).config
        why = unsupported(self.sym, self.config)
        if why:
            raise SanitizerUnsupported(f"the sanitizers cannot watch {img.path.rsplit('/', 1)[-1]}: {why}")
        self.reports: list[Report] = []
        self.errors: list[str] = []           # exceptions inside the C hook's Python events
        self._seen: set = set()
        self.mods: list[dict] = []            # name, regions (modmem.Region), hooks, pages, early
        self._ranges: list[tuple[int, int, str]] = []
        self._lo, self._hi = 0xFFFFFFFF, 0
        self._allocs: list[tuple[int, int]] = []    # module memory (base, size) since the last formed module
        self.decoded: dict[int, object] = {}
        self.pending: dict[int, list] = {}    # return address -> [(sp, fn, data)]
        self.heap = H.HeapShadow()
        self.locks = L.LockState()
        self.spins: dict[int, str] = {}       # spin/rwlocks the module has taken -> kind (their unlock is inline)
        self.path = None                     # the top-level module being loaded (load())
        self.frames = StackFrames()
        self.symbolizer = Symbolizer(self.bk, lambda: self.run.session.modules + self._early_mods())
        self.counts = {"accesses": 0, "allocs": 0, "frees": 0}
        self._comm_off = self._pid_off = None
        self.classes_kmalloc, self.cache_fields = [], None
        if {"heap", "leak"} & self.classes:
            self.classes_kmalloc = H.kmalloc_classes(self.bk)
            self.cache_fields = H.cache_fields(self.bk.u32, self.bk.cstr, img.address("kmalloc_caches") or 0)
            if self.cache_fields is None:
                raise SanitizerUnsupported(f"the sanitizers cannot watch {img.path.rsplit('/', 1)[-1]}: struct "
                                           "kmem_cache's size, object_size and name were not found in its "
                                           "kmalloc-64, -128 and -256 caches")
        self._task_offsets()
        self._hooks = []
        self.native = N.lib()                 # the C module-text hook, else the Python one
        self._event_cb = N.EVENT(self._native_event) if self.native else None
        self.nranges: list = []               # native.NativeRange per hooked allocation
        self.entries = N.EntryHooks(self.bk, N.tail_called(img)) if self.native else None
        self._install()
        run.on_coming(self._coming)

    # --- set-up ---------------------------------------------------------------------------------
    def _hook(self, name_or_addr, fn, mode=N.F_ALWAYS, arg=0):
        """A hook at a kernel address; with the C library, its Python runs only when `mode`'s
        filter passes (native.EntryHooks), else always (the handlers filter the same way)."""
        a = name_or_addr if isinstance(name_or_addr, int) else self.sym.get(name_or_addr)
        if a:
            if self.entries is not None:
                self.entries.add(a, fn, mode, arg)
            else:
                self._hooks.append(self.bk.hook_code(a, fn))
        return a

    def _filters_changed(self) -> None:
        if self.entries is None:
            return
        f = self.entries.f
        f.heap_lo, f.heap_hi = (self.heap.lo, self.heap.hi) if len(self.heap) else (0xFFFFFFFF, 0)
        f.freed = 1 if self.heap.freed_by_cache and any(self.heap.freed_by_cache.values()) else 0
        f.held = sum(1 for hs in self.locks.held.values() for h in hs if h.kind in L.NO_SLEEP_KINDS)
        f.held_any = sum(len(hs) for hs in self.locks.held.values())
        self.entries.set_ranges([(lo, hi) for lo, hi, _ in self._ranges])
        # kernel code can now make these entries' calls matter: hooks of their own (EntryHooks)
        self.entries.promote({m for m, on in ((N.F_PTR, f.heap_lo < f.heap_hi), (N.F_LR_OR_FREED, f.freed),
                                              (N.F_LR_OR_HELD, f.held), (N.F_LR_OR_HELD_ANY, f.held_any)) if on})

    def _install(self):
        self.mm = ModuleMemory.of(self.bk)
        self.mm.on_alloc.append(self._module_alloc)
        self.mm.on_free.append(self._module_memfree)
        dim, doi = self.sym["do_init_module"], self.sym["do_one_initcall"]
        end = dim + 0x400
        for site in bl_sites(self.bk.image, doi):
            if dim <= site < end:
                self._hook(site + 4, self._init_returned)
        heapish = {"heap", "leak"} & self.classes
        if heapish:
            for name, spec in alloc_table(buckets(self.config)).items():
                self._hook(name, self._alloc_entry(name, spec), N.F_LR_OR_FREED)
            for name, arg in STRING_ALLOCS.items():
                self._hook(name, self._stralloc_entry(name, arg), N.F_LR_OR_FREED)
            for name, arg in FREES.items():
                self._hook(name, self._free_entry(name, arg), N.F_PTR, arg)
            for name in ("kmem_cache_alloc_bulk", "kmem_cache_alloc_bulk_noprof"):
                self._hook(name, lambda uc, a, s, _: self.heap.kernel_allocates("any") and self.heap_changed(),
                           N.F_LR_OR_FREED)
            self._hook("ksize", self._ksize, N.F_LR)
        if {"heap", "stack"} & self.classes:
            for name, args in MEMFUNCS.items():
                self._hook(name, self._memfunc(name, args), N.F_LR)
        if "locks" in self.classes:
            for name, (kind, op) in L.LOCK_FUNCS.items():
                mode = N.F_LR_OR_HELD_ANY if op == "release" else N.F_LR_OR_HELD if kind == "mutex" else N.F_LR
                self._hook(name, self._lock_entry(name, kind, op), mode)
            for name in L.SLEEPERS:
                if name not in L.LOCK_FUNCS:
                    self._hook(name, self._sleeper(name), N.F_LR_OR_HELD)

    def _task_offsets(self):
        """task_struct's comm and pid, found in pid 1's (comm "init") against init_task's
        ("swapper/0", pid 0): the first offsets where both read as expected."""
        cur = cpu.cp_read(self.uc, TPIDRURO)
        it = self.bk.image.address("init_task")
        if not cur or not it:
            return
        blob, base = self.bk.read(cur, 0x800), self.bk.read(it, 0x800)
        c = blob.find(b"init\0")
        if c > 0 and base[c:c + 10] == b"swapper/0\0":
            self._comm_off = c
        import struct as S
        for o in range(0, c if c > 0 else 0x700, 4):
            if S.unpack_from("<2i", blob, o) == (1, 1) and S.unpack_from("<2i", base, o) == (0, 0):
                self._pid_off = o
                break

    def task_name(self, task: int | None = None) -> str:
        task = task if task is not None else cpu.cp_read(self.uc, TPIDRURO)
        if self._comm_off is None or self._pid_off is None:
            return f"task {task:#x}"
        comm = self.bk.read(task + self._comm_off, 16).split(b"\0")[0].decode("latin-1")
        return f"{comm}/{self.bk.u32(task + self._pid_off)}"

    def task_pid(self) -> str:
        return self.task_name().rsplit("/", 1)[-1]

    def _early_mods(self):
        return [m["early"] for m in self.mods if m.get("early") is not None
                and m["early"] not in self.run.session.modules]

    # --- modules --------------------------------------------------------------------------------
    def _module_alloc(self, a) -> None:
        self._allocs.append((a.base, a.size))

    def _module_memfree(self, base: int) -> None:
        """module_memfree(base) / execmem_free(base): a module's init memory (after init, or a module
        with no init function) or core memory is freed: the hooks on it go before other code is
        placed there."""
        for rec in self.mods:
            for r in rec["regions"]:
                if r.base == base and not r.dropped:
                    self._drop(rec, r)

    def _regions(self, allocs, mod: int) -> list:
        """The module's allocations as modmem.Regions: 6.1's core and init, or (6.4+) one per memory
        type, read from its struct module at `mod`; all taken as core code when it does not say."""
        if self.run.session.config.layout != "6.4":
            return modmem.regions_61(allocs)
        home = next(((b, n) for b, n in allocs if b <= mod < b + n), None)
        if home is not None:
            n = min(home[0] + home[1] - mod, 0x800) // 4
            words = list(struct.unpack(f"<{n}I", self.bk.read(mod, 4 * n)))
            regions = modmem.regions_64(words, mod, allocs)
            if regions is not None:
                return regions
        self.errors.append(f"cannot tell the memory types of the module at {mod:#x} from its struct module: "
                           "all of its allocations are taken as core code")
        return [modmem.Region(b, n, False, True) for b, n in allocs]

    def _coming(self, name: str) -> None:
        allocs, self._allocs = self._allocs, []
        if not allocs:
            return
        regions = self._regions(allocs, self.uc.reg_read(R0))     # do_init_module(mod)
        rec = {"name": name, "regions": regions, "allocs": allocs, "hooks": [],
               "pages": [p for r in regions for p in self._pages((r.base, r.size))], "early": None,
               "sp": self.uc.reg_read(SP)}                # do_init_module's entry: its frame is below
        for r in regions:
            if not r.text:
                continue
            base, size = r.base, r.size
            for a in [k for k in self.decoded if base <= k < base + size]:
                del self.decoded[a]
            if self.native:
                nr = N.NativeRange(self.uc, base, self.bk.m.read(base, size), self._event_cb,
                                   N.heap_arrays(self.heap.objs), self.entries.f)
                nr.set_spins(self.spins)
                nr.name = name
                self.nranges.append(nr)
                rec["hooks"].append(nr)
            else:
                h = self.uc.hook_add(UC_HOOK_CODE, self._code, begin=base, end=base + size - 1)
                rec["hooks"].append(h)
                rec.setdefault("py_hooks", {})[h] = base
            self.bk.m.drop_blocks(base, size)
            self._ranges.append((base, base + size, name))
        self._lo = min(r[0] for r in self._ranges)
        self._hi = max(r[1] for r in self._ranges)
        self._filters_changed()
        self.mods.append(rec)
        if "stack" in self.classes:
            self._early_load(rec)

    def _pages(self, alloc) -> list[tuple[int, int]]:
        base, size = alloc
        out = []
        for va in range(base & ~0xFFF, base + size, 0x1000):
            try:
                out.append((self.bk.m.translate(va), 0x1000))
            except Exception:
                pass
        return out

    def _early_load(self, rec) -> None:
        """armload's loader on the module now (before init), at the kernel's addresses, for its
        DWARF frames and unwind tables: only a module with .debug_info (Debian's have none)."""
        path = self.path if self.path and rec["name"] == self._path_name else None
        if not path:
            return
        from elftools.elf.elffile import ELFFile
        with _module_stream(path) as f:
            if ELFFile(f).get_section_by_name(".debug_info") is None:
                return
        from ...loader.session import Session
        from ..booted.modmem import Alloc
        from ..booted.modrun import _Replay
        s = Session(self.run.session.kernel, self.run.session.config)
        s.export_tables = list(self.run.session.export_tables)
        s.kernel_word = self.bk.u32
        rp = _Replay(self.run.session.config)
        rp.queue = [Alloc(n, b) for b, n in rec["allocs"]]      # in the order load_module asked for them
        s.allocator = rp
        try:
            mod = s.load(path)
        except Exception as e:                      # the stack detector says it did not run
            rec["stack_note"] = f"stack detector off for {rec['name']}: armload's loader: {e}"
            return
        rec["early"] = mod
        hi = max(r[1] for r in self._ranges if r[2] == rec["name"])
        lo = min(r[0] for r in self._ranges if r[2] == rec["name"])
        rec["stack_funcs"] = self.frames.add_module(mod, lo, hi)
        for h in rec["hooks"]:
            if isinstance(h, N.NativeRange) and rec["stack_funcs"]:
                h.s.stack_check = 1

    def load(self, path: str, params: str = "", **kw):
        """BootedRun.load with this module's path known (the stack detector's early load)."""
        from ...loader.elf import read_object
        self.path, self._path_name = path, read_object(path).name
        try:
            r = self.run.load(path, params, **kw)
        finally:
            self.path = None
        for rec in self.mods:
            if rec.get("init_done"):
                self.drop_init(rec["name"])
        return r

    _path_name = ""

    def module_of(self, a: int) -> str | None:
        if self._lo <= a < self._hi:
            for lo, hi, name in self._ranges:
                if lo <= a < hi:
                    return name
        return None

    def drop_init(self, name: str) -> None:
        """The init allocations are freed after init: their hooks go."""
        for rec in self.mods:
            if rec["name"] == name:
                for r in rec["regions"]:
                    if r.init and not r.dropped:
                        self._drop(rec, r)

    def module_gone(self, name: str) -> None:
        for rec in self.mods:
            if rec["name"] == name:
                for r in rec["regions"]:
                    if not r.dropped:
                        self._drop(rec, r)

    def _drop(self, rec, region) -> None:
        base = region.base
        region.dropped = True
        for h in [h for h in rec["hooks"] if getattr(h, "base", None) == base or rec.get("py_hooks", {}).get(h) == base]:
            rec["hooks"].remove(h)
            self._unhook(h)
        self._ranges = [r for r in self._ranges if r[0] != base]
        self._filters_changed()

    def _unhook(self, h) -> None:
        if isinstance(h, N.NativeRange):
            h.delete(self.uc)
            self.nranges.remove(h)
        else:
            self.uc.hook_del(h)

    def heap_changed(self) -> None:
        """The C hook's copy of the shadow, after an object came, went or was freed."""
        self._filters_changed()
        if self.nranges:
            arrays = N.heap_arrays(self.heap.objs)
            for nr in self.nranges:
                nr.set_heap(arrays)

    def _native_event(self, kind, pc, ea, size, write, basereg) -> None:
        uc = self.uc
        try:
            if kind == N.EV_FLAG:
                p = self.pending.get(pc)
                if p is not None:
                    self._returned(uc, pc, p)
            elif kind == N.EV_HEAP:
                self.counts["accesses"] += 1
                if "heap" in self.classes:
                    hit = self.heap.check(ea, size)
                    if hit:
                        self._heap_report(uc, hit, ea, size, bool(write), pc)
            elif kind == N.EV_SPIN:
                self._maybe_inline_unlock(uc, ea, pc, size)
            elif kind == N.EV_STACK and "stack" in self.classes:
                from .access import _UC
                self._stack_check(uc, uc.reg_read(_UC[f"r{basereg}"] if basereg < 13 else _UC["lr"]), ea, size,
                                  bool(write), pc, None)
        except Exception as e:                        # an exception cannot cross the C hook
            self.errors.append(f"{type(e).__name__}: {e}")

    # --- the module's instructions -------------------------------------------------------------
    def _code(self, uc, addr, size, _):
        p = self.pending.get(addr)
        if p is not None:
            self._returned(uc, addr, p)
        d = self.decoded.get(addr, 0)
        if d == 0:
            d = self.decoded[addr] = decode(self.bk.m.read(addr, 4), addr) if size == 4 else None
        if d is None:
            return
        if d.cond != 14 and not cond_passes(d.cond, uc.reg_read(CPSR)):
            return
        ea = d.address(uc)
        self.counts["accesses"] += 1
        if self.heap.lo <= ea < self.heap.hi and "heap" in self.classes:
            hit = self.heap.check(ea, d.size)
            if hit:
                self._heap_report(uc, hit, ea, d.size, d.write, addr)
        if d.write and d.size in (2, 4) and self.spins:
            self._maybe_inline_unlock(uc, ea, addr, d.size)
        if self.frames and d.base != SP and "stack" in self.classes:
            sp = uc.reg_read(SP)
            if sp <= ea < (sp | 0x1FFF) + 1:
                self._stack_check(uc, uc.reg_read(d.base), ea, d.size, d.write, addr, None)

    def _expect(self, lr: int, sp: int, fn, data) -> None:
        self.pending.setdefault(lr & ~1, []).append((sp, fn, data))
        for nr in self.nranges:
            if nr.flag(lr & ~1, True):
                break

    def _returned(self, uc, addr, plist) -> None:
        sp = uc.reg_read(SP)
        for i, (want, fn, data) in enumerate(plist):
            if want == sp:
                plist.pop(i)
                if not plist:
                    del self.pending[addr]
                    for nr in self.nranges:
                        nr.flag(addr, False)
                fn(uc, data)
                return

    # --- reports --------------------------------------------------------------------------------
    def add(self, rep: Report, key) -> None:
        if key in self._seen:
            return
        self._seen.add(key)
        self.reports.append(rep)

    # --- init / exit returned -----------------------------------------------------------------------
    def init_frame(self, sp: int):
        """The module whose do_init_module frame holds `sp`: its entry SP at most INIT_FRAME above sp
        (of equal ones the latest), not yet returned; None for a module the sanitizers did not see
        come. Not simply the last module formed: a module with no init never returns from an
        initcall, and request_module loads modules inside another's init (crc-t10dif's init loads
        crct10dif-*)."""
        best = None
        for m in self.mods:
            if not m.get("init_done") and 0 <= m["sp"] - sp <= INIT_FRAME and (best is None or m["sp"] <= best["sp"]):
                best = m
        return best

    def _init_returned(self, uc, addr, size, _):
        rec = self.init_frame(uc.reg_read(SP))
        if rec is None:
            return
        rec["init_done"] = True
        ret = uc.reg_read(R0)
        rec["init_ret"] = ret - (1 << 32) if ret & 0x80000000 else ret
        self.returned_to_user(uc, rec["name"], "init")
        if "leak" in self.classes:
            going = rec["pages"] if rec["init_ret"] != 0 else [p for r in rec["regions"] if r.init
                                                                for p in self._pages((r.base, r.size))]
            self.leak_scan(uc, "init", excluded=going, module=rec["name"])
        # init's text is freed after init (and the whole module when init failed): its hooks go now,
        # before another module's code can be placed there
        if rec["init_ret"] != 0:
            self.module_gone(rec["name"])
        else:
            self.drop_init(rec["name"])

    def leak_scan(self, uc=None, when: str = "on demand", excluded=(), module: str | None = None) -> list[Report]:
        from .leak import scan
        uc = uc or self.uc
        live = [o for o in self.heap.live() if not o.leak_reported and (module is None or o.module == module)]
        if not live:
            return []
        # every scan is at a call's return (init's, exit's, a host call's): r1-r3, r12 and lr are dead
        # there (AAPCS), so a pointer left in them is no reference (6.12's kmalloc leaves one in r3)
        regs = [uc.reg_read(r) for r in LIVE_AT_RETURN]
        sp = uc.reg_read(SP)
        dead = None
        try:
            lo_va = sp & ~0x1FFF
            pa_lo = self.bk.m.translate(lo_va)
            pa_sp = self.bk.m.translate(sp & ~0xFFF) + (sp & 0xFFF)
            # VMAP_STACK: the two pages need not be adjacent; the dead part is [stack base, sp)
            dead = (pa_lo, pa_lo + 0x1000) if (sp & 0x1000) else (pa_sp - (sp & 0xFFF), pa_sp)
            extra = [(pa_sp - (sp & 0xFFF), pa_sp)] if sp & 0x1000 else []
        except Exception:
            extra = []
        excl = [(p, p + n) for p, n in excluded] + extra
        lost = scan(self.bk.m.ram, live, self._pa_pieces, excl, regs, dead)
        out = []
        for o in lost:
            o.leak_reported = True
            rep = Report("leak", "leak", o.module, f"unreferenced object 0x{o.start:08x} (size {o.size}):",
                         [f"  comm \"{o.alloc.task.rsplit('/', 1)[0]}\", pid {o.alloc.task.rsplit('/', 1)[-1]} "
                          f"(scanned {when})",
                          f"  hex dump (first {min(o.size, 32)} bytes):",
                          "    " + self.bk.read(o.start, min(o.size, 32)).hex(" ")],
                         [("  backtrace:", o.alloc)])
            self.add(rep, ("leak", o.start, id(o)))
            out.append(rep)
        return out

    def _pa_pieces(self, o):
        out = []
        a = o.start
        end = o.start + max(o.size, 1)
        while a < end:
            n = min(end, (a | 0xFFF) + 1) - a
            try:
                out.append((self.bk.m.translate(a), a, n))
            except Exception:
                pass
            a += n
        return out

    def module_pages(self, name: str) -> list[tuple[int, int]]:
        return [p for rec in self.mods if rec["name"] == name for p in rec["pages"]]

    def notes(self) -> list[str]:
        """What did not run, said (Thumb code is not decoded; the stack detector needs DWARF)."""
        out = [rec["stack_note"] for rec in self.mods if rec.get("stack_note")]
        errs = self.errors + (self.entries.errors if self.entries is not None else [])
        if errs:
            out.append(f"{len(errs)} internal error(s) in the sanitizers' hooks: {errs[0]}")
        if not self.native:
            out.append("the C hooks are not built (no C compiler): the Python hooks ran instead")
        return out

    # --- results ------------------------------------------------------------------------------------
    def formatted(self) -> list[Report]:
        for r in self.reports:
            r.format(self.symbolizer)
        return self.reports

    def remove(self) -> None:
        for subs, fn in ((self.mm.on_alloc, self._module_alloc), (self.mm.on_free, self._module_memfree)):
            if fn in subs:
                subs.remove(fn)
        if self.entries is not None:
            self.entries.remove()
        for h in self._hooks:
            self.bk.unhook(h)
        for rec in self.mods:
            for h in rec["hooks"]:
                self._unhook(h)
            rec["hooks"] = []
        self._hooks = []


def _module_stream(path: str):
    """The module file as ELF bytes (a .ko.xz/.zst/.gz inflated as kmod reads it)."""
    import io as _io
    from ...kernel.kofile import read_module
    return _io.BytesIO(read_module(path))
