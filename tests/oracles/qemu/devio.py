"""The QEMU oracle for device I/O: one module's file operations in the Debian kernel booted in QEMU.

    python3 tests/oracles/qemu/devio.py --kernel VMLINUZ --busybox BUSYBOX --modh MODH --devh DEVH \
        --module M.ko --plan devio_plan.txt --out devio_results.json [--work DIR]

Like run.py, independent of armload (stdlib only). The initramfs holds busybox, modh, devh, the
module and the plan; /init (devio.sh) mounts devtmpfs, proc, sysfs and debugfs, inserts the module
with finit_module, and runs the plan: devh makes the system calls (open/read/write/lseek/ioctl/poll/
mmap/close, and cat/echo as cat and a shell make them) and prints each raw result; each cat and
echo outside an open file also runs in busybox. The results file records, per plan line, the
result (-errno on failure) and the bytes, and busybox's exit status, bytes and error message.
"""
from __future__ import annotations

import argparse
import errno as errno_mod
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import CMDLINE, QEMU, RELEASE, Boot, newc  # noqa: E402  (the insmod oracle's cpio and console reader)

TIMEOUT = 600.0                  # seconds from spawn to @@END


def initramfs(path: str, busybox: str, modh: str, devh: str, module: str, plan: str, init_sh: str) -> None:
    rd = lambda p: open(p, "rb").read()
    ko = rd(module)
    at = ko.find(b"\0name=") + 6                 # .modinfo's name= (what delete_module takes)
    name = ko[at:ko.index(b"\0", at)].decode()
    ents = [(d, 0o40755, b"", 0, 0) for d in ("bin", "sbin", "dev", "proc", "sys", "tmp")]
    ents += [("dev/console", 0o20600, b"", 5, 1), ("init", 0o100755, rd(init_sh), 0, 0),
             ("bin/busybox", 0o100755, rd(busybox), 0, 0), ("bin/modh", 0o100755, rd(modh), 0, 0),
             ("bin/devh", 0o100755, rd(devh), 0, 0), ("module.ko", 0o100644, rd(module), 0, 0),
             ("plan", 0o100644, rd(plan), 0, 0), ("modname", 0o100644, name.encode(), 0, 0)]
    with open(path, "wb") as f:
        f.write(newc(ents))


def strerror_errno(msg: str) -> int | None:
    """The errno whose strerror text ends busybox's message ("sh: can't create X: Permission denied")."""
    for n in sorted(errno_mod.errorcode):
        if msg.rstrip().endswith(os.strerror(n)):
            return n
    return None


def parse(lines: list[str]) -> dict:
    ops, bb, kernel, ins = {}, {}, [], None
    for ln in lines:
        if ln.startswith("@@OP "):
            parts = ln.split()
            i, op = int(parts[1]), parts[2]
            if parts[3] in ("skip", "unknown"):
                ops[i] = {"op": op, "result": None, "note": parts[3]}
            else:
                ops[i] = {"op": op, "result": int(parts[3]), "hex": "" if parts[4] == "-" else parts[4]}
        elif ln.startswith("@@BB "):
            parts = ln.split(" ", 5)
            i, op, rc, data = int(parts[1]), parts[2], int(parts[3]), parts[4] if len(parts) > 4 else ""
            msg = parts[5].strip() if len(parts) > 5 else ""
            bb[i] = {"op": op, "status": rc, "hex": "" if data == "-" else data, "message": msg,
                     "errno": strerror_errno(msg) if rc else None}
        elif ln.startswith("@@K "):
            kernel.append(ln[4:])
        elif ln.startswith("@@INS "):
            ins = [int(x) for x in ln.split()[1:3]]
    return {"ops": ops, "busybox": bb, "kernel": kernel, "insmod": ins}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for a in ("--kernel", "--busybox", "--modh", "--devh", "--module", "--plan", "--out"):
        ap.add_argument(a, required=True)
    ap.add_argument("--work", default="build/qemu-devio")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    here = os.path.dirname(os.path.abspath(__file__))
    cpio = os.path.join(args.work, "initramfs.cpio")
    initramfs(cpio, args.busybox, args.modh, args.devh, args.module, args.plan, os.path.join(here, "devio.sh"))
    argv = QEMU + ["-kernel", args.kernel, "-initrd", cpio, "-append", CMDLINE]
    boot = Boot(argv, os.path.join(args.work, "console.log"))
    t0 = time.monotonic()
    lines, done, release = [], False, None
    try:
        for ln in boot.lines(lambda: t0 + TIMEOUT):
            if ln is None:
                break
            lines.append(ln)
            if ln.startswith("@@READY"):
                release = ln.split()[1]
            if ln.startswith("@@END"):
                done = True
                break
    finally:
        boot.kill()
    if not done:
        print(f"qemu-devio: no @@END within {TIMEOUT:.0f} s (see {args.work}/console.log)", file=sys.stderr)
        return 1
    res = parse(lines)
    plan = [ln.strip() for ln in open(args.plan) if ln.strip()]
    missing = [i for i in range(len(plan)) if i not in res["ops"]]
    if missing:
        print(f"qemu-devio: no result for plan lines {missing}", file=sys.stderr)
        return 1
    out = {"oracle": "qemu-system-arm -M virt -cpu cortex-a15 (TCG), busybox, devh", "release": release,
           "expected_release": RELEASE, "module": os.path.basename(args.module),
           "module_sha256": subprocess.run(["sha256sum", args.module], capture_output=True,
                                           text=True).stdout.split()[0],
           "insmod": res["insmod"], "plan": plan,
           "ops": [dict(res["ops"][i], line=plan[i]) for i in range(len(plan))],
           "busybox": {str(i): v for i, v in sorted(res["busybox"].items())},
           "kernel": res["kernel"], "seconds": round(time.monotonic() - t0, 1)}
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"qemu-devio: {len(plan)} operations, {len(res['busybox'])} busybox checks -> {args.out} "
          f"({out['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
