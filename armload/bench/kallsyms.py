"""`armload bench kallsyms`: the four name->address strategies side by side on a real table.

Reports, per strategy, the median ns per lookup for hits and misses, speedups relative to (a)
and (c), one batch resolving all undefined symbols of a large module, address->name latency and
the extra memory each strategy needs beyond the tables.  Python numbers: the absolute values are
~100x the seeds' C numbers; what carries over is the ordering and the ratios.
"""
from __future__ import annotations

import glob
import os
import random
import statistics
import time
import tracemalloc

from ..errors import KernelFileError
from ..kernel.kallsyms.lookup import STRATEGIES, STRATEGY_TITLES, deep_size, table_from_image

from ..kernel.debian import MODULES as DEFAULT_MODULES, VMLINUZ as DEFAULT_IMAGE  # noqa: E402
SEED_C_NS = {"hit": (3811, 246), "miss": (3625, 196)}


def _project_path(rel: str) -> str:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return rel if os.path.exists(rel) else os.path.join(root, rel)


def undefined_symbols(ko_path: str) -> list[str]:
    """Names of the undefined (SHN_UNDEF, named) symbols of a .ko."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection
    with open(ko_path, "rb") as f:
        elf = ELFFile(f)
        out = []
        for sec in elf.iter_sections():
            if isinstance(sec, SymbolTableSection):
                for s in sec.iter_symbols():
                    if s.name and s["st_shndx"] == "SHN_UNDEF":
                        out.append(s.name)
        return out


def largest_module(mod_dir: str, candidates: int = 25) -> tuple[str, list[str]] | None:
    """Among the `candidates` biggest .ko files, the one with the most undefined symbols."""
    kos = glob.glob(os.path.join(mod_dir, "**", "*.ko"), recursive=True)
    if not kos:
        return None
    kos.sort(key=os.path.getsize, reverse=True)
    best = None
    for k in kos[:candidates]:
        try:
            u = undefined_symbols(k)
        except Exception:
            continue
        if best is None or len(u) > len(best[1]):
            best = (k, u)
    return best


def _median_ns(fn, names, repeat: int = 1) -> float:
    per = []
    pc = time.perf_counter_ns
    for n in names:
        best = None
        for _ in range(repeat):
            t0 = pc()
            fn(n)
            dt = pc() - t0
            best = dt if best is None or dt < best else best
        per.append(best)
    return float(statistics.median(per))


def _extra_memory(fn, arg) -> int:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        fn(arg)
        return max(0, tracemalloc.get_traced_memory()[1] - base)
    finally:
        tracemalloc.stop()


def make_misses(names: list[str], count: int, rng: random.Random) -> list[str]:
    have = set(names)
    out: list[str] = []
    suffixes = ("_x", "2", "__", "_missing")
    while len(out) < count:
        n = rng.choice(names)
        m = rng.choice((n + rng.choice(suffixes), n[:-1] + chr((ord(n[-1]) % 94) + 33),
                        "zz_" + n, n[: max(1, len(n) // 2)]))
        if m not in have and m not in out:
            out.append(m)
    return out


def run_benchmark(image_path: str | None = None, *, hits: int = 1000, misses: int = 300,
                  linear_sample: int = 12, module: str | None = None, seed: int = 1,
                  fresh_decode: bool = True, progress=None) -> dict:
    """Measure every strategy on the real Debian table (or any kernel image)."""
    say = progress or (lambda msg: None)
    image_path = image_path or _project_path(DEFAULT_IMAGE)
    if not os.path.exists(image_path):
        raise KernelFileError(f"{image_path}: kernel image not found (make kallsyms-inputs fetches it)",
                              file=image_path)
    res: dict = {"image": image_path}
    if fresh_decode:
        say("decoding the image (no cache)")
        t0 = time.perf_counter()
        t = table_from_image(image_path, use_cache=False)
        res["decode_seconds"] = time.perf_counter() - t0
        res["decode_timing"] = dict(t.timing)
    t0 = time.perf_counter()
    table = table_from_image(image_path)
    res["load_seconds"] = time.perf_counter() - t0
    res["load_cached"] = table.cached
    res["num_syms"] = table.num_syms
    res["table_bytes"] = table.table_bytes()
    res["seqs_source"] = table.seqs_source
    say("preparing (b)'s pair table")
    t0 = time.perf_counter()
    table._compressor()
    res["pair_table_seconds"] = time.perf_counter() - t0
    res["pairs_source"] = table.pairs_source
    res["pair_ambiguities"] = len(table.pair_ambiguities)

    rng = random.Random(seed)
    syms = list(table)
    names = [n for _, _, n in syms]
    hit_names = rng.sample(names, min(hits, len(names)))
    miss_names = make_misses(names, misses, rng)
    lin_hits = hit_names[:linear_sample]
    lin_misses = miss_names[:linear_sample]

    rows = {}
    for key, meth in STRATEGIES.items():
        fn = getattr(table, meth)
        say(f"timing {STRATEGY_TITLES[key]}")
        hs, ms = (lin_hits, lin_misses) if key in "ab" else (hit_names, miss_names)
        rows[key] = {"title": STRATEGY_TITLES[key], "method": meth,
                     "hit_ns": _median_ns(fn, hs), "miss_ns": _median_ns(fn, ms),
                     "samples": (len(hs), len(ms))}
    # memory beyond the tables
    rows["a"]["extra_bytes"] = _extra_memory(table.lookup_linear, hit_names[0])
    rows["b"]["extra_bytes"] = deep_size(table._steps) + deep_size(table._types) \
        + _extra_memory(table.lookup_compressed, hit_names[0])
    rows["b"]["extra_note"] = "pair table (kept) + compressed queries"
    rows["c"]["extra_bytes"] = _extra_memory(table.lookup_bsearch, hit_names[0])
    rows["d"]["extra_bytes"] = _extra_memory(table.lookup_bsearch_tokens, hit_names[0])
    for key in rows:
        r = rows[key]
        r["hit_speedup_vs_a"] = rows["a"]["hit_ns"] / r["hit_ns"] if r["hit_ns"] else None
        r["miss_speedup_vs_a"] = rows["a"]["miss_ns"] / r["miss_ns"] if r["miss_ns"] else None
        r["hit_speedup_vs_c"] = rows["c"]["hit_ns"] / r["hit_ns"] if r["hit_ns"] else None
        r["miss_speedup_vs_c"] = rows["c"]["miss_ns"] / r["miss_ns"] if r["miss_ns"] else None
    res["strategies"] = rows

    # address -> name
    say("timing address -> name")
    b = table._text_bounds()
    lo, hi = b.get("_stext", table.addresses[0]), b.get("_etext", table.addresses[-1])
    addrs = [rng.randrange(lo, hi) for _ in range(hits)]
    res["addr_to_name_ns"] = _median_ns(table.addr_to_name, addrs)

    # batch: all undefined symbols of a large module
    mod = None
    if module:
        mod = (module, undefined_symbols(module))
    else:
        mdir = _project_path(DEFAULT_MODULES)
        if os.path.isdir(mdir):
            say("choosing the module with the most undefined symbols")
            mod = largest_module(mdir)
    if mod:
        path, und = mod
        res["batch"] = batch = {"module": path, "undefined": len(und)}
        t0 = time.perf_counter()
        table.batch_begin()
        t1 = time.perf_counter()
        r_d = table.lookup_batch(und)
        t2 = time.perf_counter()
        batch["index_bytes"] = deep_size(table._batch)
        table.batch_end()
        t3 = time.perf_counter()
        batch["d_batch_seconds"] = t3 - t0
        batch["d_batch_build_seconds"] = t1 - t0
        batch["d_batch_lookup_seconds"] = t2 - t1
        batch["resolved"] = sum(x is not None for x in r_d)
        t0 = time.perf_counter()
        r_c = [table.lookup_bsearch(n) for n in und]
        batch["c_loop_seconds"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        r_dl = [table.lookup_bsearch_tokens(n) for n in und]
        batch["d_loop_seconds"] = time.perf_counter() - t0
        batch["a_loop_seconds_est"] = len(und) * (rows["a"]["hit_ns"] + rows["a"]["miss_ns"]) / 2e9
        batch["b_loop_seconds_est"] = len(und) * (rows["b"]["hit_ns"] + rows["b"]["miss_ns"]) / 2e9
        batch["agree"] = r_c == r_d == r_dl
        rows["d"]["batch_index_bytes"] = batch["index_bytes"]
    res["seed_c_ns"] = SEED_C_NS
    res["same_ordering_as_seeds"] = (rows["a"]["hit_ns"] > rows["c"]["hit_ns"] > rows["d"]["hit_ns"]
                                     and rows["a"]["miss_ns"] > rows["c"]["miss_ns"] > rows["d"]["miss_ns"])
    return res


def _fmt_ns(ns: float) -> str:
    return f"{ns:,.0f}"


def _fmt_bytes(n: int) -> str:
    return f"{n / 1024:,.1f} KiB" if n >= 1024 else f"{n} B"


def format_benchmark(res: dict) -> str:
    out = []
    out.append(f"kallsyms benchmark: {res['image']}")
    out.append(f"  {res['num_syms']:,} symbols, tables {_fmt_bytes(res['table_bytes'])}; "
               f"seqs_of_names: {res['seqs_source']}")
    if "decode_seconds" in res:
        tm = res.get("decode_timing", {})
        out.append(f"  first decode {res['decode_seconds']:.2f} s (decompress {tm.get('decompress', 0):.2f} s, "
                   f"locate+decode {tm.get('locate_and_decode', 0):.2f} s); cached load {res['load_seconds'] * 1e3:.0f} ms")
    out.append(f"  (b) pair table: {res['pairs_source']} in {res['pair_table_seconds']:.2f} s")
    out.append("")
    hdr = ("strategy", "hit ns", "miss ns", "hit ×a", "miss ×a", "hit ×c", "miss ×c", "extra memory")
    rows = []
    for key, r in res["strategies"].items():
        mem = _fmt_bytes(r["extra_bytes"])
        if "batch_index_bytes" in r:
            mem += f" (+{_fmt_bytes(r['batch_index_bytes'])} batch index)"
        rows.append((r["title"], _fmt_ns(r["hit_ns"]), _fmt_ns(r["miss_ns"]),
                     f"{r['hit_speedup_vs_a']:.1f}", f"{r['miss_speedup_vs_a']:.1f}",
                     f"{r['hit_speedup_vs_c']:.2f}", f"{r['miss_speedup_vs_c']:.2f}", mem))
    w = [max(len(str(x[i])) for x in rows + [hdr]) for i in range(len(hdr))]
    line = lambda cells: "  " + "  ".join(str(c).ljust(w[i]) if i in (0, 7) else str(c).rjust(w[i])
                                          for i, c in enumerate(cells))
    out.append(line(hdr))
    out.append("  " + "  ".join("-" * x for x in w))
    out.extend(line(r) for r in rows)
    s = res["strategies"]
    out.append(f"  samples: (a)/(b) {s['a']['samples'][0]} hits + {s['a']['samples'][1]} misses; "
               f"(c)/(d) {s['c']['samples'][0]} + {s['c']['samples'][1]}")
    out.append(f"  address -> name (sprint_symbol): {_fmt_ns(res['addr_to_name_ns'])} ns")
    if "batch" in res:
        b = res["batch"]
        out.append(f"  batch: {b['undefined']} undefined symbols of {os.path.basename(b['module'])} "
                   f"({b['resolved']} in vmlinux):")
        out.append(f"    (d) batch begin+lookups+end {b['d_batch_seconds'] * 1e3:,.1f} ms "
                   f"(index build {b['d_batch_build_seconds'] * 1e3:,.1f} ms, {_fmt_bytes(b['index_bytes'])})")
        out.append(f"    (d) one by one {b['d_loop_seconds'] * 1e3:,.1f} ms; (c) one by one {b['c_loop_seconds'] * 1e3:,.1f} ms; "
                   f"(b) ≈{b['b_loop_seconds_est']:.1f} s, (a) ≈{b['a_loop_seconds_est']:.1f} s (estimated from medians)")
    hc, mc = res["seed_c_ns"]["hit"], res["seed_c_ns"]["miss"]
    out.append(f"  seeds (C): hit {hc[0]:,} → {hc[1]:,} ns, miss {mc[0]:,} → {mc[1]:,} ns; "
               f"same ordering here (a > c > d): {'yes' if res['same_ordering_as_seeds'] else 'no'}")
    return "\n".join(out)


def print_benchmark(res: dict, file=None) -> None:
    print(format_benchmark(res), file=file)
