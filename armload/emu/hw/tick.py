"""Simulated time for the booted machine: the instruction count (one native UC_HOOK_BLOCK
callback, `_tick.c`; no per-instruction hook) plus the time the CPU spent idle in WFI.
1 instruction = 1 simulated ns. The hook also stops emulation at the next timer deadline,
at the budget, and before the first block that runs with IRQs unmasked while the interrupt
controller signals an IRQ (the interrupt is then taken there by hand, cpu.enter). Then it runs the
C hooks of its dispatch table at the block's first address (`Tick.dispatch`): a hook there costs
nothing in Unicorn's code-hook list, which every hooked instruction walks."""
from __future__ import annotations

import ctypes
import os

from unicorn import UC_HOOK_BLOCK

from ..native import helper

NEVER = (1 << 64) - 1
DEADLINE, IRQ, BUDGET = 1, 2, 3
_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_tick.c")


DISP_BITS = 65536
KEEP_TABLES = 64


class Disp(ctypes.Structure):
    _fields_ = [("addr", ctypes.c_uint32), ("pad", ctypes.c_uint32), ("fn", ctypes.c_void_p), ("user", ctypes.c_void_p)]


class Tick(ctypes.Structure):
    _fields_ = [("insns", ctypes.c_uint64), ("deadline", ctypes.c_uint64), ("budget", ctypes.c_uint64),
                ("irq_line", ctypes.c_uint32), ("reason", ctypes.c_uint32),
                ("mem_read", ctypes.c_void_p), ("reg_read", ctypes.c_void_p), ("emu_stop", ctypes.c_void_p),
                ("keys", ctypes.c_uint64 * 16384), ("counts", ctypes.c_uint32 * 16384),
                ("disp", ctypes.POINTER(Disp)), ("ndisp", ctypes.c_uint32), ("pad", ctypes.c_uint32),
                ("bits", ctypes.c_uint64 * (DISP_BITS // 64))]

    def dispatch(self, owner, rows) -> None:
        """The C hooks `owner` runs at the start of every block at an address: `rows` (addr, fn,
        user), in the order they run at one address (replacing the owner's earlier rows)."""
        self._rows = {**getattr(self, "_rows", {}), owner: list(rows)}
        rows = sorted((r for rs in self._rows.values() for r in rs), key=lambda r: r[0])
        table = (Disp * max(len(rows), 1))()
        ctypes.memset(ctypes.addressof(self) + Tick.bits.offset, 0, 8 * (DISP_BITS // 64))
        for i, (a, fn, user) in enumerate(rows):
            table[i] = Disp(a, 0, fn, user)
            k = (a >> 2) % DISP_BITS
            self.bits[k >> 6] |= 1 << (k & 63)
        # the struct points into it; a table replaced while the block hook walks it (a hook there
        # adding or removing hooks) stays alive: the last KEEP_TABLES are kept
        self._tables = (getattr(self, "_tables", []) + [table])[-KEEP_TABLES:]
        self.disp = ctypes.cast(table, ctypes.POINTER(Disp))
        self.ndisp = len(rows)


def _lib():
    return helper(_SRC, "tick", Tick, need="its block hook (armload/emu/hw/_tick.c)")


def install(uc) -> Tick:
    """A Tick counter attached to `uc` (keep the returned object alive as long as `uc`)."""
    from unicorn.unicorn_py3.unicorn import uc_hook_h, uclib
    lib = _lib()
    t = Tick()
    t.deadline = t.budget = NEVER
    ctypes.memset(ctypes.addressof(t) + Tick.keys.offset, 0xFF, 8 * 16384)
    t.mem_read = ctypes.cast(uclib.uc_mem_read, ctypes.c_void_p).value
    t.reg_read = ctypes.cast(uclib.uc_reg_read, ctypes.c_void_p).value
    t.emu_stop = ctypes.cast(uclib.uc_emu_stop, ctypes.c_void_p).value
    h = uc_hook_h()
    err = uclib.uc_hook_add(uc._uch, ctypes.byref(h), UC_HOOK_BLOCK, ctypes.cast(lib.armload_tick_hook, ctypes.c_void_p),
                            ctypes.cast(ctypes.addressof(t), ctypes.c_void_p), ctypes.c_uint64(1), ctypes.c_uint64(0))
    if err:
        raise RuntimeError(f"uc_hook_add failed ({err})")
    t._hook = h.value
    return t


BLOCK_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_void_p)


class BlockHook:
    """A handle of `PyBlockHooks.add` (Unicorn's own handles are ints)."""
    __slots__ = ("addr", "cfn")

    def __init__(self, addr: int, cfn):
        self.addr, self.cfn = addr, cfn


class PyBlockHooks:
    """Python hooks at addresses that start every block they run in (hw/blocks.py), called from the
    block hook's dispatch table as a Unicorn code hook would call them: fn(uc, addr, size, None),
    before the instruction; an exception stops emulation and emu_start raises it, as Unicorn's
    Python binding does for its own hooks."""

    def __init__(self, tick: Tick, uc):
        self.tick, self.uc, self.hooks = tick, uc, []

    def add(self, addr: int, fn) -> BlockHook:
        uc = self.uc

        def call(_h, a, size, _u):
            try:
                fn(uc, a, size, None)
            except BaseException as e:          # noqa: BLE001 - handed to emu_start, as Unicorn does
                if uc._hook_exception is None:
                    uc._hook_exception = e
                uc.emu_stop()
        h = BlockHook(addr, BLOCK_FN(call))
        self.hooks.append(h)
        self._table()
        return h

    def remove(self, h: BlockHook) -> None:
        self.hooks = [x for x in self.hooks if x is not h]
        self._table()

    def _table(self) -> None:
        self.tick.dispatch(self, [(h.addr, ctypes.cast(h.cfn, ctypes.c_void_p).value, None) for h in self.hooks])
