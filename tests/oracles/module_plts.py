"""arch/arm/kernel/module-plts.c of v6.1 (count_plts, is_zero_addend_relocation, duplicate_rel and
the counting loop of module_frob_arch_sections), over relocations read with pyelftools."""
from __future__ import annotations

import struct

from .kernel_sort import cmp_rel, kernel_sort

R_ARM_PC24, R_ARM_CALL, R_ARM_JUMP24, R_ARM_THM_CALL, R_ARM_THM_JUMP24 = 1, 28, 29, 10, 30
SHF_EXECINSTR = 0x4
SHN = {"SHN_UNDEF": 0, "SHN_ABS": 0xFFF1, "SHN_COMMON": 0xFFF2}
FIXED_PLTS = 2                     # CONFIG_DYNAMIC_FTRACE: FTRACE_ADDR, MCOUNT_ADDR


def ELF32_R_TYPE(i):
    return i & 0xFF


def ELF32_R_SYM(i):
    return i >> 8


def is_zero_addend_relocation(base, rel):
    r_offset, r_info = rel
    t = ELF32_R_TYPE(r_info)
    if t in (R_ARM_THM_CALL, R_ARM_THM_JUMP24):
        upper = struct.unpack_from("<H", base, r_offset)[0]
        lower = struct.unpack_from("<H", base, r_offset + 2)[0]
        return (upper & 0x7FF) == 0x7FF and (lower & 0x2FFF) == 0x2FFE
    if t in (R_ARM_CALL, R_ARM_PC24, R_ARM_JUMP24):
        return (struct.unpack_from("<I", base, r_offset)[0] & 0xFFFFFF) == 0xFFFFFE
    raise AssertionError("BUG()")


def duplicate_rel(base, rel, num):
    if not num:
        return False
    prev = rel[num - 1]
    return cmp_rel(rel[num], prev) == 0 and is_zero_addend_relocation(base, prev)


def count_plts(syms_shndx, base, rel, num, dstidx):
    ret = 0
    for i in range(num):
        if ELF32_R_TYPE(rel[i][1]) in (R_ARM_CALL, R_ARM_PC24, R_ARM_JUMP24, R_ARM_THM_CALL, R_ARM_THM_JUMP24):
            if syms_shndx[ELF32_R_SYM(rel[i][1])] == dstidx:
                continue
            if not is_zero_addend_relocation(base, rel[i]) or not duplicate_rel(base, rel, i):
                ret += 1
    return ret


class _RawShndx:
    """syms[ELF32_R_SYM(r_info)].st_shndx read from the file image, as the kernel does: the index
    equal to the symbol count reads the 16 bytes after the table (find_sec/elf checks allow it)."""

    def __init__(self, data: bytes, sym_offset: int):
        self.data, self.off = data, sym_offset

    def __getitem__(self, i):
        o = self.off + 16 * i + 14
        return struct.unpack_from("<H", self.data, o)[0] if o + 2 <= len(self.data) else 0


def count_plts_2016(syms_shndx, base, rel, num):
    """The 2016 series (one .plt): only branches to SHN_UNDEF symbols are considered."""
    ret = 0
    for i in range(num):
        if ELF32_R_TYPE(rel[i][1]) in (R_ARM_CALL, R_ARM_PC24, R_ARM_JUMP24, R_ARM_THM_CALL, R_ARM_THM_JUMP24):
            if syms_shndx[ELF32_R_SYM(rel[i][1])] != 0:
                continue
            if not is_zero_addend_relocation(base, rel[i]) or not duplicate_rel(base, rel, i):
                ret += 1
    return ret


def kernel_plt_counts_2016(path):
    """module_frob_arch_sections() of the 2016 series: the one .plt's entry count (classic sort)."""
    return kernel_plt_counts(path, generation="sorted")


def kernel_plt_counts(path, generation="v6"):
    """module_frob_arch_sections(): (core_plts, init_plts) for a 6.1 armmp kernel."""
    from elftools.elf.elffile import ELFFile
    with open(path, "rb") as f:
        data = f.read()
        f.seek(0)
        elf = ELFFile(f)
        secs = list(elf.iter_sections())
        symtab = next(s for s in secs if s["sh_type"] == "SHT_SYMTAB")
        shndx = _RawShndx(data, symtab["sh_offset"])
        if generation == "sorted":
            total = 0
            for idx, s in enumerate(secs):
                if idx == 0 or s["sh_type"] != "SHT_REL":
                    continue
                dst = secs[s["sh_info"]]
                if not (dst["sh_flags"] & SHF_EXECINSTR):
                    continue
                rels = [(r["r_offset"], r["r_info"]) for r in s.iter_relocations()]
                kernel_sort(rels, "sorted")
                total += count_plts_2016(shndx, dst.data(), rels, len(rels))
            return total
        core_plts = init_plts = FIXED_PLTS
        for idx, s in enumerate(secs):
            if idx == 0 or s["sh_type"] != "SHT_REL":
                continue
            dst = secs[s["sh_info"]]
            if not (dst["sh_flags"] & SHF_EXECINSTR):
                continue
            rels = [(r["r_offset"], r["r_info"]) for r in s.iter_relocations()]
            kernel_sort(rels)
            base = dst.data()
            n = count_plts(shndx, base, rels, len(rels), s["sh_info"])
            if not dst.name.startswith(".init"):
                core_plts += n
            else:
                init_plts += n
    return core_plts, init_plts


# --- get_module_plt(), on a model of the PLT section's memory -------------------------------------
class Bug(Exception):
    """BUG() / BUG_ON() in get_module_plt: the section is full."""


class PltMemory:
    """struct plt_entries[] in a zeroed (SHT_NOBITS) section: ldr[PLT_ENT_COUNT], lit[PLT_ENT_COUNT]."""

    def __init__(self, base: int, size: int, stride: int, ldr: int):
        self.base, self.size, self.n, self.ldr_word = base, size, stride // 4, ldr
        self.groups = [[[0] * self.n, [0] * self.n] for _ in range(size // (2 * stride))]
        self.plt_count = 0

    def addr(self, g: int, i: int) -> int:
        return self.base + g * 8 * self.n + 4 * i

    def image(self) -> bytes:
        out = bytearray()
        for ldr, lit in self.groups:
            for w in ldr + lit:
                out += w.to_bytes(4, "little")
        return bytes(out) + bytes(self.size - len(out))


def get_module_plt_v61(sec: PltMemory, val: int, fixed_plts: tuple = ()) -> int:
    """6.1: prealloc_fixed(), the fixed entries, then only the last allocated entry is reused."""
    if fixed_plts and not sec.plt_count:                         # prealloc_fixed()
        sec.plt_count = len(fixed_plts)
        sec.groups[0][0] = [sec.ldr_word] * sec.n
        sec.groups[0][1][:len(fixed_plts)] = list(fixed_plts)
    for idx in range(len(fixed_plts)):
        if sec.groups[0][1][idx] == val:
            return sec.addr(0, idx)
    g = idx = 0
    if sec.plt_count > 0:
        g = (sec.plt_count - 1) // sec.n
        idx = (sec.plt_count - 1) % sec.n
        if sec.groups[g][1][idx] == val:
            return sec.addr(g, idx)
        idx = (idx + 1) % sec.n
        if not idx:
            g += 1
    sec.plt_count += 1
    if sec.plt_count * 8 > sec.size:                              # BUG_ON
        raise Bug()
    if not idx:                                                   # populate a new set of entries
        sec.groups[g] = [[sec.ldr_word] * sec.n, [val] + [0] * (sec.n - 1)]
    else:
        sec.groups[g][1][idx] = val
    return sec.addr(g, idx)


def get_module_plt_scan(sec: PltMemory, val: int) -> int:
    """The one-.plt O(n^2) generation (before the 2016 sorting series): any equal literal is reused."""
    c = sec.plt_count
    for g in range(len(sec.groups)):
        ldr, lit = sec.groups[g]
        if not c:
            sec.groups[g] = [[sec.ldr_word] * sec.n, [val] + [0] * (sec.n - 1)]
            sec.plt_count += 1
            return sec.addr(g, 0)
        for i in range(sec.n):
            if not lit[i]:
                lit[i] = val
                sec.plt_count += 1
            if lit[i] == val:
                return sec.addr(g, i)
        c -= sec.n
    raise Bug()
