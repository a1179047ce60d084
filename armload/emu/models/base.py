"""The model API: what a Python model of a kernel function sees of one call.

A model is `fn(call) -> int | (r0, r1) | None` registered for one or more kernel function names
in a `ModelLibrary`, with the kernel subsystem it belongs to. Models return what the kernel
function returns; where they cannot, they stop the run (`call.fault(...)`, `call.unmodelled(...)`)
instead of inventing a value. A model may call emulated code: a module's callback or the
kernel's own functions (`call.invoke(addr, ...)`, `call.kernel("vsnprintf", ...)`).

    lib = default_library()              # a private copy of the built-in models
    @lib.model("kmalloc_trace", subsystem="mm")
    def no_memory(call):
        return 0                         # every kmalloc fails, as under memory pressure
    Machine(mods, kernel, models=lib)

`fallback` entries are Python versions of functions whose real code runs when the kernel image
is mapped (string functions, vsnprintf, crc32, ...): they are used only without an image, and
the trace says so.
"""
from __future__ import annotations

import fnmatch
import struct
from dataclasses import dataclass
from typing import Callable

from ..errno import s32
from ..faults import ModelFault, Unmodelled


@dataclass
class Model:
    name: str
    fn: Callable[["Call"], object]
    subsystem: str
    fallback: bool = False        # stands in for real kernel code only when no image is mapped
    nargs: int = 4


class ModelLibrary:
    def __init__(self):
        self._exact: dict[str, Model] = {}
        self._patterns: list[tuple[str, Model]] = []

    def model(self, *names: str, subsystem: str, nargs: int = 4):
        """Decorator: `fn` models every named kernel function."""
        def deco(fn):
            for n in names:
                self.set(n, fn, subsystem=subsystem, nargs=nargs)
            return fn
        return deco

    def fallback(self, *names: str, subsystem: str, nargs: int = 4):
        """Decorator: a Python version of real kernel code, for machines without the image."""
        def deco(fn):
            for n in names:
                self.set(n, fn, subsystem=subsystem, nargs=nargs, fallback=True)
            return fn
        return deco

    def set(self, name: str, fn, *, subsystem: str = "user", nargs: int = 4, fallback: bool = False) -> None:
        m = Model(name, fn, subsystem, fallback, nargs)
        if any(c in name for c in "*?["):
            self._patterns = [(p, x) for p, x in self._patterns if p != name] + [(name, m)]
        else:
            self._exact[name] = m

    def returns(self, name: str, value: int, subsystem: str = "user") -> None:
        """Make `name` return a constant for this library (fault injection, e.g. -ENOMEM)."""
        self.set(name, lambda call, _v=value: _v, subsystem=subsystem)

    def remove(self, name: str) -> None:
        self._exact.pop(name, None)
        self._patterns = [(p, x) for p, x in self._patterns if p != name]

    def get(self, name: str) -> Model | None:
        m = self._exact.get(name)
        if m is not None:
            return m
        for pat, x in reversed(self._patterns):
            if fnmatch.fnmatchcase(name, pat):
                return x
        return None

    def copy(self) -> "ModelLibrary":
        c = ModelLibrary()
        c._exact = dict(self._exact)
        c._patterns = list(self._patterns)
        return c

    def names(self) -> list[str]:
        return sorted(self._exact) + [p for p, _ in self._patterns]

    def items(self):
        return list(self._exact.items())


class Call:
    """One call into the kernel: arguments, memory, the machine and its subsystems."""

    __slots__ = ("machine", "name", "addr", "lr", "sp", "regs", "model", "extra_regs", "note")

    def __init__(self, machine, name: str, addr: int, regs: list[int], lr: int, sp: int, model):
        self.machine = machine
        self.name = name
        self.addr = addr
        self.regs = regs          # r0..r3 at entry
        self.lr = lr
        self.sp = sp
        self.model = model
        self.extra_regs: dict[str, int] = {}
        self.note: str | None = None

    # arguments (AAPCS: r0-r3, then the stack)
    def arg(self, i: int) -> int:
        return self.regs[i] if i < 4 else self.u32(self.sp + 4 * (i - 4))

    def sarg(self, i: int) -> int:
        return s32(self.arg(i))

    def args(self, n: int) -> list[int]:
        return [self.arg(i) for i in range(n)]

    def arg64(self, i: int) -> int:
        """A 64-bit argument starting at argument slot i (even register pair / 8-aligned slot)."""
        return self.arg(i) | (self.arg(i + 1) << 32)

    def varargs(self, first: int) -> "ArgReader":
        return ArgReader(self, first)

    def va_list(self, ptr: int) -> "MemArgReader":
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

    # outcomes other than a return value
    def fault(self, message: str, kind: str = "bug"):
        raise ModelFault(message, kind)

    def unmodelled(self, what: str):
        raise Unmodelled(self.name, f"unmodelled: {what} in {self.name} called from {self.symbolize(self.lr)}")

    def symbolize(self, addr: int) -> str:
        return self.machine.symbolize(addr)

    # emulated code
    def invoke(self, addr: int, *args: int) -> int:
        """Call emulated code (bit 0 = Thumb) with up to 8 word arguments; its r0."""
        return self.machine.invoke(addr, args)

    def kernel(self, name: str, *args: int) -> int:
        """Run the kernel's own function `name` from the Image (Unmodelled without one)."""
        addr = self.machine.kernel_function(name)
        if addr is None:
            raise Unmodelled(name, f"unmodelled: {self.name} needs the kernel's {name}, which only runs "
                                   f"with the kernel image (--kernel vmlinuz)")
        return self.machine.invoke(addr, args)

    @property
    def clock(self):
        return self.machine.clock

    @property
    def heap(self):
        return self.machine.heap

    def state(self, key: str, factory):
        """Per-machine state of a subsystem model (created on first use)."""
        st = self.machine.model_state
        if key not in st:
            st[key] = factory()
        return st[key]


class ArgReader:
    """printf-style arguments through r0-r3 and the stack, with AAPCS 64-bit alignment."""

    def __init__(self, call: Call, first: int):
        self.call = call
        self.i = first

    def next32(self) -> int:
        v = self.call.arg(self.i)
        self.i += 1
        return v

    def next64(self) -> int:
        if self.i < 4 and self.i % 2:
            self.i += 1
        elif self.i >= 4 and (self.i - 4) % 2:
            self.i += 1
        lo, hi = self.call.arg(self.i), self.call.arg(self.i + 1)
        self.i += 2
        return lo | (hi << 32)


class MemArgReader(ArgReader):
    """The arguments of a va_list (ARM EABI: a pointer to the saved words)."""

    def __init__(self, call: Call, ptr: int):
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
