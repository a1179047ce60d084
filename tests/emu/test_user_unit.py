"""pid 1's user-mode plumbing (armload/emu/booted/user.py) on a stand-in kernel: the rules that are
armload's own, not the kernel's (tests/emu/test_devio_booted.py and test_devio_qemu.py hold the
kernel's results): user memory's bump allocation and its bounds, the system-call register layout,
the argument order of each call, File's and Filesystem's errors, flags and loops."""
import struct
import types

import pytest

from armload.emu.booted import user as U
from armload.errors import EmulationError

BASE = 0x10000000


class FakeKernel:
    """copy_to_user from a kmalloc'ed bounce page into a dict of user bytes; vm_mmap hands out pages."""

    def __init__(self, maps=(BASE, BASE + 0x100000, BASE + 0x200000), left=0):
        self.maps, self.left = list(maps), left
        self.kmem, self.umem, self.copies, self.hooks = {}, bytearray(0x300000), [], []
        self.insns = 0
        self.m = types.SimpleNamespace(uc=None, stop_reason=None)
        self.mmaps, self.kmallocs = [], []

    def call(self, name, *args):
        assert name == "vm_mmap"
        self.mmaps.append(args)
        return self.maps.pop(0)

    def kmalloc(self, n):
        self.kmallocs.append(n)
        return 0xC8000000

    def write(self, va, data):
        self.kmem[va] = bytes(data)

    def copy_to_user(self, ua, ka, n):
        self.copies.append((ua, n))
        self.umem[ua - BASE:ua - BASE + n] = self.kmem[ka][:n]
        return self.left

    def read(self, ua, n):
        return bytes(self.umem[ua - BASE:ua - BASE + n])

    def addr(self, name):
        return {"ret_to_user": 0xC0100000, "make_task_dead": 0xC0200000}[name]

    def hook_code(self, at, fn):
        self.hooks.append(at)
        self.hook_fns = getattr(self, "hook_fns", []) + [fn]
        return len(self.hooks)


class FakeUc:
    def __init__(self, regs=()):
        self.regs, self.stopped = dict(regs), 0

    def reg_read(self, r):
        return self.regs[r]

    def emu_stop(self):
        self.stopped += 1


def test_user_error_is_the_kernels_is_err_value():
    assert [U.user_error(v) for v in (0, 7, 0xFFFFF000, 0xFFFFF001, 0xFFFFFFFF, -2, 1 << 32)] == \
        [0, 7, 0xFFFFF000, -4095, -1, -2, 0]


@pytest.mark.parametrize("bad", [0xFFFFF001, 0xFFFFFFF4])
def test_a_failed_vm_mmap_is_refused(bad):
    with pytest.raises(EmulationError, match=rf"vm_mmap in pid 1 failed \({U.user_error(bad)}\)"):
        U.UserMemory(FakeKernel([bad]))
    with pytest.raises(EmulationError, match="vm_mmap of pid 1's system-call stub failed"):
        U.Syscalls(FakeKernel([BASE, bad, BASE + 0x100000]))
    with pytest.raises(EmulationError, match="stub failed"):
        U.Syscalls(FakeKernel([BASE, BASE + 0x100000, bad]))
    assert U.UserMemory(FakeKernel([0xFFFFF000])).base == 0xFFFFF000        # not an error value
    assert U.UserMemory(FakeKernel([0])).base == 0
    assert U.Syscalls(FakeKernel([BASE, 0, BASE + 0x100000])).code == 0


def test_user_memory_and_the_stub_are_anonymous_private_maps_of_pid_1():
    k = FakeKernel()
    U.Syscalls(k)
    rw, rwx, anon = U.PROT_READ | U.PROT_WRITE, U.PROT_READ | U.PROT_WRITE | U.PROT_EXEC, 0x22
    assert k.mmaps == [(0, 0, 0x10000, rw, anon, 0), (0, 0, 0x1000, rwx, anon, 0), (0, 0, 0x2000, rw, anon, 0)]
    assert k.kmallocs == [0x1000]                                       # one bounce page
    assert k.copies[-1] == (BASE + 0x200000 + 0x1000, 0x1000) and len(k.copies) == 3   # stub, two stack pages
    assert U.UserMemory(FakeKernel(), size=0x4000).size == 0x4000


def test_user_memory_is_bump_allocated_8_aligned_to_its_last_byte():
    k = FakeKernel()
    mem = U.UserMemory(k, size=0x20)
    assert (mem.base, mem.used, mem.size) == (BASE, 0, 0x20)
    a = mem.put(b"abc")
    b = mem.string("hi")
    assert (a, b) == (BASE, BASE + 8) and mem.read(b, 3) == b"hi\0" and mem.used == 11
    mark = mem.mark()
    c = mem.buffer(8)
    assert c == BASE + 16 and mem.read(c, 8) == bytes(8) and mem.used == 24
    mem.release(mark)
    assert mem.used == mark == 11
    assert mem.put(bytes(16)) == BASE + 16 and mem.used == 0x20             # exactly full: fits
    mem.release(mark)
    with pytest.raises(EmulationError, match=r"pid 1's user memory is full \(0x20 bytes\)"):
        mem.put(bytes(17))


def test_user_writes_go_through_copy_to_user_a_page_at_a_time():
    k = FakeKernel()
    mem = U.UserMemory(k)
    data = bytes(range(256)) * 20                                            # 5120 bytes: two copies
    mem.write(BASE + 8, data)
    assert k.copies == [(BASE + 8, 0x1000), (BASE + 8 + 0x1000, 5120 - 0x1000)]
    assert mem.read(BASE + 8, len(data)) == data
    mem.write(BASE, b"")
    assert len(k.copies) == 2                                                # nothing to copy
    k.left = 1
    with pytest.raises(EmulationError, match=f"copy_to_user to {BASE + 0x1000:#x} failed"):
        mem.write(BASE + 0x1000, b"x")


@pytest.fixture
def sysc():
    k = FakeKernel()
    s = U.Syscalls(k)
    seen = []

    def run_user(pc, regs, until, what, budget=None):
        seen.append((pc, list(regs), until, what))
        k.insns += 100
        return [s.answer] + [0] * 12
    s.answer = 0
    s.run_user, s.seen = run_user, seen
    return s


def test_the_stub_and_its_stack_are_written_and_make_task_dead_is_hooked(sysc):
    k = sysc.k
    assert (sysc.code, sysc.stack) == (BASE + 0x100000, BASE + 0x200000)
    assert k.read(sysc.code, len(U.STUB)) == U.STUB and k.read(sysc.stack, 0x2000) == bytes(0x2000)
    assert sysc.ret_to_user == 0xC0100000 and k.hooks == [0xC0200000]
    assert struct.unpack("<2I", U.STUB[:8]) == (0xEF000000, 0xEAFFFFFE)      # svc #0; b .
    assert (sysc.count, sysc.insns, sysc.last_insns, sysc.dead) == (0, 0, 0, None)
    assert k.hook_fns == [sysc._oops] and sysc._stack_pa == {} and sysc._in_user is False


def test_pid_1_dying_stops_the_run_only_while_its_user_mode_runs(sysc):
    uc = FakeUc()
    sysc._oops(uc, 0, 4, None)
    assert uc.stopped == 0 and sysc.k.m.stop_reason is None              # the kernel's own calls: not ours
    sysc._in_user = True
    sysc._oops(uc, 0, 4, None)
    assert uc.stopped == 1 and sysc.k.m.stop_reason == "oops"
    from unicorn import arm_const as A
    uc = FakeUc({A.UC_ARM_REG_R0: 11, A.UC_ARM_REG_R1: 1, A.UC_ARM_REG_R2: 0xDEAD0})
    sysc._signal(uc, 0, 4, None)
    assert uc.stopped == 1
    assert sysc.k.m.stop_reason == "the user access faulted: force_sig_fault(signal 11, code 1, addr 0xdead0)"


def test_a_system_call_puts_its_number_in_r7_and_its_arguments_in_r0_r5(sysc):
    sysc.answer = 0xFFFFFFFE
    assert sysc.call("ioctl", 3, 0x80046D01, -1) == -2
    pc, regs, until, what = sysc.seen[-1]
    assert (pc, until, what) == (sysc.code, sysc.code + 4, "ioctl(2)")
    assert regs == [3, 0x80046D01, 0xFFFFFFFF, 0, 0, 0, 0, 54]
    assert sysc.call("getpid") == -2 and sysc.seen[-1][1] == [0] * 7 + [20]
    assert sysc.call("mmap2", 1, 2, 3, 4, 5, 6) == -2 and sysc.seen[-1][1] == [1, 2, 3, 4, 5, 6, 0, 192]
    assert (sysc.count, sysc.insns, sysc.last_insns) == (3, 300, 100)
    sysc.count = 0
    sysc.openat("/a")
    sysc.mkdir("/b")
    sysc.mount("x", "/y", "z")
    assert sysc.seen[-3][1][2:4] == [U.O_RDWR, 0] and sysc.seen[-2][1][1] == 0o755 and sysc.seen[-1][1][3:5] == [0, 0]
    assert sysc.call("read", 1) == -2 and len(sysc.seen[-1][1]) == 8
    with pytest.raises(EmulationError, match="close: at most 6 arguments"):
        sysc.call("close", 1, 2, 3, 4, 5, 6, 7)
    assert sysc.count == 4


def test_path_calls_put_the_path_where_the_call_wants_it_and_free_it(sysc):
    used = sysc.mem.used
    sysc.openat("/dev/x", U.O_WRONLY, 0o600)
    regs = sysc.seen[-1][1]
    assert regs[0] == U.AT_FDCWD & 0xFFFFFFFF and regs[2:4] == [1, 0o600] and regs[7] == 322
    assert sysc.k.read(regs[1], 7) == b"/dev/x\0"
    sysc.mkdir("/sys", 0o700)
    regs = sysc.seen[-1][1]
    assert sysc.k.read(regs[0], 5) == b"/sys\0" and regs[1] == 0o700 and regs[7] == 39
    sysc.mount("sysfs", "/sys", "sysfs", 8)
    regs = sysc.seen[-1][1]
    assert [sysc.k.read(a, 6) for a in regs[:3]] == [b"sysfs\0", b"/sys\0\0", b"sysfs\0"] and regs[3:5] == [8, 0]
    assert sysc.mem.used == used                                            # all released


def test_read_and_write_buffers(sysc):
    sysc.answer = 3
    r, data = sysc.read(4, 16)
    regs = sysc.seen[-1][1]
    assert r == 3 and regs[:3] == [4, regs[1], 16] and data == bytes(3)
    sysc.answer = 1
    assert sysc.read(4, 1) == (1, b"\0")
    sysc.answer = 0
    assert sysc.read(4, 0) == (0, b"")
    sysc.answer = 0xFFFFFFF2
    assert sysc.read(4, 8) == (-14, b"")
    sysc.answer = 5
    assert sysc.write(4, b"hello") == 5
    regs = sysc.seen[-1][1]
    assert sysc.k.read(regs[1], 5) == b"hello" and regs[2] == 5
    sysc.write(4, b"")
    assert sysc.seen[-1][1][2] == 0
    assert sysc.close(9) == 5 and sysc.seen[-1][1][:1] == [9] and sysc.seen[-1][1][7] == 6
    assert sysc.peek(BASE, 0) == b"" and sysc.peek(BASE, -1) == b""
    assert sysc.seen[-1][3] == "close(2)"                                   # an empty peek runs nothing


def test_a_dead_pid_1_makes_no_further_call(sysc):
    sysc.dead = "died in an oops in read(2)"
    sysc.k.m.uc = object()
    with pytest.raises(U.UserFault, match=r"^write\(2\): pid 1 died in an oops in read\(2\): no further "
                                          "system call runs in this kernel$"):
        U.Syscalls.run_user(sysc, 0, [], 0, "write(2)")


class FakeSys:
    """Syscalls for File and Filesystem: answers by call name, and a record of the calls."""

    def __init__(self, **answers):
        self.mem = U.UserMemory(FakeKernel())
        self.answers, self.calls = answers, []

    def _answer(self, name, *args):
        self.calls.append((name, *args))
        a = self.answers.get(name, 0)
        return a(*args) if callable(a) else a

    def call(self, name, *args):
        return self._answer(name, *args)

    def read(self, fd, n):
        r = self._answer("read", fd, n)
        return (r, b"r" * r) if r > 0 else (r, b"")

    def write(self, fd, data):
        return self._answer("write", fd, data)

    def close(self, fd):
        return self._answer("close", fd)

    def openat(self, path, flags, mode):
        return self._answer("openat", path, flags, mode)

    def mkdir(self, path, mode):
        return self._answer("mkdir", path, mode)

    def mount(self, src, dst, fstype):
        return self._answer("mount", src, dst, fstype)

    def peek(self, ua, n):
        return self._answer("peek", ua, n)


def test_file_errors_are_oserrors_with_the_kernels_errno():
    f = U.File(FakeSys(read=-2, lseek=-29), "/dev/x", 3)
    with pytest.raises(FileNotFoundError) as e:
        f.read(4)
    assert (e.value.errno, e.value.strerror) == (2, "read /dev/x: ENOENT")
    with pytest.raises(OSError) as e:
        f.lseek(1)
    assert (e.value.errno, e.value.strerror) == (29, "lseek /dev/x: ESPIPE")
    assert U.File(FakeSys(write=0), "/p", 3).write("") == 0                # 0 is a result, not an error
    g = U.File(FakeSys(write=-28, poll=-4, mmap2=-12, munmap=-22), "/p", 3)
    for op, msg in ((lambda: g.write(b"x"), "write /p: ENOSPC"), (lambda: g.poll(), "poll /p: EINTR"),
                    (lambda: g.mmap(4096), "mmap /p: ENOMEM"), (lambda: g.munmap(0x1000, 4096), "munmap /p: EINVAL")):
        with pytest.raises(OSError) as e:
            op()
        assert e.value.strerror == msg
    assert g.maps == []


def test_file_methods_pass_their_arguments(tmp_path):
    s = FakeSys(read=4, write=lambda fd, d: len(d), lseek=lambda fd, o, w: o + w, mmap2=0x40000000, munmap=0)
    f = U.File(s, "/dev/x", 7)
    assert f.read(10) == b"rrrr" and s.calls[-1] == ("read", 7, 10)
    assert f.write("ab") == 2 and s.calls[-1] == ("write", 7, b"ab")
    assert f.write(bytearray(b"xyz")) == 3 and s.calls[-1] == ("write", 7, b"xyz")
    assert [f.lseek(10, w) for w in ("set", "cur", "end", 1)] == [10, 11, 12, 11]
    assert f.lseek(5) == 5 and s.calls[-1] == ("lseek", 7, 5, 0)
    assert f.mmap(0x2000) == 0x40000000
    assert s.calls[-1] == ("mmap2", 0, 0x2000, U.PROT_READ | U.PROT_WRITE, U.MAP_SHARED, 7, 0)
    f.mmap(0x1000, U.PROT_READ, U.MAP_PRIVATE, 2)
    assert s.calls[-1] == ("mmap2", 0, 0x1000, 1, 2, 7, 2) and f.maps == [(0x40000000, 0x2000), (0x40000000, 0x1000)]
    s.answers["peek"] = b"pk"
    assert f.peek(0x40000000, 2) == b"pk" and s.calls[-1] == ("peek", 0x40000000, 2)
    s.answers["mmap2"] = 0x50000000
    f.mmap(0x1000)
    assert f.munmap(0x40000000, 0x2000) == 0 and f.maps == [(0x50000000, 0x1000)]
    assert s.calls[-1] == ("munmap", 0x40000000, 0x2000)


def test_ioctl_hands_over_an_int_or_a_user_buffer_and_returns_it():
    def ioctl(fd, cmd, arg):
        if cmd == 2:
            s.mem.write(arg, b"\x2a\0\0\0")
        return 0
    s = FakeSys(ioctl=ioctl)
    f = U.File(s, "/dev/x", 3)
    used = s.mem.used
    assert f.ioctl(1, 5) == (0, None) and s.calls[-1] == ("ioctl", 3, 1, 5)
    assert f.ioctl(1) == (0, None) and s.calls[-1] == ("ioctl", 3, 1, 0)
    assert f.ioctl(2, bytes(4)) == (0, b"\x2a\0\0\0")
    assert f.ioctl(3, b"") == (0, b"") and s.calls[-1][3] >= s.mem.base     # a pointer, length 0
    assert f.ioctl(2, bytearray(4)) == (0, b"\x2a\0\0\0")
    assert s.mem.used == used
    s.answers["ioctl"] = -25
    with pytest.raises(OSError) as e:
        f.ioctl(0x80046D01, bytes(4))
    assert (e.value.errno, e.value.strerror) == (25, "ioctl 0x80046d01 /dev/x: ENOTTY")
    assert s.mem.used == used


def test_poll_reads_revents_and_checks_the_count():
    def poll(pfd, n, timeout, revents=0x5):
        fd, ev, _ = struct.unpack("<ihh", s.mem.read(pfd, 8))
        assert (fd, ev, n, timeout) == (3, U.POLLIN | U.POLLOUT | U.POLLPRI, 1, 0)
        s.mem.write(pfd, struct.pack("<ihh", fd, ev, revents))
        return 1
    s = FakeSys(poll=poll)
    f = U.File(s, "/dev/x", 3)
    assert f.poll() == 0x5
    s.answers["poll"] = lambda pfd, n, t: poll(pfd, n, t, revents=0)
    with pytest.raises(EmulationError, match=r"poll /dev/x: poll\(2\) returned 1 with revents 0x0"):
        f.poll()
    s.answers["poll"] = 0
    assert f.poll() == 0
    assert U.poll_names(0x5) == "POLLIN|POLLOUT" and U.poll_names(0) == "0" and U.poll_names(0x240) == \
        "POLLRDNORM|POLLWRBAND"


def test_a_closed_file_refuses_io_and_closes_once():
    s = FakeSys(close=0)
    with U.File(s, "/dev/x", 3) as f:
        pass
    assert f.closed and s.calls == [("close", 3)]
    assert f.close() == 0 and s.calls == [("close", 3)]
    for op in (lambda: f.read(1), lambda: f.write(b"x"), lambda: f.lseek(0), lambda: f.ioctl(1),
               lambda: f.poll(), lambda: f.mmap(4096)):
        with pytest.raises(ValueError, match="I/O on closed file /dev/x"):
            op()
    g = U.File(FakeSys(close=-9), "/dev/y", 4)
    with pytest.raises(OSError, match="close /dev/y: EBADF"):
        g.close()


def test_filesystems_are_mounted_once_in_order_and_eexist_is_fine():
    s = FakeSys(mkdir=-17)
    fs = U.Filesystem(None, s)
    assert fs.mount_all() == {"/dev": 0, "/proc": 0, "/sys": 0, "/sys/kernel/debug": 0}
    assert [c for c in s.calls if c[0] == "mount"] == [("mount", "devtmpfs", "/dev", "devtmpfs"),
        ("mount", "proc", "/proc", "proc"), ("mount", "sysfs", "/sys", "sysfs"),
        ("mount", "debugfs", "/sys/kernel/debug", "debugfs")]
    assert [c for c in s.calls if c[0] == "mkdir"][0] == ("mkdir", "/dev", 0o755)
    n = len(s.calls)
    fs.mount_all()
    assert len(s.calls) == n
    with pytest.raises(OSError) as e:
        U.Filesystem(None, FakeSys(mkdir=-13)).mount_all()
    assert (e.value.errno, e.value.strerror) == (13, "mkdir /dev: EACCES")
    with pytest.raises(OSError) as e:
        U.Filesystem(None, FakeSys(mount=-19)).mount_all()
    assert (e.value.errno, e.value.strerror) == (19, "mount -t devtmpfs devtmpfs /dev: ENODEV")


def test_open_cat_and_echo_are_what_a_shell_does():
    chunks = [4096, 10, 0]
    s = FakeSys(openat=5, read=lambda fd, n: min(chunks.pop(0), n), write=lambda fd, d: len(d))
    fs = U.Filesystem(None, s)
    assert fs.cat("/proc/x") == b"r" * 4106
    assert ("openat", "/proc/x", U.O_RDONLY, 0) in s.calls
    assert [c[2] for c in s.calls if c[0] == "read"] == [4096, 4096, 4096]
    chunks[:] = [4096, 4096]
    assert fs.cat("/proc/y", limit=5000) == b"r" * 5000
    assert [c[2] for c in s.calls if c[0] == "read"][-2:] == [4096, 904]      # never past the limit
    assert fs.echo("120", "/sys/p") == 4
    assert ("openat", "/sys/p", 0o1101, 0o666) in s.calls and ("write", 5, b"120\n") in s.calls
    assert s.calls[-1] == ("close", 5)
    s.answers["openat"] = -2
    with pytest.raises(FileNotFoundError, match="open /nope: ENOENT"):
        fs.open("/nope")
    s.answers["openat"] = 0
    assert fs.open("/fd0").fd == 0                                          # fd 0 is a file
    k = FakeKernel()
    assert U.Filesystem(k).sys.k is k
