"""Coverage's cost (`armload bench coverage`): the spin sample with coverage off, on (C hook) and
with the Python hook, in one process."""
from __future__ import annotations

import os

from ..emu.coverage import Coverage
from ..emu.machine import Machine
from ..loader.session import load_module

def run_benchmark(budget: int = 20_000_000) -> dict:
    """The spin sample (a loop entirely in module text: every block hooked, the worst case)
    with coverage off and on, in one process."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    mod = load_module(os.path.join(root, "sample_modules", "spin-arm.ko"))
    out = {"budget": budget}
    for label in ("off", "on", "python"):
        m = Machine(mod, None, budget=budget)
        cov = Coverage(m, native=label == "on") if label != "off" else None
        if label == "on":
            out["native"] = cov.native
        r = m.run_init()
        out[f"{label}_ips"] = r.instructions / r.elapsed if r.elapsed else None
        out[f"{label}_instructions"] = r.instructions
        if cov is not None:
            out[f"{label}_blocks"] = sum(cov.counts.values())
    out["ratio"] = out["on_ips"] / out["off_ips"] if out["off_ips"] and out["on_ips"] else None
    out["python_ratio"] = out["python_ips"] / out["off_ips"] if out["off_ips"] and out["python_ips"] else None
    return out


def print_benchmark(e: dict) -> None:
    print(f"coverage (spin sample, {e['budget']:,}-instruction budget, all in module text): off "
          f"{e['off_ips'] / 1e6:.1f} M instr/s | on ({'C' if e['native'] else 'Python'} hook) "
          f"{e['on_ips'] / 1e6:.1f} M instr/s ({e['ratio'] * 100:.0f}% of off) | Python hook "
          f"{e['python_ips'] / 1e6:.1f} M instr/s ({e['python_ratio'] * 100:.0f}%); "
          f"{e['on_blocks']:,} blocks hooked")
