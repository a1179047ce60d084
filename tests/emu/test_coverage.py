"""run --coverage's CLI summary inside the booted kernel (the block counter against a
per-instruction hook, the lcov records and lcov --summary: tests/emu/test_observe_booted.py)."""
import os
import subprocess
import sys

from testinputs import ROOT, sample
from armload.kernel import debian

VMLINUZ = debian.VMLINUZ


def test_cli_summary_and_stripped_module(tmp_path):
    out = tmp_path / "c.info"
    p = subprocess.run([sys.executable, "-m", "armload", "run", "--kernel", VMLINUZ, sample("devkit-arm-debug.ko"),
                        sample("nullderef-arm.ko"), "--coverage", str(out)], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 1, p.stdout + p.stderr                      # nullderef oopses
    assert "coverage: devkit: " in p.stdout and "3/11 functions" in p.stdout
    assert "coverage: nullderef: " in p.stdout and "no DWARF" in p.stdout
    assert out.read_text().startswith("TN:")
