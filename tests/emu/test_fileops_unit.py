"""DevioRun (armload/emu/booted/fileops.py) on a stand-in pid 1: one record and one line per
operation in the order given, an errno as a result, an operation after a failed open not run,
a fault that ends the run, and the process exit's munmap/close at the end. (The same plans on the
booted kernel and under QEMU: tests/emu/test_devio_booted.py and test_devio_qemu.py.)"""
import re

import pytest

from armload.emu.booted import fileops as F
from armload.emu.booted import user as U
from armload.errors import EmulationError
from test_user_unit import FakeSys

REAL_FS = U.Filesystem


class CountingSys(FakeSys):
    """FakeSys that counts its calls and their instructions as Syscalls does (10 per call)."""

    def __init__(self, **answers):
        super().__init__(**answers)
        self.count = self.insns = 0

    def _answer(self, name, *args):
        self.count += 1
        self.insns += 10
        return super()._answer(name, *args)


def _devio(monkeypatch, **answers):
    s = CountingSys(**answers)
    monkeypatch.setattr(U, "Filesystem", lambda bk: REAL_FS(bk, s))
    said = []
    return F.DevioRun(None, said.append), said, s


def _peek(run, data):
    run.fs.sys.peek = lambda addr, n: data[:n]


def test_each_operation_is_one_record_and_one_line_in_order(monkeypatch):
    run, said, s = _devio(monkeypatch, openat=3, write=lambda fd, d: len(d), read=5, lseek=lambda fd, o, w: o,
                          ioctl=0, poll=0, mmap2=0x40000000, close=0, munmap=0)
    _peek(run, b"m" * 100)
    ops = [("open", ["/dev/x"]), ("write", ["s:hi"]), ("lseek", ["0:set"]), ("read", ["8"]),
           ("ioctl", ["0x10", "buf:4"]), ("ioctl", ["0x11", "7"]), ("poll", []), ("mmap", ["100"]),
           ("close", []), ("cat", ["/proc/p"]), ("echo", ["1", "/sys/p"])]
    s.answers["read"] = lambda *a, it=iter([5, 2, 0]): next(it)          # read(8), then cat's two reads
    assert run.run(ops) is True
    assert said[0] == ("armload: file operations are real system calls from pid 1's user mode through the "
                       "kernel's VFS; mounted /dev, /proc, /sys, /sys/kernel/debug (mount(2): devtmpfs, proc, sysfs, "
                       "debugfs)")
    assert said[1:12] == [
        "/dev/x: open = 3", "/dev/x: write(s:hi) = 2", "/dev/x: lseek(0, SEEK_SET) = 0",
        "/dev/x: read(8) = 5  7272727272  'rrrrr'", "/dev/x: ioctl(0x10, buf:4) = 0  buffer 00000000",
        "/dev/x: ioctl(0x11, 7) = 0", "/dev/x: poll(POLLIN|POLLPRI|POLLOUT, timeout 0): revents 0x0 (0)",
        "/dev/x: mmap(100, PROT_READ|PROT_WRITE, MAP_SHARED) = 0x40000000; user mode reads "
        + "6d" * 64 + "...  '" + "m" * 64 + "'",
        "/dev/x: close = 0", "cat /proc/p = 2  'rr'", "echo 1 > /sys/p = 2"]
    assert said[12] == "armload: at the end, as the process's exit would: munmap(0x40000000, 100)"
    assert said[13] == f"armload: {s.count} system calls, {s.insns:,} instructions (10 per call, entry, kernel " \
                       "and the return to user mode)"
    recs = run.records
    assert [r["op"] for r in recs] == [o for o, _ in ops] and [r["args"] for r in recs] == [v for _, v in ops]
    assert [r["result"] for r in recs] == [3, 2, 0, 5, 0, 0, 0, 0, 0, 2, 2]
    assert recs[3]["hex"] == "7272727272" and recs[4]["hex"] == "00000000" and "hex" not in recs[5]
    assert recs[6]["revents"] == "0" and recs[7]["addr"] == 0x40000000 and recs[7]["hex"] == "6d" * 100
    assert recs[9]["text"] == "rr" and "truncated" not in recs[9]
    assert recs[0]["syscalls"] == 1 and recs[1] == {"op": "write", "args": ["s:hi"], "result": 2, "syscalls": 1,
                                                     "instructions": 10}
    assert recs[9]["syscalls"] == 4                                     # open, read until 0, close


def test_an_errno_is_a_result_and_a_failed_open_skips_the_file_operations(monkeypatch):
    run, said, s = _devio(monkeypatch, openat=-2, mount=0)
    assert run.run([("open", ["/dev/none"]), ("read", ["4"]), ("close", []), ("echo", ["1", "/sys/q"])]) is True
    assert said[1:5] == ["/dev/none: open = -2 (-ENOENT)", "--read: not run (no open file: its open failed)",
                         "--close: not run (no open file: its open failed)", "echo 1 > /sys/q = -2 (-ENOENT)"]
    assert run.records[0]["result"] == -2 and run.records[0]["errno"] == "ENOENT"
    assert run.records[1] == {"op": "read", "args": ["4"], "result": None, "syscalls": 0, "instructions": 0,
                              "note": "not run: no open file (its open failed)"}
    assert run.records[3]["errno"] == "ENOENT"
    run2, said2, s2 = _devio(monkeypatch, openat=4, close=0, ioctl=-25)
    with pytest.raises(EmulationError, match="--ioctl needs an --open PATH before it"):
        run2.run([("open", ["/dev/x"]), ("close", []), ("ioctl", ["1", "0"])])
    assert s2.calls == [] and said2 == [] and run2.records == []            # refused before anything ran


def test_a_fault_ends_the_run_with_the_kernels_lines_and_the_oops_handed_on(monkeypatch):
    fault = U.UserFault("read(2): an oops killed pid 1 (the kernel's own report is above)",
                        ["Unable to handle kernel NULL pointer dereference at virtual address 00000000",
                         "Internal error: Oops: 5 [#1] SMP ARM"])

    def boom(fd, n):
        raise fault
    run, said, s = _devio(monkeypatch, openat=3, read=boom)
    seen = []
    run.on_oops = seen.append
    assert run.run([("open", ["/dev/x"]), ("read", ["1"]), ("close", [])]) is False
    assert said[-3:] == fault.console + [f"armload: {fault}"]
    assert run.fault is fault and seen == [fault] and run.records[-1]["error"] == str(fault)
    assert len(run.records) == 2 and ("close", 3) not in s.calls              # nothing after the fault
    plain = U.UserFault("read(2): the user access faulted")
    run, said, s = _devio(monkeypatch, openat=3, read=lambda fd, n: (_ for _ in ()).throw(plain))
    seen = []
    run.on_oops = seen.append
    assert run.run([("open", ["/dev/x"]), ("read", ["1"])]) is False and seen == [] and plain.oops == ""


def test_cat_at_its_limit_says_so_and_exit_closes_what_is_open(monkeypatch):
    run, said, s = _devio(monkeypatch, openat=3, read=lambda fd, n: n, close=0, mmap2=0x40000000, munmap=0)
    _peek(run, b"\0" * 64)
    assert run.run([("cat", ["/proc/kallsyms"]), ("open", ["/dev/x"]), ("mmap", ["64"])]) is True
    assert run.records[0]["truncated"] is True and run.records[0]["result"] == U.CAT_LIMIT
    assert said[1].endswith(f"  (the first {U.CAT_LIMIT:,} bytes: armload's cat stops there)")
    assert not said[3].endswith("...  '" + "." * 64 + "'") and said[3].endswith("'" + "." * 64 + "'")
    assert said[4] == "armload: at the end, as the process's exit would: munmap(0x40000000, 64), close(3)"
    assert run.finish() == []                                                 # nothing left the second time


def test_no_system_call_no_count_line(monkeypatch):
    run, said, s = _devio(monkeypatch)
    s.count = 0
    run.fs.mounted = {"/dev": 0}
    assert run.run([]) is True and len(said) == 1 and run.records == []


def test_operations_are_checked_and_parsed_once_before_anything_runs():
    from armload.emu.booted.fileops import _describe, _ret, _seek, _text, dev_bytes, parse_ops
    from armload.errors import EmulationError
    assert dev_bytes("s:ab", "w") == b"ab" and dev_bytes("s:", "w") == b""
    assert dev_bytes("b:00ff", "w") == b"\0\xff" and dev_bytes("buf:3", "w") == bytes(3)
    for bad in ("b:0", "b:zz", "buf:x", "buf:", "ab", "S:ab"):
        with pytest.raises(EmulationError, match=rf"--w '{re.escape(bad)}': s:TEXT, b:HEX or buf:N"):
            dev_bytes(bad, "--w")
    assert _seek("5") == (5, "set") and _seek("-3:cur") == (-3, "cur") and _seek("0x10:end") == (16, "end")
    with pytest.raises(EmulationError, match="OFF, OFF:cur or OFF:end"):
        _seek("1:top")
    with pytest.raises(EmulationError, match="--lseek 'x': not an integer"):
        _seek("x")
    good = [("cat", ["/p"]), ("echo", ["1", "/p"]), ("open", ["/dev/x"]), ("write", ["b:01"]), ("read", ["1"]),
            ("lseek", ["0:cur"]), ("ioctl", ["0x10", "buf:4"]), ("ioctl", ["1", "-1"]), ("poll", []),
            ("mmap", ["0x1000"]), ("close", []), ("open", ["/dev/y"]), ("read", ["2"])]
    assert [a for _, _, a in parse_ops(good)] == [
        ("/p",), ("1", "/p"), ("/dev/x",), (b"\x01",), (1,), (0, "cur"), (16, bytes(4)), (1, -1), (), (4096,), (),
        ("/dev/y",), (2,)]
    assert [(o, v) for o, v, _ in parse_ops(good)] == good
    assert parse_ops([("open", ["/x"]), ("lseek", ["7"]), ("write", ["s:ab"]), ("ioctl", ["2", "b:00ff"])])[1:] == [
        ("lseek", ["7"], (7, "set")), ("write", ["s:ab"], (b"ab",)), ("ioctl", ["2", "b:00ff"], (2, b"\0\xff"))]
    for ops, msg in (([("read", ["1"])], "--read needs an --open PATH before it"),
                     ([("open", ["/x"]), ("close", []), ("poll", [])], "--poll needs an --open PATH before it"),
                     ([("cat", ["/x"]), ("read", ["1"])], "--read needs an --open PATH"),
                     ([("open", ["x"])], "--open x: an absolute path"), ([("cat", ["x"])], "--cat x: an absolute path"),
                     ([("echo", ["1", "x"])], "--echo 1 x: an absolute path"),
                     ([("open", ["/x"]), ("read", ["0"])], "--read 0: a positive byte count"),
                     ([("open", ["/x"]), ("mmap", ["-1"])], "--mmap -1: a positive byte count"),
                     ([("open", ["/x"]), ("write", ["zz"])], "--write 'zz'"),
                     ([("open", ["/x"]), ("lseek", ["1:x"])], "--lseek '1:x'"),
                     ([("open", ["/x"]), ("ioctl", ["c", "0"])], "--ioctl CMD 'c': not an integer"),
                     ([("open", ["/x"]), ("ioctl", ["1", "q"])], "--ioctl ARG 'q': not an integer"),
                     ([("open", ["/x"]), ("ioctl", ["1", "b:1"])], "--ioctl ARG 'b:1'"),
                     ([("open", ["/x"]), ("read", ["x"])], "--read 'x': not an integer"),
                     ([("open", ["/x"]), ("mmap", ["y"])], "--mmap 'y': not an integer"),
                     ([("open", ["/x"]), ("write", ["b:0g"])], "--write 'b:0g': s:TEXT, b:HEX or buf:N"),
                     ([("open", ["/x"]), ("ioctl", ["1", "buf:z"])], "--ioctl ARG 'buf:z': s:TEXT, b:HEX or buf:N"),
                     ([("open", ["/x"]), ("fsync", [])], "--fsync: not a file operation (open, cat, echo, write, read, "
                                                         "lseek, ioctl, poll, mmap, close)")):
        with pytest.raises(EmulationError, match=re.escape(msg)):
            parse_ops(ops)
    assert _describe("lseek", ["-1:end"], (-1, "end")) == "lseek(-1, SEEK_END)"
    assert _describe("ioctl", ["1", "b:00"], (1, b"\0")) == "ioctl(1, b:00)"
    assert _describe("read", ["4"], (4,)) == "read(4)" and _describe("close", [], ()) == "close"
    assert [_describe(o, ["/p"], ()) for o in ("cat", "echo", "open")] == ["cat", "echo", "open"]
    assert _describe("poll", [], ()) == "poll(POLLIN|POLLPRI|POLLOUT, timeout 0)"
    assert _describe("mmap", ["8"], (8,)) == "mmap(8, PROT_READ|PROT_WRITE, MAP_SHARED)"
    assert _ret(-25) == "-25 (-ENOTTY)" and _ret(0) == "0" and _ret(7) == "7" and _ret(-1) == "-1 (-EPERM)"
    assert _text(b"a\x00~\x7f \x1f\x80!") == "a.~. ..!"
    assert dev_bytes("buf:0", "w") == b"" and dev_bytes("b:", "w") == b""
    assert _seek("4:set") == (4, "set")
