"""Error types. Every message reads like the kernel's own printk for the same failure."""
from __future__ import annotations

ENOENT = 2
ENOEXEC = 8
ENOMEM = 12
EBUSY = 16
EEXIST = 17
EINVAL = 22
EPERM = 1

_ERRNO_NAMES = {ENOENT: "ENOENT", ENOEXEC: "ENOEXEC", ENOMEM: "ENOMEM", EBUSY: "EBUSY",
                EEXIST: "EEXIST", EINVAL: "EINVAL", EPERM: "EPERM"}


def errno_name(errno: int) -> str:
    return _ERRNO_NAMES.get(abs(errno), str(abs(errno)))


class ArmloadError(Exception):
    """Base class. `errno` is the negative value the kernel would return."""

    errno = -ENOEXEC

    def __init__(self, message: str, *, file: str | None = None, errno: int | None = None, **context):
        super().__init__(message)
        self.message = message
        self.file = file
        if errno is not None:
            self.errno = errno
        self.context = context

    def __str__(self) -> str:
        return self.message

    def to_dict(self) -> dict:
        d = {"error": type(self).__name__, "message": self.message, "errno": self.errno,
             "errno_name": errno_name(self.errno)}
        if self.file:
            d["file"] = self.file
        d.update({k: v for k, v in self.context.items() if v is not None})
        return d


class ElfFormatError(ArmloadError):
    """The file is not a loadable ARM relocatable object (kernel: elf_validity_* checks)."""


class SymbolError(ArmloadError):
    """Unknown symbol, CRC mismatch, namespace or taint refusal (simplify_symbols)."""


class RelocationError(ArmloadError):
    """apply_relocate failed; carries section, relocation index, symbol, type, place and target."""


class LayoutError(ArmloadError):
    """The module could not be placed (window exhausted, bad placement address)."""


class PltError(ArmloadError):
    """A PLT section is missing or exhausted (the kernel would BUG())."""


class KernelFileError(ArmloadError):
    """A kernel export table or image could not be read."""


class EmulationError(ArmloadError):
    """The module faulted, looped, or misbehaved inside the emulator."""
