"""The real kernel: a decompressed Debian Image, where it loads, its exports and its boot data.

Everything is derived from the image file itself (and checked against each other):
* the load address from the zImage's size table (TEXT_OFFSET) and, independently, by voting on
  the `push {lr}` prologue (`-pg` functions) at kallsyms function addresses;
* the .bss size from the same table (`_kernel_bss_size`, put there by arch/arm/boot/compressed);
* every export's address from the Image's `__ksymtab` (ARM: {value, name, namespace} words),
  which is where data symbols such as `jiffies` or `system_wq` get their addresses;
* HZ from `jiffies_64`'s initial value (INITIAL_JIFFIES = -300 * HZ).
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field

import numpy as np

from ..errors import KernelFileError
from .zimage import ZIMAGE_MAGIC, image_payloads

PUSH_LR = 0xE52DE004              # str lr, [sp, #-4]!  (the -pg prologue)
KSZ_MAGIC = 0x5A534C4B            # "KLSZ" tag of the zImage size table
PAGE_OFFSET = 0xC0000000


@dataclass
class KernelImage:
    path: str
    data: bytes                   # the decompressed Image (text + initialised data, no .bss)
    base: int                     # virtual load address
    bss_size: int
    symbols: dict[str, int]       # kallsyms: name -> address (text symbols, static ones included)
    exports: dict[str, int]       # __ksymtab: name -> address (functions and data)
    stext: int
    etext: int
    hz: int | None
    notes: list[str] = field(default_factory=list)
    kallsyms: object | None = None

    @property
    def end(self) -> int:
        return self.base + len(self.data)

    @property
    def bss_end(self) -> int:
        return self.end + self.bss_size

    def address(self, name: str) -> int | None:
        a = self.exports.get(name)
        return a if a is not None else self.symbols.get(name)

    def word(self, addr: int) -> int:
        return struct.unpack_from("<I", self.data, addr - self.base)[0]

    def contains(self, addr: int) -> bool:
        return self.base <= addr < self.bss_end


_CACHE: dict[tuple, KernelImage] = {}


def load_image(path: str) -> KernelImage:
    """Decompress and analyse a kernel image once per process (a worker maps it per machine)."""
    st = os.stat(path)
    key = (os.path.abspath(path), st.st_size, st.st_mtime_ns)
    img = _CACHE.get(key)
    if img is None:
        from .cache import cached
        img = _CACHE[key] = cached("image", [path], repr((path, os.path.abspath(path))), lambda: _analyse(path))
    return img


def _analyse(path: str) -> KernelImage:
    from .kallsyms import table_from_image
    with open(path, "rb") as f:
        head = f.read(0x40000)
    payloads, kind = image_payloads(path)
    if kind == "vmlinux ELF":
        raise KernelFileError(f"{path}: running code needs the raw Image or zImage, not a vmlinux ELF", file=path)
    data = payloads[0]
    table = table_from_image(path)
    symbols: dict[str, int] = {}
    for addr, _typ, name in table:
        symbols.setdefault(name, addr)
    stext, etext = symbols.get("_stext"), symbols.get("_etext")
    if stext is None or etext is None:
        raise KernelFileError(f"{path}: kallsyms has no _stext/_etext; cannot place the image", file=path)
    notes = []
    table_base, bss = _zimage_size_table(head) if kind == "zImage" else (None, None)
    voted = vote_load_address(data, symbols)
    if table_base is not None and voted is not None and table_base != voted:
        raise KernelFileError(f"{path}: zImage TEXT_OFFSET gives {table_base:#x}, function prologues "
                              f"give {voted:#x}", file=path)
    base = table_base if table_base is not None else voted
    if base is None:
        raise KernelFileError(f"{path}: cannot determine the Image's load address", file=path)
    if bss is None:
        bss = 0x400000
        notes.append("no zImage size table: .bss size unknown, 4 MiB of zeroed memory mapped after the Image")
    exports = parse_ksymtab(data, base)
    img = KernelImage(path, data, base, bss, symbols, exports, stext, etext, None, notes, table)
    j = exports.get("jiffies_64")
    if j is not None and base <= j < img.end - 8:
        lo, hi = struct.unpack_from("<II", data, j - base)
        if hi == 0 and lo and (0x100000000 - lo) % 300 == 0:
            img.hz = (0x100000000 - lo) // 300
    if img.hz is None:
        img.notes.append("HZ not derivable from jiffies_64's initial value")
    return img


def _zimage_size_table(head: bytes) -> tuple[int | None, int | None]:
    """(load address, .bss size) from the zImage's tag table (word at 0x38 points to it)."""
    if len(head) < 0x3C or head[0x24:0x28] != ZIMAGE_MAGIC:
        return None, None
    off = struct.unpack_from("<I", head, 0x38)[0]
    if not off or off + 24 > len(head):
        return None, None
    n, magic, _piggy, bss, text_offset, _malloc = struct.unpack_from("<6I", head, off)
    if magic != KSZ_MAGIC or n < 5:
        return None, None
    return PAGE_OFFSET + text_offset, bss


def vote_load_address(data: bytes, symbols: dict[str, int], sample: int = 400) -> int | None:
    """The base at which most sampled functions start with the -pg prologue `push {lr}`."""
    words = np.frombuffer(data[: len(data) & ~3], dtype="<u4")
    funcs = np.array(sorted(a for a in symbols.values() if not a & 3), dtype=np.int64)
    if len(funcs) == 0:
        return None
    funcs = funcs[:: max(1, len(funcs) // sample)]
    best, best_n, second = None, 0, 0
    for base in range(PAGE_OFFSET, PAGE_OFFSET + 0x1000000, 0x1000):
        idx = (funcs - base) >> 2
        idx = idx[(idx >= 0) & (idx < len(words))]
        n = int(np.count_nonzero(words[idx] == PUSH_LR))
        if n > best_n:
            best, best_n, second = base, n, best_n
        elif n > second:
            second = n
    return best if best_n >= 3 * max(second, 1) else None


def parse_ksymtab(data: bytes, base: int) -> dict[str, int]:
    """name -> value of every `struct kernel_symbol` ({value, name, namespace}, absolute words)."""
    words = np.frombuffer(data[: len(data) & ~3], dtype="<u4")
    # __ksymtab_strings: the largest run of NUL-separated names around a name every kernel exports.
    n = len(data)
    lo = hi = -1
    for anchor in (b"\0kfree\0", b"\0memcpy\0", b"\0system_wq\0"):
        at = data.find(anchor)
        while at >= 0:
            a, b = at, at + 1
            while a > 0 and (32 < data[a - 1] < 127 or data[a - 1] == 0):
                a -= 1
            while b < n and (32 < data[b] < 127 or data[b] == 0):
                b += 1
            if b - a > hi - lo:
                lo, hi = a, b
            at = data.find(anchor, at + 1)
    if hi - lo < 64:
        return {}
    vlo, vhi = base + lo, base + hi
    cand = np.nonzero((words >= vlo) & (words < vhi))[0]
    cand = cand[(cand > 0) & (cand + 1 < len(words))]
    vals = words[cand - 1]
    ns = words[cand + 1]
    ok = (vals >= PAGE_OFFSET) & ((ns == 0) | ((ns >= vlo) & (ns < vhi)))
    cand = cand[ok]
    vals = vals[ok]
    # struct kernel_symbol arrays: keep candidates with a neighbouring entry 12 bytes away
    # (names may point into the middle of another, tail-merged string).
    keep = np.isin(cand - 3, cand) | np.isin(cand + 3, cand)
    out: dict[str, int] = {}
    for i, v in zip(cand[keep].tolist(), vals[keep].tolist()):
        o = int(words[i]) - base
        z = data.find(b"\0", o, o + 128)
        if z <= o:
            continue
        out.setdefault(data[o:z].decode("ascii", "replace"), int(v))
    return out
