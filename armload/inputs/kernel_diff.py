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
Run: python -m armload.inputs.kernel_diff --cases N [--seed S] [--json FILE] (make fuzz-kernel).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import Counter

from ..kernel.config import DEBIAN_ARMMP
from ..kernel.debian import image_under
from ..kernel.provider import Kernel
from .fuzz_cases import CLASSES, default_seeds, make_case

LOAD_BUDGET = 300_000_000              # instructions per load_module of a mutated sample
OVERREAD = ("6.1 reads", "unchecked", "outside its allocation", "outside the file", "past the end of the file",
            "would write", "would place")


def classify(res) -> tuple[str, str]:
    """(row, detail) for one modrun.BootedResult."""
    c = res.loader
    crashed = res.status not in ("returned", "refused")      # oops, panic, budget, hostile.py's ends
    if crashed and c.compared and not c.refusal:
        # load_module reached do_init_module: the module's own init crashed or ran on (nullderef, spin)
        return "both-accept", f"loaded; init: {res.status}" + ("" if c.identical else f"; {c.differences} word(s) differ")
    if crashed:
        row = "kernel-crashed" if c.refusal else "kernel-crashed/armload-accepted"
        return row, f"{res.status}; armload " + ("refused: " + c.refusal if c.refusal else "accepted")
    kernel_ok = res.status == "returned"
    if kernel_ok and not c.refusal:
        return "both-accept", "image identical" if c.identical else f"{c.differences} word(s) differ"
    if kernel_ok:
        return ("overread" if any(w in c.refusal for w in OVERREAD) else "kernel-only"), c.refusal
    if c.refusal:
        return "both-refuse", "same errno" if c.agrees else f"kernel {res.ret}, armload: {c.refusal}"
    if c.agrees:                       # refused after loading (parse_args, sysfs, a notifier)
        return "both-accept", "the kernel refused after loading"
    return "armload-only", f"kernel {res.ret}"


def config_of(vmlinuz: str):
    """What `armload run --kernel VMLINUZ` loads with (commands/load.py): the Debian config as the
    image says, struct module's layout from its package's module tree (without it armload does not
    know sizeof(struct module): seed 4 case 249 was accepted for that alone)."""
    from ..loader.for_kernel import follow_kernel
    return follow_kernel(DEBIAN_ARMMP, vmlinuz)


def symvers_of(symvers: str, vmlinuz: str) -> list[str]:
    """`symvers` and, when its headers package is unpacked beside the image's, the kernel's own
    Module.symvers: the vmlinuz gives the exports' addresses, not their CRCs, and without a CRC
    check_version is skipped (a mangled __versions entry of a Debian seed was accepted: Atheris,
    issue 33; the kernel refuses "no symbol version for ...")."""
    rel = os.path.basename(vmlinuz).removeprefix("vmlinuz-")
    own = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(vmlinuz)))),
                       f"linux-headers-{rel}", "usr", "src", f"linux-headers-{rel}", "Module.symvers")
    return [symvers] + ([own] if os.path.exists(own) else [])


def differential(vmlinuz: str, symvers: str, n_cases: int, seed: int = 1) -> dict:
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m armload.inputs.kernel_diff", description=__doc__.split("\n")[0])
    root = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    cache = os.environ.get("CACHE", os.path.join(root, ".cache"))
    ap.add_argument("--vmlinuz", default=image_under(cache))
    ap.add_argument("--symvers", default=os.path.join(root, "sample_modules", "Module.symvers"))
    ap.add_argument("--cases", type=int, default=len(CLASSES) * 20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", metavar="FILE")
    a = ap.parse_args(argv)
    rep = differential(a.vmlinuz, a.symvers, a.cases, a.seed)
    if a.json:
        with open(a.json, "w") as f:
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


if __name__ == "__main__":
    sys.exit(main())
