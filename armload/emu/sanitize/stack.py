"""Out-of-bounds accesses to the module's stack arrays, where its DWARF describes the frame.

For each function (DW_TAG_subprogram with an address range), the arrays among its variables
(DW_TAG_variable, at any block depth, whose location is DW_OP_fbreg N and whose type is a
DW_TAG_array_type, size from DW_AT_byte_size or the subrange bounds) relative to the frame base,
which GCC's ARM output gives as DW_OP_call_frame_cfa: the caller's sp, found by unwinding the
module's frames (EHABI, emu/unwind.py) from the access.

An access by the module through a pointer register (not sp itself: the compiler's own slots)
whose register points into an array of a live frame and whose bytes leave that array is
out of bounds; so is a kernel mem*/str* function called by the module with a destination (or
source) in such an array and a length past its end. Without DWARF (Debian's modules) nothing is
known about the frames and nothing is checked.
"""
from __future__ import annotations

import bisect
import io
from dataclasses import dataclass

from .. import unwind

DW_OP_fbreg, DW_OP_call_frame_cfa = 0x91, 0x9C


@dataclass
class StackVar:
    name: str
    offset: int              # from the CFA
    size: int


@dataclass
class FrameInfo:
    name: str
    low: int
    high: int
    vars: list[StackVar]


def _sleb(data: bytes) -> int:
    r, shift = 0, 0
    for b in data:
        r |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            if b & 0x40:
                r -= 1 << shift
            break
    return r


def _type_size(die, depth=0) -> tuple[bool, int]:
    """(is an array, byte size) of a type DIE, through typedefs and qualifiers."""
    if die is None or depth > 8:
        return False, 0
    if die.tag == "DW_TAG_array_type":
        if "DW_AT_byte_size" in die.attributes:
            return True, die.attributes["DW_AT_byte_size"].value
        n = 1
        for c in die.iter_children():
            if c.tag == "DW_TAG_subrange_type":
                if "DW_AT_count" in c.attributes:
                    n *= c.attributes["DW_AT_count"].value
                elif "DW_AT_upper_bound" in c.attributes:
                    n *= c.attributes["DW_AT_upper_bound"].value + 1
                else:
                    return False, 0
        _, el = _type_size(die.get_DIE_from_attribute("DW_AT_type"), depth + 1)
        return True, n * el
    if "DW_AT_byte_size" in die.attributes:
        return False, die.attributes["DW_AT_byte_size"].value
    if "DW_AT_type" in die.attributes:
        return _type_size(die.get_DIE_from_attribute("DW_AT_type"), depth + 1)
    return False, 0


def frames_of(mod) -> list[FrameInfo]:
    """The functions of a loaded module with their stack arrays (empty without DWARF)."""
    from elftools.elf.elffile import ELFFile
    from ...loader.debug_image import debug_image_bytes
    with _module_stream(mod.path) as f:
        if ELFFile(f).get_section_by_name(".debug_info") is None:
            return []
    elf = ELFFile(io.BytesIO(debug_image_bytes(mod)))
    if not elf.has_dwarf_info():
        return []
    dw = elf.get_dwarf_info(relocate_dwarf_sections=False)
    out = []
    for cu in dw.iter_CUs():
        for die in cu.iter_DIEs():
            if die.tag != "DW_TAG_subprogram" or "DW_AT_low_pc" not in die.attributes:
                continue
            fb = die.attributes.get("DW_AT_frame_base")
            if fb is None or list(fb.value[:1]) != [DW_OP_call_frame_cfa]:
                continue
            low = die.attributes["DW_AT_low_pc"].value
            hi = die.attributes["DW_AT_high_pc"]
            high = hi.value if hi.form == "DW_FORM_addr" else low + hi.value
            vars_ = []
            work = list(die.iter_children())
            while work:
                c = work.pop()
                if c.tag == "DW_TAG_lexical_block":
                    work.extend(c.iter_children())
                    continue
                if c.tag != "DW_TAG_variable" or "DW_AT_location" not in c.attributes:
                    continue
                loc = c.attributes["DW_AT_location"]
                if loc.form != "DW_FORM_exprloc" or not loc.value or loc.value[0] != DW_OP_fbreg:
                    continue
                is_array, size = _type_size(c.get_DIE_from_attribute("DW_AT_type")) if "DW_AT_type" in c.attributes \
                    else (False, 0)
                if not is_array or size <= 0:
                    continue
                name = c.attributes["DW_AT_name"].value.decode() if "DW_AT_name" in c.attributes else "?"
                vars_.append(StackVar(name, _sleb(bytes(loc.value[1:])), size))
            if vars_:
                nm = die.attributes.get("DW_AT_name")
                out.append(FrameInfo(nm.value.decode() if nm else f"fn_{low:x}", low, high, vars_))
    return out


def out_of_bounds(lo: int, hi: int, base: int, ea: int, n: int) -> int | None:
    """The first byte outside the array [lo, hi) of an n-byte access at ea made through a pointer
    `base` into it, or None: in bounds, or `base` points elsewhere (not this array's access).
    (KASAN's rule: every byte of the access must be addressable.)"""
    if not lo <= base < hi or (lo <= ea and ea + n <= hi):
        return None
    return ea if ea >= hi or ea < lo else hi


class StackFrames:
    """Module functions with stack arrays, and the arrays of the live frames at an access."""

    def __init__(self):
        self.funcs: list[FrameInfo] = []
        self.lows: list[int] = []
        self.tables: list[tuple[int, int, object]] = []     # (lo, hi, ExidxTable) per module

    def add_module(self, mod, base: int, end: int) -> int:
        fs = frames_of(mod)
        if not fs:
            return 0
        self.funcs = sorted(self.funcs + fs, key=lambda f: f.low)
        self.lows = [f.low for f in self.funcs]
        table = unwind.module_table(_Mem(mod), mod)
        if table is not None:
            self.tables.append((base, end, table))
        return len(fs)

    def __bool__(self):
        return bool(self.funcs)

    def func_at(self, pc: int) -> FrameInfo | None:
        i = bisect.bisect_right(self.lows, pc) - 1
        if i >= 0 and pc < self.funcs[i].high:
            return self.funcs[i]
        return None

    def _table(self, pc: int):
        for lo, hi, t in self.tables:
            if lo <= pc < hi:
                return t
        return None

    def arrays(self, regs: list[int], read32, max_frames: int = 8) -> list[tuple[str, str, int, int]]:
        """(function, variable, start, end) of the stack arrays of the module frames from `regs`
        (r0..r15) outwards, while the frames are the module's."""
        out = []
        frame = unwind.Frame(list(regs), set(range(16)))
        for i in range(max_frames):
            pc = frame.pc & ~1
            t = self._table(pc)
            if t is None:
                break
            try:
                up = unwind.unwind_frame(frame, t, read32, at_entry_ok=True)
            except Exception:
                break
            f = self.func_at(pc)
            if f is not None:
                cfa = up.sp
                for v in f.vars:
                    out.append((f.name, v.name, cfa + v.offset, cfa + v.offset + v.size))
            frame = up
        return out


class _Mem:
    def __init__(self, m):
        self.m = m

    def read(self, addr, n):
        return self.m.read(addr, n)


def _module_stream(path: str):
    """The module file as ELF bytes (a .ko.xz/.zst/.gz inflated as kmod reads it)."""
    import io as _io
    from ...kernel.kofile import read_module
    return _io.BytesIO(read_module(path))
