"""`armload run ... --open/--read/--write/--lseek/--ioctl/--poll/--mmap/--close/--cat/--echo`: file
operations inside the booted kernel, after the inits, in command-line order.

Each is a real system call made by pid 1's user mode (armload/emu/booted/user.py): openat(2) on the
node devtmpfs made (or a /sys, /proc, /sys/kernel/debug file), then read(2), write(2), lseek(2),
ioctl(2), poll(2) with timeout 0, mmap2(2) (the mapping read back by user-mode loads), close(2)
(its last fput runs __fput, the driver's release, as the return to user mode runs the task work).
The filesystems are mounted first with mount(2). Results and errnos are the kernel's; an errno
is a result, not a failure (the run fails on an oops, a signal or the budget). The checking and
the running are armload/emu/booted/fileops.py; this is the argparse side.
"""
from __future__ import annotations

import argparse


class DevOp(argparse.Action):
    """--open/--write/--read/--lseek/--ioctl/--poll/--mmap/--close/--cat/--echo, kept in
    command-line order in one list."""

    def __call__(self, parser, namespace, values, option_string=None):
        ops = list(getattr(namespace, self.dest, None) or [])
        ops.append((option_string.lstrip("-"), list(values)))
        setattr(namespace, self.dest, ops)


def add_devio_args(p: argparse.ArgumentParser) -> None:
    dev = p.add_argument_group(
        "file operations (inside the booted kernel, after the inits, in command-line order)",
        "real system calls made by pid 1's user mode, through the kernel's VFS into the module's "
        "file_operations (devtmpfs on /dev, proc, sysfs and debugfs mounted with mount(2)); each "
        "prints its result or the kernel's errno")
    add = lambda *a, **kw: dev.add_argument(*a, dest="devio", action=DevOp, **kw)
    add("--open", nargs=1, metavar="PATH", help="openat(PATH, O_RDWR): a device node (/dev/NAME) or any file")
    add("--write", nargs=1, metavar="s:TEXT|b:HEX", help="write(2) these bytes to the open file")
    add("--read", nargs=1, metavar="N", help="read(2) up to N bytes")
    add("--lseek", nargs=1, metavar="OFF[:set|cur|end]", help="lseek(2) (SEEK_SET unless :cur or :end)")
    add("--ioctl", nargs=2, metavar=("CMD", "ARG"),
        help="ioctl(2): ARG an integer, or s:TEXT / b:HEX / buf:N for a user buffer (printed after the call)")
    add("--poll", nargs=0, help="poll(2) with timeout 0: the revents")
    add("--mmap", nargs=1, metavar="N", help="mmap2(2) N bytes (PROT_READ|PROT_WRITE, MAP_SHARED), read back")
    add("--close", nargs=0, help="close(2) the open file")
    add("--cat", nargs=1, metavar="PATH", help="what `cat PATH` reads (open, read to the end, close)")
    add("--echo", nargs=2, metavar=("VALUE", "PATH"), help="what `echo VALUE > PATH` writes (VALUE and a newline)")


def check_devio(ops) -> None:
    from ..emu.booted.fileops import parse_ops
    parse_ops(ops)


def run_devio(run, ops, say, vmlinux: str | None = None) -> tuple[bool, list[dict]]:
    """The operations on a BootedRun's kernel: (all came back, one record each). An oops in a
    system call is decoded as decode_stacktrace.sh decodes it, and pid 1 is dead for the run."""
    from ..emu.booted.fileops import DevioRun

    def oopsed(fault):
        from ..emu.booted.decode import decode
        from .observe_booted import say_decoded
        run.dead = str(fault).split(":")[0]
        say_decoded(say, decode(fault.oops, run.session.modules, vmlinux), vmlinux)

    dv = DevioRun(run.bk, say, on_oops=oopsed)
    ok = dv.run(ops)
    return ok, dv.records
