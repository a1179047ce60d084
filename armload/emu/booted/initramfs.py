"""A newc cpio archive (the initramfs format init/initramfs.c unpacks): /dev, /dev/console and
/init, so the kernel's init_eaccess("/init") succeeds and prepare_namespace() is never needed.

/init is a minimal static ARM EABI executable (one PT_LOAD: `mov r7, #__NR_pause; svc #0; b`, and a
non-executable PT_GNU_STACK),
so the kernel's own kernel_execve("/init") succeeds and pid 1 gets a user mm (what insmod's
process has: vm_mmap, copy_to_user and strndup_user then work on real user memory). The
machine stops when kernel_execve returns: the user code is never executed.
"""
from __future__ import annotations

import struct

S_IFDIR, S_IFREG, S_IFCHR = 0o040000, 0o100000, 0o020000


def _entry(ino: int, name: str, mode: int, data: bytes = b"", rdev=(0, 0)) -> bytes:
    nm = name.encode() + b"\0"
    fields = [ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdev[0], rdev[1], len(nm), 0]
    hdr = b"070701" + b"".join(b"%08X" % f for f in fields)
    out = hdr + nm
    out += b"\0" * (-len(out) % 4) + data
    return out + b"\0" * (-len(out) % 4)


ENTRY_VA = 0x10000 + 52 + 2 * 32
PT_LOAD, PT_GNU_STACK = 1, 0x6474E551
NR_PAUSE = 29                                   # arch/arm/tools/syscall.tbl (EABI)


def init_elf() -> bytes:
    code = struct.pack("<3I", 0xE3A07000 | NR_PAUSE, 0xEF000000, 0xEAFFFFFC)   # mov r7,#29; svc 0; b .-8
    size = 52 + 2 * 32 + len(code)
    ehdr = b"\x7fELF\x01\x01\x01" + bytes(9) + struct.pack(
        "<HHIIIIIHHHHHH", 2, 40, 1, ENTRY_VA, 52, 0, 0x05000000, 52, 32, 2, 40, 0, 0)   # ET_EXEC, EM_ARM, EABI5
    phdr = (struct.pack("<8I", PT_LOAD, 0, 0x10000, 0x10000, size, size, 5, 0x1000)       # R|X
            + struct.pack("<8I", PT_GNU_STACK, 0, 0, 0, 0, 0, 6, 16))                     # stack RW
    return ehdr + phdr + code


def build() -> bytes:
    parts = [_entry(1, "dev", S_IFDIR | 0o755), _entry(2, "dev/console", S_IFCHR | 0o600, rdev=(5, 1)),
             _entry(3, "init", S_IFREG | 0o755, init_elf()),
             _entry(0, "TRAILER!!!", 0)]
    blob = b"".join(parts)
    return blob + b"\0" * (-len(blob) % 512)
