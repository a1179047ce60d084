"""What the probe modules share: the kernel's errno values (from emu/errno.py), the refusal error,
a function of the kernel's text (ktext.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..emu.errno import EBUSY, EEXIST, EILSEQ, EINVAL, ENOENT, ENOMEM, ENOTSUPP, EOPNOTSUPP, errno_name
from ..errors import ArmloadError

__all__ = ["EBUSY", "EEXIST", "EILSEQ", "EINVAL", "ENOENT", "ENOMEM", "ENOTSUPP", "EOPNOTSUPP", "ProbeError", "refuse",
           "Function"]


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

