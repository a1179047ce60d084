"""A fuzz input through the booted kernel's own load_module next to armload's loader (issue 33):
the coverage-guided fuzzer (atheris_fuzz.py, control bit 1) and the replay call `check`.

Each input runs in an os.fork() child of one restored kernel (emu/booted/forkserver.py: ~10 ms
a case instead of a restore), where modrun.BootedRun loads it with the kernel's load_module
(init included, RUN_BUDGET instructions, hostile.py's ends) and armload's loader at the kernel's
addresses; kernel_diff.classify gives the row. A row in FINDINGS is a finding: armload decided
otherwise than the kernel (accepted what it refuses or crashes on, refused what it loads without
overreading), or the harness failed. Thumb-2 inputs are not run (the Debian kernel is ARM)."""
from __future__ import annotations

import os
import tempfile

from .fuzz import RUN_BUDGET, VMLINUZ

FINDINGS = ("armload-only", "kernel-only", "kernel-crashed/armload-accepted", "harness-error")
SYMVERS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                       "sample_modules", "Module.symvers")
_HANDLE: dict = {}


class Disagreement(AssertionError):
    """armload and the kernel's load_module decided a module differently (a finding)."""


def _handle():
    if os.getpid() not in _HANDLE:
        from ..emu.booted import forkserver
        from .kernel_diff import config_of, symvers_of
        from ..kernel.provider import Kernel
        config = config_of(VMLINUZ)
        kernel = Kernel.from_files(symvers_of(SYMVERS, VMLINUZ) + [VMLINUZ], config)
        _HANDLE[os.getpid()] = forkserver.prepare([], vmlinuz=VMLINUZ, kernel=kernel, config=config)
    return _HANDLE[os.getpid()]


def _one(data: bytes, run) -> tuple[str, str]:
    from .kernel_diff import classify
    with tempfile.TemporaryDirectory() as t:
        p = os.path.join(t, "fuzz.ko")
        with open(p, "wb") as f:
            f.write(data)
        return classify(run.load(p, budget=RUN_BUDGET))


def differential(data: bytes) -> tuple[str, str]:
    """(row, detail) of kernel_diff.classify for `data`, or ("not-run", why)."""
    if not os.path.exists(VMLINUZ):
        return "not-run", "no kernel image (make test-inputs)"
    from ..emu.booted import forkserver
    try:
        return forkserver.fork_run(_handle(), lambda run: _one(data, run))
    except forkserver.ForkError as e:
        return "harness-error", str(e).strip().splitlines()[-1][:300]


def check(data: bytes) -> tuple[str, str]:
    row, detail = differential(data)
    if row in FINDINGS:
        raise Disagreement(f"{row}: {detail}")
    return row, detail
