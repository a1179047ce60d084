"""The sanitizers attached to a BootedRun: the hooks and the events they turn into reports.

Hooks (BootedKernel.hook_code), installed before the first module loads:
- module_alloc's entry and the instruction after each `bl module_alloc` (the module's core and
  init allocations), do_init_module's entry (BootedRun.on_coming: the module's code hooks are
  added there, before init runs) and the instruction after do_init_module's `bl do_one_initcall`
  (init returned: locks still held, the leak scan);
- the entries of the allocators, the frees, the lock and sleeping functions and the kernel's
  mem*/str*/copy_*_user (checked when the module calls them);
- one code hook per module allocation (core, init): the module's own instructions; a load or
  store is decoded once (access.py) and checked against the heap shadow (heap.py), the stack
  arrays of the module's live frames (stack.py) and the spinlocks it holds (locks.py). The same
  hook sees the module's call sites run again when an allocator or trylock returns to them.
No hook runs Python for kernel instructions other than those entry points.
"""
from __future__ import annotations

from unicorn import UC_HOOK_CODE
from unicorn import arm_const as A

from ..booted.modload import bl_sites as _bl_sites
from ..hw import cpu
from . import heap as H
from . import locks as L
from .access import SP, cond_passes, decode
from .report import CLASSES, Report, Stack, Symbolizer, capture
from .stack import StackFrames
from . import native as N

_SITES: dict = {}


def bl_sites(image, target: int) -> list[int]:
    """modload.bl_sites, once per image and target (a scan of the whole Image's text)."""
    key = (image.path, target)
    if key not in _SITES:
        _SITES[key] = _bl_sites(image, target)
    return _SITES[key]


R0, R1, R2, R3 = A.UC_ARM_REG_R0, A.UC_ARM_REG_R1, A.UC_ARM_REG_R2, A.UC_ARM_REG_R3
LR, PC, CPSR = A.UC_ARM_REG_LR, A.UC_ARM_REG_PC, A.UC_ARM_REG_CPSR
TPIDRURO = cpu.cp15(13, 0, 0, 3)
PREEMPT_COUNT = 4                  # struct thread_info (first in task_struct): flags, preempt_count
VMALLOC_LOW = 0xD0000000           # above the 256 MiB linear map: vmalloc space

# allocator entry -> (kind, size(args), cache(args), gfp(args)); args = (r0, r1, r2, r3)
ALLOCS = {
    "__kmalloc": ("kmalloc", lambda a: a[0], None, lambda a: a[1]),
    "__kmalloc_node": ("kmalloc", lambda a: a[0], None, lambda a: a[1]),
    "__kmalloc_node_track_caller": ("kmalloc", lambda a: a[0], None, lambda a: a[1]),
    "kmalloc_trace": ("kmalloc", lambda a: a[2], None, lambda a: a[1]),
    "kmalloc_node_trace": ("kmalloc", lambda a: a[3], None, lambda a: a[1]),
    "kmalloc_large": ("kmalloc_large", lambda a: a[0], None, lambda a: a[1]),
    "kmalloc_large_node": ("kmalloc_large", lambda a: a[0], None, lambda a: a[1]),
    "kmem_cache_alloc": ("kmem_cache", None, lambda a: a[0], lambda a: a[1]),
    "kmem_cache_alloc_lru": ("kmem_cache", None, lambda a: a[0], lambda a: a[2]),
    "kmem_cache_alloc_node": ("kmem_cache", None, lambda a: a[0], lambda a: a[1]),
    "kvmalloc_node": ("kvmalloc", lambda a: a[0], None, lambda a: a[1]),
    "vmalloc": ("vmalloc", lambda a: a[0], None, None),
    "vzalloc": ("vmalloc", lambda a: a[0], None, None),
    "vmalloc_node": ("vmalloc", lambda a: a[0], None, None),
    "vzalloc_node": ("vmalloc", lambda a: a[0], None, None),
    "vmalloc_user": ("vmalloc", lambda a: a[0], None, None),
    "vmalloc_32": ("vmalloc", lambda a: a[0], None, None),
    "__vmalloc": ("vmalloc", lambda a: a[0], None, lambda a: a[1]),
    "vmalloc_array": ("vmalloc", lambda a: a[0] * a[1], None, None),
    "kmemdup": ("kmalloc", lambda a: a[1], None, lambda a: a[2]),
    "kmemdup_nul": ("kmalloc", lambda a: a[1] + 1, None, lambda a: a[2]),
    "krealloc": ("kmalloc", lambda a: a[1], None, lambda a: a[2]),
}
STRING_ALLOCS = {"kstrdup": None, "kstrndup": 1}          # size from the string (strnlen(s, a[1]) + 1)
FREES = {"kfree": 0, "kvfree": 0, "vfree": 0, "kfree_sensitive": 0, "kvfree_sensitive": 0,
         "kmem_cache_free": 1, "kfree_const": 0, "vfree_atomic": 0}
# kernel functions working on memory the module passes: name -> [(pointer arg, length arg | None, write)]
MEMFUNCS = {
    "memcpy": [(0, 2, True), (1, 2, False)], "memmove": [(0, 2, True), (1, 2, False)],
    "memset": [(0, 2, True)], "_copy_from_user": [(0, 2, True)], "_copy_to_user": [(1, 2, False)],
    "strcpy": [(0, "strlen1", True)], "strncpy": [(0, 2, True)], "strscpy": [(0, "strscpy", True)],
    "strlcpy": [(0, "strlcpy", True)], "strcat": [(0, "strcat", True)],
}


class Sanitizer:
    """KASAN-, kmemleak- and lockdep-class detectors on the booted kernel for the modules a
    BootedRun loads. `classes`: a subset of report.CLASSES."""

    def __init__(self, run, classes=CLASSES):
        self.run, self.bk = run, run.bk
        self.uc = self.bk.m.uc
        self.classes = set(classes)
        img = self.bk.image
        self.sym = img.symbols
        self.reports: list[Report] = []
        self.errors: list[str] = []           # exceptions inside the C hook's Python events
        self._seen: set = set()
        self.mods: list[dict] = []            # name, core, init (base, size), hooks, pages, early
        self._ranges: list[tuple[int, int, str]] = []
        self._lo, self._hi = 0xFFFFFFFF, 0
        self._allocs: list[list[int]] = []    # module_alloc [size, base] since the last formed module
        self.decoded: dict[int, object] = {}
        self.pending: dict[int, list] = {}    # return address -> [(sp, fn, data)]
        self.heap = H.HeapShadow()
        self.locks = L.LockState()
        self.spins: set[int] = set()          # spinlocks the module has taken (their unlock is inline)
        self.path = None                     # the top-level module being loaded (load())
        self.frames = StackFrames()
        self.symbolizer = Symbolizer(self.bk, lambda: self.run.session.modules + self._early_mods())
        self.counts = {"accesses": 0, "allocs": 0, "frees": 0}
        self._comm_off = self._pid_off = None
        self.classes_kmalloc = H.kmalloc_classes(self.bk) if "heap" in self.classes or "leak" in self.classes else []
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
        f.held = sum(1 for hs in self.locks.held.values() for h in hs if h.kind in L.ATOMIC_KINDS)
        self.entries.set_ranges([(lo, hi) for lo, hi, _ in self._ranges])
        # kernel code can now make these entries' calls matter: hooks of their own (EntryHooks)
        self.entries.promote({m for m, on in ((N.F_PTR, f.heap_lo < f.heap_hi), (N.F_LR_OR_FREED, f.freed),
                                              (N.F_LR_OR_HELD, f.held)) if on})

    def _install(self):
        ma = self.sym["module_alloc"]
        self._hook(ma, self._module_alloc)
        for site in bl_sites(self.bk.image, ma):
            self._hook(site + 4, self._module_alloc_ret)
        self._hook("module_memfree", self._module_memfree)
        dim, doi = self.sym["do_init_module"], self.sym["do_one_initcall"]
        end = dim + 0x400
        for site in bl_sites(self.bk.image, doi):
            if dim <= site < end:
                self._hook(site + 4, self._init_returned)
        heapish = {"heap", "leak"} & self.classes
        if heapish:
            for name, spec in ALLOCS.items():
                self._hook(name, self._alloc_entry(name, spec), N.F_LR_OR_FREED)
            for name, arg in STRING_ALLOCS.items():
                self._hook(name, self._stralloc_entry(name, arg), N.F_LR_OR_FREED)
            for name, arg in FREES.items():
                self._hook(name, self._free_entry(name, arg), N.F_PTR, arg)
            self._hook("kmem_cache_alloc_bulk", lambda uc, a, s, _: self.heap.kernel_allocates("any") and self.heap_changed(),
                       N.F_LR_OR_FREED)
            self._hook("ksize", self._ksize, N.F_LR)
        if {"heap", "stack"} & self.classes:
            for name, args in MEMFUNCS.items():
                self._hook(name, self._memfunc(name, args), N.F_LR)
        if "locks" in self.classes:
            for name, (kind, op) in L.LOCK_FUNCS.items():
                self._hook(name, self._lock_entry(name, kind, op), N.F_LR_OR_HELD if kind == "mutex" else N.F_LR)
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
    def _module_alloc(self, uc, addr, size, _):
        self._allocs.append([uc.reg_read(R0), 0])

    def _module_alloc_ret(self, uc, addr, size, _):
        if self._allocs and not self._allocs[-1][1]:
            self._allocs[-1][1] = uc.reg_read(R0)

    def _module_memfree(self, uc, addr, size, _):
        """module_memfree(base): a module's init (after init, or a module with no init function) or
        core memory is freed: the hooks on it go before other code is placed there."""
        base = uc.reg_read(R0)
        for rec in self.mods:
            for which in ("init", "core"):
                if rec[which] and rec[which][0] == base and not rec.get(f"{which}_dropped"):
                    self._drop(rec, which)

    def _coming(self, name: str) -> None:
        allocs = [(a[1], a[0]) for a in self._allocs if a[1]]     # (base, size)
        self._allocs = []
        if not allocs:
            return
        core, init = allocs[0], (allocs[1] if len(allocs) > 1 else None)
        rec = {"name": name, "core": tuple(core), "init": tuple(init) if init else None, "hooks": [],
               "pages": self._pages(core) + (self._pages(init) if init else []), "early": None}
        for base, size in [core] + ([init] if init else []):
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
            self.uc.ctl_remove_cache(base, base + size)
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
        from ..booted.modload import Alloc
        from ..booted.modrun import _Replay
        s = Session(self.run.session.kernel, self.run.session.config)
        s.export_tables = list(self.run.session.export_tables)
        s.kernel_word = self.bk.u32
        rp = _Replay(self.run.session.config)
        rp.queue = [Alloc(rec["core"][1], rec["core"][0])] + ([Alloc(rec["init"][1], rec["init"][0])]
                                                            if rec["init"] else [])
        s.allocator = rp
        try:
            mod = s.load(path)
        except Exception as e:                      # the stack detector says it did not run
            rec["stack_note"] = f"stack detector off for {rec['name']}: armload's loader: {e}"
            return
        rec["early"] = mod
        hi = max(r[1] for r in self._ranges if r[2] == rec["name"])
        rec["stack_funcs"] = self.frames.add_module(mod, rec["core"][0], hi)
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
        """The init allocation is freed after init: its hook goes."""
        for rec in self.mods:
            if rec["name"] == name and rec["init"] and not rec.get("init_dropped"):
                self._drop(rec, "init")

    def module_gone(self, name: str) -> None:
        for rec in self.mods:
            if rec["name"] == name:
                for which in ("init", "core"):
                    if rec[which] and not rec.get(f"{which}_dropped"):
                        self._drop(rec, which)

    def _drop(self, rec, which: str) -> None:
        base = rec[which][0]
        rec[f"{which}_dropped"] = True
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
                self._maybe_inline_unlock(uc, ea, pc)
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
        if d.write and d.size == 2 and self.spins:
            self._maybe_inline_unlock(uc, ea, addr)
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

    def _heap_report(self, uc, hit, ea, size, write, pc, via: str | None = None) -> None:
        kind, o, bad = hit
        task = self.task_name()
        st = capture(uc, self.bk.m.read, task, pc=pc)
        where = via or "{at}"
        body = [f"{'Write' if write else 'Read'} of size {size} at addr {ea:08x} by task {task}"]
        rep = Report("heap", kind, o.module, f"BUG: KASAN: {kind} in {where}", body,
                     [("Call trace:", st), ("Allocated by task " + o.alloc.task.rsplit('/', 1)[-1] + ":", o.alloc)])
        if o.freed is not None:
            rep.stacks.append(("Freed by task " + o.freed.task.rsplit('/', 1)[-1] + ":", o.freed))
        rep.title_at = pc
        rep.tail = ["", f"The buggy address belongs to the object at {o.start:08x}",
                    f" which belongs to the cache {o.cache_name or o.kind} of size {o.extent}"]
        if bad >= o.start + o.size:
            rep.tail.append(f"The buggy address is located {bad - (o.start + o.size)} bytes to the right of")
        else:
            rep.tail.append(f"The buggy address is located {bad - o.start} bytes inside of")
        rep.tail.append(f" {'freed' if o.freed is not None else 'allocated'} {o.size}-byte region "
                        f"[{o.start:08x}, {o.start + o.size:08x})")
        self.add(rep, (kind, pc, o.start if o.freed is not None else 0))

    # --- allocations ------------------------------------------------------------------------------
    def _args(self, uc):
        return (uc.reg_read(R0), uc.reg_read(R1), uc.reg_read(R2), uc.reg_read(R3))

    def _cache_name(self, cache: int) -> str:
        try:
            return self.bk.cstr(self.bk.u32(cache + H.KMEM_CACHE_NAME), 32)
        except Exception:
            return ""

    def _alloc_entry(self, name, spec):
        kind, size_fn, cache_fn, gfp_fn = spec

        def hook(uc, addr, size, _):
            a = self._args(uc)
            lr = uc.reg_read(LR)
            mod = self.module_of(lr)
            if mod is None:                         # the kernel's own allocation: reuse of freed memory
                if self.heap.freed_by_cache and self.heap.kernel_allocates(self._reuse_key(kind, a, size_fn, cache_fn)):
                    self.heap_changed()
                return
            if gfp_fn is None or gfp_fn(a) & H.GFP_DIRECT_RECLAIM:
                self._might_sleep(uc, name, lr)
            if cache_fn is not None:
                cache = cache_fn(a)
                req = self.bk.u32(cache + H.KMEM_CACHE_OBJECT_SIZE)
            else:
                cache, req = 0, size_fn(a) & 0xFFFFFFFF
            data = {"fn": name, "kind": kind, "size": req, "cache": cache, "module": mod,
                    "stack": capture(uc, self.bk.m.read, self.task_name(), entry=True), "old": a[0] if name == "krealloc" else 0}
            self._expect(lr, uc.reg_read(SP), self._alloc_returned, data)
        return hook

    def _reuse_key(self, kind, a, size_fn, cache_fn):
        if kind in ("vmalloc", "kvmalloc", "kmalloc_large"):
            return "any"
        if cache_fn is not None:
            return ("slab", self.bk.u32(cache_fn(a) + H.KMEM_CACHE_SIZE))
        n = size_fn(a) & 0xFFFFFFFF
        c = H.class_of(self.classes_kmalloc, n)
        return ("slab", c) if c else "any"

    def _stralloc_entry(self, name, limit_arg):
        def hook(uc, addr, size, _):
            lr = uc.reg_read(LR)
            mod = self.module_of(lr)
            a = self._args(uc)
            if mod is None:
                if self.heap.freed_by_cache and self.heap.kernel_allocates("any"):
                    self.heap_changed()
                return
            s = a[0]
            if not s:
                return
            limit = a[limit_arg] if limit_arg is not None else 1 << 16
            n = len(self.bk.cstr(s, min(limit, 1 << 16)).encode("latin-1")) + 1
            data = {"fn": name, "kind": "kmalloc", "size": n, "cache": 0, "module": mod,
                    "stack": capture(uc, self.bk.m.read, self.task_name(), entry=True), "old": 0}
            self._expect(lr, uc.reg_read(SP), self._alloc_returned, data)
        return hook

    def _alloc_returned(self, uc, d) -> None:
        p = uc.reg_read(R0)
        if d["fn"] == "krealloc" and d["old"] and p == d["old"]:
            o = self.heap.find(p)
            if o is not None and o.freed is None:
                o.size = min(d["size"], o.extent)
                return
        if not p or p >= 0xFFFFF000:
            return
        kind, size = d["kind"], d["size"]
        if kind == "kvmalloc":
            kind = "vmalloc" if p >= VMALLOC_LOW else "kmalloc"
        if kind == "kmalloc" and size > H.KMALLOC_MAX_CACHE_SIZE:
            kind = "kmalloc_large"
        name = ""
        if kind == "kmalloc":
            cls = H.class_of(self.classes_kmalloc, size)
            extent, cache, name = cls or size, cls, f"kmalloc-{cls}"
        elif kind == "kmem_cache":
            extent, cache, name = size, self.bk.u32(d["cache"] + H.KMEM_CACHE_SIZE), self._cache_name(d["cache"])
        else:
            pages = (size + H.PAGE - 1) // H.PAGE * H.PAGE
            extent, cache = pages + (H.PAGE if kind == "vmalloc" else 0), 0
        self.counts["allocs"] += 1
        self.heap.add(H.Obj(p, size, extent, kind, cache, d["module"], d["stack"], name))
        self.heap_changed()

    def _ksize(self, uc, addr, size, _):
        if self.module_of(uc.reg_read(LR)):
            o = self.heap.find(uc.reg_read(R0))
            if o is not None and o.freed is None:
                o.size = o.extent                       # ksize() unpoisons the whole object (KASAN too)

    def _free_entry(self, name, arg):
        def hook(uc, addr, size, _):
            p = uc.reg_read(R0 + arg) if arg else uc.reg_read(R0)
            if not p or p >= 0xFFFFF000:
                return
            o = self.heap.find(p)
            if o is None:
                return
            lr = uc.reg_read(LR)
            from_module = self.module_of(lr) is not None
            if o.freed is not None and o.free_site == (lr, uc.reg_read(SP)):
                return                                  # a free wrapper's tail call (kfree_sensitive: b kfree)
            if o.freed is not None and o.reused:
                self.heap.remove(o)                     # the memory is someone else's now
                self.heap_changed()
                return
            if o.freed is not None or p != o.start:
                if not from_module and o.freed is not None:
                    # the kernel freeing what the module freed: only a double free if the memory was
                    # not handed out again; that is unknowable here (see heap.py), so not reported
                    self.heap.remove(o)
                    self.heap_changed()
                    return
                kind = "double-free" if o.freed is not None and p == o.start else "invalid-free"
                task = self.task_name()
                st = capture(uc, self.bk.m.read, task, entry=True)
                rep = Report("heap", kind, o.module, f"BUG: KASAN: {kind} in {{at}}",
                             [], [("Call trace:", st), (f"Allocated by task {o.alloc.task.rsplit('/', 1)[-1]}:",
                                                          o.alloc)])
                if o.freed is not None:
                    rep.stacks.append((f"Freed by task {o.freed.task.rsplit('/', 1)[-1]}:", o.freed))
                rep.tail = ["", f"The buggy address belongs to the object at {o.start:08x}",
                            f" which belongs to the cache {o.cache_name or o.kind} of size {o.extent}",
                            f"The buggy address is located {p - o.start} bytes inside of",
                            f" {o.size}-byte region [{o.start:08x}, {o.start + o.size:08x})"]
                rep.title_at = lr
                if "heap" in self.classes:
                    self.add(rep, (kind, lr, o.start))
                    # KASAN does not let the allocator see a bad free (kasan_slab_free returns true)
                    uc.reg_write(PC, lr & ~1)
                return
            self.counts["frees"] += 1
            self.heap.freed(o, capture(uc, self.bk.m.read, self.task_name(), entry=True))
            o.free_site = (lr, uc.reg_read(SP))
            self.heap_changed()
        return hook

    # --- kernel functions on module memory --------------------------------------------------------
    def _memfunc(self, name, args):
        def hook(uc, addr, size, _):
            lr = uc.reg_read(LR)
            if self.module_of(lr) is None:
                return
            a = self._args(uc)
            for pi, li, write in args:
                p = a[pi]
                n = self._length(li, a, write)
                if not n or n < 0:
                    continue
                if "heap" in self.classes and self.heap.overlapping(p, p + n):
                    hit = self._first_bad(p, n)
                    if hit:
                        self._heap_report(uc, hit, p, n, write, lr, via=f"{name}+0x0")
                if self.frames and "stack" in self.classes:
                    sp = uc.reg_read(SP)
                    if sp <= p < (sp | 0x1FFF) + 1:
                        self._stack_check(uc, p, p, n, write, lr, name)
        return hook

    def _first_bad(self, p, n):
        o = self.heap.overlapping(p, p + n)
        if o is None:
            return None
        if o.freed is not None:
            return None if o.reused else ("use-after-free", o, max(p, o.start))
        if p >= o.start and p + n > o.start + o.size:
            kind = {"vmalloc": "vmalloc-out-of-bounds", "kmalloc_large": "out-of-bounds"}.get(o.kind, "slab-out-of-bounds")
            return kind, o, max(p, o.start + o.size)
        return None

    def _length(self, li, a, write):
        if isinstance(li, int):
            return a[li]
        try:
            if li == "strlen1":
                return len(self.bk.cstr(a[1], 1 << 16).encode("latin-1")) + 1
            if li in ("strscpy", "strlcpy"):
                n = len(self.bk.cstr(a[1], 1 << 16).encode("latin-1")) + 1
                return min(n, a[2]) if li == "strscpy" else min(n, a[2])
            if li == "strcat":
                d = len(self.bk.cstr(a[0], 1 << 16).encode("latin-1"))
                return d + len(self.bk.cstr(a[1], 1 << 16).encode("latin-1")) + 1
        except Exception:
            return 0
        return 0

    # --- stack arrays -----------------------------------------------------------------------------
    def _stack_check(self, uc, base_val, ea, n, write, pc, via) -> None:
        regs = capture(uc, self.bk.m.read, "", pc=pc).regs
        if via:                                     # at a kernel function's entry: the caller's frame
            regs[15] = pc
        for fn, var, lo, hi in self.frames.arrays(regs, self.bk.u32):
            if lo <= base_val < hi and not (lo <= ea and ea + n <= hi):
                task = self.task_name()
                st = capture(uc, self.bk.m.read, task, pc=pc)
                mod = self.module_of(pc) or "?"
                where = f"{via}+0x0" if via else "{at}"
                bad = ea if ea >= hi or ea < lo else hi
                rep = Report("stack", "stack-out-of-bounds", mod, f"BUG: KASAN: stack-out-of-bounds in {where}",
                             [f"{'Write' if write else 'Read'} of size {n} at addr {ea:08x} by task {task}"],
                             [("Call trace:", st)],
                             ["", f"The buggy address belongs to stack of task {task}",
                              f" and is located at offset {bad - lo} in frame:",
                              f" {fn}",
                              "", "This frame has 1 object:" if True else "",
                              f" [{0}, {hi - lo}) '{var}'"])
                rep.title_at = pc
                self.add(rep, ("stack", pc, var))
                return

    # --- locks ------------------------------------------------------------------------------------
    def _current(self, uc) -> int:
        return cpu.cp_read(uc, TPIDRURO)

    def _lock_entry(self, name, kind, op):
        def hook(uc, addr, size, _):
            lr = uc.reg_read(LR)
            mod = self.module_of(lr)
            if mod is None:
                if op.startswith("acquire") and kind == "mutex" and self.locks.held.get(self._current(uc)):
                    self._might_sleep(uc, name, lr)     # the kernel sleeping for the module, under its spinlock
                return
            lock = uc.reg_read(R0)
            task = self._current(uc)
            if op.startswith("acquire") and kind == "mutex":
                self._might_sleep(uc, name, lr)
            if op == "acquire":
                self._acquired(uc, task, lock, kind, name, mod, lr)
            elif op in ("try", "acquire_ret0"):
                data = {"task": task, "lock": lock, "kind": kind, "fn": name, "mod": mod, "op": op,
                        "stack": capture(uc, self.bk.m.read, self.task_name(task), lr_as_pc=True)}
                self._expect(lr, uc.reg_read(SP), self._try_returned, data)
            else:
                self._released(uc, task, lock, kind, name, mod, lr)
        return hook

    def _try_returned(self, uc, d) -> None:
        r = uc.reg_read(R0)
        if (d["op"] == "try" and r == 1) or (d["op"] == "acquire_ret0" and r == 0):
            self._acquired(uc, d["task"], d["lock"], d["kind"], d["fn"], d["mod"], 0, d["stack"])

    def _acquired(self, uc, task, lock, kind, fn, mod, lr, stack=None) -> None:
        st = stack or capture(uc, self.bk.m.read, self.task_name(task), lr_as_pc=True)
        held = self.locks.holding(task)
        for h in held:
            if h.lock == lock:
                continue
            back = self.locks.path(lock, h.lock)
            if back is not None and (h.lock, lock) not in self.locks.reported_pairs:
                self.locks.reported_pairs.add((h.lock, lock))
                self.locks.reported_pairs.add((lock, h.lock))
                self._circular(uc, task, h, lock, fn, mod, st, back)
            self.locks.edges.setdefault(h.lock, {}).setdefault(lock, (h.stack, st))
        held.append(L.Held(lock, kind, st, fn))
        self._filters_changed()
        if kind == "spin" and lock not in self.spins:
            self.spins.add(lock)
            for nr in self.nranges:
                nr.set_spins(self.spins)

    def _lock_name(self, lock: int) -> str:
        s = self.symbolizer.name(lock)
        return s.split("+")[0] if "+0x0/" in s else f"{lock:#x}"

    def _circular(self, uc, task, h, lock, fn, mod, st, back) -> None:
        tn = self.task_name(task)
        first = self.locks.edges.get(lock, {}).get(back[1] if len(back) > 1 else h.lock)
        rep = Report("locks", "circular-locking", mod, "WARNING: possible circular locking dependency detected",
                     [f"{tn} is trying to acquire lock:", f" ({self._lock_name(lock)}), at: {self.symbolizer.name(st.regs[15])}",
                      "", "but task is already holding lock:",
                      f" ({self._lock_name(h.lock)}), at: {self.symbolizer.name(h.stack.regs[15])}", "",
                      "which lock already depends on the new lock.", "",
                      "the existing dependency chain (in reverse order) is:"])
        if first:
            rep.stacks.append((f"-> #1 ({self._lock_name(lock)}):", first[0]))
            rep.stacks.append((f"-> #0 ({self._lock_name(back[1] if len(back) > 1 else h.lock)}):", first[1]))
        rep.stacks.append(("other info that might help us debug this: the new acquisition:", st))
        rep.site_from = len(rep.stacks) - 1
        self.add(rep, ("circular", h.lock, lock))

    def _released(self, uc, task, lock, kind, fn, mod, lr) -> None:
        held = self.locks.holding(task)
        for i in range(len(held) - 1, -1, -1):
            if held[i].lock == lock:
                held.pop(i)
                self._filters_changed()
                return
        try:
            word = self.bk.u32(lock)
        except Exception:
            word = None
        state = L.lock_word_locked(kind, word) if word is not None else None
        if kind == "mutex" and state and (word & ~7) != task:
            state = False                               # locked, but by another task
        if state is False or state is None and kind != "mutex":
            if state is None:
                return
            tn = self.task_name(task)
            st = capture(uc, self.bk.m.read, tn, lr_as_pc=True)
            rep = Report("locks", "bad-unlock", mod, "WARNING: bad unlock balance detected!",
                         [f"{tn} is trying to release lock ({self._lock_name(lock)}) at:", f"{self.symbolizer.name(lr)}",
                          "but there are no more locks to release!"], [("Call trace:", st)])
            self.add(rep, ("unlock", lr, lock))

    def _maybe_inline_unlock(self, uc, ea, pc) -> None:
        """A halfword store by the module to a spinlock's ticket owner: the inlined spin_unlock."""
        if ea not in self.spins:
            return
        task = self._current(uc)
        self._released(uc, task, ea, "spin", "spin_unlock", self.module_of(pc), pc)

    def _in_atomic(self, uc, task) -> list[str]:
        why = []
        held = [h for h in self.locks.held.get(task, ()) if h.kind in L.ATOMIC_KINDS]
        if held:
            why.append("spinlock")
        if uc.reg_read(CPSR) & L.CPSR_I:
            why.append("irqs")
        pc = self.bk.u32(task + PREEMPT_COUNT) if task else 0
        if pc & (L.HARDIRQ_MASK | L.SOFTIRQ_MASK | L.NMI_MASK):
            why.append("interrupt")
        return why

    def _sleeper(self, name):
        def hook(uc, addr, size, _):
            lr = uc.reg_read(LR)
            task = self._current(uc)
            if self.module_of(lr) is None and not self.locks.held.get(task):
                return
            self._might_sleep(uc, name, lr)
        return hook

    def _might_sleep(self, uc, name, lr) -> None:
        if "locks" not in self.classes:
            return
        task = self._current(uc)
        why = self._in_atomic(uc, task)
        if not why:
            return
        held = self.locks.held.get(task, [])
        mod = self.module_of(lr) or (self.module_of(held[-1].stack.regs[15]) if held else None) or "?"
        tn = self.task_name(task)
        count = self.bk.u32(task + PREEMPT_COUNT)
        irqs = 1 if uc.reg_read(CPSR) & L.CPSR_I else 0
        atomic = 1 if ("spinlock" in why or count) else 0
        body = [f"in_atomic(): {atomic}, irqs_disabled(): {irqs}, non_block: 0, pid: {self.task_pid()}, "
                f"name: {tn.rsplit('/', 1)[0]}",
                f"preempt_count: {count + (len(held) if 'spinlock' in why else 0):x}, expected: 0"]
        if held:
            body.append(f"{len(held)} lock{'s' if len(held) > 1 else ''} held by {tn}:")
            for i, h in enumerate(held):
                body.append(f" #{i}: ({self._lock_name(h.lock)}), at: {self.symbolizer.name(h.stack.regs[15])}")
        st = capture(uc, self.bk.m.read, tn, entry=True)
        rep = Report("locks", "sleep-in-atomic", mod, f"BUG: sleeping function called from invalid context at {name}",
                     body, [("Call trace:", st)])
        if held:
            rep.stacks.append(("the lock was taken at:", held[-1].stack))
        key = held[-1].stack.regs[15] if held else lr          # one report per lock hold / call site
        self.add(rep, ("sleep", key))

    # --- init / exit returned -----------------------------------------------------------------------
    def _init_returned(self, uc, addr, size, _):
        mods = [m for m in self.mods if not m.get("init_done")]
        if not mods:
            return
        rec = mods[-1]
        rec["init_done"] = True
        ret = uc.reg_read(R0)
        rec["init_ret"] = ret - (1 << 32) if ret & 0x80000000 else ret
        self.returned_to_user(uc, rec["name"], "init")
        if "leak" in self.classes:
            going = rec["pages"] if rec["init_ret"] != 0 else (self._pages(rec["init"]) if rec["init"] else [])
            self.leak_scan(uc, "init", excluded=going, module=rec["name"])
        # init's text is freed after init (and the whole module when init failed): its hooks go now,
        # before another module's code can be placed there
        if rec["init_ret"] != 0:
            self.module_gone(rec["name"])
        else:
            self.drop_init(rec["name"])

    def returned_to_user(self, uc, mod: str, what: str) -> None:
        if "locks" not in self.classes:
            return
        task = self._current(uc)
        held = [h for h in self.locks.held.get(task, []) if self.module_of(h.stack.regs[15]) in (mod, None)]
        if not held:
            return
        tn = self.task_name(task)
        body = [f"{tn} is leaving the kernel with locks still held! ({mod}'s {what} returned)",
                f"{len(held)} lock{'s' if len(held) > 1 else ''} held by {tn}:"]
        for i, h in enumerate(held):
            body.append(f" #{i}: ({self._lock_name(h.lock)}), at: {self.symbolizer.name(h.stack.regs[15])}")
        rep = Report("locks", "lock-held-on-return", mod, "WARNING: lock held when returning to user space!", body,
                     [("the lock was taken at:", held[0].stack)])
        self.add(rep, ("held", mod, what, tuple(h.lock for h in held)))
        for h in held:                         # reported once: the next return is judged afresh
            self.locks.held[task].remove(h)
        self._filters_changed()

    def leak_scan(self, uc=None, when: str = "on demand", excluded=(), module: str | None = None) -> list[Report]:
        from .leak import scan
        uc = uc or self.uc
        live = [o for o in self.heap.live() if not o.leak_reported and (module is None or o.module == module)]
        if not live:
            return []
        regs = [uc.reg_read(r) for r in (R0, R1, R2, R3, A.UC_ARM_REG_R4, A.UC_ARM_REG_R5, A.UC_ARM_REG_R6,
                                         A.UC_ARM_REG_R7, A.UC_ARM_REG_R8, A.UC_ARM_REG_R9, A.UC_ARM_REG_R10,
                                         A.UC_ARM_REG_R11, A.UC_ARM_REG_R12, LR)]
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
        if self.entries is not None:
            self.entries.remove()
        for h in self._hooks:
            self.uc.hook_del(h)
        for rec in self.mods:
            for h in rec["hooks"]:
                self._unhook(h)
            rec["hooks"] = []
        self._hooks = []


def _module_stream(path: str):
    """The module file as ELF bytes (a .ko.xz/.zst/.gz inflated as kmod reads it)."""
    import io as _io
    from ...loader.kofile import read_module
    return _io.BytesIO(read_module(path))
