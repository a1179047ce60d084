"""mm: kmalloc/slab caches, vmalloc, pages, per-cpu memory, devres.

The real allocators need boot-time state (the slab caches, the buddy allocator), so these are
models over `heap.Heap`: every object on its own pages with a guard page, `__GFP_ZERO` honoured,
uninitialised memory poisoned like slub_debug, failures only where the kernel fails (size too
large) or where a test injects them (`machine.heap.fail`).
"""
from __future__ import annotations

from .base import ModelLibrary

GFP_ZERO = 0x100                  # ___GFP_ZERO in 6.1 include/linux/gfp_types.h
KMALLOC_MIN = 64                  # ARCH_DMA_MINALIGN rounds kmalloc buckets on ARM
STRUCT_PAGE_SIZE = 32
SLAB_HWCACHE_ALIGN = 0x2000


def kmalloc_size(size: int) -> int:
    """ksize(): the kmalloc bucket an allocation of `size` comes from."""
    if size <= KMALLOC_MIN:
        return KMALLOC_MIN
    if size <= 128:                   # no kmalloc-96 when KMALLOC_MIN_SIZE is 64
        return 128
    if size <= 192:
        return 192
    b = 256
    while b < size:
        b <<= 1
    return b


def register(lib: ModelLibrary) -> None:
    m = lib.model

    def alloc(call, size, flags=0, zero=False, kind="kmalloc", area="lowmem"):
        return call.heap.alloc(size, zero=zero or bool(flags & GFP_ZERO), kind=kind, caller=call.lr, area=area)

    @m("__kmalloc", "kmalloc_large", "__kmalloc_node", "kmalloc_node", "__kmalloc_track_caller", subsystem="mm")
    def kmalloc(call):
        return alloc(call, call.arg(0), call.arg(1))

    @m("__kmalloc_node_track_caller", subsystem="mm")
    def kmalloc_track(call):
        return alloc(call, call.arg(0), call.arg(1))

    @m("kmalloc_trace", subsystem="mm")
    def kmalloc_trace(call):          # (struct kmem_cache *s, gfp_t flags, size_t size)
        return alloc(call, call.arg(2), call.arg(1))

    @m("kmalloc_node_trace", subsystem="mm")
    def kmalloc_node_trace(call):     # (struct kmem_cache *s, gfp_t flags, int node, size_t size)
        return alloc(call, call.arg(3), call.arg(1))

    @m("kmalloc_large_node", subsystem="mm")
    def kmalloc_large_node(call):
        return alloc(call, call.arg(0), call.arg(1))

    @m("kvmalloc_node", "__kvmalloc_node", subsystem="mm")
    def kvmalloc(call):
        size, flags = call.arg(0), call.arg(1)
        area = "lowmem" if size <= 4 * 4096 else "vmalloc"
        return alloc(call, size, flags, kind="kvmalloc", area=area)

    @m("krealloc", subsystem="mm")
    def krealloc(call):
        old, size, flags = call.arg(0), call.arg(1), call.arg(2)
        heap = call.heap
        if old and old in heap.live and size and size <= kmalloc_size(heap.live[old].size):
            heap.live[old].size = size
            return old
        new = alloc(call, size, flags)
        if new and old and old in heap.live:
            call.write(new, call.read(old, min(heap.live[old].size, size)))
            heap.free(old, caller=call.lr)
        return new

    @m("__ksize", "ksize", subsystem="mm")
    def ksize(call):
        a = call.heap.live.get(call.arg(0))
        if a is None:
            call.fault(f"ksize of {call.arg(0):#010x}, which is not a live kmalloc object", "invalid-free")
        return kmalloc_size(a.size)

    @m("kfree", "kvfree", "kfree_sensitive", "vfree", subsystem="mm")
    def kfree(call):
        call.heap.free(call.arg(0), caller=call.lr)

    @m("kfree_const", subsystem="mm")
    def kfree_const(call):
        if call.arg(0) in call.heap.live:        # a .rodata string is not freed
            call.heap.free(call.arg(0), caller=call.lr)

    @m("vmalloc", "__vmalloc", "vmalloc_user", "vmalloc_node", "vmalloc_32", "vmalloc_huge", subsystem="mm")
    def vmalloc(call):
        zero = call.name in ("vmalloc_user",) or (call.name == "__vmalloc" and call.arg(1) & GFP_ZERO)
        return alloc(call, call.arg(0), zero=bool(zero), kind="vmalloc", area="vmalloc")

    @m("vzalloc", "vzalloc_node", subsystem="mm")
    def vzalloc(call):
        return alloc(call, call.arg(0), zero=True, kind="vmalloc", area="vmalloc")

    # --- slab caches ------------------------------------------------------------------
    def caches(call) -> dict:
        return call.state("mm.caches", dict)

    @m("kmem_cache_create", "kmem_cache_create_usercopy", subsystem="mm")
    def kmem_cache_create(call):
        # (name, size, align, flags, [useroffset, usersize,] ctor)
        name = call.text(call.arg(0)) if call.arg(0) else None
        if name is None:
            call.fault("kmem_cache_create: NULL name (the kernel's kmem_cache_sanity_check oopses)", "null-deref")
        ctor = call.arg(6) if call.name.endswith("usercopy") else call.arg(4)
        size = call.arg(1)
        if size < 4 or size > 1 << 22:
            call.machine.log.printk(f"kmem_cache_create({name}) failed with error -22", level=3)
            return 0
        p = call.heap.alloc(128, zero=True, kind="struct kmem_cache", caller=call.lr)
        if p:
            caches(call)[p] = {"name": name, "size": size, "ctor": ctor, "objects": 0}
            call.machine.record("kmem_cache_create", name=name, object_size=size, ctor=ctor or None, addr=p)
        return p

    def cache_alloc(call, zero):
        c = caches(call).get(call.arg(0))
        if c is None:
            if call.machine._in_module(call.lr & ~1) is None:
                # the kernel's own code allocating from a cache its boot code would have created
                call.unmodelled(f"a slab cache the kernel creates at boot ({call.arg(0):#x} here)")
            call.fault(f"{call.name}: {call.arg(0):#010x} is not a slab cache "
                       f"({'NULL: a cache never created' if not call.arg(0) else call.symbolize(call.arg(0))})",
                       "null-deref" if not call.arg(0) else "bug")
        flags = call.arg(2) if call.name == "kmem_cache_alloc_lru" else call.arg(1)   # (s, lru, flags)
        p = alloc(call, c["size"], flags, zero=zero, kind=f"kmem_cache_alloc({c['name']})")
        if p:
            c["objects"] += 1
            if c["ctor"]:
                call.invoke(c["ctor"], p)
        return p

    @m("kmem_cache_alloc", "kmem_cache_alloc_lru", "kmem_cache_alloc_node", subsystem="mm")
    def kmem_cache_alloc(call):
        return cache_alloc(call, False)

    @m("kmem_cache_zalloc", subsystem="mm")
    def kmem_cache_zalloc(call):
        return cache_alloc(call, True)

    @m("kmem_cache_free", subsystem="mm")
    def kmem_cache_free(call):
        c = caches(call).get(call.arg(0))
        if call.arg(1) and c is not None:
            c["objects"] -= 1
        call.heap.free(call.arg(1), caller=call.lr)

    @m("kmem_cache_destroy", subsystem="mm")
    def kmem_cache_destroy(call):
        c = caches(call).pop(call.arg(0), None)
        if c is None:
            return
        if c["objects"]:
            call.machine.log.printk(f"kmem_cache_destroy {c['name']}: Slab cache still has objects when "
                                    f"called from {call.symbolize(call.lr)}", level=3)
        call.heap.free(call.arg(0), caller=call.lr)

    @m("kmem_cache_size", subsystem="mm")
    def kmem_cache_size(call):
        c = caches(call).get(call.arg(0))
        if c is None:
            call.fault(f"kmem_cache_size of a non-cache {call.arg(0):#010x}", "bug")
        return c["size"]

    @m("kmem_cache_shrink", subsystem="mm")
    def kmem_cache_shrink(call):
        return 0

    # --- pages ------------------------------------------------------------------------
    def pages(call) -> dict:
        return call.state("mm.pages", dict)

    @m("__get_free_pages", subsystem="mm")
    def get_free_pages(call):
        order = call.arg(1)
        if order > 10:                   # MAX_ORDER - 1
            return 0
        return alloc(call, 4096 << order, call.arg(0), kind="pages")

    @m("get_zeroed_page", subsystem="mm")
    def get_zeroed_page(call):
        return alloc(call, 4096, zero=True, kind="pages")

    @m("free_pages", subsystem="mm")
    def free_pages(call):
        call.heap.free(call.arg(0), caller=call.lr)

    @m("__alloc_pages", "alloc_pages", "__folio_alloc", subsystem="mm")
    def alloc_pages(call):
        gfp, order = call.arg(0), call.arg(1)
        if order > 10:
            return 0
        mem = alloc(call, 0x1000 << order, gfp, kind="pages")
        if not mem:
            return 0
        page = call.heap.alloc(STRUCT_PAGE_SIZE << order, zero=True, kind="struct page", caller=call.lr)
        pages(call)[page] = (mem, order)
        return page

    @m("page_address", subsystem="mm")
    def page_address(call):
        ent = pages(call).get(call.arg(0))
        if ent is None:
            call.unmodelled(f"page_address of {call.arg(0):#010x}, a struct page armload did not allocate")
        return ent[0]

    @m("__free_pages", subsystem="mm")
    def free_pages_struct(call):
        ent = pages(call).pop(call.arg(0), None)
        if ent is None:
            call.fault(f"__free_pages of {call.arg(0):#010x}, not an allocated struct page", "invalid-free")
        call.heap.free(ent[0], caller=call.lr)
        call.heap.free(call.arg(0), caller=call.lr)

    @m("si_meminfo", subsystem="mm")
    def si_meminfo(call):
        # struct sysinfo: uptime, loads[3], totalram, freeram, sharedram, bufferram, totalswap,
        # freeswap, procs (u16) + pad, totalhigh, freehigh, mem_unit: counted in pages
        from ..bootdata import RAM_PAGES
        import struct
        call.write(call.arg(0) + 16, struct.pack("<IIIIII", RAM_PAGES, RAM_PAGES // 2, 0, 0, 0, 0))
        call.write(call.arg(0) + 44, struct.pack("<III", 0, 0, 4096))

    # --- per-cpu: one possible CPU whose per-cpu offset is 0 --------------------------
    @m("__alloc_percpu", "__alloc_percpu_gfp", "__alloc_reserved_percpu", subsystem="mm")
    def alloc_percpu(call):
        size, align = call.arg(0), call.arg(1)
        if not size or size > 32768 or align > 4096 or align & (align - 1):
            call.machine.log.printk(f"percpu: illegal size ({size}) or align ({align}) for percpu allocation",
                                    level=4)
            return 0
        return call.heap.alloc(size, zero=True, kind="percpu", caller=call.lr)

    @m("free_percpu", subsystem="mm")
    def free_percpu(call):
        call.heap.free(call.arg(0), caller=call.lr)

    # --- devres: freed when the device goes away ------------------------------------------
    @m("devm_kmalloc", subsystem="mm")
    def devm_kmalloc(call):
        dev, size, gfp = call.arg(0), call.arg(1), call.arg(2)
        p = alloc(call, size, gfp, kind="devm_kmalloc")
        if p:
            call.state("mm.devres", dict).setdefault(dev, []).append(p)
        return p

    @m("devm_kfree", subsystem="mm")
    def devm_kfree(call):
        lst = call.state("mm.devres", dict).get(call.arg(0), [])
        if call.arg(1) in lst:
            lst.remove(call.arg(1))
        call.heap.free(call.arg(1), caller=call.lr)

    # mm/usercopy.c (CONFIG_HARDENED_USERCOPY): the kernel side of a copy_{to,from}_user must lie
    # inside one object: the current stack, one slab object, not kernel text; else usercopy_abort()
    # prints "Kernel memory exposure/overwrite attempt detected ..." and BUG()s.
    @m("__check_object_size", subsystem="mm", nargs=3)
    def check_object_size(call):
        ptr, n, to_user = call.arg(0), call.arg(1), call.arg(2)
        if not n:
            return None
        what = "exposure" if to_user else "overwrite"

        def abort(name, detail, offset):
            call.fault(f"usercopy: Kernel memory {what} attempt detected {'from' if to_user else 'to'} {name}"
                       f"{detail} (offset {offset}, size {n})!", "bug")
        if ptr + n > 1 << 32 or ptr < 0x1000:
            abort("null address" if ptr < 0x1000 else "wrapped address", "", ptr)
        lo, hi = call.machine.stack_range
        if lo <= ptr < hi:
            if ptr + n > hi:
                abort("process stack", "", ptr - lo)
            return None
        a = call.heap.find(ptr)
        if a is not None and ptr + n > a.addr + a.size:
            abort("SLUB object", f" '{a.kind}'", ptr - a.addr)
        img = call.machine.image
        if img is not None and ptr < img.etext and ptr + n > img.stext:
            abort("kernel text", "", ptr - img.stext)
        return None

