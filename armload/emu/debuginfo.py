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
        with open(mod.path, "rb") as f:           # cheap check first: distro modules have no DWARF
            if ELFFile(f).get_section_by_name(".debug_line") is None:
                return LineTable([], [], [])
        data = debug_image_bytes(mod)
    except (OSError, ValueError):
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


def struct_layout(mod, name: str) -> tuple[int, dict[str, int]] | None:
    """(byte size, member -> offset) of `struct name` from the module's DWARF; None without it."""
    from elftools.elf.elffile import ELFFile
    try:
        with open(mod.path, "rb") as f:
            elf = ELFFile(f)
            if not elf.has_dwarf_info():
                return None
            dw = elf.get_dwarf_info(relocate_dwarf_sections=False)
            for cu in dw.iter_CUs():
                for die in cu.iter_DIEs():
                    if die.tag != "DW_TAG_structure_type" or "DW_AT_byte_size" not in die.attributes:
                        continue
                    n = die.attributes.get("DW_AT_name")
                    if n is None or n.value.decode() != name:
                        continue
                    out = {}
                    for c in die.iter_children():
                        loc = c.attributes.get("DW_AT_data_member_location")
                        cn = c.attributes.get("DW_AT_name")
                        if c.tag == "DW_TAG_member" and cn is not None and loc is not None and isinstance(loc.value, int):
                            out[cn.value.decode()] = loc.value
                    return die.attributes["DW_AT_byte_size"].value, out
    except (OSError, ValueError):
        return None
    return None
