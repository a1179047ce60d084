"""A newc cpio archive (the initramfs format init/initramfs.c unpacks): /dev, /dev/console and
an /init file, so the kernel's init_eaccess("/init") succeeds and prepare_namespace() is never
needed. The /init is never executed: the booted machine stops at run_init_process."""
from __future__ import annotations

S_IFDIR, S_IFREG, S_IFCHR = 0o040000, 0o100000, 0o020000


def _entry(ino: int, name: str, mode: int, data: bytes = b"", rdev=(0, 0)) -> bytes:
    nm = name.encode() + b"\0"
    fields = [ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdev[0], rdev[1], len(nm), 0]
    hdr = b"070701" + b"".join(b"%08X" % f for f in fields)
    out = hdr + nm
    out += b"\0" * (-len(out) % 4) + data
    return out + b"\0" * (-len(out) % 4)


def build() -> bytes:
    parts = [_entry(1, "dev", S_IFDIR | 0o755), _entry(2, "dev/console", S_IFCHR | 0o600, rdev=(5, 1)),
             _entry(3, "init", S_IFREG | 0o755, b"#!/bin/sh\n# never run: armload stops at run_init_process\n"),
             _entry(0, "TRAILER!!!", 0)]
    blob = b"".join(parts)
    return blob + b"\0" * (-len(blob) % 512)
