"""`armload agree verdicts`: armload against the real kernel, one oracle each
(armload/agree/)."""
from __future__ import annotations

DEFAULT_ORACLE = "tests/oracles/qemu/results.json"


def register(sub) -> None:
    p = sub.add_parser("agree", help="armload against the real kernel: init verdicts (QEMU oracle)",
                       description="Compare armload with the real kernel, one oracle per subcommand: "
                                   "verdicts (the QEMU oracle's insmod results).")
    subs = p.add_subparsers(dest="oracle_cmd", metavar="ORACLE")
    subs.required = True
    _verdicts(subs)


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


def run_verdicts(args) -> int:
    from ..agree.verdicts import report
    return report(args.armload_json, args.oracle, args.min, args.list, args.json)

