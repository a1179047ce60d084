"""Hostile inputs through the kernel's own load_module and through armload: do they decide alike?

Each case is one mutated sample `.ko` (armload/inputs/fuzz.py's classes, deterministic from the
seed), loaded in a fresh copy of the booted kernel (modrun.BootedRun: the kernel's load_module,
then armload's loader at the kernel's addresses). Per case one row:
  both-accept      both loaded it (and armload's image is compared with the kernel's; init may then
                   crash or run on, as the sample's own code does);
  both-refuse      both refused it (same errno, or a different one: counted apart);
  kernel-only      the kernel loaded what armload refuses (a refusal 6.1 does not make);
  overread         the kernel loaded it, but only by reading or writing outside its buffers (armload's
                   refusal says so: "6.1 reads ... unchecked", "would place sections outside"): by design;
  armload-only     armload loaded what the kernel refuses;
  kernel-crashed   the kernel oopsed or never returned inside load_module on the input (6.1 reads or
                   writes outside its buffers there) and armload refused it, saying which check;
  kernel-crashed/armload-accepted   the same, but armload accepted it (a refusal armload lacks).
The row of one result is inputs/booted_diff.py's classify (the coverage-guided fuzzer's oracle too).
Run: armload agree loader --cases N [--seed S] [--json FILE] (make fuzz-kernel).
"""
from __future__ import annotations

import json
import os
import tempfile
from collections import Counter

from ..inputs.booted_diff import SYMVERS, classify, config_of, symvers_of
from ..inputs.fuzz_cases import CLASSES, default_seeds, make_case
from ..kernel.debian import VMLINUZ
from ..kernel.provider import Kernel

DEFAULT_CASES = len(CLASSES) * 20
LOAD_BUDGET = 300_000_000              # instructions per load_module of a mutated sample


def campaign(vmlinuz: str, symvers: str, n_cases: int, seed: int = 1) -> dict:
    """`n_cases` mutated samples of `seed` through both: the rows, per mutation class, examples."""
    from ..emu.booted.modrun import BootedRun
    config = config_of(vmlinuz)
    kernel = Kernel.from_files(symvers_of(symvers, vmlinuz) + [vmlinuz], config)
    seeds = [s for s in default_seeds() if not s.object and not s.config.thumb2]
    rows, examples = Counter(), {}
    by_class: dict[str, Counter] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(n_cases):
            case, sd = make_case(seeds, i, seed)
            path = os.path.join(tmp, os.path.basename(sd.path))
            with open(path, "wb") as f:
                f.write(case.data)
            run = BootedRun(vmlinuz, kernel, config)
            try:
                res = run.load(path, budget=LOAD_BUDGET)
                row, detail = classify(res)
            except Exception as e:          # the harness (not the kernel, not armload's refusal)
                row, detail = "harness-error", f"{type(e).__name__}: {e}"
            rows[row] += 1
            by_class.setdefault(case.cls, Counter())[row] += 1
            examples.setdefault(row, []).append(f"case {i} {case.cls} {case.seed}: {case.what}: {detail}"[:300])
    return {"cases": n_cases, "seed": seed, "rows": dict(rows), "by_class": {k: dict(v) for k, v in by_class.items()},
            "examples": {k: v[:10] for k, v in examples.items()},
            "agreement": round(100.0 * (rows["both-accept"] + rows["both-refuse"]) / max(1, n_cases), 1)}


def report(vmlinuz: str = VMLINUZ, symvers: str = SYMVERS, n_cases: int = DEFAULT_CASES, seed: int = 1,
           json_out: str | None = None) -> int:
    """The campaign printed (and written to `json_out`); 1 when a row is a finding or the harness failed."""
    rep = campaign(vmlinuz, symvers, n_cases, seed)
    if json_out:
        with open(json_out, "w") as f:
            json.dump(rep, f, indent=1)
    print(f"{rep['cases']} mutated samples through the kernel's load_module and armload (seed {rep['seed']}): "
          f"{rep['agreement']}% decided alike")
    for row, n in sorted(rep["rows"].items(), key=lambda kv: -kv[1]):
        print(f"  {row:15s} {n:6d}")
        for ex in rep["examples"].get(row, [])[:5] if row not in ("both-accept", "both-refuse", "overread") else []:
            print(f"      {ex}")
    return 0 if not {"harness-error", "armload-only", "kernel-only", "kernel-crashed/armload-accepted"} & \
        set(rep["rows"]) else 1
# ("kernel-crashed" with armload accepting is listed too; the examples say which)

