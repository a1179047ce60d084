"""Each relocation row alone: codec round trips, the kernel's range bounds, refusals, messages."""
import numpy as np
import pytest

from armload.kernel.config import KernelConfig
from armload.constants import R
from armload.loader.relocate import (RELOCS, alu_group_one, arm_branch_decode, arm_branch_encode, arm_mov_decode,
                              arm_mov_encode, get_group_rem, ldr_g2_one, prel31_decode, prel31_encode, spec_for,
                              thm_branch_decode, thm_branch_encode, thm_mov_decode, thm_mov_encode)

A = lambda *v: np.array(v, dtype=np.int64)          # noqa: E731
W = lambda *v: np.array(v, dtype=np.uint32)         # noqa: E731


@pytest.mark.parametrize("off", [-0x01FFFFFC, -8, -4, 0, 4, 0x1234, 0x01FFFFFC])
def test_arm_branch_round_trip(off):
    bl = W(0xEBFFFFFE)
    assert arm_branch_decode(arm_branch_encode(bl, A(off)))[0] == off
    assert arm_branch_encode(bl, A(off))[0] >> 24 == 0xEB            # cond + L bit kept


@pytest.mark.parametrize("off", [-0x00FFFFFE, -4, 0, 2, 0x123456, 0x00FFFFFE])
def test_thumb_branch_round_trip(off):
    bl = W(0xFFFEF7FF)                                               # bl . (A = -4): F7FF FFFE
    assert thm_branch_decode(bl)[0] == -4
    enc = thm_branch_encode(bl, A(off))
    assert thm_branch_decode(enc)[0] == off
    assert (enc[0] >> 16) & 0xD000 == 0xD000                          # still BL, not BLX


@pytest.mark.parametrize("v", [0, 1, 0x7FFF, -0x8000, -1, 0x1234])
def test_mov_round_trip(v):
    assert arm_mov_decode(arm_mov_encode(W(0xE3000000), A(v)))[0] == v
    assert thm_mov_decode(thm_mov_encode(W(0x0000F240), A(v)))[0] == v


def test_prel31_keeps_bit31():
    w = W(0x80000000)
    enc = prel31_encode(w, A(-0x10))
    assert enc[0] >> 31 == 1 and prel31_decode(enc)[0] == -0x10


def _branch(rtype, S, P, word, config=KernelConfig()):
    """Run one branch through the relocation driver with no PLTs."""
    from armload.loader.relocate import SectionTarget, SymbolValues, apply_rel_section
    mem = np.zeros(16, dtype=np.uint8)
    mem[:4] = np.frombuffer(np.uint32(word).tobytes(), np.uint8)
    syms = SymbolValues(value=W(0, S, 0), stype=np.array([0, 2, 0], np.uint8), names=["", "f", ""])
    tgt = SectionTarget(1, ".text", P, 16, mem, 0)
    res = apply_rel_section("m", 2, ".rel.text", W(0), W((1 << 8) | rtype), tgt, syms, 2,
                            config.with_(module_plts=False), None, "m.ko")
    return int(np.frombuffer(mem[:4].tobytes(), "<u4")[0]), res


def test_arm_branch_range_lower_bound_is_exclusive():
    from armload.errors import RelocationError
    P = 0xBF000000
    # off = S - P + A(-8): +0x01FFFFFC fits; -0x02000000 is encodable but the kernel refuses it.
    w, _ = _branch(R.R_ARM_CALL, P + 8 + 0x01FFFFFC, P, 0xEBFFFFFE)
    assert w & 0xFFFFFF == 0x7FFFFF
    w, _ = _branch(R.R_ARM_CALL, P + 8 - 0x01FFFFFC, P, 0xEBFFFFFE)
    assert w & 0xFFFFFF == 0x800001
    with pytest.raises(RelocationError, match=r"m: section 2 reloc 0 sym 'f': relocation 28 out of range "
                                              r"\(0xbf000000 -> 0xbd000008\)"):
        _branch(R.R_ARM_CALL, P + 8 - 0x02000000, P, 0xEBFFFFFE)
    with pytest.raises(RelocationError, match="out of range"):
        _branch(R.R_ARM_JUMP24, P + 8 + 0x02000000, P, 0xEAFFFFFE)


def test_thumb_branch_range_and_interworking():
    from armload.errors import RelocationError
    cfg = KernelConfig(thumb2=True)
    P = 0xBF800000
    w, _ = _branch(R.R_ARM_THM_CALL, (P + 4 + 0x00FFFFFE) | 1, P, 0xFFFEF7FF, cfg)
    assert thm_branch_decode(W(w))[0] == 0x00FFFFFE
    with pytest.raises(RelocationError, match="out of range"):
        _branch(R.R_ARM_THM_CALL, P + 3 - 0x01000000, P, 0xFFFEF7FF, cfg)   # off = -0x1000001
    with pytest.raises(RelocationError, match=r"unsupported interworking call \(Thumb -> ARM\)"):
        _branch(R.R_ARM_THM_CALL, P + 0x100, P, 0xFFFEF7FF, cfg)       # STT_FUNC, even: ARM


def test_arm_to_thumb_is_refused():
    from armload.errors import RelocationError
    with pytest.raises(RelocationError, match=r"unsupported interworking call \(ARM -> Thumb\)"):
        _branch(R.R_ARM_CALL, 0xBF000101, 0xBF000000, 0xEBFFFFFE)


def test_thumb_types_unknown_on_arm_kernel():
    from armload.errors import RelocationError
    assert spec_for(R.R_ARM_THM_CALL, KernelConfig()) is None
    assert spec_for(R.R_ARM_THM_CALL, KernelConfig(thumb2=True)) is RELOCS[R.R_ARM_THM_CALL]
    assert spec_for(R.R_ARM_ALU_PC_G0_NC, KernelConfig(group_relocs=False)) is None
    with pytest.raises(RelocationError, match=r"m: unknown relocation: 10 .*--thumb2"):
        _branch(R.R_ARM_THM_CALL, 0xBF000101, 0xBF000000, 0xFFFEF7FF)
    for t in (R.R_ARM_PLT32, R.R_ARM_THM_JUMP19, R.R_ARM_THM_JUMP11, R.R_ARM_THM_JUMP8, 99):
        assert spec_for(t, KernelConfig(thumb2=True)) is None


def test_v4bx_rewrites_to_mov_pc():
    from armload.loader.relocate import _v4bx
    w, _ = _v4bx(W(0x112FFF1E), None, None)          # bxne lr
    assert w[0] == 0x11A0F00E                         # movne pc, lr


def test_group_remainder_chunks():
    """get_group_rem(): 8-bit chunks at even rotations; G0 keeps all, G1 drops the first chunk."""
    v = 0x00345680
    assert get_group_rem(0, v) == (10, v)
    shift1, rem1 = get_group_rem(1, v)
    assert rem1 == v & (0xFFFFFF >> 10) and shift1 == 18
    assert get_group_rem(2, v)[1] == 0          # two chunks cover 16 significant bits here
    # ALU G0 on "add r0, pc, #0": immediate is the top chunk of S - P, rotated into imm12.
    w0 = alu_group_one(0xE28F0000, 0x1000 + v, 0x1000, 0)
    rot, imm = (w0 >> 8) & 0xF, w0 & 0xFF
    assert ((imm >> (2 * rot)) | (imm << (32 - 2 * rot))) & 0xFFFFFFFF == v & ~(0xFFFFFF >> 10) & 0xFFFFFFFF
    w2, bad = ldr_g2_one(0xE5901000, 0x1000 + 0x123456789 % 0x1000, 0x1000)
    assert not bad
    _, bad = ldr_g2_one(0xE5901000, 0x1000 + 0x12345678, 0x1000)   # remainder 0x1678 > 0xfff
    assert bad
