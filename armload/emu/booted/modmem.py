"""A module's memory in the booted kernel, as its load_module allocates and frees it: the one
watcher of module memory (`ModuleMemory`), and which allocation is init and which holds code.

- `ModuleMemory.of(bk)` hooks the allocator's entry (module_alloc(size) until 6.9,
  execmem_alloc(type, size) from 6.10) for the size, the instruction after each `bl` to it in
  the Image for the base, and the free (module_memfree / execmem_free(base)), once per booted
  kernel; the loader's capture (modload), coverage and the call trace (observe), gdb and the
  sanitizers subscribe to it.
- Until 6.3 there are two allocations (kernel/module/main.c, move_module): the core layout, then
  the init layout; each holds code and data.
- From 6.4 there is one per non-empty `enum mod_mem_type` (include/linux/module.h), allocated in
  type order: MOD_TEXT, MOD_DATA, MOD_RODATA, MOD_RO_AFTER_INIT, MOD_INIT_TEXT, MOD_INIT_DATA,
  MOD_INIT_RODATA. Which type an allocation is, is read from the kernel's own struct module:
  mod_tree_insert (add_unformed_module) sets `mod->mem[type].mtn.mod = mod` for all seven
  types, so the seven words equal to `mod` at one stride are the array, and each allocation's
  base stands at the same place in its entry, the empty types' bases NULL (no struct layout is
  written down here)."""
from __future__ import annotations

from dataclasses import dataclass

from unicorn import arm_const as A

MOD_MEM_NUM_TYPES = 7
MOD_INIT_TEXT = 4                    # the first init type; MOD_TEXT (0) and MOD_INIT_TEXT hold code
TEXT_TYPES = (0, MOD_INIT_TEXT)


@dataclass
class Alloc:
    size: int
    base: int = 0
    load: int = 0                      # serial of the top-level load that made it (ModuleMemory.load)
    level: int = 0                     # the kernel's service depth at the call (a request_module nests)


_BL_SITES: dict = {}


def bl_sites(image, target: int) -> list[int]:
    """Addresses of every `bl target` (ARM, condition AL) in the Image's text (once per process
    and target: a fork server's children inherit them)."""
    key = (image.path, image.base, len(image.data), target)
    if key not in _BL_SITES:
        import numpy as np
        lo, hi = image.base, image.symbols.get("_etext", image.end)
        w = np.frombuffer(image.data[: (hi - lo) & ~3], dtype="<u4")
        idx = np.nonzero((w & 0xFF000000) == 0xEB000000)[0]
        imm = (w[idx] & 0x00FFFFFF).astype(np.int64)
        imm = np.where(imm & 0x800000, imm - 0x1000000, imm)
        dest = lo + idx.astype(np.int64) * 4 + 8 + imm * 4
        _BL_SITES[key] = [lo + 4 * int(i) for i in idx[dest == target]]
    return list(_BL_SITES[key])


def alloc_entry(img) -> tuple[int, int]:
    """(address, size register) of the module memory allocator: module_alloc(size) until 6.9,
    execmem_alloc(type, size) from 6.10."""
    if "module_alloc" in img.symbols:
        return img.symbols["module_alloc"], A.UC_ARM_REG_R0
    return img.symbols["execmem_alloc"], A.UC_ARM_REG_R1


def free_entry(img) -> int:
    """The address of module memory's free, taking the base in r0: module_memfree(base) until 6.9,
    execmem_free(base) from 6.10."""
    return img.symbols.get("module_memfree") or img.symbols["execmem_free"]


class ModuleMemory:
    """Every module memory allocation of one booted kernel, in order, and every free: `on_alloc`
    fn(Alloc) when an allocation returned a base, `on_free` fn(base). One per BootedKernel (`of`)."""

    @classmethod
    def of(cls, bk) -> "ModuleMemory":
        mm = getattr(bk, "_module_memory", None)
        if mm is None:
            mm = bk._module_memory = cls(bk)
        return mm

    def __init__(self, bk):
        self.bk = bk
        self.list: list[Alloc] = []
        self.on_alloc: list = []
        self.on_free: list = []
        self.load = 1
        self._pending: list[Alloc] = []
        ma, self._size_reg = alloc_entry(bk.image)
        bk.hook_code(ma, self._entry)
        for site in bl_sites(bk.image, ma):
            bk.hook_code(site + 4, self._return)
        bk.hook_code(free_entry(bk.image), self._free)

    def _entry(self, uc, addr, size, _):
        self._pending.append(Alloc(uc.reg_read(self._size_reg), load=self.load, level=self.bk.servicing))

    def _return(self, uc, addr, size, _):
        if not self._pending:
            return
        a = self._pending.pop()
        a.base = uc.reg_read(A.UC_ARM_REG_R0)
        if a.base:
            self.list.append(a)
            for fn in list(self.on_alloc):
                fn(a)

    def _free(self, uc, addr, size, _):
        base = uc.reg_read(A.UC_ARM_REG_R0)
        for fn in list(self.on_free):
            fn(base)

    def of_load(self, load: int) -> list[Alloc]:
        return [a for a in self.list if a.load == load]

    def owner(self, addr: int, live=None) -> Alloc | None:
        """The latest allocation holding addr (a freed init region may have been reused)."""
        for a in reversed(self.list if live is None else live):
            if a.base <= addr < a.base + a.size:
                return a
        return None


@dataclass
class Region:
    base: int
    size: int
    init: bool
    text: bool                       # may hold code (6.1's layouts hold both)
    dropped: bool = False


def regions_61(allocs: list[tuple[int, int]]) -> list[Region]:
    """(base, size) in allocation order -> core, then init (6.1: move_module)."""
    return [Region(b, s, i == 1, True) for i, (b, s) in enumerate(allocs[:2])]


def mem_array(words: list[int], mod: int) -> tuple[int, int] | None:
    """(index of mem[0].mtn.mod, stride) in struct module's words: the first seven words equal to
    `mod` spaced evenly; None when there is no such run."""
    at = [i for i, w in enumerate(words) if w == mod]
    have = set(at)
    for n, p in enumerate(at):
        for q in at[n + 1:]:
            s = q - p
            if all(p + k * s in have for k in range(MOD_MEM_NUM_TYPES)):
                return p, s
    return None


def regions_64(words: list[int], mod: int, allocs: list[tuple[int, int]]) -> list[Region] | None:
    """The allocations' types from struct module's words (read from `mod`); None when the words do
    not show them. In every entry of the array the base stands at one offset `d` before its
    mtn.mod: the allocations' bases there, in type order, and NULL in the empty types' entries."""
    arr = mem_array(words, mod)
    if arr is None or not allocs:
        return None
    p, s = arr
    bases = [b for b, _ in allocs]
    for d in range(-1, -s, -1):
        if p + d < 0:
            break
        slot = [words[p + k * s + d] for k in range(MOD_MEM_NUM_TYPES)]
        if [w for w in slot if w] == bases:
            ks = [k for k, w in enumerate(slot) if w]
            return [Region(b, n, k >= MOD_INIT_TEXT, k in TEXT_TYPES) for (b, n), k in zip(allocs, ks)]
    return None
