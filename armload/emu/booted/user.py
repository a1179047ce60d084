"""pid 1's user mode in the booted kernel: real system calls, and files through the kernel's VFS.

A system call is made as /init would make it: pid 1 enters user mode the way the kernel returns
to /init (its pt_regs at the top of its kernel stack hold the user registers, CPSR = USR, and
ret_to_user restores them), at a two-instruction stub in its own user memory, `svc #0` then
`b .`; r7 is the EABI number (arch/arm/tools/syscall.tbl), r0-r5 the arguments. `svc` enters the
kernel's vector_swi, sys_call_table sends it to the sys_* function, and ret_fast_syscall (with
do_work_pending: task_work_run, so a close's last fput runs __fput and the driver's release)
returns to the stub's `b .`, where the run stops: r0 is the result (-4095..-1: -errno). pid 1's
kernel context (registers, cp15, and its kernel stack from the parked SP up, pt_regs included)
is then put back as it was, so BootedKernel.call() goes on as before.

    fs = Filesystem(k)                  # mkdir/mount(2): devtmpfs on /dev, proc, sysfs, debugfs
    f = fs.open("/dev/vfsdev")          # openat(2) -> File (read/write/lseek/ioctl/poll/mmap/close)
    f.write(b"abc"); f.lseek(0); f.read(16)
    fs.cat("/sys/module/vfsdev/parameters/fill"); fs.echo("120", "/sys/module/vfsdev/parameters/fill")

Errors are the kernel's: a File method raises OSError(errno) (FileNotFoundError for ENOENT...);
Syscalls.call returns the raw result. User buffers are bump-allocated in a vm_mmap'd area of
pid 1 and filled with the kernel's copy_to_user (UserMemory).
"""
from __future__ import annotations

import struct

from unicorn import arm_const as A

from ...errors import EmulationError
from ..errno import errno_name
from ..hw import cpu
from .machine import GuestFault

# arch/arm/tools/syscall.tbl (EABI numbers)
NR = {"read": 3, "write": 4, "close": 6, "lseek": 19, "getpid": 20, "mount": 21, "mkdir": 39, "ioctl": 54, "munmap": 91,
      "poll": 168, "prctl": 172, "mmap2": 192, "openat": 322, "delete_module": 129, "perf_event_open": 364,
      "bpf": 386}
AT_FDCWD = -100
O_RDONLY, O_WRONLY, O_RDWR = 0, 1, 2
O_CREAT, O_TRUNC = 0o100, 0o1000              # include/uapi/asm-generic/fcntl.h (ARM's too)
SEEK = {"set": 0, "cur": 1, "end": 2}
PROT_READ, PROT_WRITE, PROT_EXEC = 1, 2, 4
MAP_SHARED, MAP_PRIVATE, MAP_ANONYMOUS = 0x01, 0x02, 0x20
POLLIN, POLLPRI, POLLOUT, POLLERR, POLLHUP, POLLNVAL = 0x1, 0x2, 0x4, 0x8, 0x10, 0x20
POLL_NAMES = {0x1: "POLLIN", 0x2: "POLLPRI", 0x4: "POLLOUT", 0x8: "POLLERR", 0x10: "POLLHUP", 0x20: "POLLNVAL",
              0x40: "POLLRDNORM", 0x80: "POLLRDBAND", 0x100: "POLLWRNORM", 0x200: "POLLWRBAND"}
PT_REGS = 72                        # struct pt_regs: r0-r12, sp, lr, pc, cpsr, ORIG_r0
THREAD_SIZE = 0x2000
MAX_ERRNO = 4095
SYSCALL_BUDGET = 500_000_000        # instructions per system call (everything that ran meanwhile)
PAGE = 0x1000
# the stub: svc #0; b .   then the peek loop (ldrb r3, [r1], #1; strb r3, [r0], #1; subs r2, r2, #1;
# bne <ldrb>; b .): user-mode loads of a mapping, copied into a user buffer
SVC, SPIN = 0xEF000000, 0xEAFFFFFE
PEEK = (0xE4D13001, 0xE4C03001, 0xE2522001, 0x1AFFFFFB, SPIN)
STUB = struct.pack("<7I", SVC, SPIN, *PEEK)
STUB_SVC, STUB_STOP, PEEK_AT, PEEK_STOP = 0, 4, 8, 8 + 16
CAT_LIMIT = 1 << 16


class UserFault(EmulationError):
    """pid 1's user mode did not come back: a kernel oops or panic in the system call, a signal
    (a user access that faulted), or the budget. `console` holds the kernel's lines meanwhile,
    `oops` the kernel's report (from its first line) when there is one."""

    def __init__(self, message: str, console: list[str] | None = None):
        super().__init__(message)
        self.console = console or []
        from .modload import _oops
        self.oops = _oops(self.console)


def user_error(v: int) -> int:
    """The signed result of a system call word: -errno for -4095..-1, else the word itself."""
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= (1 << 32) - MAX_ERRNO else v


def _oserror(r: int, what: str) -> OSError:
    return OSError(-r, f"{what}: {errno_name(r)}")


class UserMemory:
    """Bump-allocated memory in pid 1's address space (vm_mmap; filled with the kernel's copy_to_user)."""

    def __init__(self, k, size: int = 0x10000):
        self.k, self.size, self.used = k, size, 0
        self.base = k.call("vm_mmap", 0, 0, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, 0)
        if user_error(self.base) < 0:                  # IS_ERR_VALUE: -4095..-1
            raise EmulationError(f"vm_mmap in pid 1 failed ({user_error(self.base)})")
        self._kbuf = k.kmalloc(PAGE)

    def put(self, data: bytes) -> int:
        self.used = (self.used + 7) & ~7
        if self.used + len(data) > self.size:
            raise EmulationError(f"pid 1's user memory is full ({self.size:#x} bytes)")
        ua = self.base + self.used
        self.used += len(data)
        self.write(ua, data)
        return ua

    def buffer(self, n: int) -> int:
        """n zeroed bytes (written, so their pages are present)."""
        return self.put(bytes(n))

    def write(self, ua: int, data: bytes) -> None:
        for o in range(0, len(data), PAGE):
            chunk = data[o:o + PAGE]
            self.k.write(self._kbuf, chunk)
            if self.k.copy_to_user(ua + o, self._kbuf, len(chunk)):
                raise EmulationError(f"copy_to_user to {ua + o:#x} failed")

    def string(self, s: str) -> int:
        return self.put(s.encode() + b"\0")

    def read(self, ua: int, n: int) -> bytes:
        return self.k.read(ua, n)

    def mark(self) -> int:
        return self.used

    def release(self, mark: int) -> None:
        """Everything put after `mark` is free again."""
        self.used = mark


class Syscalls:
    """System calls made by pid 1's user mode (see the module docstring)."""

    def __init__(self, k, mem: UserMemory | None = None, budget: int = SYSCALL_BUDGET):
        self.k, self.mem, self.budget = k, mem or UserMemory(k), budget
        self.code = k.call("vm_mmap", 0, 0, PAGE, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, 0)
        self.stack = k.call("vm_mmap", 0, 0, 2 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, 0)
        if min(user_error(self.code), user_error(self.stack)) < 0:
            raise EmulationError("vm_mmap of pid 1's system-call stub failed")
        self.mem.write(self.code, STUB)
        self.mem.write(self.stack, bytes(2 * PAGE))
        self.ret_to_user = k.addr("ret_to_user")
        # die(): pid 1 exits (then panics). One hook for the object's life, acting only while pid 1's
        # user mode runs (adding a code hook drops translated code: per call it cost ~0.9 ms)
        self._in_user = False
        self._stack_pa: dict[int, int] = {}
        k.hook_code(k.addr("make_task_dead"), self._oops)
        self.dead: str | None = None       # the call pid 1 died in (an oops): no further call runs
        self.count = 0                     # system calls made
        self.insns = 0                     # their instructions, user and kernel (everything that ran)
        self.last_insns = 0

    def call(self, name: str, *args: int) -> int:
        """The system call `name` (NR) with up to 6 integer arguments: its result (user_error)."""
        if len(args) > 6:
            raise EmulationError(f"{name}: at most 6 arguments")
        regs = [a & 0xFFFFFFFF for a in args] + [0] * (7 - len(args)) + [NR[name]]     # r0-r6, r7
        i0 = self.k.insns
        out = self.run_user(self.code + STUB_SVC, regs, self.code + STUB_STOP, f"{name}(2)")
        self.count += 1
        self.last_insns = self.k.insns - i0
        self.insns += self.last_insns
        return user_error(out[0])

    def peek(self, ua: int, n: int) -> bytes:
        """n bytes at user address ua, loaded by pid 1's user mode (a fault is the kernel's:
        its page fault handler runs; a signal is reported as a UserFault)."""
        if n <= 0:
            return b""
        mark = self.mem.mark()
        dst = self.mem.buffer(n)
        sig = self.k.hook_code(self.k.addr("force_sig_fault"), self._signal)
        try:
            self.run_user(self.code + PEEK_AT, [dst, ua, n], self.code + PEEK_STOP, f"a user load at {ua:#x}")
        finally:
            self.k.unhook(sig)
        data = self.mem.read(dst, n)
        self.mem.release(mark)
        return data

    def _oops(self, uc, addr, size, _):
        if self._in_user:
            self.k.m.stop_reason = "oops"
            uc.emu_stop()

    def _signal(self, uc, addr, size, _):
        sig, code, at = (uc.reg_read(r) for r in (A.UC_ARM_REG_R0, A.UC_ARM_REG_R1, A.UC_ARM_REG_R2))
        self.k.m.stop_reason = f"the user access faulted: force_sig_fault(signal {sig}, code {code}, addr {at:#x})"
        uc.emu_stop()

    def run_user(self, pc: int, regs: list[int], until: int, what: str, budget: int | None = None) -> list[int]:
        """Enter pid 1's user mode at pc with r0.. = regs (through ret_to_user, as the kernel returns
        to /init), run until PC == until; r0-r12 then. pid 1's kernel context is put back after."""
        k, m, uc = self.k, self.k.m, self.k.m.uc
        if self.dead is not None:
            raise UserFault(f"{what}: pid 1 {self.dead}: no further system call runs in this kernel")
        ctx = uc.context_save()
        sp = m.reg("sp")
        top = (sp & ~(THREAD_SIZE - 1)) + THREAD_SIZE - 8
        ptregs = top - PT_REGS                        # task_pt_regs(current)
        saved = self._stack(sp, top - sp)             # the parked frames and pt_regs
        mark = len(k.console)
        try:
            user = (list(regs) + [0] * 13)[:13]
            self._stack(ptregs, PT_REGS, struct.pack("<18I", *user, self.stack + 2 * PAGE, 0, pc, cpu.MODE_USR,
                                                     0xFFFFFFFF))
            m.set_reg("sp", ptregs)
            m.set_reg("r9", cpu.cp_read(uc, cpu.cp15(13, 0, 0, 3)))   # tsk = current (TPIDRURO in the kernel)
            m.set_reg("pc", self.ret_to_user)
            self._in_user = True
            try:
                how = k.run_serviced(until, budget or self.budget)
            except GuestFault as e:
                if str(e) in ("oops", "panic"):
                    self.dead = f"died in an oops in {what}"
                    raise UserFault(f"{what}: an oops killed pid 1 (the kernel's own report is above)",
                                    k.console[mark:]) from None
                if not str(e).startswith("the user access faulted"):       # a signal: the kernel is consistent
                    self.dead = f"was abandoned inside {what}"
                raise UserFault(f"{what}: {e}", k.console[mark:]) from None
            finally:
                self._in_user = False
            if how != "until":                        # abandoned mid-call (locks may be held): nothing more runs
                self.dead = f"was abandoned inside {what}"
                raise UserFault(f"{what}: did not return to user mode within {budget or self.budget:,} instructions "
                                f"(pc {m.reg('pc'):#x})", k.console[mark:])
            if uc.reg_read(A.UC_ARM_REG_CPSR) & 0x1F != cpu.MODE_USR:
                self.dead = f"was abandoned inside {what}"
                raise UserFault(f"{what}: stopped at {until:#x} outside user mode", k.console[mark:])
            return [m.reg(f"r{i}") for i in range(13)]
        finally:
            uc.context_restore(ctx)
            self._stack(sp, len(saved), saved)

    def _stack(self, va: int, n: int, data: bytes | None = None) -> bytes | None:
        """Read (or write) pid 1's kernel stack (vmalloc'ed: its pages' physical addresses are
        looked up once, not walked on every call)."""
        m, out, i = self.k.m, [], 0
        while i < n:
            page = (va + i) & ~(PAGE - 1)
            pa = self._stack_pa.get(page)
            if pa is None:
                pa = self._stack_pa[page] = m.translate(page)
            k = min(n - i, page + PAGE - (va + i))
            at = pa + (va + i - page)
            if data is None:
                out.append(m.pread(at, k))
            else:
                m.pwrite(at, data[i:i + k])
            i += k
        return b"".join(out) if data is None else None

    # --- the calls, with their arguments in user memory --------------------------------------
    def _path_call(self, name: str, path: str, *args: int) -> int:
        mark = self.mem.mark()
        try:
            return self.call(name, *args[:1], self.mem.string(path), *args[1:]) if name == "openat" else \
                self.call(name, self.mem.string(path), *args)
        finally:
            self.mem.release(mark)

    def openat(self, path: str, flags: int = O_RDWR, mode: int = 0) -> int:
        return self._path_call("openat", path, AT_FDCWD, flags, mode)

    def mkdir(self, path: str, mode: int = 0o755) -> int:
        return self._path_call("mkdir", path, mode)

    def mount(self, source: str, target: str, fstype: str, flags: int = 0) -> int:
        mark = self.mem.mark()
        try:
            return self.call("mount", self.mem.string(source), self.mem.string(target), self.mem.string(fstype),
                             flags, 0)
        finally:
            self.mem.release(mark)

    def read(self, fd: int, n: int) -> tuple[int, bytes]:
        mark = self.mem.mark()
        try:
            buf = self.mem.buffer(max(n, 1))
            r = self.call("read", fd, buf, n)
            return r, self.mem.read(buf, r) if r > 0 else b""
        finally:
            self.mem.release(mark)

    def write(self, fd: int, data: bytes) -> int:
        mark = self.mem.mark()
        try:
            return self.call("write", fd, self.mem.put(data), len(data))
        finally:
            self.mem.release(mark)

    def close(self, fd: int) -> int:
        return self.call("close", fd)


class File:
    """An open file of pid 1 (an fd from openat(2)); every method is one system call (mmap's
    read-back: user-mode loads). Errors raise OSError with the kernel's errno."""

    def __init__(self, sys: Syscalls, path: str, fd: int):
        self.sys, self.path, self.fd = sys, path, fd
        self.closed = False
        self.maps: list[tuple[int, int]] = []

    def _check(self, r: int, op: str) -> int:
        if r < 0:
            raise _oserror(r, f"{op} {self.path}")
        return r

    def _open(self):
        if self.closed:
            raise ValueError(f"I/O on closed file {self.path}")

    def read(self, n: int) -> bytes:
        self._open()
        r, data = self.sys.read(self.fd, n)
        self._check(r, "read")
        return data

    def write(self, data: bytes | str) -> int:
        self._open()
        return self._check(self.sys.write(self.fd, data.encode() if isinstance(data, str) else bytes(data)), "write")

    def lseek(self, offset: int, whence: int | str = 0) -> int:
        self._open()
        w = SEEK[whence] if isinstance(whence, str) else whence
        return self._check(self.sys.call("lseek", self.fd, offset, w), "lseek")

    def ioctl(self, cmd: int, arg: int | bytes = 0) -> tuple[int, bytes | None]:
        """ioctl(2): (its result, the user buffer after the call when `arg` is bytes)."""
        self._open()
        mark = self.sys.mem.mark()
        try:
            if not isinstance(arg, (bytes, bytearray)):
                return self._check(self.sys.call("ioctl", self.fd, cmd, arg), f"ioctl {cmd:#x}"), None
            ua = self.sys.mem.put(bytes(arg))
            r = self._check(self.sys.call("ioctl", self.fd, cmd, ua), f"ioctl {cmd:#x}")
            return r, self.sys.mem.read(ua, len(arg))
        finally:
            self.sys.mem.release(mark)

    def poll(self, events: int = POLLIN | POLLOUT | POLLPRI) -> int:
        """poll(2) on this fd alone with timeout 0: revents (0 when nothing is ready)."""
        self._open()
        mark = self.sys.mem.mark()
        try:
            pfd = self.sys.mem.put(struct.pack("<ihh", self.fd, events, 0))
            n = self._check(self.sys.call("poll", pfd, 1, 0), "poll")
            revents = struct.unpack("<ihh", self.sys.mem.read(pfd, 8))[2] & 0xFFFF
            if n != (1 if revents else 0):            # do_poll counts the descriptors with revents
                raise EmulationError(f"poll {self.path}: poll(2) returned {n} with revents {revents:#x}")
            return revents
        finally:
            self.sys.mem.release(mark)

    def mmap(self, length: int, prot: int = PROT_READ | PROT_WRITE, flags: int = MAP_SHARED, pgoff: int = 0) -> int:
        """mmap2(2): the user address of the mapping."""
        self._open()
        addr = self._check(self.sys.call("mmap2", 0, length, prot, flags, self.fd, pgoff), "mmap")
        self.maps.append((addr, length))
        return addr

    def peek(self, addr: int, n: int) -> bytes:
        """What user mode reads at addr (a mapping)."""
        return self.sys.peek(addr, n)

    def munmap(self, addr: int, length: int) -> int:
        r = self._check(self.sys.call("munmap", addr, length), "munmap")
        self.maps = [m for m in self.maps if m[0] != addr]
        return r

    def close(self) -> int:
        """close(2); the last fput's __fput (the driver's release) runs as the return to user mode
        runs the task work. Mappings made from this file keep it referenced until munmap."""
        if self.closed:
            return 0
        self.closed = True
        return self._check(self.sys.close(self.fd), "close")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Filesystem:
    """pid 1's filesystems, mounted through mount(2) on first use: devtmpfs on /dev (the
    initramfs's /dev), proc on /proc, sysfs on /sys, debugfs on /sys/kernel/debug."""

    MOUNTS = (("devtmpfs", "/dev"), ("proc", "/proc"), ("sysfs", "/sys"), ("debugfs", "/sys/kernel/debug"))

    def __init__(self, k, sys: Syscalls | None = None):
        self.sys = sys or Syscalls(k)
        self.mounted: dict[str, int] = {}

    def mount_all(self) -> dict[str, int]:
        """mkdir (EEXIST is fine) and mount each; the results by mount point (0 or -errno)."""
        if not self.mounted:
            for fstype, where in self.MOUNTS:
                r = self.sys.mkdir(where, 0o755)
                if r < 0 and r != -17:
                    raise _oserror(r, f"mkdir {where}")
                r = self.sys.mount(fstype, where, fstype)
                if r < 0:
                    raise _oserror(r, f"mount -t {fstype} {fstype} {where}")
                self.mounted[where] = r
        return self.mounted

    def open(self, path: str, flags: int = O_RDWR, mode: int = 0) -> File:
        self.mount_all()
        fd = self.sys.openat(path, flags, mode)
        if fd < 0:
            raise _oserror(fd, f"open {path}")
        return File(self.sys, path, fd)

    def cat(self, path: str, limit: int = CAT_LIMIT) -> bytes:
        """What `cat PATH` reads: read(2) in pages until 0 (end of file), `limit` bytes at most."""
        with self.open(path, O_RDONLY) as f:
            out = b""
            while len(out) < limit:
                chunk = f.read(min(PAGE, limit - len(out)))
                if not chunk:
                    break
                out += chunk
            return out

    def echo(self, value: str, path: str) -> int:
        """What `echo VALUE > PATH` does in a shell: open(O_WRONLY|O_CREAT|O_TRUNC, 0666), one write(2)
        of VALUE and a newline, close."""
        with self.open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o666) as f:
            return f.write(value + "\n")


def poll_names(mask: int) -> str:
    return "|".join(n for b, n in sorted(POLL_NAMES.items()) if mask & b) or "0"
