"""`armload verify`: execute every branch site and PLT entry of the loaded image in isolation."""
from __future__ import annotations

import json
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
    p.add_argument("--json", action="store_true", help="machine-readable result on stdout")
    p.set_defaults(func=cmd_verify)


def cmd_verify(args) -> int:
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
