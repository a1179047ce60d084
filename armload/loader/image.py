"""Write a loaded module as an ELF32 ARM executable that binutils can disassemble.

Each allocated section keeps its name, sits at its load address and holds its relocated
bytes; the symbol table carries module symbols at final addresses, every resolved external
as an absolute symbol, and a `__plt_<sym>` label plus mapping symbols for each PLT slot.
"""
from __future__ import annotations

import struct

from ..constants import EM_ARM, SHF_ALLOC, SHF_EXECINSTR, SHF_WRITE, SHN_ABS, SHT_NOBITS, SHT_PROGBITS, SHT_STRTAB, SHT_SYMTAB
from .model import LoadedModule

ET_EXEC = 2
PT_LOAD = 1
EF_ARM_EABI5_HARD = 0x05000400
STT = {"notype": 0, "object": 1, "func": 2, "section": 3}
STB = {"local": 0, "global": 1, "weak": 2}
STD_FLAGS = SHF_WRITE | SHF_ALLOC | SHF_EXECINSTR | 0x10 | 0x20   # drop kernel-internal bits


class _Strtab:
    def __init__(self):
        self.buf = bytearray(b"\0")
        self.seen: dict[str, int] = {}

    def add(self, s: str) -> int:
        if s in self.seen:
            return self.seen[s]
        off = len(self.buf)
        self.buf += s.encode() + b"\0"
        self.seen[s] = off
        return off


def write_image(mod: LoadedModule, path: str) -> None:
    with open(path, "wb") as f:
        f.write(image_bytes(mod))


def image_bytes(mod: LoadedModule) -> bytes:
    regions = sorted(mod.regions, key=lambda r: r.base)
    ehsize, phsize, shsize = 52, 32, 40
    off = ehsize + phsize * len(regions)
    reg_off = {}
    for r in regions:
        off = (off + 4095) & ~4095
        reg_off[r.name] = off
        off += r.size
    body_end = off

    secs = sorted(mod.sections, key=lambda s: s.addr)
    shstr = _Strtab()
    strtab = _Strtab()
    new_index = {}
    shdrs = [bytes(shsize)]
    for i, s in enumerate(secs, start=1):
        new_index[s.index] = i
        r = mod.region_of(s.addr) if s.size else mod.region_of(s.addr) or regions[0]
        foff = reg_off[r.name] + (s.addr - r.base) if r is not None else 0
        stype = SHT_NOBITS if s.sh_type == SHT_NOBITS and not s.name.endswith(".plt") else SHT_PROGBITS
        shdrs.append(struct.pack("<10I", shstr.add(s.name), stype, s.flags & STD_FLAGS, s.addr, foff, s.size,
                                 0, 0, 4, 0))

    # Symbols: locals first, as ELF requires.
    local, glob = [], []
    for s in mod.symbols:
        if s.stype == "section" or not s.name:
            continue
        shndx = next((new_index[x.index] for x in secs if x.name == s.section), SHN_ABS)
        ent = (strtab.add(s.name), s.addr, s.size, (STB.get(s.bind, 1) << 4) | STT.get(s.stype, 0), 0, shndx)
        (local if s.bind == "local" else glob).append(ent)
    plt_sec = {x.name: new_index[x.index] for x in secs if x.name in (".plt", ".init.plt")}
    group = 2 * mod.config.plt_stride
    marked = set()
    for e in mod.plt_entries:
        sec = plt_sec.get(".init.plt" if e.plt == "init" else ".plt", SHN_ABS)
        gbase = e.addr - (e.addr - _plt_base(mod, e.plt)) % group
        if gbase not in marked:
            marked.add(gbase)
            local.append((strtab.add("$t" if mod.config.thumb2 else "$a"), gbase, 0, 0, 0, sec))
            local.append((strtab.add("$d"), gbase + mod.config.plt_stride, 0, 0, 0, sec))
        label = f"__plt_{e.symbol}" if e.symbol else f"__plt_{e.target:08x}"
        local.append((strtab.add(label), e.addr | (1 if mod.config.thumb2 else 0), 4, STT["func"], 0, sec))
    for name, r in sorted(mod.resolved.items()):
        typ = STT["func"] if r.kind == "func" else STT["object"]
        glob.append((strtab.add(name), r.addr, 0, (STB["global"] << 4) | typ, 0, SHN_ABS))
    syms = [(0, 0, 0, 0, 0, 0)] + local + glob
    symdata = b"".join(struct.pack("<IIIBBH", *s) for s in syms)

    symtab_off = (body_end + 3) & ~3
    strtab_off = symtab_off + len(symdata)
    n_sym = len(shdrs)
    shdrs.append(struct.pack("<10I", shstr.add(".symtab"), SHT_SYMTAB, 0, 0, symtab_off, len(symdata),
                             n_sym + 1, 1 + len(local), 4, 16))
    shdrs.append(struct.pack("<10I", shstr.add(".strtab"), SHT_STRTAB, 0, 0, strtab_off, len(strtab.buf), 0, 0, 1, 0))
    shstr_name = shstr.add(".shstrtab")
    shstr_off = strtab_off + len(strtab.buf)
    shdrs.append(struct.pack("<10I", shstr_name, SHT_STRTAB, 0, 0, shstr_off, len(shstr.buf) + 0, 0, 0, 1, 0))
    shoff = (shstr_off + len(shstr.buf) + 3) & ~3

    entry = mod.init_addr or 0
    ident = b"\x7fELF" + bytes([1, 1, 1, 0]) + bytes(8)
    ehdr = ident + struct.pack("<HHIIIIIHHHHHH", ET_EXEC, EM_ARM, 1, entry, ehsize, shoff, EF_ARM_EABI5_HARD,
                               ehsize, phsize, len(regions), shsize, len(shdrs), len(shdrs) - 1)
    out = bytearray(ehdr)
    for r in regions:
        flags = 7
        out += struct.pack("<8I", PT_LOAD, reg_off[r.name], r.base, r.base, r.size, r.size, flags, 4096)
    for r in regions:
        out += bytes(reg_off[r.name] - len(out))
        out += r.data
    out += bytes(symtab_off - len(out)) + symdata + strtab.buf + shstr.buf
    out += bytes(shoff - len(out))
    for h in shdrs:
        out += h
    return bytes(out)


def _plt_base(mod: LoadedModule, which: str) -> int:
    name = ".init.plt" if which == "init" else ".plt"
    return next(s.addr for s in mod.sections if s.name == name)
