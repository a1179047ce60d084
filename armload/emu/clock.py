"""Simulated time: the retired instruction count at a stated clock, plus time spent sleeping.

The count comes from one UC_HOOK_BLOCK callback (no per-instruction hook): in C when a compiler
is available (`_counter.c`, built once into a per-user cache and loaded with ctypes), otherwise
the same logic in Python (slower, identical counts). The hook also keeps `jiffies_64` in
emulated memory current, so code that polls jiffies sees time move, and stops the run when the
instruction budget is reached. Results depend only on the code executed, never on the host.
"""
from __future__ import annotations

import ctypes
import os
import sys

from unicorn import UC_HOOK_BLOCK
from unicorn import arm_const as A

NS_PER_INSN = 1                   # the stated clock: 1 GHz, one instruction per cycle
INITIAL_JIFFIES_SECONDS = 300     # include/linux/jiffies.h: INITIAL_JIFFIES = -300 * HZ
CACHE_SLOTS = 65536
_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_counter.c")


class _Counter(ctypes.Structure):
    _fields_ = [("insns", ctypes.c_uint64), ("stop_at", ctypes.c_uint64), ("next_tick", ctypes.c_uint64),
                ("insns_per_tick", ctypes.c_uint64), ("jiffies", ctypes.c_uint64),
                ("jiffies_addr", ctypes.c_uint64), ("stopped", ctypes.c_uint32),
                ("blocks_lo", ctypes.c_uint32), ("mem_read", ctypes.c_void_p), ("mem_write", ctypes.c_void_p),
                ("reg_read", ctypes.c_void_p), ("emu_stop", ctypes.c_void_p),
                ("keys", ctypes.c_uint64 * CACHE_SLOTS), ("sizes", ctypes.c_uint32 * CACHE_SLOTS),
                ("counts", ctypes.c_uint32 * CACHE_SLOTS)]


_LIB: object = None


def _native_lib():
    """The compiled counter, or None (no compiler): built once per source version."""
    global _LIB
    if _LIB is None:
        from .native import build
        _LIB = build(_SRC, "counter", lambda lib: lib.armload_counter_size() == ctypes.sizeof(_Counter)) or False
    return _LIB or None


def thumb_count(code: bytes) -> int:
    """Instructions in a block of Thumb code (a 32-bit instruction starts 0b11101/11110/11111)."""
    n = i = 0
    half = len(code) // 2
    while i < half:
        top = (code[2 * i] | code[2 * i + 1] << 8) >> 11
        i += 2 if top in (0x1D, 0x1E, 0x1F) else 1
        n += 1
    return n


class Clock:
    """Instruction count, simulated nanoseconds, jiffies; the budget stop."""

    def __init__(self, uc, hz: int, *, native: bool | None = None):
        self.uc = uc
        self.hz = hz
        self.insns_per_tick = 1_000_000_000 // (hz * NS_PER_INSN)
        self.sleep_ns = 0                 # time that passed without instructions (sleeps, waits)
        self.jiffies_addr = 0
        self.jiffies0 = (-INITIAL_JIFFIES_SECONDS * hz) & 0xFFFFFFFF
        lib = _native_lib() if native in (None, True) else None
        self.native = lib is not None
        c = self._c = _Counter()
        c.stop_at = 1 << 63
        c.insns_per_tick = self.insns_per_tick
        c.jiffies = self.jiffies0
        c.next_tick = self.insns_per_tick
        ctypes.memset(ctypes.addressof(c) + _Counter.keys.offset, 0xFF, 8 * CACHE_SLOTS)
        if lib is not None:
            from unicorn.unicorn_py3.unicorn import uclib
            c.mem_read = ctypes.cast(uclib.uc_mem_read, ctypes.c_void_p).value
            c.mem_write = ctypes.cast(uclib.uc_mem_write, ctypes.c_void_p).value
            c.reg_read = ctypes.cast(uclib.uc_reg_read, ctypes.c_void_p).value
            c.emu_stop = ctypes.cast(uclib.uc_emu_stop, ctypes.c_void_p).value
            self._hook = _add_native_hook(uc, lib, c)
        else:
            self._cache: dict[tuple[int, int], int] = {}
            self._hook = uc.hook_add(UC_HOOK_BLOCK, self._py_block)

    # --- the Python twin of armload_block_hook ---------------------------------------------
    def _py_block(self, uc, addr, size, _user):
        c = self._c
        n = self._cache.get((addr, size))
        if n is None:
            if uc.reg_read(A.UC_ARM_REG_CPSR) & 0x20:
                try:
                    n = thumb_count(bytes(uc.mem_read(addr, min(size, 4096))))
                except Exception:
                    n = size // 2
            else:
                n = size // 4
            self._cache[(addr, size)] = n
        if c.insns + n > c.stop_at and not c.stopped:
            c.stopped = 1                 # this block would cross the budget: it does not run
            uc.emu_stop()
            return
        c.insns += n
        c.blocks_lo = (c.blocks_lo + 1) & 0xFFFFFFFF
        if c.jiffies_addr and c.insns >= c.next_tick:
            ticks = 1 + (c.insns - c.next_tick) // c.insns_per_tick
            c.jiffies += ticks
            c.next_tick += ticks * c.insns_per_tick
            uc.mem_write(c.jiffies_addr, c.jiffies.to_bytes(8, "little"))

    def clear_cache(self) -> None:
        """Code changed (unmapped, patched, remapped): forget per-block instruction counts."""
        if self.native:
            ctypes.memset(ctypes.addressof(self._c) + _Counter.keys.offset, 0xFF, 8 * CACHE_SLOTS)
        else:
            self._cache.clear()

    # --- reading ---------------------------------------------------------------------------
    @property
    def insns(self) -> int:
        return self._c.insns

    def ns(self) -> int:
        """Simulated nanoseconds since boot (ktime_get())."""
        return self.uptime0_ns + self._c.insns * NS_PER_INSN + self.sleep_ns

    uptime0_ns = 0

    @property
    def jiffies(self) -> int:
        return self._c.jiffies

    def bind_jiffies(self, addr: int) -> None:
        """Keep the 64-bit jiffies_64 at `addr` (jiffies aliases its low word) current."""
        self._c.jiffies_addr = addr
        self.uc.mem_write(addr, self._c.jiffies.to_bytes(8, "little"))

    # --- budget and sleeping ---------------------------------------------------------------
    def arm_budget(self, budget: int | None) -> int:
        """Stop when `budget` more instructions have run; returns the absolute stop count."""
        c = self._c
        c.stopped = 0
        c.stop_at = (c.insns + budget) if budget else (1 << 63)
        return c.stop_at

    @property
    def budget_hit(self) -> bool:
        return bool(self._c.stopped)

    def sleep(self, ns: int) -> None:
        """Time passes without instructions (msleep, schedule_timeout, waiting for an event)."""
        if ns <= 0:
            return
        self.sleep_ns += ns
        self._resync()

    def _resync(self) -> None:
        c = self._c
        total = c.insns * NS_PER_INSN + self.sleep_ns
        ticks = total // (self.insns_per_tick * NS_PER_INSN)
        c.jiffies = (self.jiffies0 + ticks) & 0xFFFFFFFFFFFFFFFF
        # next tick boundary, expressed in instructions from now
        next_ns = (ticks + 1) * self.insns_per_tick * NS_PER_INSN
        c.next_tick = c.insns + max(1, (next_ns - total) // NS_PER_INSN)
        if c.jiffies_addr:
            self.uc.mem_write(c.jiffies_addr, c.jiffies.to_bytes(8, "little"))

    def tick_time(self, j: int) -> int:
        """Simulated ns at which jiffies becomes `j` (the next tick when j is not in the future)."""
        now_ticks = (self._c.jiffies - self.jiffies0) & 0xFFFFFFFF
        ticks = (j - self.jiffies0) & 0xFFFFFFFF
        if (ticks - now_ticks) & 0x80000000 or ticks == now_ticks:
            ticks = now_ticks + 1
        return self.uptime0_ns + ticks * self.insns_per_tick * NS_PER_INSN

    def ns_to_jiffies(self, ns: int) -> int:
        return -(-ns * self.hz // 1_000_000_000)

    def jiffies_to_ns(self, j: int) -> int:
        return j * 1_000_000_000 // self.hz


def _add_native_hook(uc, lib, counter) -> int:
    from unicorn.unicorn_py3.unicorn import uc_hook_h, uclib
    h = uc_hook_h()
    cb = ctypes.cast(lib.armload_block_hook, ctypes.c_void_p)
    err = uclib.uc_hook_add(uc._uch, ctypes.byref(h), UC_HOOK_BLOCK, cb, ctypes.cast(ctypes.addressof(counter),
                            ctypes.c_void_p), ctypes.c_uint64(1), ctypes.c_uint64(0))
    if err:
        raise RuntimeError(f"uc_hook_add failed ({err})")
    return h.value


if __name__ == "__main__":        # python -m armload.emu.clock: says which counter is in use
    print("native" if _native_lib() else "python", file=sys.stdout)
