"""File operations as real system calls from pid 1's user mode inside the booted kernel
(armload/emu/booted/user.py, commands/devio_booted.py) on sample_modules/src/vfsdev: every
operation's result and the kernel's errno, the svc path itself, the kernel context put back."""
import json
import os
import re
import struct

import pytest

from testinputs import BOOT_VMLINUZ, ROOT, SYMVERS, require_input
from armload.emu.booted.user import File

VFSDEV = os.path.join(ROOT, "sample_modules", "devio", "vfsdev-arm-debug.ko")
IOC_LEN, IOC_SET, IOC_FILL, IOC_CRASH = 0x80047601, 0x40047602, 0x7603, 0x7604
PARAM = "/sys/module/vfsdev/parameters/fill"
ENOENT, EBADF, EAGAIN, EFAULT, EACCES, EINVAL, ENOSPC, ENOTTY = 2, 9, 11, 14, 13, 22, 28, 25


@pytest.fixture
def vfs_run(run):
    """The wing's BootedRun (tests/emu/conftest.py) with vfsdev loaded."""
    require_input(VFSDEV, "make samples-vfsdev")
    res = run.load(VFSDEV)
    assert res.ok, res.console
    return run


@pytest.fixture
def fs(vfs_run):
    from armload.emu.booted.user import Filesystem
    return Filesystem(vfs_run.bk)


def _errno(fn, *a):
    with pytest.raises(OSError) as e:
        fn(*a)
    return e.value.errno


def test_mounts_are_the_kernels(fs):
    assert fs.mount_all() == {"/dev": 0, "/proc": 0, "/sys": 0, "/sys/kernel/debug": 0}
    mounts = fs.cat("/proc/mounts").decode()
    for fstype, where in fs.MOUNTS:
        assert f"{fstype} {where} {fstype} " in mounts
    assert fs.sys.mount("devtmpfs", "/nowhere", "devtmpfs") == -ENOENT       # mount(2)'s own errno


def test_the_misc_node_read_write_lseek(fs):
    f = fs.open("/dev/vfsdev")
    assert f.fd == 3                                    # 0-2: /dev/console (console_on_rootfs)
    assert f.write(b"hello world") == 11
    assert f.read(4) == b""                             # the position is at the end
    assert f.lseek(0) == 0 and f.read(5) == b"hello"
    assert f.lseek(1, "cur") == 6 and f.read(64) == b"world"
    assert _errno(f.lseek, -1) == EINVAL                # default_llseek: a negative position
    assert f.lseek(4096) == 4096 and _errno(f.write, b"x") == ENOSPC     # the module's own -ENOSPC
    assert f.close() == 0
    with pytest.raises(ValueError):
        f.read(1)


def test_ioctl_results_and_errnos(fs):
    f = fs.open("/dev/vfsdev")
    f.write(b"abc")
    assert f.ioctl(IOC_LEN, bytes(4)) == (0, struct.pack("<i", 3))         # put_user into user memory
    assert f.ioctl(IOC_SET, struct.pack("<i", 2)) == (0, struct.pack("<i", 2))
    assert f.ioctl(IOC_FILL) == (2, None)
    f.lseek(0)
    assert f.read(8) == b"vv"                           # fill's default 'v', over the 2 bytes
    assert _errno(f.ioctl, IOC_LEN, 0) == EFAULT        # put_user to NULL
    assert _errno(f.ioctl, IOC_SET, 0) == EFAULT        # get_user from NULL
    assert _errno(f.ioctl, IOC_SET, struct.pack("<i", 4097)) == EINVAL
    assert _errno(f.ioctl, 0x7699, 0) == ENOTTY         # unknown: the module's -ENOTTY
    assert _errno(f.ioctl, 0x5401, 0) == ENOTTY         # TCGETS on a misc device: vfs_ioctl
    f.close()


def test_poll_with_timeout_zero(fs):
    from armload.emu.booted.user import POLLIN, POLLOUT, poll_names
    f = fs.open("/dev/vfsdev")
    assert f.poll() == POLLOUT                          # nothing to read yet
    f.write(b"x")
    assert f.poll() == POLLIN | POLLOUT and poll_names(f.poll()) == "POLLIN|POLLOUT"
    assert f.poll(POLLIN) == POLLIN                     # revents masked by the events asked for
    f.close()


def test_mmap_reads_what_the_module_maps(vfs_run, fs):
    f = fs.open("/dev/vfsdev")
    f.write(b"mapped!")
    addr = f.mmap(4096)
    assert 0 < addr < 0xBF000000 and addr & 0xFFF == 0
    assert f.peek(addr, 8) == b"mapped!\0"
    f.lseek(0)
    f.write(b"M")                                       # the same page: the mapping sees it
    assert f.peek(addr, 2) == b"Ma"
    assert _errno(f.mmap, 8192) == EINVAL               # the module refuses more than a page
    with pytest.raises(OSError, match=r"mmap /dev/vfsdev: EINVAL"):
        f.mmap(8192)
    assert _errno(f.mmap, 4096, 3, 1, 1) == EINVAL      # and an offset
    f.close()
    assert vfs_run.unload("vfsdev")[0] == -EAGAIN           # the mapping still holds the file (and module)
    assert f.maps == [(addr, 4096)] and f.peek(addr, 0) == b""
    with pytest.raises(OSError, match=re.escape("munmap /dev/vfsdev: EINVAL")):
        f.munmap(addr + 1, 4096)                        # not page aligned
    assert f.munmap(addr, 4096) == 0 and f.maps == []
    assert vfs_run.unload("vfsdev")[0] == 0


def test_a_user_access_that_faults_is_the_kernels_signal(fs):
    from armload.emu.booted.user import UserFault
    fs.mount_all()
    with pytest.raises(UserFault, match=r"^a user load at 0x1000: the user access faulted: force_sig_fault\(signal 11, "
                                        r"code 1, addr 0x1000\)$"):        # SIGSEGV, SEGV_MAPERR: nothing mapped
        fs.sys.peek(0x1000, 4)
    assert fs.sys.call("getpid") == 1                   # pid 1 goes on


def test_close_runs_release_through_the_task_work(vfs_run, fs):
    """close(2) drops the fd; the last fput's __fput (module_put) runs in the return to user mode."""
    f = fs.open("/dev/vfsdev")
    assert vfs_run.unload("vfsdev")[0] == -EAGAIN           # busy: delete_module(O_NONBLOCK)'s -EWOULDBLOCK
    assert f.close() == 0
    assert vfs_run.unload("vfsdev")[0] == 0
    assert _errno(fs.open, "/dev/vfsdev") == ENOENT     # devtmpfs removed the node
    assert fs.sys.close(3) == -EBADF                    # and the fd is gone


def test_sysfs_proc_debugfs_and_a_parameter_at_run_time(fs):
    assert fs.cat(PARAM) == b"118\n"
    assert fs.echo("65", PARAM) == 3
    assert fs.cat(PARAM) == b"65\n"
    f = fs.open("/dev/vfsdev")
    f.write(b"zz")
    assert f.ioctl(IOC_FILL) == (2, None)
    f.lseek(0)
    assert f.read(2) == b"AA"                           # the module used the new value
    f.close()
    assert fs.cat("/sys/class/misc/vfsdev/opens") == b"1\n"       # its device attribute
    assert fs.cat("/sys/kernel/debug/vfsdev/writes") == b"1\n"    # debugfs_create_u32
    assert fs.echo("7", "/sys/kernel/debug/vfsdev/writes") == 2
    assert fs.cat("/proc/vfsdev") == b"len 2 opens 1 writes 7\n"
    assert fs.cat("/sys/module/vfsdev/initstate") == b"live\n"
    assert _errno(fs.cat, "/sys/module/vfsdev/parameters/nope") == ENOENT
    assert _errno(fs.echo, "1", "/sys/module/vfsdev/parameters/nope") == EACCES   # O_CREAT in sysfs
    assert _errno(fs.echo, "1", "/sys/class/misc/vfsdev/opens") == EACCES           # 0444, no store
    assert _errno(fs.open, "/dev/nope") == ENOENT


def test_errors_raise_the_matching_oserror(fs):
    with pytest.raises(FileNotFoundError):
        fs.open("/dev/nope")


def test_system_calls_enter_through_svc_and_the_syscall_table(vfs_run, fs):
    """Each call is one SVC exception taken from user mode, dispatched by r7 to its sys_* function."""
    from armload.emu.booted.user import NR
    k = vfs_run.bk
    fs.mount_all()
    hits = []
    hooks = [k.hook_code(k.addr(f"sys_{n}"), lambda *_, n=n: hits.append((n, k.m.reg("cpsr") & 0x1F)))
             for n in ("getpid", "openat", "read", "close", "write")]
    swi0 = k.m.exception_counts.get("swi", 0)
    try:
        assert fs.sys.call("getpid") == 1
        f = fs.open("/dev/vfsdev")
        f.read(1)
        f.close()
    finally:
        for h in hooks:
            k.unhook(h)
    assert hits == [("getpid", 0x13), ("openat", 0x13), ("read", 0x13), ("close", 0x13)]
    assert k.m.exception_counts["swi"] - swi0 == 4
    assert NR["read"] == 3 and NR["write"] == 4 and NR["ioctl"] == 54 and NR["openat"] == 322 and NR["mmap2"] == 192


def test_the_kernel_context_is_put_back(vfs_run, fs):
    k = vfs_run.bk
    fs.mount_all()
    regs = {r: k.m.reg(r) for r in ("sp", "lr", "pc", "cpsr", "r9")}
    sp = regs["sp"]
    top = (sp & ~0x1FFF) + 0x2000 - 8
    stack = k.read(sp, top - sp)
    f = fs.open("/dev/vfsdev")
    f.write(b"x" * 100)
    f.close()
    assert {r: k.m.reg(r) for r in regs} == regs and k.read(sp, top - sp) == stack
    assert k.call("msleep", 1) == 0                     # pid 1's kernel context goes on


def test_an_oops_in_a_system_call_is_the_kernels(fs):
    from armload.emu.booted.user import UserFault
    f = fs.open("/dev/vfsdev")
    with pytest.raises(UserFault) as e:
        f.ioctl(IOC_CRASH)
    text = "\n".join(e.value.console)
    assert "Unable to handle kernel NULL pointer dereference at virtual address 00000000" in text
    assert "PC is at vfsdev_ioctl+" in text and "Process init (pid: 1" in text
    assert " vfsdev_ioctl [vfsdev] from sys_ioctl+" in text and "sys_ioctl from ret_fast_syscall" in text
    assert str(e.value) == "ioctl(2): an oops killed pid 1 (the kernel's own report is above)"
    assert e.value.oops.startswith("[") and "Internal error: Oops: 5 [#1] SMP ARM" in e.value.oops
    with pytest.raises(UserFault, match=r"getpid\(2\): pid 1 died in an oops in ioctl\(2\): no further system call"):
        fs.sys.call("getpid")


def test_a_call_past_its_budget_is_abandoned_and_nothing_more_runs(fs):
    from armload.emu.booted.user import UserFault
    fs.mount_all()
    fs.sys.budget = 50                                  # instructions: not enough for any call
    with pytest.raises(UserFault, match=r"getpid\(2\): did not return to user mode within 50 instructions"):
        fs.sys.call("getpid")
    fs.sys.budget = 10_000_000
    with pytest.raises(UserFault, match=r"pid 1 was abandoned inside getpid\(2\): no further system call"):
        fs.sys.call("getpid")


def test_instructions_per_round_trip_are_counted(fs):
    fs.mount_all()
    fs.sys.call("getpid")
    n = fs.sys.last_insns
    assert 100 < n < 5000                               # entry, sys_getpid, ret_fast_syscall, the stub


def _cli(*args, kernel=(BOOT_VMLINUZ, SYMVERS)):
    """`armload run VFSDEV --kernel ... ARGS` in this process (its stdout, stderr, exit status)."""
    import contextlib
    import io
    import types
    from armload.cli import main
    out, err = io.StringIO(), io.StringIO()
    kargs = [w for k in kernel for w in ("--kernel", k)]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(["run", VFSDEV, *kargs, *args])
        except SystemExit as e:
            rc = e.code
    return types.SimpleNamespace(returncode=rc, stdout=out.getvalue(), stderr=err.getvalue())


def test_cli_operations_in_order(booted_dir):
    p = _cli("--open", "/dev/vfsdev", "--write", "s:hello", "--lseek", "1", "--read", "16",
             "--ioctl", hex(IOC_LEN), "buf:4", "--ioctl", "0x7699", "0", "--poll", "--mmap", "8", "--close",
             "--cat", PARAM, "--echo", "66", PARAM, "--cat", PARAM, "--open", "/dev/nope", "--read", "1",
             "--lseek=-1:cur", "--cat", "/proc/vfsdev", "--exit")
    assert p.returncode == 0, p.stdout + p.stderr
    # where mmap put it is the kernel's choice (ASLR: its random state is the boot's)
    mm = re.search(r"MAP_SHARED\) = (0x[0-9a-f]{8});", p.stdout).group(1)
    lines = [ln.replace(mm, "ADDR") for ln in p.stdout.splitlines() if ln.startswith(("/dev/", "cat ", "echo ", "--"))]
    assert lines == [
        "/dev/vfsdev: open = 3", "/dev/vfsdev: write(s:hello) = 5", "/dev/vfsdev: lseek(1, SEEK_SET) = 1",
        "/dev/vfsdev: read(16) = 4  656c6c6f  'ello'", "/dev/vfsdev: ioctl(0x80047601, buf:4) = 0  buffer 05000000",
        "/dev/vfsdev: ioctl(0x7699, 0) = -25 (-ENOTTY)",
        "/dev/vfsdev: poll(POLLIN|POLLPRI|POLLOUT, timeout 0): revents 0x5 (POLLIN|POLLOUT)",
        "/dev/vfsdev: mmap(8, PROT_READ|PROT_WRITE, MAP_SHARED) = ADDR; user mode reads 68656c6c6f000000  "
        "'hello...'",
        "/dev/vfsdev: close = 0", f"cat {PARAM} = 4  '118'", f"echo 66 > {PARAM} = 3", f"cat {PARAM} = 3  '66'",
        "/dev/nope: open = -2 (-ENOENT)", "--read: not run (no open file: its open failed)",
        "--lseek: not run (no open file: its open failed)", "cat /proc/vfsdev = 23  'len 5 opens 1 writes 1'"]
    assert f"at the end, as the process's exit would: munmap({mm}, 8)" in p.stdout
    assert "vfsdev: delete_module returned 0" in p.stdout


def test_cli_json(booted_dir):
    p = _cli("--open", "/dev/vfsdev", "--write", "b:00ff", "--read", "4", "--ioctl", hex(IOC_SET), "0",
             "--cat", "/nope", "--json")
    assert p.returncode == 0, p.stderr
    dev = json.loads(p.stdout)["devio"]
    assert [(d["op"], d["result"]) for d in dev] == [("open", 3), ("write", 2), ("read", 0), ("ioctl", -14),
                                                     ("cat", -2)]
    assert dev[3]["errno"] == "EFAULT" and dev[4]["errno"] == "ENOENT"
    assert all(d["syscalls"] >= 1 and d["instructions"] > 0 for d in dev)


def test_cli_an_oops_fails_the_run(booted_dir):
    p = _cli("--open", "/dev/vfsdev", "--ioctl", hex(IOC_CRASH), "0", "--read", "1")
    assert p.returncode == 1
    assert "PC is at vfsdev_ioctl+" in p.stdout and "ioctl(2): an oops killed pid 1" in p.stdout
    line = next(i for i, t in enumerate(open(VFSDEV.replace("devio/vfsdev-arm-debug.ko", "src/vfsdev/vfsdev.c")), 1)
                if "return *vfsdev_null;" in t)
    assert re.search(rf"PC is at vfsdev_ioctl \(\S*sample_modules/src/vfsdev/vfsdev.c:{line}\) vfsdev", p.stdout)
    assert "read(1)" not in p.stdout


def test_cli_bad_operations_are_refused_before_anything_runs(booted_dir):
    for args, msg in ((["--read", "3"], "--read needs an --open PATH before it"),
                      (["--open", "dev/x"], "--open dev/x: an absolute path"),
                      (["--open", "/dev/vfsdev", "--write", "q:1"], "--write 'q:1': s:TEXT, b:HEX or buf:N"),
                      (["--open", "/dev/vfsdev", "--read", "0"], "--read 0: a positive byte count"),
                      (["--open", "/dev/vfsdev", "--lseek", "1:top"], "--lseek '1:top': OFF, OFF:cur or OFF:end"),
                      (["--open", "/dev/vfsdev", "--ioctl", "x", "0"], "--ioctl CMD 'x': not an integer"),
                      (["--echo", "1", "sys/x"], "an absolute path")):
        p = _cli(*args)
        assert p.returncode != 0 and msg in p.stderr and "Traceback" not in p.stderr, (args, p.stderr)
        assert "vfsdev: init returned" not in p.stdout


def test_bench_devio_prints_round_trips_and_the_run_ratio(booted_dir):
    from armload.bench import devio_booted
    res = devio_booted.run_benchmark(BOOT_VMLINUZ)
    by = {r["call"]: r for r in res["round_trips"]}
    assert 100 < by["getpid"]["insns_median"] < by["read(1) /dev/vfsdev"]["insns_median"] < 5000
    x = res["run"]
    assert x["operations"] == 48 and x["devio"]["syscalls"] > 48 and 1 < x["insns_ratio"] < 2
    text = devio_booted.format_benchmark(res)
    assert "getpid" in text and "ratio:" in text


def test_file_operations_need_the_booted_kernel_and_follow_the_calls(booted_dir):
    p = _cli("--open", "/dev/vfsdev", kernel=(SYMVERS,))
    assert p.returncode != 0 and "needs the kernel image" in p.stderr and "Traceback" not in p.stderr
    p = _cli("--call", "vfsdev_poll", "0", "0", "--open", "/dev/vfsdev", "--write", "s:a", "--poll")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "vfsdev_poll(0, 0) returned 260 (0x104)" in out                    # EPOLLOUT|EPOLLWRNORM: len 0
    assert out.index("vfsdev_poll(0, 0)") < out.index("/dev/vfsdev: open = 3")
    assert "/dev/vfsdev: poll(POLLIN|POLLPRI|POLLOUT, timeout 0): revents 0x5 (POLLIN|POLLOUT)" in out


def test_module_files_for_tests(vfs_run):
    from armload.devkit.files import ModuleFiles, _text
    files = ModuleFiles(vfs_run, "vfsdev")
    assert files.param("fill") == "118" and files.param("fill", 66) == 3 and files.param("fill") == "66"
    assert files.sysfs("initstate") == "live" and files.sysfs("/sys/class/misc/vfsdev/opens") == "0"
    with files.open("/dev/vfsdev", "r") as f:
        assert _errno(f.write, b"x") == EBADF           # write(2) on an O_RDONLY descriptor: the VFS's -EBADF
        assert f.read(1) == b""
    with files.open("/dev/vfsdev", "w") as f:
        assert f.write("x") == 1 and _errno(f.read, 1) == EBADF
    with files.open("/dev/vfsdev") as f:
        assert f.ioctl(IOC_FILL) == (1, None) and f.read(1) == b"B"   # fill 66 = 'B'
    assert files.cat("/proc/vfsdev") == "len 1 opens 3 writes 1\n"
    assert files.echo(9, "/sys/kernel/debug/vfsdev/writes") == 2 and files.sysfs("/sys/kernel/debug/vfsdev/writes") == "9"
    with pytest.raises(FileNotFoundError):
        files.sysfs("parameters/nope")
    with pytest.raises(ValueError):
        files.open("/dev/vfsdev", "a")
    assert _text(True) == "Y" and _text(False) == "N" and _text(3) == "3"


def test_coverage_counts_the_module_code_the_system_calls_ran(booted_dir, tmp_path):
    out = tmp_path / "v.info"
    p = _cli("--open", "/dev/vfsdev", "--write", "s:ab", "--ioctl", hex(IOC_LEN), "buf:4", "--close",
             "--coverage", str(out))
    assert p.returncode == 0, p.stderr
    hits = dict(ln[5:].split(",")[::-1] for ln in out.read_text().splitlines() if ln.startswith("FNDA:"))
    assert int(hits["vfsdev_write"]) >= 1 and int(hits["vfsdev_ioctl"]) >= 1 and int(hits["vfsdev_open"]) >= 1
    assert int(hits["vfsdev_read"]) == 0 and int(hits["vfsdev_mmap"]) == 0     # not called


def test_user_error_and_poll_names():
    from armload.emu.booted.user import poll_names, user_error
    assert user_error(0xFFFFFFFF) == -1 and user_error(0xFFFFF001) == -4095 and user_error(0xFFFFF000) == 0xFFFFF000
    assert user_error(0xB6EFF000) == 0xB6EFF000 and user_error(3) == 3 and user_error(1 << 32 | 5) == 5
    assert poll_names(0) == "0" and poll_names(0x145) == "POLLIN|POLLOUT|POLLRDNORM|POLLWRNORM"


def test_cat_says_where_it_stopped(booted_dir):
    from armload.emu.booted.user import CAT_LIMIT
    p = _cli("--cat", "/proc/kallsyms", "--json")
    rec = json.loads(p.stdout)["devio"][0]
    assert rec["result"] == CAT_LIMIT and rec["truncated"] is True and " T _stext" in rec["text"]
    p = _cli("--cat", "/proc/kallsyms")
    assert f"(the first {CAT_LIMIT:,} bytes: armload's cat stops there)" in p.stdout


def test_errors_name_the_call_the_file_and_the_errno(fs):
    f = fs.open("/dev/vfsdev", 0)                       # O_RDONLY
    for call, args, msg in ((f.write, (b"x",), "write /dev/vfsdev: EBADF"), (f.lseek, (-1,), "lseek /dev/vfsdev: EINVAL"),
                            (f.ioctl, (0x7699,), "ioctl 0x7699 /dev/vfsdev: ENOTTY"),
                            (f.mmap, (4096,), "mmap /dev/vfsdev: EACCES")):      # MAP_SHARED|PROT_WRITE, O_RDONLY
        with pytest.raises(OSError, match=re.escape(msg)) as e:
            call(*args)
        assert str(e.value).startswith(f"[Errno {e.value.errno}] ")
    f.close()
    with pytest.raises(OSError, match=re.escape("read /dev/vfsdev: EBADF")):
        File(fs.sys, "/dev/vfsdev", 99).read(1)             # no such descriptor
    with pytest.raises(OSError, match=re.escape("open /dev/nope: ENOENT")):
        fs.open("/dev/nope")


def test_file_methods_for_a_module_handle(vfs_run):
    """What ModuleHandle mixes in: its BootedRun is `.kernel`, the module's name `.name`."""
    from armload.devkit.files import FileMethods

    class Handle(FileMethods):
        def __init__(self, kernel, name):
            self.kernel, self.name = kernel, name
    h = Handle(vfs_run, "vfsdev")
    with h.open("/dev/vfsdev") as f:
        assert f.write(b"hi") == 2 and f.ioctl(IOC_LEN, bytes(4)) == (0, struct.pack("<i", 2))
    assert h.sysfs("parameters/fill") == "118" and h.sysfs("parameters/fill", 90) == 3
    assert h.cat("/sys/module/vfsdev/parameters/fill") == "90\n" and h.echo("1", PARAM) == 2
    assert h.files is h.files and h.files.run is vfs_run


def test_the_process_exit_closes_and_unmaps_what_is_left(booted_dir):
    p = _cli("--open", "/dev/vfsdev", "--mmap", "8", "--open", "/dev/vfsdev", "--write", "s:a", "--exit")
    assert p.returncode == 0, p.stderr
    mm = re.search(r"MAP_SHARED\) = (0x[0-9a-f]{8});", p.stdout).group(1)
    assert f"armload: at the end, as the process's exit would: munmap({mm}, 8), close(3), close(4)" in p.stdout
    assert "vfsdev: delete_module returned 0" in p.stdout           # nothing holds the module any more
