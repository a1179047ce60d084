"""`armload bench`: performance numbers side by side in one run."""
from __future__ import annotations

import json
import sys

WHAT = ("loader", "kallsyms", "emulate", "all")


def register(sub) -> None:
    p = sub.add_parser("bench", help="benchmarks: loader stages, kallsyms lookups, emulation speed",
                       description="Run benchmarks and print them side by side. loader: parse, PLT count, "
                                   "relocate and total for the largest sample, the largest Debian module "
                                   "(after make corpus) and a seed-scale synthetic object (also with 5 non-zero-addend "
                                   "calls, whose ties make lib/sort.c's order matter), count_plts per rule "
                                   "beside a native C count of the same file (ratio), plus the legacy "
                                   "O(n^2) count. kallsyms: lookup strategies on the real Debian table. "
                                   "emulate: instructions per second with verification on.")
    p.add_argument("what", nargs="?", choices=WHAT, default="loader")
    p.add_argument("--image", help="kernel image for the kallsyms benchmark (default: the Debian vmlinuz in .cache)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args) -> int:
    results = {}
    if args.what in ("loader", "all"):
        from ..bench import format_benchmark, run_benchmark
        results["loader"] = run_benchmark()
        if not args.json:
            print(format_benchmark(results["loader"]))
    if args.what in ("kallsyms", "all"):
        from ..kallsyms import bench as kbench
        results["kallsyms"] = kbench.run_benchmark(args.image)
        if not args.json:
            print()
            kbench.print_benchmark(results["kallsyms"])
    if args.what in ("emulate", "all"):
        import importlib.util
        import os
        path = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "bench_emulate.py")
        spec = importlib.util.spec_from_file_location("bench_emulate", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        results["emulate"] = mod.run_benchmark()
        if not args.json:
            print()
            e = results["emulate"]
            print(f"emulation ({e.get('module')}, verification on): {e.get('instructions', 0):,} instructions in "
                  f"{e.get('run_seconds', 0):.3f} s = {e.get('instructions_per_second', 0) / 1e6:.1f} M instructions/s; "
                  f"machine setup {e.get('machine_setup_seconds', 0) * 1e3:.1f} ms, "
                  f"verify {e.get('verify_seconds', 0) * 1e3:.1f} ms ({e.get('verify')})")
    if args.json:
        json.dump(results, sys.stdout, indent=2, default=str)
        print()
    return 0
