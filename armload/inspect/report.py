"""Human-readable and JSON reports of loaded modules."""
from __future__ import annotations

from collections import Counter

import numpy as np

from ..constants import SHF_ALLOC, SHF_EXECINSTR, SHF_WRITE
from ..loader.model import LoadedModule, distinct


def _flags(f: int) -> str:
    return ("A" if f & SHF_ALLOC else "-") + ("W" if f & SHF_WRITE else "-") + ("X" if f & SHF_EXECINSTR else "-")


def table(rows: list[list[str]], header: list[str], align: str | None = None) -> str:
    """A plain aligned text table; `align` is a string of 'l'/'r' per column."""
    cols = len(header)
    align = align or "l" * cols
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(cols)]
    def fmt(r):
        return "  ".join(str(c).rjust(w) if a == "r" else str(c).ljust(w)
                         for c, w, a in zip(r, widths, align)).rstrip()
    sep = "  ".join("-" * w for w in widths)
    return "\n".join([fmt(header), sep] + [fmt(r) for r in rows])


def branch_summary(mod: LoadedModule) -> dict:
    b = mod.branches
    via = int((b["plt"] != 0).sum()) if len(b) else 0
    return {"sites": int(len(b)), "direct": int(len(b) - via), "via_plt": via}


def plt_usage(mod: LoadedModule) -> dict:
    c = Counter(e.plt for e in mod.plt_entries if not e.fixed)
    size = {s.name: s.size for s in mod.sections if s.name in (".plt", ".init.plt")}
    return {"core_used": c.get("core", 0), "init_used": c.get("init", 0),
            "fixed": sum(1 for e in mod.plt_entries if e.fixed),
            "core_size": size.get(".plt", 0), "init_size": size.get(".init.plt", 0)}


def plt_notes(mod: LoadedModule, counted: dict | None = None, limit: int | None = 12) -> list[str]:
    """Why the numbers differ: reserved versus used, each rule's counted relocations, and
    symbols with more than one PLT entry. `counted`: plt.counted_relocations()."""
    cfg = mod.config
    notes = []
    used = Counter(e.plt for e in mod.plt_entries if not e.fixed)
    # the branch sites stay numpy columns: a seed-scale object has 200,000 of them
    br = mod.branches
    n_sites = len(br)
    plt_col, sym_col = br["plt"], br["sym"]
    far_mask = plt_col != 0
    far = int(far_mask.sum())
    fixed_addrs = np.array(sorted(e.addr for e in mod.plt_entries if e.fixed), dtype=np.uint32)
    fixed_hits = Counter({_sym_name(mod, int(k)): int(v) for k, v in
                          zip(*np.unique(sym_col[np.isin(plt_col, fixed_addrs)], return_counts=True))})
    far_syms = {_sym_name(mod, int(k)) for k in distinct(sym_col[far_mask])}
    if counted:
        for alg in ("legacy", "sorted", "v6"):
            items = counted[alg]
            if not items:
                notes.append(f"{alg} counted no relocation" + (f" (plus {cfg.n_fixed_plts} fixed ftrace entries per "
                                                                f"PLT)" if alg == "v6" and cfg.n_fixed_plts else ""))
                continue
            per = Counter((c.plt, c.relsec_name) for c in items)

            def names(rel, where):
                got = [f"{c.type_name[6:]} {c.symbol}" for c in items if c.relsec_name == rel and c.plt == where]
                if limit is not None and len(got) > limit:
                    got = got[:limit] + [f"... {len(got) - limit} more"]
                return ", ".join(got)
            desc = "; ".join(f"{rel}: " + names(rel, where)
                             + (f" -> {'.init.plt' if where == 'init' else '.plt'}" if alg != "sorted" else "")
                             for where, rel in per)
            notes.append(f"{alg} counted {len(items)}: {desc}")
    v6 = mod.plt_counts["v6"]
    if cfg.plt_algorithm == "sorted":
        c = mod.plt_counts["sorted"]
        notes.append(
            f"why sorted reserves more than is used: its count ({c.core}) is an upper bound taken before "
            f"layout for one .plt shared by core and init code (one entry per distinct (type, symbol) branch to "
            f"an undefined symbol per sorted REL table); only branches out of range at their final address take "
            f"an entry: {far} of {n_sites} here, using {used.get('core', 0)}")
    if cfg.plt_algorithm == "legacy":
        c = mod.plt_counts["legacy"]
        notes.append(
            f"why legacy reserves more than is used: its count (core {c.core}, init {c.init}) is an upper bound "
            f"taken before layout, v4.0's one entry per distinct (r_info, masked instruction word) branch "
            f"relocation in every REL table, whatever the symbol or target section (tables named *.init* count "
            f"for .init.plt); only branches out of range at their final address take an entry: {far} of "
            f"{n_sites} here, using core {used.get('core', 0)}, init {used.get('init', 0)}; the v4.0 "
            f"get_module_plt() searches every emitted entry of its PLT, so one target never takes two there")
    if cfg.plt_algorithm == "v6":
        nf = cfg.n_fixed_plts
        notes.append(
            f"why v6 reserves more than is used: its count (core {v6.core}, init {v6.init}) is an upper bound taken "
            f"before layout, one entry per branch relocation against another section with a distinct (type, "
            f"symbol) per REL table" + (f", plus the {nf} fixed ftrace entries (ftrace_caller, __gnu_mcount_nc) in "
                                         f"each of .plt and .init.plt" if nf else "")
            + f"; only branches out of range at their final address take an entry: {far} of {n_sites} here, "
              f"using core {used.get('core', 0)}, init {used.get('init', 0)} new entries")
        if counted:
            by_target = Counter((c.plt, c.symbol) for c in counted["v6"])
            emitted = Counter((e.plt, e.symbol) for e in mod.plt_entries if not e.fixed)
            fewer = [f"{sym} ({where}: counted {k}, {emitted.get((where, sym), 0)} emitted)"
                     for (where, sym), k in sorted(by_target.items())
                     if k > 1 and emitted.get((where, sym), 0) < k and sym in far_syms]
            if fewer:
                if limit is not None and len(fewer) > limit:
                    fewer = fewer[:limit] + [f"... {len(fewer) - limit} more"]
                notes.append("counted more often than emitted (get_module_plt() reused an entry with the same "
                             "target, e.g. a fixed ftrace entry or the one just before): " + ", ".join(fewer))
        if fixed_hits:
            notes.append("calls that land on a fixed ftrace entry instead of a new one: "
                         + ", ".join(f"{k} x{v}" for k, v in sorted(fixed_hits.items())))
    dups = Counter((e.plt, e.symbol) for e in mod.plt_entries if not e.fixed and e.symbol)
    shown = 0
    multi = [(w, sym) for (w, sym), k in sorted(dups.items()) if k > 1]
    for where, sym in multi:
        if limit is not None and shown >= limit:
            notes.append(f"... {len(multi) - shown} more symbols with several entries (--verbose lists all)")
            break
        shown += 1
        copies = [e for e in mod.plt_entries if e.plt == where and e.symbol == sym and not e.fixed]
        users = {e.addr: _users(mod, plt_col == e.addr) for e in copies}
        group = 2 * cfg.plt_stride
        sec = next((s for s in mod.sections if s.name == (".init.plt" if where == "init" else ".plt")), None)
        desc = "; ".join(f"{e.addr:#x} (group {(e.addr - sec.addr) // group if sec else '?'}, for "
                         + (", ".join(f"{t} in {sn} x{k}" for (sn, t), k in sorted(users[e.addr].items()))
                            or "no site") + ")" for e in copies)
        secs = [{sn for sn, _ in users[e.addr]} for e in copies]
        types = [{t for _, t in users[e.addr]} for e in copies]
        if all(x == secs[0] for x in secs) and any(t != types[0] for t in types):
            why = ("each REL table is sorted by (type, symbol), so the branches of one type to it form a run "
                   "after the other type's run and other targets; get_module_plt() only compares a target with "
                   "the entry emitted just before it, so the second run emits it again")
        else:
            why = ("each REL table is sorted and applied on its own, and get_module_plt() only compares a "
                   "target with the entry emitted just before it, so a later table calling the same function "
                   "emits it again")
        notes.append(f"{sym} has {len(copies)} entries in {'.init.plt' if where == 'init' else '.plt'}: {desc}. "
                     f"Why: {why}")
    cross = {e.symbol for e in mod.plt_entries if e.plt == "core" and not e.fixed} & \
        {e.symbol for e in mod.plt_entries if e.plt == "init" and not e.fixed}
    if cross:
        notes.append(f"in both .plt and .init.plt: {', '.join(sorted(s for s in cross if s))} (v4.0 and 6.1 "
                     f"keep separate PLTs for core and init code, since .init.plt is freed after init)")
    return notes


def _sym_name(mod: LoadedModule, i: int) -> str:
    return mod.sym_names[i] if i < len(mod.sym_names) else ""


def _users(mod: LoadedModule, mask) -> Counter:
    """(section name, relocation type name) -> how many of the masked branch sites."""
    from ..constants import reloc_name
    names = {s.index: s.name for s in mod.sections}
    br = mod.branches[mask]
    pairs, counts = np.unique(np.stack([br["section"], br["rtype"]], axis=1), axis=0, return_counts=True) \
        if len(br) else (np.zeros((0, 2), dtype=np.uint32), [])
    return Counter({(names.get(int(a), str(int(a))), reloc_name(int(t))): int(k) for (a, t), k in zip(pairs, counts)})


def symbolize(mod: LoadedModule, addr: int | None) -> str:
    if addr is None:
        return "-"
    s = mod.symbolize(addr & ~1)
    return f"{addr:#010x}" + (f" <{s}>" if s else "") + (" (Thumb)" if addr & 1 else "")


def to_dict(mod: LoadedModule, kernel_desc: str | None = None, placement=None) -> dict:
    cfg = mod.config
    by_source = Counter(r.source.split(":")[0] for r in mod.resolved.values())
    return {
        "module": mod.name,
        "file": mod.path,
        "kernel": kernel_desc,
        "config": {"thumb2": cfg.thumb2, "l1_cache_bytes": cfg.l1_cache_bytes,
                   "dynamic_ftrace": cfg.dynamic_ftrace, "module_unload": cfg.module_unload,
                   "plt_algorithm": cfg.plt_algorithm, "layout": cfg.layout,
                   "placement": placement if isinstance(placement, str) or placement is None else hex(placement)},
        "regions": [{"name": r.name, "base": r.base, "size": r.size, "init": r.init} for r in mod.regions],
        "sections": [{"name": s.name, "index": s.index, "addr": s.addr, "size": s.size, "mem": s.mem,
                      "flags": _flags(s.flags)} for s in mod.sections],
        "relocations": mod.reloc_counts,
        "relocations_total": sum(mod.reloc_counts.values()),
        "plt_counts": {k: {"core": v.core, "init": v.init, "total": v.total} for k, v in mod.plt_counts.items()},
        "plt": plt_usage(mod),
        "plt_entries": [{"addr": e.addr, "target": e.target, "plt": e.plt, "symbol": e.symbol, "fixed": e.fixed}
                        for e in mod.plt_entries],
        "branches": branch_summary(mod),
        "symbols_resolved": {name: {"addr": r.addr, "source": r.source, "kind": r.kind, "crc_checked": r.crc_checked}
                             for name, r in sorted(mod.resolved.items())},
        "symbols_by_source": dict(by_source),
        "init": mod.init_addr,
        "exit": mod.exit_addr,
        "exports": [{"name": e.name, "addr": e.addr, "crc": e.crc, "gpl": e.gpl} for e in mod.exports],
        "modinfo": {k: v for k, v in mod.modinfo.items() if k in ("name", "license", "vermagic", "depends",
                                                                  "description", "author", "version")},
        "warnings": mod.warnings,
        "timings_ms": {k: round(v * 1000, 3) for k, v in mod.timings.items()},
    }


def format_text(mod: LoadedModule, kernel_desc: str | None = None, placement=None, verbose: bool = False,
                counted: dict | None = None) -> str:
    d = to_dict(mod, kernel_desc, placement)
    cfg = mod.config
    out = []
    out.append(f"module {mod.name}  ({mod.path})")
    out.append(f"kernel: {kernel_desc or '-'}")
    out.append(f"config: {'Thumb-2' if cfg.thumb2 else 'ARM'} kernel, L1 {cfg.l1_cache_bytes} B, "
               f"ftrace {'on' if cfg.dynamic_ftrace else 'off'}, unload {'on' if cfg.module_unload else 'off'}, "
               f"PLT rules {cfg.plt_algorithm}, layout {cfg.layout}, placement {d['config']['placement']}")
    out.append("")
    out.append("memory:")
    out.append(table([[r.name, f"{r.base:#010x}", f"{r.end:#010x}", f"{r.size:#x}"] for r in mod.regions],
                     ["region", "start", "end", "size"], "lllr"))
    out.append("")
    rows = [[s.name, s.mem, f"{s.addr:#010x}", f"{s.size:#x}", _flags(s.flags)]
            for s in mod.sections if s.size or verbose]
    out.append(table(rows, ["section", "class", "address", "size", "flags"], "lllrl"))
    out.append("")
    rel = sorted(mod.reloc_counts.items(), key=lambda kv: -kv[1])
    out.append(table([[k, str(v)] for k, v in rel] + [["total", str(d["relocations_total"])]],
                     ["relocation type", "applied"], "lr"))
    out.append("")
    pc = mod.plt_counts
    rows = []
    for alg, label in (("legacy", "legacy (v4.0, O(n^2) scan)"), ("sorted", "sorted (2016 series)"),
                       ("v6", "v6 (6.1, default)")):
        c = pc[alg]
        mark = " *" if alg == cfg.plt_algorithm else ""
        rows.append([label + mark, str(c.core), str(c.init), str(c.total)])
    out.append(table(rows, ["PLT counting rules", "core", "init", "total"], "lrrr"))
    u = d["plt"]
    b = d["branches"]
    out.append(f"(* = in use; v6 counts include {cfg.n_fixed_plts} fixed ftrace entries per PLT)")
    out.append(f"PLT entries used: core {u['core_used']} (.plt {u['core_size']} bytes), "
               f"init {u['init_used']} (.init.plt {u['init_size']} bytes)")
    out.append(f"branch sites: {b['sites']} ({b['direct']} direct, {b['via_plt']} through PLT veneers)")
    for n in plt_notes(mod, counted, limit=None if verbose else 12):
        out.append(f"  - {n}")
    out.append("")
    src = ", ".join(f"{v} from {k}" for k, v in sorted(d["symbols_by_source"].items()))
    out.append(f"undefined symbols resolved: {len(mod.resolved)}" + (f" ({src})" if src else ""))
    if "simulated" in d["symbols_by_source"]:
        out.append("  note: no real address known for some symbols; they were given simulated kernel addresses")
    limit = None if verbose else 12
    items = sorted(mod.resolved.values(), key=lambda r: r.name)
    rows = [[r.name, f"{r.addr:#010x}", r.kind, r.source, "ok" if r.crc_checked else "-"] for r in items[:limit]]
    if rows:
        out.append(table(rows, ["symbol", "address", "kind", "from", "crc"]))
        if limit and len(items) > limit:
            out.append(f"  ... {len(items) - limit} more (--verbose lists all)")
    out.append("")
    out.append(f"init: {symbolize(mod, mod.init_addr)}")
    out.append(f"exit: {symbolize(mod, mod.exit_addr)}")
    if mod.exports:
        out.append("exports: " + ", ".join(f"{e.name}{' (GPL)' if e.gpl else ''}" for e in mod.exports))
    for w in mod.warnings:
        out.append(f"warning: {w}")
    t = d["timings_ms"]
    out.append("time: " + ", ".join(f"{k} {v:.1f} ms" for k, v in t.items()))
    if cfg.plt_algorithm == "legacy" and d["branches"]["via_plt"]:
        out.append("  (legacy: relocate includes the v4.0 get_module_plt() walk over every emitted PLT entry per "
                   "far branch, O(branches x entries); `armload bench plt` times it and the v4.0 count apart)")
    return "\n".join(out)
