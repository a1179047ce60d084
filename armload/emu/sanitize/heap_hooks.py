"""The sanitizers' hooks on the kernel's allocators, frees and mem*/str* functions, and the
stack-array check: the Sanitizer's heap half (a mixin of engine.Sanitizer)."""
from __future__ import annotations

from unicorn import arm_const as A

from . import heap as H
from .access import SP
from .report import Report, capture
from .stack import out_of_bounds

R0, R1, R2, R3 = A.UC_ARM_REG_R0, A.UC_ARM_REG_R1, A.UC_ARM_REG_R2, A.UC_ARM_REG_R3
LR, PC = A.UC_ARM_REG_LR, A.UC_ARM_REG_PC
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
# 6.10+: allocation tagging's *_noprof entry points (include/linux/slab.h, vmalloc.h, string.h), with
# 6.1's arguments: the same names with the suffix, and four new names
ALLOCS.update({f"{n}_noprof": ALLOCS[n] for n in (
    "__kmalloc", "kmem_cache_alloc", "kmem_cache_alloc_lru", "kmem_cache_alloc_node", "vmalloc", "vzalloc",
    "vmalloc_node", "vzalloc_node", "vmalloc_user", "vmalloc_32", "__vmalloc", "vmalloc_array", "kmemdup",
    "krealloc")})
ALLOCS.update({"__kmalloc_cache_noprof": ALLOCS["kmalloc_trace"],
               "__kmalloc_cache_node_noprof": ALLOCS["kmalloc_node_trace"],
               "__kmalloc_large_noprof": ALLOCS["kmalloc_large"],
               "__kmalloc_large_node_noprof": ALLOCS["kmalloc_large_node"]})
# 6.10+ with CONFIG_SLAB_BUCKETS: DECL_BUCKET_PARAMS(size, b) puts a kmem_buckets * after the size
# (include/linux/slab.h), so gfp is one argument later: name -> (kind, gfp's index without it)
BUCKETED = {"__kmalloc_node_noprof": ("kmalloc", 1), "__kmalloc_node_track_caller_noprof": ("kmalloc", 1),
            "__kvmalloc_node_noprof": ("kvmalloc", 1)}
REALLOCS = ("krealloc", "krealloc_noprof")          # the old pointer in r0 is freed by a move
STRING_ALLOCS = {"kstrdup": None, "kstrndup": 1}          # size from the string (strnlen(s, a[1]) + 1)
FREES = {"kfree": 0, "kvfree": 0, "vfree": 0, "kfree_sensitive": 0, "kvfree_sensitive": 0,
         "kmem_cache_free": 1, "kfree_const": 0, "vfree_atomic": 0}
# kernel functions working on memory the module passes: name -> [(pointer arg, length arg | None, write)]
MEMFUNCS = {
    "memcpy": [(0, 2, True), (1, 2, False)], "memmove": [(0, 2, True), (1, 2, False)],
    "memset": [(0, 2, True)], "_copy_from_user": [(0, 2, True)], "_copy_to_user": [(1, 2, False)],
    # what an inlined copy_{from,to}_user calls (6.12: INLINE_COPY_*_USER; arch/arm/include/asm/uaccess.h)
    "arm_copy_from_user": [(0, 2, True)], "arm_copy_to_user": [(1, 2, False)],
    "strcpy": [(0, "strlen1", True)], "strncpy": [(0, 2, True)], "strscpy": [(0, "strscpy", True)],
    "sized_strscpy": [(0, "strscpy", True)],                  # 6.12's strscpy
    "strlcpy": [(0, "strlcpy", True)], "strcat": [(0, "strcat", True)],
}


def alloc_table(buckets: bool) -> dict:
    """ALLOCS with the bucketed entries for a kernel with (buckets) or without CONFIG_SLAB_BUCKETS."""
    out = dict(ALLOCS)
    for name, (kind, g) in BUCKETED.items():
        out[name] = (kind, lambda a: a[0], None, (lambda a, i=g + buckets: a[i]))
    return out


class HeapHooks:
    """engine.Sanitizer's allocator, free, mem*/str* and stack-array hooks."""

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
            return self.bk.cstr(self.bk.u32(cache + self.cache_fields.name), 32)
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
                req = self.bk.u32(cache + self.cache_fields.object_size)
            else:
                cache, req = 0, size_fn(a) & 0xFFFFFFFF
            data = {"fn": name, "kind": kind, "size": req, "cache": cache, "module": mod,
                    "stack": capture(uc, self.bk.m.read, self.task_name(), entry=True), "old": a[0] if name in REALLOCS else 0}
            self._expect(lr, uc.reg_read(SP), self._alloc_returned, data)
        return hook

    def _reuse_key(self, kind, a, size_fn, cache_fn):
        if kind in ("vmalloc", "kvmalloc", "kmalloc_large"):
            return "any"
        if cache_fn is not None:
            return ("slab", self.bk.u32(cache_fn(a) + self.cache_fields.size))
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
            n = H.strnlen(self.bk.m.read, s, min(limit, 1 << 16))     # kstrdup: kmalloc(strlen(s) + 1)
            if n is None:
                return
            data = {"fn": name, "kind": "kmalloc", "size": n + 1, "cache": 0, "module": mod,
                    "stack": capture(uc, self.bk.m.read, self.task_name(), entry=True), "old": 0}
            self._expect(lr, uc.reg_read(SP), self._alloc_returned, data)
        return hook

    def _alloc_returned(self, uc, d) -> None:
        p = uc.reg_read(R0)
        if d["fn"] in REALLOCS and d["old"] and p == d["old"]:
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
            extent, cache, name = size, self.bk.u32(d["cache"] + self.cache_fields.size), self._cache_name(d["cache"])
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
        lens = [H.strnlen(self.bk.m.read, p, 1 << 16) for p in (a[0], a[1])] if li == "strcat" else \
            [0, H.strnlen(self.bk.m.read, a[1], 1 << 16)]
        if None in lens:
            return 0
        n = sum(lens) + 1                           # the bytes written, with the NUL
        return min(n, a[2]) if li in ("strscpy", "strlcpy") else n

    # --- stack arrays -----------------------------------------------------------------------------
    def _stack_check(self, uc, base_val, ea, n, write, pc, via) -> None:
        regs = capture(uc, self.bk.m.read, "", pc=pc).regs
        if via:                                     # at a kernel function's entry: the caller's frame
            regs[15] = pc
        for fn, var, lo, hi in self.frames.arrays(regs, self.bk.u32):
            bad = out_of_bounds(lo, hi, base_val, ea, n)
            if bad is not None:
                task = self.task_name()
                st = capture(uc, self.bk.m.read, task, pc=pc)
                mod = self.module_of(pc) or "?"
                where = f"{via}+0x0" if via else "{at}"
                rep = Report("stack", "stack-out-of-bounds", mod, f"BUG: KASAN: stack-out-of-bounds in {where}",
                             [f"{'Write' if write else 'Read'} of size {n} at addr {ea:08x} by task {task}"],
                             [("Call trace:", st)],
                             ["", f"The buggy address belongs to stack of task {task}",
                              f" and is located at offset {bad - lo} in frame:",
                              f" {fn}",
                              "", "This frame has 1 object:",
                              f" [{0}, {hi - lo}) '{var}'"])
                rep.title_at = pc
                self.add(rep, ("stack", pc, var))
                return
