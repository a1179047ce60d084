"""The kernel's fail_nth for a module's allocations (Documentation/fault-injection/
fault-injection.rst: failslab with /proc/self/task/<tid>/fail-nth), which Debian's armmp kernel
is built without (no CONFIG_FAULT_INJECTION): a hook at each kmalloc-family entry counts the calls
whose return address is the module's, and the nth (to nth+count-1) returns NULL at its entry,
as should_failslab makes slab_alloc return NULL before any work. One mechanism for the devkit's
fail_kmalloc and the fault sweep (emu/sanitize/faultsweep.py)."""
from __future__ import annotations

from unicorn import arm_const as A

# the kmalloc family's entry points in 6.1 (mm/slab_common.c, mm/slub.c, mm/util.c, devres); the
# string/dup helpers allocate inside the kernel (their kmalloc's caller is not the module): failed
# at their own entry, as their kmalloc failing would make them return NULL
KMALLOC_ENTRIES = ("__kmalloc", "kmalloc_trace", "kmem_cache_alloc", "kmalloc_large", "kmalloc_node_trace",
                   "__kmalloc_node", "kmalloc_large_node", "kvmalloc_node", "krealloc", "devm_kmalloc",
                   "kmem_cache_alloc_lru", "kmem_cache_alloc_node", "kmemdup", "kmemdup_nul", "kstrdup",
                   "kstrndup")


class FailSlab:
    """Allocation counting and failing for calls `is_caller(lr)` says are the module's.
    `calls`: the return addresses of the counted calls since the last arm(), in order;
    `failed`: those of the calls made to return NULL."""

    def __init__(self, bk, is_caller):
        self.bk, self.is_caller = bk, is_caller
        self.window: tuple[int, int] | None = None
        self.calls: list[int] = []
        self.failed: list[int] = []
        for name in KMALLOC_ENTRIES:
            a = bk.image.symbols.get(name)
            if a:
                bk.hook_code(a, self._hook)

    def arm(self, nth: int = 0, count: int = 1) -> None:
        """Count from zero again; fail calls nth..nth+count-1 (nth 0: count only)."""
        self.calls, self.failed = [], []
        self.window = (nth, nth + count - 1) if nth > 0 else (0, -1)

    def _hook(self, uc, addr, size, _):
        if self.window is None:
            return
        lr = uc.reg_read(A.UC_ARM_REG_LR)
        if not self.is_caller(lr):
            return
        self.calls.append(lr & ~1)
        lo, hi = self.window
        if lo <= len(self.calls) <= hi:
            self.failed.append(lr & ~1)
            uc.reg_write(A.UC_ARM_REG_R0, 0)
            uc.reg_write(A.UC_ARM_REG_PC, lr & ~1)
