"""Emulation speed: instructions per second of a long-running loop, with verification on.

`run_benchmark()` is what `armload bench` calls; `python benchmarks/bench_emulate.py` prints it.
The loop is the `spin` sample (init never returns) when the loader and samples are present,
otherwise an equivalent keystone-assembled loop. The run ends when the instruction budget is
used up, so the number of executed instructions is exact.
"""
from __future__ import annotations

import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _spin_module():
    path = os.path.join(ROOT, "sample_modules", "spin-arm.ko")
    try:
        from armload.loader import load_module
        if os.path.exists(path):
            return load_module(path), None, "sample_modules/spin-arm.ko"
    except Exception:
        pass
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from emu_fixtures import build_module
    mod, k = build_module({"init_module": """
        push {r4, lr}
        bl {plt:_printk}
        movw r3, #{lo:count}
        movt r3, #{hi:count}
    loop:
        ldr r2, [r3]
        add r2, r2, #1
        str r2, [r3]
        b loop
    """}, data={"count": b"\0" * 4}, rodata={"msg": b"spin\n\0"}, externs={"_printk": "func"})
    return mod, k, "keystone spin loop"


def run_benchmark(budget: int = 50_000_000) -> dict:
    from armload.emulate import Machine
    from armload.verify import verify_module
    mod, kernel, what = _spin_module()
    t0 = time.perf_counter()
    v = verify_module(mod, kernel)
    t_verify = time.perf_counter() - t0
    t1 = time.perf_counter()
    m = Machine(mod, kernel, budget=budget, timeout=120.0)
    t_setup = time.perf_counter() - t1
    r = m.run_init()
    t_run = r.elapsed
    return {
        "module": what,
        "instructions": budget if r.status == "budget" else None,
        "status": r.status,
        "run_seconds": round(t_run, 4),
        "instructions_per_second": (budget / t_run) if r.status == "budget" and t_run > 0 else None,
        "machine_setup_seconds": round(t_setup, 4),
        "verify_seconds": round(t_verify, 4),
        "verify": v.summary(),
        "verified": v.ok,
        "kernel_calls": len(r.calls),
    }


if __name__ == "__main__":
    res = run_benchmark(int(sys.argv[1]) if len(sys.argv) > 1 else 50_000_000)
    for k, v in res.items():
        if k == "instructions_per_second" and v:
            v = f"{v / 1e6:.1f} M instructions/s"
        print(f"{k:26s} {v}")
