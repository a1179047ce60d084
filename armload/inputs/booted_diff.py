"""A fuzz input through the booted kernel's own load_module next to armload's loader (issue 33):
the coverage-guided fuzzer (atheris_fuzz.py, control bit 1) and the replay call `check`.

Each input runs in an os.fork() child of one restored kernel (emu/booted/forkserver.py: ~10 ms
a case instead of a restore), where modrun.BootedRun loads it with the kernel's load_module
(init included, RUN_BUDGET instructions, hostile.py's ends) and armload's loader at the kernel's
addresses; classify gives the row, here and in the campaign of `armload agree loader`
(armload/agree/loader.py). A row in FINDINGS is a finding: armload decided otherwise than
the kernel (accepted what it refuses or crashes on, refused what it loads without overreading),
or the harness failed. Thumb-2 inputs are not run (the Debian kernel is ARM)."""
from __future__ import annotations

import os
import tempfile

from ..kernel.config import DEBIAN_ARMMP
from .fuzz import RUN_BUDGET, VMLINUZ

FINDINGS = ("armload-only", "kernel-only", "kernel-crashed/armload-accepted", "harness-error")
SYMVERS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                       "sample_modules", "Module.symvers")
_HANDLE: dict = {}
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


class Disagreement(AssertionError):
    """armload and the kernel's load_module decided a module differently (a finding)."""


def _handle():
    if os.getpid() not in _HANDLE:
        from ..emu.booted import forkserver
        from ..kernel.provider import Kernel
        config = config_of(VMLINUZ)
        kernel = Kernel.from_files(symvers_of(SYMVERS, VMLINUZ) + [VMLINUZ], config)
        _HANDLE[os.getpid()] = forkserver.prepare([], vmlinuz=VMLINUZ, kernel=kernel, config=config)
    return _HANDLE[os.getpid()]


def _one(data: bytes, run) -> tuple[str, str]:
    with tempfile.TemporaryDirectory() as t:
        p = os.path.join(t, "fuzz.ko")
        with open(p, "wb") as f:
            f.write(data)
        return classify(run.load(p, budget=RUN_BUDGET))


def differential(data: bytes) -> tuple[str, str]:
    """(row, detail) of classify for `data`, or ("not-run", why)."""
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
