"""Hooks that cost nothing in Unicorn's code-hook list (every hooked instruction walks that list):
the tick hook's dispatch table runs C hooks at block starts (hw/tick.py, _tick.c), the sanitizers
put there the entry points no instruction falls through into (sanitize/native.starts_block), and
a WFI needs no hook (Machine.run idles where Unicorn's halt ends emu_start)."""
import ctypes
from types import SimpleNamespace

import pytest
from unicorn import UC_ARCH_ARM, UC_MODE_ARM, Uc
from unicorn import arm_const as A

from armload.emu.hw import tick
from armload.emu.sanitize.native import starts_block

BASE = 0x10000
MOV_R0_1, B_NEXT, MOV_R1_5, MOV_R2_6, NOP = 0xE3A00001, 0xEAFFFFFF, 0xE3A01005, 0xE3A02006, 0xE320F000
HOOK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_void_p)


def _machine(words):
    uc = Uc(UC_ARCH_ARM, UC_MODE_ARM)
    uc.mem_map(BASE, 0x1000)
    uc.mem_write(BASE, b"".join(w.to_bytes(4, "little") for w in words))
    return uc, tick.install(uc)


def test_the_dispatch_table_runs_at_block_starts_only_in_order_and_per_owner():
    # 0: mov r0,#1 ; 4: b 8 ; 8: mov r1,#5 (a block starts here) ; c: mov r2,#6 ; 10: nop
    uc, t = _machine([MOV_R0_1, B_NEXT, MOV_R1_5, MOV_R2_6, NOP])
    seen = []
    hooks = [HOOK(lambda u, a, s, user, i=i: seen.append((i, a))) for i in range(3)]
    fn = [ctypes.cast(h, ctypes.c_void_p).value for h in hooks]
    t.dispatch("a", [(BASE + 8, fn[0], None), (BASE + 0xC, fn[1], None)])       # 0xc starts no block
    t.dispatch("b", [(BASE + 8, fn[2], None)])
    uc.emu_start(BASE, BASE + 0x10)
    assert seen == [(0, BASE + 8), (2, BASE + 8)]
    assert uc.reg_read(A.UC_ARM_REG_R2) == 6 and t.insns == 4
    t.dispatch("a", [])                                                          # the owner's rows go
    seen.clear()
    uc.emu_start(BASE, BASE + 0x10)
    assert seen == [(2, BASE + 8)]
    t.dispatch("b", [])
    seen.clear()
    uc.emu_start(BASE, BASE + 0x10)
    assert seen == [] and t.ndisp == 0


def test_a_dispatched_hook_may_move_pc_as_a_code_hook_does():
    uc, t = _machine([MOV_R0_1, B_NEXT, MOV_R1_5, MOV_R2_6, NOP])

    def skip(u, a, s, user):
        uc.reg_write(A.UC_ARM_REG_PC, BASE + 0xC)
    h = HOOK(skip)
    t.dispatch("a", [(BASE + 8, ctypes.cast(h, ctypes.c_void_p).value, None)])
    uc.emu_start(BASE, BASE + 0x10)
    assert uc.reg_read(A.UC_ARM_REG_R1) == 0 and uc.reg_read(A.UC_ARM_REG_R2) == 6


@pytest.mark.parametrize("before,ok", [
    (0xEAFFFFFE, True),      # b
    (0xEBFFFFFE, True),      # bl (the call returns to a new block)
    (0xFAFFFFFE, True),      # blx imm
    (0xE12FFF1E, True),      # bx lr
    (0xE12FFF33, True),      # blx r3
    (0xE8BD8010, True),      # pop {r4, pc}
    (0xE49DF004, True),      # ldr pc, [sp], #4
    (0xE1A0F00E, True),      # mov pc, lr
    (0x1AFFFFFE, False),     # bne: may fall through
    (0x012FFF1E, False),     # bxeq lr
    (0xE8BD4010, False),     # pop {r4, lr}: no pc
    (0xE59F0004, False),     # ldr r0, [pc, #4]
    (0xE3A00001, False),     # mov r0, #1
    (0xE320F000, False),     # nop (alignment padding)
])
def test_an_entry_starts_a_block_only_behind_an_unconditional_transfer(before, ok):
    data = before.to_bytes(4, "little") + MOV_R0_1.to_bytes(4, "little")
    img = SimpleNamespace(base=0xC0008000, end=0xC0008008, symbols={"_etext": 0xC0008008},
                          word=lambda a: int.from_bytes(data[a - 0xC0008000:a - 0xC0008000 + 4], "little"))
    assert starts_block(img, 0xC0008004) is ok
    assert not starts_block(img, 0xC0008000)                  # nothing before it to read
    assert not starts_block(img, 0xC0008008) and not starts_block(img, 0xC0008006)   # past the text; unaligned


def test_entries_at_one_address_share_one_hook(booted_dir):
    """vmalloc is an allocator and a sleeper: two entries, one hook (the chain), and it is the tick
    hook's (its entry starts a block), not a Unicorn code hook."""
    from armload.emu.booted.modrun import BootedRun
    from armload.emu.sanitize import CLASSES, Sanitizer
    from armload.emu.sanitize import native as N
    from armload.kernel.config import DEBIAN_ARMMP
    from armload.kernel.provider import Kernel
    from testinputs import BOOT_VMLINUZ
    from test_sanitize import FULL_SYMVERS
    run = BootedRun(BOOT_VMLINUZ, Kernel.from_files([FULL_SYMVERS, BOOT_VMLINUZ], DEBIAN_ARMMP), DEBIAN_ARMMP)
    san = Sanitizer(run, CLASSES)
    e = san.entries
    addr = san.sym["vmalloc"]
    e.promote({N.F_ALWAYS, N.F_LR, N.F_PTR, N.F_LR_OR_FREED, N.F_LR_OR_HELD, N.F_LR_OR_HELD_ANY})
    rows = [row for row in e._disp if row[0] == addr]
    assert len(rows) == 1 and addr not in e.code
    chain, p = [], ctypes.cast(rows[0][2], ctypes.POINTER(N.Entry))
    while p:
        chain.append(p.contents.id)
        p = p.contents.next
    assert len(chain) == 2 and chain[-1] == e._last[addr].id
    assert san.bk.m.t.ndisp == len(e._disp)
    memset = san.sym["memset"]                                  # __memset64 falls through into it
    assert memset in e.code and memset not in [r[0] for r in e._disp]
