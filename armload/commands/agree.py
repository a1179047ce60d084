"""`armload agree verdicts|kprobes|loader`: armload against the real kernel, one oracle each
(armload/agree/)."""
from __future__ import annotations

DEFAULT_ORACLE = "tests/oracles/qemu/results.json"


def register(sub) -> None:
    p = sub.add_parser("agree", help="armload against the real kernel: init verdicts (QEMU oracle), kprobes "
                                     "verdicts and load_module on fuzzed inputs (the booted kernel)",
                       description="Compare armload with the real kernel, one oracle per subcommand: "
                                   "verdicts (the QEMU oracle's insmod results), kprobes (the booted kernel's "
                                   "own register_kprobe and tables), loader (the booted kernel's own "
                                   "load_module on mutated samples).")
    subs = p.add_subparsers(dest="oracle_cmd", metavar="ORACLE")
    subs.required = True
    _verdicts(subs)
    _kprobes(subs)
    _loader(subs)


def _verdicts(subs) -> None:
    p = subs.add_parser("verdicts", help="armload's init verdicts against the real kernel's (QEMU oracle)",
                        description="Read armload's `check --json` (or `run --json`) output and the QEMU oracle's "
                                    "results (the Debian kernel booted in qemu-system-arm, insmod per module: "
                                    "`make qemu-oracle`) and report, module by module, whether armload's init "
                                    "verdict is the kernel's: the same return value of finit_module (0 or the "
                                    "same -errno), an oops for an oops, a hang for a budget. Disagreements are "
                                    "grouped by class; exit 1 when agreement is below --min.")
    p.add_argument("armload_json", metavar="ARMLOAD.json", help="`armload check --json` or `armload run --json` output")
    p.add_argument("--oracle", default=DEFAULT_ORACLE, metavar="RESULTS.json",
                   help=f"the QEMU oracle's results (default: {DEFAULT_ORACLE})")
    p.add_argument("--min", type=float, default=0.0, metavar="PERCENT",
                   help="fail (exit 1) when the agreement is below PERCENT (default 0)")
    p.add_argument("--list", type=int, default=10, metavar="N",
                   help="modules listed per disagreement class (default 10; 0: none)")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.set_defaults(func=run_verdicts)


def _kprobes(subs) -> None:
    p = subs.add_parser("kprobes", help="armload's kprobes verdicts against the booted kernel's register_kprobe",
                        description="The booted Debian kernel as the oracle of armload's kprobes verdicts "
                                    "(make probes-agree): each ARM encoding of the sample (the named cases, "
                                    "Debian module text, seeded random words) and one word per decode-table "
                                    "entry is written into a loaded module's text and registered as a disabled "
                                    "kprobe by the kernel's own register_kprobe, against armload's decoder; the "
                                    "kernel's kprobe_blacklist and __jump_table against armload's. Exit 1 on any "
                                    "disagreement.")
    p.add_argument("--json", metavar="OUT", help="write the full result here")
    p.set_defaults(func=run_kprobes)


def _loader(subs) -> None:
    p = subs.add_parser("loader", help="mutated samples through the booted kernel's load_module and armload's loader",
                        description="Hostile inputs through the kernel's own load_module and through armload "
                                    "(make fuzz-kernel): N mutated samples of the fuzz campaign's classes, each "
                                    "loaded in a fresh copy of the booted kernel, then by armload's loader at the "
                                    "kernel's addresses; one row per case (both-accept, both-refuse, overread, "
                                    "kernel-crashed, kernel-only, armload-only). Exit 1 on a kernel-only, "
                                    "armload-only, kernel-crashed/armload-accepted or harness-error row.")
    p.add_argument("--vmlinuz", help="the kernel image (default: the Debian vmlinuz under $CACHE, .cache)")
    p.add_argument("--symvers", help="the samples' Module.symvers (default: sample_modules/Module.symvers)")
    p.add_argument("--cases", type=int, metavar="N",
                   help="mutated samples (default: 20 per mutation class)")
    p.add_argument("--seed", type=int, default=1, help="the mutations' seed (default 1)")
    p.add_argument("--json", metavar="FILE", help="write the rows, per class and examples here")
    p.set_defaults(func=run_loader)


def run_verdicts(args) -> int:
    from ..agree.verdicts import report
    return report(args.armload_json, args.oracle, args.min, args.list, args.json)


def run_kprobes(args) -> int:
    from ..agree.kprobes import report
    return report(args.json)


def run_loader(args) -> int:
    from ..agree import loader
    return loader.report(args.vmlinuz or loader.VMLINUZ, args.symvers or loader.SYMVERS,
                         loader.DEFAULT_CASES if args.cases is None else args.cases, args.seed, args.json)
