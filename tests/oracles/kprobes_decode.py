"""arch_prepare_kprobe's verdict on one instruction, as Linux 6.1 reaches it (no armload code).

A literal port, table for table, of:
  arch/arm/probes/decode.c          probes_decode_insn (the table walker, DECODE_OR chaining),
                                    decode_regs (REG_TYPE_* checks on the five register nibbles)
  arch/arm/probes/decode-arm.c      probes_decode_arm_table and its sub-tables (ARMv7: no SWP)
  arch/arm/probes/kprobes/actions-common.c  kprobe_decode_ldmstm (the PROBES_LDMSTM decoder)
  arch/arm/probes/kprobes/checkers-arm.c    arm_check_stack (arm_stack_checker)
  arch/arm/probes/kprobes/checkers-common.c stack_check_actions
  arch/arm/probes/kprobes/checkers-thumb.c  t32_check_stack, t16_check_stack
  arch/arm/probes/kprobes/core.c    arch_prepare_kprobe: -EINVAL for INSN_REJECTED or for
                                    stack_space < 0 or > MAX_STACK_SIZE (64)

`arm(insn)` returns ("rejected" | "good" | "good-no-slot", stack_space); `prepare_arm(insn)` the
errno arch_prepare_kprobe returns (0 or -22). The Thumb part ports only the stack checkers, for
opcodes the caller knows belong to PROBES_T32_LDMSTM / _LDRDSTRD / _LDRSTR (`t32_stack`) or
PROBES_T16_PUSH (`t16_stack`).
"""
from __future__ import annotations

MAX_STACK_SIZE = 64
INSN_REJECTED, INSN_GOOD, INSN_GOOD_NO_SLOT = "rejected", "good", "good-no-slot"

# enum decode_reg_type (decode.h)
REG_TYPE_NONE, REG_TYPE_ANY, REG_TYPE_SAMEAS16, REG_TYPE_SP, REG_TYPE_PC = 0, 1, 2, 3, 4
REG_TYPE_NOSP, REG_TYPE_NOSPPC, REG_TYPE_NOPC, REG_TYPE_NOPCWB, REG_TYPE_NOPCX, REG_TYPE_NOSPPCX = 5, 6, 7, 8, 9, 10
ANY, NOPC, NOPCWB, NOPCX = REG_TYPE_ANY, REG_TYPE_NOPC, REG_TYPE_NOPCWB, REG_TYPE_NOPCX


def REGS(r16, r12, r8, r4, r0):
    return (r16 << 16) | (r12 << 12) | (r8 << 8) | (r4 << 4) | r0


# decode_item kinds
TABLE, CUSTOM, SIMULATE, EMULATE, OR, REJECT, END = "table", "custom", "simulate", "emulate", "or", "reject", "end"


def DECODE_TABLE(mask, value, table):
    return (TABLE, mask, value, 0, table)


def DECODE_CUSTOM(mask, value, action):
    return (CUSTOM, mask, value, 0, action)


def DECODE_SIMULATE(mask, value, action):
    return (SIMULATE, mask, value, 0, action)


def DECODE_SIMULATEX(mask, value, action, regs):
    return (SIMULATE, mask, value, regs, action)


def DECODE_EMULATE(mask, value, action):
    return (EMULATE, mask, value, 0, action)


def DECODE_EMULATEX(mask, value, action, regs):
    return (EMULATE, mask, value, regs, action)


def DECODE_OR(mask, value):
    return (OR, mask, value, 0, None)


def DECODE_REJECT(mask, value):
    return (REJECT, mask, value, 0, None)


DECODE_END = (END, 0, 0, 0, None)

# --- decode-arm.c -----------------------------------------------------------------------------
arm_1111_table = [
    DECODE_SIMULATE(0xfe300000, 0xf4100000, "PROBES_PRELOAD_IMM"),
    DECODE_SIMULATE(0xfe300010, 0xf6100000, "PROBES_PRELOAD_REG"),
    DECODE_SIMULATE(0xfe000000, 0xfa000000, "PROBES_BRANCH_IMM"),
    DECODE_END,
]
arm_cccc_0001_0xx0____0xxx_table = [
    DECODE_SIMULATEX(0x0ff000f0, 0x01000000, "PROBES_MRS", REGS(0, NOPC, 0, 0, 0)),
    DECODE_SIMULATE(0x0ff000f0, 0x01200010, "PROBES_BRANCH_REG"),
    DECODE_SIMULATEX(0x0ff000f0, 0x01200030, "PROBES_BRANCH_REG", REGS(0, 0, 0, 0, NOPC)),
    DECODE_EMULATEX(0x0ff000f0, 0x01600010, "PROBES_CLZ", REGS(0, NOPC, 0, 0, NOPC)),
    DECODE_EMULATEX(0x0f9000f0, 0x01000050, "PROBES_SATURATING_ARITHMETIC", REGS(NOPC, NOPC, 0, 0, NOPC)),
    DECODE_END,
]
arm_cccc_0001_0xx0____1xx0_table = [
    DECODE_EMULATEX(0x0ff00090, 0x01400080, "PROBES_MUL1", REGS(NOPC, NOPC, NOPC, 0, NOPC)),
    DECODE_OR(0x0ff000b0, 0x012000a0),
    DECODE_EMULATEX(0x0ff00090, 0x01600080, "PROBES_MUL2", REGS(NOPC, 0, NOPC, 0, NOPC)),
    DECODE_OR(0x0ff00090, 0x01000080),
    DECODE_EMULATEX(0x0ff000b0, 0x01200080, "PROBES_MUL2", REGS(NOPC, NOPC, NOPC, 0, NOPC)),
    DECODE_END,
]
arm_cccc_0000_____1001_table = [
    DECODE_EMULATEX(0x0fe000f0, 0x00000090, "PROBES_MUL2", REGS(NOPC, 0, NOPC, 0, NOPC)),
    DECODE_OR(0x0fe000f0, 0x00200090),
    DECODE_EMULATEX(0x0ff000f0, 0x00600090, "PROBES_MUL2", REGS(NOPC, NOPC, NOPC, 0, NOPC)),
    DECODE_OR(0x0ff000f0, 0x00400090),
    DECODE_EMULATEX(0x0f8000f0, 0x00800090, "PROBES_MUL1", REGS(NOPC, NOPC, NOPC, 0, NOPC)),
    DECODE_END,
]
arm_cccc_0001_____1001_table = [          # __LINUX_ARM_ARCH__ >= 6: no SWP entry
    DECODE_END,
]
arm_cccc_000x_____1xx1_table = [
    DECODE_REJECT(0x0f200090, 0x00200090),
    DECODE_REJECT(0x0e10e0d0, 0x0000e0d0),
    DECODE_EMULATEX(0x0e5000d0, 0x000000d0, "PROBES_LDRSTRD", REGS(NOPCWB, NOPCX, 0, 0, NOPC)),
    DECODE_EMULATEX(0x0e5000d0, 0x004000d0, "PROBES_LDRSTRD", REGS(NOPCWB, NOPCX, 0, 0, 0)),
    DECODE_EMULATEX(0x0e5000f0, 0x000000b0, "PROBES_STORE_EXTRA", REGS(NOPCWB, NOPC, 0, 0, NOPC)),
    DECODE_EMULATEX(0x0e500090, 0x00100090, "PROBES_LOAD_EXTRA", REGS(NOPCWB, NOPC, 0, 0, NOPC)),
    DECODE_EMULATEX(0x0e5000f0, 0x004000b0, "PROBES_STORE_EXTRA", REGS(NOPCWB, NOPC, 0, 0, 0)),
    DECODE_EMULATEX(0x0e500090, 0x00500090, "PROBES_LOAD_EXTRA", REGS(NOPCWB, NOPC, 0, 0, 0)),
    DECODE_END,
]
arm_cccc_000x_table = [
    DECODE_REJECT(0x0e10f000, 0x0010f000),
    DECODE_SIMULATE(0xffffffff, 0xe1a0c00d, "PROBES_MOV_IP_SP"),
    DECODE_EMULATEX(0x0f900010, 0x01100000, "PROBES_DATA_PROCESSING_REG", REGS(ANY, 0, 0, 0, ANY)),
    DECODE_EMULATEX(0x0fa00010, 0x01a00000, "PROBES_DATA_PROCESSING_REG", REGS(0, ANY, 0, 0, ANY)),
    DECODE_EMULATEX(0x0e000010, 0x00000000, "PROBES_DATA_PROCESSING_REG", REGS(ANY, ANY, 0, 0, ANY)),
    DECODE_EMULATEX(0x0f900090, 0x01100010, "PROBES_DATA_PROCESSING_REG", REGS(NOPC, 0, NOPC, 0, NOPC)),
    DECODE_EMULATEX(0x0fa00090, 0x01a00010, "PROBES_DATA_PROCESSING_REG", REGS(0, NOPC, NOPC, 0, NOPC)),
    DECODE_EMULATEX(0x0e000090, 0x00000010, "PROBES_DATA_PROCESSING_REG", REGS(NOPC, NOPC, NOPC, 0, NOPC)),
    DECODE_END,
]
arm_cccc_001x_table = [
    DECODE_EMULATEX(0x0fb00000, 0x03000000, "PROBES_MOV_HALFWORD", REGS(0, NOPC, 0, 0, 0)),
    DECODE_OR(0x0fff00ff, 0x03200001),
    DECODE_EMULATE(0x0fff00ff, 0x03200004, "PROBES_SEV"),
    DECODE_SIMULATE(0x0fff00fc, 0x03200000, "PROBES_WFE"),
    DECODE_REJECT(0x0fb00000, 0x03200000),
    DECODE_REJECT(0x0e10f000, 0x0210f000),
    DECODE_EMULATEX(0x0f900000, 0x03100000, "PROBES_DATA_PROCESSING_IMM", REGS(ANY, 0, 0, 0, 0)),
    DECODE_EMULATEX(0x0fa00000, 0x03a00000, "PROBES_DATA_PROCESSING_IMM", REGS(0, ANY, 0, 0, 0)),
    DECODE_EMULATEX(0x0e000000, 0x02000000, "PROBES_DATA_PROCESSING_IMM", REGS(ANY, ANY, 0, 0, 0)),
    DECODE_END,
]
arm_cccc_0110_____xxx1_table = [
    DECODE_EMULATEX(0x0ff000f0, 0x068000b0, "PROBES_SATURATE", REGS(NOPC, NOPC, 0, 0, NOPC)),
    DECODE_OR(0x0fa00030, 0x06a00010),
    DECODE_EMULATEX(0x0fb000f0, 0x06a00030, "PROBES_SATURATE", REGS(0, NOPC, 0, 0, NOPC)),
    DECODE_EMULATEX(0x0fb00070, 0x06b00030, "PROBES_REV", REGS(0, NOPC, 0, 0, NOPC)),
    DECODE_REJECT(0x0fb00010, 0x06000010),
    DECODE_REJECT(0x0f8000f0, 0x060000b0),
    DECODE_REJECT(0x0f8000f0, 0x060000d0),
    DECODE_EMULATEX(0x0f800010, 0x06000010, "PROBES_MMI", REGS(NOPC, NOPC, 0, 0, NOPC)),
    DECODE_EMULATEX(0x0ff00030, 0x06800010, "PROBES_PACK", REGS(NOPC, NOPC, 0, 0, NOPC)),
    DECODE_REJECT(0x0fb000f0, 0x06900070),
    DECODE_EMULATEX(0x0f8f00f0, 0x068f0070, "PROBES_EXTEND", REGS(0, NOPC, 0, 0, NOPC)),
    DECODE_EMULATEX(0x0f8000f0, 0x06800070, "PROBES_EXTEND_ADD", REGS(NOPCX, NOPC, 0, 0, NOPC)),
    DECODE_END,
]
arm_cccc_0111_____xxx1_table = [
    DECODE_REJECT(0x0ff000f0, 0x07f000f0),
    DECODE_EMULATEX(0x0ff00090, 0x07400010, "PROBES_MUL_ADD_LONG", REGS(NOPC, NOPC, NOPC, 0, NOPC)),
    DECODE_OR(0x0ff0f090, 0x0700f010),
    DECODE_OR(0x0ff0f0d0, 0x0750f010),
    DECODE_EMULATEX(0x0ff0f0f0, 0x0780f010, "PROBES_MUL_ADD", REGS(NOPC, 0, NOPC, 0, NOPC)),
    DECODE_OR(0x0ff00090, 0x07000010),
    DECODE_OR(0x0ff000d0, 0x07500010),
    DECODE_EMULATEX(0x0ff000f0, 0x07800010, "PROBES_MUL_ADD", REGS(NOPC, NOPCX, NOPC, 0, NOPC)),
    DECODE_EMULATEX(0x0ff000d0, 0x075000d0, "PROBES_MUL_ADD", REGS(NOPC, NOPC, NOPC, 0, NOPC)),
    DECODE_EMULATEX(0x0fa00070, 0x07a00050, "PROBES_BITFIELD", REGS(0, NOPC, 0, 0, NOPC)),
    DECODE_EMULATEX(0x0fe0007f, 0x07c0001f, "PROBES_BITFIELD", REGS(0, NOPC, 0, 0, 0)),
    DECODE_EMULATEX(0x0fe00070, 0x07c00010, "PROBES_BITFIELD", REGS(0, NOPC, 0, 0, NOPCX)),
    DECODE_END,
]
arm_cccc_01xx_table = [
    DECODE_REJECT(0x0c40f000, 0x0440f000),
    DECODE_REJECT(0x0d200000, 0x04200000),
    DECODE_EMULATEX(0x0e100000, 0x04000000, "PROBES_STORE", REGS(NOPCWB, ANY, 0, 0, 0)),
    DECODE_EMULATEX(0x0e100000, 0x04100000, "PROBES_LOAD", REGS(NOPCWB, ANY, 0, 0, 0)),
    DECODE_EMULATEX(0x0e100000, 0x06000000, "PROBES_STORE", REGS(NOPCWB, ANY, 0, 0, NOPC)),
    DECODE_EMULATEX(0x0e100000, 0x06100000, "PROBES_LOAD", REGS(NOPCWB, ANY, 0, 0, NOPC)),
    DECODE_END,
]
arm_cccc_100x_table = [
    DECODE_CUSTOM(0x0e400000, 0x08000000, "PROBES_LDMSTM"),
    DECODE_END,
]
probes_decode_arm_table = [
    DECODE_TABLE(0xf0000000, 0xf0000000, arm_1111_table),
    DECODE_TABLE(0x0f900080, 0x01000000, arm_cccc_0001_0xx0____0xxx_table),
    DECODE_TABLE(0x0f900090, 0x01000080, arm_cccc_0001_0xx0____1xx0_table),
    DECODE_TABLE(0x0f0000f0, 0x00000090, arm_cccc_0000_____1001_table),
    DECODE_TABLE(0x0f0000f0, 0x01000090, arm_cccc_0001_____1001_table),
    DECODE_TABLE(0x0e000090, 0x00000090, arm_cccc_000x_____1xx1_table),
    DECODE_TABLE(0x0e000000, 0x00000000, arm_cccc_000x_table),
    DECODE_TABLE(0x0e000000, 0x02000000, arm_cccc_001x_table),
    DECODE_TABLE(0x0f000010, 0x06000010, arm_cccc_0110_____xxx1_table),
    DECODE_TABLE(0x0f000010, 0x07000010, arm_cccc_0111_____xxx1_table),
    DECODE_TABLE(0x0c000000, 0x04000000, arm_cccc_01xx_table),
    DECODE_TABLE(0x0e000000, 0x08000000, arm_cccc_100x_table),
    DECODE_SIMULATE(0x0e000000, 0x0a000000, "PROBES_BRANCH"),
    DECODE_REJECT(0x0c000000, 0x0c000000),
    DECODE_END,
]


# --- decode.c ---------------------------------------------------------------------------------
def is_writeback(insn: int) -> bool:
    """decode.h: P == 0 (post-indexed) or W == 1."""
    return (insn & 0x01200000) != 0x01000000


def decode_regs(insn: int, regs: int) -> bool:
    mask = 0xF
    while regs:
        t = regs & 0xF
        if t == REG_TYPE_SP:
            if (insn ^ 0xDDDDDDDD) & mask:
                return False
        elif t == REG_TYPE_PC:
            if (insn ^ 0xFFFFFFFF) & mask:
                return False
        elif t == REG_TYPE_NOSP:
            if ((insn ^ 0xDDDDDDDD) & mask) == 0:
                return False
        elif t in (REG_TYPE_NOSPPC, REG_TYPE_NOSPPCX):
            if ((insn ^ 0xDDDDDDDD) & 0xDDDDDDDD & mask) == 0:
                return False
        elif t == REG_TYPE_NOPCWB:
            if is_writeback(insn) and ((insn ^ 0xFFFFFFFF) & mask) == 0:
                return False
        elif t in (REG_TYPE_NOPC, REG_TYPE_NOPCX):
            if ((insn ^ 0xFFFFFFFF) & mask) == 0:
                return False
        regs >>= 4
        mask <<= 4
    return True


class Asi:
    def __init__(self):
        self.stack_space = 0


def probes_decode_insn(insn: int, asi: Asi, table, actions, checkers) -> str:
    """The walker: entries in order; DECODE_OR makes the following entries match; END rejects."""
    i, matched = 0, False
    while True:
        kind, mask, value, regs, payload = table[i]
        i += 1
        if kind == END:
            return INSN_REJECTED
        if not matched and (insn & mask) != value:
            continue
        if not decode_regs(insn, regs):
            return INSN_REJECTED
        if kind == TABLE:
            table, i = payload, 0
            continue
        if kind == OR:
            matched = True
            continue
        if kind == REJECT:
            return INSN_REJECTED
        if checkers is not None:
            for chk in checkers:
                fn = chk.get(payload)
                if fn is not None and fn(insn, asi) == INSN_REJECTED:
                    return INSN_REJECTED
        if kind == CUSTOM:
            return actions[payload](insn, asi)
        if kind == SIMULATE:
            return INSN_GOOD_NO_SLOT
        return INSN_GOOD                    # EMULATE with emulate == true (arch_prepare_kprobe)


# --- actions-common.c: kprobe_decode_ldmstm -----------------------------------------------------
def kprobe_decode_ldmstm(insn: int, asi: Asi) -> str:
    reglist = insn & 0xFFFF
    is_ldm = insn & 0x100000
    rn = (insn >> 16) & 0xF
    handler = None
    if rn <= 12 and (reglist & 0xE000) == 0:
        handler = "emulate_generic_r0_12_noflags"
    elif rn >= 2 and (reglist & 0x8003) == 0:
        handler = "emulate_generic_r2_14_noflags"
    elif rn >= 3 and (reglist & 0x0007) == 0:
        if is_ldm and (reglist & 0x8000):
            handler = "emulate_ldm_r3_15"
    if handler:
        return INSN_GOOD
    return INSN_GOOD_NO_SLOT                # simulate_ldm1stm1 / simulate_stm1_pc / simulate_ldm1pc


kprobes_arm_actions = {"PROBES_LDMSTM": kprobe_decode_ldmstm}


# --- checkers-common.c ----------------------------------------------------------------------------
def _popcount(x: int) -> int:
    return bin(x).count("1")


def checker_stack_use_none(insn, asi):
    asi.stack_space = 0
    return INSN_GOOD_NO_SLOT


def checker_stack_use_unknown(insn, asi):
    asi.stack_space = -1
    return INSN_GOOD_NO_SLOT


def checker_stack_use_imm_0xx(insn, asi):       # CONFIG_THUMB2_KERNEL
    asi.stack_space = insn & 0xFF
    return INSN_GOOD_NO_SLOT


def checker_stack_use_t32strd(insn, asi):       # CONFIG_THUMB2_KERNEL
    asi.stack_space = (insn & 0xFF) << 2
    return INSN_GOOD_NO_SLOT


def checker_stack_use_imm_x0x(insn, asi):       # !CONFIG_THUMB2_KERNEL
    asi.stack_space = ((insn & 0xF00) >> 4) + (insn & 0xF)
    return INSN_GOOD_NO_SLOT


def checker_stack_use_imm_xxx(insn, asi):
    asi.stack_space = insn & 0xFFF
    return INSN_GOOD_NO_SLOT


def checker_stack_use_stmdx(insn, asi):
    reglist = insn & 0xFFFF
    pbit = insn & (1 << 24)
    asi.stack_space = (_popcount(reglist) - (1 if not pbit else 0)) * 4
    return INSN_GOOD_NO_SLOT


stack_check_actions = {
    "STACK_USE_NONE": checker_stack_use_none,
    "STACK_USE_UNKNOWN": checker_stack_use_unknown,
    "STACK_USE_FIXED_0XX": checker_stack_use_imm_0xx,
    "STACK_USE_T32STRD": checker_stack_use_t32strd,
    "STACK_USE_FIXED_X0X": checker_stack_use_imm_x0x,
    "STACK_USE_FIXED_XXX": checker_stack_use_imm_xxx,
    "STACK_USE_STMDX": checker_stack_use_stmdx,
}

# --- checkers-arm.c -----------------------------------------------------------------------------
arm_check_stack_table = [
    DECODE_OR(0x0e10000f, 0x0600000d),
    DECODE_OR(0x0e1f0000, 0x060d0000),
    DECODE_OR(0x0e5000bf, 0x000000bd),
    DECODE_CUSTOM(0x0e5f00b0, 0x000d00b0, "STACK_USE_UNKNOWN"),
    DECODE_CUSTOM(0x0edf0000, 0x080d0000, "STACK_USE_STMDX"),
    DECODE_CUSTOM(0x0f9f0000, 0x050d0000, "STACK_USE_FIXED_XXX"),
    DECODE_CUSTOM(0x0fdf00b0, 0x014d00b0, "STACK_USE_FIXED_X0X"),
    DECODE_CUSTOM(0, 0, "STACK_USE_NONE"),
    DECODE_END,
]


def arm_check_stack(insn, asi):
    return probes_decode_insn(insn, asi, arm_check_stack_table, stack_check_actions, None)


arm_stack_checker = {"PROBES_LDRSTRD": arm_check_stack, "PROBES_STORE_EXTRA": arm_check_stack,
                     "PROBES_STORE": arm_check_stack, "PROBES_LDMSTM": arm_check_stack}
kprobes_arm_checkers = [arm_stack_checker]     # arm_regs_checker only fills register_usage_flags


def arm(insn: int) -> tuple[str, int]:
    asi = Asi()
    r = probes_decode_insn(insn & 0xFFFFFFFF, asi, probes_decode_arm_table, kprobes_arm_actions,
                           kprobes_arm_checkers)
    return r, asi.stack_space


def prepare_arm(insn: int) -> int:
    """arch_prepare_kprobe's return for an ARM instruction (decode, then the stack-space test)."""
    r, space = arm(insn)
    if r == INSN_REJECTED or space < 0 or space > MAX_STACK_SIZE:
        return -22
    return 0


# --- checkers-thumb.c ---------------------------------------------------------------------------
t32_check_stack_table = [
    DECODE_CUSTOM(0x00100000, 0x00100000, "STACK_USE_NONE"),
    DECODE_OR(0xff9f0fc0, 0xf80d0000),
    DECODE_CUSTOM(0xff900fcf, 0xf800000d, "STACK_USE_UNKNOWN"),
    DECODE_CUSTOM(0xff9f0e00, 0xf80d0c00, "STACK_USE_FIXED_0XX"),
    DECODE_CUSTOM(0xffdf0000, 0xe94d0000, "STACK_USE_T32STRD"),
    DECODE_CUSTOM(0xffdf0000, 0xe90d0000, "STACK_USE_STMDX"),
    DECODE_CUSTOM(0, 0, "STACK_USE_NONE"),
    DECODE_END,
]


def t32_stack(insn: int) -> int:
    """stack_space t32_check_stack computes (PROBES_T32_LDMSTM / _LDRDSTRD / _LDRSTR opcodes)."""
    asi = Asi()
    probes_decode_insn(insn & 0xFFFFFFFF, asi, t32_check_stack_table, stack_check_actions, None)
    return asi.stack_space


def t16_stack(insn: int) -> int:
    """t16_check_stack: PROBES_T16_PUSH."""
    return _popcount(insn & 0x1FF) * 4


def thumb_stack_refused(space: int) -> bool:
    return space < 0 or space > MAX_STACK_SIZE
