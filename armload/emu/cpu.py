"""The emulated CPU's names: registers in the kernel's pt_regs order, and the sentinel return address.

Shared by the machine, the oops printer and the probes, none of which needs the others for this.
"""
from __future__ import annotations

from unicorn import arm_const as A

SENTINEL = 0xFFFF0F00             # return address of every call: in the vectors page
SENTINEL_PAGE = 0xFFFF0000

REG_NAMES = ["r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9", "r10", "r11", "r12",
             "sp", "lr", "pc", "cpsr"]
REG_IDS = {"r0": A.UC_ARM_REG_R0, "r1": A.UC_ARM_REG_R1, "r2": A.UC_ARM_REG_R2, "r3": A.UC_ARM_REG_R3,
           "r4": A.UC_ARM_REG_R4, "r5": A.UC_ARM_REG_R5, "r6": A.UC_ARM_REG_R6, "r7": A.UC_ARM_REG_R7,
           "r8": A.UC_ARM_REG_R8, "r9": A.UC_ARM_REG_R9, "r10": A.UC_ARM_REG_R10,
           "r11": A.UC_ARM_REG_R11, "r12": A.UC_ARM_REG_R12, "sp": A.UC_ARM_REG_SP,
           "lr": A.UC_ARM_REG_LR, "pc": A.UC_ARM_REG_PC, "cpsr": A.UC_ARM_REG_CPSR,
           "ip": A.UC_ARM_REG_R12, "fp": A.UC_ARM_REG_R11}
ALL_REG_IDS = [REG_IDS[n] for n in REG_NAMES]
