"""Boot-time constants of the emulated board: what a booted kernel's data holds (no code here).

`boot.py` writes them into the Image or into simulated data; the models read them directly.
"""
from __future__ import annotations

# arch/arm/include/uapi/asm/hwcap.h; /proc/cpuinfo of a Cortex-A15 under Debian 6.1:
# half thumb fastmult vfp edsp neon vfpv3 tls vfpv4 idiva idivt vfpd32 lpae evtstrm
HWCAP = {"half": 1 << 1, "thumb": 1 << 2, "fastmult": 1 << 4, "vfp": 1 << 6, "edsp": 1 << 7,
         "neon": 1 << 12, "vfpv3": 1 << 13, "tls": 1 << 15, "vfpv4": 1 << 16, "idiva": 1 << 17,
         "idivt": 1 << 18, "vfpd32": 1 << 19, "lpae": 1 << 20, "evtstrm": 1 << 21}
ELF_HWCAP = sum(HWCAP.values())
SYSTEM_RUNNING = 3                # enum system_states
CPU_MASKS = ("__cpu_possible_mask", "__cpu_online_mask", "__cpu_present_mask", "__cpu_active_mask")
DELAY_LOOP_INSNS = 2              # __loop_delay: subs r0, r0, #1; bhi
RAM_PAGES = (1 << 30) // 4096     # the emulated board: 1 GiB of RAM, half of it free
_U, _L, _D, _C, _P, _S, _X, _SP = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80
CTYPE = bytes([_C] * 9 + [_C | _S] * 5 + [_C] * 18 + [_S | _SP] + [_P] * 15 + [_D] * 10 + [_P] * 7
              + [_U | _X] * 6 + [_U] * 20 + [_P] * 6 + [_L | _X] * 6 + [_L] * 20 + [_P] * 4 + [_C]
              + [0] * 32 + [_S | _SP] + [_P] * 31 + [_U] * 23 + [_P] + [_U] * 7 + [_L] * 24 + [_P]
              + [_L] * 8)                # lib/ctype.c, for machines without the image's copy
