"""GICv2 for one CPU (ARM IHI 0048B): distributor and CPU interface, what drivers/irqchip/irq-gic.c
touches. Interrupts 0-15 are SGIs, 16-31 PPIs (the timer is PPI 27), 32+ SPIs (the PL011 is 33).

State is plain integers and lists so the model pickles into a snapshot. Pending is a latch
(edge, SGI, or written to ISPENDR) or, for a level-sensitive interrupt, the input line itself;
acknowledging (IAR) makes an interrupt active and clears the latch; EOIR drops the active
state and the running priority. The CPU's IRQ input is `irq_signal()`.
"""
from __future__ import annotations

SPURIOUS = 1023
DIST_SIZE, CPU_SIZE = 0x1000, 0x2000


class Gic:
    def __init__(self, n_irqs: int = 96):
        assert n_irqs % 32 == 0 and 32 <= n_irqs <= 1020
        self.n = n_irqs
        self.dctlr = 0
        self.cctlr = 0
        self.pmr = 0
        self.bpr = 2
        self.enabled = [False] * n_irqs
        self.latch = [False] * n_irqs        # pending state held by the distributor
        self.line = [False] * n_irqs         # device input levels
        self.active = [False] * n_irqs
        self.prio = [0] * n_irqs
        self.targets = [0] * n_irqs
        self.cfg = [0] * (n_irqs // 16)      # ICFGR words: bit 1 of each field = edge
        self.group = [0] * (n_irqs // 32)
        self.active_stack: list[int] = []    # acknowledged interrupts, innermost last

    # --- device side ------------------------------------------------------------------------
    def edge(self, irq: int) -> bool:
        if irq < 16:
            return True
        return bool(self.cfg[irq // 16] >> (2 * (irq % 16) + 1) & 1)

    def set_line(self, irq: int, level: bool) -> None:
        if level and not self.line[irq] and self.edge(irq):
            self.latch[irq] = True           # a rising edge latches
        self.line[irq] = level

    def pending(self, irq: int) -> bool:
        return self.latch[irq] or (self.line[irq] and not self.edge(irq))

    def running_priority(self) -> int:
        return self.prio[self.active_stack[-1]] if self.active_stack else 0x100

    def highest(self) -> int:
        """The pending, enabled, inactive interrupt that the CPU interface would signal, or 1023."""
        best, bp = SPURIOUS, 0x100
        if not (self.dctlr & 1 and self.cctlr & 1):
            return SPURIOUS
        lat, lin = self.latch, self.line
        if True not in lat and True not in lin:       # nothing latched or raised (the usual case)
            return SPURIOUS
        for i in [i for i in range(self.n) if lat[i] or lin[i]]:
            if self.enabled[i] and not self.active[i] and self.pending(i) and self.prio[i] < bp:
                best, bp = i, self.prio[i]
        if bp >= self.pmr or bp >= self.running_priority():
            return SPURIOUS
        return best

    def irq_signal(self) -> bool:
        return self.highest() != SPURIOUS

    # --- distributor registers --------------------------------------------------------------
    def _bits(self, arr, off):
        base = off * 8
        return sum(1 << b for b in range(32) if base + b < self.n and arr(base + b))

    def dist_read(self, off: int, size: int) -> int:
        if off < 0x400 and size != 4:
            return 0
        if off == 0x000:
            return self.dctlr
        if off == 0x004:
            return self.n // 32 - 1                # ITLinesNumber, one CPU, no security extensions
        if off == 0x008:
            return 0x0200043B                      # IIDR: ARM, GICv2
        if 0x080 <= off < 0x100:
            i = (off - 0x080) // 4
            return self.group[i] if i < len(self.group) else 0
        if 0x100 <= off < 0x200:
            return self._bits(lambda i: self.enabled[i], (off & 0x7F))
        if 0x200 <= off < 0x300:
            return self._bits(self.pending, (off & 0x7F))
        if 0x300 <= off < 0x400:
            return self._bits(lambda i: self.active[i], (off & 0x7F))
        if 0x400 <= off < 0x800:
            return self._bytes(self.prio, off - 0x400, size)
        if 0x800 <= off < 0xC00:
            i = off - 0x800
            if i < 32:
                return int.from_bytes(bytes([1] * size), "little")   # SGI/PPI: this CPU
            return self._bytes(self.targets, i, size)
        if 0xC00 <= off < 0xD00:
            i = (off - 0xC00) // 4
            return self.cfg[i] if i < len(self.cfg) else 0
        if 0xFE0 <= off < 0x1000:
            return {0xFE8: 0x2B}.get(off, 0)          # PIDR2: ArchRev 2
        return 0

    def _bytes(self, arr, i, size):
        return sum((arr[i + k] if i + k < self.n else 0) << (8 * k) for k in range(size))

    def dist_write(self, off: int, size: int, v: int) -> None:
        if off == 0x000:
            self.dctlr = v & 1
        elif 0x080 <= off < 0x100:
            i = (off - 0x080) // 4
            if i < len(self.group):
                self.group[i] = v
        elif 0x100 <= off < 0x400:
            base = (off & 0x7F) * 8
            for b in range(32):
                if v >> b & 1 and base + b < self.n:
                    i = base + b
                    kind = (off - 0x100) // 0x80   # 0 set-en 1 clr-en 2 set-pend 3 clr-pend 4 set-act 5 clr-act
                    if kind == 0:
                        self.enabled[i] = True
                    elif kind == 1:
                        self.enabled[i] = False
                    elif kind == 2:
                        self.latch[i] = True
                    elif kind == 3:
                        self.latch[i] = False
                    elif kind == 4:
                        self.active[i] = True
                    else:
                        self._deactivate(i)
        elif 0x400 <= off < 0x800:
            for k in range(size):
                if off - 0x400 + k < self.n:
                    self.prio[off - 0x400 + k] = (v >> (8 * k)) & 0xFF
        elif 0x800 <= off < 0xC00:
            for k in range(size):
                i = off - 0x800 + k
                if 32 <= i < self.n:
                    self.targets[i] = (v >> (8 * k)) & 0xFF
        elif 0xC00 <= off < 0xD00:
            i = (off - 0xC00) // 4
            if i >= 2 and i < len(self.cfg):         # SGIs are edge, PPIs fixed here
                self.cfg[i] = v & 0xAAAAAAAA
            elif i == 1:
                self.cfg[i] = v & 0xAAAAAAAA
        elif off == 0xF00:                            # SGIR: to this CPU only (one CPU)
            filt, cpus, sgi = (v >> 24) & 3, (v >> 16) & 0xFF, v & 0xF
            if filt == 2 or (filt == 0 and cpus & 1):
                self.latch[sgi] = True

    def _deactivate(self, i: int) -> None:
        self.active[i] = False
        if i in self.active_stack:
            self.active_stack.remove(i)

    # --- CPU interface registers ------------------------------------------------------------
    def cpu_read(self, off: int, size: int) -> int:
        if off == 0x00:
            return self.cctlr
        if off == 0x04:
            return self.pmr
        if off == 0x08:
            return self.bpr
        if off == 0x0C:                                # IAR: acknowledge
            i = self.highest()
            if i != SPURIOUS:
                self.active[i] = True
                self.latch[i] = False
                self.active_stack.append(i)
            return i
        if off == 0x14:
            return self.running_priority() & 0xFF if self.active_stack else 0xFF
        if off == 0x18:
            return self.highest()
        if off == 0xFC:
            return 0x0202043B
        return 0

    def cpu_write(self, off: int, size: int, v: int) -> None:
        if off == 0x00:
            self.cctlr = v & 0x3FF
        elif off == 0x04:
            self.pmr = v & 0xF8
        elif off == 0x08:
            self.bpr = v & 7
        elif off == 0x10:                              # EOIR (EOImode 0: also deactivates)
            i = v & 0x3FF
            if i < self.n:
                if self.cctlr & 0x200:                 # EOImode 1: priority drop only
                    if i in self.active_stack:
                        self.active_stack.remove(i)
                else:
                    self._deactivate(i)
        elif off == 0x1000:                            # DIR
            i = v & 0x3FF
            if i < self.n:
                self._deactivate(i)
