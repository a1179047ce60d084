"""`armload bench plt`: the three PLT counting generations versus relocation count.

For each size a synthetic module (armload.inputs.synth) is counted under every rule, and the v4.0 count
is also run literally (its O(n^2) scan over earlier entries), so the quadratic curve is measured
and labelled as the PLT count. The loads then show where the rest goes: with the legacy rules,
get_module_plt() walks every emitted entry per out-of-range branch, which the loader's timings
put under "relocate"; here it is its own column ("legacy slot lookup").
"""
from __future__ import annotations

import time

from ..kernel.config import KernelConfig
from ..loader.elf import read_object
from ..kernel.provider import Kernel
from ..loader.session import Session
from ..loader.plt import count_legacy_quadratic, count_plts, exec_rel_tables, legacy_rel_tables
from ..inputs.synth import make_module

DEFAULT_SIZES = (2000, 8000, 32000)


def _best(fn, repeat: int) -> tuple[float, object]:
    best, out = None, None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        dt = time.perf_counter() - t
        best = dt if best is None else min(best, dt)
    return best, out


def run(sizes=DEFAULT_SIZES, *, externals: int | None = None, repeat: int = 3, quadratic_max: int = 64000) -> dict:
    """externals: distinct external functions per module; default n/4, so that the number of
    PLT entries grows with n as in real modules (a fixed set saturates and hides the n^2)."""
    cfg = KernelConfig()
    rows = []
    for n in sizes:
        ext = externals or max(1, n // 4)
        data = make_module(n, n_externals=ext)
        obj = read_object("synth.ko", data)
        tables = exec_rel_tables(obj)
        ltables = legacy_rel_tables(obj)
        row = {"relocations": n, "externals": ext, "count_ms": {}, "counts": {}, "load_ms": {}}
        if n <= quadratic_max:
            t, c = _best(lambda: sum(count_legacy_quadratic(x) for x in ltables),
                         1 if n > 8000 else repeat)
            row["count_ms"]["legacy_quadratic"] = t * 1e3
            row["counts"]["legacy_quadratic"] = c
        for alg in ("legacy", "sorted", "v6"):
            t, (pc, _) = _best(lambda: count_plts(obj, cfg, alg, tables=tables, legacy_tables=ltables), repeat)
            row["count_ms"][alg] = t * 1e3
            row["counts"][alg] = pc.total
        for alg in ("legacy", "sorted", "v6"):
            c = cfg.with_(plt_algorithm=alg)
            mods = []
            t, _ = _best(lambda: mods.append(Session(Kernel.builtin(c), c, "vmalloc").load("synth.ko", data)),
                         1 if n > 8000 else repeat)
            m = mods[-1]
            row["load_ms"][alg] = {"total": t * 1e3, "relocate": m.timings["relocate"] * 1e3,
                                   "plt_count": m.timings["plt_count"] * 1e3}
            if alg == "v6":
                row["used"] = sum(1 for e in m.plt_entries if not e.fixed)
            if alg == "legacy":
                row["legacy_lookup_ms"] = _legacy_lookup(m, c) * 1e3
        rows.append(row)
    return {"externals": externals or "relocs/4", "rows": rows}


def _legacy_lookup(mod, config) -> float:
    """Replay the v4.0 get_module_plt() calls of a finished legacy load (same section size, same
    targets in application order): the linear walk over emitted entries, timed on its own."""
    from ..loader.plt import PltSection
    secs = {s.name: s for s in mod.sections if s.name in (".plt", ".init.plt")}
    plts = {n: PltSection(n, s.addr, s.size, config, ()) for n, s in secs.items()}
    far = mod.branches[mod.branches["plt"] != 0]
    # each far branch goes to the PLT its slot is in (the one in_init(loc) picked during the load)
    todo = []
    for slot, v in zip(far["plt"].tolist(), far["target"].tolist()):
        n = next(n for n, s in secs.items() if s.addr <= slot < s.addr + s.size)
        todo.append((plts[n], v))
    t = time.perf_counter()
    for plt, v in todo:
        plt.get_legacy(v)
    return time.perf_counter() - t


def format_result(res: dict) -> str:
    from ..inspect.report import table
    head = ["relocs", "v4.0 O(n^2) count ms", "legacy hashed ms", "sorted ms", "v6 ms",
            "legacy/sorted/v6 reserved", "v6 used", "v4.0 slot lookup ms", "load legacy ms", "load v6 ms"]
    out = []
    for r in res["rows"]:
        q = r["count_ms"].get("legacy_quadratic")
        ll, lv = r["load_ms"]["legacy"], r["load_ms"]["v6"]
        out.append([f"{r['relocations']:,}", f"{q:.1f}" if q is not None else "-",
                    f"{r['count_ms']['legacy']:.2f}", f"{r['count_ms']['sorted']:.2f}", f"{r['count_ms']['v6']:.2f}",
                    f"{r['counts']['legacy']}/{r['counts']['sorted']}/{r['counts']['v6']}", str(r["used"]),
                    f"{r['legacy_lookup_ms']:.0f}", f"{ll['total']:.0f}", f"{lv['total']:.0f}"])
    lines = [table(out, head, "r" * len(head))]
    rows = res["rows"]
    qs = [(r["relocations"], r["count_ms"]["legacy_quadratic"]) for r in rows if "legacy_quadratic" in r["count_ms"]]
    if len(qs) >= 2:
        import math
        (n0, t0), (n1, t1) = qs[0], qs[-1]
        lines.append(f"v4.0 count grows with slope {math.log(t1 / t0) / math.log(n1 / n0):.2f} on log-log "
                     f"(2 = quadratic) from {n0:,} to {n1:,} relocations")
    lines.append("(synthetic modules with relocs/4 external functions, placed far (vmalloc) so every external "
                 "call needs a veneer. The loader counts with the hashed legacy rule, equal in result to the "
                 "v4.0 scan; what a legacy load still pays is the v4.0 slot lookup, a walk over every emitted "
                 "entry per far branch, which its timings file under relocate)")
    return "\n".join(lines)
