"""`armload kallsyms IMAGE`: print, grep or query the kallsyms table of a kernel image."""
from __future__ import annotations

import json
import re
import sys

from ..errors import KernelFileError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "kallsyms", help="decode the kallsyms table of a kernel image (zImage, Image, vmlinux)",
        description="Decompress a 32-bit ARM kernel image, find its kallsyms tables without any "
                    "symbol file and print them nm-style, grep them, or resolve one name/address.")
    p.add_argument("image", metavar="IMAGE", help="vmlinuz (ARM zImage), raw Image or vmlinux ELF")
    p.add_argument("--grep", metavar="PATTERN", help="only symbols whose name matches this regex")
    p.add_argument("--addr", metavar="ADDR", help="symbolize an address (name+0xoff/0xsize)")
    p.add_argument("--lookup", metavar="NAME", help="resolve a symbol name to its address")
    p.add_argument("--strategy", choices=("a", "b", "c", "d"), default="c",
                   help="name lookup strategy: a linear, b compressed query, c bsearch (default), "
                        "d bsearch with token-wise compare")
    p.add_argument("--system-map", metavar="OUT", help="write the table as a System.map to OUT")
    p.add_argument("--no-cache", action="store_true", help="decode afresh; do not use or write the cache")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def _parse_addr(text: str) -> int:
    try:
        return int(text, 0) if text.lower().startswith("0x") else int(text, 16)
    except ValueError:
        raise KernelFileError(f"--addr: not an address: {text!r}") from None


def run(args) -> int:
    from ..kernel.kallsyms import table_from_image, write_system_map
    from ..kernel.kallsyms.lookup import STRATEGIES
    table = table_from_image(args.image, use_cache=not args.no_cache)
    out = sys.stdout
    if args.system_map:
        n = write_system_map(list(table), args.system_map)
        if not args.json:
            print(f"wrote {n} symbols to {args.system_map}", file=sys.stderr)
    if args.lookup is not None:
        addr = getattr(table, STRATEGIES[args.strategy])(args.lookup)
        if args.json:
            json.dump({"ok": addr is not None, "name": args.lookup, "strategy": args.strategy,
                       "address": None if addr is None else f"{addr:#010x}"}, out, indent=2)
            print()
        elif addr is None:
            print(f"{args.lookup}: not found", file=sys.stderr)
        else:
            print(f"{addr:08x} {args.lookup}")
        return 0 if addr is not None else 1
    if args.addr is not None:
        a = _parse_addr(args.addr)
        s = table.addr_to_name(a)
        if args.json:
            json.dump({"ok": s is not None, "address": f"{a:#010x}", "symbol": s}, out, indent=2)
            print()
        else:
            print(f"{a:08x} {s}" if s else f"{a:08x}: not in kernel text", file=out if s else sys.stderr)
        return 0 if s is not None else 1
    if args.system_map and not args.grep:
        if args.json:
            json.dump({"ok": True, "symbols": table.num_syms, "system_map": args.system_map}, out)
            print()
        return 0
    rx = None
    if args.grep:
        try:
            rx = re.compile(args.grep)
        except re.error as e:
            raise KernelFileError(f"--grep: bad pattern {args.grep!r}: {e}") from None
    syms = [s for s in table if rx is None or rx.search(s[2])]
    if args.json:
        json.dump({"ok": True, "image": args.image, "kind": table.kind, "num_syms": table.num_syms,
                   "decode_seconds": table.decode_seconds, "cached": table.cached,
                   "symbols": [{"addr": f"{a:#010x}", "type": t, "name": n} for a, t, n in syms]}, out)
        print()
    else:
        out.write("".join(f"{a:08x} {t} {n}\n" for a, t, n in syms))
    return 0 if syms else 1
