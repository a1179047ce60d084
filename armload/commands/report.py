"""`armload report MODULE... --html DIR`: one self-contained HTML page per load."""
from __future__ import annotations

import json
import sys

from .run import add_module_args


def register(sub) -> None:
    p = sub.add_parser("report", help="write an HTML report per load (pictures, tables, explained branch sites)",
                       description="Load the modules in order into one simulated kernel and write DIR/NAME.html "
                                   "for each (plus DIR/index.html): the address space, the module's sections "
                                   "with its PLT groups, the branch map as inline SVG, the relocation and PLT "
                                   "tables with why the counts differ, every PLT entry, every branch site "
                                   "(click for its explanation) and the disassembly linked to the relocations. "
                                   "The pages are self-contained: no network access is needed to view them.",
                       conflict_handler="resolve")
    p.add_argument("modules", nargs="+", metavar="MODULE.ko")
    add_module_args(p)
    p.add_argument("--html", required=True, metavar="DIR", help="output directory")
    p.add_argument("--json", action="store_true", help="list the written files as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..html_report import write_report
    from .load import session_from_args
    session = session_from_args(args)
    files = write_report(session, args.modules, args.html)
    if args.json:
        json.dump({"ok": True, "files": files}, sys.stdout, indent=2)
        print()
    else:
        for f in files:
            print(f)
    return 0
