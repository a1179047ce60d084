"""A module file as kmod reads it: plain, or compressed with xz, zstd or gzip.

libkmod/libkmod-file.c (kmod_file_open) tells the compression by the file's first bytes, not by
its name (comp_types[]: zstd 28 b5 2f fd, xz fd '7zXZ' 00, zlib 1f 8b); anything else is read as
it is, and the kernel's ELF checks then judge it. Debian names its compressed modules
`NAME.ko.xz` (6.12) and depmod accepts `.ko.gz`, `.ko.xz`, `.ko.zst`.

Who decompresses (kmod_module_insert_module): when the file is plain, or the kernel says through
/sys/module/compression (CONFIG_MODULE_DECOMPRESS) that it decompresses this format itself, kmod
calls finit_module(fd, args, MODULE_INIT_COMPRESSED_FILE for a compressed file) and the kernel's
module_decompress() inflates it (kernel/module/decompress.c); otherwise kmod inflates it and calls
init_module(image, len, args). `kernel_decompresses` decides that from the kernel's config.
"""
from __future__ import annotations

import os
import zlib

from ..errors import ElfFormatError

# (name, magic) in kmod's order; the name is what /sys/module/compression says for it
MAGIC = (("zstd", b"\x28\xb5\x2f\xfd"), ("xz", b"\xfd7zXZ\x00"), ("gzip", b"\x1f\x8b"))
SUFFIXES = (".ko", ".ko.xz", ".ko.zst", ".ko.gz")
# CONFIG_MODULE_COMPRESS_* -> the format module_decompress handles (kernel/module/decompress.c)
CONFIG_FORMAT = {"CONFIG_MODULE_COMPRESS_GZIP": "gzip", "CONFIG_MODULE_COMPRESS_XZ": "xz",
                 "CONFIG_MODULE_COMPRESS_ZSTD": "zstd"}
MAX_INFLATED = 1 << 30            # a module larger than this is not a module (a decompression bomb)


def is_module_file(name: str) -> bool:
    """A name depmod and modprobe take for a module: NAME.ko or NAME.ko.{xz,zst,gz}."""
    return name.endswith(SUFFIXES)


def module_stem(path: str) -> str:
    """The file's module name as modprobe looks it up: the base name without .ko[.xz|.zst|.gz],
    dashes as underscores."""
    base = os.path.basename(path)
    for s in sorted(SUFFIXES, key=len, reverse=True):
        if base.endswith(s):
            base = base[:-len(s)]
            break
    return base.replace("-", "_")


def compression_of(data: bytes) -> str | None:
    """kmod's magic test: 'zstd', 'xz', 'gzip' or None (read as it is)."""
    return next((name for name, magic in MAGIC if data[:len(magic)] == magic), None)


def decompress(data: bytes, path: str = "") -> bytes:
    """The module image inside `data` (itself when it is not compressed). A corrupt or truncated
    stream is one ElfFormatError, as kmod fails ("failed to decompress")."""
    kind = compression_of(data)
    if kind is None:
        return data
    import lzma                      # only for .ko.xz: liblzma is a shared library of its own
    try:
        if kind == "xz":
            d = lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
            out = d.decompress(data, MAX_INFLATED + 1)
            done = d.eof
        elif kind == "gzip":
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            out = d.decompress(data, MAX_INFLATED + 1)
            done = d.eof
        else:
            out, done = _zstd(data)
    except (lzma.LZMAError, zlib.error, EOFError, ValueError) as e:
        raise ElfFormatError(f"{path or 'module'}: {kind} stream is corrupt: {e}", file=path or None) from None
    if len(out) > MAX_INFLATED:
        raise ElfFormatError(f"{path or 'module'}: {kind} stream inflates past {MAX_INFLATED} bytes",
                             file=path or None)
    if not done:
        raise ElfFormatError(f"{path or 'module'}: {kind} stream is truncated", file=path or None)
    return out


def _zstd(data: bytes) -> tuple[bytes, bool]:
    import zstandard
    d = zstandard.ZstdDecompressor().decompressobj()
    try:
        out = d.decompress(data)
    except zstandard.ZstdError as e:
        raise ValueError(str(e)) from None
    return out, d.eof


def modinfo_strings(blob: bytes) -> dict[str, list[str]]:
    """The key=value strings of a .modinfo body (NUL-separated, as get_modinfo() walks them):
    key -> values, in file order."""
    info: dict[str, list[str]] = {}
    for item in blob.split(b"\0"):
        if b"=" in item:
            k, v = item.split(b"=", 1)
            info.setdefault(k.decode("utf-8", "replace"), []).append(v.decode("utf-8", "replace"))
    return info


def read_raw(path: str) -> bytes:
    """The file's bytes as they are on disk (compressed or not)."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ElfFormatError(f"{path}: cannot read: {e.strerror}", file=path) from None


def read_module(path: str) -> bytes:
    """The module image of a file, decompressed as kmod decompresses it."""
    return decompress(read_raw(path), path)


def kernel_format(config_lines: dict[str, str] | None) -> str | None:
    """The format the kernel decompresses itself (/sys/module/compression), or None when it
    was built without CONFIG_MODULE_DECOMPRESS."""
    if not config_lines or config_lines.get("CONFIG_MODULE_DECOMPRESS") != "y":
        return None
    return next((fmt for opt, fmt in CONFIG_FORMAT.items() if config_lines.get(opt) == "y"), None)


def kernel_decompresses(data: bytes, config_lines: dict[str, str] | None) -> bool:
    """kmod's choice (kmod_file_get_direct): the kernel inflates this file in finit_module."""
    kind = compression_of(data)
    return kind is not None and kind == kernel_format(config_lines)
