"""Kernel stub library: Python behaviour for the kernel functions a module calls.

Every external function a module uses is backed by real code at its kernel address (a
`bx lr`, or for `__gnu_mcount_nc` its real calling convention), and a code hook on the stub
range calls the Python handler registered here for that name just before the return runs.
The handler's return value goes to r0 (a 2-tuple sets r0 and r1), so control comes back to
the module through the ordinary ARM calling convention.

Adding or overriding a handler from Python::

    from armload.stubs import default_library

    stubs = default_library()            # a private copy of the built-in table

    @stubs.handler("kmalloc", "__kmalloc", "kmalloc_trace", nargs=3)
    def no_memory(call):                 # call: StubCall
        return 0                         # every allocation fails -> init returns -ENOMEM

    stubs.returns("misc_register", -16)  # shorthand for a constant result (-EBUSY)

    Machine(module, kernel, stubs=stubs).run_init()

A handler gets a `StubCall` with the arguments (`call.arg(i)`, `call.sarg(i)`,
`call.varargs(i)` for printf-style lists), memory helpers (`read`, `write`, `u32`,
`string`), the machine (`call.machine.heap`, `.log`, `.registrations`), and may set other
registers (`call.set_reg("r1", v)`) or stop the run with a report (`call.fault("...")`).
Names without a handler return 0 and are recorded in the call trace like every other call.
Patterns (`fnmatch` style, e.g. ``"register_*"``) apply when no exact name matches.
"""
from __future__ import annotations

import fnmatch
import struct
from dataclasses import dataclass
from typing import Callable

from .errors import EmulationError

ENOMEM = 12
EINVAL = 22

# ARM and Thumb encodings of the small pieces of real code a stub page holds.
ARM_BX_LR = struct.pack("<I", 0xE12FFF1E)
THUMB_BX_LR = struct.pack("<H", 0x4770)
# __gnu_mcount_nc, called as `push {lr}; bl __gnu_mcount_nc`: return to the caller with its
# original lr popped from the stack (mov ip, lr; pop {lr}; bx ip).
ARM_MCOUNT = struct.pack("<III", 0xE1A0C00E, 0xE49DE004, 0xE12FFF1C)
THUMB_MCOUNT = struct.pack("<HHHH", 0x46F4, 0xF85D, 0xEB04, 0x4760)
ARM_UDF = struct.pack("<I", 0xE7F001F2)       # the kernel's BUG() instruction
THUMB_UDF = struct.pack("<H", 0xDE02)


class StubFault(Exception):
    """Raised by a handler (through `StubCall.fault`) to stop the run with a report."""

    def __init__(self, message: str, kind: str = "stub"):
        super().__init__(message)
        self.kind = kind


@dataclass
class Stub:
    name: str
    fn: Callable[["StubCall"], object] | None
    nargs: int = 4
    kind: str = "call"           # call, alloc, free, register, lock, log, string, ...
    code: tuple[bytes, bytes] | None = None   # (arm, thumb) machine code replacing `bx lr`
    varargs: int | None = None   # index of the format argument of a printf-like function


class StubLibrary:
    """name -> Stub table, plus fnmatch patterns tried in order when no exact name matches."""

    def __init__(self):
        self._exact: dict[str, Stub] = {}
        self._patterns: list[tuple[str, Stub]] = []
        self._data: dict[str, bytes] = {}      # kernel data symbol -> initial contents

    def handler(self, *names: str, nargs: int = 4, kind: str = "call", varargs: int | None = None,
                code: tuple[bytes, bytes] | None = None):
        """Decorator: register `fn(call) -> int | (r0, r1) | None` for every name (or pattern)."""
        def deco(fn):
            for n in names:
                self.set(n, fn, nargs=nargs, kind=kind, varargs=varargs, code=code)
            return fn
        return deco

    def set(self, name: str, fn, *, nargs: int = 4, kind: str = "call", varargs: int | None = None,
            code: tuple[bytes, bytes] | None = None) -> None:
        stub = Stub(name, fn, nargs, kind, code, varargs)
        if any(c in name for c in "*?["):
            self._patterns = [(p, s) for p, s in self._patterns if p != name]
            self._patterns.append((name, stub))
        else:
            self._exact[name] = stub

    def returns(self, name: str, value: int, nargs: int = 4) -> None:
        """Make `name` return a constant (e.g. 0 for kmalloc to simulate allocation failure)."""
        prev = self._exact.get(name)
        self.set(name, lambda call, _v=value: _v, nargs=prev.nargs if prev else nargs,
                 kind=prev.kind if prev else "call")

    def remove(self, name: str) -> None:
        self._exact.pop(name, None)
        self._patterns = [(p, s) for p, s in self._patterns if p != name]

    def get(self, name: str) -> Stub | None:
        s = self._exact.get(name)
        if s is not None:
            return s
        for pat, stub in reversed(self._patterns):
            if fnmatch.fnmatchcase(name, pat):
                return stub
        return None

    def set_data(self, name: str, contents: bytes) -> None:
        """Initial contents of a kernel data symbol (the rest of its object stays zero)."""
        self._data[name] = bytes(contents)

    def data(self, name: str) -> bytes | None:
        return self._data.get(name)

    def copy(self) -> "StubLibrary":
        c = StubLibrary()
        c._exact = dict(self._exact)
        c._patterns = list(self._patterns)
        c._data = dict(self._data)
        return c

    def names(self) -> list[str]:
        return sorted(self._exact) + [p for p, _ in self._patterns]


DEFAULT = StubLibrary()
stub = DEFAULT.handler        # decorator for the built-in table


def default_library() -> StubLibrary:
    """A private copy of the built-in stubs, safe to modify."""
    return DEFAULT.copy()


# --------------------------------------------------------------------------------------------
# The view of one call that a handler receives
# --------------------------------------------------------------------------------------------
class StubCall:
    """One call into the kernel: arguments, memory access, and the machine."""

    __slots__ = ("machine", "name", "addr", "lr", "sp", "regs", "stub", "extra_regs", "note")

    def __init__(self, machine, name: str, addr: int, regs: list[int], lr: int, sp: int, stub):
        self.machine = machine
        self.name = name
        self.addr = addr
        self.regs = regs          # r0..r3 at entry
        self.lr = lr
        self.sp = sp
        self.stub = stub
        self.extra_regs: dict[str, int] = {}
        self.note: str | None = None    # shown in the trace after the return value

    # arguments (AAPCS: r0-r3, then the stack)
    def arg(self, i: int) -> int:
        if i < 4:
            return self.regs[i]
        return self.u32(self.sp + 4 * (i - 4))

    def sarg(self, i: int) -> int:
        v = self.arg(i)
        return v - (1 << 32) if v & 0x80000000 else v

    def args(self, n: int) -> list[int]:
        return [self.arg(i) for i in range(n)]

    def varargs(self, first: int) -> "ArgReader":
        """printf-style arguments starting at argument index `first`."""
        return ArgReader(self, first)

    def va_list(self, ptr: int) -> "ArgReader":
        """Arguments of a va_list (on ARM EABI: a pointer to the saved arguments)."""
        return MemArgReader(self, ptr)

    # memory
    def read(self, addr: int, n: int) -> bytes:
        return self.machine.read(addr, n)

    def write(self, addr: int, data: bytes) -> None:
        self.machine.write(addr, data)

    def u32(self, addr: int) -> int:
        return struct.unpack("<I", self.machine.read(addr, 4))[0]

    def put_u32(self, addr: int, value: int) -> None:
        self.machine.write(addr, struct.pack("<I", value & 0xFFFFFFFF))

    def string(self, addr: int, limit: int = 4096) -> bytes:
        return self.machine.read_cstring(addr, limit)

    def text(self, addr: int, limit: int = 4096) -> str:
        return self.string(addr, limit).decode("utf-8", "replace")

    def set_reg(self, name: str, value: int) -> None:
        self.extra_regs[name] = value & 0xFFFFFFFF

    def fault(self, message: str, kind: str = "stub"):
        raise StubFault(message, kind)

    def symbolize(self, addr: int) -> str:
        return self.machine.symbolize(addr)


class ArgReader:
    """Walks printf-style arguments through r0-r3 and the stack, with AAPCS 64-bit alignment."""

    def __init__(self, call: StubCall, first: int):
        self.call = call
        self.i = first

    def next32(self) -> int:
        v = self.call.arg(self.i)
        self.i += 1
        return v

    def next64(self) -> int:
        if self.i < 4:
            if self.i % 2:
                self.i += 1            # an even register pair
            if self.i < 4:
                lo, hi = self.call.arg(self.i), self.call.arg(self.i + 1)
                self.i += 2
                return lo | (hi << 32)
        off = self.i - 4
        if off % 2:
            self.i += 1                # 8-byte aligned stack slot (the stack starts 8-aligned)
        lo, hi = self.call.arg(self.i), self.call.arg(self.i + 1)
        self.i += 2
        return lo | (hi << 32)


class MemArgReader(ArgReader):
    def __init__(self, call: StubCall, ptr: int):
        self.call = call
        self.ptr = ptr

    def next32(self) -> int:
        v = self.call.u32(self.ptr)
        self.ptr += 4
        return v

    def next64(self) -> int:
        self.ptr = (self.ptr + 7) & ~7
        lo, hi = self.call.u32(self.ptr), self.call.u32(self.ptr + 4)
        self.ptr += 8
        return lo | (hi << 32)


# --------------------------------------------------------------------------------------------
# vsnprintf, as lib/vsprintf.c formats (the common subset)
# --------------------------------------------------------------------------------------------
_ERRNAMES = {1: "EPERM", 2: "ENOENT", 3: "ESRCH", 4: "EINTR", 5: "EIO", 6: "ENXIO", 7: "E2BIG",
             8: "ENOEXEC", 9: "EBADF", 10: "ECHILD", 11: "EAGAIN", 12: "ENOMEM", 13: "EACCES",
             14: "EFAULT", 16: "EBUSY", 17: "EEXIST", 19: "ENODEV", 20: "ENOTDIR", 21: "EISDIR",
             22: "EINVAL", 23: "ENFILE", 24: "EMFILE", 25: "ENOTTY", 28: "ENOSPC", 32: "EPIPE",
             34: "ERANGE", 38: "ENOSYS", 95: "EOPNOTSUPP", 110: "ETIMEDOUT", 517: "EPROBE_DEFER"}


def errno_name(e: int) -> str:
    return _ERRNAMES.get(abs(e), str(abs(e)))


def _s32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


def _s64(v: int) -> int:
    v &= 0xFFFFFFFFFFFFFFFF
    return v - (1 << 64) if v >> 63 else v


def format_kernel(call: StubCall, fmt: bytes, args: ArgReader) -> str:
    """Format `fmt` with arguments from emulated memory, like the kernel's vsnprintf."""
    out: list[str] = []
    i, n = 0, len(fmt)
    while i < n:
        c = fmt[i]
        if c != 0x25:        # '%'
            j = fmt.find(b"%", i)
            j = n if j < 0 else j
            out.append(fmt[i:j].decode("utf-8", "replace"))
            i = j
            continue
        i += 1
        if i >= n:
            break
        if fmt[i] == 0x25:
            out.append("%")
            i += 1
            continue
        flags = ""
        while i < n and chr(fmt[i]) in "-+ #0":
            flags += chr(fmt[i])
            i += 1
        width = None
        if i < n and fmt[i] == 0x2A:     # '*'
            width = _s32(args.next32())
            if width < 0:
                flags += "-"
                width = -width
            i += 1
        else:
            s = i
            while i < n and 0x30 <= fmt[i] <= 0x39:
                i += 1
            width = int(fmt[s:i]) if i > s else None
        prec = None
        if i < n and fmt[i] == 0x2E:     # '.'
            i += 1
            if i < n and fmt[i] == 0x2A:
                prec = max(_s32(args.next32()), 0)
                i += 1
            else:
                s = i
                while i < n and 0x30 <= fmt[i] <= 0x39:
                    i += 1
                prec = int(fmt[s:i] or b"0")
        qual = ""
        while i < n and chr(fmt[i]) in "hlLqjzt":
            qual += chr(fmt[i])
            i += 1
        if i >= n:
            break
        conv = chr(fmt[i])
        i += 1
        wide = qual in ("ll", "L", "q", "j")
        if conv in "di":
            v = _s64(args.next64()) if wide else _s32(args.next32())
            if qual == "hh":
                v = ((v & 0xFF) ^ 0x80) - 0x80
            elif qual == "h":
                v = ((v & 0xFFFF) ^ 0x8000) - 0x8000
            out.append(_pad_num(str(abs(v)), v < 0, flags, width, prec))
        elif conv in "uxXo":
            v = args.next64() if wide else args.next32()
            if qual == "hh":
                v &= 0xFF
            elif qual == "h":
                v &= 0xFFFF
            digits = {"u": f"{v}", "x": f"{v:x}", "X": f"{v:X}", "o": f"{v:o}"}[conv]
            prefix = ""
            if "#" in flags and v:
                prefix = {"x": "0x", "X": "0X", "o": "0"}.get(conv, "")
            out.append(_pad_num(digits, False, flags.replace("+", "").replace(" ", ""), width, prec, prefix))
        elif conv == "c":
            out.append(_pad_str(chr(args.next32() & 0xFF), flags, width))
        elif conv == "s":
            p = args.next32()
            if p < 4096:
                s = "(null)" if p == 0 else "(efault)"
            else:
                try:
                    s = call.string(p, prec if prec is not None else 4096).decode("utf-8", "replace")
                except Exception:
                    s = "(efault)"
            if prec is not None:
                s = s[:prec]
            out.append(_pad_str(s, flags, width))
        elif conv == "p":
            p = args.next32()
            ext = ""
            while i < n and (chr(fmt[i]).isalnum()):
                ext += chr(fmt[i])
                i += 1
            out.append(_pad_str(_format_pointer(call, p, ext, width), flags, width if not ext else None))
        elif conv == "n":
            args.next32()
        else:
            out.append("%" + flags + qual + conv)
    return "".join(out)


def _pad_num(digits: str, neg: bool, flags: str, width, prec, prefix: str = "") -> str:
    if prec is not None:
        digits = digits.rjust(prec, "0")
        if prec == 0 and digits == "0":
            digits = ""
    sign = "-" if neg else ("+" if "+" in flags else (" " if " " in flags else ""))
    body = sign + prefix + digits
    if width and len(body) < width:
        if "-" in flags:
            body = body.ljust(width)
        elif "0" in flags and prec is None:
            body = sign + prefix + digits.rjust(width - len(sign) - len(prefix), "0")
        else:
            body = body.rjust(width)
    return body


def _pad_str(s: str, flags: str, width) -> str:
    if width and len(s) < width:
        return s.ljust(width) if "-" in flags else s.rjust(width)
    return s


def _format_pointer(call: StubCall, p: int, ext: str, width) -> str:
    e = ext[:1]
    if e in ("S", "s", "F", "f", "B"):
        sym = call.symbolize(p)
        if e in ("s", "f") and "+" in sym:
            sym = sym.split("+")[0]
        return sym
    if e == "x":
        return f"{p:08x}"
    if e == "e":
        v = _s32(p)
        return f"-{errno_name(v)}" if -4095 <= v < 0 else f"{p:08x}"
    if e == "M" or e == "m":
        try:
            b = call.read(p, 6)
        except Exception:
            return "(efault)"
        return (":" if e == "M" else "").join(f"{x:02x}" for x in b)
    if ext.startswith("I4") or ext.startswith("i4"):
        try:
            b = call.read(p, 4)
        except Exception:
            return "(efault)"
        return ".".join(str(x) for x in b)
    if e == "h":
        n = width if width else 1
        try:
            b = call.read(p, min(n, 64))
        except Exception:
            return "(efault)"
        sep = {"C": ":", "D": "-", "N": ""}.get(ext[1:2], " ")
        return sep.join(f"{x:02x}" for x in b)
    if e == "a":
        try:
            return f"0x{call.u32(p):08x}"
        except Exception:
            return "(efault)"
    if p == 0:
        return "00000000"
    # Plain %p (and %pK): the kernel hashes pointers; armload shows them unhashed
    # (as with no_hash_pointers) so that traces can be matched against addresses.
    return f"{p:08x}"


# --------------------------------------------------------------------------------------------
# Built-in handlers
# --------------------------------------------------------------------------------------------
def _printk_common(call: StubCall, fmt_ptr: int, args: ArgReader, prefix: str = "") -> int:
    raw = call.string(fmt_ptr, 1024)
    level = None
    cont = False
    while len(raw) >= 2 and raw[0] == 1:          # KERN_SOH + level char
        ch = chr(raw[1])
        if ch.isdigit():
            level = int(ch)
        elif ch == "c":
            cont = True
        raw = raw[2:]
    text = format_kernel(call, raw, args)
    call.machine.log.printk(prefix + text, level=level, cont=cont)
    return len(text)


@stub("printk", "_printk", kind="log", varargs=0)
def _h_printk(call):
    return _printk_common(call, call.arg(0), call.varargs(1))


@stub("vprintk", "_vprintk", kind="log", nargs=2)
def _h_vprintk(call):
    return _printk_common(call, call.arg(0), call.va_list(call.arg(1)))


def _dev_prefix(call: StubCall, dev: int) -> str:
    # struct device's layout depends on the config; show the pointer like an unnamed device.
    return f"(device {dev:08x}): " if dev else "(NULL device *): "


def _make_dev_printk(level: int):
    def h(call):
        return _printk_common(call, call.arg(1), call.varargs(2), _dev_prefix(call, call.arg(0)))
    return h


for _lvl, _names in ((0, ("_dev_emerg",)), (1, ("_dev_alert",)), (2, ("_dev_crit",)),
                     (3, ("_dev_err",)), (4, ("_dev_warn",)), (5, ("_dev_notice",)),
                     (6, ("_dev_info",))):
    DEFAULT.handler(*_names, kind="log", varargs=1)(_make_dev_printk(_lvl))


@stub("dev_printk", kind="log", varargs=2)
def _h_dev_printk(call):
    return _printk_common(call, call.arg(2), call.varargs(3), _dev_prefix(call, call.arg(1)))


@stub("__warn_printk", kind="log", varargs=0)
def _h_warn_printk(call):
    return _printk_common(call, call.arg(0), call.varargs(1), "WARNING: ")


@stub("warn_slowpath_fmt", kind="log", varargs=2)
def _h_warn_slowpath(call):
    where = f"{call.text(call.arg(0))}:{call.arg(1)}" if call.arg(0) else "?"
    call.machine.log.printk(f"WARNING: at {where}", level=4)
    if call.arg(3):
        _printk_common(call, call.arg(3), call.varargs(4))
    return 0


@stub("panic", kind="fatal", varargs=0)
def _h_panic(call):
    msg = format_kernel(call, call.string(call.arg(0), 1024), call.varargs(1))
    call.machine.log.printk("Kernel panic - not syncing: " + msg, level=0)
    call.fault(f"kernel panic: {msg.strip()}", "panic")


@stub("__stack_chk_fail", kind="fatal")
def _h_stack_chk(call):
    call.fault("stack-protector: kernel stack is corrupted in: " + call.symbolize(call.lr), "stack-protector")


@stub("__bug", "__bad_udelay", "__bad_xchg", "__bad_cmpxchg", kind="fatal")
def _h_bug(call):
    call.fault(f"{call.name} called from {call.symbolize(call.lr)}", "bug")


@stub("__gnu_mcount_nc", nargs=0, kind="ftrace", code=(ARM_MCOUNT, THUMB_MCOUNT))
def _h_mcount(call):
    # The real code at the stub pops the caller's lr; r0 (a live argument of the traced
    # function) must be preserved, so this handler returns r0 unchanged.
    return call.regs[0]


# --- heap --------------------------------------------------------------------------------
___GFP_ZERO = 0x100      # 6.1 gfp_types


def _alloc(call, size: int, flags: int = 0, zero: bool = False, kind: str = "kmalloc") -> int:
    return call.machine.heap.alloc(size, zero=zero or bool(flags & ___GFP_ZERO), kind=kind,
                                   caller=call.lr)


@stub("kmalloc", "__kmalloc", "kmalloc_large", "kmalloc_node", "__kmalloc_node",
      "kvmalloc", "kvmalloc_node", "__kvmalloc_node", "kmalloc_order", "kmalloc_order_trace",
      nargs=2, kind="alloc")
def _h_kmalloc(call):
    return _alloc(call, call.arg(0), call.arg(1))


@stub("kzalloc", "kvzalloc", nargs=2, kind="alloc")
def _h_kzalloc(call):
    return _alloc(call, call.arg(0), call.arg(1), zero=True)


@stub("kmalloc_trace", "kmalloc_node_trace", nargs=3, kind="alloc")
def _h_kmalloc_trace(call):
    # kmalloc_trace(struct kmem_cache *s, gfp_t flags, size_t size)
    return _alloc(call, call.arg(2), call.arg(1))


@stub("kcalloc", "kmalloc_array", nargs=3, kind="alloc")
def _h_kcalloc(call):
    n, size = call.arg(0), call.arg(1)
    return _alloc(call, n * size, call.arg(2), zero=call.name == "kcalloc")


@stub("krealloc", "__krealloc", nargs=3, kind="alloc")
def _h_krealloc(call):
    heap = call.machine.heap
    old, size = call.arg(0), call.arg(1)
    new = _alloc(call, size, call.arg(2))
    if new and old and old in heap.live:
        n = min(heap.live[old].size, size)
        call.write(new, call.read(old, n))
        heap.free(old, caller=call.lr)
    return new


@stub("kmemdup", nargs=3, kind="alloc")
def _h_kmemdup(call):
    p = _alloc(call, call.arg(1), call.arg(2))
    if p:
        call.write(p, call.read(call.arg(0), call.arg(1)))
    return p


@stub("kstrdup", "kstrdup_const", nargs=2, kind="alloc")
def _h_kstrdup(call):
    if not call.arg(0):
        return 0
    s = call.string(call.arg(0)) + b"\0"
    p = _alloc(call, len(s), call.arg(1))
    if p:
        call.write(p, s)
    return p


@stub("vmalloc", "__vmalloc", "vmalloc_user", nargs=1, kind="alloc")
def _h_vmalloc(call):
    return _alloc(call, call.arg(0), kind="vmalloc")


@stub("vzalloc", nargs=1, kind="alloc")
def _h_vzalloc(call):
    return _alloc(call, call.arg(0), zero=True, kind="vmalloc")


@stub("devm_kmalloc", nargs=3, kind="alloc")
def _h_devm_kmalloc(call):
    return _alloc(call, call.arg(1), call.arg(2), kind="devm")


@stub("devm_kzalloc", nargs=3, kind="alloc")
def _h_devm_kzalloc(call):
    return _alloc(call, call.arg(1), call.arg(2), zero=True, kind="devm")


@stub("__get_free_pages", "get_zeroed_page", nargs=2, kind="alloc")
def _h_get_free_pages(call):
    if call.name == "get_zeroed_page":
        return _alloc(call, 4096, zero=True, kind="pages")
    return _alloc(call, 4096 << (call.arg(1) & 0xF), call.arg(0), kind="pages")


@stub("kmem_cache_create", "kmem_cache_create_usercopy", nargs=5, kind="alloc")
def _h_kmem_cache_create(call):
    name = call.text(call.arg(0)) if call.arg(0) else "?"
    p = call.machine.heap.alloc(64, zero=True, kind="kmem_cache", caller=call.lr)
    if p:
        call.machine.heap.caches[p] = (name, call.arg(1))
        call.machine.record("kmem_cache", name=name, object_size=call.arg(1), addr=p)
    return p


@stub("kmem_cache_alloc", "kmem_cache_alloc_lru", "kmem_cache_alloc_node", nargs=2, kind="alloc")
def _h_kmem_cache_alloc(call):
    cache = call.machine.heap.caches.get(call.arg(0))
    size = cache[1] if cache else 256
    return _alloc(call, size, call.arg(1), kind="kmem_cache_alloc")


@stub("kmem_cache_zalloc", nargs=2, kind="alloc")
def _h_kmem_cache_zalloc(call):
    cache = call.machine.heap.caches.get(call.arg(0))
    return _alloc(call, cache[1] if cache else 256, zero=True, kind="kmem_cache_alloc")


@stub("kfree", "kvfree", "vfree", "kfree_sensitive", "kfree_const", "free_page", nargs=1, kind="free")
def _h_kfree(call):
    call.machine.heap.free(call.arg(0), caller=call.lr)
    return 0


@stub("free_pages", nargs=2, kind="free")
def _h_free_pages(call):
    call.machine.heap.free(call.arg(0), caller=call.lr)
    return 0


@stub("kmem_cache_free", nargs=2, kind="free")
def _h_kmem_cache_free(call):
    call.machine.heap.free(call.arg(1), caller=call.lr)
    return 0


@stub("kmem_cache_destroy", nargs=1, kind="free")
def _h_kmem_cache_destroy(call):
    if call.arg(0):
        call.machine.heap.caches.pop(call.arg(0), None)
        call.machine.heap.free(call.arg(0), caller=call.lr)
    return 0


# --- registration ----------------------------------------------------------------------
def _name_at(call, ptr: int) -> str | None:
    if not ptr:
        return None
    try:
        s = call.string(ptr, 128)
    except Exception:
        return None
    if s and all(32 <= b < 127 for b in s):
        return s.decode()
    return None


def _struct_name(call, obj: int, offsets=(0, 4, 8, 12, 16, 20, 24, 28)) -> str | None:
    """Best effort: the first plausible `const char *name` among the struct's first words."""
    for off in offsets:
        try:
            p = call.u32(obj + off)
        except Exception:
            return None
        n = _name_at(call, p)
        if n:
            return n
    return None


MISC_DYNAMIC_MINOR = 255


@stub("misc_register", nargs=1, kind="register")
def _h_misc_register(call):
    misc = call.arg(0)
    minor = call.u32(misc)
    name = _name_at(call, call.u32(misc + 4))
    if minor == MISC_DYNAMIC_MINOR:
        minor = call.machine.next_misc_minor()
        call.put_u32(misc, minor)          # the kernel writes the dynamic minor back
    call.machine.record("misc_register", name=name, minor=minor, fops=call.u32(misc + 8), addr=misc)
    return 0


@stub("__platform_driver_register", "platform_driver_register", nargs=2, kind="register")
def _h_platform_driver_register(call):
    drv = call.arg(0)
    # struct platform_driver (6.1): probe, remove, shutdown, suspend, resume, driver{name,...}
    name = _name_at(call, call.u32(drv + 20)) or _struct_name(call, drv)
    call.machine.record("platform_driver_register", name=name, probe=call.u32(drv), addr=drv)
    return 0


@stub("__register_chrdev", nargs=5, kind="register")
def _h_register_chrdev(call):
    major = call.arg(0)
    name = _name_at(call, call.arg(3))
    if major == 0:
        major = call.machine.next_chrdev_major()
    call.machine.record("register_chrdev", name=name, major=major, fops=call.arg(4))
    return major if call.arg(0) == 0 else 0


@stub("alloc_chrdev_region", nargs=4, kind="register")
def _h_alloc_chrdev_region(call):
    major = call.machine.next_chrdev_major()
    dev = (major << 20) | call.arg(1)
    call.put_u32(call.arg(0), dev)
    call.machine.record("alloc_chrdev_region", name=_name_at(call, call.arg(3)), major=major,
                        minor=call.arg(1), count=call.arg(2))
    return 0


@stub("register_chrdev_region", nargs=3, kind="register")
def _h_register_chrdev_region(call):
    call.machine.record("register_chrdev_region", name=_name_at(call, call.arg(2)),
                        major=call.arg(0) >> 20, minor=call.arg(0) & 0xFFFFF, count=call.arg(1))
    return 0


@stub("cdev_add", nargs=3, kind="register")
def _h_cdev_add(call):
    call.machine.record("cdev_add", dev=call.arg(1), count=call.arg(2), addr=call.arg(0))
    return 0


def _new_object(size: int = 1024):
    def h(call):
        p = call.machine.heap.alloc(size, zero=True, kind="object", caller=call.lr)
        call.machine.record(call.name, name=_name_at(call, call.arg(1)) or _name_at(call, call.arg(0)),
                            args=call.args(4), addr=p)
        return p
    return h


for _n in ("__class_create", "class_create", "device_create", "proc_create", "proc_create_data",
           "proc_mkdir", "debugfs_create_dir", "debugfs_create_file", "cdev_alloc",
           "platform_device_alloc", "platform_device_register_full", "platform_device_register_simple",
           "alloc_workqueue", "__alloc_workqueue_key", "kobject_create_and_add", "input_allocate_device",
           "alloc_netdev_mqs", "kthread_create_on_node"):
    DEFAULT.set(_n, _new_object(), kind="register")


def _h_register_generic(call):
    call.machine.record(call.name, name=_struct_name(call, call.arg(0)) if call.arg(0) > 4096 else None,
                        args=call.args(3))
    return 0


for _p in ("register_*", "*_register", "__*_register", "*_register_driver", "__register_*",
           "*_add_driver", "device_register", "device_add", "platform_device_add", "sysfs_create_*",
           "*_register_full"):
    DEFAULT.set(_p, _h_register_generic, kind="register")


def _h_unregister(call):
    call.machine.record(call.name, args=call.args(2))
    return 0


for _p in ("unregister_*", "*_unregister", "*_deregister", "__unregister_*", "*_unregister_driver",
           "device_destroy", "class_destroy", "cdev_del", "proc_remove", "remove_proc_entry",
           "debugfs_remove", "debugfs_remove_recursive", "platform_device_unregister",
           "destroy_workqueue", "sysfs_remove_*"):
    DEFAULT.set(_p, _h_unregister, kind="unregister")


# --- locks, RCU, scheduling: no-ops ---------------------------------------------------
for _n in ("mutex_lock", "mutex_unlock", "mutex_lock_nested", "__mutex_init", "mutex_is_locked",
           "_raw_spin_lock", "_raw_spin_unlock", "_raw_spin_lock_bh", "_raw_spin_unlock_bh",
           "_raw_spin_lock_irq", "_raw_spin_unlock_irq", "_raw_spin_unlock_irqrestore",
           "__raw_spin_lock_init", "_raw_read_lock", "_raw_read_unlock", "_raw_write_lock",
           "_raw_write_unlock", "__rwlock_init", "__init_rwsem", "down_read", "up_read", "down_write",
           "up_write", "down", "up", "__rcu_read_lock", "__rcu_read_unlock", "synchronize_rcu",
           "call_rcu", "rcu_barrier", "kfree_call_rcu", "__init_waitqueue_head", "__wake_up",
           "init_timer_key", "del_timer", "del_timer_sync", "schedule", "cond_resched",
           "__cond_resched", "_cond_resched", "preempt_schedule", "preempt_schedule_notrace",
           "might_fault", "__might_sleep", "__might_fault", "msleep", "usleep_range",
           "usleep_range_state", "__const_udelay", "__udelay", "__delay", "arm_delay_ops",
           "local_bh_enable_ip", "__local_bh_enable_ip", "queue_work_on", "flush_workqueue",
           "cancel_work_sync", "cancel_delayed_work_sync", "complete", "init_completion",
           "module_put", "try_module_get", "__module_get", "kobject_put", "put_device", "get_device"):
    DEFAULT.set(_n, None, kind="lock")


@stub("_raw_spin_lock_irqsave", "_raw_read_lock_irqsave", "_raw_write_lock_irqsave", nargs=1, kind="lock")
def _h_irqsave(call):
    return 0x13          # saved flags: SVC mode, interrupts enabled


@stub("mutex_lock_interruptible", "mutex_lock_killable", "down_interruptible", "down_killable",
      "mutex_trylock", "_raw_spin_trylock", "down_trylock", nargs=1, kind="lock")
def _h_lock_ok(call):
    return 1 if call.name in ("mutex_trylock", "_raw_spin_trylock") else 0


# --- string and memory functions -------------------------------------------------------
@stub("memset", "mmioset", "__memset", nargs=3, kind="string")
def _h_memset(call):
    d, c, n = call.arg(0), call.arg(1) & 0xFF, call.arg(2)
    if n:
        call.write(d, bytes([c]) * n)
    return d


@stub("__memzero", nargs=2, kind="string")
def _h_memzero(call):
    if call.arg(1):
        call.write(call.arg(0), bytes(call.arg(1)))
    return call.arg(0)


@stub("memcpy", "memmove", "mmiocpy", "__memcpy", "__memmove", nargs=3, kind="string")
def _h_memcpy(call):
    d, s, n = call.arg(0), call.arg(1), call.arg(2)
    if n:
        call.write(d, call.read(s, n))
    return d


@stub("memcmp", "bcmp", nargs=3, kind="string")
def _h_memcmp(call):
    a, b = call.read(call.arg(0), call.arg(2)), call.read(call.arg(1), call.arg(2))
    for x, y in zip(a, b):
        if x != y:
            return (x - y) & 0xFFFFFFFF
    return 0


@stub("memchr", nargs=3, kind="string")
def _h_memchr(call):
    data = call.read(call.arg(0), call.arg(2))
    i = data.find(bytes([call.arg(1) & 0xFF]))
    return call.arg(0) + i if i >= 0 else 0


@stub("strlen", nargs=1, kind="string")
def _h_strlen(call):
    return len(call.string(call.arg(0), 1 << 20))


@stub("strnlen", nargs=2, kind="string")
def _h_strnlen(call):
    return len(call.string(call.arg(0), call.arg(1)))


def _cmp(a: bytes, b: bytes) -> int:
    for x, y in zip(a + b"\0", b + b"\0"):
        if x != y:
            return (1 if x > y else -1) & 0xFFFFFFFF
        if x == 0:
            return 0
    return 0


@stub("strcmp", nargs=2, kind="string")
def _h_strcmp(call):
    return _cmp(call.string(call.arg(0), 1 << 20), call.string(call.arg(1), 1 << 20))


@stub("strncmp", nargs=3, kind="string")
def _h_strncmp(call):
    n = call.arg(2)
    return _cmp(call.string(call.arg(0), n)[:n], call.string(call.arg(1), n)[:n]) if n else 0


@stub("strcasecmp", nargs=2, kind="string")
def _h_strcasecmp(call):
    return _cmp(call.string(call.arg(0), 1 << 20).lower(), call.string(call.arg(1), 1 << 20).lower())


@stub("strcpy", nargs=2, kind="string")
def _h_strcpy(call):
    call.write(call.arg(0), call.string(call.arg(1), 1 << 20) + b"\0")
    return call.arg(0)


@stub("strncpy", nargs=3, kind="string")
def _h_strncpy(call):
    n = call.arg(2)
    s = call.string(call.arg(1), n)[:n]
    if n:
        call.write(call.arg(0), s + bytes(n - len(s)))
    return call.arg(0)


@stub("strscpy", "sized_strscpy", nargs=3, kind="string")
def _h_strscpy(call):
    d, s, n = call.arg(0), call.arg(1), call.arg(2)
    if n == 0:
        return (-7) & 0xFFFFFFFF           # -E2BIG
    src = call.string(s, n)
    if len(src) >= n:
        call.write(d, src[:n - 1] + b"\0")
        return (-7) & 0xFFFFFFFF
    call.write(d, src + b"\0")
    return len(src)


@stub("strlcpy", nargs=3, kind="string")
def _h_strlcpy(call):
    d, s, n = call.arg(0), call.arg(1), call.arg(2)
    src = call.string(s, 1 << 20)
    if n:
        k = min(len(src), n - 1)
        call.write(d, src[:k] + b"\0")
    return len(src)


@stub("strcat", nargs=2, kind="string")
def _h_strcat(call):
    d = call.arg(0)
    call.write(d + len(call.string(d, 1 << 20)), call.string(call.arg(1), 1 << 20) + b"\0")
    return d


@stub("strchr", nargs=2, kind="string")
def _h_strchr(call):
    s = call.string(call.arg(0), 1 << 20) + b"\0"
    i = s.find(bytes([call.arg(1) & 0xFF]))
    return call.arg(0) + i if i >= 0 else 0


@stub("strrchr", nargs=2, kind="string")
def _h_strrchr(call):
    s = call.string(call.arg(0), 1 << 20) + b"\0"
    i = s.rfind(bytes([call.arg(1) & 0xFF]))
    return call.arg(0) + i if i >= 0 else 0


@stub("strstr", nargs=2, kind="string")
def _h_strstr(call):
    i = call.string(call.arg(0), 1 << 20).find(call.string(call.arg(1), 1 << 20))
    return call.arg(0) + i if i >= 0 else 0


def _store_formatted(call, buf: int, size: int | None, text: str, scn: bool) -> int:
    data = text.encode("utf-8", "replace")
    if size is None:
        call.write(buf, data + b"\0")
        return len(data)
    if size:
        k = min(len(data), size - 1)
        call.write(buf, data[:k] + b"\0")
        if scn:
            return k
    elif scn:
        return 0
    return len(data)


@stub("sprintf", nargs=2, kind="string", varargs=1)
def _h_sprintf(call):
    return _store_formatted(call, call.arg(0), None,
                            format_kernel(call, call.string(call.arg(1), 4096), call.varargs(2)), False)


@stub("snprintf", "scnprintf", nargs=3, kind="string", varargs=2)
def _h_snprintf(call):
    text = format_kernel(call, call.string(call.arg(2), 4096), call.varargs(3))
    return _store_formatted(call, call.arg(0), call.arg(1), text, call.name == "scnprintf")


@stub("vsnprintf", "vscnprintf", nargs=4, kind="string")
def _h_vsnprintf(call):
    text = format_kernel(call, call.string(call.arg(2), 4096), call.va_list(call.arg(3)))
    return _store_formatted(call, call.arg(0), call.arg(1), text, call.name == "vscnprintf")


@stub("vsprintf", nargs=3, kind="string")
def _h_vsprintf(call):
    text = format_kernel(call, call.string(call.arg(1), 4096), call.va_list(call.arg(2)))
    return _store_formatted(call, call.arg(0), None, text, False)


@stub("kasprintf", nargs=2, kind="alloc", varargs=1)
def _h_kasprintf(call):
    data = format_kernel(call, call.string(call.arg(1), 4096), call.varargs(2)).encode() + b"\0"
    p = _alloc(call, len(data), call.arg(0))
    if p:
        call.write(p, data)
    return p


def _parse_int(call, signed: bool):
    s = call.text(call.arg(0), 64).strip()
    base = call.arg(1) or 0
    try:
        v = int(s, base) if base else int(s, 0)
    except ValueError:
        return (-EINVAL) & 0xFFFFFFFF
    if not signed and v < 0:
        return (-EINVAL) & 0xFFFFFFFF
    call.put_u32(call.arg(2), v)
    return 0


@stub("kstrtoint", "kstrtol", "kstrtos32", nargs=3, kind="string")
def _h_kstrtoint(call):
    return _parse_int(call, True)


@stub("kstrtouint", "kstrtoul", "kstrtou32", nargs=3, kind="string")
def _h_kstrtouint(call):
    return _parse_int(call, False)


@stub("simple_strtoul", "simple_strtol", nargs=3, kind="string")
def _h_simple_strtoul(call):
    s = call.text(call.arg(0), 64)
    base = call.arg(2) or 10
    j = 0
    while j < len(s) and s[j].isspace():
        j += 1
    k = j + (1 if j < len(s) and s[j] in "+-" else 0)
    while k < len(s) and s[k].lower() in "0123456789abcdef"[:base]:
        k += 1
    try:
        v = int(s[j:k], base)
    except ValueError:
        v, k = 0, j
    if call.arg(1):
        call.put_u32(call.arg(1), call.arg(0) + k)
    return v & 0xFFFFFFFF


# --- EABI runtime helpers (the kernel exports its own libgcc replacements) --------------
def _div0(call):
    call.fault(f"division by zero in {call.symbolize(call.lr)}", "div0")


@stub("__aeabi_uidiv", "__udivsi3", nargs=2, kind="math")
def _h_uidiv(call):
    if call.arg(1) == 0:
        _div0(call)
    return call.arg(0) // call.arg(1)


@stub("__aeabi_idiv", "__divsi3", nargs=2, kind="math")
def _h_idiv(call):
    a, b = call.sarg(0), call.sarg(1)
    if b == 0:
        _div0(call)
    q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
    return q & 0xFFFFFFFF


@stub("__aeabi_uidivmod", nargs=2, kind="math")
def _h_uidivmod(call):
    if call.arg(1) == 0:
        _div0(call)
    return call.arg(0) // call.arg(1), call.arg(0) % call.arg(1)


@stub("__aeabi_idivmod", nargs=2, kind="math")
def _h_idivmod(call):
    a, b = call.sarg(0), call.sarg(1)
    if b == 0:
        _div0(call)
    q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
    return q & 0xFFFFFFFF, (a - q * b) & 0xFFFFFFFF


@stub("__umodsi3", nargs=2, kind="math")
def _h_umod(call):
    if call.arg(1) == 0:
        _div0(call)
    return call.arg(0) % call.arg(1)


@stub("__modsi3", nargs=2, kind="math")
def _h_mod(call):
    a, b = call.sarg(0), call.sarg(1)
    if b == 0:
        _div0(call)
    q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
    return (a - q * b) & 0xFFFFFFFF


@stub("__aeabi_uldivmod", nargs=4, kind="math")
def _h_uldivmod(call):
    n = call.arg(0) | (call.arg(1) << 32)
    d = call.arg(2) | (call.arg(3) << 32)
    if d == 0:
        _div0(call)
    q, r = divmod(n, d)
    call.set_reg("r2", r & 0xFFFFFFFF)
    call.set_reg("r3", r >> 32)
    return q & 0xFFFFFFFF, q >> 32


@stub("__aeabi_ldivmod", nargs=4, kind="math")
def _h_ldivmod(call):
    n = _s64(call.arg(0) | (call.arg(1) << 32))
    d = _s64(call.arg(2) | (call.arg(3) << 32))
    if d == 0:
        _div0(call)
    q = abs(n) // abs(d) * (1 if (n < 0) == (d < 0) else -1)
    r = n - q * d
    q &= 0xFFFFFFFFFFFFFFFF
    r &= 0xFFFFFFFFFFFFFFFF
    call.set_reg("r2", r & 0xFFFFFFFF)
    call.set_reg("r3", r >> 32)
    return q & 0xFFFFFFFF, q >> 32


@stub("__do_div64", nargs=2, kind="math")
def _h_do_div64(call):
    # arch/arm/include/asm/div64.h: n in r0:r1, base in r4; quotient -> r2:r3, remainder -> r1
    n = call.arg(0) | (call.arg(1) << 32)
    base = call.machine.reg("r4")
    if base == 0:
        _div0(call)
    q, r = divmod(n, base)
    call.set_reg("r2", q & 0xFFFFFFFF)
    call.set_reg("r3", q >> 32)
    call.set_reg("r1", r)
    return call.arg(0)


def _shift64(op):
    def h(call):
        v = call.arg(0) | (call.arg(1) << 32)
        s = call.arg(2) & 0xFF
        if op == "lsl":
            v = (v << s) if s < 64 else 0
        elif op == "lsr":
            v = (v >> s) if s < 64 else 0
        else:
            v = _s64(v) >> min(s, 63)
        v &= 0xFFFFFFFFFFFFFFFF
        return v & 0xFFFFFFFF, v >> 32
    return h


DEFAULT.set("__aeabi_llsl", _shift64("lsl"), nargs=3, kind="math")
DEFAULT.set("__ashldi3", _shift64("lsl"), nargs=3, kind="math")
DEFAULT.set("__aeabi_llsr", _shift64("lsr"), nargs=3, kind="math")
DEFAULT.set("__lshrdi3", _shift64("lsr"), nargs=3, kind="math")
DEFAULT.set("__aeabi_lasr", _shift64("asr"), nargs=3, kind="math")
DEFAULT.set("__ashrdi3", _shift64("asr"), nargs=3, kind="math")


@stub("__aeabi_lmul", "__muldi3", nargs=4, kind="math")
def _h_lmul(call):
    v = ((call.arg(0) | (call.arg(1) << 32)) * (call.arg(2) | (call.arg(3) << 32))) & 0xFFFFFFFFFFFFFFFF
    return v & 0xFFFFFFFF, v >> 32


# --- user copies: the emulated process has no user space; copies behave like memcpy ---
@stub("__copy_to_user", "__copy_from_user", "arm_copy_to_user", "arm_copy_from_user",
      "_copy_to_user", "_copy_from_user", "raw_copy_to_user", "raw_copy_from_user", nargs=3, kind="string")
def _h_copy_user(call):
    d, s, n = call.arg(0), call.arg(1), call.arg(2)
    try:
        if n:
            call.write(d, call.read(s, n))
    except Exception:
        return n
    return 0


@stub("__clear_user", "arm_clear_user", nargs=2, kind="string")
def _h_clear_user(call):
    try:
        if call.arg(1):
            call.write(call.arg(0), bytes(call.arg(1)))
    except Exception:
        return call.arg(1)
    return 0


# --------------------------------------------------------------------------------------------
# More kernel API (found by the corpus regression): objects, pages, per-cpu memory, locks
# with state, list debugging, tty, netdev, bit counting, CRCs
# --------------------------------------------------------------------------------------------
def _obj(call, size: int, kind: str = "object") -> int:
    return call.machine.heap.alloc(size, zero=True, kind=kind, caller=call.lr)


def _h_constructor(size: int):
    """Functions returning a new kernel object (NULL only when out of memory)."""
    def h(call):
        return _obj(call, size)
    return h


for _n, _sz in (("mempool_create", 64), ("mempool_create_node", 64), ("proc_create_seq_private", 128),
                ("proc_create_single_data", 128), ("proc_create_net_data", 128),
                ("proc_create_net_single", 128), ("proc_create_net_data_write", 128),
                ("proc_create_net_single_write", 128), ("proc_create_seq", 128),
                ("proc_create_single", 128), ("_proc_mkdir", 128), ("proc_mkdir_data", 128),
                ("proc_mkdir_mode", 128), ("proc_symlink", 128), ("register_net_sysctl", 64),
                ("register_sysctl", 64), ("register_sysctl_table", 64), ("register_sysctl_paths", 64),
                ("kset_create_and_add", 128), ("prepare_kernel_cred", 128), ("textsearch_prepare", 64),
                ("kthread_create_worker", 128), ("alloc_ordered_workqueue", 256)):
    DEFAULT.set(_n, _h_constructor(_sz), kind="alloc")


@stub("kstrndup", nargs=3, kind="alloc")
def _h_kstrndup(call):
    if not call.arg(0):
        return 0
    s = call.string(call.arg(0), call.arg(1)) + b"\0"
    p = _alloc(call, len(s), call.arg(2))
    if p:
        call.write(p, s)
    return p


# struct page: the emulator keeps page -> memory; page_address() (HIGHMEM kernels call it)
STRUCT_PAGE_SIZE = 32


def _pages(call) -> dict:
    m = call.machine
    if not hasattr(m, "_page_mem"):
        m._page_mem = {}
    return m._page_mem


@stub("__alloc_pages", "alloc_pages", "__folio_alloc", "folio_alloc", nargs=2, kind="alloc")
def _h_alloc_pages(call):
    order = call.arg(1)
    if order > 10:
        return 0
    mem = _alloc(call, 0x1000 << order, call.arg(0), kind="pages")
    if not mem:
        return 0
    page = _obj(call, STRUCT_PAGE_SIZE, kind="struct page")
    if page:
        _pages(call)[page] = (mem, order)
    return page


@stub("page_address", nargs=1, kind="call")
def _h_page_address(call):
    ent = _pages(call).get(call.arg(0))
    return ent[0] if ent else 0


@stub("__free_pages", "__folio_put", nargs=2, kind="free")
def _h_free_pages_struct(call):
    ent = _pages(call).pop(call.arg(0), None)
    if ent is not None:
        call.machine.heap.free(ent[0], caller=call.lr)
        call.machine.heap.free(call.arg(0), caller=call.lr)
    return 0


# per-cpu memory: one possible CPU whose __per_cpu_offset is 0, so a per-cpu pointer is the
# address of CPU 0's copy
@stub("__alloc_percpu", "__alloc_percpu_gfp", "__alloc_reserved_percpu", nargs=2, kind="alloc")
def _h_alloc_percpu(call):
    return call.machine.heap.alloc(max(call.arg(0), 1), zero=True, kind="percpu", caller=call.lr)


@stub("free_percpu", nargs=1, kind="free")
def _h_free_percpu(call):
    call.machine.heap.free(call.arg(0), caller=call.lr)
    return 0


# --- locks with state (SMP ticket spinlocks, mutex owner), so that assertions hold ------------
# Lock words are updated when they are writable. A lock reached through a pointer that only the
# simulated kernel's zero-filled data makes NULL is left alone (the state is not tracked there).
def _lock_word(call, lock: int) -> int | None:
    try:
        return call.u32(lock)
    except StubFault:
        return None


def _set_lock_word(call, lock: int, value: int) -> None:
    try:
        call.put_u32(lock, value)
    except StubFault:
        pass


def _spin_lock(call, lock: int) -> None:
    v = _lock_word(call, lock)
    if v is not None:
        _set_lock_word(call, lock, (v + 0x10000) & 0xFFFFFFFF)          # tickets.next++


def _spin_unlock(call, lock: int) -> None:
    v = _lock_word(call, lock)
    if v is not None:
        _set_lock_word(call, lock, (v & 0xFFFF0000) | ((v + 1) & 0xFFFF))   # tickets.owner++


for _n in ("_raw_spin_lock", "_raw_spin_lock_bh", "_raw_spin_lock_irq", "_raw_spin_lock_nested"):
    DEFAULT.set(_n, lambda call: _spin_lock(call, call.arg(0)) or 0, nargs=1, kind="lock")
for _n in ("_raw_spin_unlock", "_raw_spin_unlock_bh", "_raw_spin_unlock_irq"):
    DEFAULT.set(_n, lambda call: _spin_unlock(call, call.arg(0)) or 0, nargs=1, kind="lock")


@stub("_raw_spin_lock_irqsave", nargs=1, kind="lock")
def _h_spin_irqsave(call):
    _spin_lock(call, call.arg(0))
    return 0x13          # saved flags: SVC mode, interrupts enabled


@stub("_raw_spin_unlock_irqrestore", nargs=2, kind="lock")
def _h_spin_irqrestore(call):
    _spin_unlock(call, call.arg(0))
    return 0


@stub("_raw_spin_trylock", "_raw_spin_trylock_bh", nargs=1, kind="lock")
def _h_spin_trylock(call):
    v = _lock_word(call, call.arg(0)) or 0
    if (v >> 16) != (v & 0xFFFF):
        return 0
    _spin_lock(call, call.arg(0))
    return 1


def _current(call) -> int:
    from .emulate import TASK_BASE
    return TASK_BASE


@stub("mutex_lock", "mutex_lock_nested", "mutex_lock_io", nargs=1, kind="lock")
def _h_mutex_lock(call):
    _set_lock_word(call, call.arg(0), _current(call))       # mutex.owner = current
    return 0


@stub("mutex_lock_interruptible", "mutex_lock_killable", nargs=1, kind="lock")
def _h_mutex_lock_int(call):
    _set_lock_word(call, call.arg(0), _current(call))
    return 0


@stub("mutex_trylock", nargs=1, kind="lock")
def _h_mutex_trylock(call):
    if (_lock_word(call, call.arg(0)) or 0) & ~7:
        return 0
    _set_lock_word(call, call.arg(0), _current(call))
    return 1


@stub("mutex_unlock", nargs=1, kind="lock")
def _h_mutex_unlock(call):
    _set_lock_word(call, call.arg(0), 0)
    return 0


@stub("mutex_is_locked", nargs=1, kind="lock")
def _h_mutex_is_locked(call):
    return 1 if (_lock_word(call, call.arg(0)) or 0) & ~7 else 0


@stub("try_module_get", nargs=1, kind="lock")
def _h_try_module_get(call):
    return 1             # the module is live: a reference is taken


# --- CONFIG_DEBUG_LIST checks: true when the list is consistent --------------------------
LIST_POISON1, LIST_POISON2 = 0x100, 0x122


@stub("__list_add_valid", nargs=3, kind="call")
def _h_list_add_valid(call):
    new, prev, nxt = call.arg(0), call.arg(1), call.arg(2)
    try:
        ok = call.u32(nxt + 4) == prev and call.u32(prev) == nxt and new not in (prev, nxt)
    except StubFault:
        ok = False
    if not ok:
        call.machine.log.printk(f"list_add corruption. new={new:#x} prev={prev:#x} next={nxt:#x}\n", 4)
    return 1 if ok else 0


@stub("__list_del_entry_valid", nargs=1, kind="call")
def _h_list_del_valid(call):
    e = call.arg(0)
    try:
        nxt, prev = call.u32(e), call.u32(e + 4)
        ok = (nxt not in (0, LIST_POISON1) and prev not in (0, LIST_POISON2)
              and call.u32(prev) == e and call.u32(nxt + 4) == e)
    except StubFault:
        ok = False
    if not ok:
        call.machine.log.printk(f"list_del corruption at {e:#x}\n", 4)
    return 1 if ok else 0


@stub("__init_waitqueue_head", nargs=3, kind="lock")
def _h_init_waitqueue_head(call):
    wq = call.arg(0)                                         # { spinlock_t lock; list_head head; }
    call.write(wq, struct.pack("<III", 0, wq + 4, wq + 4))
    return 0


@stub("__init_swait_queue_head", nargs=3, kind="lock")
def _h_init_swait_queue_head(call):
    wq = call.arg(0)                                         # { raw_spinlock_t lock; list_head task_list; }
    call.write(wq, struct.pack("<III", 0, wq + 4, wq + 4))
    return 0


# --- bit counting, CRCs --------------------------------------------------------------------
@stub("__sw_hweight32", "__sw_hweight16", "__sw_hweight8", nargs=1, kind="math")
def _h_hweight(call):
    mask = {"__sw_hweight32": 0xFFFFFFFF, "__sw_hweight16": 0xFFFF, "__sw_hweight8": 0xFF}[call.name]
    return bin(call.arg(0) & mask).count("1")


@stub("__sw_hweight64", nargs=2, kind="math")
def _h_hweight64(call):
    return bin(call.arg(0)).count("1") + bin(call.arg(1)).count("1")


@stub("crc32_le", nargs=3, kind="math")
def _h_crc32_le(call):
    import binascii
    data = call.read(call.arg(1), call.arg(2)) if call.arg(2) else b""
    return binascii.crc32(data, call.arg(0) ^ 0xFFFFFFFF) ^ 0xFFFFFFFF


# --- block and char majors -------------------------------------------------------------------
@stub("__register_blkdev", nargs=3, kind="register")
def _h_register_blkdev(call):
    major = call.arg(0)
    name = _name_at(call, call.arg(1))
    if major == 0:
        m = call.machine
        m._blk_major = getattr(m, "_blk_major", 255) - 1       # dynamic majors from 254 down
        major = m._blk_major
        call.machine.record("register_blkdev", name=name, major=major)
        return major
    call.machine.record("register_blkdev", name=name, major=major)
    return 0


# --- tty -------------------------------------------------------------------------------------
TTY_DRIVER_SIZE = 128            # struct tty_driver (6.1, 32-bit)
TTY_DRIVER_UNNUMBERED_NODE = 0x80
TTY_DRIVER_DEVPTS_MEM = 0x10
TTY_DRIVER_DYNAMIC_ALLOC = 0x40
ENODEV = 19


@stub("__tty_alloc_driver", nargs=3, kind="alloc")
def _h_tty_alloc_driver(call):
    lines, owner, flags = call.arg(0), call.arg(1), call.arg(2)
    if not lines or (flags & TTY_DRIVER_UNNUMBERED_NODE and lines > 1):
        return -EINVAL & 0xFFFFFFFF
    drv = _obj(call, TTY_DRIVER_SIZE, kind="tty_driver")
    if not drv:
        return -ENOMEM & 0xFFFFFFFF
    call.put_u32(drv, 1)                      # kref
    call.put_u32(drv + 8, owner)
    call.put_u32(drv + 32, lines)             # num
    call.put_u32(drv + 84, flags)
    if not flags & TTY_DRIVER_DEVPTS_MEM:
        call.put_u32(drv + 96, _obj(call, 4 * lines))        # ttys
        call.put_u32(drv + 104, _obj(call, 4 * lines))       # termios
    if not flags & TTY_DRIVER_DYNAMIC_ALLOC:
        call.put_u32(drv + 100, _obj(call, 4 * lines))       # ports
        call.put_u32(drv + 4, _obj(call, 4 * lines))         # cdevs
    call.machine.record("tty_alloc_driver", lines=lines, flags=flags, addr=drv)
    return drv


@stub("tty_kopen_exclusive", "tty_kopen_shared", nargs=1, kind="call")
def _h_tty_kopen(call):
    return -ENODEV & 0xFFFFFFFF              # no such tty device in the emulated machine


@stub("tty_register_driver", nargs=1, kind="register")
def _h_tty_register_driver(call):
    call.machine.record("tty_register_driver", addr=call.arg(0))
    return 0


# --- netdev ----------------------------------------------------------------------------------
NETDEV_SIZE = 0x640              # ALIGN(sizeof(struct net_device), NETDEV_ALIGN) on 6.1 armhf
NETDEV_ALIGN = 32


def _alloc_netdev(call, priv: int, name: int) -> int:
    size = NETDEV_SIZE + priv + NETDEV_ALIGN - 1
    p = call.machine.heap.alloc(size, zero=True, kind="net_device", caller=call.lr)
    if not p:
        return 0
    dev = (p + NETDEV_ALIGN - 1) & ~(NETDEV_ALIGN - 1)
    if name:
        call.write(dev, call.string(name, 15) + b"\0")      # dev->name
    call.machine.record(call.name, name=_name_at(call, name) if name else None, priv=priv, addr=dev)
    return dev


@stub("alloc_netdev_mqs", nargs=6, kind="alloc")
def _h_alloc_netdev_mqs(call):
    return _alloc_netdev(call, call.arg(0), call.arg(1))


@stub("alloc_etherdev_mqs", nargs=3, kind="alloc")
def _h_alloc_etherdev_mqs(call):
    return _alloc_netdev(call, call.arg(0), 0)


# --- simple_pin_fs: an internal mount of the filesystem -----------------------------------------
@stub("simple_pin_fs", nargs=3, kind="register")
def _h_simple_pin_fs(call):
    fstype, mount, count = call.arg(0), call.arg(1), call.arg(2)
    mnt = call.u32(mount)
    if not mnt:
        mnt = _obj(call, 32, kind="vfsmount")
        sb = _obj(call, 1024, kind="super_block")
        root = _obj(call, 256, kind="dentry")
        inode = _obj(call, 512, kind="inode")
        call.write(mnt, struct.pack("<II", root, sb))             # mnt_root, mnt_sb
        call.put_u32(root + 16, root)                             # d_parent
        call.put_u32(root + 40, inode)                            # d_inode
        call.put_u32(mount, mnt)
    call.put_u32(count, call.u32(count) + 1)
    call.machine.record("simple_pin_fs", name=_struct_name(call, fstype), addr=mnt)
    return 0


# --- bitmap searches (arch/arm/lib/findbit.S and lib/find_bit.c): `size` when none is found ----
def _bitmap(call, addr: int, nbits: int) -> int:
    n = (nbits + 31) // 32
    return int.from_bytes(call.read(addr, 4 * n), "little") if n else 0


def _find(call, addr: int, size: int, start: int, want: int, addr2: int | None = None) -> int:
    if start >= size:
        return size
    bits = _bitmap(call, addr, size)
    if addr2 is not None:
        bits &= _bitmap(call, addr2, size)
    if not want:
        bits = ~bits & ((1 << size) - 1)
    bits >>= start
    if bits == 0:
        return size
    return min(size, start + ((bits & -bits).bit_length() - 1))


@stub("_find_first_bit_le", "_find_first_bit", nargs=2, kind="math")
def _h_find_first_bit(call):
    return _find(call, call.arg(0), call.arg(1), 0, 1)


@stub("_find_next_bit_le", "_find_next_bit", nargs=3, kind="math")
def _h_find_next_bit(call):
    return _find(call, call.arg(0), call.arg(1), call.arg(2), 1)


@stub("_find_first_zero_bit_le", "_find_first_zero_bit", nargs=2, kind="math")
def _h_find_first_zero_bit(call):
    return _find(call, call.arg(0), call.arg(1), 0, 0)


@stub("_find_next_zero_bit_le", "_find_next_zero_bit", nargs=3, kind="math")
def _h_find_next_zero_bit(call):
    return _find(call, call.arg(0), call.arg(1), call.arg(2), 0)


@stub("_find_next_and_bit", nargs=4, kind="math")
def _h_find_next_and_bit(call):
    return _find(call, call.arg(0), call.arg(2), call.arg(3), 1, addr2=call.arg(1))


@stub("_find_last_bit", nargs=2, kind="math")
def _h_find_last_bit(call):
    size = call.arg(1)
    bits = _bitmap(call, call.arg(0), size) & ((1 << size) - 1) if size else 0
    return bits.bit_length() - 1 if bits else size


# --------------------------------------------------------------------------------------------
# Kernel data with its boot-time value (every other data symbol is zero-filled)
# --------------------------------------------------------------------------------------------
_U, _L, _D, _C, _P, _S, _X, _SP = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80
_CTYPE = bytes([_C] * 9 + [_C | _S] * 5 + [_C] * 18 + [_S | _SP] + [_P] * 15 + [_D] * 10 + [_P] * 7
               + [_U | _X] * 6 + [_U] * 20 + [_P] * 6 + [_L | _X] * 6 + [_L] * 20 + [_P] * 4 + [_C]
               + [0] * 32 + [_S | _SP] + [_P] * 31 + [_U] * 23 + [_P] + [_U] * 7 + [_L] * 24 + [_P]
               + [_L] * 8)
assert len(_CTYPE) == 256

for _n, _v in (("_ctype", _CTYPE),                              # lib/ctype.c
               ("hrtimer_resolution", struct.pack("<I", 1)),  # high-resolution timers: 1 ns
               ("nr_cpu_ids", struct.pack("<I", 1)),          # one possible CPU, number 0
               ("__cpu_possible_mask", struct.pack("<I", 1)),
               ("__cpu_online_mask", struct.pack("<I", 1)),
               ("__cpu_present_mask", struct.pack("<I", 1)),
               ("__cpu_active_mask", struct.pack("<I", 1))):
    DEFAULT.set_data(_n, _v)


def describe_args(stub: Stub | None, call: StubCall) -> list[int]:
    """The argument words shown in a trace for this call."""
    n = stub.nargs if stub is not None else 4
    return call.args(min(n, 8))


def check_library(lib: StubLibrary) -> None:
    """Raise EmulationError if a handler table entry is not callable."""
    for name in lib._exact:
        s = lib._exact[name]
        if s.fn is not None and not callable(s.fn):
            raise EmulationError(f"stub {name!r}: handler is not callable")
