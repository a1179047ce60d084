"""A kernel image's memory image(s): an ARM zImage's compressed payload (the first XZ or gzip
stream that decodes completely), a compressed or raw Image, or an ARM vmlinux ELF's allocated
sections. The one home of the zImage magic (arch/arm/boot/compressed/head.S: the word at 0x24)."""
from __future__ import annotations

import lzma
import zlib

from ..errors import KernelFileError

ZIMAGE_MAGIC = b"\x18\x28\x6f\x01"   # 0x016f2818 little-endian at offset 0x24
XZ_MAGIC = b"\xfd7zXZ\x00"
GZIP_MAGIC = b"\x1f\x8b\x08"


def decompress_zimage(blob: bytes, path: str) -> bytes:
    """The payload of an ARM zImage: the first XZ (or gzip) stream that decodes completely."""
    tried = []
    codecs = (("xz", XZ_MAGIC, lambda: lzma.LZMADecompressor(format=lzma.FORMAT_XZ), lzma.LZMAError),
              ("gzip", GZIP_MAGIC, lambda: zlib.decompressobj(16 + zlib.MAX_WBITS), zlib.error))
    for name, magic, make, error in codecs:
        pos = blob.find(magic)
        while pos >= 0:
            dec = make()
            try:
                out = dec.decompress(blob[pos:], 256 << 20)
            except error as e:
                tried.append(f"{name} at {pos:#x}: {e}")
            else:
                if dec.eof:
                    return out
                tried.append(f"{name} at {pos:#x}: stream truncated after {len(out)} bytes")
            pos = blob.find(magic, pos + 1)
    detail = "; ".join(tried[:4]) if tried else "no XZ or gzip stream in the file"
    raise KernelFileError(f"{path}: ARM zImage but its compressed payload could not be decompressed ({detail})",
                          file=path)


def _elf_payload(blob: bytes, path: str) -> list[bytes]:
    """Allocated PROGBITS sections of an ARM vmlinux (.rodata first)."""
    import io
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    try:
        elf = ELFFile(io.BytesIO(blob))
        mach = elf["e_machine"]
        if mach != "EM_ARM":
            raise KernelFileError(f"{path}: not an ARM kernel: ELF machine is {mach} (expected EM_ARM)", file=path)
        if elf.elfclass != 32:
            raise KernelFileError(f"{path}: not a 32-bit ARM kernel (ELFCLASS{elf.elfclass})", file=path)
        secs = [s for s in elf.iter_sections() if s["sh_type"] == "SHT_PROGBITS" and s["sh_flags"] & 2]
        secs.sort(key=lambda s: s.name != ".rodata")
        return [s.data() for s in secs]
    except ELFError as e:
        raise KernelFileError(f"{path}: malformed ELF kernel image: {e}", file=path) from None


def image_payloads(path: str) -> tuple[list[bytes], str]:
    """The memory image(s) to search and the kind of file."""
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError as e:
        raise KernelFileError(f"{path}: cannot read kernel image: {e.strerror}", file=path) from None
    if blob[:4] == b"\x7fELF":
        return _elf_payload(blob, path), "vmlinux ELF"
    if len(blob) >= 0x28 and blob[0x24:0x28] == ZIMAGE_MAGIC:
        return [decompress_zimage(blob, path)], "zImage"
    if blob[:4] == XZ_MAGIC[:4] or blob[:3] == GZIP_MAGIC:
        return [decompress_zimage(blob, path)], "compressed Image"
    if len(blob) >= 0x28 and blob[0x24:0x28] == ZIMAGE_MAGIC[::-1]:
        raise KernelFileError(f"{path}: big-endian ARM zImage is not supported", file=path)
    return [blob], "raw Image"
