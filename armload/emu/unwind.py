"""ARM EHABI stack unwinding (.ARM.exidx / .ARM.extab), as arch/arm/kernel/unwind.c does it.

An index entry is two words: a prel31 offset to the function start, then either 1
(EXIDX_CANTUNWIND), an inline compact entry (bit 31 set: personality routine 0 with three
opcode bytes), or a prel31 offset to the .ARM.extab entry. A compact extab entry names
personality 0 (three opcode bytes in its first word), or 1/2 (two bytes plus N more words,
N in bits 16-23); a generic personality routine (bit 31 clear) cannot be interpreted here.

Opcodes (EHABI section 10.3) update a virtual register set: vsp += / -= , pop r4-r15 under a
mask, vsp = rN, pop r4-rN(+lr), pop r0-r3, vsp += 0x204 + (uleb128 << 2), VFP/iWMMXt pops
(which move vsp only), finish. When the opcodes leave pc unset, pc = lr.

Tables: a module's, read from its mapped .ARM.exidx* sections; the kernel's, found in the
Image (which has no section headers) as the longest sorted run of prel31 index entries
pointing back into kernel text.
"""
from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass, field

EXIDX_CANTUNWIND = 1
SP, LR, PC = 13, 14, 15


class UnwindError(Exception):
    pass


def prel31(word: int, place: int) -> int:
    off = word & 0x7FFFFFFF
    if off & 0x40000000:
        off -= 0x80000000
    return (place + off) & 0xFFFFFFFF


@dataclass
class ExidxTable:
    """Sorted index entries: function start -> (address of the entry, its second word)."""
    starts: list[int]
    entries: list[tuple[int, int]]
    end: int                          # no entry covers addresses at or above this

    def lookup(self, pc: int):
        i = bisect.bisect_right(self.starts, pc) - 1
        if i < 0 or pc >= self.end:
            return None
        return self.starts[i], self.entries[i][0], self.entries[i][1]

    @classmethod
    def from_words(cls, words: list[tuple[int, int, int]], end: int) -> "ExidxTable":
        """words: (address of the entry, first word, second word)."""
        rows = sorted((prel31(w0, a), a, w1) for a, w0, w1 in words)
        return cls([r[0] for r in rows], [(r[1], r[2]) for r in rows], end)


@dataclass
class Frame:
    regs: list[int]                   # r0..r15 as far as known (callee-saved ones are exact)
    known: set = field(default_factory=lambda: set(range(16)))

    @property
    def pc(self) -> int:
        return self.regs[PC]

    @property
    def sp(self) -> int:
        return self.regs[SP]


def opcodes_of(read32, entry_addr: int, insn: int) -> list[int]:
    """The unwind opcode bytes of one function (UnwindError when it cannot be unwound)."""
    if insn == EXIDX_CANTUNWIND:
        raise UnwindError("EXIDX_CANTUNWIND")
    if insn & 0x80000000:
        word_addr, first = entry_addr + 4, insn
    else:
        word_addr = prel31(insn, entry_addr + 4)
        first = read32(word_addr)
    if not first & 0x80000000:
        raise UnwindError(f"generic personality routine at {prel31(first, word_addr):#010x} (not interpreted)")
    pers = (first >> 24) & 0x0F
    if pers == 0:
        return [(first >> 16) & 0xFF, (first >> 8) & 0xFF, first & 0xFF]
    if pers in (1, 2):
        n = (first >> 16) & 0xFF
        out = [(first >> 8) & 0xFF, first & 0xFF]
        for i in range(n):
            w = read32(word_addr + 4 * (i + 1))
            out += [(w >> 24) & 0xFF, (w >> 16) & 0xFF, (w >> 8) & 0xFF, w & 0xFF]
        return out
    raise UnwindError(f"unknown personality routine index {pers}")


def execute(ops: list[int], regs: list[int], read32) -> tuple[list[int], bool]:
    """Run the opcodes over a copy of regs; (new regs, pc_set)."""
    vrs = list(regs)
    pc_set = False
    i = 0
    n = len(ops)

    def byte():
        nonlocal i
        if i >= n:
            raise UnwindError("truncated unwind opcodes")
        b = ops[i]
        i += 1
        return b

    def pop(mask_regs):
        nonlocal pc_set
        sp = vrs[SP]
        loaded = {}
        for r in mask_regs:
            loaded[r] = read32(sp)
            sp += 4
        for r, v in loaded.items():
            vrs[r] = v
            if r == PC:
                pc_set = True
        if SP not in loaded:
            vrs[SP] = sp

    while i < n:
        op = byte()
        if op & 0xC0 == 0x00:
            vrs[SP] = (vrs[SP] + ((op & 0x3F) << 2) + 4) & 0xFFFFFFFF
        elif op & 0xC0 == 0x40:
            vrs[SP] = (vrs[SP] - ((op & 0x3F) << 2) - 4) & 0xFFFFFFFF
        elif op & 0xF0 == 0x80:
            mask = ((op & 0x0F) << 8) | byte()
            if mask == 0:
                raise UnwindError("refuse to unwind (opcode 0x8000)")
            pop([4 + b for b in range(12) if mask & (1 << b)])
        elif op & 0xF0 == 0x90:
            r = op & 0x0F
            if r in (13, 15):
                raise UnwindError(f"reserved opcode {op:#04x}")
            vrs[SP] = vrs[r]
        elif op & 0xF8 == 0xA0:
            pop(list(range(4, 5 + (op & 7))))
        elif op & 0xF8 == 0xA8:
            pop(list(range(4, 5 + (op & 7))) + [LR])
        elif op == 0xB0:
            break
        elif op == 0xB1:
            mask = byte()
            if mask == 0 or mask & 0xF0:
                raise UnwindError(f"spare opcode b1 {mask:02x}")
            pop([b for b in range(4) if mask & (1 << b)])
        elif op == 0xB2:
            v, shift = 0, 0
            while True:
                b = byte()
                v |= (b & 0x7F) << shift
                shift += 7
                if not b & 0x80:
                    break
            vrs[SP] = (vrs[SP] + 0x204 + (v << 2)) & 0xFFFFFFFF
        elif op == 0xB3:                       # FSTMFDX D[s]..D[s+c]
            c = byte() & 0x0F
            vrs[SP] += 8 * (c + 1) + 4
        elif op & 0xF8 == 0xB8:                # FSTMFDX D8..D[8+n]
            vrs[SP] += 8 * ((op & 7) + 1) + 4
        elif op & 0xF8 == 0xC0 and op not in (0xC6, 0xC7):   # iWMMXt wR10..wR[10+n]
            vrs[SP] += 8 * ((op & 7) + 1)
        elif op == 0xC6:
            vrs[SP] += 8 * ((byte() & 0x0F) + 1)
        elif op == 0xC7:
            mask = byte()
            if mask == 0 or mask & 0xF0:
                raise UnwindError(f"spare opcode c7 {mask:02x}")
            vrs[SP] += 4 * bin(mask).count("1")
        elif op in (0xC8, 0xC9):               # VPUSH D[16+s].. / D[s]..
            vrs[SP] += 8 * ((byte() & 0x0F) + 1)
        elif op & 0xF8 == 0xD0:                # VPUSH D8..D[8+n]
            vrs[SP] += 8 * ((op & 7) + 1)
        else:
            raise UnwindError(f"spare opcode {op:#04x}")
    return vrs, pc_set


def unwind_frame(frame: Frame, table: ExidxTable, read32, *, at_entry_ok: bool = True) -> Frame:
    """The caller's frame (UnwindError when there is none to find)."""
    pc = frame.pc & ~1
    hit = table.lookup(pc)
    if hit is None:
        raise UnwindError(f"no unwind entry for {pc:#010x}")
    start, entry_addr, insn = hit
    if pc == start and at_entry_ok:
        # still in the caller's frame: the prologue has not run (kernel unwind.c does the same)
        if frame.regs[LR] == frame.pc:
            raise UnwindError("pc == lr at a function entry")
        regs = list(frame.regs)
        regs[PC] = regs[LR]
        return Frame(regs, set(frame.known))
    ops = opcodes_of(read32, entry_addr, insn)
    regs, pc_set = execute(ops, frame.regs, read32)
    if not pc_set:
        regs[PC] = regs[LR]
    if regs[PC] == frame.pc and regs[SP] == frame.sp:
        raise UnwindError("the unwound frame equals the current one (loop)")
    return Frame(regs, set(range(4, 16)))


# --- tables ---------------------------------------------------------------------------
SHT_ARM_EXIDX = 0x70000001         # ELF_SECTION_UNWIND
SHF_ALLOC, SHF_EXECINSTR = 0x2, 0x4


def unwind_sections(m) -> list:
    """The sections 6.1's module_finalize (arch/arm/kernel/module.c) registers for unwinding:
    SHF_ALLOC and sh_type SHT_ARM_EXIDX. A NOBITS (or SHT_NULL, PROGBITS) .ARM.exidx is ignored
    whatever its name or size; an SHT_ARM_EXIDX section's bytes were bounded by the file."""
    return [s for s in m.sections if s.sh_type == SHT_ARM_EXIDX and s.flags & SHF_ALLOC and s.size >= 8]


def module_table(machine, m) -> ExidxTable | None:
    """The module's index entries from every mapped unwind section (one vector pass each)."""
    import numpy as np
    words = []
    for s in unwind_sections(m):
        try:
            data = machine.read(s.addr, s.size - s.size % 8)
        except Exception:             # init memory freed: its entries are gone too
            continue
        w = np.frombuffer(data, "<u4").astype(np.int64).reshape(-1, 2)
        place = s.addr + 8 * np.arange(len(w), dtype=np.int64)
        off = w[:, 0] & 0x7FFFFFFF
        start = (place + np.where(off & 0x40000000, off - 0x80000000, off)) & 0xFFFFFFFF
        words.append(np.stack([start, place, w[:, 1]], axis=1))
    if not words:
        return None
    rows = np.concatenate(words)
    rows = rows[np.lexsort((rows[:, 2], rows[:, 1], rows[:, 0]))]
    end = max((s.addr + s.size for s in m.sections if s.flags & SHF_EXECINSTR), default=0)
    return ExidxTable(rows[:, 0].tolist(), list(zip(rows[:, 1].tolist(), rows[:, 2].tolist())), end)


_KERNEL_TABLES: dict[str, ExidxTable | None] = {}


def kernel_table(image) -> ExidxTable | None:
    """The kernel's unwind index, found in the Image (cached per image file)."""
    if image.path in _KERNEL_TABLES:
        return _KERNEL_TABLES[image.path]
    import numpy as np
    lo = image.etext - image.base
    lo -= lo % 8
    raw = image.data[lo:]
    raw = raw[:len(raw) // 8 * 8]
    best = None
    for par in (0, 4):
        chunk = raw[par:]
        chunk = chunk[:len(chunk) // 8 * 8]
        d = np.frombuffer(chunk, dtype="<u4").astype(np.int64).reshape(-1, 2)
        addr = image.base + lo + par + 8 * np.arange(len(d), dtype=np.int64)
        w0, w1 = d[:, 0], d[:, 1]
        off = w0 & 0x7FFFFFFF
        off = np.where(off & 0x40000000, off - 0x80000000, off)
        fn = addr + off
        ok = ((w0 & 0x80000000) == 0) & (off < 0) & (fn >= image.stext) & (fn < image.etext)
        ok &= (w1 == EXIDX_CANTUNWIND) | ((w1 >> 24) == 0x80) | (((w1 & 0x80000000) == 0) & (w1 != 0))
        inc = np.zeros(len(d), dtype=np.int8)
        inc[1:] = ok[1:] & ok[:-1] & (fn[1:] > fn[:-1])
        edges = np.diff(np.concatenate(([0], inc, [0])))
        starts, ends = np.where(edges == 1)[0], np.where(edges == -1)[0]
        if len(starts) == 0:
            continue
        k = int((ends - starts).argmax())
        first, last = int(starts[k]) - 1, int(ends[k]) - 1
        if best is None or last - first > best[1] - best[0]:
            best = (first, last, addr, w0, w1)
    table = None
    if best is not None and best[1] - best[0] > 1000:
        first, last, addr, w0, w1 = best
        words = [(int(addr[i]), int(w0[i]), int(w1[i])) for i in range(first, last + 1)]
        table = ExidxTable.from_words(words, image.etext)
    _KERNEL_TABLES[image.path] = table
    return table
