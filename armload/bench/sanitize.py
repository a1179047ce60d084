"""`armload bench sanitize`: the sanitizers' cost, on vs off, on the QEMU-verified module list.

Each module of tests/oracles/qemu/modules.txt is loaded (after its dependencies, in one fresh
restore of the booted kernel) twice: without sanitizers and with all of them; the CPU time of
each (time.process_time: restore, load_module, init) is summed, and the ratio printed. The
same pass counts the reports (the false-positive measure on the Debian tree: every one is
listed). `limit`/`only` select a part of the list; `skip_slow` leaves out the self-tests that run
for minutes (lib/test_bpf, lib/test_user_copy, crypto/tcrypt), said in the output.
"""
from __future__ import annotations

import fnmatch
import json
import os
import time

from .inputs import DEBIAN, DEBIAN_SYMVERS, ROOT, VMLINUZ

LIST = os.path.join(ROOT, "tests", "oracles", "qemu", "modules.txt")
SLOW = ("lib/test_bpf.ko", "lib/test_user_copy.ko", "crypto/tcrypt.ko")
MODULE_BUDGET = 2_000_000_000


def module_list(path: str = LIST) -> list[str]:
    with open(path) as f:
        return [ln.strip() for ln in f if ln.strip() and not ln.startswith("#")]


def run_one(rel: str, kernel, config, index, sanitize: bool) -> dict:
    from ..kernel.modtree import load_order
    from ..emu.booted.modrun import BootedRun
    from ..emu.sanitize import Sanitizer
    t0 = time.process_time()
    run = BootedRun(VMLINUZ, kernel, config, tree=DEBIAN)
    san = Sanitizer(run) if sanitize else None
    path = os.path.join(DEBIAN, rel)
    out = {"module": rel, "status": None, "ret": None}
    try:
        order = load_order(path, index)
    except FileNotFoundError as e:
        return dict(out, status="missing", note=str(e), cpu=0.0)
    for p in order:
        r = san.load(p, "", budget=MODULE_BUDGET) if san else run.load(p, "", budget=MODULE_BUDGET)
        if not r.ok:
            break
    out.update(status=r.status, ret=r.ret, cpu=time.process_time() - t0)
    if san is not None:
        reps = san.formatted()
        out["reports"] = [rp.to_dict() for rp in reps]
        out["counts"] = dict(san.counts)
    return out


def run_benchmark(limit: int | None = None, only: str | None = None, skip_slow: bool = True,
                  log: str | None = None) -> dict:
    from ..kernel.modtree import tree_index
    from ..kernel.config import DEBIAN_ARMMP
    from ..kernel.provider import Kernel
    kernel = Kernel.from_files([VMLINUZ, DEBIAN_SYMVERS], DEBIAN_ARMMP)
    index = tree_index(DEBIAN)
    mods = module_list()
    skipped = [m for m in mods if skip_slow and m in SLOW]
    mods = [m for m in mods if m not in skipped and (not only or fnmatch.fnmatch(m, only))]
    if limit:
        mods = mods[:limit]
    rows, off, on = [], 0.0, 0.0
    fh = open(log, "a") if log else None
    for rel in mods:
        a = run_one(rel, kernel, DEBIAN_ARMMP, index, False)
        b = run_one(rel, kernel, DEBIAN_ARMMP, index, True)
        off += a["cpu"]
        on += b["cpu"]
        row = dict(b, cpu_off=a["cpu"], status_off=a["status"], ret_off=a["ret"])
        rows.append(row)
        if fh:
            fh.write(json.dumps(row) + "\n")
            fh.flush()
    if fh:
        fh.close()
    reports = [dict(r, module=row["module"]) for row in rows for r in row.get("reports", [])]
    changed = [row["module"] for row in rows if (row["status"], row["ret"]) != (row["status_off"], row["ret_off"])
               and not row.get("reports")]
    return {"modules": len(rows), "skipped_slow": skipped, "cpu_off": round(off, 2), "cpu_on": round(on, 2),
            "ratio": round(on / off, 3) if off else None, "reports": reports,
            "verdict_changed": changed, "rows": rows}


def print_benchmark(r: dict) -> None:
    print(f"sanitizers on vs off: {r['modules']} modules of the QEMU-verified list "
          f"(restore, load_module and init of each, with its dependencies)")
    if r["skipped_slow"]:
        print(f"  left out (self-tests of minutes): {', '.join(r['skipped_slow'])}")
    print(f"  CPU off {r['cpu_off']:.1f} s, on {r['cpu_on']:.1f} s: ratio {r['ratio']}x")
    print(f"  reports: {len(r['reports'])}")
    for rep in r["reports"]:
        print(f"    {rep['module']}: {rep['kind']}: {rep['title']} ({rep['function']} {rep['line']})")
    if r["verdict_changed"]:
        print(f"  init verdict changed by the sanitizers (no report): {', '.join(r['verdict_changed'])}")
