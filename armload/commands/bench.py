"""`armload bench`: performance numbers side by side in one run."""
from __future__ import annotations

import json
import sys

WHAT = ("loader", "kallsyms", "kallsyms-arm", "emulate", "plt", "probes", "task-rename", "coverage", "devio", "speed",
        "sanitize", "call", "cli", "all")


def register(sub) -> None:
    p = sub.add_parser("bench", help="benchmarks: loader stages, kallsyms lookups, emulation speed",
                       description="Run benchmarks and print them side by side. loader: parse, PLT count, "
                                   "relocate and total for the largest sample, the largest Debian module "
                                   "(after make corpus) and a seed-scale synthetic object (also with 5 non-zero-addend "
                                   "calls, whose ties make lib/sort.c's order matter), count_plts per rule "
                                   "beside a native C count of the same file (ratio), plus the legacy "
                                   "O(n^2) count. kallsyms: lookup strategies on the real Debian table. kallsyms-arm: the "
                                   "same strategies as ARM code inside the booted Debian kernel, beside the kernel's own "
                                   "kallsyms_lookup_name: instructions per lookup. "
                                   "emulate: an ARM loop in bare Unicorn and inside the booted kernel (its instruction "
                                   "clock and timer interrupts): instructions per second and their ratio. "
                                   "plt: the three PLT counting rules' time and count versus relocation count (--sizes), the "
                                   "v4.0 O(n^2) scan measured on its own. "
                                   "probes: seed 004 in the booted kernel: its own register_kprobe, enable_kprobe and "
                                   "get_kprobe on 1,000 probes on its text (--many: 40,000, btrfs loaded), against the "
                                   "kprobe-table model of 64 and 4,096 lists with and without the per-cpu cache. "
                                   "task-rename: seed 003 in the booted kernel: prctl(PR_SET_NAME) from pid 1's user mode, "
                                   "a BPF program run by the kernel's interpreter, attached with perf_event_open/bpf as "
                                   "a kprobe (trap and optimized), kretprobe, raw tracepoint; fentry/fexit: the kernel's "
                                   "refusals (32-bit ARM 6.1 has no BPF trampoline). "
                                   "coverage: --coverage and --trace inside the booted kernel against a plain run "
                                   "(CPU ratio, equal instructions). "
                                   "devio: instructions per system-call round trip from pid 1's user mode in the "
                                   "booted kernel, and a run with device I/O against a plain run (ratio). "
                                   "speed (not in all: minutes): check (init in the booted kernel) on the QEMU oracle's list "
                                   "(--tree: every module) in instructions per CPU-second beside bare Unicorn, "
                                   "the same list's cost under QEMU, and a test's fresh kernel (a fork). "
                                   "sanitize (not in all): CPU with the sanitizers on vs off on the QEMU-verified list "
                                   "(tests/oracles/qemu/modules.txt), and every report they made there. "
                                   "call: a run with --call against a plain run of the same module inside the "
                                   "booted kernel: the ratio of instructions and of CPU seconds (target <= 2). "
                                   "cli: CPU seconds of `armload load hello-arm.ko` and `armload --help` as processes, "
                                   "beside the interpreter's start, numpy's import and GNU ld -r of the same module "
                                   "(target: load <= 0.1 s; not in all).")
    p.add_argument("what", nargs="?", choices=WHAT, default="loader")
    p.add_argument("--image", help="kernel image for the kallsyms benchmarks (default: the Debian vmlinuz in .cache)")
    p.add_argument("--many", action="store_true", help="probes: seed 004 at its scale, 40,000 kprobes on btrfs "
                   "and the Image's text (the default is 1,000 on the Image's text alone; minutes)")
    p.add_argument("--only", metavar="GLOB", help="sanitize: the modules of the list matching GLOB")
    p.add_argument("--json", action="store_true")
    p.add_argument("--tree", action="store_true", help="speed: check every module of the Debian tree")
    p.add_argument("--jobs", type=int, default=2, help="speed: check's worker processes (default 2)")
    p.add_argument("--limit", type=int, metavar="N", help="speed, sanitize: only the first N modules of the list")
    from .bench_plt import add_args as _plt_args     # `bench plt` lives in its own module
    _plt_args(p)
    p.set_defaults(func=run)


def run(args) -> int:
    if args.what == "plt":
        from .bench_plt import run as run_plt
        return run_plt(args)
    results = {}
    if args.what in ("loader", "all"):
        from ..bench.loader import format_benchmark, run_benchmark
        results["loader"] = run_benchmark()
        if not args.json:
            print(format_benchmark(results["loader"]))
    if args.what in ("kallsyms", "all"):
        from ..bench import kallsyms as kbench
        results["kallsyms"] = kbench.run_benchmark(args.image)
        if not args.json:
            print()
            kbench.print_benchmark(results["kallsyms"])
    if args.what in ("kallsyms-arm", "all"):
        from ..bench import kallsyms_arm
        from ..bench.inputs import VMLINUZ
        results["kallsyms-arm"] = kallsyms_arm.run_benchmark(args.image or VMLINUZ)
        if not args.json:
            print()
            kallsyms_arm.print_benchmark(results["kallsyms-arm"])
    if args.what in ("emulate", "all"):
        from ..bench import emu as emu_bench
        results["emulate"] = emu_bench.run_benchmark()
        if not args.json:
            print()
            emu_bench.print_benchmark(results["emulate"])
    if args.what == "probes":             # not part of "all": minutes with --many
        from ..bench import probes as probes_bench
        small = {} if args.many else {"n_register": 1000, "n_enable": 200, "step": 100, "n_hits": 1000,
                                      "modules": ()}
        results["probes"] = probes_bench.run(**small)
        if not args.json:
            probes_bench.print_result(results["probes"])
    if args.what == "task-rename":
        from ..bench import attach
        results["task-rename"] = attach.run_task_rename()
        if not args.json:
            attach.print_task_rename(results["task-rename"])
    if args.what in ("devio", "all"):
        from ..bench import devio_booted
        results["devio"] = devio_booted.run_benchmark()
        if not args.json:
            print()
            print(devio_booted.format_benchmark(results["devio"]))
    if args.what == "speed":
        from ..bench import speed
        results["speed"] = speed.run_benchmark(tree=args.tree, jobs=args.jobs, limit=args.limit)
        if not args.json:
            speed.print_benchmark(results["speed"])
    if args.what == "sanitize":           # not part of "all": the whole list takes an hour of CPU
        from ..bench import sanitize
        results["sanitize"] = sanitize.run_benchmark(args.limit, args.only)
        if not args.json:
            sanitize.print_benchmark(results["sanitize"])
    if args.what == "call":
        from ..bench import call as call_bench
        results["call"] = call_bench.run_benchmark()
        if not args.json:
            call_bench.print_benchmark(results["call"])
    if args.what == "cli":
        from ..bench import cli as cli_bench
        results["cli"] = cli_bench.run_benchmark()
        if not args.json:
            print()
            cli_bench.print_benchmark(results["cli"])
    if args.json:
        json.dump(results, sys.stdout, indent=2, default=str)
        print()
    return 0
