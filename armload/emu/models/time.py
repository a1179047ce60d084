"""kernel/time: clocks read the simulated clock (instructions at 1 GHz plus time slept)."""
from __future__ import annotations

import struct

from .base import ModelLibrary

REALTIME_BASE_NS = 1_700_000_000 * 10**9      # CLOCK_REALTIME at boot: a fixed, stated epoch


def register(lib: ModelLibrary) -> None:
    m = lib.model

    def ns(call):
        return call.clock.ns()

    def ret64(v):
        return v & 0xFFFFFFFF, (v >> 32) & 0xFFFFFFFF

    @m("ktime_get", "ktime_get_raw", "ktime_get_mono_fast_ns", "ktime_get_raw_fast_ns",
       "ktime_get_boot_fast_ns", "ktime_get_with_offset", "ktime_get_coarse_with_offset", "sched_clock",
       "local_clock", "ktime_get_snapshot", subsystem="time")
    def ktime_get(call):
        t = ns(call)
        if call.name in ("ktime_get_with_offset", "ktime_get_coarse_with_offset") and call.arg(0) == 0:
            t += REALTIME_BASE_NS          # TK_OFFS_REAL
        return ret64(t)

    @m("ktime_get_real_ns", "ktime_get_real_fast_ns", subsystem="time")
    def ktime_get_real(call):
        return ret64(ns(call) + REALTIME_BASE_NS)

    @m("ktime_get_seconds", "ktime_get_boottime_seconds", subsystem="time")
    def ktime_get_seconds(call):
        return ret64(ns(call) // 10**9)

    @m("ktime_get_real_seconds", subsystem="time")
    def ktime_get_real_seconds(call):
        return ret64((ns(call) + REALTIME_BASE_NS) // 10**9)

    def ts64(call, t):
        s, rem = divmod(t, 10**9)
        call.write(call.arg(0), struct.pack("<qI", s, rem) + b"\0\0\0\0")

    @m("ktime_get_ts64", "ktime_get_raw_ts64", "ktime_get_boottime_ts64", subsystem="time")
    def ktime_get_ts64(call):
        ts64(call, ns(call))

    @m("ktime_get_real_ts64", "ktime_get_coarse_real_ts64", subsystem="time")
    def ktime_get_real_ts64(call):
        ts64(call, ns(call) + REALTIME_BASE_NS)

    @m("get_jiffies_64", subsystem="time")
    def get_jiffies_64(call):
        return ret64(call.clock.jiffies)

    @m("__udelay", "__const_udelay", "__delay", subsystem="time")
    def udelay(call):
        # Only reached without an image (with one, arm_delay_ops' real loop runs against a
        # loops_per_jiffy calibrated to the simulated clock): the same delay, as time passing.
        if call.name == "__udelay":
            call.clock.sleep(call.arg(0) * 1000)
        elif call.name == "__const_udelay":     # xloops = usecs * 0x10c7 (2**32 / 10**6)
            call.clock.sleep(call.arg(0) * 1000 // 0x10C7)
        else:
            call.clock.sleep(call.arg(0) * 2)     # __loop_delay: 2 instructions a loop
