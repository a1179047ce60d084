"""`armload bench call`: a `run` with --call against a plain `run` of the same module, inside the
booted kernel, as ratios: instructions (everything the kernel ran, deterministic) and CPU seconds
of this process (the minimum of a few repetitions; wall clock plays no part)."""
from __future__ import annotations

import contextlib
import io
import json
import os
import time

from .inputs import DEBIAN_SYMVERS, SAMPLES, VMLINUZ

MODULE = os.path.join(SAMPLES, "devkit-arm-debug.ko")
CALLS = [["--call", "devkit_add", "5"], ["--call", "devkit_sum", "10"], ["--call", "devkit_describe", "buf:16", "16"],
         ["--call", "devkit_count_char", "s:banana", "97"]]
TARGET = 2.0                                       # issue 29: no more than twice a plain run


def _run(extra: list[str]) -> tuple[dict, float]:
    from ..cli import main
    argv = ["run", MODULE, "count=2", "--kernel", DEBIAN_SYMVERS, "--kernel", VMLINUZ, "--settle-ms", "0",
            "--no-verify", "--json", *extra]
    out = io.StringIO()
    t0 = time.process_time()
    with contextlib.redirect_stdout(out):
        rc = main(argv)
    cpu = time.process_time() - t0
    doc = json.loads(out.getvalue())
    if rc != 0:
        raise RuntimeError(f"bench call: `armload {' '.join(argv)}` failed")
    return doc, cpu


def _insns(doc: dict) -> int:
    return sum(m["instructions"] for m in doc["modules"]) + sum(c["instructions"] for c in doc["calls"])


def run_benchmark(repeat: int = 3) -> dict:
    _run([])                                        # the boot snapshot and the caches, once
    plain = [_run([]) for _ in range(repeat)]
    calls = [_run([a for c in CALLS for a in c]) for _ in range(repeat)]
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
