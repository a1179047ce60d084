"""drivers/char/random: randomness the simulation makes deterministic.

The bytes come from SHA-256 in counter mode over a fixed seed, so every run of the same inputs
sees the same values (any byte string is a possible output of the real generator).
"""
from __future__ import annotations

import hashlib
import struct

from .base import ModelLibrary

SEED = b"armload deterministic entropy"


def _stream(call, n: int) -> bytes:
    st = call.state("random.counter", lambda: [0])
    out = b""
    while len(out) < n:
        out += hashlib.sha256(SEED + struct.pack("<Q", st[0])).digest()
        st[0] += 1
    return out[:n]


def register(lib: ModelLibrary) -> None:
    m = lib.model

    @m("get_random_bytes", subsystem="random")
    def get_random_bytes(call):
        if call.arg(1):
            call.write(call.arg(0), _stream(call, call.arg(1)))
        call.note = "deterministic bytes (fixed seed)"

    @m("get_random_u32", "get_random_u16", "get_random_u8", "prandom_u32", subsystem="random")
    def get_random_u32(call):
        v = struct.unpack("<I", _stream(call, 4))[0]
        return v & {"get_random_u16": 0xFFFF, "get_random_u8": 0xFF}.get(call.name, 0xFFFFFFFF)

    @m("get_random_u64", subsystem="random")
    def get_random_u64(call):
        v = struct.unpack("<Q", _stream(call, 8))[0]
        return v & 0xFFFFFFFF, v >> 32

    @m("__get_random_u32_below", subsystem="random")
    def get_random_below(call):
        ceil = call.arg(0)
        if ceil == 0:
            return 0
        return struct.unpack("<I", _stream(call, 4))[0] % ceil

    @m("wait_for_random_bytes", subsystem="random")
    def wait_for_random_bytes(call):
        return 0                          # the pool counts as initialised

    @m("rng_is_initialized", subsystem="random")
    def rng_is_initialized(call):
        return 1
