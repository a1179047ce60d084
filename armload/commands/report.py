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
    p.add_argument("modules", nargs="*", metavar="MODULE.ko")
    add_module_args(p)
    p.add_argument("--html", required=True, metavar="DIR", help="output directory")
    p.add_argument("--svg", action="store_true", help="also write each picture as DIR/NAME-PICTURE.svg")
    p.add_argument("--png", action="store_true", help="also write each picture as DIR/NAME-PICTURE.png")
    p.add_argument("--check-json", metavar="FILE",
                   help="add the PLT counts per rule across a corpus from an `armload check --json FILE` output")
    p.add_argument("--corpus", metavar="DIR",
                   help="add the PLT counts per rule across every .ko under DIR (counted, not loaded)")
    p.add_argument("--json", action="store_true", help="list the written files as JSON")
    p.set_defaults(func=run)


def progress_bar(stream):
    """report: [#####-----] 2/5 bluetooth: disassembly -- redrawn in place on a terminal, one
    line per stage otherwise (a log)."""
    tty = stream.isatty()

    def show(i, n, name, what):
        if not n:
            return
        if what == "done":
            if tty:
                stream.write("\r\033[K")
            stream.write(f"report: {n}/{n} modules done\n")
            stream.flush()
            return
        filled = 20 * i // n
        line = f"report: [{'#' * filled}{'-' * (20 - filled)}] {i + 1}/{n} {name}: {what}"
        stream.write(("\r\033[K" + line) if tty else line + "\n")
        stream.flush()
    return show


def run(args) -> int:
    from ..inspect.html_report import write_report
    from .load import session_from_args
    from ..errors import ArmloadError
    if not args.modules and not (args.check_json or args.corpus):
        raise ArmloadError("report: give modules to load, or --check-json FILE / --corpus DIR")
    corpus, title = None, "corpus"
    if args.check_json:
        from ..inspect.pictures import records_from_check
        try:
            with open(args.check_json) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            raise ArmloadError(f"report: cannot read {args.check_json}: {e}") from None
        corpus, title = records_from_check(doc), f"{doc.get('tree', args.check_json)} (armload check)"
    elif args.corpus:
        import glob
        import os
        from ..inspect.pictures import corpus_counts
        from ..kernel.kofile import is_module_file
        paths = sorted(p for p in glob.glob(os.path.join(args.corpus, "**", "*.ko*"), recursive=True)
                       if is_module_file(p))
        if not paths:
            raise ArmloadError(f"report: no .ko under {args.corpus}")
        corpus, title = corpus_counts(paths), f"{len(paths)} modules under {args.corpus}"
    session = session_from_args(args)
    fmts = tuple(x for x, on in (("svg", args.svg), ("png", args.png)) if on)
    files = write_report(session, args.modules, args.html, fmts, corpus, title, object=getattr(args, "object", False),
                         progress=None if args.json else progress_bar(sys.stderr))
    if args.json:
        json.dump({"ok": True, "files": files}, sys.stdout, indent=2)
        print()
    else:
        for f in files:
            print(f)
    return 0
