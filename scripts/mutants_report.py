#!/usr/bin/env python3
"""Kill rate per module from `mutmut results --all true` (lines `  pkg.mod.x_func__mutmut_N: status`).
Killed = killed + timeout (the mutant changed behaviour); survived, no tests, suspicious and
skipped all count against the rate. Lists the survivors per function."""
import collections
import re
import sys

LINE = re.compile(r"^\s*([\w.ǁ]+)__mutmut_(\d+): (.+)$")


def main(path: str) -> int:
    per = collections.defaultdict(collections.Counter)
    survivors = collections.defaultdict(list)
    for line in open(path, encoding="utf-8"):
        m = LINE.match(line)
        if not m:
            continue
        name, num, status = m.group(1), m.group(2), m.group(3).strip()
        module, func = name.rsplit(".", 1)
        func = func.removeprefix("x_").removeprefix("x").replace("ǁ", ".").strip(".")
        per[module][status] += 1
        if status not in ("killed", "timeout"):
            survivors[module].append(f"{func}#{num} ({status})")
    if not per:
        print(f"no mutmut results in {path}", file=sys.stderr)
        return 1
    print(f"{'module':<24} {'mutants':>7} {'checked':>7} {'killed':>7} {'survived':>8} {'no tests':>8} {'other':>6}"
          f" {'kill rate (checked)':>20}")
    for module in sorted(per):
        c = per[module]
        total = sum(c.values())
        checked = total - c["not checked"]
        killed = c["killed"] + c["timeout"]
        other = checked - killed - c["survived"] - c["no tests"]
        rate = 100.0 * killed / checked if checked else 0.0
        print(f"{module:<24} {total:>7} {checked:>7} {killed:>7} {c['survived']:>8} {c['no tests']:>8} {other:>6}"
              f" {rate:>19.1f}%")
    for module in sorted(survivors):
        left = [s for s in survivors[module] if not s.endswith("(not checked)")]
        print(f"\n{module}: {len(left)} checked and not killed")
        byfunc = collections.defaultdict(list)
        for s in left:
            f, rest = s.split("#", 1)
            byfunc[f].append(rest)
        for f, items in sorted(byfunc.items()):
            print(f"  {f}: {', '.join(items)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "build/mutants/mutmut-results.txt"))
