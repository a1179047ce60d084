"""`armload bench`: performance numbers side by side in one run."""
from __future__ import annotations

import json
import sys

WHAT = ("loader", "kallsyms", "emulate", "coverage", "all")


def register(sub) -> None:
    p = sub.add_parser("bench", help="benchmarks: loader stages, kallsyms lookups, emulation speed",
                       description="Run benchmarks and print them side by side. loader: parse, PLT count, "
                                   "relocate and total for the largest sample, the largest Debian module "
                                   "(after make corpus) and a seed-scale synthetic object, plus the legacy "
                                   "O(n^2) count. kallsyms: lookup strategies on the real Debian table. "
                                   "emulate: instructions per second: raw Unicorn, with armload's clock, the whole machine. "
                                   "coverage: instructions per second with --coverage off and on.")
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
        from .. import kallsyms
        results["kallsyms"] = kallsyms.run_benchmark(args.image)
        if not args.json:
            print()
            kallsyms.print_benchmark(results["kallsyms"])
    if args.what in ("emulate", "all"):
        from ..emu import bench as emu_bench
        results["emulate"] = emu_bench.run_benchmark()
        if not args.json:
            print()
            emu_bench.print_benchmark(results["emulate"])
    if args.what in ("coverage", "all"):
        from ..emu import coverage
        results["coverage"] = coverage.run_benchmark()
        if not args.json:
            print()
            coverage.print_benchmark(results["coverage"])
    if args.json:
        json.dump(results, sys.stdout, indent=2, default=str)
        print()
    return 0
