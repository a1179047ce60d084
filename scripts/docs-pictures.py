#!/usr/bin/env python3
"""Regenerate the pictures of docs/lecture.md from the bundled samples (make docs-pictures).

Usage: docs-pictures.py OUTDIR [--no-bench]. Everything but plt-bench.svg is a pure function of
the samples; plt-bench.svg holds measured times (bench plt), so it changes from run to run.
"""
import glob
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from armload.inspect import pictures  # noqa: E402
from armload.bench.plt import run as bench_plt  # noqa: E402
from armload.kernel.config import KernelConfig  # noqa: E402
from armload.kernel.provider import Kernel  # noqa: E402
from armload.loader.session import Session  # noqa: E402

SYMVERS = os.path.join(ROOT, "sample_modules", "Module.symvers")


def load(ko, placement, **cfg):
    c = KernelConfig(**cfg)
    s = Session(Kernel.from_files([SYMVERS], c), c, placement)
    return c, s.load(os.path.join(ROOT, "sample_modules", ko))


def main(argv):
    out = argv[1] if len(argv) > 1 else os.path.join(ROOT, "docs", "pictures")
    os.makedirs(out, exist_ok=True)

    def save(fig, name):
        pictures.save(fig, os.path.join(out, name))
        print(os.path.join(out, name))
    c, near = load("hello-arm.ko", "window")
    _, far = load("hello-arm.ko", "vmalloc")
    save(pictures.address_space(c, [near], "window"), "address-space-window.svg")
    save(pictures.address_space(c, [far], "vmalloc"), "address-space-vmalloc.svg")
    save(pictures.branch_map(near), "branches-hello-window.svg")
    save(pictures.branch_map(far), "branches-hello-vmalloc.svg")
    c, edge = load("kalloc-arm.ko", 0xBE100000)
    save(pictures.address_space(c, [edge], 0xBE100000), "address-space-boundary.svg")
    save(pictures.branch_map(edge), "branches-kalloc-boundary.svg")
    _, kfar = load("kalloc-arm.ko", "vmalloc")
    save(pictures.module_layout(kfar), "layout-kalloc-vmalloc.svg")
    kos = sorted(glob.glob(os.path.join(ROOT, "sample_modules", "*.ko")))
    save(pictures.corpus_counts_plot(pictures.corpus_counts(kos), f"the {len(kos)} bundled sample modules"),
         "plt-counts-samples.svg")
    if "--no-bench" not in argv:
        save(pictures.plt_bench_plot(bench_plt((2000, 8000, 32000))), "plt-bench.svg")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
