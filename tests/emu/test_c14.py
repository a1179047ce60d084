"""The generic timer's native read hook (emu/hw/_c14.c) against timer.emulate, the Python
model it replaces: every read register, ISTATUS on both sides of CVAL, a failed condition, a
site whose word changed (init text reused) and the idle time in the counter."""
import ctypes
import struct

import pytest
from unicorn import UC_ARCH_ARM, UC_MODE_ARM, UC_PROT_ALL, Uc
from unicorn import arm_const as A

from armload.emu.hw import c14, tick, timer as tmod

BASE = 0xC0000000
PROG = [0xEC510F1E,            # mrrc p15, 1, r0, r1, c14      CNTVCT
        0xEE1E2F33,            # mrc p15, 0, r2, c14, c3, 1    CNTV_CTL
        0xEE1E3F13,            # mrc p15, 0, r3, c14, c3, 0    CNTV_TVAL
        0xEE1E4F10,            # mrc p15, 0, r4, c14, c0, 0    CNTFRQ
        0x1C565F1E,            # mrrcne p15, 1, r5, r6, c14    (Z set: not executed)
        0xEC587F3E,            # mrrc p15, 3, r7, r8, c14      CNTV_CVAL
        0xEE1E9F32,            # mrc p15, 0, r9, c14, c2, 1    CNTP_CTL
        0xEE1EAF11,            # mrc p15, 0, r10, c14, c1, 0   CNTKCTL
        0xE1A00000]            # nop (the end)
REGS = [getattr(A, f"UC_ARM_REG_R{i}") for i in range(11)]


class FakeUc:
    def __init__(self):
        self.regs = {}

    def reg_write(self, r, v):
        self.regs[r] = v & 0xFFFFFFFF

    def reg_read(self, r):
        return self.regs.get(r, 0)


def run(timer, insns, idle_ns, patch=None):
    buf = (ctypes.c_char * 0x1000)()
    code = list(PROG)
    struct.pack_into(f"<{len(code)}I", buf, 0, *code)
    uc = Uc(UC_ARCH_ARM, UC_MODE_ARM)
    uc.ctl_set_cpu_model(A.UC_CPU_ARM_CORTEX_A15)      # the booted machine's CPU (it has the timer)
    uc.mem_map_ptr(BASE, 0x1000, UC_PROT_ALL, ctypes.addressof(buf))
    t = tick.Tick()
    t.insns = insns
    sites = [(BASE + 4 * i, tmod.decode(w)) for i, w in enumerate(code) if tmod.decode(w)]
    state, rest = c14.install(uc, t, ctypes.addressof(buf), 0x1000, sites, lambda a: code[(a - BASE) // 4],
                               lambda a: False)          # code hooks (the dispatch table: test_block_dispatch)
    state.mirror(timer, idle_ns)
    if patch is not None:                               # the text changed after the scan
        struct.pack_into("<I", buf, 4 * patch, 0xE1A00000)
    for r in REGS:
        uc.reg_write(r, 0xDEAD0000 + r)
    uc.reg_write(A.UC_ARM_REG_CPSR, 0x400001D3)        # SVC, Z set
    uc.emu_start(BASE, BASE + 4 * (len(code) - 1))
    return {r: uc.reg_read(r) for r in REGS}, state, rest, sites


def expected(timer, now, sites, skip=()):
    f = FakeUc()
    for r in REGS:
        f.regs[r] = 0xDEAD0000 + r
    for i, (a, s) in enumerate(sites):
        if s[4] == 0xE and (a - BASE) // 4 not in skip:
            tmod.emulate(timer, f, s, now)
    return {r: f.regs[r] for r in REGS}


@pytest.mark.parametrize("delta", [-1, 0, 1])
def test_reads_equal_the_python_model_around_cval(delta):
    insns, idle = 16_000_000_123, 7_000_016
    now = insns + idle
    timer = tmod.ArchTimer()
    timer.ctl = [1, 1]
    timer.kctl = 0x2A5
    timer.cval = [tmod.ArchTimer.counter(now) + 5, tmod.ArchTimer.counter(now) + delta]
    got, state, rest, sites = run(timer, insns, idle)
    assert rest == [] and state.nsites == 8 and state.hits == 7
    assert got == expected(timer, now, sites)
    assert got[A.UC_ARM_REG_R2] == (4 if delta <= 0 else 0) | 1       # ISTATUS once counter >= CVAL
    assert got[A.UC_ARM_REG_R5] == 0xDEAD0000 + A.UC_ARM_REG_R5       # the failed condition wrote nothing


def test_changed_text_is_not_emulated():
    timer = tmod.ArchTimer()
    got, state, _, sites = run(timer, 1600, 0, patch=0)
    assert state.hits == 6
    assert got[A.UC_ARM_REG_R0] == 0xDEAD0000 + A.UC_ARM_REG_R0
    assert got == expected(timer, 1600, sites, skip={0})


def test_writes_are_left_to_python():
    w = 0xEE0E0F33                                      # mcr p15, 0, r0, c14, c3, 1  CNTV_CTL write
    s = tmod.decode(w)
    uc = Uc(UC_ARCH_ARM, UC_MODE_ARM)
    _, rest = c14.install(uc, tick.Tick(), 0, 0, [(BASE, s)], lambda a: w, lambda a: False)
    assert rest == [(BASE, s)]
