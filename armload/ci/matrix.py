"""A kernel matrix: the same modules checked on several kernel builds (`armload matrix`).

A cell is one Debian kernel build, named by its release (`6.1.0-53-armmp`, `6.1.0-50-rt-armmp`):
its Module.symvers (CRCs), its image (addresses, the code init runs against) and its module tree,
as `scripts/fetch-debs.sh` unpacks linux-image-REL and linux-headers-REL. The kernel's vermagic
is the one its own modules carry (they were built with it). Two modes:

- tree: each cell checks its own tree (or the modules of it that --module names); a module is
  the same module in every cell when its path in the tree is the same;
- out-of-tree (`modules`): one directory of modules built for one kernel (X) is loaded on every
  cell (Y), with the dependencies it does not bring from the cell's own tree, as an out-of-tree
  package would be.

Per module and cell the result is the baseline's outcome key (ci/baseline.py) and, for a load
refused at symbol resolution, which symbols: a CRC change (the export's version differs), a
removal (the symbol is not exported any more) or the version magic. A module whose result is
not the same in every cell is a change, with its kind.
"""
from __future__ import annotations

import dataclasses
import glob
import os
import re
from dataclasses import dataclass

from ..errors import ArmloadError
from .baseline import outcome_key
from .corpus import build_kernel, run_checks
from .outcomes import summarize
from .selection import scan_with_deps, select
from .worker import CheckOptions
from ..kernel.modtree import plan_order, scan_tree


@dataclass
class Cell:
    release: str                     # 6.1.0-53-armmp
    tree: str                        # .../lib/modules/REL/kernel
    symvers: str
    image: str | None
    vermagic: str | None = None

    @property
    def kernel_files(self) -> list[str]:
        return [self.symvers] + ([self.image] if self.image else [])


def packages(release: str) -> list[str]:
    """The Debian packages that hold a cell."""
    return [f"linux-image-{release}:armhf", f"linux-headers-{release}:armhf"]


def find_cell(release: str, caches: list[str]) -> Cell:
    """The cell's files in the first cache folder (or a folder inside one) that has them."""
    if not re.fullmatch(r"[0-9][0-9.]*(-[0-9]+|\+deb[0-9]+)-[a-z0-9-]+", release):
        raise ArmloadError(f"matrix: {release!r} is not a kernel release such as 6.1.0-53-armmp or "
                           f"6.12.107+deb12-armmp")
    for c in caches:
        for base in [c] + sorted(glob.glob(os.path.join(c, "*", ""))):
            img = os.path.join(base, f"linux-image-{release}")
            hdr = os.path.join(base, f"linux-headers-{release}", "usr", "src", f"linux-headers-{release}",
                               "Module.symvers")
            tree = os.path.join(img, "lib", "modules", release, "kernel")
            if os.path.isdir(tree) and os.path.isfile(hdr):
                image = os.path.join(img, "boot", f"vmlinuz-{release}")
                return Cell(release, tree, hdr, image if os.path.isfile(image) else None)
    raise ArmloadError(f"matrix: kernel {release} not found under {', '.join(caches)}: fetch it with "
                       f"scripts/fetch-debs.sh {caches[0]} {' '.join(packages(release))}")


def tree_vermagic(tree: str) -> str | None:
    """The vermagic the kernel's own modules carry (the first module that has one)."""
    from ..kernel.kofile import is_module_file
    from ..kernel.modtree import read_modinfo
    for d, dirs, files in os.walk(tree):
        dirs.sort()
        for f in sorted(files):
            if is_module_file(f):
                info, _ = read_modinfo(os.path.join(d, f))
                if info.get("vermagic"):
                    return info["vermagic"][0]
    return None


_CRC = re.compile(r"disagrees about version of symbol (\S+)")
_GONE = re.compile(r"Unknown symbol (\S+) \(err -2\)")
_MAGIC = re.compile(r"version magic '([^']*)' should be '([^']*)'")


def resolve_detail(rec: dict) -> dict | None:
    """For a load refused while resolving: {"crc": [...], "missing": [...], "vermagic": ...}."""
    msg = (rec.get("error") or {}).get("message") or ""
    if rec["outcome"] != "load" or not msg:
        return None
    crc = sorted(set(_CRC.findall(msg)))
    gone = sorted(set(_GONE.findall(msg)) - set(crc))
    m = _MAGIC.search(msg)
    out = {}
    if crc:
        out["crc"] = crc
    if gone:
        out["missing"] = gone
    if m:
        out["vermagic"] = {"module": m.group(1), "kernel": m.group(2)}
    return out or None


def result(rec: dict, init_run: bool = True) -> dict:
    r = {"outcome": outcome_key(rec), "loaded": "relocations" in rec}
    d = resolve_detail(rec)
    if d:
        r["resolve"] = d
    if not init_run:
        r["init"] = "not run"
    return r


def same_module(rel: str) -> str:
    """A module's name across cells: its path in the tree without the compression suffix (6.12
    ships fs/nls/nls_cp437.ko.xz where 6.1 has fs/nls/nls_cp437.ko)."""
    for s in (".xz", ".zst", ".gz"):
        if rel.endswith(".ko" + s):
            return rel[:-len(s)]
    return rel


_STAMP = re.compile(r"^\[\s*\d+\.\d+\]\s*")


def evidence(rec: dict) -> dict:
    """What a cell's kernel said about a module: the errno (or status) and its console lines."""
    i = rec.get("init") or {}
    ret = i.get("retval")
    return {"verdict": (f"{i.get('status')} {ret}" if i.get("status") == "returned" and ret else
                        i.get("status") or rec["outcome"]),
            "reason": rec.get("reason"),
            "console": [_STAMP.sub("", ln) for ln in i.get("console") or []]}


def first_difference(ev: dict[str, dict], releases: list[str]) -> str | None:
    """Why a module's verdict changes: the first errno or verdict that differs, else the first
    kernel message one cell printed and another did not."""
    got = [(r, ev[r]) for r in releases if r in ev]
    if len(got) < 2:
        return None
    (ra, a), rest = got[0], got[1:]
    for rb, b in rest:
        if a["verdict"] != b["verdict"]:
            return f"{ra}: {a['reason'] or a['verdict']}; {rb}: {b['reason'] or b['verdict']}"
        for x, y in zip(a["console"] + [None], b["console"] + [None]):
            if x != y:
                return f"{ra}: {x!r}; {rb}: {y!r}" if x and y else f"{ra if x else rb} only: {x or y!r}"
    return None


def change_kind(results: dict[str, dict | None]) -> str | None:
    """What differs between the cells' results for one module, or None when nothing does. Load
    results are compared over every cell, init results over the cells where init ran."""
    vals = list(results.values())
    if all(v == vals[0] for v in vals):
        return None
    if any(v is None for v in vals):
        return "absent"
    if any("resolve" in v for v in vals):
        if any("vermagic" in v.get("resolve", {}) for v in vals):
            return "version magic"
        if any("crc" in v.get("resolve", {}) for v in vals):
            return "CRC change"
        return "symbol removed"
    heads = {v["outcome"].split()[0] for v in vals}
    loaded = {v.get("loaded", True) for v in vals}
    if len(loaded) > 1:                        # loaded here, not there
        return "dependency" if "dependency-failed" in heads else "load"
    if heads & {"load", "verify"}:
        return "load" if len({v["outcome"] for v in vals}) > 1 else None
    ran = [v for v in vals if v.get("init") != "not run"]
    if all(v["outcome"] == ran[0]["outcome"] for v in ran):
        return None
    return "dependency" if "dependency-failed" in {v["outcome"].split()[0] for v in ran} else "init"


def run_matrix(cells: list[Cell], config, options: CheckOptions, *, patterns=(), modules: str | None = None,
               jobs: int = 1, executor=None, progress=None) -> dict:
    """Check the selection on every cell; the matrix document (deterministic: no wall clock).
    executor(cell, kernel, plan, options) -> a run_checks executor, or None for local --jobs."""
    import time
    out_cells, per_module, details = [], {}, {}
    timing = {}
    for cell in cells:
        t0 = time.perf_counter()
        cell.vermagic = cell.vermagic or tree_vermagic(cell.tree)
        kernel = build_kernel(cell.kernel_files, config)
        kernel.vermagic = cell.vermagic
        if modules:
            mods, mine = scan_with_deps(modules, cell.tree, rename=False)   # the same names in every cell
        else:
            mods, mine = scan_tree(cell.tree), None
        plan = plan_order(mods)
        names = list(plan.order) if mine is None else [n for n in plan.order if n in set(mine)]
        if patterns:
            try:
                want = set(select(plan, list(patterns)))
            except ValueError as e:
                raise ArmloadError(f"matrix: {cell.release}: no module named or matching {e}") from None
            names = [n for n in names if n in want]
        # struct module as this kernel's own modules lay it out (PREEMPT_RT and 6.12 move init and
        # exit); each cell runs init in its own kernel: the booted runtime boots the cell's image.
        from ..loader.for_kernel import follow_headers, follow_kernel
        from ..loader.this_module import of_tree
        sm = of_tree(cell.tree)
        cell_config = (follow_kernel(config, cell.image, tree=cell.tree) if cell.image else
                       dataclasses.replace(follow_headers(config, cell.symvers), struct_module=sm))
        kernel.config = cell_config
        cell_opts, why = options, None
        if options.emulate and not cell.image:
            why = "init not run: no kernel image for this cell (init runs inside the booted kernel)"
            cell_opts = dataclasses.replace(options, emulate=False, no_init="no kernel image")
        elif options.emulate:                 # init inside this cell's booted kernel, modprobe from its tree
            cell_opts = dataclasses.replace(options, image=cell.image, tree=os.path.abspath(cell.tree))
        if progress:
            progress(cell.release, len(names))
        stats = run_checks(plan, kernel, cell_config, cell_opts, jobs=jobs, names=names,
                           executor=executor(cell, kernel, plan, cell_opts) if executor else None)
        summ = summarize(stats.records)
        out_cells.append({"release": cell.release, "kernel": kernel.describe(), "vermagic": cell.vermagic,
                          "struct_module": ({"size": sm.size, "name": sm.name, "init": sm.init, "exit": sm.exit}
                                            if sm else None),
                          "init": "run in this kernel booted" if cell_opts.emulate else (why or "not run (--no-emulate)"),
                          "modules": len(stats.records), "outcomes": {k: v for k, v in summ["outcomes"].items() if v},
                          "success": summ["success"]})
        for r in stats.records:
            key = same_module(r["module"])
            per_module.setdefault(key, {})[cell.release] = result(r, cell_opts.emulate)
            details.setdefault(key, {})[cell.release] = evidence(r)
        timing[cell.release] = round(time.perf_counter() - t0, 3)
    releases = [c.release for c in cells]
    table, changes, kinds = {}, [], {}
    for m in sorted(per_module):
        row = {rel: per_module[m].get(rel) for rel in releases}
        table[m] = row
        k = change_kind(row)
        if k:
            changes.append({"module": m, "kind": k, "why": first_difference(details.get(m, {}), releases)})
            kinds[k] = kinds.get(k, 0) + 1
    return {"mode": "out-of-tree" if modules else "tree", "modules_from": modules, "patterns": list(patterns),
            "cells": out_cells, "summary": {"modules": len(table), "changing": len(changes), "kinds": kinds},
            "changes": changes, "modules": table, "_timing": timing}


def cell_text(r: dict | None) -> str:
    if r is None:
        return "-"
    d = r.get("resolve")
    if not d:
        return r["outcome"] + (" (no init)" if r.get("init") == "not run" and r.get("loaded") else "")
    parts = []
    if "vermagic" in d:
        parts.append(f"vermagic, kernel's is {d['vermagic']['kernel'].split(' ', 1)[-1].strip()!r}")
    if "crc" in d:
        parts.append("CRC " + ",".join(d["crc"][:3]) + ("..." if len(d["crc"]) > 3 else ""))
    if "missing" in d:
        parts.append("missing " + ",".join(d["missing"][:3]) + ("..." if len(d["missing"]) > 3 else ""))
    return "load: " + "; ".join(parts)
