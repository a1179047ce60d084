"""`armload agree verdicts|kprobes`: armload against the real kernel, one oracle each
(armload/agree/)."""
from __future__ import annotations

DEFAULT_ORACLE = "tests/oracles/qemu/results.json"


def register(sub) -> None:
    p = sub.add_parser("agree", help="armload against the real kernel: init verdicts (QEMU oracle), kprobes "
                                     "verdicts (the booted kernel)",
                       description="Compare armload with the real kernel, one oracle per subcommand: "
                                   "verdicts (the QEMU oracle's insmod results), kprobes (the booted kernel's "
                                   "own register_kprobe and tables).")
    subs = p.add_subparsers(dest="oracle_cmd", metavar="ORACLE")
    subs.required = True
    _verdicts(subs)
    _kprobes(subs)


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


def run_verdicts(args) -> int:
    from ..agree.verdicts import report
    return report(args.armload_json, args.oracle, args.min, args.list, args.json)


def run_kprobes(args) -> int:
    from ..agree.kprobes import report
    return report(args.json)
