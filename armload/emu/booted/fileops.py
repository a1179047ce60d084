"""File operations in command-line form (armload run's --open/--write/--read/--lseek/--ioctl/--poll/
--mmap/--close/--cat/--echo; the QEMU oracle's plan lines): checked before anything runs, then
made as real system calls of pid 1's user mode (user.py), one record each.

An errno is a result, not a failure (the run fails on an oops, a signal or the budget).
"""
from __future__ import annotations

from ...errors import EmulationError
from ..errno import errno_name
from .user import CAT_LIMIT

VIA = "real system calls from pid 1's user mode through the kernel's VFS"
FILE_OPS = ("write", "read", "lseek", "ioctl", "poll", "mmap", "close")
PEEK_SHOWN = 64                      # bytes of a mapping printed (--json has them all)


def dev_bytes(spec: str, what: str) -> bytes:
    if spec.startswith("s:"):
        return spec[2:].encode()
    if spec.startswith("b:"):
        try:
            return bytes.fromhex(spec[2:])
        except ValueError:
            pass
    if spec.startswith("buf:") and spec[4:].isdigit():
        return bytes(int(spec[4:]))
    raise EmulationError(f"{what} {spec!r}: s:TEXT, b:HEX or buf:N")


def _num(s: str, what: str) -> int:
    try:
        return int(s, 0)
    except ValueError:
        raise EmulationError(f"{what} {s!r}: not an integer") from None


def _seek(spec: str) -> tuple[int, str]:
    off, _, whence = spec.partition(":")
    whence = whence or "set"
    if whence not in ("set", "cur", "end"):
        raise EmulationError(f"--lseek {spec!r}: OFF, OFF:cur or OFF:end")
    return _num(off, "--lseek"), whence


def _is_buf(spec: str) -> bool:
    return spec.startswith(("s:", "b:", "buf:"))


def parse_ops(ops) -> list[tuple[str, list[str], tuple]]:
    """Check the operations before anything runs (a file open first, arguments well formed) and
    parse them once: (op, its words, its values) each, e.g. ("ioctl", ["0x10", "buf:4"], (16, bytes(4)))."""
    opened, out = False, []
    for op, vals in ops:
        if op in ("open", "cat"):
            if not vals[0].startswith("/"):
                raise EmulationError(f"--{op} {vals[0]}: an absolute path")
            opened = opened or op == "open"
            args = (vals[0],)
        elif op == "echo":
            if not vals[1].startswith("/"):
                raise EmulationError(f"--echo {vals[0]} {vals[1]}: an absolute path")
            args = (vals[0], vals[1])
        elif not opened:
            raise EmulationError(f"--{op} needs an --open PATH before it")
        elif op == "write":
            args = (dev_bytes(vals[0], "--write"),)
        elif op in ("read", "mmap"):
            args = (_num(vals[0], f"--{op}"),)
            if args[0] <= 0:
                raise EmulationError(f"--{op} {vals[0]}: a positive byte count")
        elif op == "lseek":
            args = _seek(vals[0])
        elif op == "ioctl":
            args = (_num(vals[0], "--ioctl CMD"),
                    dev_bytes(vals[1], "--ioctl ARG") if _is_buf(vals[1]) else _num(vals[1], "--ioctl ARG"))
        elif op in ("poll", "close"):
            opened = opened and op != "close"
            args = ()
        else:
            raise EmulationError(f"--{op}: not a file operation ({', '.join(('open', 'cat', 'echo') + FILE_OPS)})")
        out.append((op, list(vals), args))
    return out


def _describe(op: str, vals: list[str], args: tuple) -> str:
    """The call as printed: ioctl(0x7601, buf:4), lseek(1, SEEK_CUR), ..."""
    if op == "lseek":
        return f"lseek({args[0]}, SEEK_{args[1].upper()})"
    if op == "poll":
        return "poll(POLLIN|POLLPRI|POLLOUT, timeout 0)"
    if op == "mmap":
        return f"mmap({vals[0]}, PROT_READ|PROT_WRITE, MAP_SHARED)"
    if op in ("cat", "echo", "open", "close"):
        return op
    return f"{op}({', '.join(vals)})"


def _ret(r: int) -> str:
    return f"{r} (-{errno_name(r)})" if r < 0 else str(r)


def _text(b: bytes) -> str:
    return "".join(chr(c) if 32 <= c < 127 else "." for c in b)


class DevioRun:
    """The operations on one booted kernel (a BootedRun's), one record each."""

    def __init__(self, bk, say, on_oops=None):
        from .user import Filesystem
        self.bk, self.say = bk, say
        self.fs = Filesystem(bk)
        self.on_oops = on_oops             # fn(UserFault) when a call oopsed (the caller decodes it)
        self.fault = None
        self.file = None
        self.opened: list = []
        self.records: list[dict] = []

    def run(self, ops) -> bool:
        """All operations (checked first: parse_ops); False when one did not come back (an oops, a
        signal, the budget)."""
        from .user import UserFault
        ops = parse_ops(ops)
        mounts = self.fs.mount_all()
        self.say(f"armload: file operations are {VIA}; mounted {', '.join(mounts)} (mount(2): "
                 f"{', '.join(t for t, _ in self.fs.MOUNTS)})")
        for op, vals, args in ops:
            rec = {"op": op, "args": vals}
            self.records.append(rec)
            i0, n0 = self.fs.sys.insns, self.fs.sys.count
            try:
                self._one(op, vals, args, rec)
            except UserFault as e:
                for line in e.console:
                    self.say(line)
                rec["error"] = str(e)
                self.fault = e
                self.say(f"armload: {e}")
                if e.oops and self.on_oops:
                    self.on_oops(e)
                return False
            rec["syscalls"], rec["instructions"] = self.fs.sys.count - n0, self.fs.sys.insns - i0
        self.finish()
        s = self.fs.sys
        if s.count:
            self.say(f"armload: {s.count} system calls, {s.insns:,} instructions ({s.insns // s.count:,} per call, "
                     f"entry, kernel and the return to user mode)")
        return True

    def _one(self, op: str, vals: list[str], args: tuple, rec: dict) -> None:
        f = self.file
        if op in FILE_OPS and (f is None or f.closed):
            rec["result"] = None
            rec["note"] = "not run: no open file (its open failed)"
            self.say(f"--{op}: not run (no open file: its open failed)")
            return
        where = vals[-1] if op in ("open", "cat", "echo") else f.path
        call = _describe(op, vals, args)
        try:
            if op == "open":
                self.file = f = self.fs.open(args[0])
                self.opened.append(f)
                rec["result"] = f.fd
                self.say(f"{where}: open = {f.fd}")
            elif op == "write":
                n = f.write(args[0])
                rec["result"] = n
                self.say(f"{where}: {call} = {n}")
            elif op == "read":
                data = f.read(args[0])
                rec["result"], rec["hex"] = len(data), data.hex()
                self.say(f"{where}: {call} = {len(data)}  {data.hex()}  '{_text(data)}'")
            elif op == "lseek":
                pos = f.lseek(*args)
                rec["result"] = pos
                self.say(f"{where}: {call} = {pos}")
            elif op == "ioctl":
                r, buf = f.ioctl(*args)
                rec["result"] = r
                if buf is not None:
                    rec["hex"] = buf.hex()
                self.say(f"{where}: {call} = {r}" + (f"  buffer {buf.hex()}" if buf is not None else ""))
            elif op == "poll":
                from .user import poll_names
                rev = f.poll()
                rec["result"] = rev
                rec["revents"] = poll_names(rev)
                self.say(f"{where}: {call}: revents {rev:#x} ({poll_names(rev)})")
            elif op == "mmap":
                n = args[0]
                addr = f.mmap(n)
                data = f.peek(addr, n)
                rec["result"], rec["addr"], rec["hex"] = 0, addr, data.hex()
                shown = data[:PEEK_SHOWN]
                self.say(f"{where}: {call} = {addr:#x}; user mode reads "
                         f"{shown.hex()}{'...' if n > PEEK_SHOWN else ''}  '{_text(shown)}'")
            elif op == "close":
                r = f.close()
                rec["result"] = r
                self.say(f"{where}: close = {r}")
            elif op == "cat":
                data = self.fs.cat(args[0])
                rec["result"], rec["hex"], rec["text"] = len(data), data.hex(), data.decode("utf-8", "replace")
                more = ""
                if len(data) >= CAT_LIMIT:
                    rec["truncated"] = True
                    more = f"  (the first {CAT_LIMIT:,} bytes: armload's cat stops there)"
                self.say(f"cat {where} = {len(data)}  '{data.decode('utf-8', 'replace').rstrip(chr(10))}'{more}")
            elif op == "echo":
                n = self.fs.echo(*args)
                rec["result"] = n
                self.say(f"echo {vals[0]} > {where} = {n}")
        except OSError as e:
            rec["result"] = -e.errno
            rec["errno"] = errno_name(-e.errno)
            self.say(f"{where}: {call} = {_ret(-e.errno)}" if op != "echo" else
                     f"echo {vals[0]} > {where} = {_ret(-e.errno)}")

    def finish(self) -> list[str]:
        """What the exit of a process that made these calls would do: munmap its mappings and
        close its open files (so the module is not kept busy); the lines said."""
        done = []
        for f in self.opened:
            for addr, n in list(f.maps):
                f.munmap(addr, n)
                done.append(f"munmap({addr:#x}, {n})")
            if not f.closed:
                f.close()
                done.append(f"close({f.fd})")
        if done:
            self.say(f"armload: at the end, as the process's exit would: {', '.join(done)}")
        return done
