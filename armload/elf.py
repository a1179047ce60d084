"""Stage 1: read an ARM ELF relocatable object the way the kernel validates a module.

Headers and section lookup go through pyelftools; the symbol table and REL tables are
numpy structured arrays over the file bytes (no per-entry Python objects). The checks and
their wording follow kernel/module/main.c (elf_validity_cache_copy and friends).
"""
from __future__ import annotations

import io
import os
import struct
from dataclasses import dataclass, field

import numpy as np
from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from .constants import (EM_ARM, ET_REL, SHF_ALLOC, SHN_LORESERVE, SHN_UNDEF, SHT_NOBITS, SHT_NULL,
                        SHT_REL, SHT_RELA, SHT_STRTAB, SHT_SYMTAB)
from .errors import ElfFormatError

SYM_DTYPE = np.dtype([("st_name", "<u4"), ("st_value", "<u4"), ("st_size", "<u4"),
                      ("st_info", "u1"), ("st_other", "u1"), ("st_shndx", "<u2")])
REL_DTYPE = np.dtype([("r_offset", "<u4"), ("r_info", "<u4")])
SHDR_DTYPE = np.dtype([("sh_name", "<u4"), ("sh_type", "<u4"), ("sh_flags", "<u4"), ("sh_addr", "<u4"),
                       ("sh_offset", "<u4"), ("sh_size", "<u4"), ("sh_link", "<u4"), ("sh_info", "<u4"),
                       ("sh_addralign", "<u4"), ("sh_entsize", "<u4")])
EHDR_SIZE = 52
SHDR_SIZE = 40


@dataclass
class Section:
    index: int
    name: str
    sh_type: int
    sh_flags: int
    sh_addr: int
    sh_offset: int
    sh_size: int
    sh_link: int
    sh_info: int
    sh_addralign: int
    sh_entsize: int

    @property
    def alloc(self) -> bool:
        return bool(self.sh_flags & SHF_ALLOC)


@dataclass
class ObjectFile:
    """A parsed module: plain data, nothing lazily read."""
    path: str
    data: bytes
    e_flags: int
    sections: list[Section]
    symtab_index: int
    symtab: np.ndarray                  # SYM_DTYPE, index 0 is the null symbol
    strtab: bytes
    rels: dict[int, np.ndarray]         # REL section index -> REL_DTYPE array (a private copy)
    modinfo: dict[str, list[str]]
    name: str                           # module name (modinfo name=, else the file name)
    is_module: bool                     # has .gnu.linkonce.this_module (a .ko)
    warnings: list[str] = field(default_factory=list)
    _names: list[str] | None = None

    @property
    def display(self) -> str:
        return os.path.basename(self.path)

    def section_by_name(self, name: str) -> Section | None:
        for s in self.sections:
            if s.name == name:
                return s
        return None

    def section_bytes(self, sec: Section) -> bytes:
        if sec.sh_type == SHT_NOBITS:
            return bytes(sec.sh_size)
        return self.data[sec.sh_offset:sec.sh_offset + sec.sh_size]

    @property
    def sym_names(self) -> list[str]:
        if self._names is None:
            st = self.strtab
            names = []
            for off in self.symtab["st_name"].tolist():
                end = st.find(b"\0", off)
                names.append(st[off:end].decode("utf-8", "replace"))
            self._names = names
        return self._names

    def sym_name(self, idx: int) -> str:
        if 0 <= idx < len(self.symtab):
            return self.sym_names[idx]
        return ""

    @property
    def symcount(self) -> int:
        return len(self.symtab)


def _fail(path: str, msg: str, **ctx) -> ElfFormatError:
    return ElfFormatError(f"{os.path.basename(path)}: {msg}", file=path, **ctx)


def read_object(path: str, data: bytes | None = None) -> ObjectFile:
    """Parse and validate `path` (or `data`, named `path`). Raises ElfFormatError."""
    if data is None:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise ElfFormatError(f"{path}: cannot read: {e.strerror}", file=path) from None
    _check_header(path, data)
    try:
        header = ELFFile(io.BytesIO(data)).header
    except (ELFError, struct.error, ValueError) as e:
        raise _fail(path, f"malformed ELF header: {e}") from None
    # pyelftools turns every field into enum strings; the section table is read raw instead.
    shstrndx = header["e_shstrndx"]
    raw = np.frombuffer(data, SHDR_DTYPE, count=header["e_shnum"], offset=header["e_shoff"]).tolist()
    raw = [dict(zip(SHDR_DTYPE.names, r)) for r in raw]
    sections = _check_sections(path, data, raw, shstrndx)
    symtab_index, symtab, strtab = _read_symtab(path, data, sections)
    rels = _read_rels(path, data, sections)
    modinfo = _read_modinfo(path, data, sections)
    this_mod = [s for s in sections if s.name == ".gnu.linkonce.this_module"]
    name = (modinfo.get("name") or [None])[0]
    warnings = []
    is_module = bool(this_mod)
    if len(this_mod) > 1:
        raise _fail(path, "Exactly one .gnu.linkonce.this_module section must exist.")
    if this_mod:
        tm = this_mod[0]
        if tm.sh_type == SHT_NOBITS or tm.sh_size == 0:
            raise _fail(path, ".gnu.linkonce.this_module section must have a size set")
        if not tm.alloc:
            raise _fail(path, ".gnu.linkonce.this_module must occupy memory during process execution")
        if not name:
            # struct module begins with state, list (8), then char name[60] at offset 12.
            blob = data[tm.sh_offset + 12:tm.sh_offset + 72]
            name = blob.split(b"\0", 1)[0].decode("ascii", "replace") or None
    else:
        warnings.append("not a kernel module (no .gnu.linkonce.this_module): loaded as a plain object")
    if not name:
        name = os.path.basename(path).split(".", 1)[0].replace("-", "_")
    return ObjectFile(path=path, data=data, e_flags=header["e_flags"], sections=sections,
                      symtab_index=symtab_index, symtab=symtab, strtab=strtab, rels=rels,
                      modinfo=modinfo, name=name, is_module=is_module, warnings=warnings)


def _check_header(path: str, data: bytes) -> None:
    if len(data) < EHDR_SIZE:
        raise _fail(path, f"Invalid ELF header len {len(data)}")
    if data[:4] != b"\x7fELF":
        raise _fail(path, "Invalid ELF header magic: != \\177ELF")
    if data[4] != 1 or data[5] != 1:
        kind = {1: "32-bit", 2: "64-bit"}.get(data[4], f"class {data[4]}")
        order = {1: "little-endian", 2: "big-endian"}.get(data[5], f"data encoding {data[5]}")
        raise _fail(path, f"Invalid architecture in ELF header: {kind} {order} object; "
                          "need ELFCLASS32 little-endian")
    e_type, e_machine = struct.unpack_from("<HH", data, 16)
    if e_type != ET_REL:
        raise _fail(path, f"Invalid ELF header type: {e_type} != {ET_REL}")
    if e_machine != EM_ARM:
        raise _fail(path, f"Invalid architecture in ELF header: {e_machine} (need EM_ARM={EM_ARM})")
    e_shoff, = struct.unpack_from("<I", data, 32)
    e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", data, 46)
    if e_shentsize != SHDR_SIZE:
        raise _fail(path, "Invalid ELF section header size")
    if e_shoff >= len(data) or e_shnum * SHDR_SIZE > len(data) - e_shoff:
        raise _fail(path, f"Invalid ELF section header overflow (e_shoff {e_shoff:#x}, "
                          f"e_shnum {e_shnum}, file size {len(data)}): truncated file?")
    if e_shnum == 0:
        raise _fail(path, "no section headers")
    if e_shstrndx == 0 or e_shstrndx >= e_shnum:
        raise _fail(path, f"Invalid ELF section name index: {e_shstrndx} || e_shstrndx ({e_shstrndx}) "
                          f">= e_shnum ({e_shnum})")


def _check_sections(path, data, raw, shstrndx) -> list[Section]:
    s0 = raw[0]
    if s0["sh_type"] != SHT_NULL or s0["sh_size"] != 0 or s0["sh_addr"] != 0:
        raise _fail(path, f"ELF Spec violation: section 0 type({s0['sh_type']})!=SH_NULL or non-zero len or addr")
    for i, h in enumerate(raw):
        if h["sh_type"] != SHT_NOBITS and h["sh_type"] != SHT_NULL:
            if h["sh_offset"] + h["sh_size"] > len(data) or h["sh_offset"] + h["sh_size"] < h["sh_offset"]:
                raise _fail(path, f"Invalid ELF section in module (section {i} type {h['sh_type']}): "
                                  f"offset {h['sh_offset']:#x} + size {h['sh_size']:#x} is past the end "
                                  f"of the file ({len(data):#x} bytes); truncated file?", section=i)
    strhdr = raw[shstrndx]
    if strhdr["sh_type"] != SHT_STRTAB:
        raise _fail(path, f"section name table (section {shstrndx}) is not SHT_STRTAB")
    if strhdr["sh_size"] == 0:
        raise _fail(path, "empty section name table")
    secstrings = data[strhdr["sh_offset"]:strhdr["sh_offset"] + strhdr["sh_size"]]
    if secstrings[-1] != 0:
        raise _fail(path, "ELF Spec violation: section name table isn't null terminated")
    sections = []
    for i, h in enumerate(raw):
        if h["sh_name"] >= len(secstrings):
            raise _fail(path, f"Invalid ELF section name in module (section {i} type {h['sh_type']})", section=i)
        end = secstrings.index(b"\0", h["sh_name"])
        name = secstrings[h["sh_name"]:end].decode("utf-8", "replace")
        sections.append(Section(i, name, h["sh_type"], h["sh_flags"], h["sh_addr"], h["sh_offset"],
                                h["sh_size"], h["sh_link"], h["sh_info"], h["sh_addralign"], h["sh_entsize"]))
    if sum(1 for s in sections if s.name == ".modinfo") > 1:
        raise _fail(path, "Only one .modinfo section must exist.")
    return sections


def _read_symtab(path, data, sections):
    symtabs = [s for s in sections if s.sh_type == SHT_SYMTAB]
    if len(symtabs) != 1:
        raise _fail(path, "module has no symbols (stripped?)" if not symtabs
                    else f"module has {len(symtabs)} symbol tables; exactly one is allowed")
    st = symtabs[0]
    if st.sh_link == SHN_UNDEF or st.sh_link >= len(sections):
        raise _fail(path, f"Invalid ELF sh_link!=SHN_UNDEF({st.sh_link}) for symbol table")
    strsec = sections[st.sh_link]
    strtab = data[strsec.sh_offset:strsec.sh_offset + strsec.sh_size] if strsec.sh_type != SHT_NOBITS else b""
    if not strtab:
        raise _fail(path, "empty symbol string table")
    if strtab[0] != 0:
        raise _fail(path, "symbol string table missing leading NUL")
    if strtab[-1] != 0:
        raise _fail(path, "symbol string table isn't NUL terminated")
    count = st.sh_size // SYM_DTYPE.itemsize
    syms = np.frombuffer(data, SYM_DTYPE, count=count, offset=st.sh_offset)
    if count and int(syms["st_name"].max()) >= len(strtab):
        bad = int(np.argmax(syms["st_name"] >= len(strtab)))
        raise _fail(path, f"symbol name out of bounds in string table (symbol {bad}, "
                          f"st_name {int(syms['st_name'][bad])} >= {len(strtab)})", symbol=bad)
    shndx = syms["st_shndx"]
    bad = (shndx >= len(sections)) & (shndx < SHN_LORESERVE)
    if bad.any():
        i = int(np.argmax(bad))
        raise _fail(path, f"symbol {i} has bad section index {int(shndx[i])} (e_shnum {len(sections)})",
                    symbol=i)
    return st.index, syms, strtab


def _read_rels(path, data, sections) -> dict[int, np.ndarray]:
    rels = {}
    for s in sections:
        if s.sh_type != SHT_REL:
            continue
        n = s.sh_size // REL_DTYPE.itemsize          # the kernel truncates, so do we
        rels[s.index] = np.frombuffer(data, REL_DTYPE, count=n, offset=s.sh_offset).copy()
    return rels


def _read_modinfo(path, data, sections) -> dict[str, list[str]]:
    info: dict[str, list[str]] = {}
    sec = next((s for s in sections if s.name == ".modinfo"), None)
    if sec is None or sec.sh_type == SHT_NOBITS:
        return info
    for item in data[sec.sh_offset:sec.sh_offset + sec.sh_size].split(b"\0"):
        if b"=" in item:
            k, v = item.split(b"=", 1)
            info.setdefault(k.decode("utf-8", "replace"), []).append(v.decode("utf-8", "replace"))
    return info


def rela_sections(obj: ObjectFile) -> list[Section]:
    return [s for s in obj.sections if s.sh_type == SHT_RELA]
