"""A module's memory in the booted kernel, as its load_module allocated it: which allocation is
init and which holds code.

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

MOD_MEM_NUM_TYPES = 7
MOD_INIT_TEXT = 4                    # the first init type; MOD_TEXT (0) and MOD_INIT_TEXT hold code
TEXT_TYPES = (0, MOD_INIT_TEXT)


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
