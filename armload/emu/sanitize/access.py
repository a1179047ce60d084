"""The module's loads and stores, decoded once per address (capstone), evaluated from the registers.

A code hook covers the module's own allocations (core and init) and nothing else; the first time an
address runs it is decoded into an `Access` (or None: not a memory instruction, or one the
detectors do not follow: literal loads from pc, the stack pointer's own pushes and pops), kept per
address; later runs only read the registers the access names and evaluate its condition.
ARM state only: Debian's armmp kernel and its modules are ARM code (a Thumb instruction is not
decoded and so not checked: the report says which detectors ran, not that Thumb code was clean).
"""
from __future__ import annotations

from dataclasses import dataclass

from unicorn import arm_const as A

from ..hw.cpu import arm_disassembler

_UC = {f"r{i}": getattr(A, f"UC_ARM_REG_R{i}") for i in range(13)}
_UC.update(sb=A.UC_ARM_REG_R9, sl=A.UC_ARM_REG_R10, fp=A.UC_ARM_REG_R11, ip=A.UC_ARM_REG_R12,
           sp=A.UC_ARM_REG_SP, lr=A.UC_ARM_REG_LR, pc=A.UC_ARM_REG_PC)
SP = A.UC_ARM_REG_SP
_SIZE = {"b": 1, "sb": 1, "h": 2, "sh": 2, "d": 8, "": 4, "t": 4, "bt": 1, "ht": 2, "sbt": 1, "sht": 2}


@dataclass(frozen=True)
class Access:
    cond: int               # ARM condition field (14: always)
    base: int               # unicorn register id
    index: int              # unicorn register id, or 0
    shift: int              # LSL amount of the index register
    disp: int               # signed immediate (0 with an index register)
    negative: bool          # the index register is subtracted
    size: int               # bytes accessed
    write: bool
    post: bool              # post-indexed: the address is the base itself
    mnemonic: str

    def address(self, uc) -> int:
        b = uc.reg_read(self.base)
        if self.post:
            return b
        if self.index:
            x = uc.reg_read(self.index) << self.shift
            return (b - x if self.negative else b + x) & 0xFFFFFFFF
        return (b + self.disp) & 0xFFFFFFFF


def decode(word: bytes, pc: int) -> Access | None:
    """The access the ARM instruction `word` at `pc` makes, or None (see the module's doc)."""
    import capstone.arm as CA
    try:
        insn = next(arm_disassembler().disasm(word, pc))
    except StopIteration:
        return None
    m = insn.mnemonic.lower()
    cond = int.from_bytes(word, "little") >> 28
    if cond == 15:
        return None
    ops = insn.operands
    if m.startswith(("ldm", "stm")):
        base = insn.reg_name(ops[0].reg)
        if base in ("sp", "pc"):
            return None
        n = len(ops) - 1
        sfx = m[3:5]
        disp = {"db": -4 * n, "ib": 4, "da": -4 * (n - 1)}.get(sfx, 0)
        return Access(cond, _UC[base], 0, 0, disp, False, 4 * n, m.startswith("stm"), False, m)
    if not m.startswith(("ldr", "str")):
        return None
    write = m.startswith("str")
    root = m[3:]
    for c in ("eq", "ne", "cs", "hs", "cc", "lo", "mi", "pl", "vs", "vc", "hi", "ls", "ge", "lt", "gt", "le", "al"):
        if root.endswith(c) and root[:-2] in _SIZE or root.endswith(c) and root[:-2].startswith("ex"):
            root = root[:-2]
            break
    ex = root.startswith("ex")
    if ex:
        root = root[2:]
    if root not in _SIZE:
        return None
    mem = next((o for o in ops if o.type == CA.ARM_OP_MEM), None)
    if mem is None:
        return None
    base = insn.reg_name(mem.mem.base)
    if base == "pc" or base not in _UC:
        return None
    index, shift, neg, disp = 0, 0, False, mem.mem.disp
    if mem.mem.index:
        iname = insn.reg_name(mem.mem.index)
        if iname not in _UC:
            return None
        index = _UC[iname]
        if mem.shift.type not in (0, CA.ARM_SFT_LSL):
            return None
        shift = mem.shift.value if mem.shift.type == CA.ARM_SFT_LSL else 0
        neg = mem.subtracted
        disp = 0
    elif mem.subtracted and disp > 0:
        disp = -disp
    post = bool(insn.post_index) if hasattr(insn, "post_index") else False
    if post:
        index, disp = 0, 0
    return Access(cond, _UC[base], index, shift, disp, neg, _SIZE[root], write, post, m)


def cond_passes(cond: int, cpsr: int) -> bool:
    if cond >= 14:
        return True
    n, z, c, v = (cpsr >> 31) & 1, (cpsr >> 30) & 1, (cpsr >> 29) & 1, (cpsr >> 28) & 1
    r = [z, c, n, v, c and not z, n == v, not z and n == v][cond >> 1]
    return bool(r) != bool(cond & 1)
