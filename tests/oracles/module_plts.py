"""arch/arm/kernel/module-plts.c of v6.1 (count_plts, is_zero_addend_relocation, duplicate_rel and
the counting loop of module_frob_arch_sections), over relocations read with pyelftools; the 2016
series' count; and v4.0's count_plts/duplicate_rel/module_frob_arch_sections (kernel_plt_counts_v40).
get_module_plt of 6.1 and of the scanning generations (v4.0) at the end."""
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
    """v4.0 get_module_plt on the PLT in_init(loc) picked (core or init): walks every group, any equal
    literal is reused."""
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


# --- v4.0 (7d485f647c1f "ARM: 8220/1: allow modules outside of bl range"): count_plts, duplicate_rel and
# the counting loop of module_frob_arch_sections, line by line. No sort, no symbol filter, every SHT_REL.
def __opcode_to_mem_arm(x):                      # little-endian, not BE8: identity
    return x


def __opcode_to_mem_thumb32(x):                  # little-endian: swap the two halfwords
    return ((x << 16) | (x >> 16)) & 0xFFFFFFFF


class _Mem:
    """The kernel's copy of the file: a u32 load at an offset into it. Past its end the kernel reads
    whatever memory follows (undefined); 0 stands in, as in armload."""

    def __init__(self, data: bytes):
        self.data = data

    def u32(self, addr):
        return struct.unpack_from("<I", self.data, addr)[0] if 0 <= addr and addr + 4 <= len(self.data) else 0


def duplicate_rel_v40(mem, base, rel, num, mask, same=None):
    """`same`: the indices i < num with rel[i].r_info == rel[num].r_info, in order, when the caller
    has them; the loop then skips only iterations that would `continue` anyway (the literal loop is
    O(n^2) in Python on a big module's .rel.text)."""
    for i in (range(num) if same is None else same):
        if rel[i][1] != rel[num][1]:
            continue

        # Identical relocation types against identical symbols can still result in different PLT
        # entries if the addend in the place is different. So resolve the target of the relocation
        # to compare the values.
        loc1 = base + rel[i][0]
        loc2 = base + rel[num][0]
        if ((mem.u32(loc1) ^ mem.u32(loc2)) & mask) == 0:
            return 1
    return 0


def count_plts_v40(mem, base, rel, num, literal=False):
    """Sure, this is order(n^2), but it's usually short, and not time critical."""
    ret = 0
    earlier: dict[int, list[int]] = {}
    for i in range(num):
        same = None if literal else earlier.setdefault(rel[i][1], [])
        t = ELF32_R_TYPE(rel[i][1])
        if t in (R_ARM_CALL, R_ARM_PC24, R_ARM_JUMP24):
            if not duplicate_rel_v40(mem, base, rel, i, __opcode_to_mem_arm(0x00FFFFFF), same):
                ret += 1
        elif t in (R_ARM_THM_CALL, R_ARM_THM_JUMP24):
            if not duplicate_rel_v40(mem, base, rel, i, __opcode_to_mem_thumb32(0x07FF2FFF), same):
                ret += 1
        if same is not None:
            same.append(i)
    return ret


def kernel_plt_counts_v40(path, literal=False):
    """module_frob_arch_sections() of v4.0: (core_plts, init_plts). Section headers, names and the REL
    tables are read here with struct straight from the file (numrels = sh_size / sizeof(Elf32_Rel));
    base = dstsec->sh_addr = the copy + sh_offset (rewrite_section_headers; sechdrs[0].sh_addr = 0).
    A REL section with sh_info >= e_shnum (the kernel reads a header past the table: undefined) is
    skipped, as armload does."""
    SHT_REL = 9
    with open(path, "rb") as f:
        data = f.read()
    mem = _Mem(data)
    e_shoff, = struct.unpack_from("<I", data, 0x20)
    e_shnum, e_shstrndx = struct.unpack_from("<HH", data, 0x30)
    sechdrs = [struct.unpack_from("<10I", data, e_shoff + 40 * i) for i in range(e_shnum)]
    # (sh_name, sh_type, sh_flags, sh_addr, sh_offset, sh_size, sh_link, sh_info, sh_addralign, sh_entsize)
    secstrings = sechdrs[e_shstrndx][4]

    def name(s):
        o = secstrings + s[0]
        return data[o:data.index(b"\0", o)].decode()
    core_plts = init_plts = 0
    for s in sechdrs[1:]:
        if s[1] != SHT_REL:
            continue
        if s[7] >= e_shnum:
            continue
        numrels = s[5] // 8
        rels = [struct.unpack_from("<II", data, s[4] + 8 * k) for k in range(numrels)]
        dstsec = sechdrs[s[7]]
        sh_addr = dstsec[4] if s[7] else None      # sechdrs[0].sh_addr = 0: not the copy
        if sh_addr is None:
            base, m = 0, _Mem(b"")                     # a read of address r_offset: 0 stands in
        else:
            base, m = sh_addr, mem
        if ".init" in name(s):
            init_plts += count_plts_v40(m, base, rels, numrels, literal)
        else:
            core_plts += count_plts_v40(m, base, rels, numrels, literal)
    return core_plts, init_plts
