"""`armload bench devio`: what a real system call from pid 1's user mode costs inside the booted
kernel (armload/emu/booted/user.py), and what device I/O adds to a `run`.

Round trip: everything the CPU executes from entering user mode at the stub (ret_to_user's
restore, `svc #0`, vector_swi, the sys_* function, ret_fast_syscall and its work, back to the
stub's `b .`), in instructions (deterministic; the median of REPEAT calls, an interrupt falling
inside one of them aside) and host microseconds (beside only). The run ratio: the instructions
and host time of `run vfsdev` (restore, load_module and init, settling) with and without the
QEMU oracle's device-I/O plan (tests/oracles/qemu/devio_plan.txt) after the init.
"""
from __future__ import annotations

import os
import statistics
import struct
import time

from ..errors import EmulationError
from .inputs import ROOT, VMLINUZ

REPEAT = 21
MODULE = os.path.join(ROOT, "sample_modules", "devio", "vfsdev-arm-debug.ko")
PLAN = os.path.join(ROOT, "tests", "oracles", "qemu", "devio_plan.txt")
SYMVERS = os.path.join(ROOT, "sample_modules", "Module.symvers")
IOC_LEN = 0x80047601


def _booted_run(vmlinuz: str, load: bool = True):
    from ..emu.booted.modrun import BootedRun
    from ..kernel.config import DEBIAN_ARMMP
    from ..kernel.provider import Kernel
    run = BootedRun(vmlinuz, Kernel.from_files([SYMVERS, vmlinuz], DEBIAN_ARMMP), DEBIAN_ARMMP)
    return _load(run) if load else run


def _load(run):
    r = run.load(MODULE)
    if not r.ok:
        raise EmulationError(f"bench devio: {r.name} did not load: {r.status} {r.ret}")
    return run


def _calls(fs, f) -> dict:
    mem = fs.sys.mem
    buf, pfd = mem.buffer(64), mem.put(struct.pack("<ihh", f.fd, 5, 0))
    return {"getpid": ("getpid",), "read(1) /dev/vfsdev": ("read", f.fd, buf, 1),
            "write(1) /dev/vfsdev": ("write", f.fd, buf, 1), "lseek(0)": ("lseek", f.fd, 0, 0),
            "ioctl(VFSDEV_IOC_LEN)": ("ioctl", f.fd, IOC_LEN, buf), "poll(timeout 0)": ("poll", pfd, 1, 0)}


def round_trips(vmlinuz: str = VMLINUZ) -> list[dict]:
    from ..emu.booted.user import Filesystem
    run = _booted_run(vmlinuz)
    fs = Filesystem(run.bk)
    f = fs.open("/dev/vfsdev")
    f.write(b"x")
    rows = []
    for name, call in _calls(fs, f).items():
        insns, host = [], []
        for _ in range(REPEAT):
            t0 = time.perf_counter()
            r = fs.sys.call(*call)
            host.append(time.perf_counter() - t0)
            if r < 0:
                raise EmulationError(f"bench devio: {name} returned {r}")
            insns.append(fs.sys.last_insns)
        rows.append({"call": name, "insns_median": statistics.median(insns), "insns_min": min(insns),
                     "host_us_median": statistics.median(host) * 1e6})
    f.close()
    return rows


def run_ratio(vmlinuz: str = VMLINUZ) -> dict:
    """A plain run of vfsdev against the same run with the device-I/O plan after init."""
    from ..emu.booted.fileops import DevioRun
    plan = [ln.split() for ln in open(PLAN) if ln.strip()]
    ops = [(p[0], p[1:]) for p in plan]
    out = {}
    for label, with_io in (("plain", False), ("devio", True)):
        t0 = time.perf_counter()
        run = _booted_run(vmlinuz, load=False)
        i0 = run.bk.insns
        _load(run)
        run.settle(1_000_000_000)
        calls = 0
        if with_io:
            dv = DevioRun(run.bk, lambda *_: None)
            if not dv.run(ops):
                raise EmulationError("bench devio: the plan did not complete")
            calls = dv.fs.sys.count
        out[label] = {"insns": run.bk.insns - i0, "host_s": time.perf_counter() - t0,
                      "syscalls": calls}
    out["insns_ratio"] = out["devio"]["insns"] / out["plain"]["insns"]
    out["host_ratio"] = out["devio"]["host_s"] / out["plain"]["host_s"]
    out["operations"] = len(ops)
    return out


def run_benchmark(vmlinuz: str = VMLINUZ) -> dict:
    return {"round_trips": round_trips(vmlinuz), "run": run_ratio(vmlinuz), "repeat": REPEAT}


def format_benchmark(res: dict) -> str:
    lines = ["system calls from pid 1's user mode in the booted kernel (svc, vector_swi, sys_*, ret_fast_syscall; "
             f"median of {res['repeat']}):",
             f"  {'call':<24}{'instructions':>13}{'min':>8}{'host us':>10}"]
    for r in res["round_trips"]:
        lines.append(f"  {r['call']:<24}{r['insns_median']:>13,.0f}{r['insns_min']:>8,}{r['host_us_median']:>10.1f}")
    x = res["run"]
    lines.append(f"run vfsdev: plain {x['plain']['insns']:,} instructions, {x['plain']['host_s']:.2f} s; with the "
                 f"{x['operations']} device-I/O operations ({x['devio']['syscalls']} system calls) "
                 f"{x['devio']['insns']:,} instructions, {x['devio']['host_s']:.2f} s")
    lines.append(f"  ratio: {x['insns_ratio']:.3f} in instructions, {x['host_ratio']:.2f} in host time (this host, beside)")
    return "\n".join(lines)
