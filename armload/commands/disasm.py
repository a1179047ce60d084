"""`armload disasm`: the loaded code at its final addresses, annotated."""
from __future__ import annotations

import json
import sys

from ..errors import EmulationError
from .run import add_module_args, load_all


def register(sub) -> None:
    p = sub.add_parser("disasm", help="disassemble the loaded module at its final addresses",
                       description="Disassemble the executable sections of the loaded module(s) with "
                                   "capstone, ARM/Thumb/data by the $a/$t/$d mapping symbols, annotated "
                                   "with symbols, branch relocations and PLT entries; every relocation is listed "
                                   "under its instruction or data word as objdump -dr does (the .ARM.exidx "
                                   "unwind tables are listed too), and --source interleaves DWARF source "
                                   "lines as objdump -S does. When several modules "
                                   "are given they are loaded in order and the last one is shown.",
                       conflict_handler="resolve")
    p.add_argument("modules", nargs="+", metavar="MODULE.ko")
    add_module_args(p)
    p.add_argument("--function", "-f", metavar="NAME", help="only this function")
    p.add_argument("--plt", dest="plt_only", action="store_true", help="only the PLT sections (.plt, .init.plt)")
    p.add_argument("--no-relocs", dest="relocs", action="store_false",
                   help="do not list every relocation at its site (objdump -dr style, the default)")
    p.add_argument("--source", "-S", action="store_true",
                   help="interleave source lines from the module's DWARF line tables (objdump -S); "
                        "needs an unstripped module, e.g. sample_modules/hello-arm-debug.ko")
    p.add_argument("--source-dir", action="append", default=[], metavar="DIR",
                   help="look source files up here by base name (default: next to the module and "
                        "in its src/NAME/ directory)")
    p.add_argument("--patched", action="store_true",
                   help="show the code as the kernel patches it at load: every mcount call site as the ftrace NOP")
    p.add_argument("--probe", dest="probes", action="append", default=[], metavar="KIND:FUNC[+OFF]",
                   help="also attach this probe (as for run --probe) and show its patched instruction; implies --patched")
    p.add_argument("--json", action="store_true", help="machine-readable listing on stdout")
    p.set_defaults(func=cmd_disasm)


def cmd_disasm(args) -> int:
    from ..inspect.disasm import disassemble, format_listing
    session, modules = load_all(args)
    m = modules[-1]
    if args.function and args.plt_only:
        raise EmulationError("--function and --plt cannot be combined")
    relocs = source = None
    if args.relocs or args.source:
        import os
        from ..loader.elf import read_object
        from ..inspect.explain import relocation_rows, section_addresses
        from ..loader.symbols import symbol_values
        obj = read_object(m.path)
        sec_addr = section_addresses(obj, m)
        if args.relocs:
            relocs = relocation_rows(obj, sec_addr, symbol_values(obj, sec_addr, m.resolved), m.config)
        if args.source:
            from ..inspect.disasm import source_map
            here = os.path.dirname(os.path.abspath(m.path))
            dirs = args.source_dir + [here, os.path.join(here, "src", m.name)]
            source = source_map(m.path, sec_addr, dirs)
            if not source:
                print(f"{m.name}: no DWARF line table in {m.path} (stripped?); showing code only",
                      file=sys.stderr)
    marks = {}
    if args.patched or args.probes:
        from .probe_options import patched_view
        m, marks = patched_view(session, modules, args.probes)
    blocks = disassemble(m, session.kernel, function=args.function, plt=args.plt_only, relocs=relocs,
                         source=source)
    for _t, lines in blocks:
        for ln in lines:
            if ln.addr in marks:
                ln.comment = (ln.comment + " " if ln.comment else "") + f"@ patched: {marks[ln.addr]}"
    if args.json:
        json.dump({"ok": True, "module": m.name,
                   "blocks": [{"title": t, "lines": [ln.to_dict() for ln in lines]} for t, lines in blocks]},
                  sys.stdout, indent=2)
        print()
        return 0
    if not blocks:
        print(f"{m.name}: no {'PLT ' if args.plt_only else ''}code to show")
        return 0
    print(format_listing(m, blocks, session.kernel))
    return 0
