"""`armload calls`: how each kernel function a module imports would be simulated (no emulation)."""
from __future__ import annotations

import json
import os
import sys


def register(sub) -> None:
    p = sub.add_parser("calls", help="classify a module's kernel imports: real code, model, fallback, unmodelled",
                       description="For each kernel function the modules import, say how `armload run` simulates "
                                   "it: the kernel's own code (real, needs --kernel vmlinuz), a Python model, a "
                                   "Python fallback for real code (no image), or nothing (unmodelled: a call ends "
                                   "the run). A directory gives the census of a whole tree.")
    p.add_argument("paths", nargs="+", metavar="MODULE.ko|DIR")
    p.add_argument("--kernel", "-k", action="append", default=[], metavar="FILE",
                   help="Module.symvers and/or vmlinuz (with an image, real code runs)")
    p.add_argument("--class", dest="only", choices=("real", "model", "fallback", "unmodelled"),
                   help="list only functions of this class")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..kernel.config import KernelConfig
    from ..emu.census import census, classify_imports, imported_functions
    from ..emu.calls import CallTable
    from ..emu.models import default_library
    from ..kernel.provider import Kernel
    kernel = Kernel.from_files(args.kernel, KernelConfig(), simulate_all=True)
    has_image = kernel.image_path is not None
    out = {"kernel": kernel.describe(), "image": has_image, "modules": []}
    table = CallTable(default_library(), has_image=has_image)
    for path in args.paths:
        if os.path.isdir(path):
            out.setdefault("census", {})[path] = census(path, kernel, has_image=has_image)
            continue
        names = imported_functions(path, kernel)
        cls = classify_imports(names, has_image=has_image)
        out["modules"].append({"path": path, "functions": [
            {"name": n, "class": c, "subsystem": table.decide(n).subsystem} for n, c in cls.items()
            if args.only is None or c == args.only]})
    if args.json:
        json.dump(out, sys.stdout, indent=2)
        print()
        return 0
    if not has_image:
        print("no kernel image: real kernel code cannot run; functions without a Python fallback are unmodelled")
    for m in out["modules"]:
        counts: dict[str, int] = {}
        print(f"{m['path']}:")
        for f in m["functions"]:
            counts[f["class"]] = counts.get(f["class"], 0) + 1
            print(f"  {f['class']:<10} {f['name']:<40} {f['subsystem']}")
        print("  " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    for path, c in out.get("census", {}).items():
        print(f"{path}: {c['modules']} modules import {c['functions']} distinct kernel functions")
        for k in sorted(c["distinct"]):
            print(f"  {k:<10} {c['distinct'][k]:>6} functions  {c['pairs'].get(k, 0):>7} (module, function) pairs")
        print("  most imported unmodelled functions (modules):")
        for n, k in c["top_unmodelled"]:
            print(f"    {n:<40} {k}")
    return 0
