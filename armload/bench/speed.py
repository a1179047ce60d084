"""`armload bench speed`: the booted runtime's speed, side by side in one run (issue 30).

1. effective instructions per CPU-second of `check` (init in the booted kernel) on a module list (default:
   the 707 modules of the QEMU oracle, tests/oracles/qemu/modules.txt; --tree: all modules),
   against bare Unicorn's tight loop (bench/emu.py) measured in the same run: the ratio;
2. the check's wall time and CPU-seconds (this process and every child it waited for);
3. QEMU per CPU-second: the committed QEMU oracle run's own cost (its boots and module seconds,
   one TCG vCPU: about one CPU-second per second) for the same list, against armload's CPU-seconds;
4. a pytest test's fresh kernel: a fork of a process holding the booted kernel with a module
   loaded (emu/booted/forkserver.py), ready to call: CPU and wall per fork.

CPU-seconds are time.process_time() plus resource.getrusage(RUSAGE_CHILDREN), so a machine
shared with other work changes the wall figures, not the CPU ones. Instructions are the
modules' own (init.instructions of each record); the dependency closures' loads are paid once
per closure server and not counted, so the ratio is a lower bound.
"""
from __future__ import annotations

import json
import os
import resource
import statistics
import time

from .inputs import DEBIAN, DEBIAN_SYMVERS, ROOT, VMLINUZ

QEMU_DIR = os.path.join(ROOT, "tests", "oracles", "qemu")
TARGETS = {"ips_vs_bare": 0.30, "tree_wall_s": 300.0, "vs_qemu_cpu": 10.0, "fork_ms": 5.0}


def cpu() -> float:
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + c.ru_utime + c.ru_stime


def bare_unicorn_ips(rounds: int = 30_000_000) -> float:
    """Bare Unicorn's counted 3-instruction loop (no hooks), per CPU-second."""
    from .emu import _bare, loop_code
    t = time.process_time()
    _, r0 = _bare(loop_code(0), rounds)
    return (2 + 3 * r0) / (time.process_time() - t)


def qemu_list(path: str | None = None) -> list[str]:
    with open(path or os.path.join(QEMU_DIR, "modules.txt")) as f:
        return [ln.strip() for ln in f if ln.strip() and not ln.startswith("#")]


def qemu_cost() -> dict:
    """What the committed QEMU oracle run cost (results.json's timing)."""
    with open(os.path.join(QEMU_DIR, "results.json")) as f:
        d = json.load(f)
    t = d["timing"]
    boots = t["boots"] * t["boot_seconds_median"]
    return {"modules": len(d["modules"]), "module_seconds": t["module_seconds_total"], "boot_seconds": boots,
            "cpu_seconds": t["module_seconds_total"] + boots}


def run_check(patterns: list[str] | None, jobs: int, limit: int | None = None) -> dict:
    """check with the booted kernel (library call) on the modules `patterns` select (None: the tree)."""
    from ..ci.corpus import run_checks
    from ..ci.selection import scan_with_deps, select
    from ..ci.worker import BOOTED_BUDGET, CheckOptions
    from ..kernel.modtree import plan_order
    from ..kernel.config import DEBIAN_ARMMP
    from ..kernel.provider import Kernel
    c0, w0 = cpu(), time.perf_counter()
    kernel = Kernel.from_files([DEBIAN_SYMVERS, VMLINUZ], DEBIAN_ARMMP)
    mods, _ = scan_with_deps(DEBIAN, DEBIAN)
    plan = plan_order(mods)
    names = select(plan, patterns) if patterns else list(plan.order)
    if limit:
        names = names[:limit]
    opts = CheckOptions(image=VMLINUZ, tree=DEBIAN, budget=BOOTED_BUDGET)
    stats = run_checks(plan, kernel, DEBIAN_ARMMP, opts, jobs=jobs, names=names)
    wall, cpus = time.perf_counter() - w0, cpu() - c0
    insns = sum((r.get("init") or {}).get("instructions") or 0 for r in stats.records)
    outcomes: dict[str, int] = {}
    for r in stats.records:
        outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
    by_rel = {r["module"]: r for r in stats.records}
    slow = sorted(stats.timing.items(), key=lambda kv: -kv[1].get("total", 0))[:10]
    return {"modules": len(names), "jobs": jobs, "wall_s": wall, "cpu_s": cpus, "instructions": insns,
            "ips": insns / cpus if cpus else 0.0, "outcomes": outcomes,
            "slowest": [{"module": m, "wall_s": t.get("total"),
                         "instructions": (by_rel[m].get("init") or {}).get("instructions")} for m, t in slow]}


def fork_ready(module: str = "net/6lowpan/6lowpan.ko", n: int = 20) -> dict:
    """A fresh kernel with `module` loaded, per fork: CPU (parent + child) and wall per fork_run."""
    from ..emu.booted import forkserver
    from ..kernel.config import DEBIAN_ARMMP
    from ..kernel.provider import Kernel
    kernel = Kernel.from_files([DEBIAN_SYMVERS, VMLINUZ], DEBIAN_ARMMP)
    t = time.process_time()
    h = forkserver.prepare([os.path.join(DEBIAN, module)], vmlinuz=VMLINUZ, kernel=kernel, config=DEBIAN_ARMMP,
                           tree=DEBIAN)
    prep = time.process_time() - t
    walls, cpus, ready, parent = [], [], [], []
    for _ in range(n):
        c, w, p = cpu(), time.perf_counter(), time.process_time()
        ok, t_child = forkserver.fork_run(h, lambda run: (run.results[-1].ok, time.perf_counter()))
        walls.append(time.perf_counter() - w)
        cpus.append(cpu() - c)
        parent.append(time.process_time() - p)
        ready.append(t_child - w)                 # CLOCK_MONOTONIC: the same clock in the child
        assert ok
    med = lambda xs: 1e3 * statistics.median(xs)
    return {"module": module, "prepare_cpu_s": prep, "forks": n, "cpu_ms": med(cpus), "wall_ms": med(walls),
            "ready_ms": med(ready), "parent_cpu_ms": med(parent)}


def run_benchmark(*, tree: bool = False, jobs: int = 2, limit: int | None = None, list_file: str | None = None) -> dict:
    out = {"bare_unicorn_ips": bare_unicorn_ips(), "fork": fork_ready()}
    out["check"] = run_check(None if tree else qemu_list(list_file), jobs, limit)
    out["check"]["what"] = "tree" if tree else "qemu list"
    out["qemu"] = qemu_cost()
    out["ips_vs_bare"] = out["check"]["ips"] / out["bare_unicorn_ips"]
    per = out["check"]["cpu_s"] / max(1, out["check"]["modules"])
    out["vs_qemu_cpu"] = (out["qemu"]["cpu_seconds"] / out["qemu"]["modules"]) / per if per else 0.0
    return out


def print_benchmark(r: dict) -> None:
    c, q, f = r["check"], r["qemu"], r["fork"]
    print(f"booted runtime speed (CPU-seconds; wall figures depend on the machine's load)")
    print(f"  check (booted kernel) on the {c['what']} ({c['modules']} modules, --jobs {c['jobs']}): "
          f"{c['wall_s']:.1f} s wall, {c['cpu_s']:.1f} CPU-s, {c['instructions'] / 1e9:.2f} G instructions "
          f"(the modules' own) | outcomes {c['outcomes']}")
    print(f"  effective {c['ips'] / 1e6:.1f} M instr/CPU-s | bare Unicorn's tight loop "
          f"{r['bare_unicorn_ips'] / 1e6:.0f} M instr/CPU-s | ratio {100 * r['ips_vs_bare']:.1f}% "
          f"(target >= {100 * TARGETS['ips_vs_bare']:.0f}%)")
    print(f"  QEMU (the committed oracle run of the 707-module list, {q['modules']} modules): {q['cpu_seconds']:.0f} CPU-s "
          f"({q['cpu_seconds'] / q['modules']:.2f} per module) | armload {c['cpu_s'] / max(1, c['modules']):.3f} "
          f"per module ({c['what']}) | {r['vs_qemu_cpu']:.1f}x QEMU per CPU-second (target >= {TARGETS['vs_qemu_cpu']:.0f}x)")
    print(f"  a test's fresh kernel with {os.path.basename(f['module'])} loaded (a fork; median of {f['forks']}): "
          f"ready to call {f.get('ready_ms', 0):.1f} ms wall after fork_run began ({f.get('parent_cpu_ms', 0):.1f} ms "
          f"CPU in the parent; target <= {TARGETS['fork_ms']:.0f} ms) | the whole fork_run {f['cpu_ms']:.1f} ms CPU "
          f"(child and its exit included), {f['wall_ms']:.1f} ms wall | preparing it once: {f['prepare_cpu_s']:.2f} CPU-s")
    if c["what"] == "tree":
        print(f"  whole tree: {c['wall_s'] / 60:.1f} min wall (target <= {TARGETS['tree_wall_s'] / 60:.0f} min)")
