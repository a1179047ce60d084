"""The generic timer's read sites in C (`_c14.c`): one native UC_HOOK_CODE callback per
MRC/MRRC p15 c14 read in the Image, with the result timer.emulate() gives (a udelay loop reads
CNTVCT millions of times: a Python call each cost ~28 µs). Writes (CTL, CVAL, TVAL, KCTL) stay
in Python: they change the interrupt output and are rare. `mirror` copies the Python timer's
state and the idle time here after every change (Machine._sync)."""
from __future__ import annotations

import ctypes
import os

from unicorn import UC_HOOK_CODE

from ..native import helper
from . import timer as tmod

_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_c14.c")
MAXSITES = 256
REGS = ("CNTFRQ", "CNTKCTL", "CNTP_TVAL", "CNTP_CTL", "CNTV_TVAL", "CNTV_CTL", "CNTPCT", "CNTVCT", "CNTP_CVAL",
        "CNTV_CVAL", "CNTVOFF")


class Site(ctypes.Structure):
    _fields_ = [("addr", ctypes.c_uint32), ("word", ctypes.c_uint32), ("reg", ctypes.c_uint8),
                ("rt", ctypes.c_uint8), ("rt2", ctypes.c_uint8), ("cond", ctypes.c_uint8)]


class C14(ctypes.Structure):
    _fields_ = [("insns", ctypes.c_void_p), ("idle_ns", ctypes.c_uint64), ("cval", ctypes.c_uint64 * 2),
                ("ctl", ctypes.c_uint32 * 2), ("kctl", ctypes.c_uint32), ("nsites", ctypes.c_uint32),
                ("hits", ctypes.c_uint64), ("ram", ctypes.c_void_p), ("ram_size", ctypes.c_uint64),
                ("reg_read", ctypes.c_void_p), ("reg_write", ctypes.c_void_p), ("sites", Site * MAXSITES)]

    def mirror(self, timer: tmod.ArchTimer, idle_ns: int) -> None:
        self.idle_ns = idle_ns
        self.cval[0], self.cval[1] = timer.cval
        self.ctl[0], self.ctl[1] = timer.ctl
        self.kctl = timer.kctl


def _lib():
    return helper(_SRC, "c14", C14, need="its timer reads (armload/emu/hw/_c14.c)")


def install(uc, tick, ram_ptr: int, ram_size: int, sites, word_at, starts_block) -> tuple[C14, list]:
    """Native hooks on the read sites among `sites` ((addr, timer.decode tuple)); returns the
    state and the sites left to Python (the writes). `word_at(addr)`: the Image's word there.
    A site where `starts_block(addr)` (hw/blocks.py) runs from the block hook's dispatch table
    (`tick`), the others from a code hook each."""
    from unicorn.unicorn_py3.unicorn import uc_hook_h, uclib
    lib = _lib()
    c = C14()
    c.insns = ctypes.addressof(tick) + type(tick).insns.offset
    c.ram, c.ram_size = ram_ptr, ram_size
    c.reg_read = ctypes.cast(uclib.uc_reg_read, ctypes.c_void_p).value
    c.reg_write = ctypes.cast(uclib.uc_reg_write, ctypes.c_void_p).value
    reads = sorted((a, s) for a, s in sites if s[1] and a >= 0xC0000000)
    if len(reads) > MAXSITES:
        reads = reads[:0]                       # more than the table holds: all in Python
    rest = [(a, s) for a, s in sites if (a, s) not in set(reads)]
    fn = ctypes.cast(lib.armload_c14_hook, ctypes.c_void_p)
    hooks, rows = [], []
    for i, (a, (reg, _read, rt, rt2, cond)) in enumerate(reads):
        c.sites[i] = Site(a, word_at(a), REGS.index(reg), rt, 0xFF if rt2 is None else rt2, cond)
    c.nsites = len(reads)
    for a, _s in reads:
        if starts_block(a):
            rows.append((a, fn.value, ctypes.addressof(c)))
            continue
        h = uc_hook_h()
        err = uclib.uc_hook_add(uc._uch, ctypes.byref(h), UC_HOOK_CODE, fn, ctypes.cast(ctypes.addressof(c), ctypes.c_void_p),
                                ctypes.c_uint64(a), ctypes.c_uint64(a))
        if err:
            raise RuntimeError(f"uc_hook_add failed ({err})")
        hooks.append(h.value)
    c._hooks = hooks
    tick.dispatch("c14", rows)
    return c, rest
