"""The machine the Debian armmp kernel boots on: RAM, a GICv2, a PL011 and the generic timer
(armload/emu/hw), one Cortex-A15 in stock Unicorn with the guest MMU (UC_TLB_CPU).

Everything above the hardware is the kernel's own code. What is done by hand, because stock
Unicorn calls hooks instead: exception entry (IRQ, UNDEF, SVC, data/prefetch abort, hw/cpu.py), the
generic timer (cp15 c14 sites, hw/timer.py) and WFI (Unicorn's halt ends emu_start right after it,
and run() sees the WFI before PC: with nothing pending the CPU sleeps until the next timer event:
simulated time jumps there; no hook).

IRQ delivery: the controller's output is recomputed after every device access and timer event;
while it is raised the block hook stops before the first block that starts with CPSR.I clear
(QEMU ends a translation block at every instruction that can unmask: cpsie, msr cpsr, an
exception return), and the IRQ exception is entered there. So a pending tick is taken right
after `cpsie i` in the idle loop, and msleep()/synchronize_rcu() complete.
"""
from __future__ import annotations

import ctypes
import gc
import mmap
import struct
import weakref

from unicorn import (UC_ARCH_ARM, UC_HOOK_CODE, UC_HOOK_INSN_INVALID, UC_HOOK_INTR, UC_MODE_ARM, UC_PROT_ALL, Uc,
                     UcError)
from unicorn import arm_const as A
from unicorn.unicorn_const import UC_TLB_CPU

from ..hw import c14, cpu, gic as gicmod, pl011, tick, timer as tmod
from ..hw.blocks import starts_block, text_ranges

RAM_BASE, RAM_SIZE = 0x40000000, 256 << 20
PAGE_OFFSET = 0xC0000000
MODULES_VADDR = PAGE_OFFSET - 0x01000000          # arch/arm/include/asm/memory.h (16 MiB)
GICD, GICC, UART = 0x08000000, 0x08010000, 0x09000000
UART_IRQ = 32 + 1
WFI = 0xE320F003
MODE_MASK = 0x1F
EXCP = {1: "undef", 2: "swi", 3: "pabort", 4: "dabort", 5: "irq", 6: "fiq", 7: "bkpt"}


class GuestFault(Exception):
    """The machine cannot go on (an exception Unicorn raised that the guest cannot take)."""


def c_bytes(read, va: int, limit: int) -> bytes:
    """The bytes of the C string at `va`, before its NUL and at most `limit`, read a page at a time
    and no further than the NUL (as the kernel's strnlen walks it: a string may end just before an
    unmapped page); GuestFault when a byte before the NUL is not mapped. read(va, n) -> bytes."""
    out = bytearray()
    while len(out) < limit:
        a = va + len(out)
        chunk = read(a, min(limit - len(out), 0x1000 - (a & 0xFFF)))
        i = chunk.find(b"\0")
        if i >= 0:
            return bytes(out + chunk[:i])
        out += chunk
    return bytes(out)


class Hardware:
    """The devices' state and simulated time: what a snapshot keeps besides RAM and the CPU."""

    def __init__(self):
        self.gic = gicmod.Gic()
        self.uart = pl011.Pl011()
        self.timer = tmod.ArchTimer()
        self.insns = 0
        self.idle_ns = 0
        self.wfi_count = 0
        self.irqs_taken = 0


_LIVE: "weakref.WeakSet[Machine]" = weakref.WeakSet()
LIVE_MAX = 3        # machines alive in one process before the garbage collector is asked to free the rest


class Machine:
    def __init__(self, image, ram: mmap.mmap, hw: Hardware | None = None, booted: bool = False):
        # booted: restored after the boot (free_initmem ran: the init text is gone)
        # A Machine and its Uc form a reference cycle (the Uc keeps the bound hook methods), so a
        # dropped one waits for the cycle collector, holding the Uc's 1 GiB translation buffer of
        # address space meanwhile: restores in a loop (check's workers) would reach RLIMIT_AS.
        if len(_LIVE) >= LIVE_MAX:
            gc.collect()
        _LIVE.add(self)
        self.image = image
        self.ram = ram
        self.hw = hw or Hardware()
        uc = self.uc = Uc(UC_ARCH_ARM, UC_MODE_ARM)
        uc.ctl_set_cpu_model(A.UC_CPU_ARM_CORTEX_A15)
        uc.ctl_set_tlb_mode(UC_TLB_CPU)
        self._ram_ptr = ctypes.addressof(ctypes.c_char.from_buffer(ram))
        uc.mem_map_ptr(RAM_BASE, RAM_SIZE, UC_PROT_ALL, self._ram_ptr)
        g = self.hw.gic
        uc.mmio_map(GICD, gicmod.DIST_SIZE, lambda u, o, s, d: g.dist_read(o, s), None,
                    lambda u, o, s, v, d: self._io(g.dist_write, o, s, v), None)
        uc.mmio_map(GICC, gicmod.CPU_SIZE, lambda u, o, s, d: self._io_read(g.cpu_read, o, s), None,
                    lambda u, o, s, v, d: self._io(g.cpu_write, o, s, v), None)
        uc.mmio_map(UART, pl011.SIZE, lambda u, o, s, d: self.hw.uart.read(o, s), None,
                    lambda u, o, s, v, d: self._io(self.hw.uart.write, o, s, v), None)
        self.t = tick.install(uc)
        self.t.insns = self.hw.insns
        # exceptions taken, by kind; `exception_log` is a list to append (kind, pc) to while someone
        # wants them (a long run takes millions of faults: no log by default)
        self.exception_counts: dict[str, int] = {}
        self.exception_log: list[tuple[str, int]] | None = None
        self.wall_stop = None             # the wall-clock safety net's text once it fired (call.Watchdog)
        self.stop_reason = None
        self.service = None        # a request a hook left for the host (a usermode helper): run() returns "service"
        uc.hook_add(UC_HOOK_INTR, self._intr)
        uc.hook_add(UC_HOOK_INSN_INVALID, self._undef)   # Unicorn reports UNDEF here, not as INTR
        self.block_hooks = tick.PyBlockHooks(self.t, uc)
        sites, _wfi = _scan(image, booted)
        # the timer's reads in C (hw/c14.py), its writes here: they change the interrupt output
        self.c14, sites = c14.install(uc, self.t, self._ram_ptr, RAM_SIZE, sites, self._word_at_image,
                                      lambda a: starts_block(image, a))
        self.c14.mirror(self.hw.timer, self.hw.idle_ns)
        self._sites = {}
        for addr, site in sites:
            self._sites[addr] = (site, self._word_at_image(addr))
            if starts_block(image, addr):
                self.block_hooks.add(addr, self._timer_site)
            else:
                uc.hook_add(UC_HOOK_CODE, self._timer_site, begin=addr, end=addr)

    # --- memory ------------------------------------------------------------------------------
    def _word_at_image(self, va: int) -> int:
        return struct.unpack_from("<I", self.image.data, va - self.image.base)[0]

    def pread(self, pa: int, n: int) -> bytes:
        o = pa - RAM_BASE
        if not 0 <= o <= RAM_SIZE - n:
            raise GuestFault(f"physical {pa:#x}+{n} is outside RAM")
        return self.ram[o:o + n]

    def pwrite(self, pa: int, data: bytes) -> None:
        o = pa - RAM_BASE
        if not 0 <= o <= RAM_SIZE - len(data):
            raise GuestFault(f"physical {pa:#x}+{len(data)} is outside RAM")
        self.ram[o:o + len(data)] = data

    def _read32p(self, pa: int) -> int:
        o = pa - RAM_BASE
        if not 0 <= o <= RAM_SIZE - 4:
            return 0
        return struct.unpack_from("<I", self.ram, o)[0]

    def executable(self, va: int) -> bool:
        """Whether the kernel may execute at `va` now (the guest's tables; the MMU on)."""
        ttbr0, ttbcr, ttbr1, dacr = cpu.mmu_state(self.uc)
        return not cpu.walk(self._read32p, ttbr0, ttbcr, ttbr1, dacr, va, execute=True).fs

    def drop_blocks(self, base: int, size: int) -> None:
        """Drop Unicorn's translated blocks of [base, base+size) so that a hook added on it is seen
        (blocks translated before a hook lack it): those of its executable pages. Not the others:
        Unicorn's removal fetches through the guest's tables, and on a page mapped no-execute
        (6.10+'s execmem data, or text before module_enable_text_rox) that fetch's fault is left
        pending and taken at the next access (an oops in __mod_tree_insert); such a page's old
        blocks go when the kernel writes it (Unicorn drops the blocks of a written page)."""
        for va in range(base & ~0xFFF, base + size, 0x1000):
            if self.executable(va):
                self.uc.ctl_remove_cache(max(va, base), min(va + 0x1000, base + size))

    def translate(self, va: int, *, write=False) -> int:
        """Guest physical address of virtual `va` (the linear map directly, else a table walk)."""
        if PAGE_OFFSET <= va < PAGE_OFFSET + RAM_SIZE:
            return va - PAGE_OFFSET + RAM_BASE
        if cpu.cp_read(self.uc, cpu.SCTLR) & 1 == 0:
            return va
        ttbr0, ttbcr, ttbr1, dacr = cpu.mmu_state(self.uc)
        w = cpu.walk(self._read32p, ttbr0, ttbcr, ttbr1, 0xFFFFFFFF, va, write=write)
        if w.pa is None and w.translation_fault and va >= MODULES_VADDR and not w.long:
            # a process's first-level table gets kernel (vmalloc, module) sections copied from
            # init_mm's swapper_pg_dir lazily, on a translation fault (do_translation_fault):
            # walk the master table as that fault would
            swapper = self.image.base - 0x4000 - PAGE_OFFSET + RAM_BASE
            w = cpu.walk(self._read32p, swapper, 0, swapper, 0xFFFFFFFF, va, write=write)
        if w.pa is None:
            raise GuestFault(f"virtual {va:#x} is not mapped (fault status {w.fs:#x})")
        return w.pa

    def read(self, va: int, n: int) -> bytes:
        out = bytearray()
        while n > 0:
            k = min(n, 0x1000 - (va & 0xFFF))
            out += self.pread(self.translate(va), k)
            va, n = va + k, n - k
        return bytes(out)

    def write(self, va: int, data: bytes) -> None:
        i = 0
        while i < len(data):
            k = min(len(data) - i, 0x1000 - ((va + i) & 0xFFF))
            self.pwrite(self.translate(va + i, write=True), data[i:i + k])
            i += k

    def u32(self, va: int) -> int:
        return struct.unpack("<I", self.read(va, 4))[0]

    def cstr(self, va: int, limit: int = 256) -> str:
        return c_bytes(self.read, va, limit).decode("utf-8", "replace")

    # --- time and interrupts -----------------------------------------------------------------
    def now_ns(self) -> int:
        return self.t.insns + self.hw.idle_ns

    def _io(self, fn, o, s, v):
        fn(o, s, v)
        self._sync()

    def _io_read(self, fn, o, s):
        v = fn(o, s)
        self._sync()
        return v

    def _next_event_ns(self) -> int | None:
        now = self.now_ns()
        tm = self.hw.timer
        ds = [tm.cval[t] * tmod.NS_PER_COUNT for t in (tmod.PHYS, tmod.VIRT)
              if tm.ctl[t] & 3 == 1 and tm.counter(now) < tm.cval[t]]
        return min(ds) if ds else None

    def _sync(self) -> None:
        """Device outputs -> GIC inputs -> CPU IRQ line and the next timer deadline."""
        now, hw = self.now_ns(), self.hw
        for t in (tmod.PHYS, tmod.VIRT):
            hw.gic.set_line(tmod.PPI[t], hw.timer.level(t, now))
        hw.gic.set_line(UART_IRQ, hw.uart.irq_level())
        self.t.irq_line = 1 if hw.gic.irq_signal() else 0
        self.c14.mirror(hw.timer, hw.idle_ns)
        ev = self._next_event_ns()
        self.t.deadline = tick.NEVER if ev is None else max(0, ev - hw.idle_ns)

    def _timer_site(self, uc, addr, size, _):
        site, word = self._sites[addr]
        if self._read32p(self.translate(addr)) != word:
            return                                        # init text reused: not the access any more
        if site[4] != 0xE and not _cond(site[4], uc.reg_read(A.UC_ARM_REG_CPSR)):
            uc.reg_write(A.UC_ARM_REG_PC, addr + 4)
            return
        tmod.emulate(self.hw.timer, uc, site, self.now_ns())
        self._sync()
        uc.reg_write(A.UC_ARM_REG_PC, addr + 4)

    def _after_wfi(self, pc: int) -> bool:
        """Whether emu_start came back because the instruction before `pc` is a WFI (ARM, always):
        Unicorn halts the CPU there (EXCP_HLT ends the run, PC past the WFI). With nothing pending
        the CPU sleeps until the next timer event: simulated time jumps there (an idle WFI with no
        timer armed stops the machine: stop_reason)."""
        if self.uc.reg_read(A.UC_ARM_REG_CPSR) & cpu.CPSR_T:
            return False
        try:
            if self._read32p(self.translate(pc - 4)) != WFI:
                return False
        except GuestFault:
            return False
        self.hw.wfi_count += 1
        if not self.hw.gic.irq_signal():
            ev = self._next_event_ns()
            if ev is None:
                self.stop_reason = "idle: WFI with no interrupt pending and no timer armed"
                return True
            self.hw.idle_ns += ev - self.now_ns()
            self._sync()
        return True

    def _intr(self, uc, intno, _):
        kind = EXCP.get(intno, f"exception {intno}")
        pc = uc.reg_read(A.UC_ARM_REG_PC)
        self._took(kind, pc)
        try:
            if kind == "undef":
                cpu.enter(uc, "undef", pc)
            elif kind == "swi":                           # svc from user mode: PC is past the svc already
                cpu.enter(uc, "swi", pc)
            elif kind == "dabort":
                self._abort(uc, pc, data=True)
            elif kind == "pabort":
                self._abort(uc, pc, data=False)
            else:
                self.stop_reason = f"unexpected {kind} at {pc:#x}"
                uc.emu_stop()
        except Exception as e:                            # never let an exception escape a hook
            self.stop_reason = f"{kind} at {pc:#x}: entry failed: {e}"
            uc.emu_stop()

    def _took(self, kind: str, pc: int) -> None:
        self.exception_counts[kind] = self.exception_counts.get(kind, 0) + 1
        if self.exception_log is not None:
            self.exception_log.append((kind, pc))

    def _undef(self, uc, _):
        pc = uc.reg_read(A.UC_ARM_REG_PC)                 # the undefined instruction itself
        self._took("undef", pc)
        cpu.enter(uc, "undef", pc)
        return True

    def _abort(self, uc, pc: int, data: bool) -> None:
        ttbr0, ttbcr, ttbr1, dacr = cpu.mmu_state(uc)
        user = uc.reg_read(A.UC_ARM_REG_CPSR) & MODE_MASK == cpu.MODE_USR
        if data:
            acc = cpu.access_of(uc, self.read(pc, 4), pc)
            if acc is None:
                raise GuestFault(f"data abort at {pc:#x} by an instruction armload cannot decode")
            va, write = acc
            w = cpu.walk(self._read32p, ttbr0, ttbcr, ttbr1, dacr, va, write=write, user=user)
            nxt = (va | 0xFFF) + 1
            if not w.fs and va & 0xFFF > 0xF00 and nxt < 1 << 32:
                # an LDM/STM/VLDM (at most 256 bytes) whose first address is mapped: the fault
                # is on the next page, and DFAR is that page's first address (as the CPU reports)
                w2 = cpu.walk(self._read32p, ttbr0, ttbcr, ttbr1, dacr, nxt, write=write, user=user)
                if w2.fs:
                    va, w = nxt, w2
            fs = w.fs or w.other_fault(bool(va & 3))      # mapped and allowed: alignment or external
            cpu.cp_write(uc, cpu.DFSR, cpu.fsr(w, write, fs))
            cpu.cp_write(uc, cpu.DFAR, va)
            cpu.enter(uc, "dabort", pc)
        else:
            w = cpu.walk(self._read32p, ttbr0, ttbcr, ttbr1, dacr, pc, execute=True, user=user)
            cpu.cp_write(uc, cpu.IFSR, cpu.fsr(w, False, w.fs or w.other_fault(False)) & ~0x800)
            cpu.cp_write(uc, cpu.IFAR, pc)
            cpu.enter(uc, "pabort", pc)

    # --- running -------------------------------------------------------------------------------
    def run(self, until: int, budget: int | None = None) -> str:
        """Run from the current PC until PC == `until` ("until"), the instruction budget ends
        ("budget"), or the machine cannot go on (GuestFault). Interrupts are taken on the way."""
        t = self.t
        t.budget = tick.NEVER if budget is None else t.insns + budget
        self.stop_reason = None
        while True:
            if self.wall_stop:                # fired between two emu_start calls: its emu_stop found none
                raise GuestFault(self.wall_stop)
            t.reason = 0
            self._sync()
            pc = self.uc.reg_read(A.UC_ARM_REG_PC)
            thumb = self.uc.reg_read(A.UC_ARM_REG_CPSR) & cpu.CPSR_T
            try:
                self.uc.emu_start(pc | (1 if thumb else 0), until)
            except UcError as e:
                pc = self.uc.reg_read(A.UC_ARM_REG_PC)
                raise GuestFault(f"Unicorn stopped at {pc:#x}: {e}") from None
            self.hw.insns = t.insns
            pc = self.uc.reg_read(A.UC_ARM_REG_PC)
            if self.service is not None:
                return "service"
            if pc == until and not t.reason:
                return "until"
            if self.stop_reason:
                raise GuestFault(self.stop_reason)
            if t.reason == tick.BUDGET:
                return "budget"
            if t.reason == tick.IRQ:
                if self.hw.gic.irq_signal():
                    self.hw.irqs_taken += 1
                    cpu.enter(self.uc, "irq", pc)
            elif t.reason == tick.DEADLINE:
                pass                                      # _sync() at the loop's top raises the line
            elif pc == until:
                return "until"
            elif self._after_wfi(pc) and self.stop_reason:
                raise GuestFault(self.stop_reason)

    # --- registers -----------------------------------------------------------------------------
    def reg(self, name: str) -> int:
        return self.uc.reg_read(getattr(A, f"UC_ARM_REG_{name.upper()}"))

    def set_reg(self, name: str, v: int) -> None:
        self.uc.reg_write(getattr(A, f"UC_ARM_REG_{name.upper()}"), v & 0xFFFFFFFF)


_SCANS: dict = {}


def _scan(image, booted: bool):
    """(c14 access sites, WFI addresses) of an Image's code, once per process: its .text, and its
    init text while the kernel boots (free_initmem frees it; a booted kernel never runs it again).
    Only code: a hook on a data word that decodes as one would never fire, but it would lengthen
    the code-hook list every hooked instruction walks."""
    key = (image.path, image.base, len(image.data), booted)
    if key not in _SCANS:
        import numpy as np
        sites, wfi = [], []
        for lo, hi in text_ranges(image, init=not booted):
            chunk = image.data[lo - image.base:(hi - image.base) & ~3]
            w = np.frombuffer(chunk[: len(chunk) & ~3], dtype="<u4")
            sites += tmod.scan(chunk, lo)
            wfi += [lo + 4 * int(i) for i in np.nonzero(w == WFI)[0]]
        _SCANS[key] = (sites, wfi)
    return _SCANS[key]


def _cond(cond: int, cpsr: int) -> bool:
    n, z, c, v = (cpsr >> 31) & 1, (cpsr >> 30) & 1, (cpsr >> 29) & 1, (cpsr >> 28) & 1
    r = [z, c, n, v, c and not z, n == v, not z and n == v][cond >> 1] if cond < 14 else True
    return bool(r) != bool(cond & 1 and cond < 14)
