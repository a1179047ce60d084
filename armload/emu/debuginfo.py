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


@dataclass
class Function:
    name: str
    low: int
    high: int                     # exclusive
    file: str
    line: int


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
        names = _file_names(lp, cu)
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
            name = die.attributes.get("DW_AT_name")
            fidx = die.attributes.get("DW_AT_decl_file")
            line = die.attributes.get("DW_AT_decl_line")
            functions.append(Function(name.value.decode() if name else f"fn_{low:x}", low, high,
                                      names.get(fidx.value, "??") if fidx else "??", line.value if line else 0))
    return LineTable(rows, ranges, functions)


def _file_names(lp, cu) -> dict[int, str]:
    hdr = lp.header
    dirs = [d.decode() if isinstance(d, bytes) else d for d in hdr.get("include_directory", [])]
    comp_dir = cu.get_top_DIE().attributes.get("DW_AT_comp_dir")
    comp_dir = comp_dir.value.decode() if comp_dir else ""
    out = {}
    base = 0 if lp.header.version >= 5 else 1
    for i, fe in enumerate(hdr.get("file_entry", [])):
        name = fe.name.decode() if isinstance(fe.name, bytes) else fe.name
        di = fe.dir_index
        if not os.path.isabs(name):
            if lp.header.version >= 5:
                d = dirs[di] if di < len(dirs) else ""
            else:
                d = dirs[di - 1] if 0 < di <= len(dirs) else comp_dir
            if d and not os.path.isabs(d):
                d = os.path.join(comp_dir, d)
            name = os.path.join(d, name) if d else name
        out[i + base] = os.path.normpath(name)
    return out
