"""Both sides of every range and interworking check of apply_relocate() (arch/arm/kernel/module.c,
v6.1), ARM and Thumb-2, each expected value worked out from the kernel's C (see the comments),
and the same cases through the port in tests/oracles/apply_relocate.py."""
import numpy as np
import pytest

from armload.kernel.config import KernelConfig
from armload.errors import RelocationError
from armload.loader.relocate import SectionTarget, SymbolValues, apply_rel_section
from oracles.apply_relocate import Refused, apply_relocate

STT_NOTYPE, STT_OBJECT, STT_FUNC, STT_SECTION = 0, 1, 2, 3
R_ARM_PC24, R_ARM_CALL, R_ARM_JUMP24, R_ARM_THM_CALL, R_ARM_THM_JUMP24 = 1, 28, 29, 10, 30
R_ARM_PREL31, R_ARM_LDR_PC_G2 = 42, 63
R_ARM_MOVW_ABS_NC, R_ARM_MOVT_ABS, R_ARM_MOVW_PREL_NC, R_ARM_MOVT_PREL = 43, 44, 45, 46
R_ARM_THM_MOVW_ABS_NC, R_ARM_THM_MOVT_ABS, R_ARM_THM_MOVW_PREL_NC, R_ARM_THM_MOVT_PREL = 47, 48, 49, 50
CFG = KernelConfig(thumb2=True, module_plts=False)
ARM_BL, ARM_B, ARM_PC24 = 0xEBFFFFFE, 0xEAFFFFFE, 0x0AFFFFFE    # bl/b/beq .  (A = -8)
THM_BL, THM_BW = 0xFFFEF7FF, 0xBFFEF7FF                          # bl/b.w .    (A = -4)
ARM_BRANCHES = [(R_ARM_CALL, ARM_BL), (R_ARM_JUMP24, ARM_B), (R_ARM_PC24, ARM_PC24)]
THM_BRANCHES = [(R_ARM_THM_CALL, THM_BL), (R_ARM_THM_JUMP24, THM_BW)]


def drive(rtype, word, S, P, stype=STT_FUNC, config=CFG, *, sym=1, symcount=2, r_offset=0, size=16):
    """armload's apply_rel_section on one entry; returns the word written at the place."""
    S &= 0xFFFFFFFF
    mem = np.zeros(size + 8, dtype=np.uint8)
    mem[r_offset:r_offset + 4] = np.frombuffer(np.uint32(word).tobytes(), np.uint8)
    syms = SymbolValues(value=np.array([0, S, S], np.uint32), stype=np.array([0, stype, stype], np.uint8),
                        names=["", "f", "g"])
    tgt = SectionTarget(1, ".text", P, size, mem, 0)
    apply_rel_section("m", 2, ".rel.text", np.array([r_offset], np.uint32),
                      np.array([(sym << 8) | rtype], np.uint32), tgt, syms, symcount, config, None, "m.ko")
    return int(np.frombuffer(mem[r_offset:r_offset + 4].tobytes(), "<u4")[0])


def both(rtype, word, S, P, stype=STT_FUNC):
    """armload and the kernel port must agree: same word, or both refuse for the same reason."""
    try:
        want = apply_relocate(rtype, word, S, P, stype)
    except Refused as e:
        with pytest.raises(RelocationError) as ei:
            drive(rtype, word, S, P, stype)
        reason = str(e)
        assert (("out of range" in str(ei.value)) if reason == "out of range"
                else (f"unsupported interworking call ({reason})" in str(ei.value))), (reason, str(ei.value))
        return reason
    got = drive(rtype, word, S, P, stype)
    assert got == want, f"{got:#010x} != kernel {want:#010x}"
    return got


# --- ARM B/BL: `offset <= (s32)0xfe000000 || offset >= (s32)0x02000000` -> out of range ----------
P = 0xBF000000


@pytest.mark.parametrize("rtype,word", ARM_BRANCHES)
@pytest.mark.parametrize("off,imm24", [(0x01FFFFFC, 0x7FFFFF), (-0x01FFFFFC, 0x800001), (0, 0), (-8, 0xFFFFFE)])
def test_arm_branch_inside(rtype, word, off, imm24):
    w = drive(rtype, word, P + 8 + off, P)          # offset = A(-8) + S - P
    assert w == (word & 0xFF000000) | imm24 == both(rtype, word, P + 8 + off, P)


@pytest.mark.parametrize("rtype,word", ARM_BRANCHES)
@pytest.mark.parametrize("off", [0x02000000, 0x02000004, -0x02000000, -0x02000004, 0x7FFFFFF8])
def test_arm_branch_outside(rtype, word, off):
    """-0x02000000 is encodable (imm24 0x800000) but the kernel's lower bound is exclusive."""
    with pytest.raises(RelocationError, match=f"relocation {rtype} out of range"):
        drive(rtype, word, P + 8 + off, P)
    assert both(rtype, word, P + 8 + off, P) == "out of range"


# --- ARM interworking: `if (sym->st_value & 3)` -> (ARM -> Thumb), whatever the symbol type -------
@pytest.mark.parametrize("rtype,word", ARM_BRANCHES)
@pytest.mark.parametrize("low", [1, 2, 3])
@pytest.mark.parametrize("stype", [STT_FUNC, STT_NOTYPE])
def test_arm_interworking_refused(rtype, word, low, stype):
    with pytest.raises(RelocationError, match=r"sym 'f': unsupported interworking call \(ARM -> Thumb\)"):
        drive(rtype, word, P + 0x100 + low, P, stype)
    # checked before the range: a far, odd target is refused as interworking
    with pytest.raises(RelocationError, match=r"interworking call \(ARM -> Thumb\)"):
        drive(rtype, word, P + 0x04000000 + low, P, stype)


@pytest.mark.parametrize("rtype,word", ARM_BRANCHES)
@pytest.mark.parametrize("stype", [STT_FUNC, STT_NOTYPE])
def test_arm_aligned_target_accepted(rtype, word, stype):
    assert drive(rtype, word, P + 0x100, P, stype) == (word & 0xFF000000) | ((0x100 - 8) >> 2)


# --- Thumb-2 B.W/BL: `offset <= (s32)0xff000000 || offset >= (s32)0x01000000` -----------------------
TP = 0xBF800000


@pytest.mark.parametrize("rtype,word", THM_BRANCHES)
@pytest.mark.parametrize("off,stype", [(0x00FFFFFF, STT_FUNC), (-0x00FFFFFF, STT_FUNC), (1, STT_FUNC),
                                       (0x00FFFFFE, STT_NOTYPE), (-0x00FFFFFE, STT_NOTYPE), (0, STT_OBJECT)])
def test_thumb_branch_inside(rtype, word, off, stype):
    w = drive(rtype, word, TP + 4 + off, TP, stype)  # offset = A(-4) + S - P
    assert w == both(rtype, word, TP + 4 + off, TP, stype)
    # decode the written S:I1:I2:imm10:imm11 by hand (ARM ARM, T4 encoding)
    upper, lower = w & 0xFFFF, w >> 16
    s, j1, j2 = (upper >> 10) & 1, (lower >> 13) & 1, (lower >> 11) & 1
    i1, i2 = 1 ^ j1 ^ s, 1 ^ j2 ^ s
    v = (s << 24) | (i1 << 23) | (i2 << 22) | ((upper & 0x3FF) << 12) | ((lower & 0x7FF) << 1)
    assert v - (1 << 25) * s == off & ~1
    assert lower & 0xD000 == (word >> 16) & 0xD000 and upper & 0xF800 == 0xF000   # still BL / B.W


@pytest.mark.parametrize("rtype,word", THM_BRANCHES)
@pytest.mark.parametrize("off,stype", [(0x01000001, STT_FUNC), (-0x01000001, STT_FUNC),
                                       (0x01000000, STT_NOTYPE), (-0x01000000, STT_NOTYPE),
                                       (-0x01000002, STT_OBJECT)])
def test_thumb_branch_outside(rtype, word, off, stype):
    with pytest.raises(RelocationError, match=f"relocation {rtype} out of range"):
        drive(rtype, word, TP + 4 + off, TP, stype)
    assert both(rtype, word, TP + 4 + off, TP, stype) == "out of range"


# --- Thumb interworking: `ELF32_ST_TYPE(sym->st_info) == STT_FUNC && !(sym->st_value & 1)` ---------
@pytest.mark.parametrize("rtype,word", THM_BRANCHES)
@pytest.mark.parametrize("S", [TP + 0x100, TP + 0x102, TP + 0x02000000])
def test_thumb_interworking_refused(rtype, word, S):
    with pytest.raises(RelocationError, match=r"sym 'f': unsupported interworking call \(Thumb -> ARM\)"):
        drive(rtype, word, S, TP, STT_FUNC)
    assert both(rtype, word, S, TP, STT_FUNC) == "Thumb -> ARM"


@pytest.mark.parametrize("rtype,word", THM_BRANCHES)
@pytest.mark.parametrize("stype", [STT_NOTYPE, STT_OBJECT, STT_SECTION])
def test_thumb_even_non_function_assumed_thumb(rtype, word, stype):
    """Non-function symbols have no ARM/Thumb disposition: no refusal, offset as is."""
    assert drive(rtype, word, TP + 0x100, TP, stype) == both(rtype, word, TP + 0x100, TP, stype)


def test_thumb_branch_types_need_thumb2_kernel():
    with pytest.raises(RelocationError, match="unknown relocation: 10"):
        drive(R_ARM_THM_CALL, THM_BL, TP + 0x101, TP, config=CFG.with_(thumb2=False))


# --- PREL31: `offset >= 0x40000000 || offset < -0x40000000` ------------------------------------------
@pytest.mark.parametrize("word,delta,want", [
    (0x00000000, 0x3FFFFFFF, 0x3FFFFFFF),          # largest positive
    (0x00000000, -0x40000000, 0x40000000),         # lower bound inclusive: -2^30 & 0x7fffffff
    (0x80000000, 0x10, 0x80000010),                # bit 31 of the place is kept
    (0x7FFFFFFF, 0x10, 0x0000000F),                # addend -1 (31-bit sign extension)
    (0x40000000, 0x3FFFFFFF, 0x7FFFFFFF),          # addend -2^30 + (2^30 - 1) = -1
])
def test_prel31_inside(word, delta, want):
    S = (0xBF000000 + delta) & 0xFFFFFFFF
    assert drive(R_ARM_PREL31, word, S, 0xBF000000) == want == both(R_ARM_PREL31, word, S, 0xBF000000)


@pytest.mark.parametrize("word,delta", [(0, 0x40000000), (0, -0x40000001), (0x3FFFFFFF, 1), (0x40000000, -1),
                                        (0, 0x7FFFFFFF)])
def test_prel31_outside(word, delta):
    S = (0xBF000000 + delta) & 0xFFFFFFFF
    with pytest.raises(RelocationError, match="relocation 42 out of range"):
        drive(R_ARM_PREL31, word, S, 0xBF000000)
    assert both(R_ARM_PREL31, word, S, 0xBF000000) == "out of range"


# --- MOVW/MOVT: no range check at all; imm16 sign-extended from bit 15, MOVT takes bits 31..16 ------
@pytest.mark.parametrize("rtype,word,S,P,want", [
    (R_ARM_MOVW_ABS_NC, 0xE3000000, 0xDEADBEEF, 0, 0xE30B0EEF),      # movw r0, #0xbeef
    (R_ARM_MOVT_ABS, 0xE3400000, 0xDEADBEEF, 0, 0xE34D0EAD),         # movt r0, #0xdead
    (R_ARM_MOVT_ABS, 0xE3480000, 0x00018000, 0, 0xE3400001),         # A = -0x8000: 0x10000 >> 16
    (R_ARM_MOVT_ABS, 0xE3470FFF, 0x00018000, 0, 0xE3400001),         # A = +0x7fff: 0x1ffff >> 16
    (R_ARM_MOVT_ABS, 0xE3470FFF, 0x00018001, 0, 0xE3400002),         # 0x20000 >> 16
    (R_ARM_MOVT_ABS, 0xE3400000, 0xFFFFFFFF, 0, 0xE34F0FFF),         # no overflow check
    (R_ARM_MOVW_PREL_NC, 0xE3000000, 0xBF000000, 0xBF000010, 0xE30F0FF0),   # -0x10 & 0xffff
    (R_ARM_MOVT_PREL, 0xE3400000, 0xBF000000, 0xBF000010, 0xE34F0FFF),      # -0x10 >> 16 = -1
    (R_ARM_MOVT_PREL, 0xE3400000, 0x00000000, 0x80000000, 0xE3480000),      # s32 wrap: 0x80000000
])
def test_arm_movw_movt(rtype, word, S, P, want):
    assert drive(rtype, word, S, P) == want == both(rtype, word, S, P)


def _thm_mov(imm16, movt=False, rd=0):
    """T3 MOVW / T1 MOVT encoding by hand: imm4:i:imm3:imm8."""
    upper = (0xF2C0 if movt else 0xF240) | ((imm16 >> 11) & 1) << 10 | (imm16 >> 12)
    lower = ((imm16 >> 8) & 7) << 12 | rd << 8 | (imm16 & 0xFF)
    return upper | lower << 16


@pytest.mark.parametrize("rtype,imm,S,P,want,movt", [
    (R_ARM_THM_MOVW_ABS_NC, 0, 0xDEADBEEF, 0, 0xBEEF, False),
    (R_ARM_THM_MOVT_ABS, 0, 0xDEADBEEF, 0, 0xDEAD, True),
    (R_ARM_THM_MOVT_ABS, 0x8000, 0x00018000, 0, 0x0001, True),
    (R_ARM_THM_MOVT_ABS, 0x7FFF, 0x00018001, 0, 0x0002, True),
    (R_ARM_THM_MOVW_PREL_NC, 0, 0xBF000000, 0xBF000010, 0xFFF0, False),
    (R_ARM_THM_MOVT_PREL, 0, 0xBF000000, 0xBF000010, 0xFFFF, True),
])
def test_thumb_movw_movt(rtype, imm, S, P, want, movt):
    w = _thm_mov(imm, movt)
    assert drive(rtype, w, S, P) == _thm_mov(want, movt) == both(rtype, w, S, P)


# --- LDR_PC_G2: out of range when the remainder after two 8-bit groups is > 0xfff --------------------
# get_group_rem(2): each round removes the 8 bits below the top set bit (at an even shift).
# 0x7f7f0fff: G0 takes 0x7f000000 (shift 0), G1 0x7f0000 (shift 8), remainder 0xfff (fits);
# 0x00ff0fff: G0 takes 0xff0000, G1 0xff0, remainder 0xf; 0xfff: G0 0xff0, G1 0xf, remainder 0.
@pytest.mark.parametrize("delta,want", [(0x7F7F0FFF, 0xE5901FFF), (-0x7F7F0FFF, 0xE5101FFF), (0xFFF, 0xE5901000),
                                        (0x00FF0FFF, 0xE590100F), (0, 0xE5901000)])
def test_ldr_pc_g2_inside(delta, want):
    S = (0xBF000000 + delta) & 0xFFFFFFFF
    assert drive(R_ARM_LDR_PC_G2, 0xE5901000, S, 0xBF000000) == want
    assert both(R_ARM_LDR_PC_G2, 0xE5901000, S, 0xBF000000) == want


@pytest.mark.parametrize("delta", [0x7F7F1000, -0x7F7F1000, 0x40401000, 0x7FFFFFFF])   # remainder > 0xfff
def test_ldr_pc_g2_outside(delta):
    S = (0xBF000000 + delta) & 0xFFFFFFFF
    with pytest.raises(RelocationError, match="relocation 63 out of range"):
        drive(R_ARM_LDR_PC_G2, 0xE5901000, S, 0xBF000000)
    assert both(R_ARM_LDR_PC_G2, 0xE5901000, S, 0xBF000000) == "out of range"


# --- the loop's own checks: symbol index and place ----------------------------------------------
def test_symbol_index_bound():
    """`offset > symsec->sh_size / sizeof(Elf32_Sym)`: the index equal to the count is accepted."""
    drive(2, 0, 0x1000, P, sym=2, symcount=2)
    with pytest.raises(RelocationError, match="bad relocation sym offset"):
        drive(2, 0, 0x1000, P, sym=3, symcount=2)


def test_place_bound():
    """`rel->r_offset > dstsec->sh_size - sizeof(u32)`: the last whole word is accepted."""
    assert drive(2, 0, 0x1000, P, r_offset=12, size=16) == 0x1000
    with pytest.raises(RelocationError, match="out of bounds relocation, offset 13 size 16"):
        drive(2, 0, 0x1000, P, r_offset=13, size=16)


@pytest.mark.parametrize("word", [0xE5101008, 0xE5901010, 0xE5101FFF, 0xE59F1004])   # U=0/1 addends in place
@pytest.mark.parametrize("delta", [0, 0x8, -0x8, 0x10, -0x1000, 0x7F7F0FF0, -0x7F7F0FF0, 0x7F7F1FF8])
def test_ldr_pc_g2_addend_in_the_place_with_either_sign(word, delta):
    """The addend is imm12 with the sign of U (bit 23); the result's U follows the sign of the sum."""
    S = (0xBF000000 + delta) & 0xFFFFFFFF
    got = both(R_ARM_LDR_PC_G2, word, S, 0xBF000000)
    if got != "out of range":
        assert got & ~0x00800FFF == word & ~0x00800FFF          # only U and imm12 change
