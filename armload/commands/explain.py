"""`armload explain`: one relocation applied step by step (S, A, P, formula, range, decision)."""
from __future__ import annotations

import json
import sys

from .run import add_module_args, load_all


def register(sub) -> None:
    p = sub.add_parser("explain", help="explain how one relocation is applied (S, A, P, range, veneer)",
                       description="Show one relocation the way the kernel applies it: its readelf -r row "
                                   "and its position after the kernel's sort, S, A (decoded from the "
                                   "instruction, with the PC bias), P, the formula of its type, the value, "
                                   "the range check and the decision (direct, veneer, refused with the "
                                   "kernel's message), and the instruction before and after. With several "
                                   "modules the earlier ones are loaded first and the last is explained.",
                       conflict_handler="resolve")
    p.add_argument("modules", nargs="+", metavar="MODULE.ko")
    add_module_args(p)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--reloc", metavar="SECTION:INDEX",
                   help="entry INDEX (file order, as readelf -r lists it) of a REL section, named like "
                        ".rel.text, by its ELF index, or by the section it relocates (.text:3)")
    g.add_argument("--symbol", metavar="NAME", help="every relocation against NAME")
    g.add_argument("--site", metavar="ADDR", help="the relocation at this final address")
    p.add_argument("--json", action="store_true", help="machine-readable explanation on stdout")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..errors import ArmloadError
    from ..inspect.explain import explain_module, format_explanation
    site = None
    if args.site is not None:
        try:
            site = int(args.site, 0)
        except ValueError:
            raise ArmloadError(f"bad --site {args.site!r}: use an address like 0xbf000010") from None
    *earlier, last = args.modules
    args.modules = earlier
    session, _ = load_all(args) if earlier else (None, [])
    if session is None:
        from .load import session_from_args
        session = session_from_args(args)
    ctx, exs = explain_module(session, last, reloc=args.reloc, symbol=args.symbol, site=site,
                              object=getattr(args, "object", False))
    if args.json:
        json.dump({"ok": True, "module": ctx.obj.name, "loaded": ctx.mod is not None,
                   "error": str(ctx.error) if ctx.error else None,
                   "explanations": [e.to_dict() for e in exs]}, sys.stdout, indent=2)
        print()
        return 0
    if ctx.error is not None:
        print(f"{ctx.obj.name}: the load fails: {ctx.error}")
        print()
    print("\n\n".join(format_explanation(e) for e in exs))
    return 0
