"""Heap objects the module allocates (KASAN's classes): out-of-bounds and use-after-free on
kmalloc, kmem_cache, kmalloc_large and vmalloc objects, byte-precise against the requested size;
double and invalid free.

Tracked: the objects allocated by a call from module text (the allocator's entry sees LR in the
module; the pointer is read when the module's hook sees that LR run with the entry's sp). Frees are
seen at kfree/kvfree/vfree/kmem_cache_free... from any caller (the kernel frees module objects too).
Each object has its extent in the allocator (the kmalloc size class the kernel's own
kmalloc_size_roundup gives, the cache's object_size, whole pages and vmalloc's guard page): an
access in [start + requested, extent) is out of bounds. A freed object stays poisoned until a
kernel allocation that could reuse its memory (same kmalloc class or cache; any, for pages and
vmalloc) runs: SLUB and vmalloc hand freed memory out again at once (KASAN delays that with its
quarantine; armload cannot change the kernel's allocator), so after such an allocation an access
is no longer known to be a use after free, and is not reported.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass

from ..booted.machine import GuestFault, c_bytes

PAGE = 4096
KMALLOC_MAX_CACHE_SIZE = 2 * PAGE          # 6.1 SLUB: PAGE_SIZE << 1; larger goes to kmalloc_large
GFP_DIRECT_RECLAIM = 0x400                 # ___GFP_DIRECT_RECLAIM (6.1 gfp_types.h)
PROBE_CACHES = ((6, 64), (7, 128), (8, 256))   # kmalloc_caches[KMALLOC_NORMAL][i]: kmalloc-64, -128, -256


@dataclass(frozen=True)
class CacheFields:
    """Offsets in struct kmem_cache (SLUB; mm/slab.h): size (the slot, with metadata), object_size
    right after it, and name."""
    size: int
    object_size: int
    name: int


def _str(cstr, va: int) -> str:
    try:
        return cstr(va, 16)
    except GuestFault:                       # a word that is no pointer
        return ""


def cache_fields(u32, cstr, kmalloc_caches: int) -> CacheFields | None:
    """struct kmem_cache's fields, found in the booted kernel's own kmalloc-64, -128 and -256
    caches: the first two adjacent words both equal to the size (size, object_size; no SLUB debug
    metadata in a kmalloc cache of a stock kernel) and the first word pointing to "kmalloc-N", at
    the same offsets in all three; None when they do not agree (no layout is written down here)."""
    common = None
    for i, c in PROBE_CACHES:
        cache = u32(kmalloc_caches + 4 * i)
        if not cache:
            return None
        w = [u32(cache + 4 * k) for k in range(64)]
        sizes = {4 * k for k in range(63) if w[k] == c and w[k + 1] == c}
        names = {4 * k for k in range(64) if w[k] >= 0xC0000000 and _str(cstr, w[k]) == f"kmalloc-{c}"}
        pair = (sizes, names)
        common = pair if common is None else (common[0] & pair[0], common[1] & pair[1])
    if not common[0] or not common[1]:
        return None
    size = min(common[0])
    return CacheFields(size, size + 4, min(common[1]))       # the first: kobj.name (sysfs) points there too


@dataclass
class Obj:
    start: int
    size: int                 # requested
    extent: int               # bytes the allocator gave (class size, cache object size, pages)
    kind: str                 # kmalloc | kmem_cache | kmalloc_large | vmalloc
    cache: int                # the slab slot size (kmalloc class, the cache's size)
    module: str
    alloc: object             # report.Stack
    cache_name: str = ""
    freed: object = None      # report.Stack of the free
    reused: bool = False      # a kernel allocation that could reuse it ran after the free
    leak_reported: bool = False
    free_site: tuple = ()     # (lr, sp) of the free: a wrapper's tail call to kfree is the same free

    @property
    def end(self) -> int:
        return self.start + self.extent


class HeapShadow:
    """Tracked objects, sorted by start (bisect on the access address)."""

    def __init__(self):
        self.starts: list[int] = []
        self.objs: list[Obj] = []
        self.lo, self.hi = 0xFFFFFFFF, 0       # bounds of every tracked extent (fast reject)
        self.freed_by_cache: dict[object, list[Obj]] = {}

    def __len__(self):
        return len(self.objs)

    def live(self) -> list[Obj]:
        return [o for o in self.objs if o.freed is None]

    def add(self, o: Obj) -> None:
        self._drop_overlapping(o.start, o.end)
        i = bisect.bisect_left(self.starts, o.start)
        self.starts.insert(i, o.start)
        self.objs.insert(i, o)
        self.lo, self.hi = min(self.lo, o.start), max(self.hi, o.end)

    def _drop_overlapping(self, a: int, b: int) -> None:
        """Memory handed out again: whatever was tracked there is gone."""
        i = bisect.bisect_right(self.starts, b - 1) - 1
        while i >= 0 and self.objs[i].end > a:
            o = self.objs.pop(i)
            self.starts.pop(i)
            self._unfree(o)
            i -= 1

    def _unfree(self, o: Obj) -> None:
        lst = self.freed_by_cache.get(self._reuse_key(o))
        if lst and o in lst:
            lst.remove(o)

    def remove(self, o: Obj) -> None:
        i = self.objs.index(o)
        self.objs.pop(i)
        self.starts.pop(i)
        self._unfree(o)

    def find(self, addr: int) -> Obj | None:
        """The object whose extent holds `addr`."""
        if not (self.lo <= addr < self.hi):
            return None
        i = bisect.bisect_right(self.starts, addr) - 1
        if i >= 0 and addr < self.objs[i].end:
            return self.objs[i]
        return None

    def overlapping(self, a: int, b: int) -> Obj | None:
        """The first tracked object whose extent meets [a, b)."""
        if b <= self.lo or a >= self.hi:
            return None
        i = max(0, bisect.bisect_right(self.starts, a) - 1)
        while i < len(self.objs) and self.objs[i].start < b:
            if self.objs[i].end > a:
                return self.objs[i]
            i += 1
        return None

    @staticmethod
    def _reuse_key(o: Obj):
        # SLUB merges caches of one slot size (a module's kmem_cache may be kmalloc-64 itself): by slot size
        return "any" if o.kind in ("kmalloc_large", "vmalloc") else ("slab", o.cache)

    def freed(self, o: Obj, stack) -> None:
        o.freed = () if stack is None else stack      # freed even where no stack could be taken
        self.freed_by_cache.setdefault(self._reuse_key(o), []).append(o)

    def kernel_allocates(self, key) -> int:
        """A kernel (not module) allocation of `key` ((kind, class) or "any") started: a freed
        object it could be handed is no longer known to be free. Returns how many became so."""
        n = 0
        for k in ([key, "any"] if key != "any" else list(self.freed_by_cache)):
            for o in self.freed_by_cache.pop(k, ()):
                o.reused = True
                n += 1
        return n

    def check(self, ea: int, size: int) -> tuple[str, Obj, int] | None:
        """(bug type, object, first bad address) for an access of `size` bytes at `ea`."""
        o = self.overlapping(ea, ea + size)
        if o is None:
            return None
        if o.freed is not None:
            if o.reused:
                return None
            return "use-after-free", o, max(ea, o.start)
        if ea >= o.start and ea + size <= o.start + o.size:
            return None
        if ea < o.start:                        # meets o from below: the bytes before it are not o's
            return None
        bad = max(ea, o.start + o.size)
        kind = {"vmalloc": "vmalloc-out-of-bounds", "kmalloc_large": "out-of-bounds"}.get(o.kind, "slab-out-of-bounds")
        return kind, o, bad


def strnlen(read, va: int, limit: int) -> int | None:
    """The kernel's strnlen(va, limit) over machine.c_bytes's page walk (one read of `limit` bytes
    faulted past a string that ends before an unmapped page, on Debian's nvmet.ko); None when a
    byte before the NUL cannot be read. read(va, n) -> bytes (Machine.read)."""
    try:
        return len(c_bytes(read, va, limit))
    except GuestFault:                        # an unmapped page before the NUL
        return None


def kmalloc_classes(bk) -> list[int]:
    """The kmalloc cache sizes of the booted kernel, from its own kmalloc_size_roundup() on each
    candidate size (6.1 SLUB: 8..8192 powers of two plus 96 and 192, less those KMALLOC_MIN_SIZE
    removes)."""
    cands = [8, 16, 32, 64, 96, 128, 192, 256, 512, 1024, 2048, 4096, 8192]
    out = sorted({bk.call("kmalloc_size_roundup", c) for c in cands})
    return [c for c in out if c <= KMALLOC_MAX_CACHE_SIZE]


def class_of(classes: list[int], size: int) -> int:
    i = bisect.bisect_left(classes, size)
    return classes[i] if i < len(classes) else 0
