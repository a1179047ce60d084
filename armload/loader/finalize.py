"""What 6.1's load_module writes into module memory after relocation and before init runs.

One pass per table, in the kernel's order (kernel/module/main.c load_module):
* post_relocation -> sort_extable: `__ex_table` sorted by instruction address with lib/sort.c;
* post_relocation -> module_finalize -> fixup_pv_table (arch/arm/kernel/phys2virt.S,
  ARM_PATCH_PHYS_VIRT): every `.pv_table` stub gets the board's PHYS_OFFSET - PAGE_OFFSET;
* ftrace_module_init (kernel/trace/ftrace.c): `__mcount_loc` sorted in place, then every site,
  checked to hold
  `bl __gnu_mcount_nc` (directly or through the module's PLT, arch/arm/kernel/ftrace.c
  ftrace_make_nop), becomes the NOP `add sp, sp, #4` (`add.w sp, sp, #4` in a Thumb-2 kernel),
  which drops the lr the `push {lr}` before the call saved (since v5.17 "ARM: ftrace: use ADD not
  POP to counter PUSH at entry"; the booted 6.1 kernel writes exactly this word);
* prepare_coming_module -> jump_label_add_module (kernel/jump_label.c): `__jump_table` sorted by
  (key, code), the init bit set on entries in init text, the module's own keys pointed at their
  first entry, and sites of outside keys whose state differs from their initial type patched
  (arch/arm/kernel/jump_label.c: `b target` or arm_gen_nop()).
What stays different from the kernel's memory is what the kernel allocates at run time: struct
module's own fields, and the links to other modules' or the kernel's keys (static_key_mod).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

from .model import MemRegion

ARM_FTRACE_NOP = 0xE28DD004          # add sp, sp, #4           (arch/arm/kernel/ftrace.c NOP)
THUMB_FTRACE_NOP = (0xF10D, 0x0D04)  # add.w sp, sp, #4         (the Thumb-2 kernel's NOP)
ARM_JUMP_NOP = 0xE1A00000            # mov r0, r0               (asm/insn.h arm_gen_nop)
THUMB_JUMP_NOP = (0xF3AF, 0x8000)    # nop.w
JUMP_TYPE_MASK, JUMP_TYPE_TRUE = 3, 1
ENTRY_BRANCH, ENTRY_INIT = 1, 2      # jump_entry.key low bits (jump_entry_is_branch / is_init)


@dataclass
class Finalized:
    """What the passes did: counted for the report, kept for the runtime and the explanations."""
    ftrace_nops: list[int] = field(default_factory=list)      # site addresses now holding the NOP
    ftrace_old: dict[int, bytes] = field(default_factory=dict)  # the relocated call each NOP replaced (verify)
    ftrace_bug: str | None = None                              # ftrace_bug()'s first line, if a site was wrong
    extable_sorted: int = 0                                    # entries in __ex_table
    jump_entries: int = 0
    jump_patched: list[int] = field(default_factory=list)      # sites rewritten at load
    kallsyms_core: int = 0                                     # symbols kept in the core symtab
    pv_patched: list[int] = field(default_factory=list)        # phys/virt stubs given the real offset
    relocated: dict[int, bytes] = field(default_factory=dict)   # every word these passes changed: as relocated
    jump_table: tuple[int, int] = (0, 0)                         # [start, end) of the sorted __jump_table
    jump_words: set[int] = field(default_factory=set)           # key links and patched sites it wrote

    def jump_owned(self, addr: int) -> bool:
        """A word the jump-label notifier writes (after formation: the table, key links, sites)."""
        return self.jump_table[0] <= addr < self.jump_table[1] or addr in self.jump_words


class Memory:
    """Little-endian words of the module's allocations, by address."""

    def __init__(self, regions: list[MemRegion]):
        self.regions = regions
        self._before: list[tuple[int, bytes]] = []   # (address, bytes as relocation left them), in order

    def remember(self, addr: int, n: int) -> None:
        """Keep [addr, addr+n) as it is now (a word's first remembered value wins)."""
        r, o = self._at(addr, n)
        if r is not None and n >= 4:
            self._before.append((addr, bytes(r.data[o:o + n - n % 4])))

    def changed(self) -> dict[int, bytes]:
        """The remembered words that now differ (vectorised: a table may be megabytes of zeros)."""
        out: dict[int, bytes] = {}
        for addr, old in self._before:
            r, o = self._at(addr, len(old))
            a = np.frombuffer(old, dtype="<u4")
            b = np.frombuffer(bytes(r.data[o:o + len(old)]), dtype="<u4")
            for i in np.flatnonzero(a != b).tolist():
                out.setdefault(addr + 4 * i, old[4 * i:4 * i + 4])
        return out

    def _at(self, addr: int, n: int):
        for r in self.regions:
            if r.base <= addr and addr + n <= r.base + r.size:
                return r, addr - r.base
        return None, 0

    def contains(self, addr: int, n: int = 4) -> bool:
        return self._at(addr, n)[0] is not None

    def u32(self, addr: int) -> int | None:
        r, o = self._at(addr, 4)
        return None if r is None else struct.unpack_from("<I", r.data, o)[0]

    def put32(self, addr: int, v: int) -> None:
        self.remember(addr, 4)
        r, o = self._at(addr, 4)
        struct.pack_into("<I", r.data, o, v & 0xFFFFFFFF)

    def halves(self, addr: int) -> tuple[int, int] | None:
        r, o = self._at(addr, 4)
        return None if r is None else struct.unpack_from("<HH", r.data, o)

    def put_halves(self, addr: int, hw: tuple[int, int]) -> None:
        self.remember(addr, 4)
        r, o = self._at(addr, 4)
        struct.pack_into("<HH", r.data, o, *hw)

    def block(self, addr: int, n: int) -> np.ndarray | None:
        r, o = self._at(addr, n)
        return None if r is None else np.frombuffer(r.data, dtype="<u4", count=n // 4, offset=o)


# --- branch encodings (arch/arm/kernel/insn.c) -------------------------------------------------
def arm_bl_target(insn: int, pc: int) -> int | None:
    """Target of an unconditional ARM `bl`, None for any other instruction."""
    if insn & 0xFF000000 != 0xEB000000:
        return None
    off = (insn & 0xFFFFFF) << 2
    return (pc + 8 + off - (1 << 26 if off & (1 << 25) else 0)) & 0xFFFFFFFF


def thumb_bl_target(hw: tuple[int, int], pc: int) -> int | None:
    """Target of a Thumb-2 `bl` (T1), None for any other instruction."""
    h1, h2 = hw
    if h1 & 0xF800 != 0xF000 or h2 & 0xD000 != 0xD000:
        return None
    s = (h1 >> 10) & 1
    i1 = 1 ^ (((h2 >> 13) & 1) ^ s)
    i2 = 1 ^ (((h2 >> 11) & 1) ^ s)
    off = (s << 24) | (i1 << 23) | (i2 << 22) | ((h1 & 0x3FF) << 12) | ((h2 & 0x7FF) << 1)
    return (pc + 4 + off - (1 << 25 if s else 0)) & 0xFFFFFFFF


def arm_branch(pc: int, target: int) -> int | None:
    """__arm_gen_branch(pc, addr, link=false): `b target`, None out of range (the kernel WARNs)."""
    off = (target - (pc + 8)) & 0xFFFFFFFF
    signed = off - (1 << 32) if off & 0x80000000 else off
    if signed < -0x2000000 or signed > 0x1FFFFFC:
        return None
    return 0xEA000000 | ((signed >> 2) & 0xFFFFFF)


def thumb_branch(pc: int, target: int) -> tuple[int, int] | None:
    """__arm_gen_branch_thumb2(pc, addr, link=false): `b.w target`."""
    off = (target & ~1) - (pc + 4)
    if off < -0x1000000 or off > 0xFFFFFE:
        return None
    s = (off >> 24) & 1
    j1 = 1 ^ ((off >> 23) & 1) ^ s
    j2 = 1 ^ ((off >> 22) & 1) ^ s
    return (0xF000 | (s << 10) | ((off >> 12) & 0x3FF),
            0x9000 | (j1 << 13) | (j2 << 11) | ((off >> 1) & 0x7FF))


# --- the passes ------------------------------------------------------------------------------------
def sort_extable(mem: Memory, addr: int, size: int, heapsort_order) -> int:
    """sort_extable(): struct exception_table_entry {insn, fixup}, cmp_ex_sort on insn."""
    n = size // 8
    words = mem.block(addr, n * 8) if n > 1 else None
    if words is None:
        return n
    mem.remember(addr, n * 8)
    ent = words.reshape(n, 2).copy()
    order = heapsort_order(ent[:, 0], "v6")
    words[:] = ent[order].reshape(-1)
    return n


def ftrace_nops(mem: Memory, addr: int, size: int, mcount: int, thumb2: bool, plt_slot, out: Finalized,
                symbolize=lambda a: f"{a:#x}") -> None:
    """ftrace_process_locs + ftrace_make_nop for every recorded site, in sorted order; the first
    site that does not hold the expected call stops the walk (ftrace_bug, ftrace_update_code's break)."""
    n = size // 4
    locs = mem.block(addr, n * 4) if n else None
    if locs is None:
        return
    mem.remember(addr, n * 4)
    locs[:] = np.sort(locs)          # ftrace_process_locs sorts a module's table in place (ftrace_cmp_ips)
    for ip in (locs[locs != 0] & ~np.uint32(1)).tolist():  # ftrace_call_adjust; NULL entries skipped
        if not mem.contains(ip):
            out.ftrace_bug = f"ftrace faulted on modifying [<{ip:08x}>] {symbolize(ip)}"
            return
        if thumb2:
            target = thumb_bl_target(mem.halves(ip), ip)
        else:
            target = arm_bl_target(mem.u32(ip), ip)
        want = mcount if _in_bl_range(ip, mcount, thumb2) else plt_slot(ip, mcount)
        if target is None or want is None or target != (want & ~1):
            raw = mem.u32(ip)
            out.ftrace_bug = (f"ftrace failed to modify [<{ip:08x}>] {symbolize(ip)}\n actual:   "
                              + ":".join(f"{b:02x}" for b in struct.pack("<I", raw)))
            return
        out.ftrace_old[ip] = struct.pack("<I", mem.u32(ip))
        if thumb2:
            mem.put_halves(ip, THUMB_FTRACE_NOP)
        else:
            mem.put32(ip, ARM_FTRACE_NOP)
        out.ftrace_nops.append(ip)


def _in_bl_range(pc: int, target: int, thumb2: bool) -> bool:
    off = target - (pc + (4 if thumb2 else 8))
    return -0x1000000 <= off <= 0xFFFFFE if thumb2 else -0x2000000 <= off <= 0x1FFFFFC


def jump_labels(mem: Memory, addr: int, size: int, thumb2: bool, within_init, is_text, kernel_word,
                out: Finalized) -> None:
    """jump_label_add_module(): sort, mark init entries, link own keys, patch changed outside keys.

    kernel_word(a) reads a word of kernel (or another module's) memory; None when nothing is known
    there, and then the site keeps its compiled state (no key state is invented)."""
    n = size // 12
    words = mem.block(addr, n * 12) if n else None
    if words is None:
        return
    mem.remember(addr, n * 12)
    ent = words.reshape(n, 3).copy()                      # {code, target, key}
    keys = ent[:, 2] & ~np.uint32(JUMP_TYPE_MASK)
    # jump_label_cmp: by key, then code; equal pairs are equal entries, so any sort gives its bytes.
    order = np.lexsort((ent[:, 0], keys))
    ent = ent[order]
    keys = keys[order]
    init = within_init(ent[:, 0].astype(np.int64))
    ent[:, 2] = np.where(init, ent[:, 2] | ENTRY_INIT, ent[:, 2] & ~np.uint32(ENTRY_INIT))
    words[:] = ent.reshape(-1)
    out.jump_entries = n
    out.jump_table = (addr, addr + 12 * n)
    prev = None
    for i in range(n):
        key = int(keys[i])
        if key == prev:
            continue
        prev = key
        if mem.contains(key, 8):                           # static_key_set_entries
            typ = mem.u32(key + 4) & JUMP_TYPE_MASK
            mem.put32(key + 4, (addr + 12 * i) | typ)
            out.jump_words.add(key + 4)
            continue
        enabled, kword = kernel_word(key), kernel_word(key + 4)
        if enabled is None or kword is None:
            continue
        is_true = kword & JUMP_TYPE_TRUE
        j = i
        while j < n and int(keys[j]) == key:               # __jump_label_update(key, iter, stop, init=true)
            branch = int(ent[j, 2]) & ENTRY_BRANCH
            if ((enabled > 0) ^ branch) != (is_true ^ branch) and is_text(int(ent[j, 0])):
                _patch_jump(mem, int(ent[j, 0]), int(ent[j, 1]), (enabled > 0) ^ branch, thumb2)
                out.jump_patched.append(int(ent[j, 0]))
                out.jump_words.add(int(ent[j, 0]))
            j += 1


def _patch_jump(mem: Memory, code: int, target: int, jmp: bool, thumb2: bool) -> None:
    """arch_jump_label_transform(); an out-of-range branch is generated as 0 (WARN) and written."""
    if thumb2:
        mem.put_halves(code, (thumb_branch(code, target) or (0, 0)) if jmp else THUMB_JUMP_NOP)
    else:
        mem.put32(code, (arm_branch(code, target) or 0) if jmp else ARM_JUMP_NOP)


# --- kallsyms (kernel/module/kallsyms.c) -----------------------------------------------------------
SHN_UNDEF, SHN_LORESERVE, SHN_ABS = 0, 0xFF00, 0xFFF1
STB_WEAK, STT_OBJECT = 2, 1
SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR = 0x1, 0x2, 0x4
SHT_NOBITS = 8


def elf_types(syms: np.ndarray, flags: np.ndarray, nobits: np.ndarray, debug: np.ndarray, pcpu: int) -> bytes:
    """elf_type() for every symbol: the nm letter /proc/kallsyms shows (ARCH_SHF_SMALL is 0 on ARM)."""
    out = bytearray()
    for info, shndx in zip(syms["st_info"].tolist(), syms["st_shndx"].tolist()):
        if info >> 4 == STB_WEAK:
            c = "v" if info & 0xF == STT_OBJECT else "w"
        elif shndx == SHN_UNDEF:
            c = "U"
        elif shndx == SHN_ABS or shndx == pcpu:
            c = "a"
        elif shndx >= SHN_LORESERVE:
            c = "?"
        elif flags[shndx] & SHF_EXECINSTR:
            c = "t"
        elif flags[shndx] & SHF_ALLOC and not nobits[shndx]:
            c = "d" if flags[shndx] & SHF_WRITE else "r"
        elif nobits[shndx]:
            c = "b"
        elif debug[shndx]:
            c = "n"
        else:
            c = "?"
        out += c.encode()
    return bytes(out)


def add_kallsyms(mem: Memory, places: dict[str, int], syms: np.ndarray, strtab: bytes, types: bytes,
                 core: np.ndarray, strtab_section: bytes) -> int:
    """add_kallsyms(): mod_kallsyms and the type table in init data (the full symtab and strtab were
    copied there, symbols simplified), then the cut-down core symtab, strtab and types. `syms` holds
    the simplified values; `core` is is_core_symbol() per symbol (entry 0 always kept)."""
    n = len(syms)
    init = {"symtab": places["init_symtab"], "strtab": places["init_strtab"], "types": places["init_typeoffs"]}
    _write(mem, init["symtab"], syms.tobytes())          # move_module's copy, simplify_symbols' values
    _write(mem, init["strtab"], strtab_section)
    _write(mem, places["mod_kallsyms"], struct.pack("<4I", init["symtab"], n, init["strtab"], init["types"]))
    _write(mem, init["types"], types)
    keep = np.flatnonzero(core | (np.arange(n) == 0))
    dst = syms[keep].copy()
    names = bytearray()
    for j, i in enumerate(keep.tolist()):
        off = int(syms["st_name"][i])
        end = strtab.find(b"\0", off)
        dst["st_name"][j] = len(names)
        names += strtab[off:end if end >= 0 else len(strtab)] + b"\0"
    _write(mem, places["symoffs"], dst.tobytes())
    _write(mem, places["stroffs"], bytes(names))
    _write(mem, places["core_typeoffs"], bytes(types[i] for i in keep.tolist()))
    return len(keep)


def _write(mem: Memory, addr: int, data: bytes) -> None:
    """The kallsyms tables go to memory no section holds (nothing relocated there to remember)."""
    if not data:
        return
    r, o = mem._at(addr, len(data))
    if r is None:
        raise ValueError(f"kallsyms table at {addr:#x}+{len(data):#x} outside the module's memory")
    r.data[o:o + len(data)] = data


# --- phys/virt stubs (arch/arm/kernel/phys2virt.S __fixup_a_pv_table, ARM, non-LPAE) --------------
PV_IMM8_MASK, PV_IMMR_MSB = 0xFF, 0x800
PV_ROT_MASK, PV_BIT22, MOVW = 0xF00, 0x400000, 0x03000000   # rotation field; mov -> mvn; MOVW (A2) opcode


def fixup_pv_table(mem: Memory, addr: int, size: int, pv_offset: int, out: Finalized,
                   high_ones: bool = False) -> None:
    """Each `.pv_table` word is `.long insn - .`; the `add/sub <rd>, <rn>, #imm, ror #n` stub there
    gets offset<31:24> in its imm8 when the rotation field is below 8, else offset<23:20>.
    LPAE kernels also have (memory.h __pv_add_carry_stub, __pv_stub_mov_hi): a MOVW that gets
    offset<31:20> (`adds lo, x, rd, lsl #20`), and a `mov rd, #0` (rotation 0) for the high word,
    which becomes `mvn rd, #0` when __pv_offset's high word is all ones (PHYS_OFFSET < PAGE_OFFSET)."""
    hi, mid = (pv_offset >> 24) & 0xFF, (pv_offset >> 16) & 0xF0
    for i in range(size // 4):
        at = addr + 4 * i
        insn = (at + mem.u32(at)) & 0xFFFFFFFF
        word = mem.u32(insn)
        if word is None:
            raise ValueError(f".pv_table entry {i} points at {insn:#x}, outside the module's memory")
        if word & 0x0FF00000 == MOVW:
            v = (pv_offset >> 20) & 0xFFF
            word = (word & ~0x000F0FFF) | ((v >> 12) << 16) | (v & 0xFFF)
        elif word & PV_ROT_MASK == 0:                     # the high word's mov #0 / mvn #0
            word = (word & ~(PV_IMM8_MASK | PV_BIT22)) | (PV_BIT22 if high_ones else 0)
        else:
            word = (word & ~PV_IMM8_MASK) | (mid if word & PV_IMMR_MSB else hi)
        mem.put32(insn, word)
        out.pv_patched.append(insn)
