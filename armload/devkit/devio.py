"""Device I/O: open, read, write, ioctl, poll and close a device a module registered.

Until the booted kernel is available this goes THROUGH THE MODULE'S file_operations DIRECTLY,
not the kernel's VFS: no open(2)/read(2) path, no inode or dentry lookup, no f_op->open chain of
misc_open; what misc_open does before the driver's open (file->private_data = the miscdevice,
drivers/char/misc.c) is done here, from the module's DWARF layout of struct file. Buffers are
USER memory (Machine.user_alloc, below TASK_SIZE), so the module's copy_to_user/copy_from_user
and the kernel's __check_object_size run their real code on them; the file position is a
loff_t in kernel memory passed as the `pos` argument, as ksys_read() passes its local copy.
"""
from __future__ import annotations

import struct

from ..errors import EmulationError

VIA = "through the module's file_operations directly (not the kernel's VFS)"
# include/linux/fs.h (6.1) struct file_operations on 32-bit ARM: one pointer (4 bytes) each
FOPS = ("owner", "llseek", "read", "write", "read_iter", "write_iter", "iopoll", "iterate", "iterate_shared",
        "poll", "unlocked_ioctl", "compat_ioctl", "mmap", "mmap_supported_flags", "open", "flush", "release")
FOPS_OFFSET = {n: 4 * i for i, n in enumerate(FOPS)}
FILE_FALLBACK_SIZE = 0x100            # struct file without DWARF: zeroed, private_data not set


def devices(machine) -> dict[str, dict]:
    """/dev/NAME -> the registration record (misc_register: name, minor, fops, addr)."""
    return {f"/dev/{r['name']}": r for r in machine.registrations if r.get("call") == "misc_register"}


class DeviceFile:
    """One open file of a registered device. Each method runs a file_operations function and
    returns its result (negative: -errno) with the RunResult in `.last`; `check(res)` may raise."""

    def __init__(self, machine, path: str, *, module=None, check=None):
        devs = devices(machine)
        if path not in devs:
            raise EmulationError(f"{path}: no such device; registered: {', '.join(devs) or 'none'} "
                                 f"(only misc devices are modelled)")
        self.machine, self.path, self.reg = machine, path, devs[path]
        self.fops = self.reg["fops"]
        self.module = module
        self._check = check or (lambda res: res)
        self.last = None
        self.pos = 0
        self.notes: list[str] = []
        lay = None
        if module is not None:
            from ..emu.debuginfo import struct_layout
            lay = struct_layout(module, "file")
        size, members = lay if lay else (FILE_FALLBACK_SIZE, {})
        heap = machine.heap
        self.file = heap.alloc(size, zero=True, kind=f"struct file {path} (devio)")
        self.inode = heap.alloc(0x200, zero=True, kind=f"struct inode {path} (devio)")
        self._ppos = heap.alloc(8, zero=True, kind="loff_t pos (devio)")
        if "private_data" in members:
            machine.write(self.file + members["private_data"], struct.pack("<I", self.reg["addr"]))
        else:
            self.notes.append("file->private_data not set (no DWARF layout of struct file in the module)")
        self.closed = False
        rc = self._op("open", self.inode, self.file)
        if rc is not None and rc < 0:
            raise OSError(-rc, f"open {path}: {rc}")

    def fn(self, name: str) -> int:
        return struct.unpack("<I", self.machine.read(self.fops + FOPS_OFFSET[name], 4))[0]

    def _op(self, name: str, *args) -> int | None:
        if self.closed and name != "release":
            raise ValueError(f"I/O on closed file {self.path}")
        entry = self.fn(name)
        if not entry:
            return None
        res = self.machine.call(entry, [a & 0xFFFFFFFF for a in args], name=f"{self.path} {name}")
        self.last = res
        self._check(res)
        if res.status != "returned":
            raise EmulationError(f"{self.path} {name}: {res.summary()}")
        return res.retval

    def _user(self, data: bytes) -> int:
        return self.machine.user_alloc(data)

    def read(self, n: int) -> bytes:
        ubuf = self._user(bytes(n))
        self.machine.write(self._ppos, struct.pack("<q", self.pos))
        rc = self._op("read", self.file, ubuf, n, self._ppos)
        if rc is None:
            raise OSError(22, f"{self.path}: no read in its file_operations (EINVAL)")
        if rc < 0:
            raise OSError(-rc, f"read {self.path}: {rc}")
        self.pos = struct.unpack("<q", self.machine.read(self._ppos, 8))[0]
        return self.machine.read(ubuf, rc)

    def write(self, data: bytes) -> int:
        ubuf = self._user(bytes(data))
        self.machine.write(self._ppos, struct.pack("<q", self.pos))
        rc = self._op("write", self.file, ubuf, len(data), self._ppos)
        if rc is None:
            raise OSError(22, f"{self.path}: no write in its file_operations (EINVAL)")
        if rc < 0:
            raise OSError(-rc, f"write {self.path}: {rc}")
        self.pos = struct.unpack("<q", self.machine.read(self._ppos, 8))[0]
        return rc

    def ioctl(self, cmd: int, arg: int | bytes = 0) -> tuple[int, bytes | None]:
        """unlocked_ioctl(file, cmd, arg): (its return value, the user buffer after the call when
        `arg` is bytes: an in/out struct in user memory)."""
        buf = None
        if isinstance(arg, (bytes, bytearray)):
            buf = (self._user(bytes(arg)), len(arg))
            arg = buf[0]
        rc = self._op("unlocked_ioctl", self.file, cmd, arg)
        if rc is None:
            rc = -25                                      # vfs_ioctl: no unlocked_ioctl -> -ENOTTY
        return rc, (self.machine.read(*buf) if buf else None)

    def poll(self) -> int | None:
        """f_op->poll(file, NULL): the event mask (None: no poll, DEFAULT_POLLMASK in vfs_poll)."""
        return self._op("poll", self.file, 0)

    def close(self) -> None:
        if not self.closed:
            self._op("release", self.inode, self.file)
            self.closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
