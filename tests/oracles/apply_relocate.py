"""apply_relocate() of arch/arm/kernel/module.c (v6.1), one relocation at a time, without PLTs.

Ported statement by statement from the C (s32 `offset`, u32 `tmp`/`upper`/`lower`), with the
CONFIG_THUMB2_KERNEL and CONFIG_ARM_HAS_GROUP_RELOCS cases. Returns the new 32-bit word at the
place (a Thumb pair as upper | lower << 16) or raises Refused with the kernel's reason.
"""
from __future__ import annotations

M32 = 0xFFFFFFFF
STT_FUNC = 2
(R_ARM_NONE, R_ARM_PC24, R_ARM_ABS32, R_ARM_REL32, R_ARM_THM_CALL, R_ARM_TARGET1, R_ARM_CALL, R_ARM_JUMP24,
 R_ARM_THM_JUMP24, R_ARM_V4BX, R_ARM_PREL31, R_ARM_MOVW_ABS_NC, R_ARM_MOVT_ABS, R_ARM_MOVW_PREL_NC,
 R_ARM_MOVT_PREL, R_ARM_THM_MOVW_ABS_NC, R_ARM_THM_MOVT_ABS, R_ARM_THM_MOVW_PREL_NC, R_ARM_THM_MOVT_PREL,
 R_ARM_ALU_PC_G0_NC, R_ARM_ALU_PC_G1_NC, R_ARM_LDR_PC_G2) = (
    0, 1, 2, 3, 10, 38, 28, 29, 30, 40, 42, 43, 44, 45, 46, 47, 48, 49, 50, 57, 59, 63)
BIT22, BIT23 = 1 << 22, 1 << 23


class Refused(Exception):
    """The kernel's pr_err + -ENOEXEC: reason is 'out of range', 'ARM -> Thumb', 'Thumb -> ARM' or
    'unknown relocation'."""


def s32(x: int) -> int:
    x &= M32
    return x - (1 << 32) if x & 0x80000000 else x


def fls0(v: int) -> int:
    """__fls(): index of the most significant set bit (v != 0)."""
    return v.bit_length() - 1


def get_group_rem(group: int, offset: int) -> tuple[int, int]:
    """static u32 get_group_rem(u32 group, u32 *offset): (shift, *offset)."""
    val = offset & M32
    while True:                                   # do { ... } while (group--);
        shift = ((31 - fls0(val)) & ~1) if val else 32
        offset = val
        if not val:
            break
        val &= 0xFFFFFF >> shift
        g = group
        group -= 1
        if not g:
            break
    return shift, offset


def ror32(word: int, shift: int) -> int:
    shift &= 31
    return ((word >> shift) | (word << (32 - shift))) & M32 if shift else word


def apply_relocate(rtype: int, word: int, S: int, loc: int, st_type: int = STT_FUNC, *,
                   thumb2: bool = True, group_relocs: bool = True) -> int:
    """One iteration of the loop in apply_relocate(); S = sym->st_value, loc = the place."""
    S &= M32
    loc &= M32
    word &= M32
    if rtype == R_ARM_NONE:
        return word
    if rtype in (R_ARM_ABS32, R_ARM_TARGET1):
        return (word + S) & M32
    if rtype in (R_ARM_PC24, R_ARM_CALL, R_ARM_JUMP24):
        if S & 3:
            raise Refused("ARM -> Thumb")
        offset = (word & 0x00FFFFFF) << 2
        if offset & 0x02000000:
            offset -= 0x04000000
        offset = s32(offset + S - loc)
        if offset <= s32(0xFE000000) or offset >= 0x02000000:
            raise Refused("out of range")
        offset >>= 2
        offset &= 0x00FFFFFF
        return (word & 0xFF000000) | offset
    if rtype == R_ARM_V4BX:
        return (word & 0xF000000F) | 0x01A0F000
    if rtype == R_ARM_PREL31:
        offset = s32(word << 1) >> 1              # (*(s32 *)loc << 1) >> 1
        offset = s32(offset + S - loc)
        if offset >= 0x40000000 or offset < -0x40000000:
            raise Refused("out of range")
        return (word & 0x80000000) | (offset & 0x7FFFFFFF)
    if rtype == R_ARM_REL32:
        return (word + S - loc) & M32
    if rtype in (R_ARM_MOVW_ABS_NC, R_ARM_MOVT_ABS, R_ARM_MOVW_PREL_NC, R_ARM_MOVT_PREL):
        offset = tmp = word
        offset = ((offset & 0xF0000) >> 4) | (offset & 0xFFF)
        offset = (offset ^ 0x8000) - 0x8000
        offset = s32(offset + S)
        if rtype in (R_ARM_MOVT_PREL, R_ARM_MOVW_PREL_NC):
            offset = s32(offset - loc)
        if rtype in (R_ARM_MOVT_ABS, R_ARM_MOVT_PREL):
            offset >>= 16
        tmp &= 0xFFF0F000
        tmp |= ((offset & 0xF000) << 4) | (offset & 0x0FFF)
        return tmp & M32
    if group_relocs and rtype in (R_ARM_ALU_PC_G0_NC, R_ARM_ALU_PC_G1_NC):
        group = 0 if rtype == R_ARM_ALU_PC_G0_NC else 1
        tmp = word
        offset = ror32(tmp & 0xFF, (tmp & 0xF00) >> 7)
        if tmp & BIT22:
            offset = -offset
        offset = s32(offset + S - loc)
        if offset < 0:
            offset = s32(-offset)
            tmp = (tmp & ~BIT23) | BIT22          # SUB opcode
        else:
            tmp = (tmp & ~BIT22) | BIT23          # ADD opcode
        shift, offset = get_group_rem(group, offset)
        if shift < 24:
            offset >>= 24 - shift
            offset |= (shift + 8) << 7
        return ((tmp & ~0xFFF) | offset) & M32
    if group_relocs and rtype == R_ARM_LDR_PC_G2:
        tmp = word
        offset = tmp & 0xFFF
        if ~tmp & BIT23:                          # U bit cleared?
            offset = -offset
        offset = s32(offset + S - loc)
        if offset < 0:
            offset = s32(-offset)
            tmp &= ~BIT23
        else:
            tmp |= BIT23
        _, offset = get_group_rem(2, offset)
        if offset > 0xFFF:
            raise Refused("out of range")
        return ((tmp & ~0xFFF) | offset) & M32
    if thumb2 and rtype in (R_ARM_THM_CALL, R_ARM_THM_JUMP24):
        if st_type == STT_FUNC and not (S & 1):
            raise Refused("Thumb -> ARM")
        upper, lower = word & 0xFFFF, word >> 16
        sign = (upper >> 10) & 1
        j1 = (lower >> 13) & 1
        j2 = (lower >> 11) & 1
        offset = ((sign << 24) | ((~(j1 ^ sign) & 1) << 23) | ((~(j2 ^ sign) & 1) << 22)
                  | ((upper & 0x03FF) << 12) | ((lower & 0x07FF) << 1))
        if offset & 0x01000000:
            offset -= 0x02000000
        offset = s32(offset + S - loc)
        if offset <= s32(0xFF000000) or offset >= 0x01000000:
            raise Refused("out of range")
        sign = (offset >> 24) & 1
        j1 = sign ^ (~(offset >> 23) & 1)
        j2 = sign ^ (~(offset >> 22) & 1)
        upper = (upper & 0xF800) | (sign << 10) | ((offset >> 12) & 0x03FF)
        lower = (lower & 0xD000) | (j1 << 13) | (j2 << 11) | ((offset >> 1) & 0x07FF)
        return upper | (lower << 16)
    if thumb2 and rtype in (R_ARM_THM_MOVW_ABS_NC, R_ARM_THM_MOVT_ABS, R_ARM_THM_MOVW_PREL_NC,
                            R_ARM_THM_MOVT_PREL):
        upper, lower = word & 0xFFFF, word >> 16
        offset = (((upper & 0x000F) << 12) | ((upper & 0x0400) << 1)
                  | ((lower & 0x7000) >> 4) | (lower & 0x00FF))
        offset = (offset ^ 0x8000) - 0x8000
        offset = s32(offset + S)
        if rtype in (R_ARM_THM_MOVT_PREL, R_ARM_THM_MOVW_PREL_NC):
            offset = s32(offset - loc)
        if rtype in (R_ARM_THM_MOVT_ABS, R_ARM_THM_MOVT_PREL):
            offset >>= 16
        upper = (upper & 0xFBF0) | ((offset & 0xF000) >> 12) | ((offset & 0x0800) >> 1)
        lower = (lower & 0x8F00) | ((offset & 0x0700) << 4) | (offset & 0x00FF)
        return upper | (lower << 16)
    raise Refused("unknown relocation")
