"""armload's kprobes decoder against the kernel's own tables (tests/oracles/kprobes_decode.py, a
literal port of arch/arm/probes/decode.c, decode-arm.c, kprobes/checkers-{arm,common,thumb}.c and
arch_prepare_kprobe's stack-space test). The booted kernel's own register_kprobe judges the same
words in tests/probes/test_kprobes_kernel_agree.py."""
import os
import struct

import pytest
from keystone import KS_ARCH_ARM, KS_MODE_ARM, KS_MODE_THUMB, Ks
from oracles import kprobes_decode as K

from armload.probes import insn as I
from armload.kernel import debian

ACCEPT = (I.OUT_OF_LINE, I.SIMULATE, I.EMULATE)


def _arm(src: str) -> int:
    enc, _ = Ks(KS_ARCH_ARM, KS_MODE_ARM).asm(src, 0)
    return struct.unpack("<I", bytes(enc))[0]


def _t32(src: str) -> int:
    enc, _ = Ks(KS_ARCH_ARM, KS_MODE_THUMB).asm(src, 0)
    h1, h2 = struct.unpack("<HH", bytes(enc))
    return (h1 << 16) | h2


# the disagreements, each with the kernel's verdict (0 or -EINVAL)
NAMED = [("str r0, [r1, sp]", -22), ("strh r0, [r1, sp]", -22), ("str r0, [sp], #-128", 0),
         ("str r0, [sp, #-64]", 0), ("str r0, [sp, #-68]", -22), ("strd r0, r1, [sp, #-72]", -22),
         ("strd r0, r1, [sp], #-72", 0), ("stmdb sp!, {r0-r12, lr}", 0), ("stmda sp, {r0-r12, lr, pc}", 0),
         ("stmdb sp, {r0-r12, lr, pc}", 0), ("str r0, [sp, r1]", -22), ("ldr r0, [sp, r1]", 0),
         ("add r0, pc, r1", 0), ("mov r2, pc", 0), ("ldr r3, [pc, r1]", 0), ("str pc, [sp, #-8]", 0),
         ("add pc, pc, r2, lsl #2", 0), ("ldr pc, [pc, r0, lsl #2]", 0), ("stmdb sp!, {r0, pc}", 0),
         ("ssat r0, #8, r13", 0), ("uxtab r0, sp, r1", 0), ("ldr r0, [pc, #-4]", 0),
         ("mrc p15, 0, r0, c13, c0, 3", -22), ("ldr r0, [pc, #-4]!", -22), ("svc #0", -22)]


def _verdict(op: int) -> int:
    d = I.decode_arm(op)
    return 0 if d.outcome in ACCEPT else -22


@pytest.mark.parametrize("src,want", NAMED)
def test_named_encodings_agree_with_the_kernel(src, want):
    op = _arm(src)
    assert K.prepare_arm(op) == want, "the oracle itself disagrees with the issue's reading of the kernel"
    assert _verdict(op) == want, f"{src} ({op:08x}): {I.decode_arm(op)}"


def _sample(n_random=600, seed=24):
    """The named encodings (assembled here), then armload.agree.kprobes' words: every word of the
    sample modules' ARM text, and seeded random words (two thirds with cond = AL: the forms
    compilers emit) with sp and pc forced into fields -- the sample the booted kernel also judges."""
    from armload.agree import kprobes as G
    kdir = debian.MODULES
    for rel in G.SAMPLE_MODULES:
        assert os.path.exists(os.path.join(kdir, rel)), f"{rel} missing (the Debian module tree)"
    return [_arm(s) for s, _ in NAMED] + G.arm_sample(kdir, n_random, seed)[len(G.NAMED):]


def test_arm_decoder_agrees_with_the_kernel_tables_on_a_sample():
    ops = _sample()
    assert len(ops) >= 1400
    bad = [(f"{op:08x}", K.arm(op), I.decode_arm(op)) for op in ops if K.prepare_arm(op) != _verdict(op)]
    accepted = sum(K.prepare_arm(op) == 0 for op in ops)
    assert 0.3 < accepted / len(ops) < 0.9             # both verdicts are well represented
    assert not bad, f"{len(bad)} of {len(ops)} disagree: {bad[:5]}"
    # what the kernel simulates (INSN_GOOD_NO_SLOT: branches, mrs, hints, mov ip, sp) armload
    # simulates too (it also simulates ldr literal and adr, which the kernel emulates in a slot)
    for op in ops:
        k, _ = K.arm(op)
        d = I.decode_arm(op)
        if k == K.INSN_GOOD_NO_SLOT and (op & 0x0E000000) != 0x08000000:
            assert d.outcome == I.SIMULATE, f"{op:08x}: {d}"


def test_oracle_catches_a_dropped_post_index_check(monkeypatch):
    """The comparison has teeth: armload's stack checker made to ignore P (the old bug) disagrees."""
    op = _arm("str r0, [sp], #-128")
    real = I._stack_space

    def buggy(o):
        if (o & 0x0E000000) == 0x04000000 and (o >> 16) & 0xF == 13 and not o & (1 << 23) and not o & (1 << 20):
            return o & 0xFFF
        return real(o)
    monkeypatch.setattr(I, "_stack_space", buggy)
    assert K.prepare_arm(op) == 0 and _verdict(op) == -22


def _t32_stores():
    """T32 load/store encodings by their fields (ARM ARM A8.8): STR{,B,H} imm8 (every P/U/W the
    architecture allows), imm12, register offset; STRD; STMDB/STMIA; a few loads; sp or r1 as base."""
    out = []
    for rn in (13, 1):
        for size in (0, 1, 2):                              # STRB, STRH, STR
            for imm in (4, 64, 65, 72, 255):
                for p, u, w in ((1, 0, 0), (1, 0, 1), (0, 0, 1), (1, 1, 1), (0, 1, 1)):
                    out.append(0xF8000800 | size << 21 | rn << 16 | 0 << 12 | p << 10 | u << 9 | w << 8 | imm)
            out.append(0xF8800000 | size << 21 | rn << 16 | 4000)
            for rm in (2, 3):                                 # Rm = sp: decode-thumb.c NOSPPC rejects first
                out.append(0xF8000000 | size << 21 | rn << 16 | 1 << 4 | rm)
                out.append(0xF8000000 | size << 21 | 2 << 16 | rm)
                out.append(0xF8100000 | size << 21 | rn << 16 | rm)          # loads: never counted
        for imm in (1, 16, 17, 50):
            for p, u, w in ((1, 0, 0), (1, 0, 1), (0, 0, 1), (1, 1, 0)):
                out.append(0xE8400000 | p << 24 | u << 23 | w << 21 | rn << 16 | 0 << 12 | 1 << 8 | imm)
                out.append(0xE8500000 | p << 24 | u << 23 | w << 21 | rn << 16 | 0 << 12 | 1 << 8 | imm)
        for regs in (0x4FF0, 0x5FFF, 0x000F):
            out.append(0xE9200000 | rn << 16 | regs)               # stmdb rn!, {...}
            out.append(0xE8A00000 | rn << 16 | regs)               # stmia rn!, {...}
    return out


def test_thumb_stack_checker_agrees_with_checkers_thumb():
    from capstone import CS_ARCH_ARM, CS_MODE_THUMB, Cs
    cs = Cs(CS_ARCH_ARM, CS_MODE_THUMB)
    ops = _t32_stores()
    assert len(ops) >= 200
    agree = refused = 0
    for op in ops:
        raw = struct.pack("<HH", op >> 16, op & 0xFFFF)
        assert list(cs.disasm(raw, 0)), f"{op:08x} is not an instruction"
        want = K.thumb_stack_refused(K.t32_stack(op))
        d = I.decode_thumb(op, 4)
        got = d.outcome == I.REJECT and "stack" in d.what
        assert got == want, f"{op:08x} ({list(cs.disasm(raw, 0))[0].op_str}): {d}"
        agree += 1
        refused += want
    assert 20 < refused < len(ops) - 20                      # both verdicts well represented


def test_thumb_push_never_exceeds_the_limit():
    for regs in range(0x200):
        op = 0xB400 | regs
        assert not K.thumb_stack_refused(K.t16_stack(op))
        assert I.decode_thumb(op, 2).outcome != I.REJECT


def test_thumb_decoder_follows_the_kernel_tables():
    from armload.probes.insn import OUT_OF_LINE, REJECT, SIMULATE, UNSUPPORTED, decode_thumb
    cases = {  # opcode (first halfword high), size -> outcome (arch/arm/probes/decode-thumb.c)
        (0xF3BF8F5B, 4): REJECT,          # dmb ish: barriers are not probed
        (0xF3AF8000, 4): SIMULATE,        # nop.w
        (0xF3AF8005, 4): REJECT,          # unallocated hint
        (0xE8BD8010, 4): OUT_OF_LINE,     # pop.w {r4, pc}
        (0xE8BDC000, 4): REJECT,          # ldm with lr and pc
        (0xE92D2010, 4): REJECT,          # stm with sp in the list
        (0xE8524F00, 4): REJECT,          # ldrex
        (0xE8D1F002, 4): UNSUPPORTED,     # tbb: simulated by the kernel, not by armload
        (0xEE1D0F70, 4): REJECT,          # mrc p15 (current)
        (0xF8DF0008, 4): SIMULATE,        # ldr.w r0, [pc, #8]
        (0xF8CDF000, 4): REJECT,          # str.w pc, [sp]
        (0xEA4F0D01, 4): REJECT,          # mov.w sp, r1 (NOSPPC)
        (0xEB0D0D01, 4): OUT_OF_LINE,     # add.w sp, sp, r1
        (0xBE00, 2): REJECT, (0xDF00, 2): REJECT, (0xDE18, 2): REJECT, (0xB672, 2): REJECT,   # bkpt, svc, udf, cpsid
        (0xBA80, 2): REJECT, (0xBF50, 2): REJECT, (0xBF20, 2): SIMULATE, (0x47F8, 2): REJECT,
        (0x44FF, 2): REJECT, (0xB510, 2): OUT_OF_LINE, (0x4478, 2): UNSUPPORTED,     # add r0, pc
    }
    for (op, size), want in cases.items():
        assert decode_thumb(op, size).outcome == want, (hex(op), decode_thumb(op, size))

