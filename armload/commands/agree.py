"""`armload agree`: armload's init verdicts against the real kernel's (the QEMU oracle's results)."""
from __future__ import annotations

import json
import sys

DEFAULT_ORACLE = "tests/oracles/qemu/results.json"


def register(sub) -> None:
    p = sub.add_parser("agree", help="compare armload's init verdicts with the real kernel's (QEMU oracle)",
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
    p.set_defaults(func=run)


def _table(rows, header, align) -> str:
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    fmt = lambda r: "  ".join(str(c).rjust(w) if a == "r" else str(c).ljust(w)      # noqa: E731
                              for c, w, a in zip(r, widths, align)).rstrip()
    return "\n".join([fmt(header), "  ".join("-" * w for w in widths)] + [fmt(r) for r in rows])


def run(args) -> int:
    from ..ci.agreement import compare, load_json, oracle_verdicts, armload_verdicts
    if not 0.0 <= args.min <= 100.0:
        from ..errors import ArmloadError
        raise ArmloadError(f"--min {args.min:g}: a percentage from 0 to 100")
    oracle = load_json(args.oracle, "oracle results")
    mine = load_json(args.armload_json, "armload")
    ag = compare(oracle_verdicts(oracle), armload_verdicts(mine))
    ok = ag.percent >= args.min
    if args.json:
        json.dump({"ok": ok, "min": args.min, **ag.to_dict()}, sys.stdout, indent=2)
        print()
        return 0 if ok else 1
    k = oracle.get("kernel", {})
    print(f"real kernel: {k.get('version') or k.get('image')} under {oracle.get('qemu', {}).get('version', 'QEMU')}")
    kinds = {}
    for r in ag.rows:
        kinds.setdefault(r.kernel.label(), [0, 0])[0] += 1
        kinds[r.kernel.label()][1] += r.agree
    print()
    print(_table([[lab, n, a, f"{100 * a / n:.1f}%"] for lab, (n, a) in sorted(kinds.items(), key=lambda x: -x[1][0])],
                 ["kernel verdict", "modules", "armload agrees", "share"], "lrrr"))
    print()
    cls = ag.classes()
    def eg(c):
        mods = [r.module for r in ag.disagreements() if r.cls == c]
        return ", ".join(mods[:3]) + (", ..." if len(mods) > 3 else "")
    print(_table([[c, n, eg(c)] for c, n in cls.most_common()], ["disagreement class", "modules", "e.g."], "lrl"))
    fns = ag.stopping_functions()
    if fns:
        print()
        print(_table([[f, n] for f, n in fns.most_common(15)],
                     ["unmodelled call that stopped armload (own init or a dependency's)", "modules"], "lr"))
    if args.list:
        print()
        for c, n in cls.most_common():
            rows = [r for r in ag.disagreements() if r.cls == c][:args.list]
            print(f"{c} ({n}):")
            for r in rows:
                print(f"  {r.module}: {r.armload.detail or r.armload.kind}")
    print()
    print(f"agreement: {ag.agreed} of {ag.total} modules ({ag.percent:.1f}%) "
          f"{'>=' if ok else 'below'} the minimum {args.min:g}%")
    return 0 if ok else 1
