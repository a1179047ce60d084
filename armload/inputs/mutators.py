"""Structured mutations the one-field classes of fuzz.py cannot make (issue 21): two fields of one
section header changed together, per-cpu sections, non-ELF and unterminated string tables,
duplicated or renamed key sections. Each works on any bytes that parse as an ELF32 header with
a section table (a module, a plain .o, or an already mutated input) and returns (data, what).

    data, what = mutate_any(data, rng)        # the custom mutator of atheris_fuzz.py uses this
"""
from __future__ import annotations

import random
import struct

from ..constants import SHF_ALLOC, SHF_EXECINSTR, SHF_WRITE, SHT_NOBITS, SHT_NULL, SHT_PROGBITS
from ..constants import SHT_ARM_EXIDX

FIELDS = ("sh_name", "sh_type", "sh_flags", "sh_addr", "sh_offset", "sh_size", "sh_link", "sh_info",
          "sh_addralign", "sh_entsize")
KEY_SECTIONS = (".gnu.linkonce.this_module", ".modinfo", "__versions", ".data..percpu", ".symtab", ".strtab",
                ".ARM.exidx", ".plt", ".init.plt", "__ksymtab", ".text", ".init.text")
ODD_TYPES = (SHT_NULL, SHT_NOBITS, SHT_PROGBITS, SHT_ARM_EXIDX, 0x6FFFFFFF, 0xFFFFFFFF)


class Elf:
    """The section header table of `data` as far as it can be read (no validation)."""

    def __init__(self, data: bytes):
        if len(data) < 52 or data[:4] != b"\x7fELF":
            raise ValueError("not ELF")
        self.shoff, = struct.unpack_from("<I", data, 32)
        self.shnum, self.shstrndx = struct.unpack_from("<HH", data, 48)
        if self.shnum < 2 or self.shoff + 40 * self.shnum > len(data):      # no section to mutate
            raise ValueError("no section table")
        self.data = data

    def field(self, i: int, name: str) -> int:
        return struct.unpack_from("<I", self.data, self.shoff + 40 * i + 4 * FIELDS.index(name))[0]

    def at(self, i: int, name: str) -> int:
        return self.shoff + 40 * i + 4 * FIELDS.index(name)

    def name(self, i: int) -> str:
        if self.shstrndx >= self.shnum:
            return ""
        base = self.field(self.shstrndx, "sh_offset") + self.field(i, "sh_name")
        end = self.data.find(b"\0", base, base + 64)
        return self.data[base:end].decode("latin-1") if 0 <= base < end else ""

    def find(self, name: str) -> int | None:
        return next((i for i in range(1, self.shnum) if self.name(i) == name), None)


def _put(b: bytearray, off: int, value: int) -> None:
    b[off:off + 4] = (value & 0xFFFFFFFF).to_bytes(4, "little")


def _outside(rng: random.Random, n: int) -> int:
    return rng.choice((n, n + 1, n - 1, n + 0x10, n + 0x1000, 0x7FFFFFF0, 0xFFFFFFF0, 0xFFFFFFFF))


def _pick(e: Elf, rng: random.Random) -> int:
    named = [i for i in (e.find(k) for k in KEY_SECTIONS) if i]
    return rng.choice(named) if named and rng.random() < 0.6 else rng.randrange(1, e.shnum)


def stacked(e: Elf, rng: random.Random) -> tuple[bytes, str]:
    """Two fields of one header together: an unchecked type with an offset/size outside the file,
    a flag change with a type change, and so on."""
    b = bytearray(e.data)
    i = _pick(e, rng)
    n = len(b)
    how = rng.choice(("type+offset", "type+size", "type+flags", "flags+offset", "offset+size"))
    t = rng.choice(ODD_TYPES)
    if how == "type+offset":
        v = _outside(rng, n)
        _put(b, e.at(i, "sh_type"), t)
        _put(b, e.at(i, "sh_offset"), v)
    elif how == "type+size":
        v = rng.choice((n, n + 1, 0xFFFFFFFF, 0x7FFFFFFF, 0x10000000, 0x100000))
        _put(b, e.at(i, "sh_type"), t)
        _put(b, e.at(i, "sh_size"), v)
    elif how == "type+flags":
        v = rng.choice((SHF_ALLOC, SHF_ALLOC | SHF_EXECINSTR, SHF_ALLOC | SHF_WRITE, 0))
        _put(b, e.at(i, "sh_type"), t)
        _put(b, e.at(i, "sh_flags"), v)
    elif how == "flags+offset":
        v = _outside(rng, n)
        t = rng.choice((SHF_ALLOC, SHF_ALLOC | SHF_EXECINSTR))
        _put(b, e.at(i, "sh_flags"), t)
        _put(b, e.at(i, "sh_offset"), v)
    else:
        t = _outside(rng, n)
        v = rng.choice((0, 1, 4, 0x40, 0xFFFFFFFF))
        _put(b, e.at(i, "sh_offset"), t)
        _put(b, e.at(i, "sh_size"), v)
    return bytes(b), f"section {i} ({e.name(i)}) {how} = {t:#x}, {v:#x}"


def _rename(e: Elf, b: bytearray, i: int, new: str) -> bool:
    """Overwrite section i's name in place when the new name fits (NUL padded)."""
    old = e.name(i)
    if len(new) > len(old) or e.shstrndx >= e.shnum:
        return False
    at = e.field(e.shstrndx, "sh_offset") + e.field(i, "sh_name")
    b[at:at + len(old)] = new.encode().ljust(len(old), b"\0")
    return True


def renamed(e: Elf, rng: random.Random) -> tuple[bytes, str]:
    """Point a section's sh_name at a key section's name (a second .modinfo, this_module, ...), or
    make a data section .data..percpu (none of the samples has one)."""
    b = bytearray(e.data)
    i = rng.randrange(1, e.shnum)
    if rng.random() < 0.4:
        j = next((k for k in range(1, e.shnum) if e.name(k).startswith((".data", ".bss", ".rodata"))
                  and len(e.name(k)) >= len(".data..percpu")), None)
        if j is not None and _rename(e, b, j, ".data..percpu"):
            _put(b, e.at(j, "sh_flags"), SHF_ALLOC | SHF_WRITE)
            if rng.random() < 0.5:
                _put(b, e.at(j, "sh_type"), rng.choice((SHT_NOBITS, SHT_NULL)))
            return bytes(b), f"section {j} ({e.name(j)}) renamed .data..percpu"
    key = rng.choice([k for k in KEY_SECTIONS if e.find(k)] or [".modinfo"])
    k = e.find(key)
    if k is None:
        return bytes(b), "rename: no key section"
    _put(b, e.at(i, "sh_name"), e.field(k, "sh_name"))
    return bytes(b), f"section {i} ({e.name(i)}) renamed {key}"


def strings(e: Elf, rng: random.Random) -> tuple[bytes, str]:
    """An unterminated or truncated string table (section names, symbol names, .modinfo)."""
    b = bytearray(e.data)
    which = rng.choice((".strtab", ".shstrtab", ".modinfo"))
    i = e.find(which) if which != ".shstrtab" else e.shstrndx
    if i is None or i >= e.shnum:
        return bytes(b), f"strings: no {which}"
    off, size = e.field(i, "sh_offset"), e.field(i, "sh_size")
    how = rng.choice(("no-nul", "last-nul", "size-1", "to-eof"))
    if how == "no-nul" and off + size <= len(b):
        b[off:off + size] = bytes(x or 0x41 for x in b[off:off + size])
    elif how == "last-nul" and 0 < size and off + size <= len(b):
        b[off + size - 1] = 0x41
    elif how == "size-1":
        _put(b, e.at(i, "sh_size"), max(size - 1, 0))
    else:
        _put(b, e.at(i, "sh_offset"), len(b) - min(size, 8))
    return bytes(b), f"{which} (section {i}) {how}"


def duplicated(e: Elf, rng: random.Random) -> tuple[bytes, str]:
    """A copy of a key section's header appended (the table moves to the end of the file)."""
    i = _pick(e, rng)
    d = e.data
    table = d[e.shoff:e.shoff + 40 * e.shnum] + d[e.shoff + 40 * i:e.shoff + 40 * i + 40]
    b = bytearray(d) + bytes((-len(d)) % 4)
    new = len(b)
    b += table
    _put(b, 32, new)
    b[48:50] = (e.shnum + 1).to_bytes(2, "little")
    return bytes(b), f"duplicate section header {i} ({e.name(i)})"


def non_elf(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """Not an ELF file at all, or one whose header is cut or its magic broken."""
    how = rng.choice(("magic", "cut-header", "text", "empty"))
    if how == "magic":
        return b"\x7fELG" + data[4:], "non-ELF: magic"
    if how == "cut-header":
        return data[:rng.randrange(0, 52)], "non-ELF: header cut"
    if how == "text":
        return b"this is not a module\n" * rng.randrange(1, 8), "non-ELF: text"
    return b"", "non-ELF: empty"


CLASSES = {"stacked": stacked, "renamed": renamed, "strings": strings, "duplicated": duplicated}


def mutate_any(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """One mutation of a random class of this file; non-ELF inputs become non-ELF variants."""
    try:
        e = Elf(data)
    except ValueError:
        return non_elf(data or b"\x7fELF", rng)
    if rng.random() < 0.03:
        return non_elf(data, rng)
    name = rng.choice(sorted(CLASSES))
    return CLASSES[name](e, rng)
