"""Where Unicorn's translation blocks start in the Image's code, so that a hook at such an address
can run from the one block hook (`tick.Tick.dispatch`, `PyBlockHooks`) instead of a code hook of
its own: every hooked instruction (all of a sanitized module's text) walks Unicorn's whole
code-hook list (uc.c, helper_uc_tracecode), so each hook in it costs every one of them.

A block (QEMU's TB) starts at every branch target and ends after a branch, after an ISB
(target/arm/translate.c, trans_ISB: gen_goto_tb) and at a page's end. An instruction starts
every block it runs in when nothing can fall through into it: the word before is an unconditional
transfer (B, BL, BLX, BX/BLX register, LDM or LDR into pc, MOV pc), an ISB, a trap (UDF, SVC:
the exception's return starts a block), a literal (a word a pc-relative LDR loads: data, never
run), or padding (zero words, NOPs) after one of those. Not a
word the running kernel rewrites into a NOP: ftrace's `bl __gnu_mcount_nc` (a NOP from boot on,
a call while traced) and a static key's site (kernel/livetext.py), whatever the Image holds there.
"""
from __future__ import annotations

import numpy as np

from ...kernel.livetext import find_jump_sites, mcount_sites

PADDING = (0x00000000, 0xE1A00000, 0xE320F000)      # .align's zeros, mov r0, r0, nop
MAX_PADDING = 16                                   # words (.align 6 at most)
_LITERALS: dict = {}
_PATCHED: dict = {}


def text_ranges(image, *, init: bool = True) -> list[tuple[int, int]]:
    """[lo, hi) of the Image's code: .text, and the init text while it is not yet freed."""
    s = image.symbols
    out = [(s.get("_stext", image.base), s.get("_etext", image.end))]
    if init and "_sinittext" in s and "_einittext" in s:
        out.append((s["_sinittext"], s["_einittext"]))
    return out


def literals(image) -> np.ndarray:
    """Sorted addresses every `ldr Rt, [pc, #+-imm12]` of .text loads (once per process and image)."""
    key = (image.path, image.base, len(image.data))
    if key not in _LITERALS:
        lo, hi = text_ranges(image, init=False)[0]
        w = np.frombuffer(image.data[lo - image.base:(hi - image.base) & ~3], dtype="<u4")
        idx = np.flatnonzero(((w & 0x0F7F0000) == 0x051F0000) & ((w >> 28) != 0xF))
        imm = (w[idx] & 0xFFF).astype(np.int64)
        up = (w[idx] >> 23) & 1
        _LITERALS[key] = np.unique(lo + idx.astype(np.int64) * 4 + 8 + np.where(up == 1, imm, -imm))
    return _LITERALS[key]


def patched(image) -> frozenset:
    """Words the kernel rewrites at run time (once per process and image): the jump-label sites
    and every `bl __gnu_mcount_nc` of .text."""
    key = (image.path, image.base, len(image.data))
    if key not in _PATCHED:
        out = set(find_jump_sites(image)) | mcount_sites(image)
        _PATCHED[key] = frozenset(out)
    return _PATCHED[key]


def _ends_flow(w: int) -> bool:
    """No instruction after `w` runs by falling through it."""
    if w >> 28 == 0xF:
        return (w & 0xFE000000) == 0xFA000000 or (w & 0xFFFFFFF0) == 0xF57FF060   # BLX imm; ISB
    if w >> 28 != 0xE:
        return False
    # UDF (BUG()/WARN()'s 0xe7f001f2) and SVC trap: a return from the exception starts a block
    return ((w & 0x0FF000F0) == 0x07F000F0 or (w & 0x0F000000) == 0x0F000000
            or (w & 0x0E000000) == 0x0A000000 or (w & 0x0FFFFFD0) == 0x012FFF10 or (w & 0x0E108000) == 0x08108000
            or (w & 0x0C10F000) == 0x0410F000 or (w & 0x0FFFFFF0) == 0x01A0F000)


def starts_block(image, addr: int) -> bool:
    """Whether every run of the Image's .text instruction at `addr` starts a translation block."""
    lo, hi = text_ranges(image, init=False)[0]
    if not lo + 4 <= addr < hi or addr & 3:
        return False
    lits = literals(image)
    a = addr - 4
    for _ in range(MAX_PADDING + 1):
        if a < lo:
            return False
        w = image.word(a)
        i = int(np.searchsorted(lits, a))
        if (_ends_flow(w) and a not in patched(image)) or (i < len(lits) and lits[i] == a):
            return True
        if w not in PADDING:
            return False
        a -= 4
    return False
