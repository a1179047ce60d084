"""ARMv7-A exception entry and the short-descriptor MMU walk, for the exceptions stock Unicorn
hands to its hooks instead of entering the guest's vectors (ARM DDI 0406C B1.8, B3.5, B4.1).

Entry is what the architecture does (and QEMU's arm_cpu_do_interrupt_aarch32): SPSR_<mode> =
CPSR, switch mode (Unicorn's CPSR write banks SP and LR), LR = return address + the mode's
offset, mask I (and A for IRQ and aborts), clear T/IT/J, PC = vector base (0xffff0000 when
SCTLR.V, else VBAR) + the vector's offset. For aborts the fault status and address registers
are synthesised: the address from the faulting instruction's operands, the status from a walk
of the guest's page tables (translation/domain/permission fault, section or page level).
"""
from __future__ import annotations

import struct

from unicorn import arm_const as A

MODE_USR, MODE_SVC, MODE_ABT, MODE_IRQ, MODE_UND = 0x10, 0x13, 0x17, 0x12, 0x1B
CPSR_I, CPSR_A, CPSR_T, CPSR_F = 0x80, 0x100, 0x20, 0x40
IT_J_MASK = 0x0600FC00 | 0x01000000
#            kind:      (mode,     vector, lr offset from the address, extra mask)
EXCEPTIONS = {"undef": (MODE_UND, 0x04, 4, 0),            # LR = insn + 4
              "swi": (MODE_SVC, 0x08, 0, 0),               # LR = the insn after svc (the address given)
              "pabort": (MODE_ABT, 0x0C, 4, CPSR_A),       # LR = insn + 4
              "dabort": (MODE_ABT, 0x10, 8, CPSR_A),       # LR = insn + 8
              "irq": (MODE_IRQ, 0x18, 4, CPSR_A)}          # LR = next insn + 4


class RegBatch:
    """The registers `regs` of `uc` in one uc_reg_read_batch call (8 bytes a register, zero above
    a 32-bit one): bytes that compare equal exactly when every register does. The Python binding's
    reg_read costs a few microseconds a register; a spin's pass is compared thousands of times."""

    def __init__(self, uc, regs):
        import ctypes
        from unicorn.unicorn_py3.unicorn import uclib
        n = self.n = len(regs)
        self._ids = (ctypes.c_int * n)(*regs)
        self._buf = (ctypes.c_uint64 * n)()
        base = ctypes.addressof(self._buf)
        self._ptrs = (ctypes.c_void_p * n)(*[base + 8 * i for i in range(n)])
        self._read, self._uch = uclib.uc_reg_read_batch, uc._uch

    def __call__(self) -> bytes:
        if self._read(self._uch, self._ids, self._ptrs, self.n):
            raise RuntimeError("uc_reg_read_batch failed")
        return bytes(self._buf)


def cp15(crn, crm, opc1, opc2):
    return (15, 0, 0, crn, crm, opc1, opc2)


SCTLR, TTBR0, TTBR1, TTBCR, DACR = cp15(1, 0, 0, 0), cp15(2, 0, 0, 0), cp15(2, 0, 0, 1), cp15(2, 0, 0, 2), cp15(3, 0, 0, 0)
DFSR, IFSR, DFAR, IFAR, VBAR = cp15(5, 0, 0, 0), cp15(5, 0, 0, 1), cp15(6, 0, 0, 0), cp15(6, 0, 0, 2), cp15(12, 0, 0, 0)


def cp_read(uc, reg) -> int:
    return uc.reg_read(A.UC_ARM_REG_CP_REG, reg)


def cp_write(uc, reg, value: int) -> None:
    uc.reg_write(A.UC_ARM_REG_CP_REG, reg + (value,))


def enter(uc, kind: str, addr: int) -> int:
    """Take exception `kind` whose preferred return is `addr` (the faulting/undefined insn, or
    for an IRQ the next insn to run). Returns the vector address now in PC."""
    mode, vec, off, mask = EXCEPTIONS[kind]
    old = uc.reg_read(A.UC_ARM_REG_CPSR)
    sctlr = cp_read(uc, SCTLR)
    new = (old & ~(0x1F | CPSR_T | IT_J_MASK | 0x200)) | mode | CPSR_I | mask
    if sctlr & (1 << 25):                                 # EE
        new |= 0x200
    if sctlr & (1 << 30):                                 # TE: exceptions in Thumb
        new |= CPSR_T
    ret = addr + (2 if kind == "undef" and old & CPSR_T else off)
    uc.reg_write(A.UC_ARM_REG_CPSR, new)
    uc.reg_write(A.UC_ARM_REG_SPSR, old)
    uc.reg_write(A.UC_ARM_REG_LR, ret & 0xFFFFFFFF)
    base = 0xFFFF0000 if sctlr & (1 << 13) else cp_read(uc, VBAR) & ~0x1F
    uc.reg_write(A.UC_ARM_REG_PC, base + vec)
    return base + vec


# --- the MMU walk ------------------------------------------------------------------------
class Walk:
    """Result of translating one virtual address: pa (or None), fs (fault status), domain, and
    whether it was a long-descriptor (LPAE) walk, whose fault codes are the long format's."""
    __slots__ = ("pa", "fs", "domain", "level", "long")

    def __init__(self, pa, fs, domain, level, long=False):
        self.pa, self.fs, self.domain, self.level, self.long = pa, fs, domain, level, long

    @property
    def translation_fault(self) -> bool:
        return (self.fs & 0x3C) == 0x04 if self.long else self.fs in (0x5, 0x7)

    def other_fault(self, misaligned: bool) -> int:
        """The status of a fault the walk allowed: alignment, else synchronous external abort."""
        if self.long:
            return 0x21 if misaligned else 0x10
        return 0x1 if misaligned else 0x8


TTBCR_EAE = 1 << 31
# 64-bit TTBR0/TTBR1 (MRRC p15, 0/1, <Rt>, <Rt2>, c2) as Unicorn's CP_REG tuple: is64 = 1
TTBR0_64, TTBR1_64 = (15, 1, 0, 0, 2, 0, 0), (15, 1, 0, 0, 2, 1, 0)
LPAE_OA = 0xFF_FFFF_F000                                  # output address bits [39:12]


def walk_long(read32, ttbr0: int, ttbcr: int, ttbr1: int, va: int, *, write=False, execute=False,
              user=False) -> Walk:
    """Long-descriptor (LPAE) translation of `va` (ARM DDI 0406C B3.6): TTBCR.T0SZ/T1SZ pick
    TTBR0 or TTBR1, a region of at most 1 GiB starts at the second level. Fault status in the
    long format: 0b0001LL translation, 0b0010LL access flag, 0b0011LL permission (LL = level).
    Linux's 3-level tables (arch/arm/include/asm/pgtable-3level*.h) set AF, AP[2:1], XN/PXN."""
    t0sz, t1sz = ttbcr & 7, (ttbcr >> 16) & 7
    if t1sz and va >> (32 - t1sz) == (1 << t1sz) - 1:
        base, sz = ttbr1, t1sz
    elif t0sz == 0 or va >> (32 - t0sz) == 0:
        base, sz = ttbr0, t0sz
    else:
        return Walk(None, 0x04 | 1, 0, 1, True)
    level = 2 if sz >= 2 else 1
    x = 5 - sz if level == 1 else 14 - sz                 # TTBRn holds BADDR[39:x]
    table = base & 0xFF_FFFF_FFFF & ~((1 << x) - 1)
    ro = nx = unpriv_denied = False
    while True:
        if level == 1:
            idx = (va >> 30) & ((1 << (2 - sz)) - 1) if sz < 2 else 0
        elif level == 2:
            idx = (va >> 21) & 0x1FF
        else:
            idx = (va >> 12) & 0x1FF
        at = table + 8 * idx
        d = read32(at) | read32(at + 4) << 32
        if not d & 1 or (level == 3 and not d & 2):
            return Walk(None, 0x04 | level, 0, level, True)
        if level < 3 and d & 2:                           # table descriptor: APTable, XNTable, PXNTable
            ro |= bool(d >> 62 & 1)
            unpriv_denied |= bool(d >> 61 & 1)
            nx |= bool(d >> (60 if user else 59) & 1)
            table = d & LPAE_OA
            level += 1
            continue
        size = {1: 30, 2: 21, 3: 12}[level]
        pa = (d & LPAE_OA & ~((1 << size) - 1)) | (va & ((1 << size) - 1))
        break
    if not d >> 10 & 1:                                   # AF = 0: access flag fault
        return Walk(None, 0x08 | level, 0, level, True)
    ap = (d >> 6) & 3                                     # AP[2:1]: bit 1 read-only, bit 0 EL0 access
    xn = bool(d >> 54 & 1) or nx or (not user and bool(d >> 53 & 1))
    if user and (not ap & 1 or unpriv_denied):
        return Walk(None, 0x0C | level, 0, level, True)
    if write and (ap & 2 or ro):
        return Walk(None, 0x0C | level, 0, level, True)
    if execute and xn:
        return Walk(None, 0x0C | level, 0, level, True)
    return Walk(pa, 0, 0, level, True)


def walk(read32, ttbr0: int, ttbcr: int, ttbr1: int, dacr: int, va: int, *, write=False, execute=False,
         user=False) -> Walk:
    """Short-descriptor translation of `va` (read32 reads guest physical memory), or the long
    descriptor walk when TTBCR.EAE is set (then ttbr0/ttbr1 are the 64-bit registers).
    fs: 0 = ok, 0x5/0x7 translation (section/page), 0x9/0xB domain, 0xD/0xF permission."""
    if ttbcr & TTBCR_EAE:
        return walk_long(read32, ttbr0, ttbcr, ttbr1, va, write=write, execute=execute, user=user)
    n = ttbcr & 7
    if n and va >> (32 - n):
        table = ttbr1 & ~0x3FFF
    else:
        table = ttbr0 & ~((1 << (14 - n)) - 1) & 0xFFFFFFFF
    l1 = read32(table | ((va >> 20) << 2))
    typ = l1 & 3
    if typ == 0 or typ == 3:
        return Walk(None, 0x5, 0, 1)
    domain = (l1 >> 5) & 0xF
    if typ == 1:
        l2 = read32((l1 & ~0x3FF) | (((va >> 12) & 0xFF) << 2))
        if l2 & 3 == 0:
            return Walk(None, 0x7, domain, 2)
        if l2 & 2:                                        # small page
            pa = (l2 & ~0xFFF) | (va & 0xFFF)
            ap = (l2 >> 4) & 3 | ((l2 >> 9) & 1) << 2
            xn = l2 & 1
        else:                                             # large page
            pa = (l2 & ~0xFFFF) | (va & 0xFFFF)
            ap = (l2 >> 4) & 3 | ((l2 >> 9) & 1) << 2
            xn = (l2 >> 15) & 1
        level = 2
    else:
        if l1 & (1 << 18):                                # supersection
            pa = (l1 & 0xFF000000) | (va & 0xFFFFFF)
            domain = 0
        else:
            pa = (l1 & 0xFFF00000) | (va & 0xFFFFF)
        ap = (l1 >> 10) & 3 | ((l1 >> 15) & 1) << 2
        xn = (l1 >> 4) & 1
        level = 1
    dom = (dacr >> (2 * domain)) & 3
    if dom == 0 or dom == 2:
        return Walk(None, 0x9 if level == 1 else 0xB, domain, level)
    if dom == 1:                                          # client: check AP[2:0] (AFE = 0)
        perm = 0xD if level == 1 else 0xF
        apl = ap & 3
        ro = bool(ap & 4)
        if apl == 0 or (user and apl == 1):
            return Walk(None, perm, domain, level)
        if write and (ro or (user and apl == 2)):
            return Walk(None, perm, domain, level)
        if execute and xn:
            return Walk(None, perm, domain, level)
    return Walk(pa, 0, domain, level)


def fsr(w: Walk, write: bool, fs: int | None = None) -> int:
    """The DFSR/IFSR value. Short descriptors: FS[3:0], domain, FS[4] at bit 10, WnR at 11. Long
    descriptors (LPAE): STATUS[5:0], LPAE at bit 9, WnR at 11 (what fsr-3level.c decodes)."""
    f = w.fs if fs is None else fs
    if w.long:
        return (f & 0x3F) | 0x200 | (0x800 if write else 0)
    return (f & 0xF) | ((f >> 4) & 1) << 10 | (w.domain & 0xF) << 4 | (0x800 if write else 0)


def mmu_state(uc):
    """(TTBR0, TTBCR, TTBR1, DACR); with TTBCR.EAE the TTBRs are the 64-bit registers."""
    ttbcr = cp_read(uc, TTBCR)
    if ttbcr & TTBCR_EAE:
        return (cp_read(uc, TTBR0_64), ttbcr, cp_read(uc, TTBR1_64), 0xFFFFFFFF)
    return (cp_read(uc, TTBR0), ttbcr, cp_read(uc, TTBR1), cp_read(uc, DACR))


# --- what a faulting instruction accessed --------------------------------------------------
_CS = None


def arm_disassembler():
    """One capstone ARM disassembler with details, made on first use (faulting accesses, the sanitizers)."""
    global _CS
    if _CS is None:
        import capstone
        _CS = capstone.Cs(capstone.CS_ARCH_ARM, capstone.CS_MODE_ARM)
        _CS.detail = True
    return _CS


def access_of(uc, insn_word: bytes, pc: int) -> tuple[int, bool] | None:
    """(first address accessed, is_write) of the load/store at `pc`, from its operands and
    the registers now (before it executed), or None when it is not a decodable access."""
    import capstone.arm as CA
    try:
        insn = next(arm_disassembler().disasm(insn_word, pc))
    except StopIteration:
        return None
    m = insn.mnemonic.lower()
    regs = insn.operands
    write = m.startswith(("str", "stm", "push", "vst", "vpush", "srs"))

    def rv(r):
        if r == CA.ARM_REG_PC:
            return pc + 8
        return uc.reg_read(_UC_REG[insn.reg_name(r)])

    if m.startswith(("ldm", "stm", "push", "pop", "vldm", "vstm", "vpush", "vpop")):
        if m.startswith(("push", "vpush")):
            nregs = len(regs)
            size = 8 if any(insn.reg_name(o.reg).startswith("d") for o in regs) else 4
            return (rv(CA.ARM_REG_SP) - nregs * size) & 0xFFFFFFFF, True
        if m.startswith(("pop", "vpop")):
            return rv(CA.ARM_REG_SP), False
        base = rv(regs[0].reg)
        n = len(regs) - 1
        size = 8 if any(insn.reg_name(o.reg).startswith("d") for o in regs[1:]) else 4
        sfx = m[3:5] if m[:3] in ("ldm", "stm") else m[4:6]
        if sfx in ("db",):
            base -= n * size
        elif sfx == "ib":
            base += 4
        elif sfx == "da":
            base -= (n - 1) * size
        return base & 0xFFFFFFFF, write
    for o in regs:
        if o.type == CA.ARM_OP_MEM:
            ea = rv(o.mem.base)
            if insn.post_index:
                return ea & 0xFFFFFFFF, write
            off = o.mem.disp
            if o.mem.index:
                off = rv(o.mem.index)
                st, sv = o.shift.type, o.shift.value
                if st == CA.ARM_SFT_LSL:
                    off = off << sv
                elif st == CA.ARM_SFT_LSR:
                    off = off >> sv
                elif st == CA.ARM_SFT_ASR:
                    off = (off - (1 << 32) if off & 0x80000000 else off) >> sv
                elif st == CA.ARM_SFT_ROR:
                    off = (off >> sv | off << (32 - sv)) & 0xFFFFFFFF
                if o.subtracted:
                    off = -off
            elif o.subtracted and off > 0:
                off = -off
            return (ea + off) & 0xFFFFFFFF, write
    return None


_UC_REG = {**{f"r{i}": getattr(A, f"UC_ARM_REG_R{i}") for i in range(13)},
           "sb": A.UC_ARM_REG_R9, "sl": A.UC_ARM_REG_R10, "fp": A.UC_ARM_REG_R11, "ip": A.UC_ARM_REG_R12,
           "sp": A.UC_ARM_REG_SP, "lr": A.UC_ARM_REG_LR, "pc": A.UC_ARM_REG_PC}


def u32(b: bytes, o: int = 0) -> int:
    return struct.unpack_from("<I", b, o)[0]
