"""`armload load`: load modules into a simulated kernel and report."""
from __future__ import annotations

import sys

from ..kernel.choices import LAYOUTS, PLT_ALGORITHMS
from ..errors import ArmloadError


def parse_placement(s: str) -> str | int:
    if s in ("window", "vmalloc"):
        return s
    try:
        return int(s, 0)
    except ValueError:
        raise ArmloadError(f"bad --placement {s!r}: use window, vmalloc or an address like 0xe0000000") from None


def add_common_args(p, placement: bool = True) -> None:
    """Kernel and configuration options shared by load/run/verify/disasm (run has no --placement:
    the booted kernel's module_alloc decides)."""
    g = p.add_argument_group("simulated kernel")
    g.add_argument("--kernel", action="append", default=[], metavar="FILE",
                   help="Module.symvers, System.map, /proc/kallsyms text or a kernel image (vmlinuz); "
                        "repeat to combine (CRCs from symvers, addresses from a map). "
                        "Default: a built-in kernel that gives every symbol a simulated address")
    if placement:
        g.add_argument("--placement", default="window", metavar="WHERE",
                       help="window (module area below the kernel, vmalloc fallback), vmalloc (far away: "
                            "every kernel call needs a PLT), or an address (default: window)")
    else:
        p.set_defaults(placement="window")
    g.add_argument("--thumb2", action="store_true", help="CONFIG_THUMB2_KERNEL (Thumb-2 relocations allowed)")
    g.add_argument("--l1", type=int, choices=(32, 64), default=64, help="L1 cache line in bytes (PLT group size)")
    g.add_argument("--no-ftrace", action="store_true", help="no CONFIG_DYNAMIC_FTRACE (no fixed PLT entries; mcount calls stay calls)")
    g.add_argument("--no-unload", action="store_true", help="no CONFIG_MODULE_UNLOAD (.exit.text goes to init)")
    g.add_argument("--plt-algorithm", dest="plt", choices=PLT_ALGORITHMS, default="v6",
                   help="PLT counting/emission rules: legacy (v4.0), sorted (2016 series), v6 (6.1, default)")
    g.add_argument("--layout", choices=LAYOUTS, default=None,
                   help="module memory layout: 6.1 (core+init allocations) or 6.4 (one per memory class); "
                        "with a kernel image, the image's own (6.4 from Linux 6.4 on), and a contradicting "
                        "--layout is refused (default without an image: 6.1)")
    g.add_argument("--no-modversions", action="store_true", help="skip the __versions CRC check")
    g.add_argument("--simulate-symbols", action="store_true",
                   help="without --kernel: give every undefined symbol an invented address (by default "
                        "every undefined symbol is an Unknown symbol)")
    g.add_argument("--object", action="store_true",
                   help="also accept plain relocatable objects (.o without .gnu.linkonce.this_module), which "
                        "the kernel refuses ('No module found in object'); init/exit are then the "
                        "init_module/cleanup_module symbols")
    g.add_argument("--vermagic", metavar="STRING",
                   help="the kernel's version magic; modules must match it (as check_modinfo does), e.g. "
                        "'6.1.0-50-armmp SMP mod_unload modversions ARMv7 p2v8 '")


def config_from_args(args) -> KernelConfig:
    from ..kernel.config import KernelConfig
    return KernelConfig(thumb2=args.thumb2, l1_cache_bytes=args.l1, dynamic_ftrace=not args.no_ftrace,
                        module_unload=not args.no_unload, plt_algorithm=args.plt, layout=args.layout or "6.1")


def follow_image(config: KernelConfig, kernel, args) -> KernelConfig:
    """The config as the kernel image (when one is given) decides it; the kernel object follows."""
    image = getattr(kernel, "image_path", None)
    symvers = list(getattr(kernel, "symvers_vmlinux", None) or ())
    if not image and not symvers:
        return config
    from ..loader.for_kernel import follow_kernel, follow_headers
    if image:
        config = follow_kernel(config, image, layout_given=getattr(args, "layout", None))
    else:
        config = follow_headers(config, symvers[0], layout_given=getattr(args, "layout", None))
    kernel.config = config
    return config


def session_from_args(args):
    from ..kernel.provider import Kernel
    from ..loader.session import Session
    config = config_from_args(args)
    kernel = Kernel.from_files(args.kernel, config, simulate_all=getattr(args, "simulate_symbols", False))
    kernel.vermagic = getattr(args, "vermagic", None)
    if args.thumb2 and getattr(kernel, "image_path", None):      # refused up front, with the reason
        from ..kernel.isa import refuse_thumb2_on_arm
        refuse_thumb2_on_arm(kernel.image_path, args.thumb2)
    config = follow_image(config, kernel, args)
    return Session(kernel, config, parse_placement(args.placement), modversions=not args.no_modversions)


def register(sub) -> None:
    p = sub.add_parser("load", help="load modules and report layout, relocations and PLTs",
                       description="Load one or more modules, in order, into one simulated kernel: parse, "
                                   "resolve, lay out, count and emit PLTs, relocate. Later modules may use "
                                   "earlier modules' exports.")
    p.add_argument("modules", nargs="+", metavar="MODULE.ko")
    add_common_args(p)
    p.add_argument("--image", metavar="FILE", help="write the loaded module as an ELF executable at its load addresses, with its "
                                                   "DWARF relocated for addr2line/gdb (with several modules: FILE gets a -NAME suffix)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("-v", "--verbose", action="store_true", help="list every section and symbol")
    p.set_defaults(func=run)


def _counted(mod, config):
    """Which relocations each PLT rule counted (re-reads the object; cheap next to the load)."""
    from ..loader.elf import read_object
    from ..loader.plt import counted_relocations
    try:
        return counted_relocations(read_object(mod.path), config)
    except (OSError, ArmloadError):
        return None


def run(args) -> int:
    from ..inspect.report import format_text, to_dict
    session = session_from_args(args)
    results = []
    for i, path in enumerate(args.modules):
        mod = session.load(path, object=args.object)
        if args.image:
            from ..loader.debug_image import write_debug_image as write_image     # keeps .debug_* (relocated)
            out = args.image
            if len(args.modules) > 1:
                stem, dot, ext = out.rpartition(".")
                out = f"{stem}-{mod.name}.{ext}" if dot else f"{out}-{mod.name}"
            write_image(mod, out)
        if args.json:
            from ..inspect.report import plt_notes
            d = to_dict(mod, session.kernel.describe(), session.placement)
            counted = _counted(mod, session.config)
            d["plt_notes"] = plt_notes(mod, counted, limit=None)        # why the PLT numbers differ
            if counted is not None:
                d["plt_counted"] = {k: [dict(vars(c)) for c in v] for k, v in counted.items()}   # flat: asdict is 5x slower
            results.append(d)
        else:
            if i:
                print()
            print(format_text(mod, session.kernel.describe(), session.placement, args.verbose,
                              counted=_counted(mod, session.config)))
    if args.json:
        import json
        json.dump({"ok": True, "modules": results}, sys.stdout, indent=2)
        print()
    return 0
