"""`armload matrix`: the same modules checked on several kernel builds, side by side."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time


def register(sub) -> None:
    p = sub.add_parser("matrix", help="check modules on several kernel builds (a matrix of cells)",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Check the same modules on several Debian kernel builds (cells), each "
                                   "with its own Module.symvers, image and module tree as scripts/fetch-debs.sh "
                                   "unpacks linux-image-REL and linux-headers-REL, and report per module the "
                                   "cells where it loads, where it fails to resolve (which symbol: a CRC change, "
                                   "a removed export, the version magic) and where it behaves differently at "
                                   "init.\n\nExample (make matrix):\n  armload matrix --cell 6.1.0-50-armmp "
                                   "--cell 6.1.0-53-armmp --cell 6.1.0-50-rt-armmp --module drivers/net/can\n"
                                   "  armload matrix --cell ... --modules sample_modules   "
                                   "# built for one kernel, loaded on each")
    p.add_argument("--cell", action="append", required=True, metavar="RELEASE",
                   help="a kernel release, e.g. 6.1.0-53-armmp or 6.1.0-50-rt-armmp; repeat for each cell")
    p.add_argument("--cache", action="append", default=[], metavar="DIR",
                   help="where the unpacked packages are (searched with their subfolders; default .cache)")
    p.add_argument("--module", action="append", default=[], metavar="PATTERN",
                   help="only these modules (name, path in the tree, directory or glob), as in check")
    p.add_argument("--modules", metavar="DIR",
                   help="out-of-tree mode: load the modules of DIR (built for one kernel) on every cell, their "
                        "other dependencies from the cell's tree")
    p.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1, metavar="N",
                   help="worker processes per cell (or CPUs of a local Ray instance)")
    p.add_argument("--ray", metavar="ADDRESS", help="run the checks as Ray tasks: local, auto or an address "
                                                   "(see check --ray); the JSON is the same")
    p.add_argument("--no-emulate", action="store_true", help="do not run init (load, resolve, relocate only)")
    p.add_argument("--budget", type=int, default=None, metavar="INSNS", help="instruction budget per init")
    p.add_argument("--json", metavar="FILE", help="write the matrix as JSON ('-' = stdout)")
    p.add_argument("--no-timing", action="store_true", help="leave wall-clock data out of the JSON")
    p.add_argument("--top", type=int, default=30, metavar="N", help="changing modules listed in the text")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..ci.worker import CheckOptions, DEFAULT_BUDGET
    from ..ci.matrix import cell_text, find_cell, run_matrix
    from ..errors import ArmloadError
    from ..inspect.report import table
    from ..kernel.config import KernelConfig
    if args.jobs < 1:
        raise ArmloadError(f"matrix: --jobs {args.jobs}: at least one worker is needed")
    if len(set(args.cell)) != len(args.cell):
        raise ArmloadError("matrix: a --cell is given twice")
    if args.modules and not os.path.exists(args.modules):
        raise ArmloadError(f"matrix: --modules {args.modules}: no such file or directory")
    cells = [find_cell(c, args.cache or [".cache"]) for c in args.cell]
    # each cell's init inside its own kernel booted (a cell without its image: init not run, said so)
    opts = CheckOptions(emulate=not args.no_emulate, budget=args.budget or DEFAULT_BUDGET)
    config = KernelConfig()
    executor = None
    if args.ray:
        from ..ci import cluster
        ray = cluster.connect(args.ray, args.jobs)

        def executor(cell, kernel, plan, options):
            return cluster.executor(ray, {"kernel": cell.kernel_files, "vermagic": kernel.vermagic,
                                          "config": config, "options": options}, plan)

    def progress(release, n):
        if not args.quiet:
            print(f"matrix: {release}: checking {n} module(s)", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    doc = run_matrix(cells, config, opts, patterns=args.module, modules=args.modules, jobs=args.jobs,
                     executor=executor, progress=progress)
    per_cell = doc.pop("_timing")
    if not args.no_timing:
        doc["timing"] = {"wall_seconds": round(time.perf_counter() - t0, 3), "cells": per_cell,
                         "jobs": args.jobs, "ray": args.ray}
    if args.json:
        f = sys.stdout if args.json == "-" else open(args.json, "w")
        json.dump(doc, f, indent=1)
        f.write("\n")
        if f is not sys.stdout:
            f.close()
    out = sys.stderr if args.json == "-" else sys.stdout
    rels = [c["release"] for c in doc["cells"]]
    lines = [f"matrix ({doc['mode']}{': modules of ' + args.modules if args.modules else ''}): "
             f"{len(rels)} cells x {doc['summary']['modules']} modules", ""]
    cls = sorted({k for c in doc["cells"] for k in c["outcomes"]})
    lines.append(table([[c["release"], str(c["modules"]), *(str(c["outcomes"].get(k, 0)) for k in cls)]
                        for c in doc["cells"]], ["cell", "modules", *cls], "l" + "r" * (len(cls) + 1)))
    lines += [f"{c['release']}: {c['init']}" for c in doc["cells"] if c["init"] != "run"]
    s = doc["summary"]
    lines += ["", f"modules whose result differs between cells: {s['changing']} of {s['modules']}"
              + (" (" + ", ".join(f"{k} {v}" for k, v in sorted(s["kinds"].items())) + ")" if s["kinds"] else "")]
    if doc["changes"] and args.top > 0:
        rows = [[ch["module"], ch["kind"], *(cell_text(doc["modules"][ch["module"]][r]) for r in rels),
                 (ch.get("why") or "")[:120]]
                for ch in doc["changes"][:args.top]]
        lines.append(table(rows, ["module", "change", *rels, "why (first differing errno or kernel message)"],
                           "l" * (len(rels) + 3)))
        if len(doc["changes"]) > args.top:
            lines.append(f"... {len(doc['changes']) - args.top} more in the JSON")
    if "timing" in doc:
        lines += ["", f"wall time {doc['timing']['wall_seconds']:.1f} s"
                  + (f" on Ray ({args.ray})" if args.ray else f" with {args.jobs} job(s)")]
    print("\n".join(lines), file=out)
    return 0
