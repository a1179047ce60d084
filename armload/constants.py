"""ELF and ARM numbers, named as in the ABI documents (aaelf32, elf.h)."""
from __future__ import annotations

import functools
from enum import IntEnum

EM_ARM = 40
ET_REL = 1

SHT_NULL, SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB, SHT_RELA = 0, 1, 2, 3, 4
SHT_NOBITS, SHT_REL = 8, 9
SHT_ARM_EXIDX = 0x70000001

SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR = 0x1, 0x2, 0x4
SHF_RO_AFTER_INIT = 0x00200000          # kernel-internal flag (module.h)

SHN_UNDEF, SHN_LORESERVE, SHN_ABS, SHN_COMMON = 0, 0xFF00, 0xFFF1, 0xFFF2
SHN_LIVEPATCH = 0xFF20

STB_LOCAL, STB_GLOBAL, STB_WEAK = 0, 1, 2
STT_NOTYPE, STT_OBJECT, STT_FUNC, STT_SECTION, STT_FILE = 0, 1, 2, 3, 4

EF_ARM_EABI_MASK = 0xFF000000


class R(IntEnum):
    """R_ARM_* relocation numbers (arch/arm/include/asm/elf.h)."""
    R_ARM_NONE = 0
    R_ARM_PC24 = 1
    R_ARM_ABS32 = 2
    R_ARM_REL32 = 3
    R_ARM_THM_CALL = 10
    R_ARM_PLT32 = 27
    R_ARM_CALL = 28
    R_ARM_JUMP24 = 29
    R_ARM_THM_JUMP24 = 30
    R_ARM_TARGET1 = 38
    R_ARM_V4BX = 40
    R_ARM_PREL31 = 42
    R_ARM_MOVW_ABS_NC = 43
    R_ARM_MOVT_ABS = 44
    R_ARM_MOVW_PREL_NC = 45
    R_ARM_MOVT_PREL = 46
    R_ARM_THM_MOVW_ABS_NC = 47
    R_ARM_THM_MOVT_ABS = 48
    R_ARM_THM_MOVW_PREL_NC = 49
    R_ARM_THM_MOVT_PREL = 50
    R_ARM_THM_JUMP19 = 51
    R_ARM_ALU_PC_G0_NC = 57
    R_ARM_ALU_PC_G1_NC = 59
    R_ARM_LDR_PC_G2 = 63
    R_ARM_THM_JUMP11 = 102
    R_ARM_THM_JUMP8 = 103


ARM_BRANCHES = (R.R_ARM_PC24, R.R_ARM_CALL, R.R_ARM_JUMP24)
THUMB_BRANCHES = (R.R_ARM_THM_CALL, R.R_ARM_THM_JUMP24)
BRANCH_TYPES = ARM_BRANCHES + THUMB_BRANCHES


@functools.lru_cache(maxsize=256)
def reloc_name(rtype: int) -> str:
    """R_ARM_* name of a type (cached: reports name hundreds of thousands of relocations)."""
    try:
        return R(rtype).name
    except ValueError:
        return f"R_ARM_{rtype}"
