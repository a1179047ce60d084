"""`armload bench emulate`: emulated instructions per second, side by side in one run.

1. raw Unicorn, no hooks, a counted ARM loop (the ceiling);
2. the same loop with armload's instruction clock attached (the block hook every run has);
3. the `spin` sample through the whole machine (init never returns; the budget ends it).
"""
from __future__ import annotations

import os
import struct
import time

from unicorn import UC_ARCH_ARM, UC_MODE_ARM, UC_PROT_ALL, Uc
from unicorn import arm_const as A

from .inputs import SAMPLES

CODE, STOP = 0x10000, 0x10100
LOOP = struct.pack("<IIIII", 0xE3A00000, 0xE2800001, 0xE1500001, 0x1AFFFFFC, 0xE12FFF1E)
# mov r0, #0; 1: add r0, r0, #1; cmp r0, r1; bne 1b; bx lr   (3 instructions a round)


def _loop(rounds: int, with_clock: bool) -> tuple[float, int]:
    uc = Uc(UC_ARCH_ARM, UC_MODE_ARM)
    uc.mem_map(CODE, 0x1000, UC_PROT_ALL)
    uc.mem_write(CODE, LOOP)
    clock = None
    if with_clock:
        from ..emu.clock import Clock
        clock = Clock(uc, 250)
    uc.reg_write(A.UC_ARM_REG_R1, rounds)
    uc.reg_write(A.UC_ARM_REG_LR, STOP)
    t = time.perf_counter()
    uc.emu_start(CODE, STOP)
    dt = time.perf_counter() - t
    n = 1 + 3 * rounds + 1
    if clock is not None and clock.insns != n:
        raise AssertionError(f"clock counted {clock.insns} instructions, the loop retires {n}")
    return dt, n


SPIN_LOOP_OFFSET, SPIN_LOOP_INSNS = 0x20, 15    # spin_init's loop: ldr, add, str, dmb, 10 nops, b


def _raw_spin(mod, seconds: float) -> float:
    """The spin sample's own loop in bare Unicorn (no hooks): instructions from its counter."""
    uc = Uc(UC_ARCH_ARM, UC_MODE_ARM)
    for r in mod.regions:
        if r.size:
            uc.mem_map(r.base, r.size, UC_PROT_ALL)
            uc.mem_write(r.base, bytes(r.data))
    counter = next(s.addr for s in mod.symbols if s.name == "spin_count")
    uc.reg_write(A.UC_ARM_REG_R3, counter)
    uc.reg_write(A.UC_ARM_REG_SP, mod.regions[0].base + 0x100)
    t = time.perf_counter()
    uc.emu_start((mod.init_addr & ~1) + SPIN_LOOP_OFFSET, 0, timeout=int(seconds * 1e6))
    dt = time.perf_counter() - t
    return SPIN_LOOP_INSNS * struct.unpack("<I", uc.mem_read(counter, 4))[0] / dt


def run_benchmark(rounds: int = 30_000_000, budget: int = 150_000_000) -> dict:
    from ..emu.clock import _native_lib
    raw_t, n = _loop(rounds, False)
    clk_t, _ = _loop(rounds, True)
    out = {"loop_instructions": n, "raw_unicorn_ips": n / raw_t, "with_clock_ips": n / clk_t,
           "clock_ratio": raw_t / clk_t, "clock": "native" if _native_lib() else "python"}
    path = os.path.join(SAMPLES, "spin-arm.ko")
    if os.path.exists(path):
        from ..loader.session import load_module
        from ..emu.machine import Machine
        mod = load_module(path)
        m = Machine(mod, None, budget=budget)
        r = m.run_init()
        out.update(spin_status=r.status, spin_instructions=r.instructions, spin_seconds=r.elapsed,
                   spin_ips=r.instructions / r.elapsed if r.elapsed else None,
                   spin_raw_ips=_raw_spin(mod, 1.0))
        out["spin_ratio"] = out["spin_ips"] / out["spin_raw_ips"]
    return out


def print_benchmark(e: dict) -> None:
    print(f"emulation, one run: raw Unicorn {e['raw_unicorn_ips'] / 1e6:.0f} M instr/s | with armload's "
          f"{e['clock']} instruction clock {e['with_clock_ips'] / 1e6:.0f} M instr/s "
          f"({e['clock_ratio'] * 100:.0f}% of raw) on a {e['loop_instructions']:,}-instruction loop")
    if "spin_ips" in e:
        print(f"  the spin sample's loop: bare Unicorn {e['spin_raw_ips'] / 1e6:.0f} M instr/s | through armload's "
              f"machine {e['spin_ips'] / 1e6:.0f} M instr/s ({e['spin_ratio'] * 100:.0f}% of bare; "
              f"{e['spin_instructions']:,} instructions, {e['spin_status']})")
