"""Loader benchmark: parse, PLT count (each algorithm), relocate and total, side by side."""
from __future__ import annotations

import glob
import os
import time

from .config import KernelConfig
from .elf import read_object
from .kernel import Kernel
from .loader import Session
from .plt import count_legacy, count_legacy_quadratic, count_plts, exec_rel_tables, plan_plts, sym_shndx
from .report import table
from .synth import DEFAULT_N_RELOCS, make_module

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def _v6_count_only(obj, cfg):
    """The v6 count by itself (no legacy/sorted side-by-side work)."""
    return count_plts(obj, cfg, "v6")


def bench_object(label: str, path: str, data: bytes | None, repeat: int = 3) -> dict:
    cfg = KernelConfig()
    data = data if data is not None else open(path, "rb").read()
    obj = read_object(path, data)
    nrel = sum(len(r) for r in obj.rels.values())
    row = {"object": label, "relocations": nrel}
    row["parse_ms"] = _best(lambda: read_object(path, data), repeat) * 1e3
    row["plt_v6_ms"] = _best(lambda: _v6_count_only(read_object(path, data), cfg), repeat) * 1e3 - row["parse_ms"]
    row["plt_all3_ms"] = _best(lambda: plan_plts(read_object(path, data), cfg), repeat) * 1e3 - row["parse_ms"]
    for placement in ("window", "vmalloc"):
        mods = []
        row[f"total_{placement}_ms"] = _best(
            lambda: mods.append(Session(Kernel.builtin(cfg), cfg, placement).load(path, data)), repeat) * 1e3
        row[f"relocate_{placement}_ms"] = mods[-1].timings["relocate"] * 1e3
        row[f"plt_used_{placement}"] = len([e for e in mods[-1].plt_entries if not e.fixed])
    return row


def bench_legacy(n_relocs: int = 20_000) -> dict:
    """The v4.0 O(n^2) count, literally, on a size where it finishes, against the O(n) rules."""
    data = make_module(n_relocs, n_externals=500)
    obj = read_object("synth-legacy.ko", data)
    cfg = KernelConfig()
    shndx = sym_shndx(obj)
    tables = exec_rel_tables(obj)
    t = time.perf_counter()
    quad = sum(count_legacy_quadratic(x, shndx, False) for x in tables)
    t_quad = time.perf_counter() - t
    t = time.perf_counter()
    fast = sum(count_legacy(x, shndx, False) for x in tables)
    t_fast = time.perf_counter() - t
    t = time.perf_counter()
    _v6_count_only(obj, cfg)
    t_v6 = time.perf_counter() - t
    return {"relocations": sum(len(r) for r in obj.rels.values()), "legacy_quadratic_ms": t_quad * 1e3,
            "legacy_count": quad, "legacy_hashed_ms": t_fast * 1e3, "hashed_count": fast, "v6_ms": t_v6 * 1e3}


def run_benchmark(repeat: int = 3) -> dict:
    kos = sorted(glob.glob(os.path.join(ROOT, "sample_modules", "*.ko")), key=os.path.getsize)
    rows = []
    corpus = sorted(glob.glob(os.path.join(ROOT, ".cache", "linux-image-*", "lib", "modules", "*", "kernel",
                                           "**", "*.ko"), recursive=True), key=os.path.getsize)
    if corpus:
        rows.append(bench_object("largest Debian module: " + os.path.basename(corpus[-1]), corpus[-1], None, repeat))
    if kos:
        rows.append(bench_object("largest sample: " + os.path.basename(kos[-1]), kos[-1], None, repeat))
    rows.append(bench_object(f"synthetic seed scale ({DEFAULT_N_RELOCS:,} in .rel.text)", "synth.ko",
                             make_module(), repeat))
    synth_ms = _best(make_module, repeat) * 1e3          # was a wall-clock unit test
    return {"objects": rows, "legacy": bench_legacy(), "synth_ms": synth_ms}


def format_benchmark(res: dict) -> str:
    rows = []
    for r in res["objects"]:
        rows.append([r["object"], f"{r['relocations']:,}", f"{r['parse_ms']:.1f}", f"{r['plt_v6_ms']:.1f}",
                     f"{r['plt_all3_ms']:.1f}", f"{r['relocate_window_ms']:.1f}", f"{r['total_window_ms']:.1f}",
                     f"{r['relocate_vmalloc_ms']:.1f}", f"{r['total_vmalloc_ms']:.1f}", str(r["plt_used_vmalloc"])])
    out = [table(rows, ["object", "relocs", "parse ms", "PLT v6 ms", "PLT x3 ms", "reloc ms", "total ms",
                        "reloc far ms", "total far ms", "PLTs far"], "lrrrrrrrrr")]
    lg = res["legacy"]
    out.append("")
    out.append(f"legacy v4.0 count on {lg['relocations']:,} relocations: O(n^2) scan {lg['legacy_quadratic_ms']:.0f} ms "
               f"(count {lg['legacy_count']}), same count hashed {lg['legacy_hashed_ms']:.1f} ms "
               f"(count {lg['hashed_count']}), v6 rules {lg['v6_ms']:.1f} ms "
               f"-> v6 is {lg['legacy_quadratic_ms'] / max(lg['v6_ms'], 1e-6):.0f}x faster than the v4.0 scan")
    if "synth_ms" in res:
        out.append(f"synthetic module generation ({DEFAULT_N_RELOCS:,} relocations): {res['synth_ms']:.0f} ms")
    out.append("(far = vmalloc placement: every kernel call goes through a PLT veneer; times are best of 3)")
    return "\n".join(out)
