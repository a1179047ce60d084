"""PL011 UART (ARM DDI 0183G) as drivers/tty/serial/amba-pl011.c sees it: transmit always
ready (the FIFO drains instantly), nothing ever received, the PrimeCell identification that
lets the AMBA bus bind the driver. Bytes written to DR are the console; `lines` holds them
split at newlines. The interrupt output is TXRIS & IMSC (the TX FIFO is always empty)."""
from __future__ import annotations

SIZE = 0x1000
FR_TXFE, FR_RXFE = 0x80, 0x10
TXIS = 0x20
# PeriphID0-3 (0x41 ARM, part 0x011, rev 1), PCellID0-3
ID_REGS = {0xFE0: 0x11, 0xFE4: 0x10, 0xFE8: 0x14, 0xFEC: 0x00,
           0xFF0: 0x0D, 0xFF4: 0xF0, 0xFF8: 0x05, 0xFFC: 0xB1}


class Pl011:
    def __init__(self):
        self.regs: dict[int, int] = {}
        self.partial = bytearray()
        self.lines: list[str] = []
        self.out = bytearray()                        # every byte, for tests and logs

    def read(self, off: int, size: int) -> int:
        if off in ID_REGS:
            return ID_REGS[off]
        if off == 0x18:
            return FR_TXFE | FR_RXFE
        if off == 0x3C:
            return TXIS
        if off == 0x40:
            return TXIS & self.regs.get(0x38, 0)
        if off == 0x00:
            return 0
        return self.regs.get(off, 0)

    def write(self, off: int, size: int, v: int) -> None:
        if off == 0x00:
            b = v & 0xFF
            self.out.append(b)
            if b == 0x0A:
                self.lines.append(self.partial.decode("utf-8", "replace").rstrip("\r"))
                self.partial.clear()
            else:
                self.partial.append(b)
        elif off == 0x44:
            pass                                     # ICR: TX stays raised (FIFO empty)
        else:
            self.regs[off] = v

    def irq_level(self) -> bool:
        return bool(TXIS & self.regs.get(0x38, 0))
