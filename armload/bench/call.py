"""`armload bench call`: a run with --call against a plain run of the same module, inside the
booted kernel (the library path `armload run` takes: BootedRun's load and call), as ratios: instructions (everything the kernel ran, deterministic) and CPU seconds
of this process (the minimum of a few repetitions; wall clock plays no part)."""
from __future__ import annotations

import os
import time

from .inputs import DEBIAN_SYMVERS, SAMPLES, VMLINUZ

MODULE = os.path.join(SAMPLES, "devkit-arm-debug.ko")
CALLS = [["--call", "devkit_add", "5"], ["--call", "devkit_sum", "10"], ["--call", "devkit_describe", "buf:16", "16"],
         ["--call", "devkit_count_char", "s:banana", "97"]]
TARGET = 2.0                                       # issue 29: no more than twice a plain run


def _run(kernel, with_calls: bool) -> tuple[list, float]:
    """What `armload run MODULE count=2 [--call ...]` runs inside the booted kernel (BootedRun: a
    restore, the kernel's load_module and init, the calls); the Results and the CPU seconds."""
    from ..emu.booted.call import parse_arg
    from ..emu.booted.modrun import BootedRun
    from ..kernel.config import DEBIAN_ARMMP
    t0 = time.process_time()
    run = BootedRun(VMLINUZ, kernel, DEBIAN_ARMMP)
    results = [run.load(MODULE, "count=2")]
    for c in CALLS if with_calls else ():
        results.append(run.call(c[1], *[parse_arg(a) for a in c[2:]]))
    cpu = time.process_time() - t0
    bad = [r.summary() for r in results if r.status != "returned"]
    if bad:
        raise RuntimeError(f"bench call: {'; '.join(bad)}")
    return results, cpu


def _insns(results) -> int:
    return sum(r.instructions for r in results)


def run_benchmark(repeat: int = 3) -> dict:
    from ..kernel.config import DEBIAN_ARMMP
    from ..kernel.provider import Kernel
    kernel = Kernel.from_files([DEBIAN_SYMVERS, VMLINUZ], DEBIAN_ARMMP)
    _run(kernel, False)                             # the boot snapshot and the caches, once
    plain = [_run(kernel, False) for _ in range(repeat)]
    calls = [_run(kernel, True) for _ in range(repeat)]
    pi, ci = _insns(plain[0][0]), _insns(calls[0][0])
    pc, cc = min(c for _, c in plain), min(c for _, c in calls)
    return {"module": os.path.basename(MODULE), "calls": [" ".join(c[1:]) for c in CALLS],
            "plain": {"instructions": pi, "cpu_seconds": round(pc, 4)},
            "with_calls": {"instructions": ci, "cpu_seconds": round(cc, 4)},
            "ratio_instructions": round(ci / pi, 4), "ratio_cpu": round(cc / pc, 3), "target": TARGET}


def print_benchmark(r: dict) -> None:
    print(f"run {r['module']} inside the booted kernel, plain against {len(r['calls'])} --call "
          f"({'; '.join(r['calls'])}); CPU: the least of the repetitions")
    print(f"  {'':12} {'instructions':>14} {'CPU s':>8}")
    for k in ("plain", "with_calls"):
        print(f"  {k:12} {r[k]['instructions']:>14,} {r[k]['cpu_seconds']:>8.3f}")
    print(f"  ratio        {r['ratio_instructions']:>14.4f} {r['ratio_cpu']:>8.3f}   (target <= {r['target']:g})")
