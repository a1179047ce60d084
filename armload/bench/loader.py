"""Loader benchmark: parse, PLT count (each algorithm), relocate and total, side by side, and
armload's count_plts against a native C count of the same tables (benchmarks/plt_count_ref.c)."""
from __future__ import annotations

import glob
import hashlib
import os
import subprocess
import tempfile
import time

import numpy as np

from ..kernel.config import KernelConfig
from ..loader.elf import read_object
from ..kernel.provider import Kernel
from ..loader.session import Session
from ..loader.plt import count_legacy, count_legacy_quadratic, count_plts, legacy_rel_tables, native_sort, plan_plts
from ..inspect.report import table
from ..inputs.synth import DEFAULT_N_RELOCS, make_module
from .inputs import CACHE, ROOT, SAMPLES



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
    tables = legacy_rel_tables(obj)          # v4.0 counts every REL table
    t = time.perf_counter()
    quad = sum(count_legacy_quadratic(x) for x in tables)
    t_quad = time.perf_counter() - t
    t = time.perf_counter()
    fast = sum(count_legacy(x) for x in tables)
    t_fast = time.perf_counter() - t
    t = time.perf_counter()
    _v6_count_only(obj, cfg)
    t_v6 = time.perf_counter() - t
    return {"relocations": sum(len(r) for r in obj.rels.values()), "legacy_quadratic_ms": t_quad * 1e3,
            "legacy_count": quad, "legacy_hashed_ms": t_fast * 1e3, "hashed_count": fast, "v6_ms": t_v6 * 1e3}


N_TIES = 5
C_REF = os.path.join(ROOT, "benchmarks", "plt_count_ref.c")


def with_nonzero_addends(data: bytes, count: int = N_TIES) -> bytes:
    """`data` with `count` R_ARM_CALLs against undefined symbols (spread over .rel.text) turned into
    `bl sym+4` (legal ELF: a non-zero addend, which the kernel must support). Their ties with the
    zero-addend calls to the same symbols make the kernel's unstable heapsort order matter."""
    obj = read_object("synth.ko", data)
    out = bytearray(data)
    shndx = obj.symtab["st_shndx"]
    for idx, rel in obj.rels.items():
        dst = obj.sections[obj.sections[idx].sh_info]
        if dst.name != ".text":
            continue
        ri = rel["r_info"]
        cand = np.flatnonzero(((ri & 0xFF) == 28) & (shndx[ri >> 8] == 0))
        for i in cand[np.linspace(0, len(cand) - 1, count).astype(int)].tolist():
            off = dst.sh_offset + int(rel["r_offset"][i])
            out[off:off + 4] = (0xEBFFFFFF).to_bytes(4, "little")        # bl with A = -4: sym + 4
    return bytes(out)


def native_reference() -> tuple[str | None, str]:
    """Compile benchmarks/plt_count_ref.c (once per source hash) into build/; (path, "") or (None, why)."""
    try:
        with open(C_REF, "rb") as f:
            sha = hashlib.sha256(f.read()).hexdigest()[:16]
    except OSError as e:
        return None, f"no {C_REF}: {e.strerror}"
    out_dir = os.path.join(ROOT, "build", "bench")
    exe = os.path.join(out_dir, f"plt_count_ref-{sha}")
    if os.path.exists(exe):
        return exe, ""
    os.makedirs(out_dir, exist_ok=True)
    tmp = f"{exe}.{os.getpid()}"
    cc = os.environ.get("CC", "gcc")
    try:
        p = subprocess.run([cc, "-O2", "-o", tmp, C_REF], capture_output=True, text=True)
    except OSError as e:
        return None, f"{cc}: {e.strerror}"
    if p.returncode:
        return None, f"{cc} failed: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else p.returncode}"
    os.replace(tmp, exe)
    return exe, ""


def bench_plt_vs_c(label: str, path: str, data: bytes, repeat: int = 5) -> dict:
    """count_plts(obj, cfg, rule) (object parsed beforehand) against plt_count_ref on the same file,
    best of `repeat` each, in the same run."""
    cfg = KernelConfig()
    obj = read_object(path, data)
    row = {"object": label, "rules": {}}
    exe, why = native_reference()
    c_res = {}
    if exe:
        with tempfile.NamedTemporaryFile(suffix=".ko") as f:
            f.write(data)
            f.flush()
            p = subprocess.run([exe, f.name, str(repeat), str(cfg.n_fixed_plts)],
                               capture_output=True, text=True)
        if p.returncode:
            why = f"plt_count_ref failed: {p.stderr.strip()}"
        for line in p.stdout.splitlines():
            rule, core, init, ns = line.split()
            c_res[rule] = (int(core), int(init), float(ns) / 1e6)
    row["c_error"] = why if not c_res else ""
    for rule in ("legacy", "sorted", "v6"):
        counts = []
        ms = _best(lambda: counts.append(count_plts(obj, cfg, rule)[0]), repeat) * 1e3
        r = {"armload_ms": ms, "armload_count": [counts[-1].core, counts[-1].init]}
        if rule in c_res:
            core, init, c_ms = c_res[rule]
            r.update(c_ms=c_ms, c_count=[core, init], ratio=ms / max(c_ms, 1e-9))
        row["rules"][rule] = r
    return row


def run_benchmark(repeat: int = 3) -> dict:
    kos = sorted(glob.glob(os.path.join(SAMPLES, "*.ko")), key=os.path.getsize)
    rows = []
    corpus = sorted(glob.glob(os.path.join(CACHE, "linux-image-*", "lib", "modules", "*", "kernel",
                                           "**", "*.ko"), recursive=True), key=os.path.getsize)
    if corpus:
        rows.append(bench_object("largest Debian module: " + os.path.basename(corpus[-1]), corpus[-1], None, repeat))
    if kos:
        rows.append(bench_object("largest sample: " + os.path.basename(kos[-1]), kos[-1], None, repeat))
    seed = make_module()
    ties = with_nonzero_addends(seed)
    seed_label = f"synthetic seed scale ({DEFAULT_N_RELOCS:,} in .rel.text)"
    ties_label = f"same + {N_TIES} non-zero-addend calls to UND symbols"
    rows.append(bench_object(seed_label, "synth.ko", seed, repeat))
    rows.append(bench_object(ties_label, "synth-ties.ko", ties, repeat))
    vs_c = [bench_plt_vs_c(seed_label, "synth.ko", seed), bench_plt_vs_c(ties_label, "synth-ties.ko", ties)]
    if corpus:
        vs_c.append(bench_plt_vs_c("largest Debian module: " + os.path.basename(corpus[-1]), corpus[-1],
                                   open(corpus[-1], "rb").read()))
    synth_ms = _best(make_module, repeat) * 1e3          # was a wall-clock unit test
    return {"objects": rows, "plt_vs_c": vs_c, "sort_backend": native_sort()[1], "legacy": bench_legacy(),
            "synth_ms": synth_ms}


def format_benchmark(res: dict) -> str:
    rows = []
    for r in res["objects"]:
        rows.append([r["object"], f"{r['relocations']:,}", f"{r['parse_ms']:.1f}", f"{r['plt_v6_ms']:.1f}",
                     f"{r['plt_all3_ms']:.1f}", f"{r['relocate_window_ms']:.1f}", f"{r['total_window_ms']:.1f}",
                     f"{r['relocate_vmalloc_ms']:.1f}", f"{r['total_vmalloc_ms']:.1f}", str(r["plt_used_vmalloc"])])
    out = [table(rows, ["object", "relocs", "parse ms", "PLT v6 ms", "PLT x3 ms", "reloc ms", "total ms",
                        "reloc far ms", "total far ms", "PLTs far"], "lrrrrrrrrr")]
    out.append("")
    out.append("count_plts per rule, armload vs native C (benchmarks/plt_count_ref.c: libc qsort + the kernel's "
               "count loop), same file, same run, best of 5")
    def ms(x):
        return f"{x:.1f}" if x >= 1 else f"{x:.3f}"

    rows = []
    for o in res["plt_vs_c"]:
        for rule, r in o["rules"].items():
            if "c_ms" in r:
                same = "same" if r["c_count"] == r["armload_count"] else "differs (qsort tie order is not lib/sort.c's)"
                rows.append([o["object"], rule, ms(r["armload_ms"]), ms(r["c_ms"]), f"{r['ratio']:.2f}x",
                             "/".join(map(str, r["armload_count"])), "/".join(map(str, r["c_count"])), same])
            else:
                rows.append([o["object"], rule, ms(r["armload_ms"]), "-", "-",
                             "/".join(map(str, r["armload_count"])), "-", f"no C reference: {o['c_error']}"])
    out.append(table(rows, ["object", "rule", "armload ms", "C ms", "ratio", "armload core/init", "C core/init",
                            "counts"], "llrrrrrl"))
    out.append(f"lib/sort.c replay: {res['sort_backend']}")
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
