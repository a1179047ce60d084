"""The error-path sweep (`armload run M --fail-sweep`, emu/sanitize/faultsweep.py) on the sample
sanerr: its init's five allocations, failed one at a time in fresh kernels, give the verdict the
source says for each (sample_modules/src/sanerr/sanerr.c's comments): 1, 2 handled; 3 leaks a and b
(kmemleak's scan after the failed init); 4 a NULL dereference (the kernel's own oops); 5 init says
success. The failing hook is the devkit's fail_kmalloc (emu/booted/failslab.py)."""
import json
import os
import subprocess
import sys

from testinputs import BOOT_VMLINUZ, CACHE, ROOT, SAMPLES

FULL_SYMVERS = os.path.join(CACHE, "linux-headers-6.1.0-50-armmp", "usr", "src", "linux-headers-6.1.0-50-armmp",
                            "Module.symvers")
KO = os.path.join(SAMPLES, "sanitize", "sanerr-arm-debug.ko")
SRC = "sample_modules/src/sanerr/sanerr.c"


def line(marker: str) -> int:
    with open(os.path.join(ROOT, SRC)) as f:
        return next(i for i, ln in enumerate(f, 1) if marker in ln)


def _sweep(*extra):
    return subprocess.run([sys.executable, "-m", "armload", "run", KO, "--kernel", BOOT_VMLINUZ, "--kernel",
                           FULL_SYMVERS, "--fail-sweep", *extra], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


def test_each_allocation_failure_gets_its_verdict(booted_dir):
    p = _sweep("--json")
    assert p.returncode == 1, p.stdout + p.stderr
    d = json.loads(p.stdout)["fail_sweep"]
    assert d["allocations"] == 5 and d["clean"]["ret"] == 0 and d["clean"]["reports"] == []
    at = {a["nth"]: a for a in d["attempts"]}
    assert [at[n]["verdict"] for n in range(1, 6)] == ["handled", "handled", "report", "oops", "success"]
    # each site is the allocation's own line, found through the module's DWARF
    for n, marker in ((1, "st.a = kmalloc"), (2, "st.b = kmalloc"), (3, "st.c = kzalloc"), (4, "st.d = kmalloc"),
                      (5, "st.e = kmalloc")):
        assert at[n]["site"].startswith("sanerr_init+0x") and at[n]["site"].endswith(f"({SRC}:{line(marker)})")
    assert at[1]["ret"] == at[2]["ret"] == -12
    leaks = at[3]["reports"]
    assert [(r["kind"], r["line"]) for r in leaks] == [("leak", f"{SRC}:{line('st.a = kmalloc')}"),
                                                       ("leak", f"{SRC}:{line('st.b = kmalloc')}")]
    assert at[4]["status"] == "oops" and "NULL pointer dereference" in at[4]["why"]
    assert f"sanerr.c:{line('4: not checked')}" in at[4]["why"]
    assert at[5]["ret"] == 0 and at[5]["reports"] == []
    assert [a["nth"] for a in d["bad"]] == [3, 4, 5]


def test_the_text_and_the_refusals(booted_dir):
    p = _sweep()
    assert p.returncode == 1
    assert "fault sweep: 3 of 5 allocation failure(s) mishandled: oops 1, report 1, success 1" in p.stdout
    assert f"    3  report   sanerr_init+" in p.stdout and "unreferenced object 0x" in p.stdout
    p = _sweep("--exit")
    assert p.returncode != 0 and "--fail-sweep runs init only: --exit cannot be combined with it" in p.stderr
    assert "Traceback" not in p.stderr


def test_a_module_whose_error_paths_are_right_passes(booted_dir):
    """kalloc's init: one kmalloc, its failure returned as -ENOMEM (sample_modules/src/kalloc)."""
    p = subprocess.run([sys.executable, "-m", "armload", "run", os.path.join(SAMPLES, "kalloc-arm.ko"), "--kernel",
                        BOOT_VMLINUZ, "--kernel", FULL_SYMVERS, "--fail-sweep", "--json"], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    d = json.loads(p.stdout)
    sw = d["fail_sweep"]
    assert sw["allocations"] >= 1 and sw["bad"] == [] and p.returncode == 0 and d["ok"]
