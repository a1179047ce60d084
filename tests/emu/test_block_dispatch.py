"""Hooks that cost nothing in Unicorn's code-hook list (every hooked instruction walks that list):
the tick hook's dispatch table runs C hooks at block starts (hw/tick.py, _tick.c), the sanitizers
put there the entry points no instruction falls through into (hw/blocks.starts_block), and
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
    img = _image([before, MOV_R0_1])
    assert starts_block(img, 0xC0008004) is ok
    assert not starts_block(img, 0xC0008000)                  # nothing before it to read
    assert not starts_block(img, 0xC0008008) and not starts_block(img, 0xC0008006)   # past the text; unaligned


_IMAGES = [0]


def _image(words):
    """A fake Image of `words` at 0xC0008000, all of it .text (a path of its own: blocks.literals
    caches per image)."""
    base, data = 0xC0008000, b"".join(w.to_bytes(4, "little") for w in words)
    _IMAGES[0] += 1
    return SimpleNamespace(base=base, end=base + len(data), data=data, path=f"fake-{_IMAGES[0]}",
                           stext=base, etext=base + len(data), bss_end=base + len(data),
                           symbols={"_stext": base, "_etext": base + len(data)},
                           word=lambda a: int.from_bytes(data[a - base:a - base + 4], "little"))


LDR_R0_LIT = 0xE59F0000          # ldr r0, [pc, #0]: loads the word 8 bytes on
ISB = 0xF57FF06F


@pytest.mark.parametrize("words,at,ok", [
    ([MOV_R0_1, ISB, MOV_R0_1], 8, True),                                  # an ISB ends its block
    ([MOV_R0_1, 0xF57FF04F, MOV_R0_1], 8, False),                          # a DSB does not
    ([MOV_R0_1, 0xE7F001F2, MOV_R0_1], 8, True),                           # BUG()/WARN()'s UDF traps
    ([MOV_R0_1, 0xEF000000, MOV_R0_1], 8, True),                           # svc 0
    ([MOV_R0_1, 0x0F000000, MOV_R0_1], 8, False),                          # svceq: may not trap
    ([LDR_R0_LIT, 0xEAFFFFFE, 0xC0FFEE00, MOV_R0_1], 12, True),            # behind a literal
    ([0xE59F0004, 0xEAFFFFFE, 0xC0FFEE00, MOV_R0_1], 12, False),           # that word is no one's literal
    ([0xE51F0010, 0xEAFFFFFE, 0xC0FFEE00, MOV_R0_1], 12, False),           # ldr r0, [pc, #-16]: not it either
    ([0xEAFFFFFE, 0, 0, MOV_R0_1], 12, True),                              # .align's zeros behind a b
    ([0xEAFFFFFE, NOP, 0xE1A00000, MOV_R0_1], 12, True),                   # nops behind a b
    ([MOV_R0_1, 0, 0, MOV_R0_1], 12, False),                               # zeros behind a mov: run into
    ([0] * 18 + [MOV_R0_1], 72, False),                                    # padding with nothing before it
])
def test_isb_literals_and_padding_end_the_flow_before_an_entry(words, at, ok):
    """ISB (QEMU's trans_ISB ends the block), a word a pc-relative LDR loads (data: never run) and
    alignment padding behind one of them: no instruction falls through into what follows."""
    assert starts_block(_image(words), 0xC0008000 + at) is ok


def test_a_word_the_kernel_rewrites_into_a_nop_ends_nothing():
    """ftrace turns `bl __gnu_mcount_nc` into a NOP at boot: what follows it is run into."""
    img = _image([0xE52DE004, 0xEBFFFFFE, MOV_R0_1, MOV_R0_1])          # push {lr}; bl 4 (itself); mov
    assert starts_block(img, 0xC0008008)
    img = _image([0xE52DE004, 0xEBFFFFFE, MOV_R0_1, MOV_R0_1])
    img.symbols["__gnu_mcount_nc"] = 0xC0008004                         # the bl's target is mcount
    assert not starts_block(img, 0xC0008008)


def test_a_literal_loaded_backwards_counts_too():
    # 0: b .  4: literal  8: mov (the entry)  c: ldr r0, [pc, #-16] (loads 0x4)
    assert starts_block(_image([0xEAFFFFFE, 0xC0FFEE00, MOV_R0_1, 0xE51F0010]), 0xC0008008)


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
    t = san.bk.m.t                                    # its rows are the table's, beside the other owners'
    assert t._rows[e] == e._disp and t.ndisp == sum(len(r) for r in t._rows.values())
    memset = san.sym["memset"]                     # behind .align 5's zeros after a b: no fall-through
    assert memset in [r[0] for r in e._disp] and memset not in e.code
    assert all((a in e.code) != starts_block(san.bk.image, a) for a in e._last)    # the others: code hooks


def test_python_hooks_run_from_the_dispatch_table_like_code_hooks():
    """PyBlockHooks (BootedKernel.hook_code's where an address starts every block): fn(uc, addr, 4,
    None) before the instruction, in the order added; an exception stops emulation and emu_start
    raises it; a removed hook is not called again."""
    uc, t = _machine([MOV_R0_1, B_NEXT, MOV_R1_5, MOV_R2_6, NOP])
    hooks = tick.PyBlockHooks(t, uc)
    seen = []
    h1 = hooks.add(BASE + 8, lambda u, a, s, d: seen.append((1, a, s, d, u is uc, u.reg_read(A.UC_ARM_REG_R1))))
    hooks.add(BASE + 8, lambda u, a, s, d: seen.append((2, a)))
    uc.emu_start(BASE, BASE + 0x10)
    assert seen == [(1, BASE + 8, 4, None, True, 0), (2, BASE + 8)]
    hooks.remove(h1)
    seen.clear()
    uc.emu_start(BASE, BASE + 0x10)
    assert seen == [(2, BASE + 8)]

    def boom(u, a, s, d):
        raise ValueError("from a block hook")
    hooks.add(BASE + 8, boom)
    uc.reg_write(A.UC_ARM_REG_R1, 0)
    uc.reg_write(A.UC_ARM_REG_R2, 0)
    with pytest.raises(ValueError, match="from a block hook"):
        uc.emu_start(BASE, BASE + 0x10)
    assert uc.reg_read(A.UC_ARM_REG_PC) == BASE + 8          # stopped before the instruction ran
    assert uc.reg_read(A.UC_ARM_REG_R1) == 0 and uc.reg_read(A.UC_ARM_REG_R2) == 0


def test_a_booted_kernels_hook_is_the_block_hooks_where_it_can_be(booted):
    """hook_code at an entry no instruction falls through into runs from the dispatch table (no
    Unicorn code hook); at an address inside a block it is a code hook; unhook removes either."""
    from armload.emu.hw.tick import BlockHook
    k = booted
    entry = k.addr("jiffies_to_msecs")
    assert starts_block(k.image, entry) and not starts_block(k.image, entry + 4)
    hits = []
    h = k.hook_code(entry, lambda u, a, s, d: hits.append(a))
    mid = k.hook_code(entry + 4, lambda u, a, s, d: hits.append(a))
    assert isinstance(h, BlockHook) and isinstance(mid, int)
    assert k.call("jiffies_to_msecs", 250) == 250 * 1000 // k.image.hz and hits == [entry, entry + 4]
    k.unhook(h)
    k.unhook(mid)
    assert k.call("jiffies_to_msecs", 250) == 250 * 1000 // k.image.hz and hits == [entry, entry + 4]
