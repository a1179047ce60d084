"""Time `armload check` over the Debian armhf corpus in three configurations, side by side:
load+relocate only, + branch verification, + init emulation (and optionally vmalloc placement).

    .venv/bin/python benchmarks/bench_corpus.py [--jobs 2] [--limit N] [--vmalloc]

Needs `make corpus`. Prints wall time, modules/s and relocations/s per configuration.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from armload.kernel.config import DEBIAN_ARMMP                                    # noqa: E402
from armload.ci.corpus import CheckOptions, build_kernel, plan_order, run_checks, scan_tree, summarize  # noqa: E402
from armload.inspect.report import table                                           # noqa: E402

KREL = "6.1.0-50-armmp"
CACHE = os.environ.get("CACHE", ".cache")
TREE = f"{CACHE}/linux-image-{KREL}/lib/modules/{KREL}/kernel"
SYMVERS = f"{CACHE}/linux-headers-{KREL}/usr/src/linux-headers-{KREL}/Module.symvers"
VMLINUZ = f"{CACHE}/linux-image-{KREL}/boot/vmlinuz-{KREL}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--limit", type=int)
    ap.add_argument("--vmalloc", action="store_true", help="also time load+verify in vmalloc placement")
    a = ap.parse_args()
    if not os.path.isdir(TREE):
        print(f"no corpus in {TREE}: run `make corpus`", file=sys.stderr)
        return 2
    t = time.perf_counter()
    plan = plan_order(scan_tree(TREE))
    kernel = build_kernel([SYMVERS, VMLINUZ], DEBIAN_ARMMP)
    setup = time.perf_counter() - t
    names = plan.order[:a.limit] if a.limit else None
    confs = [("load+relocate", CheckOptions(verify=False, emulate=False)),
             ("+ verify", CheckOptions(verify=True, emulate=False)),
             ("+ verify + init", CheckOptions(verify=True, emulate=True))]
    if a.vmalloc:
        confs.append(("vmalloc: + verify", CheckOptions(verify=True, emulate=False, placement="vmalloc")))
    rows = []
    for label, opts in confs:
        st = run_checks(plan, kernel, DEBIAN_ARMMP, opts, jobs=a.jobs, names=names)
        s = summarize(st.records)
        rows.append([label, str(s.get("loaded", 0)), f"{st.wall:.1f}", f"{s.get('loaded', 0) / st.wall:.0f}",
                     f"{s.get('relocations', 0) / st.wall / 1e3:.0f}k",
                     f"{s['success']['ratio']:.2%}" if opts.emulate else "-"])
        print(f"{label}: {st.wall:.1f} s", file=sys.stderr)
    print(f"setup (scan {len(plan.order)} modules, kernel tables): {setup:.1f} s; jobs {a.jobs}")
    print(table(rows, ["configuration", "modules", "wall s", "modules/s", "relocs/s", "success"], "lrrrrr"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
