"""`armload run --gdb PORT` inside the booted kernel: gdb-multiarch drives the machine's CPU
through udbserver (armload/emu/booted/gdb.py).

Break in kernel code and at a module function, continue, read a global and an argument,
backtrace, detach: the run then finishes as without gdb. The add-symbol-file line names the
kernel's addresses. Needs gdb-multiarch (`make devtools`) and udbserver (the test extra).
"""
import os
import select
import shutil
import socket
import subprocess
import sys
import time

import pytest

from testinputs import ROOT, devkit_line, sample
from armload.kernel import debian

VMLINUZ = debian.VMLINUZ


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _wait_for(proc, text, timeout=60.0) -> str:
    seen = ""
    end = time.monotonic() + timeout
    while text not in seen:
        left = end - time.monotonic()
        assert left > 0 and proc.poll() is None, f"armload never said {text!r}:\n{seen}"
        r, _, _ = select.select([proc.stdout], [], [], left)
        if r:
            seen += os.read(proc.stdout.fileno(), 4096).decode()
    return seen


def test_gdb_break_continue_read(tmp_path):
    gdb = shutil.which("gdb-multiarch")
    assert gdb, "gdb-multiarch not installed: run `make devtools`"
    import udbserver  # noqa: F401  (the test extra installs it)
    assert os.path.exists(VMLINUZ), f"missing {VMLINUZ} (make test-inputs)"
    image, port = str(tmp_path / "devkit.elf"), _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "armload", "run", "--kernel", VMLINUZ,
                             sample("devkit-arm-debug.ko"), "count=4", "--image", image, "--gdb", str(port)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        before = _wait_for(proc, "Waiting for a GDB connection")
        from armload.kernel.image import load_image
        km = load_image(VMLINUZ).symbols["kmalloc_trace"]          # kernel code, translated long before
        g = subprocess.run([gdb, "-batch", "-nx", "-ex", "set architecture arm", "-ex", f"file {image}",
                            "-ex", f"target remote 127.0.0.1:{port}", "-ex", f"break *{km:#x}",
                            "-ex", "break devkit_sum", "-ex", "continue", "-ex", "bt 3", "-ex", "delete 1",
                            "-ex", "continue", "-ex", "bt", "-ex", "print count", "-ex", "print scale",
                            "-ex", "print/x $pc", "-ex", "detach"],
                           capture_output=True, text=True, timeout=120)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = g.stdout
    print(before + rest.decode(), out, g.stderr, sep="\n")   # the transcript, shown with -s
    assert "inside the booted kernel" in before
    assert "devkit_init () at" in out                                    # stopped before init ran
    assert f"Breakpoint 1, {km:#010x} in ?? ()" in out                   # a kernel breakpoint, hit from
    assert "#2  devkit_add (value=0) at" in out                          # the module's first kmalloc
    from armload.emu.booted.modrun import BootedRun
    from armload.kernel.config import DEBIAN_ARMMP
    from armload.kernel.provider import Kernel
    r = BootedRun(VMLINUZ, Kernel.from_files([VMLINUZ], DEBIAN_ARMMP), DEBIAN_ARMMP).load(sample("devkit-arm-debug.ko"))
    line = next(ln for ln in before.splitlines() if ln.startswith("add-symbol-file "))
    assert line.startswith(f"add-symbol-file {sample('devkit-arm-debug.ko')} {r.core_base:#x} -s ")
    assert f" -s .init.text {r.init_base:#x}" in line and " -s .data 0x" in line and " -s .bss 0x" in line
    assert "Breakpoint 2, devkit_sum (scale=scale@entry=1) at" in out
    assert f"devkit.c:{devkit_line('int devkit_sum(int scale)', 1)}" in out
    assert "#1  " in out and "in devkit_init () at" in out and f"devkit.c:{devkit_line('loaded (sum %d)')}" in out
    assert "$1 = 4" in out and "$2 = 1" in out                           # count=4 was applied; scale
    sym = subprocess.run(["arm-linux-gnueabihf-nm", image], capture_output=True, text=True).stdout
    addr = next(int(l.split()[0], 16) for l in sym.splitlines() if l.endswith(" devkit_sum"))
    assert f"$3 = {addr:#x}" in out
    assert proc.returncode == 0 and "devkit: loaded (sum 6)" in rest.decode()   # 0+1+2+3 after detach


VMLINUX_DBG = debian.VMLINUX_DBG


@pytest.mark.skipif(not os.path.exists(VMLINUX_DBG), reason=f"no {VMLINUX_DBG}: `make vmlinux-dbg` fetches it "
                    "(620 MB, on request only)")
def test_gdb_with_the_dbg_vmlinux_breaks_in_kernel_code_by_name(tmp_path):
    gdb = shutil.which("gdb-multiarch")
    assert gdb, "gdb-multiarch not installed: run `make devtools`"
    image, port = str(tmp_path / "devkit.elf"), _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "armload", "run", "--kernel", VMLINUZ, "--kernel", VMLINUX_DBG,
                             sample("devkit-arm-debug.ko"), "count=4", "--image", image, "--gdb", str(port)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        before = _wait_for(proc, "Waiting for a GDB connection")
        g = subprocess.run([gdb, "-batch", "-nx", VMLINUX_DBG, "-ex", f"target remote 127.0.0.1:{port}",
                            "-ex", f"add-symbol-file {image}", "-ex", "break kmalloc_trace", "-ex", "continue",
                            "-ex", "bt 4", "-ex", "delete", "-ex", "detach"], capture_output=True, text=True, timeout=300)
        rest, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = g.stdout
    print(before + rest.decode(), out, g.stderr, sep="\n")
    assert f"connect with gdb-multiarch {VMLINUX_DBG}" in before
    assert "Breakpoint 1, kmalloc_trace (s=" in out and "at mm/slab_common.c:" in out
    assert "#2  devkit_add (value=0) at sample_modules/src/devkit/devkit.c:" in out
    assert "in devkit_init () at sample_modules/src/devkit/devkit.c:" in out
    assert proc.returncode == 0 and "devkit: loaded (sum 6)" in rest.decode()
