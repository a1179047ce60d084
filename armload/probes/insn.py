"""Instruction facts the probes need: the kernel's patch encodings and the kprobes decoder.

Encodings (arch/arm): the ftrace NOP that replaces `bl __gnu_mcount_nc` (`add sp, sp, #4` in
ARM, `add.w sp, sp, #4` = 0xf10d0d04 in Thumb-2: it drops the lr pushed before the call), `bl` as arm_gen_branch_link builds it (ARM: +-32 MiB,
Thumb-2: +-16 MiB), and the kprobe breakpoints (KPROBE_ARM_BREAKPOINT_INSTRUCTION 0x07f001f8
with the probed instruction's condition, KPROBE_THUMB16_BREAKPOINT_INSTRUCTION 0xde18,
KPROBE_THUMB32_BREAKPOINT_INSTRUCTION 0xf7f0a018).

`decode_arm` follows arch/arm/probes/decode-arm.c (probes_decode_arm_table with its REGS()
register checks) and the stack checker (arch/arm/probes/kprobes/checkers-arm.c, run for
PROBES_STORE/_STORE_EXTRA/_LDRSTRD/_LDMSTM only: a store with sp as base or register offset is
unknown stack use, a pre-indexed negative store or STMDx below sp by more than MAX_STACK_SIZE is
refused, post-indexed stores are not stack use): REJECT is the kernel's INSN_REJECTED (-EINVAL).
An ARM instruction reading pc is EMULATE: the kernel's decode_regs rewrites its register nibbles
and emulate_* runs it with pc + 8 in the stand-in; armload does the same (kprobe.py). LDM/STM
naming pc are simulated (simulate_ldm1stm1 / simulate_stm1_pc). tests/probes/test_kprobe_decode.py holds
armload to a literal port of the kernel's tables (tests/oracles/kprobes_decode.py).
`decode_thumb` covers the Thumb-2 tables' branches, literal loads, system, coprocessor and
exclusive instructions, and checkers-thumb.c's stack checker; other Thumb forms run out of line.
Thumb forms the kernel emulates or simulates and armload does not (IT blocks, hi-register
operations reading pc, tbb/tbh, literal loads other than ldr, ldrd literal) are UNSUPPORTED
(-EOPNOTSUPP, armload's own refusal).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

ARM_FTRACE_NOP = 0xE28DD004           # add sp, sp, #4 (arch/arm/kernel/ftrace.c NOP, since v5.17)
THUMB_FTRACE_NOP = 0xF10D0D04         # add.w sp, sp, #4 (opcode order: first halfword high)
KPROBE_ARM_BREAKPOINT_INSTRUCTION = 0x07F001F8
KPROBE_THUMB16_BREAKPOINT_INSTRUCTION = 0xDE18
KPROBE_THUMB32_BREAKPOINT_INSTRUCTION = 0xF7F0A018
MAX_STACK_SIZE = 64                   # arch/arm/probes/kprobes/core.c

# decode outcomes
OUT_OF_LINE = "out-of-line"           # INSN_GOOD: copied into an instruction slot
SIMULATE = "simulate"                 # INSN_GOOD_NO_SLOT: its effect is computed by the handler
REJECT = "reject"                     # INSN_REJECTED: register_kprobe returns -EINVAL
EMULATE = "emulate"                   # INSN_GOOD with decode_regs' register rewriting (reads pc)
UNSUPPORTED = "unsupported"           # the kernel would emulate it; armload's decoder does not
# register_kprobe's return for an outcome: -EINVAL for INSN_REJECTED (the decode tables, the stack
# checker), armload's own -EOPNOTSUPP for UNSUPPORTED; 0 otherwise (the probe is prepared)
DECODE_ERRNO = {REJECT: -22, UNSUPPORTED: -95}


@dataclass
class Decoded:
    outcome: str
    what: str                         # instruction class, for messages
    sim: str | None = None            # simulation kind for SIMULATE
    size: int = 4
    pc_fields: tuple = ()             # EMULATE: (shifts of the fields reading pc, bit 12 writes pc)


def decode_errno(d: Decoded) -> int:
    return DECODE_ERRNO.get(d.outcome, 0)


def arm_word(data: bytes) -> int:
    return struct.unpack("<I", data[:4])[0]


def thumb_opcode(data: bytes) -> tuple[int, int]:
    """(opcode, size): a 32-bit Thumb opcode has its first halfword in the high half."""
    h1 = struct.unpack("<H", data[:2])[0]
    if (h1 >> 11) in (0x1D, 0x1E, 0x1F):
        h2 = struct.unpack("<H", data[2:4])[0]
        return (h1 << 16) | h2, 4
    return h1, 2


def thumb_bytes(op: int, size: int) -> bytes:
    if size == 2:
        return struct.pack("<H", op & 0xFFFF)
    return struct.pack("<HH", op >> 16, op & 0xFFFF)


def arm_bl(pc: int, target: int) -> int | None:
    """`bl target` at pc, or None out of range (ftrace_call_replace's check)."""
    off = target - (pc + 8)
    if off < -33554432 or off > 33554428 or off & 3:
        return None
    return 0xEB000000 | ((off >> 2) & 0x00FFFFFF)


def thumb_bl(pc: int, target: int) -> int | None:
    """Thumb-2 `bl target` (target a Thumb address, bit 0 ignored) as a 32-bit opcode."""
    off = (target & ~1) - (pc + 4)
    if off < -16777216 or off > 16777214:
        return None
    s = (off >> 24) & 1
    i1, i2 = (off >> 23) & 1, (off >> 22) & 1
    j1, j2 = (~i1 ^ s) & 1, (~i2 ^ s) & 1
    imm10, imm11 = (off >> 12) & 0x3FF, (off >> 1) & 0x7FF
    return ((0xF000 | (s << 10) | imm10) << 16) | (0xD000 | (j1 << 13) | (j2 << 11) | imm11)


def branch_target(op: int, pc: int, thumb: bool) -> int | None:
    """Where a B/BL/BLX(imm) at pc goes (bit 0 = Thumb), None if `op` is no such branch."""
    if not thumb:
        if op >> 28 == 0xF:
            if (op >> 25) & 7 == 5:                    # BLX imm
                disp = _sext((op & 0xFFFFFF) << 2, 26) + ((op >> 23) & 2)
                return (pc + 8 + disp) | 1
            return None
        if (op >> 25) & 7 == 5:
            return pc + 8 + _sext((op & 0xFFFFFF) << 2, 26)
        return None
    h1, h2 = op >> 16, op & 0xFFFF
    if (h1 >> 11) != 0x1E or not (h2 & 0x8000):
        return None
    s = (h1 >> 10) & 1
    j1, j2 = (h2 >> 13) & 1, (h2 >> 11) & 1
    i1, i2 = (~(j1 ^ s)) & 1, (~(j2 ^ s)) & 1
    if h2 & 0x1000 or (h2 & 0x5000) == 0x4000:       # BL / BLX / B.W (T4)
        off = _sext((s << 24) | (i1 << 23) | (i2 << 22) | ((h1 & 0x3FF) << 12) | ((h2 & 0x7FF) << 1), 25)
        if (h2 & 0x5000) == 0x4000:                  # BLX: to ARM, Align(pc, 4)
            return ((pc + 4) & ~3) + off
        return (pc + 4 + off) | 1
    if (h1 & 0x380) != 0x380:                        # B<c>.W (T3)
        off = _sext((s << 20) | (j2 << 19) | (j1 << 18) | ((h1 & 0x3F) << 12) | ((h2 & 0x7FF) << 1), 21)
        return (pc + 4 + off) | 1
    return None


def _sext(v: int, bits: int) -> int:
    return v - (1 << bits) if v & (1 << (bits - 1)) else v


def arm_kprobe_breakpoint(opcode: int) -> int:
    """arch_arm_kprobe: the breakpoint keeps the probed instruction's condition."""
    if opcode >= 0xE0000000:
        return KPROBE_ARM_BREAKPOINT_INSTRUCTION | 0xE0000000
    return KPROBE_ARM_BREAKPOINT_INSTRUCTION | (opcode & 0xF0000000)


# --- the ARM decoder ------------------------------------------------------------------------
# register-check kinds for the fields at bits 16, 12, 8, 4, 0 (decode.h REG_TYPE_*)
_ = None
ANY, NOPC, NOPCWB = "any", "nopc", "nopcwb"
E, S, R, T, L = "emulate", "simulate", "reject", "table", "ldmstm"


def _regs(r16=_, r12=_, r8=_, r4=_, r0=_):
    return (r16, r12, r8, r4, r0)


# (mask, value, kind, payload, regs); a sub-table ends with no match = rejected
_ARM_1111 = [
    (0xFE300000, 0xF4100000, S, "preload", _regs()),
    (0xFE300010, 0xF6100000, S, "preload", _regs()),
    (0xFE000000, 0xFA000000, S, "blx-imm", _regs()),
]
_ARM_MISC = [
    (0x0FF000F0, 0x01000000, S, "mrs", _regs(_, NOPC)),
    (0x0FF000F0, 0x01200010, S, "bx", _regs()),
    (0x0FF000F0, 0x01200030, S, "blx-reg", _regs(_, _, _, _, NOPC)),
    (0x0FF000F0, 0x01600010, E, "clz", _regs(_, NOPC, _, _, NOPC)),
    (0x0F9000F0, 0x01000050, E, "saturating arithmetic", _regs(NOPC, NOPC, _, _, NOPC)),
]
_ARM_HALFMUL = [
    (0x0FF00090, 0x01400080, E, "multiply", _regs(NOPC, NOPC, NOPC, _, NOPC)),
    (0x0FF000B0, 0x012000A0, E, "multiply", _regs(NOPC, _, NOPC, _, NOPC)),
    (0x0FF00090, 0x01600080, E, "multiply", _regs(NOPC, _, NOPC, _, NOPC)),
    (0x0FF00090, 0x01000080, E, "multiply", _regs(NOPC, NOPC, NOPC, _, NOPC)),
    (0x0FF000B0, 0x01200080, E, "multiply", _regs(NOPC, NOPC, NOPC, _, NOPC)),
]
_ARM_MUL = [
    (0x0FE000F0, 0x00000090, E, "multiply", _regs(NOPC, _, NOPC, _, NOPC)),
    (0x0FE000F0, 0x00200090, E, "multiply", _regs(NOPC, NOPC, NOPC, _, NOPC)),
    (0x0FF000F0, 0x00600090, E, "multiply", _regs(NOPC, NOPC, NOPC, _, NOPC)),
    (0x0FF000F0, 0x00400090, E, "multiply", _regs(NOPC, NOPC, NOPC, _, NOPC)),
    (0x0F8000F0, 0x00800090, E, "multiply", _regs(NOPC, NOPC, NOPC, _, NOPC)),
]
_ARM_SYNC: list = []                  # ARMv7: LDREX/STREX and SWP are not probed
_ARM_EXTRA_LS = [
    (0x0F200090, 0x00200090, R, "unprivileged load/store", _regs()),
    (0x0E10E0D0, 0x0000E0D0, R, "ldrd/strd of lr,pc", _regs()),
    (0x0E5000D0, 0x000000D0, E, "ldrd/strd", _regs(NOPCWB, NOPC, _, _, NOPC)),
    (0x0E5000D0, 0x004000D0, E, "ldrd/strd", _regs(NOPCWB, NOPC)),
    (0x0E5000F0, 0x000000B0, E, "strh", _regs(NOPCWB, NOPC, _, _, NOPC)),
    (0x0E500090, 0x00100090, E, "ldrh/ldrsb/ldrsh", _regs(NOPCWB, NOPC, _, _, NOPC)),
    (0x0E5000F0, 0x004000B0, E, "strh", _regs(NOPCWB, NOPC)),
    (0x0E500090, 0x00500090, E, "ldrh/ldrsb/ldrsh", _regs(NOPCWB, NOPC)),
]
_ARM_DP_REG = [
    (0x0E10F000, 0x0010F000, R, "<op>s pc", _regs()),
    (0xFFFFFFFF, 0xE1A0C00D, S, "mov-ip-sp", _regs()),
    (0x0F900010, 0x01100000, E, "data-processing", _regs(ANY, _, _, _, ANY)),
    (0x0FA00010, 0x01A00000, E, "data-processing", _regs(_, ANY, _, _, ANY)),
    (0x0E000010, 0x00000000, E, "data-processing", _regs(ANY, ANY, _, _, ANY)),
    (0x0F900090, 0x01100010, E, "data-processing", _regs(NOPC, _, NOPC, _, NOPC)),
    (0x0FA00090, 0x01A00010, E, "data-processing", _regs(_, NOPC, NOPC, _, NOPC)),
    (0x0E000090, 0x00000010, E, "data-processing", _regs(NOPC, NOPC, NOPC, _, NOPC)),
]
_ARM_DP_IMM = [
    (0x0FB00000, 0x03000000, E, "movw/movt", _regs(_, NOPC)),
    (0x0FFF00FF, 0x03200001, E, "yield", _regs()),
    (0x0FFF00FF, 0x03200004, E, "sev", _regs()),
    (0x0FFF00FC, 0x03200000, S, "nop", _regs()),
    (0x0FB00000, 0x03200000, R, "msr/hint", _regs()),
    (0x0E10F000, 0x0210F000, R, "<op>s pc", _regs()),
    (0x0F900000, 0x03100000, E, "data-processing", _regs(ANY)),
    (0x0FA00000, 0x03A00000, E, "data-processing", _regs(_, ANY)),
    (0x0E000000, 0x02000000, E, "data-processing", _regs(ANY, ANY)),
]
_ARM_MEDIA6 = [
    (0x0FF000F0, 0x068000B0, E, "sel", _regs(NOPC, NOPC, _, _, NOPC)),
    (0x0FA00030, 0x06A00010, E, "saturate", _regs(_, NOPC, _, _, NOPC)),
    (0x0FB000F0, 0x06A00030, E, "saturate", _regs(_, NOPC, _, _, NOPC)),
    (0x0FB00070, 0x06B00030, E, "rev", _regs(_, NOPC, _, _, NOPC)),
    (0x0FB00010, 0x06000010, R, "undefined media", _regs()),
    (0x0F8000F0, 0x060000B0, R, "undefined media", _regs()),
    (0x0F8000F0, 0x060000D0, R, "undefined media", _regs()),
    (0x0F800010, 0x06000010, E, "parallel arithmetic", _regs(NOPC, NOPC, _, _, NOPC)),
    (0x0FF00030, 0x06800010, E, "pack", _regs(NOPC, NOPC, _, _, NOPC)),
    (0x0FB000F0, 0x06900070, R, "undefined media", _regs()),
    (0x0F8F00F0, 0x068F0070, E, "extend", _regs(_, NOPC, _, _, NOPC)),
    (0x0F8000F0, 0x06800070, E, "extend-add", _regs(NOPC, NOPC, _, _, NOPC)),
]
_ARM_MEDIA7 = [
    (0x0FF000F0, 0x07F000F0, R, "undefined", _regs()),
    (0x0FF00090, 0x07400010, E, "multiply", _regs(NOPC, NOPC, NOPC, _, NOPC)),
    (0x0FF0F090, 0x0700F010, E, "multiply", _regs(NOPC, _, NOPC, _, NOPC)),
    (0x0FF0F0D0, 0x0750F010, E, "multiply", _regs(NOPC, _, NOPC, _, NOPC)),
    (0x0FF0F0F0, 0x0780F010, E, "multiply", _regs(NOPC, _, NOPC, _, NOPC)),
    (0x0FF00090, 0x07000010, E, "multiply", _regs(NOPC, NOPC, NOPC, _, NOPC)),
    (0x0FF000D0, 0x07500010, E, "multiply", _regs(NOPC, NOPC, NOPC, _, NOPC)),
    (0x0FF000F0, 0x07800010, E, "multiply", _regs(NOPC, NOPC, NOPC, _, NOPC)),
    (0x0FF000D0, 0x075000D0, E, "multiply", _regs(NOPC, NOPC, NOPC, _, NOPC)),
    (0x0FA00070, 0x07A00050, E, "bitfield", _regs(_, NOPC, _, _, NOPC)),
    (0x0FE0007F, 0x07C0001F, E, "bitfield", _regs(_, NOPC)),
    (0x0FE00070, 0x07C00010, E, "bitfield", _regs(_, NOPC, _, _, NOPC)),
]
_ARM_LS = [
    (0x0C40F000, 0x0440F000, R, "ldrb/strb pc", _regs()),
    (0x0D200000, 0x04200000, R, "unprivileged load/store", _regs()),
    (0x0E100000, 0x04000000, E, "str", _regs(NOPCWB, ANY)),
    (0x0E100000, 0x04100000, E, "ldr", _regs(NOPCWB, ANY)),
    (0x0E100000, 0x06000000, E, "str", _regs(NOPCWB, ANY, _, _, NOPC)),
    (0x0E100000, 0x06100000, E, "ldr", _regs(NOPCWB, ANY, _, _, NOPC)),
]
_ARM_BLOCK = [
    (0x0E400000, 0x08000000, L, "ldm/stm", _regs()),
]
_ARM_TOP = [
    (0xF0000000, 0xF0000000, T, _ARM_1111, "unconditional (barriers, clrex, cps, setend, srs, rfe, coprocessor 2)"),
    (0x0F900080, 0x01000000, T, _ARM_MISC, "miscellaneous (msr, mrs spsr, bxj, bkpt, smc)"),
    (0x0F900090, 0x01000080, T, _ARM_HALFMUL, "halfword multiply"),
    (0x0F0000F0, 0x00000090, T, _ARM_MUL, "multiply"),
    (0x0F0000F0, 0x01000090, T, _ARM_SYNC, "synchronization primitive (ldrex/strex/swp)"),
    (0x0E000090, 0x00000090, T, _ARM_EXTRA_LS, "extra load/store"),
    (0x0E000000, 0x00000000, T, _ARM_DP_REG, "data-processing (register)"),
    (0x0E000000, 0x02000000, T, _ARM_DP_IMM, "data-processing (immediate)"),
    (0x0F000010, 0x06000010, T, _ARM_MEDIA6, "media"),
    (0x0F000010, 0x07000010, T, _ARM_MEDIA7, "media"),
    (0x0C000000, 0x04000000, T, _ARM_LS, "load/store"),
    (0x0E000000, 0x08000000, T, _ARM_BLOCK, "ldm/stm (user registers / exception return)"),
    (0x0E000000, 0x0A000000, S, "branch", _regs()),
    (0x0C000000, 0x0C000000, R, "coprocessor/svc", _regs()),
]


def _writeback(op: int) -> bool:
    return bool(op & (1 << 21)) or not (op & (1 << 24))


def _regs_ok(op: int, regs) -> bool:
    for shift, kind in zip((16, 12, 8, 4, 0), regs):
        if kind is None or kind == ANY:
            continue
        if kind == NOPCWB and not _writeback(op):
            continue
        if (op >> shift) & 0xF == 15:
            return False
    return True


def _walk(op: int, table) -> tuple[str, str, object] | None:
    for mask, value, kind, payload, regs in table:
        if op & mask != value:
            continue
        if kind == T:
            return _walk(op, payload) or (R, f"{regs}: not probed", None)
        if not _regs_ok(op, regs):
            return R, f"{payload} using pc", None
        return kind, payload, regs
    return None


# checkers-arm.c arm_stack_checker runs for these actions only (PROBES_STORE, PROBES_STORE_EXTRA,
# PROBES_LDRSTRD, PROBES_LDMSTM); a media or data-processing instruction naming sp is no store
_STACK_CHECKED = {"str", "strh", "ldrd/strd", "ldm/stm"}


def _stack_space(op: int) -> int:
    """checkers-arm.c arm_check_stack: bytes below sp a store may touch (-1: unknown).

    Register-offset STR/STRB/STRH/STRD with sp as base *or* offset: unknown; STMDA/STMDB sp:
    (registers - (P == 0)) * 4; pre-indexed negative STR/STRB (imm12) and STRH/STRD (imm4:imm4)
    with sp base: the immediate; everything else (loads, post-indexed, positive offsets): none."""
    store = not op & (1 << 20)
    rn, rm = (op >> 16) & 0xF, op & 0xF
    if (op & 0x0E000000) == 0x06000000 and store and 13 in (rn, rm):          # STR{B} (register)
        return -1
    if (op & 0x0E4000B0) == 0x000000B0 and op & 0x20 and 13 in (rn, rm) and store:   # STR{H,D} (register)
        return -1
    if rn != 13 or not store:
        return 0
    if (op & 0x0E000000) == 0x08000000:                        # STM sp
        if op & (1 << 23) or op & (1 << 22):                   # incrementing, or user registers
            return 0
        return (bin(op & 0xFFFF).count("1") - (0 if op & (1 << 24) else 1)) * 4
    pre_neg = (op & (1 << 24)) and not op & (1 << 23)          # P == 1, U == 0: [sp, #-n]{!}
    if (op & 0x0E000000) == 0x04000000 and pre_neg:            # STR{B} (immediate)
        return op & 0xFFF
    if (op & 0x0E4000B0) == 0x004000B0 and pre_neg and not op & (1 << 21):   # STR{H,D} (immediate)
        return ((op >> 4) & 0xF0) + (op & 0xF)
    return 0


# ARM instructions that read pc and that the kernel emulates with rewritten registers
# (decode_regs replaces the register nibbles; emulate_* loads pc + 8 into the stand-in): armload
# does the same with two scratch registers the instruction does not name (EMULATE below)
_DEST12 = {"ldr", "ldrh/ldrsb/ldrsh", "data-processing", "movw/movt"}


def _pc_fields(op: int, regs, what: str) -> tuple[list[int], bool]:
    """(shifts of register fields reading pc, bit 12 is a pc destination)."""
    reads, dest = [], False
    for shift, k in zip((16, 12, 8, 4, 0), regs):
        if k is None or (op >> shift) & 0xF != 15:
            continue
        if shift == 12 and what in _DEST12:
            dest = True
        else:
            reads.append(shift)
    return reads, dest


def arm_scratch(op: int, n: int = 2) -> list[int]:
    """The lowest registers r0..r12 that none of op's register fields name (nor Rt2 = Rt + 1 of
    ldrd/strd)."""
    used = {(op >> s) & 0xF for s in (16, 12, 8, 0)} | {((op >> 12) & 0xF) + 1}
    return [r for r in range(13) if r not in used][:n]


def arm_rewrite(op: int, reads: list[int], dest: bool) -> tuple[int, int, int | None]:
    """(rewritten op, the register standing for pc as a source, the one for pc as destination)."""
    rs, rd = arm_scratch(op)
    for s in reads:
        op = (op & ~(0xF << s)) | (rs << s)
    if dest:
        op = (op & ~(0xF << 12)) | (rd << 12)
    return op, rs, (rd if dest else None)


def decode_arm(op: int) -> Decoded:
    hit = _walk(op, _ARM_TOP)
    if hit is None:
        return Decoded(REJECT, "unallocated")
    kind, what, regs = hit
    if kind == R:
        return Decoded(REJECT, what)
    if what in _STACK_CHECKED:
        space = _stack_space(op)
        if space < 0 or space > MAX_STACK_SIZE:
            return Decoded(REJECT, f"{what}: store to the stack "
                           f"{'at a register offset' if space < 0 else f'{space} bytes below sp'}")
    if kind == S:
        return Decoded(SIMULATE, what, what)
    if kind == L:
        rn = (op >> 16) & 0xF
        if rn == 15 or (not (op & (1 << 20)) and op & 0x8000):
            return Decoded(SIMULATE, "ldm/stm with pc (simulate_ldm1stm1 / simulate_stm1_pc)", "ldmstm")
        return Decoded(OUT_OF_LINE, what)
    reads, dest = _pc_fields(op, regs, what)
    if reads:
        rn = (op >> 16) & 0xF
        if rn == 15 and (op & 0x0E500000) == 0x04100000 and (op & 0x01200000) == 0x01000000 \
                and reads == [16]:
            return Decoded(SIMULATE, "ldr literal", "ldr-literal")
        if rn == 15 and (op & 0x0FE00000) in (0x02800000, 0x02400000) and not dest:
            return Decoded(SIMULATE, "adr", "adr")
        return Decoded(EMULATE, f"{what} reading pc (registers rewritten)", "pc", pc_fields=(tuple(reads), dest))
    return Decoded(OUT_OF_LINE, what)


def _t16_misc(op: int) -> Decoded:
    """t16_table_1011: miscellaneous 16-bit instructions."""
    if op & 0xFF00 == 0xB000:
        return Decoded(OUT_OF_LINE, "add/sub sp", size=2)
    if op & 0xF500 == 0xB100:
        return Decoded(SIMULATE, "cbz/cbnz", "t16-cbz", 2)
    if op & 0xFFC0 == 0xBA80:
        return Decoded(REJECT, "unallocated", size=2)
    if op & 0xF500 == 0xB000:
        return Decoded(OUT_OF_LINE, "extend/rev", size=2)
    if op & 0xFE00 in (0xB400, 0xBC00):
        return Decoded(OUT_OF_LINE, "push/pop", size=2)
    if op & 0xFF00 == 0xBF00:
        if op & 0xF:
            return Decoded(UNSUPPORTED, "it (armload does not simulate IT blocks)", size=2)
        if op in (0xBF00, 0xBF10, 0xBF20, 0xBF30, 0xBF40):
            return Decoded(SIMULATE, "hint", "nop", 2)
        return Decoded(REJECT, "unassigned hint", size=2)
    return Decoded(REJECT, "setend/cps/bkpt/unallocated", size=2)


def _nosppc(*regs: int) -> bool:
    return all(r not in (13, 15) for r in regs)


def _t32_loadstore(op: int, h1: int, h2: int) -> Decoded:
    """t32_table_1111_100x: load/store single data item (memory hints before it)."""
    rn, rt = h1 & 0xF, h2 >> 12
    if (op & 0xFE50F000) == 0xF810F000:
        return Decoded(SIMULATE, "preload", "nop")
    for mask, val in ((0xFE600000, 0xF8600000), (0xFFF00000, 0xF9500000), (0xFE800D00, 0xF8000800),
                      (0xFE800F00, 0xF8000E00), (0xFF1F0000, 0xF80F0000), (0xFF10F000, 0xF800F000)):
        if op & mask == val:
            return Decoded(REJECT, "load/store form not probed (unprivileged, pc, unallocated)")
    if (op & 0xFF7F0000) == 0xF85F0000:
        return Decoded(SIMULATE, "ldr literal", "t32-ldr-literal")
    if (op & 0xFE5F0000) == 0xF81F0000:
        if not _nosppc(rt):
            return Decoded(REJECT, "literal load to sp/pc")
        return Decoded(UNSUPPORTED, "literal load other than ldr (the kernel simulates it; armload does not)")
    word = (op & 0xFFE00800) == 0xF8400800 or (op & 0xFFE00000) == 0xF8C00000 or (op & 0xFFE00FC0) == 0xF8400000
    if (op & 0xFFE00FC0) == 0xF8400000 or (not word and (op & 0xFE800FC0) == 0xF8000000):
        if not _nosppc(h2 & 0xF):
            return Decoded(REJECT, "register offset sp/pc")
    if not word and not _nosppc(rt):
        return Decoded(REJECT, "byte/halfword transfer of sp/pc")
    if rn == 15:
        return Decoded(REJECT, "pc base")
    if not word and not ((op & 0xFEC00800) == 0xF8000800 or (op & 0xFEC00000) == 0xF8800000
                         or (op & 0xFE800FC0) == 0xF8000000):
        return Decoded(REJECT, "unallocated")
    return Decoded(OUT_OF_LINE, "load/store")


def _t32_dataproc(op: int, h1: int, h2: int) -> Decoded:
    rn, rd, rm = h1 & 0xF, (h2 >> 8) & 0xF, h2 & 0xF
    if (op & 0xFE000000) == 0xEA000000:               # shifted register
        if (op & 0xFF700F00) == 0xEA100F00:
            ok = _nosppc(rn, rm)
        elif (op & 0xFFF00F00) in (0xEB100F00, 0xEBB00F00):
            ok = rn != 15 and _nosppc(rm)
        elif (op & 0xFFCF0000) == 0xEA4F0000:
            ok = _nosppc(rd, rm)
        elif any(op & m == v for m, v in ((0xFFA00000, 0xEAA00000), (0xFFE00000, 0xEB200000),
                                          (0xFFE00000, 0xEB800000), (0xFFE00000, 0xEBE00000))):
            return Decoded(REJECT, "unallocated")
        elif (op & 0xFF4F7F30) == 0xEB0D0D00:
            ok = _nosppc(rm)
        elif (op & 0xFF4F0F00) == 0xEB0D0D00:
            return Decoded(REJECT, "add/sub sp, sp, shifted register")
        elif (op & 0xFF4F0000) == 0xEB0D0000:
            ok = rd != 15 and _nosppc(rm)
        else:
            ok = _nosppc(rn, rd, rm)
        return Decoded(OUT_OF_LINE if ok else REJECT, "data-processing" if ok else "data-processing on sp/pc")
    if (op & 0xFA008000) == 0xF0000000:               # modified immediate
        if (op & 0xFB708F00) == 0xF0100F00:
            ok = _nosppc(rn)
        elif (op & 0xFBF08F00) in (0xF1100F00, 0xF1B00F00):
            ok = rn != 15
        elif (op & 0xFBCF8000) == 0xF04F0000:
            ok = _nosppc(rd)
        elif any(op & m == v for m, v in ((0xFBE08000, 0xF0A00000), (0xFBC08000, 0xF0C00000),
                                          (0xFBE08000, 0xF1200000), (0xFBE08000, 0xF1800000),
                                          (0xFBE08000, 0xF1E00000))):
            return Decoded(REJECT, "unallocated")
        elif (op & 0xFB4F8000) == 0xF10D0000:
            ok = rd != 15
        else:
            ok = _nosppc(rn, rd)
        return Decoded(OUT_OF_LINE if ok else REJECT, "data-processing" if ok else "data-processing on sp/pc")
    # plain binary immediate
    if (op & 0xFBFF8000) in (0xF20F0000, 0xF2AF0000):
        return Decoded(SIMULATE, "adr", "t32-adr") if _nosppc(rd) else Decoded(REJECT, "adr to sp/pc")
    if (op & 0xFBFF8F00) in (0xF20D0D00, 0xF2AD0D00):
        return Decoded(OUT_OF_LINE, "addw/subw sp")
    if (op & 0xFBF08000) in (0xF2000000, 0xF2A00000) or (op & 0xFB708000) == 0xF2400000 \
            or (op & 0xFBFF8000) == 0xF36F0000:
        ok = _nosppc(rd)
    elif (op & 0xFB508000) == 0xF3000000 or (op & 0xFB708000) == 0xF3400000 or (op & 0xFBF08000) == 0xF3600000:
        ok = _nosppc(rn, rd)
    else:
        return Decoded(REJECT, "unallocated")
    return Decoded(OUT_OF_LINE if ok else REJECT, "data-processing" if ok else "data-processing on sp/pc")


def _t32_stack_space(op: int) -> int:
    """checkers-thumb.c t32_check_stack (loads never count): STR{,B,H} with sp as base or register
    offset: unknown; STR{,B,H} [sp, #-imm8]{!}: imm8; STRD [sp, #-imm8*4]{!}: imm8 * 4; STMDB sp:
    4 per register."""
    if op & (1 << 20):
        return 0
    rn = (op >> 16) & 0xF
    if (op & 0xFF800FC0) == 0xF8000000 and 13 in (rn, op & 0xF):    # STR{,B,H} (register)
        return -1
    if rn != 13:
        return 0
    if (op & 0xFF900E00) == 0xF8000C00:                              # STR{,B,H} (imm8), P=1 U=0
        return op & 0xFF
    if (op & 0xFFD00000) == 0xE9400000:                              # STRD, P=1 U=0
        return (op & 0xFF) << 2
    if (op & 0xFFD00000) == 0xE9000000:                              # STMDB
        return 4 * bin(op & 0xFFFF).count("1")
    return 0


def _t32_stack_checked(d: Decoded, op: int) -> Decoded:
    space = _t32_stack_space(op)
    if d.outcome == OUT_OF_LINE and (space < 0 or space > MAX_STACK_SIZE):
        return Decoded(REJECT, f"{d.what}: store to the stack "
                       f"{'at a register offset' if space < 0 else f'{space} bytes below sp'}")
    return d


def decode_thumb(op: int, size: int) -> Decoded:
    """arch/arm/probes/decode-thumb.c: probes_decode_thumb16_table / probes_decode_thumb32_table."""
    if size == 2:
        if op & 0xFE00 == 0xDE00:
            return Decoded(REJECT, "udf/svc", size=2)
        if op & 0xF000 == 0xD000:
            return Decoded(SIMULATE, "b<c>", "t16-bcond", 2)
        if op & 0xF800 == 0xE000:
            return Decoded(SIMULATE, "b", "t16-b", 2)
        if op & 0xF000 == 0xB000:
            return _t16_misc(op)
        if op & 0xFFF8 == 0x47F8 or op == 0x44FF:
            return Decoded(REJECT, "blx pc / add pc, pc", size=2)
        if op & 0xFF00 == 0x4700:
            return Decoded(SIMULATE, "bx/blx", "t16-bx", 2)
        if op & 0xF800 == 0x4800:
            return Decoded(SIMULATE, "ldr literal", "t16-ldr-literal", 2)
        if op & 0xF800 == 0xA000:
            return Decoded(SIMULATE, "adr", "t16-adr", 2)
        if op & 0xFC00 == 0x4400:                 # hi-register add/cmp/mov
            rm = (op >> 3) & 0xF
            rdn = (op & 7) | ((op >> 4) & 8)
            opc = (op >> 8) & 3
            if rm == 15 or (rdn == 15 and opc != 2):
                return Decoded(UNSUPPORTED, "hi-register operation reading pc", size=2)
        if op & 0xF800 == 0xF000 or op & 0xE000 == 0xE000:
            return Decoded(REJECT, "unallocated", size=2)
        return Decoded(OUT_OF_LINE, "thumb16", size=2)
    h1, h2 = op >> 16, op & 0xFFFF
    if (op & 0xFE400000) == 0xE8000000:              # load/store multiple
        if (op & 0xFE4F0000) == 0xE80F0000 or (op & 0xFFC00000) in (0xE8000000, 0xE9800000) \
                or (op & 0xFE508000) == 0xE8008000 or (op & 0xFE50C000) == 0xE810C000 \
                or (op & 0xFE402000) == 0xE8002000:
            return Decoded(REJECT, "ldm/stm form (pc base, srs/rfe, stm pc, ldm lr+pc, sp in list)")
        return _t32_stack_checked(Decoded(OUT_OF_LINE, "ldm/stm"), op)
    if (op & 0xFE400000) == 0xE8400000:              # dual, exclusive, table branch
        if (op & 0xFF600000) == 0xE8600000 or (op & 0xFF400000) == 0xE9400000:
            rn = h1 & 0xF
            if rn == 15 and _writeback_t32(op) or not _nosppc(h2 >> 12, (h2 >> 8) & 0xF):
                return Decoded(REJECT, "ldrd/strd on sp/pc")
            if rn == 15:
                return Decoded(UNSUPPORTED, "ldrd literal (the kernel emulates it; armload does not)")
            return _t32_stack_checked(Decoded(OUT_OF_LINE, "ldrd/strd"), op)
        if (op & 0xFFF000E0) == 0xE8D00000:
            return Decoded(UNSUPPORTED, "tbb/tbh (the kernel simulates table branches; armload does not)")
        return Decoded(REJECT, "exclusive / unallocated")
    if (op & 0xFC000000) == 0xEC000000 or (op & 0xFC000000) == 0xFC000000:
        return Decoded(REJECT, "coprocessor")
    if (op & 0xF8008000) == 0xF0008000:              # branches and miscellaneous control
        if (op & 0xFFF0D7FF) in (0xF3A08001, 0xF3A08004) or (op & 0xFFF0D7FC) == 0xF3A08000:
            return Decoded(SIMULATE, "hint", "nop")
        if (op & 0xFFF0D000) == 0xF3E08000:
            return Decoded(SIMULATE, "mrs", "t32-mrs") if _nosppc((h2 >> 8) & 0xF) else Decoded(REJECT, "mrs to sp/pc")
        if (op & 0xFB80D000) == 0xF3808000:
            return Decoded(REJECT, "system (msr, cps, barriers, smc, udf, ...)")
        if (op & 0xF800D000) == 0xF0008000:
            return Decoded(SIMULATE, "b<c>.w", "t32-branch")
        if (op & 0xF800D001) == 0xF000C000 or (op & 0xF8009000) == 0xF0009000:
            return Decoded(SIMULATE, "bl/blx/b.w", "t32-branch")
        return Decoded(REJECT, "unallocated")
    if (op & 0xFA008000) in (0xF0000000, 0xF2000000) or (op & 0xFE000000) == 0xEA000000:
        return _t32_dataproc(op, h1, h2)
    if (op & 0xFF100000) == 0xF9000000:
        return Decoded(REJECT, "advanced SIMD load/store")
    if (op & 0xFE000000) == 0xF8000000:
        return _t32_stack_checked(_t32_loadstore(op, h1, h2), op)
    if (op & 0xFF00F000) == 0xFA00F000 or (op & 0xFF000000) == 0xFB000000:
        if not _nosppc(h1 & 0xF, (h2 >> 8) & 0xF, h2 & 0xF):
            return Decoded(REJECT, "data-processing/multiply on sp/pc")
        return Decoded(OUT_OF_LINE, "data-processing/multiply")
    return Decoded(REJECT, "unallocated")


def _writeback_t32(op: int) -> bool:
    return bool(op & (1 << 21)) or not (op & (1 << 24))
