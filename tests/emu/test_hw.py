"""The booted machine's hardware models, alone (no kernel): GICv2, PL011, generic timer, the
device tree, the initramfs, exception entry and the MMU walk. The oracles are the architecture
manuals' rules, GNU as for instruction encodings, and Unicorn's own exception reports."""
import os
import struct
import subprocess
import tempfile

import pytest
from unicorn import UC_ARCH_ARM, UC_HOOK_INSN_INVALID, UC_HOOK_INTR, UC_MODE_ARM, UC_PROT_ALL, Uc
from unicorn import arm_const as A

from testinputs import CROSS
from armload.emu.hw import cpu, dtb, gic as gicmod, pl011, timer as tmod
from armload.emu.booted import initramfs


# --- GICv2 -------------------------------------------------------------------------------------
def _gic(prio=0xA0):
    g = gicmod.Gic()
    g.dist_write(0x000, 4, 1)                 # distributor on
    g.cpu_write(0x00, 4, 1)                   # CPU interface on
    g.cpu_write(0x04, 4, 0xF0)                # PMR
    g.dist_write(0x100, 4, 1 << 27)           # enable PPI 27 (the virtual timer)
    g.dist_write(0x104, 4, 1 << 1)            # enable SPI 33 (the UART)
    g.dist_write(0x400 + 27, 1, prio)
    g.dist_write(0x400 + 33, 1, prio)
    return g


def test_gic_iar_is_1023_when_nothing_pending():
    g = _gic()
    assert g.cpu_read(0x0C, 4) == 1023 and not g.irq_signal()


def test_gic_level_interrupt_ack_eoi_and_repend():
    g = _gic()
    g.set_line(27, True)
    assert g.irq_signal() and g.cpu_read(0x18, 4) == 27          # HPPIR
    assert g.cpu_read(0x0C, 4) == 27                              # ack: active
    assert g.active[27] and g.cpu_read(0x0C, 4) == 1023           # active: not signalled twice
    g.cpu_write(0x10, 4, 27)                                      # EOI clears active
    assert not g.active[27] and g.active_stack == []
    assert g.cpu_read(0x0C, 4) == 27                              # line still high: pending again
    g.cpu_write(0x10, 4, 27)
    g.set_line(27, False)
    assert g.cpu_read(0x0C, 4) == 1023


def test_gic_edge_latch_survives_line_drop_and_clears_on_ack():
    g = _gic()
    g.dist_write(0xC08, 4, 2 << 2)                                # ICFGR: SPI 33 edge
    g.set_line(33, True)
    g.set_line(33, False)
    assert g.cpu_read(0x0C, 4) == 33
    g.cpu_write(0x10, 4, 33)
    assert g.cpu_read(0x0C, 4) == 1023


def test_gic_priority_mask_disable_and_preemption():
    g = _gic()
    g.set_line(27, True)
    g.cpu_write(0x04, 4, 0xA0)                                    # PMR == priority: masked
    assert not g.irq_signal()
    g.cpu_write(0x04, 4, 0xA8)
    assert g.irq_signal()
    g.dist_write(0x180, 4, 1 << 27)                               # ICENABLER
    assert not g.irq_signal()
    g.dist_write(0x100, 4, 1 << 27)
    g.dist_write(0x000, 4, 0)                                     # distributor off
    assert g.cpu_read(0x0C, 4) == 1023
    g.dist_write(0x000, 4, 1)
    assert g.cpu_read(0x0C, 4) == 27                              # running priority 0xA0
    g.dist_write(0x400 + 33, 1, 0x80)                             # higher priority preempts
    g.set_line(33, True)
    assert g.cpu_read(0x0C, 4) == 33 and g.active_stack == [27, 33]
    g.cpu_write(0x10, 4, 33)
    assert g.active_stack == [27]


def test_gic_sgi_and_pending_registers():
    g = _gic()
    g.dist_write(0x100, 4, 1 << 1 | 1 << 27)
    g.dist_write(0xF00, 4, 2 << 24 | 1)                           # SGIR: SGI 1 to self
    assert g.dist_read(0x200, 4) & 2 and g.cpu_read(0x0C, 4) == 1
    g.cpu_write(0x10, 4, 1)
    g.dist_write(0x204, 4, 1 << 1)                                # ISPENDR for SPI 33
    assert g.pending(33)
    g.dist_write(0x284, 4, 1 << 1)
    assert not g.pending(33)
    assert g.dist_read(0x800, 4) == 0x01010101                    # SGI/PPI targets: this CPU
    assert g.dist_read(0x004, 4) & 0x1F == g.n // 32 - 1


# --- PL011 -------------------------------------------------------------------------------------
def test_pl011_console_lines_flags_ids_and_irq():
    u = pl011.Pl011()
    for b in b"hello\r\nworld\n":
        u.write(0, 4, b)
    assert u.lines == ["hello", "world"]
    assert u.read(0x18, 4) & pl011.FR_TXFE and u.read(0x18, 4) & pl011.FR_RXFE
    # the AMBA bus's periphid (drivers/amba/bus.c: byte i of 0xfe0 + 4i) matches amba-pl011's
    # {0x00041011, 0x000fffff}; cid is the PrimeCell id
    pid = sum((u.read(0xFE0 + 4 * i, 4) & 0xFF) << (8 * i) for i in range(4))
    cid = sum((u.read(0xFF0 + 4 * i, 4) & 0xFF) << (8 * i) for i in range(4))
    assert pid & 0x000FFFFF == 0x00041011 and cid == 0xB105F00D
    assert not u.irq_level()
    u.write(0x38, 4, pl011.TXIS)
    assert u.irq_level() and u.read(0x40, 4) == pl011.TXIS


# --- generic timer -----------------------------------------------------------------------------
def test_timer_fires_exactly_at_cval_not_a_tick_late():
    t = tmod.ArchTimer()
    t.ctl[tmod.VIRT] = 1
    t.cval[tmod.VIRT] = 1000
    at = 1000 * tmod.NS_PER_COUNT
    assert t.deadline_ns() == at
    assert not t.level(tmod.VIRT, at - 1) and t.level(tmod.VIRT, at)
    assert t.ctl_read(tmod.VIRT, at) == 5                         # ENABLE | ISTATUS
    t.ctl[tmod.VIRT] = 3                                          # IMASK: output low, ISTATUS kept
    assert not t.level(tmod.VIRT, at) and t.ctl_read(tmod.VIRT, at) == 7
    t.ctl[tmod.VIRT] = 0
    assert t.deadline_ns() is None and t.ctl_read(tmod.VIRT, at) == 0


def test_timer_tval_is_signed_and_relative():
    t = tmod.ArchTimer()
    now = 5000 * tmod.NS_PER_COUNT
    t.tval_write(tmod.PHYS, now, 100)
    assert t.cval[tmod.PHYS] == 5100 and t.tval_read(tmod.PHYS, now) == 100
    t.tval_write(tmod.PHYS, now, 0xFFFFFFF6)                      # -10
    assert t.cval[tmod.PHYS] == 4990 and t.tval_read(tmod.PHYS, now) == 0xFFFFFFF6


def _assemble(lines: list[str]) -> bytes:
    with tempfile.TemporaryDirectory() as d:
        src, o = os.path.join(d, "a.s"), os.path.join(d, "a.o")
        open(src, "w").write(".arch armv7-a\n.arm\n" + "\n".join(lines) + "\n")
        subprocess.run([CROSS + "as", "-o", o, src], check=True)
        out = subprocess.run([CROSS + "objcopy", "-O", "binary", "-j", ".text", o, "/dev/stdout"],
                             check=True, capture_output=True).stdout
    return out


def test_timer_decode_against_gnu_as():
    code = _assemble(["mrrc p15, 1, r0, r1, c14", "mrrc p15, 0, r2, r3, c14", "mcrr p15, 3, r4, r5, c14",
                      "mcrr p15, 2, r6, r7, c14", "mrc p15, 0, r0, c14, c3, 1", "mcr p15, 0, r1, c14, c2, 1",
                      "mcr p15, 0, r2, c14, c3, 0", "mrc p15, 0, r3, c14, c0, 0", "mcrne p15, 0, r1, c14, c1, 0",
                      "mrc p15, 0, r0, c13, c0, 3", "add r0, r1, r2"])
    got = [tmod.decode(w) for w in struct.unpack(f"<{len(code) // 4}I", code)]
    assert got == [("CNTVCT", True, 0, 1, 14), ("CNTPCT", True, 2, 3, 14), ("CNTV_CVAL", False, 4, 5, 14),
                   ("CNTP_CVAL", False, 6, 7, 14), ("CNTV_CTL", True, 0, None, 14),
                   ("CNTP_CTL", False, 1, None, 14), ("CNTV_TVAL", False, 2, None, 14),
                   ("CNTFRQ", True, 3, None, 14), ("CNTKCTL", False, 1, None, 1), None, None]
    sites = tmod.scan(b"\0" * 8 + code, 0x1000)
    assert [a for a, _ in sites] == [0x1008 + 4 * i for i in range(9)]


# --- device tree, initramfs ----------------------------------------------------------------------
def test_dtb_round_trip_and_dtc_reads_it():
    blob = dtb.build(("", {"#address-cells": 1, "model": "m"}, [
        ("chosen", {"bootargs": "console=ttyAMA0", "linux,initrd-start": 0x48100000}, []),
        ("pl011@9000000", {"compatible": ["arm,pl011", "arm,primecell"], "reg": [0x9000000, 0x1000]}, [])]))
    t = dtb.parse(blob)
    assert t["/"]["model"] == b"m\0" and t["/chosen"]["bootargs"] == b"console=ttyAMA0\0"
    assert t["/chosen"]["linux,initrd-start"] == struct.pack(">I", 0x48100000)
    assert t["/pl011@9000000"]["compatible"] == b"arm,pl011\0arm,primecell\0"
    assert struct.unpack(">I", blob[4:8])[0] == len(blob)
    with pytest.raises(ValueError):
        dtb.parse(b"\0" * 40)


def test_initramfs_is_newc_with_init_and_console():
    blob = initramfs.build()
    assert len(blob) % 512 == 0
    names, i = [], 0
    while True:
        assert blob[i:i + 6] == b"070701"
        f = [int(blob[i + 6 + 8 * k: i + 14 + 8 * k], 16) for k in range(13)]
        name = blob[i + 110: i + 110 + f[11] - 1].decode()
        j = (i + 110 + f[11] + 3) & ~3
        names.append((name, f[1], f[6], f[9], f[10]))
        i = (j + f[6] + 3) & ~3
        if name == "TRAILER!!!":
            break
    byname = {n: (mode, size, ma, mi) for n, mode, size, ma, mi in names}
    assert byname["init"][0] & 0o170000 == 0o100000 and byname["init"][0] & 0o111 and byname["init"][1] > 0
    assert byname["dev/console"][0] & 0o170000 == 0o020000 and byname["dev/console"][2:] == (5, 1)


# --- exception entry and the MMU walk ------------------------------------------------------------
def _uc():
    uc = Uc(UC_ARCH_ARM, UC_MODE_ARM)
    uc.ctl_set_cpu_model(A.UC_CPU_ARM_CORTEX_A15)
    uc.mem_map(0, 0x10000, UC_PROT_ALL)
    return uc


@pytest.mark.parametrize("kind,mode,vec,lr,amask", [("irq", 0x12, 0x18, 0x8004, True), ("undef", 0x1B, 0x04, 0x8004, False),
                                                    ("dabort", 0x17, 0x10, 0x8008, True), ("pabort", 0x17, 0x0C, 0x8004, True)])
def test_enter_banks_registers_and_vectors(kind, mode, vec, lr, amask):
    uc = _uc()
    uc.reg_write(A.UC_ARM_REG_CPSR, 0x60000013)                   # SVC, flags NZCV=0110
    uc.reg_write(A.UC_ARM_REG_SP, 0x5000)
    uc.reg_write(A.UC_ARM_REG_LR, 0x1234)
    cpu.cp_write(uc, cpu.SCTLR, cpu.cp_read(uc, cpu.SCTLR) | 1 << 13)   # high vectors
    assert cpu.enter(uc, kind, 0x8000) == 0xFFFF0000 + vec
    cpsr = uc.reg_read(A.UC_ARM_REG_CPSR)
    assert cpsr & 0x1F == mode and cpsr & cpu.CPSR_I and bool(cpsr & cpu.CPSR_A) == amask
    assert uc.reg_read(A.UC_ARM_REG_SPSR) == 0x60000013 and uc.reg_read(A.UC_ARM_REG_LR) == lr
    assert uc.reg_read(A.UC_ARM_REG_PC) == 0xFFFF0000 + vec
    uc.reg_write(A.UC_ARM_REG_SP, 0x7000)                          # the new mode's own SP
    uc.reg_write(A.UC_ARM_REG_CPSR, 0x60000013)                   # back to SVC: its banked SP/LR
    assert uc.reg_read(A.UC_ARM_REG_SP) == 0x5000 and uc.reg_read(A.UC_ARM_REG_LR) == 0x1234
    cpu.cp_write(uc, cpu.SCTLR, cpu.cp_read(uc, cpu.SCTLR) & ~(1 << 13))
    cpu.cp_write(uc, cpu.VBAR, 0x4000)
    assert cpu.enter(uc, kind, 0x8000) == 0x4000 + vec


def test_unicorn_reports_undef_and_abort_at_the_faulting_instruction():
    """What machine.py relies on: Unicorn reports UNDEF to UC_HOOK_INSN_INVALID (not as an
    interrupt) with PC = the undefined instruction, and goes on where the hook put PC."""
    uc = _uc()
    code = _assemble(["mov r0, #1", ".word 0xe7f001f2", "mov r0, #2"])
    uc.mem_write(0x1000, code)
    seen = []

    def hook(uc, _):
        seen.append(uc.reg_read(A.UC_ARM_REG_PC))
        cpu.enter(uc, "undef", seen[-1])
        uc.reg_write(A.UC_ARM_REG_PC, 0x1008)                     # as a handler returning past it
        return True
    uc.hook_add(UC_HOOK_INSN_INVALID, hook)
    uc.hook_add(UC_HOOK_INTR, lambda *a: seen.append("intr"))
    uc.reg_write(A.UC_ARM_REG_CPSR, 0x1D3)
    uc.emu_start(0x1000, 0x100C)
    assert seen == [0x1004] and uc.reg_read(A.UC_ARM_REG_R0) == 2
    assert uc.reg_read(A.UC_ARM_REG_CPSR) & 0x1F == 0x1B and uc.reg_read(A.UC_ARM_REG_LR) == 0x1008


def test_access_of_decodes_the_effective_address():
    uc = _uc()
    for r, v in ((1, 0x100), (2, 0x2000), (3, 3), (13, 0x8000)):
        uc.reg_write(getattr(A, f"UC_ARM_REG_R{r}") if r < 13 else A.UC_ARM_REG_SP, v)
    code = _assemble(["ldr r0, [r1, #8]", "str r0, [r2, -r3, lsl #2]", "ldr r0, [r1], #4", "strd r4, r5, [r2, #-16]",
                      "ldmdb r2, {r4-r7}", "push {r4, lr}", "ldrb r0, [r1, r3]"])
    words = [code[i:i + 4] for i in range(0, len(code), 4)]
    got = [cpu.access_of(uc, w, 0x1000) for w in words]
    assert got == [(0x108, False), (0x2000 - 12, True), (0x100, False), (0x2000 - 16, True),
                   (0x2000 - 16, False), (0x8000 - 8, True), (0x103, False)]


def test_walk_section_page_fault_domain_and_permission():
    mem = {}
    ttb = 0x4000
    mem[ttb + (0xC00 << 2)] = 0xC0000000 | (0b01 << 10) | 2        # section, AP=01 (priv RW), domain 0
    mem[ttb + (0xC01 << 2)] = 0xC0100000 | (0b01 << 10) | (1 << 15) | 2 | (1 << 5)   # RO, domain 1
    mem[ttb + (0xBF0 << 2)] = 0x8000 | 1 | (2 << 5)               # page table, domain 2
    mem[0x8000 + (3 << 2)] = 0x12345000 | (0b01 << 4) | 2 | 1      # small page, XN
    r = lambda a: mem.get(a, 0)                                    # noqa: E731
    dacr = 1 | 1 << 2 | 1 << 4                                     # domains 0-2: client
    w = cpu.walk(r, ttb, 0, 0, dacr, 0xC0012345)
    assert (w.pa, w.fs) == (0xC0012345, 0)
    assert cpu.walk(r, ttb, 0, 0, dacr, 0xC0112345, write=True).fs == 0xD
    assert cpu.walk(r, ttb, 0, 0, dacr, 0xC0112345).pa == 0xC0112345
    assert cpu.walk(r, ttb, 0, 0, dacr, 0xBF003ABC).pa == 0x12345ABC
    assert cpu.walk(r, ttb, 0, 0, dacr, 0xBF003ABC, execute=True).fs == 0xF
    assert cpu.walk(r, ttb, 0, 0, dacr, 0xBF004000).fs == 0x7
    assert cpu.walk(r, ttb, 0, 0, dacr, 0x00000008).fs == 0x5
    assert cpu.walk(r, ttb, 0, 0, 1 | 1 << 2, 0xBF003ABC).fs == 0xB          # domain 2: no access
    assert cpu.walk(r, ttb, 0, 0, 1, 0xC0012345, user=True).fs == 0xD        # AP=01: no user access
    f = cpu.fsr(cpu.walk(r, ttb, 0, 0, dacr, 0xBF004000), True)
    assert f == 0x7 | 2 << 4 | 0x800
