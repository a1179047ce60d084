"""`armload bench emulate`: the booted machine's speed against bare Unicorn, in one run.

The same ARM loop twice: in a bare Unicorn (no hooks: the ceiling), and inside the booted Debian
kernel (armload/emu/booted), copied into module_alloc memory and called from pid 1 like any
kernel function: the booted machine's instruction clock (the native block hook hw/_tick.c, which
counts, stops at timer deadlines and budgets) runs, and the kernel takes its timer interrupts
meanwhile (their instructions count: they are what the machine executes). Two loops: 3
instructions a round (a block per round: the block hook's worst case) and 15 (spin-arm.ko's loop
shape: a counter and twelve nops). Ratios are host time, measured side by side.
"""
from __future__ import annotations

import struct
import time

from unicorn import UC_ARCH_ARM, UC_MODE_ARM, UC_PROT_ALL, Uc
from unicorn import arm_const as A

from ..errors import ArmloadError
from .inputs import VMLINUZ

CODE, STOP = 0x10000, 0x10100
NOP = 0xE320F000
# mov r0, #0; 1: add r0, r0, #1; [nop x PAD]; cmp r0, r1; bne 1b; bx lr
LOOPS = {3: 0, 15: 12}                  # instructions a round -> nops in the body


def loop_code(pad: int) -> bytes:
    body = [0xE2800001] + [NOP] * pad + [0xE1500001]
    bne = 0x1A000000 | ((-(len(body) + 2)) & 0xFFFFFF)        # back to the add: pc + 8 - 4 * (len + 1)
    return struct.pack(f"<{len(body) + 3}I", 0xE3A00000, *body, bne, 0xE12FFF1E)


def _bare(code: bytes, rounds: int) -> tuple[float, int]:
    uc = Uc(UC_ARCH_ARM, UC_MODE_ARM)
    uc.mem_map(CODE, 0x1000, UC_PROT_ALL)
    uc.mem_write(CODE, code)
    uc.reg_write(A.UC_ARM_REG_R1, rounds)
    uc.reg_write(A.UC_ARM_REG_LR, STOP)
    t = time.perf_counter()
    uc.emu_start(CODE, STOP)
    return time.perf_counter() - t, uc.reg_read(A.UC_ARM_REG_R0)


def _booted(k, addr: int, rounds: int) -> tuple[float, int, int, int]:
    """(host seconds, r0, instructions the machine counted, interrupts taken) of the loop."""
    q0, i0 = k.m.hw.irqs_taken, k.insns
    t = time.perf_counter()
    r0 = k.call(addr, 0, rounds, budget=20 * rounds + 10_000_000)
    return time.perf_counter() - t, r0, k.insns - i0, k.m.hw.irqs_taken - q0


def run_benchmark(insns: int = 90_000_000, vmlinuz: str = VMLINUZ) -> dict:
    from ..emu.booted.kernel import BootedKernel
    k = BootedKernel.get(vmlinuz)
    out = {"loops": []}
    for per_round, pad in LOOPS.items():
        rounds = insns // per_round
        code = loop_code(pad)
        addr = k.module_alloc(4096)
        if not addr:
            raise ArmloadError("module_alloc failed in the booted kernel (the loop's code)")
        k.write(addr, code)
        n = 2 + per_round * rounds                          # mov and bx lr, then the rounds
        raw_t, raw_r0 = _bare(code, rounds)
        dt, r0, counted, irqs = _booted(k, addr, rounds)
        if raw_r0 != rounds or r0 != rounds:
            raise ArmloadError(f"the {per_round}-instruction loop ended at {raw_r0} (bare) / {r0} (booted), "
                               f"not {rounds}")
        if counted < n:
            raise ArmloadError(f"the booted machine counted {counted:,} instructions, the loop alone retires {n:,}")
        out["loops"].append({"insns_per_round": per_round, "loop_instructions": n, "raw_unicorn_ips": n / raw_t,
                             "booted_ips": counted / dt, "booted_instructions": counted, "irqs": irqs,
                             "kernel_instructions": counted - n, "ratio": raw_t / dt})
        k.call("vfree", addr)
    return out


def print_benchmark(e: dict) -> None:
    print("emulation: an ARM loop in bare Unicorn (no hooks) and inside the booted Debian kernel (its instruction "
          "clock, its timer interrupts)")
    for r in e["loops"]:
        print(f"  {r['insns_per_round']:>2}-instruction loop, {r['loop_instructions']:,} instructions: bare Unicorn "
              f"{r['raw_unicorn_ips'] / 1e6:.0f} M instr/s | booted {r['booted_ips'] / 1e6:.0f} M instr/s "
              f"({r['ratio'] * 100:.0f}% of bare; {r['irqs']} timer interrupts, {r['kernel_instructions']:,} "
              f"kernel instructions among them)")
