"""Plain data that passes between pipeline stages.

Stages import these types, never each other's internals. Large per-relocation results
are numpy structured arrays, not lists of objects.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np

from ..constants import BRANCH_TYPES, THUMB_BRANCHES
from ..kernel.config import KernelConfig
from ..kernel.provider import Export


def distinct(a) -> np.ndarray:
    """np.unique(a) of a 1-D array (its sorted distinct values), without numpy.ma: numpy 2's plain
    np.unique asks np.ma.is_masked, whose first use imports numpy.ma (~10 ms of every `armload load`)."""
    s = np.sort(np.asarray(a).ravel())
    return s[np.concatenate(([True], s[1:] != s[:-1]))] if s.size else s


def type_table(types) -> np.ndarray:
    """A bool per ELF32_R_TYPE (256): indexed with `r_info & 0xFF`, it answers np.isin(rtype, types) for
    a whole table at once (np.isin sorts its operands, ~30 us a call on a REL table of a few entries)."""
    t = np.zeros(256, dtype=bool)
    t[[int(x) for x in types]] = True
    return t


IS_BRANCH = type_table(BRANCH_TYPES)              # CALL, JUMP24, PC24, THM_CALL, THM_JUMP24
IS_THUMB_BRANCH = type_table(THUMB_BRANCHES)      # THM_CALL, THM_JUMP24


# Branch relocation sites after loading: one row per CALL/JUMP24/PC24/THM_CALL/THM_JUMP24.
BRANCH_DTYPE = np.dtype([
    ("section", "<u4"),   # ELF index of the section holding the instruction
    ("offset", "<u4"),    # r_offset within that section
    ("place", "<u4"),     # P: final address of the instruction
    ("rtype", "<u4"),     # ELF32_R_TYPE
    ("sym", "<u4"),       # ELF32_R_SYM (index into LoadedModule.sym_names)
    ("target", "<u4"),    # S + A with the PC bias removed: where control must arrive (bit 0 = Thumb)
    ("plt", "<u4"),       # address of the PLT slot used, 0 when the branch is direct
])


@dataclass(frozen=True)
class BranchSite:
    """One row of LoadedModule.branches with named fields (see branch_sites())."""
    section: int                # ELF index of the section holding the instruction
    section_name: str
    offset: int                 # r_offset within that section
    place: int                  # P: final address of the instruction
    rtype: int                  # ELF32_R_TYPE
    type_name: str              # R_ARM_CALL, R_ARM_THM_JUMP24, ...
    sym: int                    # symbol-table index
    symbol: str
    target: int                 # where control must arrive (bit 0 = Thumb)
    plt: int                    # PLT slot address, 0 when direct

    @property
    def via_plt(self) -> bool:
        return self.plt != 0


@dataclass
class ResolvedSymbol:
    """An undefined symbol of a module after simplify_symbols."""
    name: str
    addr: int
    source: str                 # "vmlinux", "module:<name>", "simulated", "weak-undefined"
    kind: str                   # "func" or "data" (from how the module uses it)
    crc_checked: bool = False


@dataclass
class ModuleSymbol:
    """A symbol the module defines, at its final address."""
    name: str
    addr: int                   # final address (bit 0 set for Thumb functions)
    size: int
    stype: str                  # "func", "object", "notype", "section", "file"
    bind: str                   # "local", "global", "weak"
    section: str | None


@dataclass
class LoadedSection:
    """A section of the module as placed in module memory: its final address and bytes."""

    index: int
    name: str
    addr: int
    size: int
    flags: int
    sh_type: int
    mem: str                    # memory class: text, rodata, ro_after_init, data, init_text, init_rodata, init_data
    data: bytes                 # contents after relocation (zeros for NOBITS)


@dataclass
class MemRegion:
    """One allocation of module memory (page aligned)."""
    name: str                   # "core"/"init" (6.1 layout) or a class name (6.4)
    base: int
    size: int
    data: bytearray
    init: bool

    @property
    def end(self) -> int:
        return self.base + self.size


@dataclass
class PltEntry:
    """One `ldr pc, [pc, #L1-8]` veneer: its slot, the literal it jumps to, its PLT and symbol."""

    addr: int                   # address of the ldr slot
    target: int                 # the literal
    plt: str                    # "core" or "init"
    symbol: str | None
    fixed: bool = False         # one of the ftrace fixed entries


@dataclass
class PltCounts:
    """PLT entries reserved by one counting algorithm (fixed ftrace entries included)."""
    algorithm: str
    core: int
    init: int

    @property
    def total(self) -> int:
        return self.core + self.init


@dataclass(eq=False)          # identity: a module is itself, not its (numpy-holding) fields
class LoadedModule:
    """A module after load_module's stages: its memory, sections, symbols, branches and PLTs."""

    name: str
    path: str
    config: KernelConfig
    regions: list[MemRegion]
    sections: list[LoadedSection]
    symbols: list[ModuleSymbol]
    resolved: dict[str, ResolvedSymbol]
    sym_names: list[str]                 # symbol-table index -> name
    branches: np.ndarray                 # BRANCH_DTYPE
    plt_entries: list[PltEntry]
    plt_counts: dict[str, PltCounts]     # algorithm -> counts, all three
    reloc_counts: dict[str, int]         # R_ARM_* name -> applied count
    init_addr: int | None
    exit_addr: int | None
    exports: list[Export]
    modinfo: dict[str, list[str]]
    thumb: bool                          # the module was built for a Thumb-2 kernel
    timings: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    finalized: object | None = None      # loader.finalize.Finalized: what load_module wrote after relocation
    _sym_index: tuple | None = field(default=None, repr=False, compare=False)

    def branch_sites(self) -> list[BranchSite]:
        """The branch relocation sites as dataclasses (a readable view; `branches` stays the
        numpy storage the loader fills)."""
        from ..constants import reloc_name
        names = {s.index: s.name for s in self.sections}
        out = []
        for sec, off, place, rtype, sym, target, plt in self.branches.tolist():
            out.append(BranchSite(sec, names.get(sec, str(sec)), off, place, rtype, reloc_name(rtype), sym,
                                  self.sym_names[sym] if sym < len(self.sym_names) else "", target, plt))
        return out

    def plt_entry_at(self, addr: int) -> PltEntry | None:
        return next((e for e in self.plt_entries if e.addr == addr), None)

    def region_of(self, addr: int) -> MemRegion | None:
        for r in self.regions:
            if r.base <= addr < r.end:
                return r
        return None

    def read(self, addr: int, n: int) -> bytes:
        r = self.region_of(addr)
        if r is None or addr + n > r.end:
            raise ValueError(f"{addr:#x}+{n} is not inside module {self.name}")
        o = addr - r.base
        return bytes(r.data[o:o + n])

    def section_at(self, addr: int) -> LoadedSection | None:
        for s in self.sections:
            if s.addr <= addr < s.addr + max(s.size, 1):
                return s
        return None

    def symbolize(self, addr: int) -> str | None:
        """`name+0xoff/0xsize [module]` for an address inside a defined function or object."""
        if self._sym_index is None:
            # Equal starts: the first symbol in table order wins (the local name before its alias).
            named = sorted((s.addr & ~1, -i, i) for i, s in enumerate(self.symbols)
                           if s.stype in ("func", "object") and s.name)
            self._sym_index = ([a for a, _, _ in named], named)
        starts, named = self._sym_index
        # The innermost symbol containing addr: the latest start at or below it that still covers it.
        i = bisect.bisect_right(starts, addr) - 1
        while i >= 0:
            start, _, k = named[i]
            s = self.symbols[k]
            if addr < start + max(s.size, 1):
                return f"{s.name}+{addr - start:#x}/{s.size:#x} [{self.name}]"
            if addr - start > 0x100000:       # nothing this far back can cover addr
                break
            i -= 1
        return None
