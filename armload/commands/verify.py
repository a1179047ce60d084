"""`armload verify`: execute every branch site and PLT entry of the loaded image in isolation."""
from __future__ import annotations

import json
import os
import sys

from .run import add_module_args, load_all


def register(sub) -> None:
    p = sub.add_parser("verify", help="prove that every branch and PLT entry reaches its target",
                       description="Load the modules (in order) and execute every relocated branch site "
                                   "(and the PLT veneer it goes through) and every PLT entry on an "
                                   "emulated CPU; each must arrive exactly at its symbol, in the right "
                                   "instruction set. Exit status 0 only if all do.")
    p.add_argument("modules", nargs="+", metavar="MODULE.ko")
    add_module_args(p)
    p.add_argument("--against-kernel", action="store_true",
                   help="instead: load each module (in order) with the booted kernel's own load_module "
                        "(needs --kernel vmlinuz; the kernel boots once, cached in .cache/boot) and compare "
                        "armload's image with the kernel's byte for byte at the same addresses; exit 1 on "
                        "any difference or a refusal the kernel does not make")
    p.add_argument("--tree", metavar="DIR",
                   help="with --against-kernel: load each module's dependencies (.modinfo depends=) from DIR first")
    p.add_argument("--json", action="store_true", help="machine-readable result on stdout")
    p.set_defaults(func=cmd_verify)


def cmd_verify(args) -> int:
    if args.against_kernel:
        return _against_kernel(args)
    from ..loader.verify import verify_module
    session, modules = load_all(args)
    results = [verify_module(m, session.kernel) for m in modules]
    ok = all(r.ok for r in results)
    if args.json:
        json.dump({"ok": ok, "modules": [r.to_dict() for r in results]}, sys.stdout, indent=2)
        print()
    else:
        for r in results:
            print(r.format())
    return 0 if ok else 1


def _against_kernel(args) -> int:
    from ..errors import ArmloadError
    from .load import session_from_args
    session = session_from_args(args)          # the kernel files and config the user gave
    image = getattr(session.kernel, "image_path", None)
    if not image:
        raise ArmloadError("verify --against-kernel needs the kernel image (--kernel vmlinuz): the kernel it "
                           "boots is the one whose load_module armload is compared with")
    from ..kernel.modtree import load_order, tree_index
    from ..emu.booted.modrun import BootedRun
    index = tree_index(args.tree) if args.tree else {}
    results, ok = [], True
    for path in args.modules:
        run = BootedRun(image, session.kernel, session.config)       # a fresh copy of the booted kernel
        order = load_order(path, index) if index else [path]
        for p in order:
            r = run.load(p)
            chk = r.loader
            good = chk.agrees and (chk.identical or (r.status == "refused" and bool(chk.refusal)))
            ok &= good
            results.append(r.to_dict())
            if not args.json:
                print(_line(r))
            if (r.status != "returned" or r.ret) and p != path:      # insmod of the module never happens
                results.append({"module": _stem(path), "path": path, "status": "dependency-failed",
                                "dependency": {"module": r.name, "status": r.status, "ret": r.ret}})
                if not args.json:
                    print(f"{os.path.basename(path)}: not loaded: its dependency {r.name} failed ({r.status} {r.ret})")
                break
    if args.json:
        json.dump({"ok": ok, "runtime": "booted", "modules": results}, sys.stdout, indent=2)
        print()
    return 0 if ok else 1


def _line(r) -> str:
    c = r.loader
    if r.status == "refused" and c.agrees and not c.refusal:
        return (f"{r.name}: the kernel refused it ({r.ret}) after loading it (parameters, sysfs or a notifier); "
                f"armload's image up to there: " + ("identical" if c.identical else f"{c.differences} word(s) differ"))
    if r.status == "refused":
        head = (f"{r.name}: the kernel refused it ({r.ret}); armload "
                + (f"refused it too: {c.refusal}" if c.agrees else
                   f"DISAGREES: {c.refusal or 'accepted it'}"))
        return head
    if not c.agrees:
        return f"{r.name}: the kernel loaded it; armload refused it: {c.refusal}"
    if c.identical:
        extra = (f"; {c.runtime_words} words then written by the running kernel's notifiers"
                 if c.runtime_words else "")
        return (f"{r.name}: identical to the kernel's load_module ({c.compared:,} bytes at "
                f"{r.core_base:#x}/{r.init_base:#x}, struct module aside{extra})")
    lines = [f"{r.name}: {c.differences} word(s) differ from the kernel's load_module: "
             + ", ".join(f"{k} {v}" for k, v in sorted(c.by_section.items()))]
    for d in c.listed:
        where = f"{d['addr']:#010x}" if d["addr"] is not None else "-"
        lines.append(f"  {where} {d['section']}: armload {d['armload']} kernel {d['kernel']}")
    return "\n".join(lines)


def _stem(path: str) -> str:
    from ..kernel.kofile import module_stem
    return module_stem(path)
