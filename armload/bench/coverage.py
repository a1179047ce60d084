"""The cost of --coverage and --trace inside the booted kernel (`armload bench coverage`).

Each row loads a sample with the kernel's own load_module in a fresh restore of the booted
kernel, once plain and once per observer, and compares the instructions run (they must be equal:
the hooks observe, the guest does the same work) and the process CPU time. Two samples:
* spin: init loops in module text until the instruction budget ends: every block is the
  module's (the worst case for a block counter);
* devkit (count=64): init calls into the kernel 64 times in a loop (kmalloc, a spin lock, a list
  check, printk): the typical case, and the one where --trace has the most to record.
"""
from __future__ import annotations

import os
import time

from .inputs import ROOT, VMLINUZ

SAMPLES = (("spin-arm.ko", "", 20_000_000), ("devkit-arm-debug.ko", "count=64", 2_000_000_000))
MODES = ("plain", "coverage", "coverage-python", "trace", "coverage+trace")


def _one(path: str, params: str, budget: int, mode: str) -> dict:
    from ..emu.booted.modrun import BootedRun
    from ..emu.booted.observe import Observation
    from ..kernel.config import DEBIAN_ARMMP
    from ..kernel.provider import Kernel
    run = BootedRun(VMLINUZ, Kernel.from_files([os.path.join(ROOT, "sample_modules", "Module.symvers"), VMLINUZ],
                                               DEBIAN_ARMMP), DEBIAN_ARMMP)
    obs = None
    if mode != "plain":
        obs = Observation(run, coverage=mode.startswith("coverage"), trace="trace" in mode,
                          native=mode != "coverage-python")
    t0 = time.process_time()
    r = obs.load(path, params, budget=budget) if obs else run.load(path, params, budget=budget)
    cpu = time.process_time() - t0
    cov, trace = (obs.cov, obs.trace) if obs else (None, None)
    out = {"status": r.status, "instructions": r.instructions, "cpu": cpu}
    if cov is not None:
        out["blocks"] = sum(cov.counter.blocks()[0].values())
        out["native"] = cov.native
    if trace is not None:
        out["calls"] = len(trace.calls)
    return out


def run_benchmark() -> dict:
    rows = []
    for ko, params, budget in SAMPLES:
        path = os.path.join(ROOT, "sample_modules", ko)
        _one(path, params, budget, "plain")                  # warm: the restore's page cache, imports
        res = {m: _one(path, params, budget, m) for m in MODES}
        base = res["plain"]
        for m in MODES:
            res[m]["cpu_ratio"] = res[m]["cpu"] / base["cpu"] if base["cpu"] else None
            res[m]["same_instructions"] = res[m]["instructions"] == base["instructions"]
        rows.append({"sample": ko, "params": params, "budget": budget, "modes": res})
    return {"rows": rows}


def print_benchmark(e: dict) -> None:
    print("--coverage / --trace inside the booted kernel (each a fresh restore; CPU time of load_module and init, "
          "ratio to the plain run; instructions must be the plain run's)")
    for row in e["rows"]:
        base = row["modes"]["plain"]
        print(f"  {row['sample']} {row['params'] or ''}: plain {base['instructions']:,} instructions, "
              f"{base['cpu'] * 1e3:.0f} ms CPU ({row['modes']['plain']['status']})")
        for m in MODES[1:]:
            x = row["modes"][m]
            extra = []
            if "blocks" in x:
                extra.append(f"{x['blocks']:,} module blocks counted ({'C' if x['native'] else 'Python'} hook)")
            if "calls" in x:
                extra.append(f"{x['calls']:,} calls traced")
            same = "same instructions" if x["same_instructions"] else f"INSTRUCTIONS DIFFER: {x['instructions']:,}"
            print(f"    {m:15s} {x['cpu'] * 1e3:7.0f} ms CPU  x{x['cpu_ratio']:.2f}  {same}; {', '.join(extra)}")
