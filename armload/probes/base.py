"""What every probe kind shares: the kernel's errno values (from emu/errno.py), the refusal error,
a probed function.

kprobe, kretprobe, ftrace and direct import this, never core.py (which imports them).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..emu.errno import EBUSY, EEXIST, EILSEQ, EINVAL, ENOENT, ENOMEM, ENOTSUPP, EOPNOTSUPP, errno_name
from ..errors import ArmloadError

__all__ = ["EBUSY", "EEXIST", "EILSEQ", "EINVAL", "ENOENT", "ENOMEM", "ENOTSUPP", "EOPNOTSUPP", "ProbeError", "refuse",
           "Function", "cond_passed"]


class ProbeError(ArmloadError):
    """A probe the kernel would refuse (errno is the kernel's return value)."""


def refuse(what: str, errno: int, reason: str) -> ProbeError:
    return ProbeError(f"{what} failed, returned -{errno} (-{errno_name(-errno)}): {reason}", errno=-errno)


@dataclass
class Function:
    module: object
    name: str
    start: int                    # without bit 0
    size: int
    thumb: bool


def cond_passed(cond: int, cpsr: int) -> bool:
    n, z, c, v = (cpsr >> 31) & 1, (cpsr >> 30) & 1, (cpsr >> 29) & 1, (cpsr >> 28) & 1
    if cond >= 14:
        return True
    r = {0: z, 2: c, 4: n, 6: v, 8: c and not z, 10: n == v, 12: not z and n == v}[cond & ~1]
    return bool(r) != bool(cond & 1)
