"""A module's files from a test: its device nodes, sysfs attributes, parameters, debugfs and
/proc files, through real system calls of pid 1 in the booted kernel (armload/emu/booted/user.py).

    files = ModuleFiles(run, "vfsdev")           # run: a BootedRun with the module loaded
    with files.open("/dev/vfsdev") as f:         # openat(2): File (read/write/lseek/ioctl/poll/mmap/close)
        f.write(b"hello"); f.lseek(0); assert f.read(5) == b"hello"
    files.param("fill")                          # '118' (/sys/module/vfsdev/parameters/fill)
    files.param("fill", 65)                      # echo 65 > .../parameters/fill
    files.sysfs("initstate")                     # 'live' (/sys/module/vfsdev/initstate)
    files.cat("/proc/vfsdev"); files.echo("7", "/sys/kernel/debug/vfsdev/writes")

Errors are the kernel's errno as OSError (FileNotFoundError for ENOENT, ...); an oops in a system
call raises UserFault with the kernel's report (pid 1 is dead then: nothing more runs).
"""
from __future__ import annotations

from ..emu.booted.user import O_RDONLY, O_RDWR, O_WRONLY, File, Filesystem

FLAGS = {"r": O_RDONLY, "w": O_WRONLY, "rw": O_RDWR}


class ModuleFiles:
    def __init__(self, run, name: str):
        self.run, self.name = run, name
        self._fs = None

    @property
    def fs(self) -> Filesystem:
        if self._fs is None:
            self._fs = Filesystem(self.run.bk)
        return self._fs

    def open(self, path: str, mode: str = "rw") -> File:
        """openat(path, O_RDONLY|O_WRONLY|O_RDWR for "r"|"w"|"rw")."""
        if mode not in FLAGS:
            raise ValueError(f"open {path}: mode {mode!r} is one of r, w, rw")
        return self.fs.open(path, FLAGS[mode])

    def cat(self, path: str) -> str:
        """What `cat path` prints (read(2) to the end), as text."""
        return self.fs.cat(path).decode("utf-8", "replace")

    def echo(self, value, path: str) -> int:
        """`echo value > path`: the bytes write(2) took (value and a newline)."""
        return self.fs.echo(_text(value), path)

    def sysfs(self, attr: str, value=None) -> str | int:
        """/sys/module/NAME/ATTR (or an absolute path): read, the trailing newline dropped; with a
        value, written as echo writes it (the bytes taken)."""
        path = attr if attr.startswith("/") else f"/sys/module/{self.name}/{attr}"
        if value is not None:
            return self.echo(value, path)
        return self.cat(path).removesuffix("\n")

    def param(self, name: str, value=None) -> str | int:
        """The module parameter at run time: /sys/module/NAME/parameters/PARAM (its 0644 or 0444
        mode is the kernel's to enforce)."""
        return self.sysfs(f"parameters/{name}", value)


def _text(value) -> str:
    if isinstance(value, bool):
        return "Y" if value else "N"
    return str(value)


class FileMethods:
    """ModuleHandle's file operations (mix in): `self.kernel` is its BootedRun, `self.name` the
    module's name. `mod.open("/dev/X")`, `mod.cat(path)`, `mod.echo(value, path)`,
    `mod.sysfs("parameters/fill")` / `mod.sysfs("parameters/fill", 65)`."""

    @property
    def files(self) -> ModuleFiles:
        f = getattr(self, "_files", None)
        if f is None or f.run is not self.kernel:
            f = self._files = ModuleFiles(self.kernel, self.name)
        return f

    def open(self, path: str, mode: str = "rw") -> File:
        return self.files.open(path, mode)

    def cat(self, path: str) -> str:
        return self.files.cat(path)

    def echo(self, value, path: str) -> int:
        return self.files.echo(value, path)

    def sysfs(self, attr: str, value=None) -> str | int:
        return self.files.sysfs(attr, value)
