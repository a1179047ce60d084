"""Differential: every Python fallback of real kernel code against the kernel's own code.

Each case runs twice: the fallback on a machine without a kernel image, and the Debian 6.1
kernel's function on a machine with the Image mapped. Inputs live in one heap arena per
machine (filled with a marker byte before each case); the results compared are the return
registers (pointers into the arena as offsets), every byte of the arena afterwards (what the
function wrote, and what it did not), and the printk records. Inputs: seeded random plus
edge cases. The oracle is the kernel's machine code, which shares nothing with the fallbacks.
"""
import os
import random
import struct
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from emu_fixtures import build_module, debian_kernel, kernel_externs  # noqa: E402

from armload.emu import Machine  # noqa: E402

ARENA = 0x1000                    # one page: input/output slots at 0x000, 0x400, 0x800, 0xC00
FILL = b"\xa5"
ARENA_AT = 0xDC000000             # inside the heap's lowmem range
BUDGET = 2_000_000
INT_MIN, INT_MAX, U32 = -(1 << 31), (1 << 31) - 1, 0xFFFFFFFF

FUNCTIONS = ["strlen", "strnlen", "strcmp", "strncmp", "strcasecmp", "memcmp", "memchr", "strchr", "strrchr",
             "strstr", "strscpy", "strlcpy", "kstrtoint", "kstrtouint", "simple_strtoul", "__aeabi_uidiv",
             "__aeabi_idiv", "__aeabi_uidivmod", "__aeabi_idivmod", "__aeabi_uldivmod", "__aeabi_ldivmod",
             "crc32_le", "__sw_hweight32", "_find_first_bit_le", "_find_next_bit_le", "snprintf", "scnprintf",
             "vsnprintf",
             # further fallbacks with a kernel counterpart
             "memset", "memcpy", "memmove", "bcmp", "strcpy", "strncpy", "strcat", "__umodsi3", "__modsi3",
             "__aeabi_llsl", "__aeabi_llsr", "__aeabi_lasr", "__aeabi_lmul", "__sw_hweight8", "__sw_hweight16",
             "__sw_hweight64", "_find_first_zero_bit_le", "_find_next_zero_bit_le", "_find_next_and_bit",
             "_find_last_bit", "sprintf", "vsprintf", "vscnprintf", "simple_strtol", "_kstrtol", "_kstrtoul",
             "_printk", "vprintk", "_dev_info", "_dev_err", "__list_add_valid", "__list_del_entry_valid"]
# The kernel has no __aeabi_uldivmod/__aeabi_ldivmod (ARM Linux does 64-bit division through
# do_div and lib/math/div64.c): the fallbacks are checked against those functions instead.
ORACLE = {"__aeabi_uldivmod": "div64_u64_rem", "__aeabi_ldivmod": "div64_s64"}


class Buf:
    """An argument that is the address of arena offset `off`."""
    def __init__(self, off):
        self.off = off


class Side:
    def __init__(self, machine, entry_of):
        self.m = machine
        self.entry_of = entry_of
        # the same arena address on both machines, so pointers the functions store (endp) compare
        # equal: the image machine's heap already holds boot objects, the other's does not
        machine.heap._cur["lowmem"] = ARENA_AT
        self.base = machine.heap.alloc(ARENA, kind="differential arena")
        assert self.base == ARENA_AT + ARENA - ARENA % 0x1000 - (ARENA and 0) or self.base

    def norm(self, v):
        return ("arena", v - self.base) if self.base <= v < self.base + ARENA else v

    def run(self, fn, args, mem, nregs=1, budget=BUDGET):
        m = self.m
        m.uc.mem_write(self.base, FILL * ARENA)
        for off, data in mem.items():
            m.uc.mem_write(self.base + off, data)
        words = [self.base + a.off if isinstance(a, Buf) else a & U32 for a in args]
        n0 = len(m.log.records)
        r = m.call(self.entry_of(fn), words, budget=budget)
        # a WARN's banner names file:line and the caller, which only the kernel's own code knows
        log = tuple(("WARNING:" if x.text.startswith("WARNING: CPU: 0 PID: 0 at ") else x.text, x.level)
                    for x in m.log.records[n0:])
        if r.status != "returned":
            # the kind of fault and what was logged before it (the message names code locations)
            return (r.status, r.fault.kind, log)
        regs = tuple(self.norm(m.reg(f"r{i}")) for i in range(nregs))
        return regs, bytes(m.uc.mem_read(self.base, ARENA)), log


# __do_div64's convention is arch/arm/include/asm/div64.h's: n in r0:r1, the divisor in r4 (kept),
# the quotient back in r2:r3 and the remainder in r1. A module function calls it that way.
WRAPPERS = {"do_div": """
    push {r4, lr}
    mov r4, r2
    bl {plt:__do_div64}
    pop {r4, pc}
"""}


@pytest.fixture(scope="module")
def sides():
    kernel = debian_kernel()
    externs, addrs = kernel_externs(kernel, ["__do_div64"])
    real_mod, _ = build_module({"init_module": "mov r0, #0\nbx lr", **WRAPPERS}, externs=externs,
                               extern_addrs=addrs, name="diffreal")
    real = Machine(real_mod, kernel)
    assert real.image is not None

    def real_entry(name):
        if name in WRAPPERS:
            return real.function_address(name)
        a = real.kernel_function(ORACLE.get(name, name))
        assert a is not None, name
        return a
    fb_mod, _ = build_module({"init_module": "mov r0, #0\nbx lr", **WRAPPERS},
                             externs={n: "func" for n in FUNCTIONS + ["__do_div64"]}, name="difffallback")
    fb = Machine(fb_mod, None)
    assert fb.image is None
    for name in FUNCTIONS:
        # the oracle runs the kernel's code, the other machine the Python fallback
        assert real.table.decide(ORACLE.get(name, name)).cls == "real", name
        assert fb.table.decide(name).cls == "fallback", name
    return Side(real, real_entry), Side(fb, lambda name: fb.function_address(name) if name in WRAPPERS
                                        else fb_mod.resolved[name].addr)


def check(sides, fn, cases, nregs=1, budget=BUDGET):
    """Run every case on both sides; fail listing the disagreements."""
    real, fb = sides
    bad = []
    for args, mem in cases:
        a = real.run(fn, args, mem, nregs, budget)
        b = fb.run(fn, args, mem, nregs, budget)
        if a != b:
            bad.append((args, mem, a, b))
    assert fb.m.calls and fb.m.calls[-1].cls == "fallback" and fb.m.calls[-1].name == fn
    if bad:
        pytest.fail(_explain(fn, bad, len(cases)), pytrace=False)
    return len(cases)


def _explain(fn, bad, n):
    lines = [f"{fn}: {len(bad)} of {n} cases disagree with the kernel; first ones:"]
    for args, mem, a, b in bad[:6]:
        shown = [f"buf+{x.off:#x}" if isinstance(x, Buf) else hex(x & U32) for x in args]
        lines.append(f"  args {shown} mem { {k: v[:48] for k, v in mem.items()} }")
        if isinstance(a[1], bytes) and isinstance(b[1], bytes):
            diff = [i for i in range(ARENA) if a[1][i] != b[1][i]]
            lines.append(f"    kernel regs {a[0]} log {a[2]}")
            lines.append(f"    fallb. regs {b[0]} log {b[2]}")
            if diff:
                lo, hi = diff[0], diff[-1] + 1
                lines.append(f"    memory differs at {lo:#x}..{hi:#x}: kernel {a[1][lo:hi][:40]!r} "
                             f"fallback {b[1][lo:hi][:40]!r}")
        else:
            lines.append(f"    kernel {a[:1] + a[2:] if isinstance(a[1], bytes) else a}")
            lines.append(f"    fallb. {b[:1] + b[2:] if isinstance(b[1], bytes) else b}")
    return "\n".join(lines)


# --- inputs -----------------------------------------------------------------------------------
RNG_SEED = 20261201
ALPHABET = (b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-+.\t\n"
            + bytes(range(0x80, 0x100)) + b"\x01\x7f")


def rnd_str(rng, lo=0, hi=40, alphabet=ALPHABET):
    return bytes(rng.choice(alphabet) for _ in range(rng.randint(lo, hi)))


def string_pairs(rng, n):
    edge = [(b"", b""), (b"", b"a"), (b"a", b""), (b"abc", b"abc"), (b"abc", b"abd"), (b"abd", b"abc"),
            (b"abc", b"ab"), (b"ab", b"abc"), (b"\x80", b"a"), (b"a", b"\xff"), (b"\xff", b"\x7f"),
            (b"Hello", b"hello"), (b"HELLO", b"hello"), (b"\xc0", b"\xe0"), (b"\xd7", b"\xf7"),
            (b"[", b"{"), (b"Z", b"z"), (b"@", b"`")]
    out = list(edge)
    for _ in range(n):
        a = rnd_str(rng)
        k = rng.randint(0, 3)
        if k == 0:
            b = rnd_str(rng)
        elif k == 1:
            b = a
        elif k == 2:
            b = a[:rng.randint(0, len(a))] + rnd_str(rng, 0, 5)
        else:
            b = bytes(c ^ 0x20 if rng.random() < 0.3 else c for c in a)
        out.append((a, b))
    return out


def test_string_measures(sides):
    rng = random.Random(RNG_SEED)
    strs = [b"", b"a", b"\xff" * 7, b"x" * 300] + [rnd_str(rng) for _ in range(60)]
    total = check(sides, "strlen", [((Buf(0),), {0: s + b"\0"}) for s in strs])
    cases = []
    for s in strs:
        for n in sorted({0, 1, len(s), len(s) + 1, rng.randint(0, len(s) + 2), 0xFFFFFFFF}):
            cases.append(((Buf(0), n), {0: s + b"\0"}))
    total += check(sides, "strnlen", cases)
    assert total > 200


def test_string_compares(sides):
    rng = random.Random(RNG_SEED + 1)
    pairs = string_pairs(rng, 80)
    mem = lambda a, b: {0: a + b"\0", 0x400: b + b"\0"}  # noqa: E731
    total = check(sides, "strcmp", [((Buf(0), Buf(0x400)), mem(a, b)) for a, b in pairs])
    total += check(sides, "strcasecmp", [((Buf(0), Buf(0x400)), mem(a, b)) for a, b in pairs])
    cases = []
    for a, b in pairs:
        for n in sorted({0, 1, min(len(a), len(b)), max(len(a), len(b)) + 1, rng.randint(0, 10)}):
            cases.append(((Buf(0), Buf(0x400), n), mem(a, b)))
    total += check(sides, "strncmp", cases)
    cases = []
    for _ in range(120):
        n = rng.randint(0, 40)
        a = bytes(rng.randrange(256) for _ in range(n))
        b = bytearray(a)
        if n and rng.random() < 0.7:
            b[rng.randrange(n)] = rng.randrange(256)
        oa, ob = rng.randint(0, 3), rng.randint(0, 3)      # unaligned buffers too
        cases.append(((Buf(oa), Buf(0x400 + ob), n), {oa: a, 0x400 + ob: bytes(b)}))
    cases.append(((Buf(0), Buf(0x400), 4), {0: b"\x00\x00\x00\x80", 0x400: b"\x00\x00\x00\x7f"}))
    cases.append(((Buf(0), Buf(0x400), 1), {0: b"\x01", 0x400: b"\xff"}))
    total += check(sides, "memcmp", cases)
    assert total > 700


def test_string_searches(sides):
    rng = random.Random(RNG_SEED + 2)
    cases_chr, cases_rchr, cases_mem = [], [], []
    for _ in range(80):
        s = rnd_str(rng)
        for c in {0, rng.choice(s) if s else 0x41, rng.randrange(256), 0x141, 0x100, 0xFFFFFF80}:
            cases_chr.append(((Buf(0), c), {0: s + b"\0"}))
            cases_rchr.append(((Buf(0), c), {0: s + b"\0"}))
            n = rng.randint(0, len(s) + 1)
            cases_mem.append(((Buf(0), c, n), {0: s + b"\0"}))
    total = check(sides, "strchr", cases_chr)
    total += check(sides, "strrchr", cases_rchr)
    total += check(sides, "memchr", cases_mem)
    cases = []
    for _ in range(100):
        a = rnd_str(rng, 0, 30, b"abcab\xe9")
        k = rng.randint(0, 2)
        b = a[rng.randint(0, len(a)):][:rng.randint(0, 5)] if k == 0 else rnd_str(rng, 0, 3, b"abc\xe9")
        cases.append(((Buf(0), Buf(0x400)), {0: a + b"\0", 0x400: b + b"\0"}))
    cases += [((Buf(0), Buf(0x400)), {0: a + b"\0", 0x400: b + b"\0"})
              for a, b in ((b"", b""), (b"", b"a"), (b"abc", b""), (b"aaab", b"aab"), (b"abc", b"abcd"))]
    total += check(sides, "strstr", cases)
    assert total > 1000


def test_string_copies(sides):
    rng = random.Random(RNG_SEED + 3)
    scpy, lcpy = [], []
    for _ in range(120):
        s = rnd_str(rng, 0, 30)
        so, do = rng.randint(0, 3), rng.randint(0, 3)      # unaligned source and destination
        for n in sorted({0, 1, len(s), len(s) + 1, rng.randint(0, 40)}):
            mem = {0x400 + so: s + b"\0"}
            scpy.append(((Buf(0x800 + do), Buf(0x400 + so), n), mem))
            lcpy.append(((Buf(0x800 + do), Buf(0x400 + so), n), mem))
    total = check(sides, "strscpy", scpy)
    total += check(sides, "strlcpy", lcpy)
    assert total > 800


NUMBERS = [b"0", b"1", b"-1", b"+1", b"-0", b"+0", b"123", b"0x1f", b"0X1F", b"0x", b"0xg", b"017", b"08",
           b"0b1", b"", b"-", b"+", b"+-1", b"--1", b" 1", b"1 ", b"1\n", b"1\n\n", b"\n", b"12a", b"fF", b"z",
           b"2147483647", b"2147483648", b"-2147483648", b"-2147483649", b"4294967295", b"4294967296",
           b"-4294967295", b"0xffffffff", b"0x100000000", b"-0x80000000", b"9223372036854775807",
           b"9223372036854775808", b"-9223372036854775808", b"18446744073709551615", b"18446744073709551616",
           b"99999999999999999999999", b"0x7fffffffffffffff0", b"1_000", b"\xb9", b"007", b"0x0", b"00x1"]


def numbers(rng, n):
    out = list(NUMBERS)
    for _ in range(n):
        sign = rng.choice([b"", b"", b"-", b"+"])
        pre = rng.choice([b"", b"", b"0", b"0x", b"0X"])
        digits = bytes(rng.choice(b"0123456789abcdefABCDEF") for _ in range(rng.randint(0, 12)))
        tail = rng.choice([b"", b"", b"", b"\n", b"x", b" "])
        out.append(sign + pre + digits + tail)
    return out


def test_kstrto(sides):
    rng = random.Random(RNG_SEED + 4)
    cases = [((Buf(0), base, Buf(0xC00)), {0: s + b"\0"}) for s in numbers(rng, 150)
             for base in (0, 8, 10, 16)]
    cases += [((Buf(0), base, Buf(0xC00)), {0: s + b"\0"}) for s in (b"101", b"z", b"Zz9") for base in (2, 1, 36)]
    total = check(sides, "kstrtoint", cases)
    total += check(sides, "kstrtouint", cases)
    assert total > 1500


def test_simple_strtoul(sides):
    rng = random.Random(RNG_SEED + 5)
    cases = [((Buf(0), Buf(0xC00), base), {0: s + b"\0"}) for s in numbers(rng, 150) for base in (0, 8, 10, 16)]
    cases += [((Buf(0), 0, base), {0: b"0x1234\0"}) for base in (0, 16, 10)]
    assert check(sides, "simple_strtoul", cases) > 700


def _div_operands(rng, n, signed):
    edge = [0, 1, 2, 3, 7, 10, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFFE, 0x10000, 0xFFFF]
    pairs = [(a, b) for a in edge for b in edge]
    for _ in range(n):
        a = rng.getrandbits(rng.choice([4, 8, 16, 32]))
        b = rng.getrandbits(rng.choice([1, 4, 8, 16, 32]))
        pairs.append((a, b))
    return [((a, b), {}) for a, b in pairs]


def test_division_helpers(sides):
    rng = random.Random(RNG_SEED + 6)
    cases = _div_operands(rng, 300, False)
    total = check(sides, "__aeabi_uidiv", cases)
    total += check(sides, "__aeabi_idiv", cases)
    total += check(sides, "__aeabi_uidivmod", cases, nregs=2)
    total += check(sides, "__aeabi_idivmod", cases, nregs=2)
    assert total > 1700


def _u64_cases(rng, n):
    edge = [0, 1, 2, 3, 10, 0xFFFFFFFF, 0x100000000, 0x7FFFFFFFFFFFFFFF, 0x8000000000000000,
            0xFFFFFFFFFFFFFFFF, 0xFFFFFFFF00000000, 12345678901234567]
    out = [(a, b) for a in edge for b in edge if b]
    for _ in range(n):
        a = rng.getrandbits(rng.choice([8, 32, 40, 63, 64]))
        b = rng.getrandbits(rng.choice([4, 16, 32, 33, 48, 64])) or 1
        out.append((a, b))
    return out


def test_64bit_division(sides):
    """__aeabi_uldivmod/ldivmod (no kernel counterpart) against div64_u64_rem / div64_s64."""
    rng = random.Random(RNG_SEED + 7)
    pairs = _u64_cases(rng, 200)
    real, fb = sides
    bad = []
    for a, b in pairs:
        args = (a & U32, a >> 32, b & U32, b >> 32)
        # div64_u64_rem(u64 dividend, u64 divisor, u64 *remainder): the pointer is the 5th word
        k = real.run("__aeabi_uldivmod", args + (Buf(0x800),), {}, nregs=2)
        f = fb.run("__aeabi_uldivmod", args, {}, nregs=4)
        kq = k[0][0] | k[0][1] << 32
        kr = int.from_bytes(k[1][0x800:0x808], "little")
        fq, fr = f[0][0] | f[0][1] << 32, f[0][2] | f[0][3] << 32
        if (kq, kr) != (fq, fr) or k[2] != f[2]:
            bad.append((a, b, (kq, kr), (fq, fr)))
        sa, sb = a - (1 << 64) if a >> 63 else a, b - (1 << 64) if b >> 63 else b
        k = real.run("__aeabi_ldivmod", args, {}, nregs=2)
        f = fb.run("__aeabi_ldivmod", args, {}, nregs=4)
        kq = k[0][0] | k[0][1] << 32
        fq, fr = f[0][0] | f[0][1] << 32, f[0][2] | f[0][3] << 32
        # the remainder has the dividend's sign: dividend == q * divisor + r (mod 2^64)
        if kq != fq or (fq * sb + (fr - (1 << 64) if fr >> 63 else fr) - sa) % (1 << 64):
            bad.append((sa, sb, kq, (fq, fr)))
    assert not bad, bad[:8]
    assert fb.m.calls[-1].cls == "fallback"
    assert len(pairs) > 300


def test_do_div64(sides):
    """do_div(n, base): the kernel's __do_div64 (arch/arm/lib/div64.S) against the fallback."""
    rng = random.Random(RNG_SEED + 16)
    cases = []
    for n, d in _u64_cases(rng, 150):
        d &= U32
        cases.append(((n & U32, n >> 32, d, 0xDEADBEEF), {}))          # r3: garbage the callee overwrites
    cases += [((n & U32, n >> 32, 0, 0xDEADBEEF), {}) for n in (0, 5, 1 << 40)]       # division by zero
    real, fb = sides
    # r1 = remainder, r2:r3 = quotient (r0 is clobbered)
    bad = []
    for args, mem in cases:
        a, b = real.run("do_div", args, mem, 4), fb.run("do_div", args, mem, 4)
        if (a[0][1:], a[1], a[2]) != (b[0][1:], b[1], b[2]):
            bad.append((args, a[0], b[0], a[2], b[2]))
    assert not bad, bad[:5]
    assert fb.m.calls[-1].name == "__do_div64" and fb.m.calls[-1].cls == "fallback"
    assert len(cases) > 280


def test_crc32_hweight_bitmaps(sides):
    rng = random.Random(RNG_SEED + 8)
    cases = []
    for _ in range(80):
        data = bytes(rng.randrange(256) for _ in range(rng.randint(0, 200)))
        off = rng.randint(0, 3)
        for seed in (0, 0xFFFFFFFF, rng.getrandbits(32)):
            cases.append(((seed, Buf(off), len(data)), {off: data}))
    total = check(sides, "crc32_le", cases)
    vals = [0, 1, 0xFFFFFFFF, 0x80000000, 0x55555555, 0xAAAAAAAA] + [rng.getrandbits(32) for _ in range(200)]
    total += check(sides, "__sw_hweight32", [((v,), {}) for v in vals])
    first, nxt = [], []
    for _ in range(100):
        size = rng.choice([0, 1, 7, 8, 31, 32, 33, 64, 100, rng.randint(0, 256)])
        density = rng.choice([0.0, 0.01, 0.1, 0.5, 1.0])
        nwords = max(1, (size + 31) // 32)
        bits = sum(1 << i for i in range(32 * nwords) if rng.random() < density)
        mem = {0: bits.to_bytes(4 * nwords, "little")}
        first.append(((Buf(0), size), mem))
        for off in sorted({0, 1, size - 1 if size else 0, size, size + 5, rng.randint(0, size + 1)}):
            nxt.append(((Buf(0), size, off), mem))
    total += check(sides, "_find_first_bit_le", first)
    total += check(sides, "_find_next_bit_le", nxt)
    assert total > 1000


# --- vsnprintf through snprintf -----------------------------------------------------------------
CONVS = ["d", "i", "u", "x", "X", "o", "s", "c", "p", "%", "lld", "llu", "llx", "hd", "hu", "hhd", "hhu",
         "ld", "lu", "lx", "zu", "zd"]


def _value(rng, conv):
    if conv in ("lld", "llu", "llx"):
        return ("i64", rng.choice([0, 1, -1, 1 << 63, (1 << 63) - 1, 1 << 32, -(1 << 32),
                                   rng.getrandbits(64), rng.getrandbits(20)]))
    if conv == "s":
        return ("s", rng.choice([b"", b"abc", b"hello world", b"\xe9t\xe9", b"\xff\x80", rnd_str(rng, 0, 20)]))
    if conv == "p":
        return ("i32", rng.choice([0, 1, 0xBF000010, 0xC0D14CCC, 0xFFFFFFF4, 0xFFFFF001, rng.getrandbits(32)]))
    if conv == "c":
        return ("i32", rng.choice([0x41, 0x7A, 0x20, 0xE9, 0xFF, 0x80, 0x141, rng.randrange(256)]))
    return ("i32", rng.choice([0, 1, -1, 42, INT_MIN, INT_MAX, 0xFFFF, 0x8000, 0x80, 0xFF, 0x7F,
                               rng.getrandbits(32), rng.getrandbits(12)]))


def _spec(rng, conv):
    flags = "".join(f for f in "-+ #0" if rng.random() < 0.2)
    width = rng.choice([None, None, None, 0, 1, 3, 8, 12, 20, "*"])
    prec = rng.choice([None, None, None, 0, 1, 3, 6, 10, "*"])
    s = "%" + flags
    star = []
    if width is not None:
        if width == "*":
            star.append(("i32", rng.choice([-6, 0, 5, 10])))
        s += str(width)
    if prec is not None:
        s += "." + str(prec)
        if prec == "*":
            star.append(("i32", rng.choice([-1, 0, 2, 5])))
    return s + conv, star


def _snprintf_case(rng, specs, size=256, lead=None):
    """specs: list of (format piece, [values]). Lays the varargs out as AAPCS does. The arguments
    before fmt: snprintf's (buf, size) by default, sprintf's (buf,), printk's ()."""
    lead = (Buf(0x800), size) if lead is None else lead
    fmt = b""
    fixed = len(lead) + 1
    words = []                    # the variadic words from r{fixed} on
    strings = {}
    sp = 0x400
    for piece, vals in specs:
        fmt += piece
        for kind, v in vals:
            if kind == "i64":
                if (fixed + len(words)) % 2:
                    words.append(0xDEADBEEF)          # padding to an even slot (r3 or a stack word)
                v &= (1 << 64) - 1
                words += [v & U32, v >> 32]
            elif kind == "s":
                strings[sp] = v + b"\0"
                words.append(Buf(sp))
                sp += (len(v) + 8) & ~3
            else:
                words.append(v & U32)
    mem = {0: fmt + b"\0", **strings}
    return tuple(lead) + (Buf(0),) + tuple(words), mem


def test_snprintf(sides):
    rng = random.Random(RNG_SEED + 9)
    cases = []
    # every conversion with every flag alone, then random widths/precisions/flags
    for conv in CONVS:
        for flags in ["", "-", "+", " ", "#", "0", "-0", "+0", "#0"]:
            for width, prec in ((None, None), (10, None), (None, 0), (10, 4), (2, 8), (None, 12)):
                s = "%" + flags + ("" if width is None else str(width)) + ("" if prec is None else f".{prec}")
                vals = [] if conv == "%" else [_value(rng, conv)]
                cases.append(_snprintf_case(rng, [(s.encode() + conv.encode(), vals)]))
    for _ in range(600):
        specs = []
        for _ in range(rng.randint(1, 4)):
            conv = rng.choice(CONVS)
            piece, star = _spec(rng, conv)
            vals = star + ([] if conv == "%" else [_value(rng, conv)])
            lead = rng.choice([b"", b"x=", b" ", b"\xe9", b"[", b"\n"])
            specs.append((lead + piece.encode(), vals))
        cases.append(_snprintf_case(rng, specs, size=rng.choice([256, 256, 256, 0, 1, 2, 5, 9])))
    # fixed edges: INT_MIN, NULL and bad %s pointers, %c of NUL, 64-bit alignment in r3/stack
    edges = [
        [(b"%d|%i|%u", [("i32", INT_MIN), ("i32", INT_MIN), ("i32", INT_MIN)])],
        [(b"%lld %llu", [("i64", -(1 << 63)), ("i64", (1 << 64) - 1)])],
        [(b"%s|%.3s|%10s", [("i32", 0), ("i32", 0), ("i32", 0)])],
        [(b"%s|%s", [("i32", 0x10), ("i32", 0xFFFFFFF4)])],
        [(b"a%cb", [("i32", 0)])],
        [(b"%d %lld %d", [("i32", 1), ("i64", 0x100000005), ("i32", 9)])],
        [(b"%d %d %lld", [("i32", 1), ("i32", 2), ("i64", -5)])],
        [(b"%p %p %p %20p %-20p|", [("i32", 0), ("i32", 0xBF000010), ("i32", 0xFFFFFFF4), ("i32", 0),
                                    ("i32", 0xBF000010)])],
        [(b"%px %10px %pK", [("i32", 0xBF000010), ("i32", 0x1234), ("i32", 0xBF000010)])],
        [(b"%#x %#X %#o %#x %#o", [("i32", 0), ("i32", 0), ("i32", 0), ("i32", 255), ("i32", 8)])],
        [(b"%.0d|%.0u|%.0x|%5.0d|", [("i32", 0), ("i32", 0), ("i32", 0), ("i32", 0)])],
        [(b"%05.2d|%-05d|%+05d|% 05d", [("i32", 3), ("i32", 3), ("i32", 3), ("i32", 3)])],
        [(b"%*d|%-*d|%.*d|%*.*d", [("i32", -5), ("i32", 1), ("i32", 4), ("i32", 2), ("i32", -3), ("i32", 7),
                                    ("i32", 6), ("i32", 2), ("i32", 9)])],
        [(b"100%%%%%d", [("i32", 5)])],
        [(b"\xe9\xff%s\x80", [("s", b"\xc3\xa9\xff")])],
        [(b"%c%c%c", [("i32", 0xC3), ("i32", 0xA9), ("i32", 0xFF)])],
        [(b"%hhd %hhu %hd %hu", [("i32", 0x1FF), ("i32", 0x1FF), ("i32", 0x18000), ("i32", 0x18000)])],
        [(b"%zd %zu %ld %lu", [("i32", INT_MIN), ("i32", U32), ("i32", -7), ("i32", U32)])],
        [(b"end%", [])],
    ]
    cases += [_snprintf_case(rng, e) for e in edges]
    cases += [_snprintf_case(rng, [(b"hello %d", [("i32", 12345)])], size=n) for n in range(0, 12)]
    assert check(sides, "snprintf", cases) > 1000
    # printf_spec's bitfields: '*' values out of range warn once per site and are clamped; literal
    # ones wrap (the kernel pads 8 Mi characters here: a larger budget)
    big = [((Buf(0x800), 16, Buf(0)) + tuple(v), {0: f + b"\0"}) for f, v in (
        (b"%*d|", [0x7FFFFFFF, 1]), (b"%-*d|", [0x80000000, 1]), (b"%16777217d|", [5]),
        (b"%.*d|", [0x10000, 7]), (b"%.65537d|", [7]), (b"%.*d|", [-5, 7]))]
    assert check(sides, "snprintf", big, budget=100_000_000) == 6
    # scnprintf: the same formatter, the count actually stored
    assert check(sides, "scnprintf", cases[::5]) > 300


def test_pointer_extensions(sides):
    """The %p extensions the fallback knows that print the same on both machines (no symbols)."""
    mac = bytes([0x00, 0x1B, 0x21, 0xAB, 0xCD, 0xEF])
    data = {0x400: mac, 0x410: bytes([192, 168, 1, 254]), 0x420: bytes(range(0x30, 0x50)),
            0x440: struct.pack("<I", 0xDEADBEEF)}
    cases = []
    for piece, vals in (
            (b"%pM|%pm|%20pM", [Buf(0x400)] * 3), (b"%pI4|%pi4", [Buf(0x410)] * 2),
            (b"%ph|%4ph|%*ph|%5phC|%3phD|%6phN", [Buf(0x420), Buf(0x420), 8, Buf(0x420), Buf(0x420),
                                                   Buf(0x420), Buf(0x420)]),
            (b"%pa", [Buf(0x440)]), (b"%pe|%pe|%pe", [(-12) & U32, (-2) & U32, (-22) & U32]),
            (b"%pe|%10pe|%-10pe|", [0xBF000010, (-19) & U32, (-16) & U32])):
        cases.append(((Buf(0x800), 256, Buf(0)) + tuple(vals), {0: piece + b"\0", **data}))
    assert check(sides, "snprintf", cases) == 6


def test_pe_names_every_errno(sides):
    """%pe: lib/errname.c's name for every errno (armload's errno table), a number otherwise."""
    codes = list(range(1, 140)) + list(range(510, 535)) + [1000, 4095]
    cases = [((Buf(0x800), 64, Buf(0), (-e) & U32), {0: b"%pe\0"}) for e in codes]
    assert check(sides, "snprintf", cases) == len(codes)


def test_vsnprintf_va_list(sides):
    """vsnprintf(buf, size, fmt, va_list): ARM's va_list is a pointer to the saved words, 64-bit
    ones 8-aligned."""
    rng = random.Random(RNG_SEED + 10)
    cases = []
    for _ in range(150):
        words, fmt = [], b""
        for _ in range(rng.randint(1, 5)):
            conv = rng.choice(["d", "u", "x", "lld", "llu", "c", "%"])
            piece, star = _spec(rng, conv)
            fmt += piece.encode() + b","
            for kind, v in star + ([] if conv == "%" else [_value(rng, conv)]):
                if kind == "i64":
                    if len(words) % 2:
                        words.append(0xDEADBEEF)
                    v &= (1 << 64) - 1
                    words += [v & U32, v >> 32]
                else:
                    words.append(v & U32)
        mem = {0: fmt + b"\0", 0xC00: struct.pack(f"<{len(words)}I", *words)}
        cases.append(((Buf(0x800), rng.choice([256, 256, 7]), Buf(0), Buf(0xC00)), mem))
    assert check(sides, "vsnprintf", cases) == 150


# --- the other fallbacks that have kernel code ------------------------------------------------
def test_memory_and_string_copies(sides):
    rng = random.Random(RNG_SEED + 11)
    total = 0
    sets, cpys, movs, bcmps = [], [], [], []
    for _ in range(120):
        n = rng.choice([0, 1, 2, 3, 4, 7, 8, 15, 16, 31, 32, 33, 63, 64, 100, rng.randint(0, 300)])
        do, so = rng.randint(0, 7), rng.randint(0, 7)
        data = bytes(rng.randrange(256) for _ in range(n))
        sets.append(((Buf(0x800 + do), rng.choice([0, 0xFF, 0x5A, 0x1234, rng.getrandbits(32)]), n), {}))
        cpys.append(((Buf(0x800 + do), Buf(0x400 + so), n), {0x400 + so: data}))
        # overlapping both ways inside one slot
        shift = rng.choice([-9, -4, -1, 1, 3, 4, 8, 17])
        src = 0x100 + rng.randint(0, 16)
        movs.append(((Buf(src + shift), Buf(src), n), {src: data}))
        b = bytearray(data)
        if n and rng.random() < 0.5:
            b[rng.randrange(n)] ^= 0x80
        bcmps.append(((Buf(0x400 + so), Buf(0x800 + do), n), {0x400 + so: data, 0x800 + do: bytes(b)}))
    total += check(sides, "memset", sets)
    total += check(sides, "memcpy", cpys)
    total += check(sides, "memmove", movs)
    total += check(sides, "bcmp", bcmps)
    cpy, ncpy, cat = [], [], []
    for _ in range(100):
        a, b = rnd_str(rng, 0, 30), rnd_str(rng, 0, 30)
        do, so = rng.randint(0, 3), rng.randint(0, 3)
        cpy.append(((Buf(0x800 + do), Buf(0x400 + so)), {0x400 + so: b + b"\0"}))
        for n in sorted({0, 1, len(b), len(b) + 1, len(b) + 9, rng.randint(0, 40)}):
            ncpy.append(((Buf(0x800 + do), Buf(0x400 + so), n), {0x400 + so: b + b"\0"}))
        cat.append(((Buf(0x800 + do), Buf(0x400 + so)), {0x800 + do: a + b"\0", 0x400 + so: b + b"\0"}))
    # faults: the fallback's accesses are classified as the CPU classifies the kernel's own
    cpys = [((Buf(ARENA - 4), Buf(0x400), 16), {0x400: bytes(16)}), ((0, Buf(0x400), 4), {}),
            ((Buf(0x800), Buf(ARENA - 2), 8), {}), ((Buf(0x800), 0x10, 4), {})]
    total += check(sides, "memcpy", cpys)
    total += check(sides, "strlen", [((0,), {}), ((Buf(ARENA - 3),), {ARENA - 3: b"abc"})])
    total += check(sides, "strcpy", cpy)
    total += check(sides, "strncpy", ncpy)
    total += check(sides, "strcat", cat)
    assert total > 1200


def test_more_arithmetic(sides):
    rng = random.Random(RNG_SEED + 12)
    cases = _div_operands(rng, 200, False)
    total = check(sides, "__umodsi3", cases)
    total += check(sides, "__modsi3", cases)
    shifts = []
    for _ in range(150):
        v = rng.choice([0, 1, (1 << 64) - 1, 1 << 63, 0x8000000080000000, rng.getrandbits(64)])
        for sh in (0, 1, 31, 32, 33, 63, rng.randint(0, 63)):
            shifts.append(((v & U32, v >> 32, sh), {}))
    for name in ("__aeabi_llsl", "__aeabi_llsr", "__aeabi_lasr"):
        total += check(sides, name, shifts, nregs=2)
    muls = []
    for _ in range(200):
        a, b = rng.getrandbits(rng.choice([8, 32, 64])), rng.getrandbits(rng.choice([8, 32, 64]))
        muls.append(((a & U32, a >> 32, b & U32, b >> 32), {}))
    total += check(sides, "__aeabi_lmul", muls, nregs=2)
    vals = [0, 1, U32, 0x80000000, 0xFF, 0x100, 0xFFFF0000] + [rng.getrandbits(32) for _ in range(100)]
    for name in ("__sw_hweight8", "__sw_hweight16"):
        total += check(sides, name, [((v,), {}) for v in vals])
    total += check(sides, "__sw_hweight64", [((v, w), {}) for v, w in zip(vals, reversed(vals))])
    assert total > 3000


def test_more_bitmaps(sides):
    rng = random.Random(RNG_SEED + 13)
    first, nxt, andb, last = [], [], [], []
    for _ in range(100):
        size = rng.choice([0, 1, 7, 8, 31, 32, 33, 64, 100, rng.randint(0, 256)])
        nwords = max(1, (size + 31) // 32)
        density = rng.choice([0.0, 0.5, 0.9, 0.99, 1.0])
        a = sum(1 << i for i in range(32 * nwords) if rng.random() < density)
        b = sum(1 << i for i in range(32 * nwords) if rng.random() < 0.5)
        mem = {0: a.to_bytes(4 * nwords, "little"), 0x400: b.to_bytes(4 * nwords, "little")}
        first.append(((Buf(0), size), mem))
        last.append(((Buf(0), size), mem))
        for off in sorted({0, 1, size - 1 if size else 0, size, size + 3, rng.randint(0, size + 1)}):
            nxt.append(((Buf(0), size, off), mem))
            andb.append(((Buf(0), Buf(0x400), size, off), mem))
    total = check(sides, "_find_first_zero_bit_le", first)
    total += check(sides, "_find_next_zero_bit_le", nxt)
    total += check(sides, "_find_next_and_bit", andb)
    total += check(sides, "_find_last_bit", last)
    assert total > 1200


def test_more_formatting_and_parsing(sides):
    rng = random.Random(RNG_SEED + 14)
    cases = []
    for _ in range(200):
        specs = []
        for _ in range(rng.randint(1, 3)):
            conv = rng.choice(CONVS)
            piece, star = _spec(rng, conv)
            specs.append((piece.encode(), star + ([] if conv == "%" else [_value(rng, conv)])))
        cases.append(_snprintf_case(rng, specs, lead=(Buf(0x800),)))
    total = check(sides, "sprintf", cases)
    va = []
    for _ in range(100):
        fmt = b"%d|%5u|%-4x|%llu|%c"
        words = [rng.getrandbits(32), rng.getrandbits(32), rng.getrandbits(16), 0xDEADBEEF,
                 rng.getrandbits(32), rng.getrandbits(32), rng.randrange(32, 127)]
        mem = {0: fmt + b"\0", 0xC00: struct.pack("<7I", *words)}
        va.append(((Buf(0x800), Buf(0), Buf(0xC04)), mem))           # va_list at 4 mod 8: 64-bit realigns
        va.append(((Buf(0x800), rng.choice([0, 1, 6, 100]), Buf(0), Buf(0xC04)), mem))
    total += check(sides, "vsprintf", va[0::2])
    total += check(sides, "vscnprintf", va[1::2])
    nums = [((Buf(0), Buf(0xC00), base), {0: s + b"\0"}) for s in numbers(rng, 60) for base in (0, 10, 16)]
    total += check(sides, "simple_strtol", nums)
    ks = [((Buf(0), base, Buf(0xC00)), {0: s + b"\0"}) for s in numbers(rng, 60) for base in (0, 10, 16)]
    total += check(sides, "_kstrtol", ks)
    total += check(sides, "_kstrtoul", ks)
    assert total > 1200


def test_printk_records(sides):
    """printk through the kernel's _printk/vprintk_emit against the fallback: record text, level,
    continuation lines, and printk's return value."""
    rng = random.Random(RNG_SEED + 15)
    cases = []
    for _ in range(120):
        level = rng.choice([b"", b"\x010", b"\x013", b"\x016", b"\x017", b"\x01c", b"\x014"])
        piece, star = _spec(rng, rng.choice(["d", "s", "x", "lld"]))
        conv = piece[-1] if piece[-1] != "d" or not piece.endswith("lld") else "lld"
        vals = star + [_value(rng, "lld" if piece.endswith("lld") else conv)]
        tail = rng.choice([b"\n", b"", b"\n\n", b" end\n"])
        cases.append(_snprintf_case(rng, [(level + b"msg " + piece.encode() + tail, vals)], lead=()))

    total = check(sides, "_printk", cases)
    # KERN_CONT joins the previous record (both machines keep their log across calls)
    total += check(sides, "_printk", [((Buf(0),), {0: b"\x016part one\0"}), ((Buf(0),), {0: b"\x01c, two\n\0"}),
                                      ((Buf(0),), {0: b"\x013alone\n\0"})])
    va = [((Buf(0), Buf(0xC00)), {0: b"\x015v %d %s\n\0", 0xC00: struct.pack("<II", 7, 0), 0x400: b"x\0"})]
    total += check(sides, "vprintk", va)
    # dev_info(NULL, ...): "(NULL device *): " (a device needs the driver core's struct layout)
    # (void functions: no return register compared)
    total += check(sides, "_dev_info", [((0, Buf(0), 5), {0: b"probe %d\n\0"})], nregs=0)
    total += check(sides, "_dev_err", [((0, Buf(0), 5), {0: b"fail %d\n\0"})], nregs=0)
    assert total > 120


def test_list_debug(sides):
    """lib/list_debug.c (CONFIG_DEBUG_LIST): valid lists, then each corruption it reports."""
    def words(*w):
        return struct.pack(f"<{len(w)}I", *w)
    A, B, C, N = 0x400, 0x410, 0x420, 0x800          # struct list_head {next, prev} at arena offsets
    # the addresses are the same on both machines (ARENA_AT): absolute list pointers work
    a, b, c = (ARENA_AT + x for x in (A, B, C))
    ring = {A: words(b, b), B: words(a, a), N: words(0, 0)}
    cases = []
    cases.append(((Buf(N), Buf(A), Buf(B)), ring))                   # add between a and b: valid
    cases.append(((Buf(N), Buf(A), Buf(B)), {A: words(b, b), B: words(a, c), N: words(0, 0)}))   # next->prev bad
    cases.append(((Buf(N), Buf(A), Buf(B)), {A: words(c, b), B: words(a, a), N: words(0, 0)}))   # prev->next bad
    cases.append(((Buf(A), Buf(A), Buf(B)), ring))                   # double add
    cases.append(((Buf(N), 0, Buf(B)), ring))                        # prev NULL
    cases.append(((Buf(N), Buf(A), 0), ring))                        # next NULL
    total = check(sides, "__list_add_valid", cases)
    dels = [((Buf(A),), ring),
            ((Buf(A),), {A: words(0, b), B: words(a, a)}),
            ((Buf(A),), {A: words(b, 0), B: words(a, a)}),
            ((Buf(A),), {A: words(0x100, b), B: words(a, a)}),
            ((Buf(A),), {A: words(b, 0x122), B: words(a, a)}),
            ((Buf(A),), {A: words(b, b), B: words(c, a)}),
            ((Buf(A),), {A: words(b, b), B: words(a, c)})]
    total += check(sides, "__list_del_entry_valid", dels)
    assert total == 13
