"""The kernel's own self-test modules, loaded by its own load_module in the booted kernel (one
fresh restore each, dependencies first): what `make boot-selftests` runs and records in
tests/boot_selftests.json (too slow for the test suite: test_bpf alone is 5.1 G instructions).

    python -m armload.emu.booted.selftest VMLINUZ MODULE_TREE [--json OUT] [REL.ko ...]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from .kernel import BootedKernel
from .modload import kernel_load_path

# (module path in the tree, console markers worth keeping)
DEFAULT = ["lib/test_bpf.ko", "lib/test_user_copy.ko", "lib/test_static_keys.ko", "crypto/xor.ko",
           "lib/crc-itu-t.ko"]
MARKERS = ("Summary:", "tests passed", "FAIL", "Oops", "BUG", "WARNING", "Unknown symbol", "xor: using")


def run(vmlinuz: str, tree: str, modules: list[str]) -> tuple[dict, dict]:
    """(results: a function of the inputs only, wall-clock seconds per module)."""
    out = {"kernel": os.path.basename(vmlinuz), "modules": {}}
    seconds = {}
    for rel in modules:
        k = BootedKernel.get(vmlinuz)
        out.setdefault("boot_instructions", k.meta["boot_insns"])
        out.setdefault("cmdline", k.meta["cmdline"])
        t0 = time.monotonic()
        rs = kernel_load_path(k, os.path.join(tree, rel), tree=tree)
        secs = time.monotonic() - t0
        out["modules"][rel] = [{
            "name": r.name, "ret": r.ret, "stopped": r.stopped, "instructions": r.instructions,
            "core": [r.core_base, len(r.core_bytes)], "init": [r.init_base, len(r.init_bytes)],
            "lines": [ln.split("] ", 1)[-1] for ln in r.console_lines if any(m in ln for m in MARKERS)],
            "oops": bool(r.oops_text)} for r in rs]
        seconds[rel] = round(secs, 1)
    return out, seconds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m armload.emu.booted.selftest", description=__doc__.split("\n")[0])
    ap.add_argument("vmlinuz")
    ap.add_argument("tree", help="the module tree (…/lib/modules/VERSION/kernel)")
    ap.add_argument("modules", nargs="*", default=DEFAULT)
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args(argv)
    for p in [a.vmlinuz, a.tree] + [os.path.join(a.tree, m) for m in a.modules]:
        if not os.path.exists(p):
            print(f"selftest: {p}: no such file", file=sys.stderr)
            return 1
    res, seconds = run(a.vmlinuz, a.tree, a.modules)
    for rel, rs in res["modules"].items():
        last = rs[-1]
        print(f"{rel}: ret={last['ret']} {last['instructions']:,} insns {seconds[rel]}s")
        for ln in last["lines"]:
            print("   ", ln)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1, sort_keys=True)
            f.write("\n")
    return 0 if all(rs[-1]["ret"] == 0 for rs in res["modules"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
