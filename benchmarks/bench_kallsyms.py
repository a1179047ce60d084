#!/usr/bin/env python3
"""Benchmark the kallsyms lookup strategies on Debian's 6.1 armmp kernel (armload issue 5).

    python benchmarks/bench_kallsyms.py [IMAGE] [--json] [--hits N] [--misses N] [--linear N]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from armload.errors import ArmloadError  # noqa: E402
from armload.bench.kallsyms import format_benchmark, run_benchmark  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("image", nargs="?", default=None)
    p.add_argument("--hits", type=int, default=1000)
    p.add_argument("--misses", type=int, default=300)
    p.add_argument("--linear", type=int, default=12, help="sample size for the linear strategies (a), (b)")
    p.add_argument("--module", help=".ko whose undefined symbols form the batch")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    try:
        res = run_benchmark(a.image, hits=a.hits, misses=a.misses, linear_sample=a.linear, module=a.module,
                            progress=None if a.json else (lambda m: print(f"... {m}", file=sys.stderr)))
    except ArmloadError as e:
        print(f"bench_kallsyms: {e}", file=sys.stderr)
        return 1
    if a.json:
        json.dump(res, sys.stdout, indent=2, default=str)
        print()
    else:
        print(format_benchmark(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
