"""`armload run --gdb PORT` inside the booted kernel (udbserver on the booted machine) is not wired yet:
until it is, run refuses it with a clear message and no model runtime stands in for it."""
import subprocess
import sys

from conftest import BOOT_VMLINUZ, ROOT, sample


def test_gdb_is_refused_until_it_serves_the_booted_kernel(booted_dir):
    p = subprocess.run([sys.executable, "-m", "armload", "run", "--kernel", BOOT_VMLINUZ, sample("devkit-arm-debug.ko"),
                        "--gdb", "1234"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "--gdb: the gdb server inside the booted kernel is not wired into run yet" in p.stderr
    assert "init returned" not in p.stdout
