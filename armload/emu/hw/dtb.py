"""A flattened device tree (devicetree-specification v0.4, ch. 5) built from nested tuples.

A node is (name, props, children); a prop value is bytes, str (NUL-terminated), int (one
big-endian cell) or a list of ints (cells). Only what the kernel reads for this machine.
"""
from __future__ import annotations

import struct

FDT_MAGIC = 0xD00DFEED
FDT_BEGIN_NODE, FDT_END_NODE, FDT_PROP, FDT_END = 1, 2, 3, 9


def _value(v) -> bytes:
    if isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode() + b"\0"
    if isinstance(v, int):
        return struct.pack(">I", v)
    if isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v):
        return b"".join(x.encode() + b"\0" for x in v)
    return b"".join(struct.pack(">I", x) for x in v)


def _pad(b: bytes) -> bytes:
    return b + b"\0" * (-len(b) % 4)


def build(root, reserve: list[tuple[int, int]] = ()) -> bytes:
    """The DTB bytes of the tree `root` = (name, props: dict, children: list)."""
    strings = bytearray()
    offs: dict[str, int] = {}
    body = bytearray()

    def stroff(name: str) -> int:
        if name not in offs:
            offs[name] = len(strings)
            strings.extend(name.encode() + b"\0")
        return offs[name]

    def node(n):
        name, props, children = n
        body.extend(struct.pack(">I", FDT_BEGIN_NODE) + _pad(name.encode() + b"\0"))
        for k, v in props.items():
            val = _value(v)
            body.extend(struct.pack(">III", FDT_PROP, len(val), stroff(k)) + _pad(val))
        for c in children:
            node(c)
        body.extend(struct.pack(">I", FDT_END_NODE))

    node(root)
    body.extend(struct.pack(">I", FDT_END))
    rsv = b"".join(struct.pack(">QQ", a, s) for a, s in reserve) + b"\0" * 16
    off_rsv = 40
    off_struct = off_rsv + len(rsv)
    off_strings = off_struct + len(body)
    total = off_strings + len(strings)
    hdr = struct.pack(">10I", FDT_MAGIC, total, off_struct, off_strings, off_rsv, 17, 16, 0,
                      len(strings), len(body))
    return hdr + rsv + bytes(body) + bytes(strings)


def parse(blob: bytes) -> dict:
    """{'/path/node': {prop: bytes}} (for tests: the reader is independent of `build`)."""
    magic, total, o_struct, o_str = struct.unpack_from(">4I", blob, 0)
    if magic != FDT_MAGIC:
        raise ValueError("not a DTB")
    out, path, i = {}, [], o_struct
    while True:
        tok, = struct.unpack_from(">I", blob, i)
        i += 4
        if tok == FDT_BEGIN_NODE:
            z = blob.index(b"\0", i)
            path.append(blob[i:z].decode())
            i = (z + 4) & ~3
            out["/" + "/".join(p for p in path if p)] = {}
        elif tok == FDT_END_NODE:
            path.pop()
        elif tok == FDT_PROP:
            ln, no = struct.unpack_from(">II", blob, i)
            name = blob[o_str + no: blob.index(b"\0", o_str + no)].decode()
            out["/" + "/".join(p for p in path if p)][name] = blob[i + 8: i + 8 + ln]
            i = (i + 8 + ln + 3) & ~3
        elif tok == FDT_END:
            return out
        else:
            raise ValueError(f"bad FDT token {tok} at {i - 4:#x}")
