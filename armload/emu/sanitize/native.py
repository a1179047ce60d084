"""The C code hook on module text (_shadow.c), built once like emu/clock.py's counter; None
without a C compiler (engine.py then runs its Python hook, access.py)."""
from __future__ import annotations

import ctypes
import os

import numpy as np

from ..hw.blocks import starts_block

_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_shadow.c")
MAX_SPINS = 64
EV_FLAG, EV_HEAP, EV_SPIN, EV_STACK = 1, 2, 3, 4
EVENT = ctypes.CFUNCTYPE(None, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint32,
                         ctypes.c_uint32, ctypes.c_uint32)
_P32, _P8 = ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint8)


class Shadow(ctypes.Structure):
    _fields_ = [("base", ctypes.c_uint32), ("nwords", ctypes.c_uint32), ("text", _P32), ("flags", _P8),
                ("starts", _P32), ("req_end", _P32), ("ext_end", _P32), ("freed", _P8),
                ("nobj", ctypes.c_uint32), ("lo", ctypes.c_uint32), ("hi", ctypes.c_uint32),
                ("spins", ctypes.c_uint32 * MAX_SPINS), ("nspins", ctypes.c_uint32),
                ("stack_check", ctypes.c_uint32), ("reg_read", ctypes.c_void_p), ("event", EVENT),
                ("accesses", ctypes.c_uint64), ("filters", ctypes.c_void_p)]


def lib():
    from ..native import helper
    return helper(_SRC, "shadow", Shadow, also=lambda l: (l.armload_filters_size() == ctypes.sizeof(Filters)
                                                          and l.armload_entry_size() == ctypes.sizeof(Entry)))


def _p(a, t):
    return ctypes.cast(a.ctypes.data, t)


class NativeRange:
    """One hooked allocation: its Shadow struct, its text copy and flags (kept alive here)."""

    def __init__(self, uc, base: int, text: bytes, event, heap_arrays, filters=None):
        from unicorn import UC_HOOK_CODE
        from unicorn.unicorn_py3.unicorn import uc_hook_h, uclib
        L = lib()
        self.base = base
        self.text = np.frombuffer(text[: len(text) // 4 * 4], dtype="<u4").copy()
        self.flags = np.zeros(len(self.text), dtype=np.uint8)
        s = self.s = Shadow()
        s.base, s.nwords = base, len(self.text)
        s.text, s.flags = _p(self.text, _P32), _p(self.flags, _P8)
        s.reg_read = ctypes.cast(uclib.uc_reg_read, ctypes.c_void_p).value
        s.event = event
        s.filters = ctypes.addressof(filters) if filters is not None else None
        self.set_heap(heap_arrays)
        h = uc_hook_h()
        err = uclib.uc_hook_add(uc._uch, ctypes.byref(h), UC_HOOK_CODE,
                                ctypes.cast(L.armload_shadow_code, ctypes.c_void_p),
                                ctypes.cast(ctypes.addressof(s), ctypes.c_void_p),
                                ctypes.c_uint64(base), ctypes.c_uint64(base + len(text) - 1))
        if err:
            raise RuntimeError(f"uc_hook_add failed ({err})")
        self.hook = h.value

    def set_heap(self, arrays) -> None:
        starts, req, ext, freed = arrays
        self._heap = arrays                         # the struct points into these
        s = self.s
        s.starts, s.req_end, s.ext_end, s.freed = _p(starts, _P32), _p(req, _P32), _p(ext, _P32), _p(freed, _P8)
        s.nobj = len(starts)
        s.lo = int(starts.min()) if len(starts) else 0xFFFFFFFF
        s.hi = int(ext.max()) if len(starts) else 0

    def set_spins(self, spins) -> None:
        sp = sorted(spins)[:MAX_SPINS]
        for i, a in enumerate(sp):
            self.s.spins[i] = a
        self.s.nspins = len(sp)

    def flag(self, addr: int, on: bool) -> bool:
        i = (addr - self.base) >> 2
        if 0 <= i < len(self.flags):
            self.flags[i] = 1 if on else 0
            return True
        return False

    def delete(self, uc) -> None:
        from unicorn.unicorn_py3.unicorn import uc_hook_h, uclib
        uclib.uc_hook_del(uc._uch, uc_hook_h(self.hook))


def heap_arrays(objs) -> tuple:
    """The C shadow's view of heap.py's objects (reused freed ones left out: not checked)."""
    keep = [o for o in objs if not (o.freed is not None and o.reused)]
    return (np.array([o.start for o in keep], dtype=np.uint32),
            np.array([min(o.start + o.size, 0xFFFFFFFF) for o in keep], dtype=np.uint32),
            np.array([min(o.end, 0xFFFFFFFF) for o in keep], dtype=np.uint32),
            np.array([1 if o.freed is not None else 0 for o in keep], dtype=np.uint8))


F_LR, F_LR_OR_HELD, F_PTR, F_LR_OR_FREED, F_ALWAYS, F_LR_OR_HELD_ANY = 1, 2, 3, 4, 5, 6
_PC = 11                                            # UC_ARM_REG_PC
MAX_RANGES = 32
CALL = ctypes.CFUNCTYPE(None, ctypes.c_uint32)


class Filters(ctypes.Structure):
    _fields_ = [("lo", ctypes.c_uint32 * MAX_RANGES), ("hi", ctypes.c_uint32 * MAX_RANGES),
                ("nranges", ctypes.c_uint32), ("heap_lo", ctypes.c_uint32), ("heap_hi", ctypes.c_uint32),
                ("freed", ctypes.c_uint32), ("held", ctypes.c_uint32), ("reg_read", ctypes.c_void_p),
                ("call", CALL), ("calls", ctypes.c_uint64), ("filtered", ctypes.c_uint64),
                ("reg_write", ctypes.c_void_p), ("ctbl", ctypes.c_void_p), ("nctbl", ctypes.c_uint32),
                ("recognised", ctypes.c_uint64), ("held_any", ctypes.c_uint32)]


class Entry(ctypes.Structure):
    pass


Entry._fields_ = [("f", ctypes.POINTER(Filters)), ("mode", ctypes.c_uint32), ("arg", ctypes.c_uint32),
                  ("id", ctypes.c_uint32), ("next", ctypes.POINTER(Entry))]   # the next at its address


class CEntry(ctypes.Structure):
    _fields_ = [("addr", ctypes.c_uint32), ("e", ctypes.POINTER(Entry))]


_TAIL: dict = {}


def tail_called(image) -> set[int]:
    """Every target of a B (any condition) in the Image's text: kernel code may reach these with
    its caller's LR, so with a module's return address (a tail call from a function the module
    called): such an entry point keeps its hook. Once per process and image."""
    key = (image.path, image.base, len(image.data))
    if key not in _TAIL:
        lo, hi = image.base, image.symbols.get("_etext", image.end)
        w = np.frombuffer(image.data[: (hi - lo) & ~3], dtype="<u4")
        idx = np.nonzero(((w & 0x0F000000) == 0x0A000000) & ((w >> 28) != 15))[0]
        imm = (w[idx] & 0x00FFFFFF).astype(np.int64)
        imm = np.where(imm & 0x800000, imm - 0x1000000, imm)
        _TAIL[key] = set((lo + idx.astype(np.int64) * 4 + 8 + imm * 4).tolist())
    return _TAIL[key]


class EntryHooks:
    """Kernel entry points whose Python handler runs only when C says the call matters: LR in a
    module allocation (F_LR), or also while a module spinlock is held / a freed object is not yet
    known reused, or the pointer argument inside the tracked objects' bounds (F_PTR), or (a lock
    release) while the module holds any lock (F_LR_OR_HELD_ANY: kernel code may release it).

    An entry point gets a code hook of its own only when kernel code can make its call matter:
    F_ALWAYS; a target of a kernel B (tail call: `tail`); F_PTR once there are tracked objects,
    F_LR_OR_FREED once a freed one, F_LR_OR_HELD once a module spinlock is held (`promote`; a
    hook once added stays: a deleted one stays in Unicorn's list until emu_start returns). The
    others are in the call table: the module text hook recognises the module's calls to them.
    Every Unicorn code hook makes each hooked instruction (all of module text) walk it: the
    entries at one address share one (a chain in C: Entry.next), and an entry point that always
    starts a block (`starts_block`) is the tick hook's instead, in no list at all."""

    def __init__(self, bk, tail: set[int] = frozenset()):
        from unicorn.unicorn_py3.unicorn import uclib
        self.bk = bk
        self.tail = tail
        self.f = Filters()
        self.f.reg_read = ctypes.cast(uclib.uc_reg_read, ctypes.c_void_p).value
        self.f.reg_write = ctypes.cast(uclib.uc_reg_write, ctypes.c_void_p).value
        self._groups: dict[int, list] = {}            # address -> its Entries without a hook
        self._ctbl = None
        self.f.heap_lo, self.f.heap_hi = 0xFFFFFFFF, 0
        self._handlers: list = []
        self._entries: list = []
        self._call = CALL(self._dispatch)
        self.f.call = self._call
        self.hooks: list[int] = []
        self._last: dict[int, Entry] = {}             # hooked address -> the last Entry of its hook's chain
        self._disp: list[tuple[int, int, int]] = []   # (address, C hook, Entry): the tick hook's rows
        self.code: set[int] = set()                   # the addresses with a Unicorn code hook
        self.errors: list[str] = []

    def _dispatch(self, i: int) -> None:
        fn = self._handlers[i]
        uc = self.bk.m.uc
        try:
            fn(uc, uc.reg_read(_PC), 4, None)
        except Exception as e:                       # cannot cross the C hook
            self.errors.append(f"{type(e).__name__}: {e}")

    def add(self, addr: int, fn, mode: int, arg: int = 0) -> None:
        e = Entry(ctypes.pointer(self.f), mode, arg, len(self._handlers))
        self._handlers.append(fn)
        self._entries.append(e)
        if mode == F_ALWAYS or addr in self.tail or addr in self._last:
            if addr in self._groups:
                self._promote([addr])
            self._hook(addr, e)
        else:
            self._groups.setdefault(addr, []).append(e)
            self._table()

    def promote(self, modes) -> None:
        """Hooks of their own for the entry points (all entries at an address, in order) with an
        entry of one of `modes`."""
        self._promote([a for a, es in self._groups.items() if any(e.mode in modes for e in es)])

    def _promote(self, addrs) -> None:
        for a in addrs:
            for e in self._groups.pop(a):
                self._hook(a, e)
        if addrs:
            self._table()

    def _table(self) -> None:
        rows = sorted((a, e.id, e) for a, es in self._groups.items() for e in es)
        t = (CEntry * max(len(rows), 1))()
        for i, (a, _id, e) in enumerate(rows):
            t[i].addr, t[i].e = a, ctypes.pointer(e)
        self._ctbl = t                                  # the struct points into it
        self.f.ctbl, self.f.nctbl = ctypes.addressof(t), len(rows)

    def _hook(self, addr: int, e) -> None:
        """`e` run at `addr`: after the entries already hooked there, by their one Unicorn hook."""
        from unicorn import UC_HOOK_CODE
        from unicorn.unicorn_py3.unicorn import uc_hook_h, uclib
        last = self._last.get(addr)
        self._last[addr] = e
        if last is not None:
            last.next = ctypes.pointer(e)
            return
        if starts_block(self.bk.image, addr):
            self._disp.append((addr, ctypes.cast(lib().armload_entry_hook, ctypes.c_void_p).value,
                               ctypes.addressof(e)))
            self.bk.m.t.dispatch(self, self._disp)
            return
        h = uc_hook_h()
        uc = self.bk.m.uc
        err = uclib.uc_hook_add(uc._uch, ctypes.byref(h), UC_HOOK_CODE,
                                ctypes.cast(lib().armload_entry_hook, ctypes.c_void_p),
                                ctypes.cast(ctypes.addressof(e), ctypes.c_void_p),
                                ctypes.c_uint64(addr), ctypes.c_uint64(addr))
        if err:
            raise RuntimeError(f"uc_hook_add failed ({err})")
        uc.ctl_remove_cache(addr & ~1, (addr & ~1) + 4)
        self.hooks.append(h.value)
        self.code.add(addr)

    def set_ranges(self, ranges) -> None:
        rs = list(ranges)[:MAX_RANGES]
        for i, (lo, hi) in enumerate(rs):
            self.f.lo[i], self.f.hi[i] = lo, hi
        self.f.nranges = len(rs)

    def remove(self) -> None:
        from unicorn.unicorn_py3.unicorn import uc_hook_h, uclib
        for h in self.hooks:
            uclib.uc_hook_del(self.bk.m.uc._uch, uc_hook_h(h))
        self.hooks = []
        self._last = {}
        self._disp = []
        self.code = set()
        self.bk.m.t.dispatch(self, [])
        self._groups = {}
        self._table()


