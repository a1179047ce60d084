"""Arguments for calling a module function from outside: integers, strings, byte buffers.

    42, -1, 0x10        an integer (a word; negative numbers are two's complement)
    s:text              a NUL-terminated string copied into kernel memory (the word is its address)
    b:68656c6c6f        these bytes in kernel memory (an in/out buffer)
    buf:N               N zeroed bytes (an out-buffer)

Strings and buffers live in the model heap (with guard pages, so an overrun faults) and are
read back after the call, so a function that fills a buffer shows what it wrote.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import EmulationError

MAX_BUF = 1 << 20


@dataclass
class Arg:
    spec: str
    kind: str                    # int | str | buf
    value: int = 0               # the word passed
    data: bytes = b""            # initial contents (str/buf)
    addr: int = 0

    def to_dict(self, after: bytes | None = None) -> dict:
        d = {"spec": self.spec, "kind": self.kind, "word": self.value}
        if self.kind != "int":
            d["addr"] = self.addr
            d["size"] = len(self.data)
        if after is not None:
            d["hex"] = after.hex()
            d["text"] = _printable(after)
        return d


def parse(spec) -> Arg:
    """One argument from its command-line form (an int passes through)."""
    if isinstance(spec, int):
        return Arg(str(spec), "int", spec & 0xFFFFFFFF)
    if isinstance(spec, (bytes, bytearray)):
        return Arg("b:" + bytes(spec).hex(), "buf", data=bytes(spec))
    s = str(spec)
    if s.startswith("s:"):
        return Arg(s, "str", data=s[2:].encode() + b"\0")
    if s.startswith("b:"):
        try:
            data = bytes.fromhex(s[2:])
        except ValueError:
            raise EmulationError(f"bad buffer argument {s!r}: b: takes hex digits, e.g. b:00ff10") from None
        return Arg(s, "buf", data=data)
    if s.startswith("buf:"):
        try:
            n = int(s[4:], 0)
        except ValueError:
            raise EmulationError(f"bad buffer argument {s!r}: buf:N takes a size, e.g. buf:64") from None
        if not 0 < n <= MAX_BUF:
            raise EmulationError(f"bad buffer argument {s!r}: size must be 1..{MAX_BUF}")
        return Arg(s, "buf", data=bytes(n))
    try:
        v = int(s, 0)
    except ValueError:
        raise EmulationError(f"bad call argument {s!r}: an integer, s:TEXT, b:HEX or buf:N") from None
    if not -(1 << 31) <= v < (1 << 32):
        raise EmulationError(f"call argument {s} does not fit in a 32-bit word")
    return Arg(s, "int", v & 0xFFFFFFFF)


def place(machine, args: list[Arg]) -> list[int]:
    """Copy strings and buffers into kernel memory; the words to pass."""
    words = []
    for a in args:
        if a.kind != "int":
            a.addr = machine.heap.alloc(max(len(a.data), 1), kind=f"call argument {a.spec[:24]}")
            if not a.addr:
                raise EmulationError(f"cannot allocate {len(a.data)} bytes for argument {a.spec[:24]}")
            machine.write(a.addr, a.data)
            a.value = a.addr
        words.append(a.value)
    return words


def read_back(machine, args: list[Arg]) -> list[bytes | None]:
    """What the buffers hold after the call (None for integers)."""
    out = []
    for a in args:
        if a.kind == "int":
            out.append(None)
            continue
        try:
            out.append(machine.read(a.addr, len(a.data)))
        except Exception:          # freed by the function itself: nothing to show
            out.append(None)
    return out


def _printable(b: bytes) -> str:
    z = b.find(b"\0")
    t = b[:z] if z >= 0 else b
    return "".join(chr(c) if 32 <= c < 127 else "." for c in t)
