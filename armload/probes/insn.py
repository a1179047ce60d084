"""Instruction facts the probes need: the kernel's patch encodings and the kprobes decoder.

Encodings (arch/arm): the ftrace NOP that replaces `bl __gnu_mcount_nc` (`pop {lr}` in ARM,
`pop.w {lr}` = 0xf85deb04 in Thumb-2), `bl` as arm_gen_branch_link builds it (ARM: +-32 MiB,
Thumb-2: +-16 MiB), and the kprobe breakpoints (KPROBE_ARM_BREAKPOINT_INSTRUCTION 0x07f001f8
with the probed instruction's condition, KPROBE_THUMB16_BREAKPOINT_INSTRUCTION 0xde18,
KPROBE_THUMB32_BREAKPOINT_INSTRUCTION 0xf7f0a018).

`decode_arm` follows arch/arm/probes/decode-arm.c (probes_decode_arm_table with its REGS()
register checks) and the stack checker (arch/arm/probes/kprobes/checkers-arm.c: stores below
sp by more than MAX_STACK_SIZE, or by a register offset, are refused): REJECT is the kernel's
INSN_REJECTED (-EINVAL). `decode_thumb` covers the Thumb-2 tables' branches, literal loads,
system, coprocessor and exclusive instructions; other Thumb forms run out of line. What the
kernel emulates with register rewriting but armload cannot run out of line (an instruction
reading pc that is not a branch, literal load or adr) is UNSUPPORTED: armload says so.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

ARM_FTRACE_NOP = 0xE8BD4000           # pop {lr}
THUMB_FTRACE_NOP = 0xF85DEB04         # pop.w {lr} (opcode order: first halfword high)
KPROBE_ARM_BREAKPOINT_INSTRUCTION = 0x07F001F8
KPROBE_THUMB16_BREAKPOINT_INSTRUCTION = 0xDE18
KPROBE_THUMB32_BREAKPOINT_INSTRUCTION = 0xF7F0A018
MAX_STACK_SIZE = 64                   # arch/arm/probes/kprobes/core.c

# decode outcomes
OUT_OF_LINE = "out-of-line"           # INSN_GOOD: copied into an instruction slot
SIMULATE = "simulate"                 # INSN_GOOD_NO_SLOT: its effect is computed by the handler
REJECT = "reject"                     # INSN_REJECTED: register_kprobe returns -EINVAL
UNSUPPORTED = "unsupported"           # the kernel would emulate it; armload does not


@dataclass
class Decoded:
    outcome: str
    what: str                         # instruction class, for messages
    sim: str | None = None            # simulation kind for SIMULATE
    size: int = 4


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
    (0xF0000000, 0xF0000000, T, _ARM_1111, None),
    (0x0F900080, 0x01000000, T, _ARM_MISC, None),
    (0x0F900090, 0x01000080, T, _ARM_HALFMUL, None),
    (0x0F0000F0, 0x00000090, T, _ARM_MUL, None),
    (0x0F0000F0, 0x01000090, T, _ARM_SYNC, None),
    (0x0E000090, 0x00000090, T, _ARM_EXTRA_LS, None),
    (0x0E000000, 0x00000000, T, _ARM_DP_REG, None),
    (0x0E000000, 0x02000000, T, _ARM_DP_IMM, None),
    (0x0F000010, 0x06000010, T, _ARM_MEDIA6, None),
    (0x0F000010, 0x07000010, T, _ARM_MEDIA7, None),
    (0x0C000000, 0x04000000, T, _ARM_LS, None),
    (0x0E000000, 0x08000000, T, _ARM_BLOCK, None),
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
            return _walk(op, payload) or (R, "unallocated", None)
        if not _regs_ok(op, regs):
            return R, f"{payload} using pc", None
        return kind, payload, regs
    return None


def _stack_space(op: int) -> int:
    """checkers-arm.c arm_check_stack: bytes below sp a store may touch (-1: unknown)."""
    rn = (op >> 16) & 0xF
    if rn != 13:
        return 0
    if (op & 0x0E100000) == 0x08000000:          # STM with sp base
        if not (op & (1 << 23)):                 # decrementing
            return 4 * bin(op & 0xFFFF).count("1")
        return 0
    if (op & 0x0C100000) == 0x04000000:          # STR/STRB
        if op & (1 << 25):                       # register offset
            return -1
        return 0 if op & (1 << 23) else op & 0xFFF
    if (op & 0x0E1000B0) == 0x000000B0 or (op & 0x0E1000F0) == 0x000000F0:   # STRH / STRD
        if not (op & (1 << 22)):                 # register offset
            return -1
        return 0 if op & (1 << 23) else ((op >> 4) & 0xF0) | (op & 0xF)
    return 0


def decode_arm(op: int) -> Decoded:
    hit = _walk(op, _ARM_TOP)
    if hit is None:
        return Decoded(REJECT, "unallocated")
    kind, what, regs = hit
    if kind == R:
        return Decoded(REJECT, what)
    space = _stack_space(op)
    if space < 0 or space > MAX_STACK_SIZE:
        return Decoded(REJECT, f"{what}: store to the stack {'at a register offset' if space < 0 else f'{space} bytes below sp'}")
    if kind == S:
        return Decoded(SIMULATE, what, what)
    if kind == L:
        rn = (op >> 16) & 0xF
        if rn == 15 or (not (op & (1 << 20)) and op & 0x8000):
            return Decoded(UNSUPPORTED, "ldm/stm reading pc")
        return Decoded(OUT_OF_LINE, what)
    # emulated by the kernel: out of line here unless it reads pc
    reads_pc = False
    is_store = (op & 0x0C100000) == 0x04000000 or (op & 0x0E1000B0) == 0x000000B0 \
        or ((op & 0x0E1000F0) == 0x000000F0)
    for shift, k in zip((16, 12, 8, 4, 0), regs):
        if k is None or (op >> shift) & 0xF != 15:
            continue
        if shift == 12 and not is_store:
            continue                              # a destination: writing pc is a branch, fine
        reads_pc = True
    if reads_pc:
        rn = (op >> 16) & 0xF
        if rn == 15 and (op & 0x0E500000) == 0x04100000 and (op & 0x01200000) == 0x01000000:
            return Decoded(SIMULATE, "ldr literal", "ldr-literal")
        if rn == 15 and (op & 0x0FE00000) in (0x02800000, 0x02400000) and (op >> 12) & 0xF != 15:
            return Decoded(SIMULATE, "adr", "adr")
        return Decoded(UNSUPPORTED, f"{what} reading pc")
    return Decoded(OUT_OF_LINE, what)


def decode_thumb(op: int, size: int) -> Decoded:
    if size == 2:
        if op & 0xF000 == 0xD000:
            c = (op >> 8) & 0xF
            if c == 0xE:
                return Decoded(REJECT, "udf", size=2)
            if c == 0xF:
                return Decoded(REJECT, "svc", size=2)
            return Decoded(SIMULATE, "b<c>", "t16-bcond", 2)
        if op & 0xF800 == 0xE000:
            return Decoded(SIMULATE, "b", "t16-b", 2)
        if op & 0xF500 == 0xB100:
            return Decoded(SIMULATE, "cbz/cbnz", "t16-cbz", 2)
        if op & 0xFF00 == 0x4700:
            return Decoded(SIMULATE, "bx/blx", "t16-bx", 2)
        if op & 0xF800 == 0x4800:
            return Decoded(SIMULATE, "ldr literal", "t16-ldr-literal", 2)
        if op & 0xF800 == 0xA000:
            return Decoded(SIMULATE, "adr", "t16-adr", 2)
        if op & 0xFF00 == 0xBE00:
            return Decoded(REJECT, "bkpt", size=2)
        if op & 0xFFE0 == 0xB660 or op & 0xFFF0 == 0xB650:
            return Decoded(REJECT, "cps/setend", size=2)
        if op & 0xFF00 == 0xBF00:
            if op & 0xF:
                return Decoded(UNSUPPORTED, "it (armload does not simulate IT blocks)", size=2)
            return Decoded(SIMULATE, "hint", "nop", 2)
        if op & 0xFC00 == 0x4400:                 # hi-register add/cmp/mov
            rm = (op >> 3) & 0xF
            rdn = (op & 7) | ((op >> 4) & 8)
            opc = (op >> 8) & 3
            if rm == 15 or (rdn == 15 and opc != 2):
                return Decoded(UNSUPPORTED, "hi-register operation reading pc", size=2)
        return Decoded(OUT_OF_LINE, "thumb16", size=2)
    h1, h2 = op >> 16, op & 0xFFFF
    if (h1 & 0xF800) == 0xF000 and h2 & 0x8000:  # branches and miscellaneous control
        if (h2 & 0x5000) in (0x5000, 0x4000, 0x1000) or (h1 & 0x380) != 0x380:
            if (h2 & 0x5000) == 0x0000 and (h1 & 0x380) != 0x380:
                return Decoded(SIMULATE, "b<c>.w", "t32-branch")
            return Decoded(SIMULATE, "bl/blx/b.w", "t32-branch")
        if (h1 & 0xFFF0) == 0xF3E0 and (h2 & 0xF000) == 0x8000:
            return Decoded(SIMULATE, "mrs", "t32-mrs")
        if (h1 & 0xFFF0) == 0xF3A0 and (h2 & 0xFF00) == 0x8000 and (h2 & 0xF0) == 0:
            return Decoded(SIMULATE, "hint", "nop")
        return Decoded(REJECT, "system/udf/smc")
    if (h1 & 0xEC00) == 0xEC00:
        return Decoded(REJECT, "coprocessor")
    if (h1 & 0xFFF0) == 0xE8D0 and (h2 & 0xFFE0) == 0xF000:
        return Decoded(UNSUPPORTED, "tbb/tbh (the kernel simulates table branches; armload does not)")
    if (h1 & 0xFE40) == 0xE840 and (h1 & 0xFFE0) != 0xE860 or (h1 & 0xFFF0) in (0xE8C0, 0xE8D0):
        return Decoded(REJECT, "exclusive / table branch")
    if (h1 & 0xFE00) == 0xE800 and (h1 & 0xF) == 15:
        return Decoded(REJECT, "ldm/stm with pc base")
    if (h1 & 0xFE00) == 0xF800 and (h1 & 0xF) == 15 and (h1 & 0x0010):
        if (h1 & 0xFF7F) == 0xF85F:
            return Decoded(SIMULATE, "ldr literal", "t32-ldr-literal")
        return Decoded(UNSUPPORTED, "literal load other than ldr")
    if (h1 & 0xFB4F) == 0xF20F and not h2 & 0x8000:
        return Decoded(SIMULATE, "adr", "t32-adr")
    return Decoded(OUT_OF_LINE, "thumb32")
