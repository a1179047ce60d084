"""Kernel memory for models: every object on its own pages with an unmapped guard page after.

Objects end at their page end (8-byte aligned), so overruns and use-after-free fault in the
emulated CPU. kmalloc-class memory comes from lowmem addresses, vmalloc-class memory from the
vmalloc area, as on the real kernel (the split matters for is_vmalloc_addr()).
"""
from __future__ import annotations

from dataclasses import dataclass

from unicorn import UC_PROT_READ, UC_PROT_WRITE

from .faults import ModelFault

PAGE = 0x1000
LOWMEM_BASE, LOWMEM_LIMIT = 0xD0000000, 0xDE000000
VMALLOC_BASE, VMALLOC_LIMIT = 0xFB000000, 0xFF000000   # inside VMALLOC_START..VMALLOC_END
ZERO_SIZE_PTR = 0x10
KMALLOC_MAX_SIZE = 1 << 22         # 4 MiB: the largest kmalloc on this config (order-10 pages)
VMALLOC_MAX = 1 << 26              # what the emulated machine grants one vmalloc
POISON_INUSE = 0x5A                # slub_debug: uninitialised object bytes


@dataclass
class Allocation:
    addr: int
    size: int
    kind: str
    caller: int
    page_base: int
    page_end: int
    boot: bool = False            # made by boot-time kernel initialisation, not by a module


class Heap:
    def __init__(self, uc, symbolize):
        self.uc = uc
        self.symbolize = symbolize
        self._cur = {"lowmem": LOWMEM_BASE, "vmalloc": VMALLOC_BASE}
        self._limit = {"lowmem": LOWMEM_LIMIT, "vmalloc": VMALLOC_LIMIT}
        self.live: dict[int, Allocation] = {}
        self.freed: dict[int, Allocation] = {}
        self.count = 0
        self.fail: object = None      # callable(n, size, kind) -> True to fail this allocation
        self.booting = False          # allocations now belong to boot-time kernel state

    def alloc(self, size: int, *, zero: bool = False, kind: str = "kmalloc", caller: int = 0,
              area: str = "lowmem") -> int:
        """Address of a new object, or 0 when the kernel's allocator would fail."""
        self.count += 1
        if self.fail is not None and self.fail(self.count, size, kind):
            return 0
        if size == 0:
            return ZERO_SIZE_PTR
        if size > (VMALLOC_MAX if area == "vmalloc" else KMALLOC_MAX_SIZE):
            return 0
        rounded = (size + 7) & ~7
        npages = (rounded + PAGE - 1) // PAGE
        cur = self._cur[area]
        if cur + (npages + 1) * PAGE > self._limit[area]:
            return 0
        pb, pe = cur, cur + npages * PAGE
        self.uc.mem_map(pb, pe - pb, UC_PROT_READ | UC_PROT_WRITE)
        addr = pe - rounded
        if not zero:
            self.uc.mem_write(addr, bytes([POISON_INUSE]) * rounded)
        self._cur[area] = pe + PAGE           # guard page
        self.live[addr] = Allocation(addr, size, kind, caller, pb, pe, self.booting)
        return addr

    def free(self, addr: int, caller: int = 0) -> Allocation | None:
        if addr == 0 or addr == ZERO_SIZE_PTR:
            return None
        a = self.live.pop(addr, None)
        if a is None:
            if addr in self.freed:
                raise ModelFault(f"double free of {addr:#010x} (allocated by "
                                 f"{self.symbolize(self.freed[addr].caller)})", "double-free")
            raise ModelFault(f"free of invalid pointer {addr:#010x} ({self.symbolize(addr)})", "invalid-free")
        self.uc.mem_unmap(a.page_base, a.page_end - a.page_base)
        self.freed[addr] = a
        return a

    def find(self, addr: int) -> Allocation | None:
        """The live allocation holding addr."""
        for a in self.live.values():
            if a.page_base <= addr < a.page_end:
                return a
        return None

    def owns_page(self, page: int) -> bool:
        return self.find(page) is not None

    def describe(self, addr: int) -> str | None:
        for table, state in ((self.live, "object"), (self.freed, "freed object")):
            for a in table.values():
                if a.page_base <= addr < a.page_end + PAGE:
                    off = addr - a.addr
                    where = f"+{off:#x}" if off >= 0 else f"-{-off:#x}"
                    return (f"{a.kind} {state} {a.addr:#010x}{where} (size {a.size}, "
                            f"allocated by {self.symbolize(a.caller)})")
        return None

    def classify(self, addr: int) -> str | None:
        for a in self.freed.values():
            if a.page_base <= addr < a.page_end:
                return "use-after-free"
        for a in list(self.live.values()) + list(self.freed.values()):
            if a.page_end <= addr < a.page_end + PAGE:
                return "heap-out-of-bounds"
        return None
