"""The ARMv7 generic timer (ARM DDI 0406C B8) as cp15 c14 accesses, driven by simulated time.

Stock Unicorn's generic timer follows the host clock and never interrupts, so every c14
access in the Image (arch_counter_get_cnt{p,v}ct, arch_timer_reg_{read,write}_cp15, ...) is found
by scanning the text for MRC/MCR/MRRC/MCRR p15 with CRn/CRm = c14 and emulated by a code hook
at that address. The counter is simulated nanoseconds / NS_PER_COUNT, and simulated time is
the instruction count plus time spent idle (tick.py), so time is a function of the code run.
A timer's output is level: enabled, not masked and counter >= CVAL (the physical timer is PPI
30, the virtual one PPI 27, as in the device tree's `interrupts`).
"""
from __future__ import annotations

import struct

from unicorn import arm_const as A

FREQ = 62_500_000
NS_PER_COUNT = 1_000_000_000 // FREQ
PHYS, VIRT = 0, 1
PPI = {PHYS: 30, VIRT: 27}
U64 = (1 << 64) - 1


class ArchTimer:
    def __init__(self):
        self.ctl = [0, 0]
        self.cval = [0, 0]
        self.kctl = 0

    @staticmethod
    def counter(now_ns: int) -> int:
        return now_ns // NS_PER_COUNT

    def level(self, t: int, now_ns: int) -> bool:
        return self.ctl[t] & 3 == 1 and self.counter(now_ns) >= self.cval[t]

    def ctl_read(self, t: int, now_ns: int) -> int:
        ist = 4 if self.ctl[t] & 1 and self.counter(now_ns) >= self.cval[t] else 0
        return (self.ctl[t] & 3) | ist

    def deadline_ns(self) -> int | None:
        """The earliest simulated ns at which an enabled, unmasked timer's output rises."""
        ds = [self.cval[t] * NS_PER_COUNT for t in (PHYS, VIRT) if self.ctl[t] & 3 == 1]
        return min(ds) if ds else None

    def tval_read(self, t: int, now_ns: int) -> int:
        return (self.cval[t] - self.counter(now_ns)) & 0xFFFFFFFF

    def tval_write(self, t: int, now_ns: int, v: int) -> None:
        sv = v - (1 << 32) if v & 0x80000000 else v
        self.cval[t] = (self.counter(now_ns) + sv) & U64


# --- the access sites ----------------------------------------------------------------------
# (opc1, CRm, opc2) of MRC/MCR with CRn = c14 -> register; opc1 of MRRC/MCRR with CRm = c14
REG32 = {(0, 0, 0): "CNTFRQ", (0, 1, 0): "CNTKCTL", (0, 2, 0): "CNTP_TVAL", (0, 2, 1): "CNTP_CTL",
         (0, 3, 0): "CNTV_TVAL", (0, 3, 1): "CNTV_CTL"}
REG64 = {0: "CNTPCT", 1: "CNTVCT", 2: "CNTP_CVAL", 3: "CNTV_CVAL", 4: "CNTVOFF"}


def decode(word: int):
    """(register, is_read, rt, rt2, cond) of a cp15 c14 access, or None."""
    cond = word >> 28
    if word & 0x0F000F10 == 0x0E000F10 and (word >> 16) & 0xF == 14:          # MRC/MCR p15, c14
        opc1, crm, opc2 = (word >> 21) & 7, word & 0xF, (word >> 5) & 7
        reg = REG32.get((opc1, crm, opc2))
        return reg and (reg, bool(word >> 20 & 1), (word >> 12) & 0xF, None, cond)
    if word & 0x0FE00F00 == 0x0C400F00 and word & 0xF == 14:                  # MRRC/MCRR p15, c14
        reg = REG64.get((word >> 4) & 0xF)
        return reg and (reg, bool(word >> 20 & 1), (word >> 12) & 0xF, (word >> 16) & 0xF, cond)
    return None


def scan(data: bytes, base: int) -> list[tuple[int, tuple]]:
    """Every c14 access in the Image loaded at `base` (data words that happen to decode are
    harmless: a hook on an address that is never executed never fires)."""
    import numpy as np
    w = np.frombuffer(data[: len(data) & ~3], dtype="<u4")
    m32 = ((w & 0x0F000F10) == 0x0E000F10) & (((w >> 16) & 0xF) == 14)
    m64 = ((w & 0x0FE00F00) == 0x0C400F00) & ((w & 0xF) == 14)
    out = []
    for i in np.nonzero((m32 | m64) & ((w >> 28) != 0xF))[0].tolist():
        d = decode(int(w[i]))
        if d:
            out.append((base + 4 * i, d))
    return out


_R = [getattr(A, f"UC_ARM_REG_R{i}") for i in range(13)] + [A.UC_ARM_REG_SP, A.UC_ARM_REG_LR, A.UC_ARM_REG_PC]


def emulate(timer: ArchTimer, uc, site: tuple, now_ns: int) -> None:
    """Perform one decoded access on `timer` (the caller skips the instruction)."""
    reg, is_read, rt, rt2, _cond = site
    t = VIRT if reg.startswith("CNTV") else PHYS
    if rt2 is not None:
        if is_read:
            v = {"CNTPCT": timer.counter(now_ns), "CNTVCT": timer.counter(now_ns),
                 "CNTP_CVAL": timer.cval[PHYS], "CNTV_CVAL": timer.cval[VIRT], "CNTVOFF": 0}[reg]
            uc.reg_write(_R[rt], v & 0xFFFFFFFF)
            uc.reg_write(_R[rt2], v >> 32)
        elif reg.endswith("CVAL"):
            timer.cval[t] = uc.reg_read(_R[rt]) | uc.reg_read(_R[rt2]) << 32
        return
    if is_read:
        v = {"CNTFRQ": FREQ, "CNTKCTL": timer.kctl}.get(reg)
        if v is None:
            v = timer.ctl_read(t, now_ns) if reg.endswith("CTL") else timer.tval_read(t, now_ns)
        uc.reg_write(_R[rt], v)
        return
    v = uc.reg_read(_R[rt])
    if reg == "CNTKCTL":
        timer.kctl = v & 0x3FF
    elif reg.endswith("CTL"):
        timer.ctl[t] = v & 3
    elif reg.endswith("TVAL"):
        timer.tval_write(t, now_ns, v)
