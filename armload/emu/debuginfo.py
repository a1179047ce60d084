"""DWARF of a loaded module at its load addresses: address -> file:line, and its functions.

Read with pyelftools from `debug_image.debug_image_bytes(mod)` (the module as an executable with
.debug_* relocated to the final addresses), so the line program speaks loaded addresses.
A module without .debug_line (distro modules are --strip-debug'ged) has no line table.
"""
from __future__ import annotations

import bisect
import io
import os
import weakref
from dataclasses import dataclass

from ..errors import ArmloadError
from ..loader.dwarf_files import file_names


@dataclass
class Function:
    name: str
    low: int
    high: int                     # exclusive
    file: str
    line: int
    params: int | None = None     # DW_TAG_formal_parameter children of this (concrete) DIE


class LineTable:
    def __init__(self, rows: list[tuple[int, str, int]], ranges: list[tuple[int, int]],
                 functions: list[Function]):
        rows.sort()
        self.addrs = [r[0] for r in rows]
        self.rows = rows
        self.ranges = ranges      # [start, end) of each line-program sequence
        self.functions = functions

    def __bool__(self) -> bool:
        return bool(self.rows)

    def lookup(self, addr: int) -> tuple[str, int] | None:
        if not any(a <= addr < b for a, b in self.ranges):
            return None
        i = bisect.bisect_right(self.addrs, addr) - 1
        if i < 0:
            return None
        _, f, line = self.rows[i]
        return f, line

    def statements(self) -> dict[tuple[str, int], list[int]]:
        """(file, line) -> the addresses where a statement of that line starts."""
        out: dict[tuple[str, int], list[int]] = {}
        for a, f, line in self.rows:
            if line:
                out.setdefault((f, line), []).append(a)
        return out


_CACHE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def line_table(mod) -> LineTable:
    t = _CACHE.get(mod)
    if t is None:
        t = _CACHE[mod] = _build(mod)
    return t


def _build(mod) -> LineTable:
    from elftools.elf.elffile import ELFFile
    from ..loader.debug_image import debug_image_bytes
    try:
        with _module_stream(mod.path) as f:           # cheap check first: distro modules have no DWARF
            if ELFFile(f).get_section_by_name(".debug_line") is None:
                return LineTable([], [], [])
        data = debug_image_bytes(mod)
    except (OSError, ValueError, ArmloadError):
        return LineTable([], [], [])
    elf = ELFFile(io.BytesIO(data))
    if not elf.has_dwarf_info() or elf.get_section_by_name(".debug_line") is None:
        return LineTable([], [], [])
    dw = elf.get_dwarf_info(relocate_dwarf_sections=False)
    rows: list[tuple[int, str, int]] = []
    ranges: list[tuple[int, int]] = []
    functions: list[Function] = []
    for cu in dw.iter_CUs():
        lp = dw.line_program_for_CU(cu)
        if lp is None:
            continue
        names = file_names(lp, cu)
        seq_start = None
        for e in lp.get_entries():
            st = e.state
            if st is None:
                continue
            if seq_start is None:
                seq_start = st.address
            if st.end_sequence:
                ranges.append((seq_start, st.address))
                seq_start = None
                continue
            if st.is_stmt:
                rows.append((st.address, names.get(st.file, "??"), st.line))
        for die in cu.iter_DIEs():
            if die.tag != "DW_TAG_subprogram" or "DW_AT_low_pc" not in die.attributes:
                continue
            low = die.attributes["DW_AT_low_pc"].value
            hi = die.attributes.get("DW_AT_high_pc")
            if hi is None:
                continue
            high = hi.value if hi.form == "DW_FORM_addr" else low + hi.value
            # a clone (foo.constprop.0, foo.isra.0, an out-of-line copy of an inline) names its
            # source through DW_AT_abstract_origin / DW_AT_specification: name, decl_file, decl_line
            attrs = _origin_attrs(die)
            name = attrs.get("DW_AT_name")
            fidx = attrs.get("DW_AT_decl_file")
            line = attrs.get("DW_AT_decl_line")
            file = names.get(fidx.value, "??") if fidx else "??"
            if file == "??":                     # no decl_file at all: the file its first line is in
                hit = LineTable(list(rows), list(ranges), []).lookup(low)
                file = hit[0] if hit else "??"
            nparams = sum(1 for c in die.iter_children() if c.tag == "DW_TAG_formal_parameter")
            functions.append(Function(name.value.decode() if name else f"fn_{low:x}", low, high,
                                      file, line.value if line else 0, nparams))
    return LineTable(rows, ranges, functions)


def _origin_attrs(die) -> dict:
    """The DIE's attributes over those of the DIEs it refers to (abstract origin, specification)."""
    chain, seen = [die], set()
    while len(chain) < 4:
        d = chain[-1]
        ref = next((a for a in ("DW_AT_abstract_origin", "DW_AT_specification") if a in d.attributes), None)
        if ref is None or d.offset in seen:
            break
        seen.add(d.offset)
        try:
            chain.append(d.get_DIE_from_attribute(ref))
        except Exception:
            break
    out: dict = {}
    for d in reversed(chain):
        out.update(d.attributes)
    return out


# --- addr2line -i ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Location:
    file: str
    line: int
    discriminator: int = 0

    def __str__(self) -> str:          # binutils addr2line's "FILE:LINE (discriminator N)"
        return f"{self.file}:{self.line}" + (f" (discriminator {self.discriminator})" if self.discriminator else "")


class Addr2Line:
    """`addr2line -i -e ELF ADDR` from an ELF's DWARF (pyelftools): the line-table row of the
    address, then the call site of each inlined function around it, innermost first. Compilation
    units are read when an address first falls in them (.debug_aranges, else each unit's ranges),
    so a vmlinux with thousands of units answers one frame without reading them all."""

    def __init__(self, stream):
        from elftools.elf.elffile import ELFFile
        self.elf = ELFFile(stream)
        self.dw = self.elf.get_dwarf_info(relocate_dwarf_sections=False) if self.elf.has_dwarf_info() else None
        self._units: dict[int, tuple] = {}
        self._aranges = None
        self._spans: list[tuple[int, int, int]] | None = None      # (low, high, CU offset) without aranges

    def __bool__(self) -> bool:
        return self.dw is not None and self.elf.get_section_by_name(".debug_line") is not None

    def _cu_offset(self, addr: int) -> int | None:
        if self._aranges is None:
            self._aranges = self.dw.get_aranges() or False
        if self._aranges:
            off = self._aranges.cu_offset_at_addr(addr)
            if off is not None:
                return off
        if self._spans is None:
            self._spans = [(lo, hi, cu.cu_offset) for cu in self.dw.iter_CUs()
                           for lo, hi in _die_ranges(self.dw, cu, cu.get_top_DIE())]
        return next((o for lo, hi, o in self._spans if lo <= addr < hi), None)

    def _unit(self, off: int):
        u = self._units.get(off)
        if u is None:
            cu = self.dw.get_CU_at(off)
            lp = self.dw.line_program_for_CU(cu)
            names = file_names(lp, cu, normalize=False) if lp is not None else {}
            seqs = _sequences(lp) if lp is not None else []
            inl = []                    # (low, high, depth, call file, call line)
            stack = [(cu.get_top_DIE(), 0)]
            while stack:
                die, depth = stack.pop()
                if die.tag == "DW_TAG_inlined_subroutine":
                    cf, cl = die.attributes.get("DW_AT_call_file"), die.attributes.get("DW_AT_call_line")
                    for lo, hi in _die_ranges(self.dw, cu, die):
                        inl.append((lo, hi, depth, names.get(cf.value, "??") if cf else "??", cl.value if cl else 0))
                stack.extend((c, depth + 1) for c in die.iter_children())
            u = self._units[off] = (seqs, names, inl)
        return u

    def lookup(self, addr: int) -> list[Location]:
        """The locations of `addr`, innermost first; [] where the DWARF knows nothing of it."""
        if not self:
            return []
        off = self._cu_offset(addr)
        if off is None:
            return []
        seqs, names, inl = self._unit(off)
        row = None
        for rows in seqs:
            if rows[0][0] <= addr < rows[-1][0]:
                i = bisect.bisect_right(rows, (addr, 1 << 62)) - 1
                row = rows[i]
                break
        if row is None:
            return []
        # binutils prints the row's discriminator on every line, the inlined callers' too
        # (addr2line.c: bfd_find_inliner_info leaves `discriminator` as the row set it)
        out = [Location(names.get(row[1], "??"), row[2], row[3])]
        for _, _, _, f, line in sorted((x for x in inl if x[0] <= addr < x[1]), key=lambda x: -x[2]):
            out.append(Location(f, line, row[3]))
        return out


def _sequences(lp) -> list[list[tuple[int, int, int, int]]]:
    """The line program's sequences, each [(address, file, line, discriminator), ..., (end, 0, 0, 0)]
    sorted by address (the last row the end_sequence address)."""
    out, cur = [], []
    for e in lp.get_entries():
        st = e.state
        if st is None:
            continue
        if st.end_sequence:
            if cur:
                cur.append((st.address, 0, 0, 0))
                out.append(cur)
            cur = []
            continue
        if cur and cur[-1][0] == st.address:
            cur[-1] = (st.address, st.file, st.line, st.discriminator)   # the last row at an address wins
        else:
            cur.append((st.address, st.file, st.line, st.discriminator))
    return out


def _die_ranges(dw, cu, die) -> list[tuple[int, int]]:
    """[low, high) of a DIE: DW_AT_low_pc/high_pc, or DW_AT_ranges (DWARF 4 .debug_ranges or
    DWARF 5 .debug_rnglists, offsets from the unit's base address)."""
    a = die.attributes
    if "DW_AT_ranges" in a:
        rl = dw.range_lists()
        if rl is None:
            return []
        top = cu.get_top_DIE().attributes.get("DW_AT_low_pc")
        base = top.value if top else 0
        out = []
        for e in rl.get_range_list_at_offset(a["DW_AT_ranges"].value, cu=cu):    # rnglistx: pyelftools
            #                                                                       gives the offset
            if type(e).__name__ == "BaseAddressEntry":
                base = e.base_address
            elif e.is_absolute:
                out.append((e.begin_offset, e.end_offset))
            else:
                out.append((base + e.begin_offset, base + e.end_offset))
        return [(lo, hi) for lo, hi in out if hi > lo]
    lo, hi = a.get("DW_AT_low_pc"), a.get("DW_AT_high_pc")
    if lo is None or hi is None:
        return []
    high = hi.value if hi.form == "DW_FORM_addr" else lo.value + hi.value
    return [(lo.value, high)]


def module_addr2line(mod) -> Addr2Line | None:
    """Addr2Line of a loaded module at its load addresses (None without .debug_line)."""
    a = _A2L.get(mod)
    if a is None:
        from elftools.elf.elffile import ELFFile
        from ..loader.debug_image import debug_image_bytes
        try:
            with _module_stream(mod.path) as f:
                if ELFFile(f).get_section_by_name(".debug_line") is None:
                    return None
            a = Addr2Line(io.BytesIO(debug_image_bytes(mod)))
        except (OSError, ValueError, ArmloadError):
            return None
        _A2L[mod] = a
    return a if a else None


_A2L: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _module_stream(path: str):
    """The module file as ELF bytes (a .ko.xz/.zst/.gz inflated as kmod reads it)."""
    import io as _io
    from ..kernel.kofile import read_module
    return _io.BytesIO(read_module(path))
