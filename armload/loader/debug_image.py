"""The loaded module as an ELF executable that keeps its DWARF, relocated to the load addresses.

`image.image_bytes` writes the allocated sections at their load addresses; this appends the
module file's non-allocated sections (`.debug_*`, `.comment`, `.ARM.attributes`) with every
`.rel.debug_*` relocation applied against the final addresses, as the kernel never does (it
drops them) but addr2line and gdb need: a DW_AT_low_pc, a line-program address, a
.debug_frame FDE start then name the loaded code. Relocations against a non-allocated section
(.debug_str offsets, .debug_abbrev offsets) keep their section-relative values.
"""
from __future__ import annotations

import struct

from elftools.elf.elffile import ELFFile

from ..constants import SHF_ALLOC
from .image import image_bytes
from .model import LoadedModule

R_ARM_ABS32, R_ARM_REL32, R_ARM_NONE, R_ARM_PREL31 = 2, 3, 0, 42
KEEP_PREFIXES = (".debug_", ".comment", ".ARM.attributes")


def debug_sections(mod: LoadedModule) -> dict[str, bytes]:
    """name -> relocated contents of the module file's debug sections (empty when stripped)."""
    with _module_stream(mod.path) as f:
        elf = ELFFile(f)
        final = {s.index: s.addr for s in mod.sections}
        symtab = elf.get_section_by_name(".symtab")
        syms = list(symtab.iter_symbols()) if symtab is not None else []
        out: dict[str, bytes] = {}
        for idx, sec in enumerate(elf.iter_sections()):
            if sec["sh_flags"] & SHF_ALLOC or not sec.name.startswith(KEEP_PREFIXES) or sec["sh_type"] == "SHT_NOBITS":
                continue
            data = bytearray(sec.data())
            rel = elf.get_section_by_name(".rel" + sec.name)
            if rel is not None:
                for r in rel.iter_relocations():
                    typ, off = r["r_info_type"], r["r_offset"]
                    if typ == R_ARM_NONE:
                        continue
                    s = _symbol_value(mod, elf, syms[r["r_info_sym"]], final)
                    a = struct.unpack_from("<I", data, off)[0]
                    if typ == R_ARM_ABS32:
                        v = s + a
                    elif typ == R_ARM_REL32:
                        v = s + a - off          # place: a non-allocated section sits at 0
                    else:
                        raise ValueError(f"{mod.name}: relocation type {typ} in {rel.name} is not supported")
                    struct.pack_into("<I", data, off, v & 0xFFFFFFFF)
            out[sec.name] = bytes(data)
        return out


def _symbol_value(mod, elf, sym, final) -> int:
    shndx = sym["st_shndx"]
    if shndx == "SHN_UNDEF":
        rs = mod.resolved.get(sym.name)
        return rs.addr if rs is not None else 0
    if shndx == "SHN_ABS":
        return sym["st_value"]
    if isinstance(shndx, int):
        if shndx in final:                   # an allocated section: its load address
            return final[shndx] + sym["st_value"]
        return sym["st_value"]               # a non-allocated one (.debug_str, ...): offsets stay
    return sym["st_value"]


def debug_image_bytes(mod: LoadedModule) -> bytes:
    """`image_bytes(mod)` plus the relocated debug sections (identical when the module has none)."""
    base = image_bytes(mod)
    extra = debug_sections(mod)
    if not extra:
        return base
    e_shoff, = struct.unpack_from("<I", base, 0x20)
    e_shnum, e_shstrndx = struct.unpack_from("<HH", base, 0x30)
    shdrs = [list(struct.unpack_from("<10I", base, e_shoff + 40 * i)) for i in range(e_shnum)]
    sh = shdrs[e_shstrndx]
    shstr = bytearray(base[sh[4]:sh[4] + sh[5]])
    out = bytearray(base[:e_shoff])
    new = []
    for name, data in extra.items():
        name_off = len(shstr)
        shstr += name.encode() + b"\0"
        off = len(out)
        out += data
        new.append([name_off, 1, 0x30 if name in (".debug_str", ".debug_line_str", ".comment") else 0,
                    0, off, len(data), 0, 0, 1, 1 if name in (".debug_str", ".debug_line_str", ".comment") else 0])
    sh_off = len(out)
    out += shstr
    shdrs[e_shstrndx][4], shdrs[e_shstrndx][5] = sh_off, len(shstr)
    out += bytes((-len(out)) % 4)
    new_shoff = len(out)
    for h in shdrs + new:
        out += struct.pack("<10I", *h)
    struct.pack_into("<I", out, 0x20, new_shoff)
    struct.pack_into("<H", out, 0x30, len(shdrs) + len(new))
    return bytes(out)


def write_debug_image(mod: LoadedModule, path: str) -> None:
    with open(path, "wb") as f:
        f.write(debug_image_bytes(mod))


def _module_stream(path: str):
    """The module file as ELF bytes (a .ko.xz/.zst/.gz inflated as kmod reads it)."""
    import io as _io
    from ..kernel.kofile import read_module
    return _io.BytesIO(read_module(path))
