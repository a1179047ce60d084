"""The pieces of a synthetic module (synth.py): the instruction encodings of its code (ARM and
Thumb-2), the externals it imports with their modversions CRCs and the Module.symvers exporting
them, and the ELF string, symbol and relocation tables."""
from __future__ import annotations

import zlib

import numpy as np

# Real CRCs from Debian 6.1.0-50-armmp Module.symvers.
MODULE_LAYOUT_CRC = 0x8C1823F3
UNWIND_PR0 = "__aeabi_unwind_cpp_pr0"
UNWIND_PR0_CRC = 0xEFD6CF06

# Branch range limits used by the kernel (exclusive), and what we keep free for addends.
_RANGE = {False: 0x02000000, True: 0x01000000}
_RANGE_MARGIN = 0x1000


def _t32(upper: int, lower: int) -> int:
    """A 32-bit Thumb instruction as the LE u32 it occupies in memory (upper halfword first)."""
    return upper | (lower << 16)


# Instruction words.  ARM: plain words.  Thumb-2: 32-bit encodings packed with _t32.
_ARM = dict(
    fill=[0xE2800001,   # add r0, r0, #1
          0xE1A01004,   # mov r1, r4
          0xE0222000,   # eor r2, r2, r0
          0xE2433001,   # sub r3, r3, #1
          0xE1A00000],  # nop (mov r0, r0)
    push=0xE92D4010,    # push {r4, lr}
    ret0=0xE3A00000,    # mov r0, #0
    pop_pc=0xE8BD8010,  # pop {r4, pc}
    pop_lr=0xE8BD4010,  # pop {r4, lr}
    bx_lr=0xE12FFF1E,   # bx lr
)
_THUMB = dict(
    fill=[_t32(0xF100, 0x0001),   # add.w r0, r0, #1
          _t32(0xEA4F, 0x0104),   # mov.w r1, r4
          _t32(0xEA82, 0x0200),   # eor.w r2, r2, r0
          _t32(0xF1A3, 0x0301),   # sub.w r3, r3, #1
          _t32(0xF3AF, 0x8000)],  # nop.w
    push=_t32(0xE92D, 0x4010),    # push.w {r4, lr}
    ret0=_t32(0xF04F, 0x0000),    # mov.w r0, #0
    pop_pc=_t32(0xE8BD, 0x8010),  # pop.w {r4, pc}
    pop_lr=_t32(0xE8BD, 0x4010),  # pop.w {r4, lr}
    bx_lr=_t32(0x4770, 0xBF00),   # bx lr ; nop
)


# ---------------------------------------------------------------------------------------------
# instruction encoders (vectorised, int64 arrays in, uint32 arrays out)

def _arm_branch(addend, link):
    """ARM B/BL with cond AL holding REL addend `addend` (A = addend - 8 in the imm24 field)."""
    a = np.asarray(addend, dtype=np.int64)
    imm24 = ((a - 8) >> 2) & 0xFFFFFF
    op = np.where(np.asarray(link, dtype=bool), 0xEB000000, 0xEA000000)
    return (op | imm24).astype(np.uint32)


def _thumb_branch(addend, link):
    """Thumb-2 BL (T1) / B.W (T4) holding REL addend `addend` (A = addend - 4)."""
    off = np.asarray(addend, dtype=np.int64) - 4
    s = (off >> 24) & 1
    i1 = (off >> 23) & 1
    i2 = (off >> 22) & 1
    j1 = (~(i1 ^ s)) & 1
    j2 = (~(i2 ^ s)) & 1
    upper = 0xF000 | (s << 10) | ((off >> 12) & 0x3FF)
    base = np.where(np.asarray(link, dtype=bool), 0xD000, 0x9000)
    lower = base | (j1 << 13) | (j2 << 11) | ((off >> 1) & 0x7FF)
    return (upper | (lower << 16)).astype(np.uint32)


def _arm_movw(addend, movt, rd=3):
    a = np.asarray(addend, dtype=np.int64) & 0xFFFF
    op = np.where(np.asarray(movt, dtype=bool), 0xE3400000, 0xE3000000)
    return (op | ((a >> 12) << 16) | (rd << 12) | (a & 0xFFF)).astype(np.uint32)


def _thumb_movw(addend, movt, rd=3):
    a = np.asarray(addend, dtype=np.int64) & 0xFFFF
    op = np.where(np.asarray(movt, dtype=bool), 0xF2C0, 0xF240)
    upper = op | (((a >> 11) & 1) << 10) | ((a >> 12) & 0xF)
    lower = (((a >> 8) & 7) << 12) | (rd << 8) | (a & 0xFF)
    return (upper | (lower << 16)).astype(np.uint32)


# ---------------------------------------------------------------------------------------------
# external symbols

def external_names(n_externals: int) -> list[str]:
    """Names of the undefined externals: ext_func_0001 .. ext_func_<n> (at least 4 digits)."""
    width = max(4, len(str(n_externals)))
    return [f"ext_func_{i:0{width}d}" for i in range(1, n_externals + 1)]


def external_crc(name: str) -> int:
    """The modversions CRC the synthetic module records for an external (zlib.crc32 of its name)."""
    if name == "module_layout":
        return MODULE_LAYOUT_CRC
    if name == UNWIND_PR0:
        return UNWIND_PR0_CRC
    return zlib.crc32(name.encode())


def symvers_text(n_externals: int = 2000) -> str:
    """Module.symvers lines exporting every external (as vmlinux EXPORT_SYMBOL) with its CRC.
    Concatenate with sample_modules/Module.symvers to get module_layout etc. as well."""
    return "".join(f"0x{external_crc(n):08x}\t{n}\tvmlinux\tEXPORT_SYMBOL\t\n"
                   for n in external_names(n_externals))


# ---------------------------------------------------------------------------------------------
# string table helper

class _StrTab:
    def __init__(self):
        self._parts = [b"\0"]
        self._size = 1
        self._cache: dict[str, int] = {}

    def add(self, name: str) -> int:
        off = self._cache.get(name)
        if off is None:
            off = self._size
            b = name.encode() + b"\0"
            self._parts.append(b)
            self._size += len(b)
            self._cache[name] = off
        return off

    def add_many(self, names: list[str]) -> np.ndarray:
        """Append many distinct names; return their offsets (no dedup, fast)."""
        if not names:
            return np.zeros(0, dtype=np.uint32)
        lens = np.fromiter((len(n) + 1 for n in names), dtype=np.int64, count=len(names))
        offs = self._size + np.concatenate(([0], np.cumsum(lens)[:-1]))
        blob = ("\0".join(names) + "\0").encode()
        self._parts.append(blob)
        self._size += len(blob)
        return offs.astype(np.uint32)

    def bytes(self) -> bytes:
        return b"".join(self._parts)


_SYM_DTYPE = np.dtype([("name", "<u4"), ("value", "<u4"), ("size", "<u4"),
                       ("info", "u1"), ("other", "u1"), ("shndx", "<u2")])
_REL_DTYPE = np.dtype([("offset", "<u4"), ("info", "<u4")])


def _syms(name, value, size, bind, typ, shndx, n=None):
    """Build a symbol array; scalars are broadcast."""
    if n is None:
        n = max(np.size(x) for x in (name, value, size, shndx))
    a = np.zeros(n, dtype=_SYM_DTYPE)
    a["name"] = name
    a["value"] = value
    a["size"] = size
    a["info"] = (bind << 4) | typ
    a["shndx"] = shndx
    return a


def _rels(offset, symidx, rtype):
    offset = np.asarray(offset, dtype=np.int64)
    a = np.zeros(len(offset), dtype=_REL_DTYPE)
    a["offset"] = offset
    a["info"] = (np.asarray(symidx, dtype=np.int64) << 8) | np.asarray(rtype, dtype=np.int64)
    return a
