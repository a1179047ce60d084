"""Compare a fresh seed 003 run's deterministic counts with the committed results (make bench-probes-check).

Only instruction counts and verdicts are compared (host time never is); the 40k-probe and
kallsyms results are compared on their deterministic columns when their inputs exist."""
import json
import os
import sys


def main(folder: str) -> int:
    from armload.bench.attach import run_task_rename
    want = json.load(open(os.path.join(folder, "task-rename.json")))["task-rename"]
    got = run_task_rename(events=want["events"], min_time=0.0)
    key = lambda res: [(r["mode"], round(r["insns_per_event"], 3), round(r["emulated_per_event"], 3))
                       for r in res["rows"]]
    bad = key(want) != key(got) or want["verdict"] != got["verdict"]
    print(f"task-rename: {'DIFFERS' if bad else 'same'} ({len(got['rows'])} rows, verdict "
          f"{'reproduced' if got['verdict']['reproduced'] else 'not reproduced'})")
    booted = json.load(open(os.path.join(folder, "task-rename.json"))).get("task-rename-booted")
    from armload.bench.attach import VMLINUZ
    if booted and os.path.exists(VMLINUZ):
        from armload.bench.attach_booted import run_task_rename_booted
        got = run_task_rename_booted(events=booted["events"])
        key = lambda res: [(r["mode"], r["insns"], r["counter"], r["probe_text"]) for r in res["rows"]]
        differs = key(booted) != key(got) or booted["verdict"] != got["verdict"] or \
            booted["unsupported"] != got["unsupported"]
        print(f"task-rename on the booted kernel: {'DIFFERS' if differs else 'same'} ({len(got['rows'])} rows, "
              f"verdict {'reproduced' if got['verdict']['reproduced'] else 'not reproduced'})")
        bad = bad or differs
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results"))
