"""Python versions of real kernel library code, used only when no kernel image is mapped.

With an image these functions run the kernel's own code (calls.py: REAL_CODE); without one
these fallbacks stand in and the trace marks them `fallback`. tests/test_emu_differential.py
runs each against the kernel's code on generated inputs.
"""
from __future__ import annotations

from ..bootdata import CTYPE
from ..errno import EINVAL, s64 as _s64
from .base import ModelLibrary
from .fmt import format_kernel_bytes as format_kernel

ERANGE = 34
_U64 = (1 << 64) - 1
_XDIGITS = b"0123456789abcdefABCDEF"
# lib/ctype.c tolower(): isupper() (letters and latin-1 capitals) + 0x20
_TOLOWER = bytes(c + 0x20 if CTYPE[c] & 0x01 else c for c in range(256))


def register(lib: ModelLibrary) -> None:
    f = lib.fallback
    _s32 = lambda v: (v & 0xFFFFFFFF) - (1 << 32) if v & 0x80000000 else v & 0xFFFFFFFF  # noqa: E731

    @f("memset", "mmioset", "__memset", subsystem="lib")
    def _h_memset(call):
        d, c, n = call.arg(0), call.arg(1) & 0xFF, call.arg(2)
        if n:
            call.write(d, bytes([c]) * n)
        return d


    @f("__memzero", subsystem="lib")
    def _h_memzero(call):
        if call.arg(1):
            call.write(call.arg(0), bytes(call.arg(1)))
        return call.arg(0)


    @f("memcpy", "memmove", "mmiocpy", "__memcpy", "__memmove", subsystem="lib")
    def _h_memcpy(call):
        d, s, n = call.arg(0), call.arg(1), call.arg(2)
        if n:
            call.write(d, call.read(s, n))
        return d


    @f("memcmp", "bcmp", subsystem="lib")
    def _h_memcmp(call):
        a, b = call.read(call.arg(0), call.arg(2)), call.read(call.arg(1), call.arg(2))
        for x, y in zip(a, b):
            if x != y:
                return (x - y) & 0xFFFFFFFF
        return 0


    @f("memchr", subsystem="lib")
    def _h_memchr(call):
        # arch/arm/lib/memchr.S compares each byte with the whole of r1: above 0xff never matches
        c = call.arg(1)
        data = call.read(call.arg(0), call.arg(2)) if call.arg(2) else b""
        i = data.find(bytes([c])) if c < 256 else -1
        return call.arg(0) + i if i >= 0 else 0


    @f("strlen", subsystem="lib")
    def _h_strlen(call):
        return len(call.string(call.arg(0), 1 << 20))


    @f("strnlen", subsystem="lib")
    def _h_strnlen(call):
        return len(call.string(call.arg(0), call.arg(1)))


    def _cmp(a: bytes, b: bytes) -> int:
        for x, y in zip(a + b"\0", b + b"\0"):
            if x != y:
                return (1 if x > y else -1) & 0xFFFFFFFF
            if x == 0:
                return 0
        return 0


    @f("strcmp", subsystem="lib")
    def _h_strcmp(call):
        return _cmp(call.string(call.arg(0), 1 << 20), call.string(call.arg(1), 1 << 20))


    @f("strncmp", subsystem="lib")
    def _h_strncmp(call):
        n = call.arg(2)
        return _cmp(call.string(call.arg(0), n)[:n], call.string(call.arg(1), n)[:n]) if n else 0


    @f("strcasecmp", subsystem="lib")
    def _h_strcasecmp(call):
        # lib/string.c: c1 - c2 after tolower(), which lowers latin-1 capitals too (lib/ctype.c)
        a, b = call.string(call.arg(0), 1 << 20) + b"\0", call.string(call.arg(1), 1 << 20) + b"\0"
        for x, y in zip(a, b):
            x, y = _TOLOWER[x], _TOLOWER[y]
            if x != y or x == 0:
                return (x - y) & 0xFFFFFFFF
        return 0


    @f("strcpy", subsystem="lib")
    def _h_strcpy(call):
        call.write(call.arg(0), call.string(call.arg(1), 1 << 20) + b"\0")
        return call.arg(0)


    @f("strncpy", subsystem="lib")
    def _h_strncpy(call):
        n = call.arg(2)
        s = call.string(call.arg(1), n)[:n]
        if n:
            call.write(call.arg(0), s + bytes(n - len(s)))
        return call.arg(0)


    @f("strscpy", "sized_strscpy", subsystem="lib")
    def _h_strscpy(call):
        # lib/string.c with CONFIG_HAVE_EFFICIENT_UNALIGNED_ACCESS (ARMv7): word at a time while
        # 4 bytes remain (an unaligned source stops at its page end); the word holding the NUL is
        # stored with the bytes after the NUL zeroed; then byte by byte
        d, s, count = call.arg(0), call.arg(1), call.arg(2)
        if count == 0 or count > 0x7FFFFFFF:
            return (-7) & 0xFFFFFFFF           # -E2BIG
        mx = count
        if s & 3:
            mx = min(mx, 0x1000 - (s & 0xFFF))
        res = 0
        while mx >= 4:
            w = call.read(s + res, 4)
            z = w.find(b"\0")
            if z >= 0:
                call.write(d + res, w[:z] + bytes(4 - z))
                return res + z
            call.write(d + res, w)
            res, count, mx = res + 4, count - 4, mx - 4
        while count:
            c = call.read(s + res, 1)
            call.write(d + res, c)
            if c == b"\0":
                return res
            res, count = res + 1, count - 1
        if res:
            call.write(d + res - 1, b"\0")
        return (-7) & 0xFFFFFFFF


    @f("strlcpy", subsystem="lib")
    def _h_strlcpy(call):
        d, s, n = call.arg(0), call.arg(1), call.arg(2)
        src = call.string(s, 1 << 20)
        if n:
            k = min(len(src), n - 1)
            call.write(d, src[:k] + b"\0")
        return len(src)


    @f("strcat", subsystem="lib")
    def _h_strcat(call):
        d = call.arg(0)
        call.write(d + len(call.string(d, 1 << 20)), call.string(call.arg(1), 1 << 20) + b"\0")
        return d


    @f("strchr", subsystem="lib")
    def _h_strchr(call):
        s = call.string(call.arg(0), 1 << 20) + b"\0"
        i = s.find(bytes([call.arg(1) & 0xFF]))
        return call.arg(0) + i if i >= 0 else 0


    @f("strrchr", subsystem="lib")
    def _h_strrchr(call):
        # arch/arm/lib/strrchr.S compares each byte with the whole of r1 (no `and r1, #0xff`):
        # a character argument above 0xff matches nothing
        c = call.arg(1)
        s = call.string(call.arg(0), 1 << 20) + b"\0"
        i = s.rfind(bytes([c])) if c < 256 else -1
        return call.arg(0) + i if i >= 0 else 0


    @f("strstr", subsystem="lib")
    def _h_strstr(call):
        i = call.string(call.arg(0), 1 << 20).find(call.string(call.arg(1), 1 << 20))
        return call.arg(0) + i if i >= 0 else 0


    def _store_formatted(call, buf: int, size: int | None, data: bytes, scn: bool) -> int:
        if size is not None and size > 0x7FFFFFFF:
            return 0                      # vsnprintf: WARN_ON_ONCE(size > INT_MAX), nothing written
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


    @f("sprintf", subsystem="lib")
    def _h_sprintf(call):
        return _store_formatted(call, call.arg(0), None,
                                format_kernel(call, call.string(call.arg(1), 4096), call.varargs(2)), False)


    @f("snprintf", "scnprintf", subsystem="lib")
    def _h_snprintf(call):
        text = format_kernel(call, call.string(call.arg(2), 4096), call.varargs(3))
        return _store_formatted(call, call.arg(0), call.arg(1), text, call.name == "scnprintf")


    @f("vsnprintf", "vscnprintf", subsystem="lib")
    def _h_vsnprintf(call):
        text = format_kernel(call, call.string(call.arg(2), 4096), call.va_list(call.arg(3)))
        return _store_formatted(call, call.arg(0), call.arg(1), text, call.name == "vscnprintf")


    @f("vsprintf", subsystem="lib")
    def _h_vsprintf(call):
        text = format_kernel(call, call.string(call.arg(1), 4096), call.va_list(call.arg(2)))
        return _store_formatted(call, call.arg(0), None, text, False)


    def _fixup_radix(s: bytes, base: int) -> tuple[int, int]:
        """_parse_integer_fixup_radix: (offset of the digits, base)."""
        if base == 0:
            if s[:1] == b"0":
                base = 16 if s[1:2] in (b"x", b"X") and s[2:3] and s[2:3] in _XDIGITS else 8
            else:
                base = 10
        if base == 16 and s[:1] == b"0" and s[1:2] in (b"x", b"X"):
            return 2, base
        return 0, base

    def _parse_integer(s: bytes, base: int) -> tuple[int, int, bool]:
        """_parse_integer_limit: (value mod 2^64, digits consumed, overflowed)."""
        res = rv = 0
        over = False
        for c in s:
            lc = c | 0x20
            if 0x30 <= c <= 0x39:
                val = c - 0x30
            elif 0x61 <= lc <= 0x66:
                val = lc - 0x61 + 10
            else:
                break
            if val >= base:
                break
            if res >> 60 and res > (_U64 - val) // base:
                over = True
            res = (res * base + val) & _U64
            rv += 1
        return res, rv, over

    def _kstrtoull(s: bytes, base: int):
        """_kstrtoull: the value, or a negative errno."""
        off, base = _fixup_radix(s, base)
        v, rv, over = _parse_integer(s[off:], base)
        if over:
            return -ERANGE
        if rv == 0:
            return -EINVAL
        rest = s[off + rv:]
        if rest[:1] == b"\n":
            rest = rest[1:]
        return -EINVAL if rest else v

    def _kstrtoll(s: bytes, base: int):
        """kstrtoll: (errno, value)."""
        if s[:1] == b"-":
            v = _kstrtoull(s[1:], base)
            if v < 0:
                return v, 0
            neg = (-v) & _U64
            if neg and not neg >> 63:
                return -ERANGE, 0
            return 0, _s64(neg)
        v = _kstrtoull(s[1:] if s[:1] == b"+" else s, base)
        if v < 0:
            return v, 0
        if v >> 63:
            return -ERANGE, 0
        return 0, v

    @f("kstrtoint", "_kstrtol", "kstrtos32", subsystem="lib")
    def _h_kstrtoint(call):
        err, v = _kstrtoll(call.string(call.arg(0), 4096), call.arg(1))
        if err:
            return err & 0xFFFFFFFF
        if not -(1 << 31) <= v < (1 << 31):
            return (-ERANGE) & 0xFFFFFFFF
        call.put_u32(call.arg(2), v)
        return 0

    @f("kstrtouint", "_kstrtoul", "kstrtou32", subsystem="lib")
    def _h_kstrtouint(call):
        s = call.string(call.arg(0), 4096)
        v = _kstrtoull(s[1:] if s[:1] == b"+" else s, call.arg(1))
        if v < 0:
            return v & 0xFFFFFFFF
        if v >> 32:
            return (-ERANGE) & 0xFFFFFFFF
        call.put_u32(call.arg(2), v)
        return 0

    @f("simple_strtoul", "simple_strtol", subsystem="lib")
    def _h_simple_strtoul(call):
        # lib/vsprintf.c simple_strntoull: no whitespace or '+' skipping; simple_strtol negates
        # after a leading '-'; the result is an unsigned long (32 bits)
        p = call.arg(0)
        s = call.string(p, 4096)
        neg = call.name == "simple_strtol" and s[:1] == b"-"
        if neg:
            s, p = s[1:], p + 1
        off, base = _fixup_radix(s, call.arg(2))
        v, rv, _over = _parse_integer(s[off:], base)
        if call.arg(1):
            call.put_u32(call.arg(1), p + off + rv)
        return (-v if neg else v) & 0xFFFFFFFF


    # --- EABI runtime helpers (the kernel exports its own libgcc replacements) --------------

    def _div0(call, rem: int = 0):
        # arch/arm/kernel/traps.c __div0: "Division by zero in kernel." and a stack dump; lib1funcs'
        # Ldiv0 then returns 0, and __aeabi_{u,}idivmod compute the remainder as n - 0 * d = n
        call.machine.log.printk("Division by zero in kernel.", level=3)
        call.note = "division by zero: the kernel prints this and returns 0 (armload prints no stack dump)"
        return 0, rem


    @f("__aeabi_uidiv", "__udivsi3", subsystem="lib")
    def _h_uidiv(call):
        if call.arg(1) == 0:
            return _div0(call)
        return call.arg(0) // call.arg(1)


    @f("__aeabi_idiv", "__divsi3", subsystem="lib")
    def _h_idiv(call):
        a, b = call.sarg(0), call.sarg(1)
        if b == 0:
            return _div0(call)
        q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
        return q & 0xFFFFFFFF


    @f("__aeabi_uidivmod", subsystem="lib")
    def _h_uidivmod(call):
        if call.arg(1) == 0:
            return _div0(call, call.arg(0))
        return call.arg(0) // call.arg(1), call.arg(0) % call.arg(1)


    @f("__aeabi_idivmod", subsystem="lib")
    def _h_idivmod(call):
        a, b = call.sarg(0), call.sarg(1)
        if b == 0:
            return _div0(call, call.arg(0))
        q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
        return q & 0xFFFFFFFF, (a - q * b) & 0xFFFFFFFF


    @f("__umodsi3", subsystem="lib")
    def _h_umod(call):
        if call.arg(1) == 0:
            return _div0(call)
        return call.arg(0) % call.arg(1)


    @f("__modsi3", subsystem="lib")
    def _h_mod(call):
        a, b = call.sarg(0), call.sarg(1)
        if b == 0:
            return _div0(call)
        q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
        return (a - q * b) & 0xFFFFFFFF


    @f("__aeabi_uldivmod", subsystem="lib")
    def _h_uldivmod(call):
        n = call.arg(0) | (call.arg(1) << 32)
        d = call.arg(2) | (call.arg(3) << 32)
        if d == 0:
            return _div0(call)
        q, r = divmod(n, d)
        call.set_reg("r2", r & 0xFFFFFFFF)
        call.set_reg("r3", r >> 32)
        return q & 0xFFFFFFFF, q >> 32


    @f("__aeabi_ldivmod", subsystem="lib")
    def _h_ldivmod(call):
        n = _s64(call.arg(0) | (call.arg(1) << 32))
        d = _s64(call.arg(2) | (call.arg(3) << 32))
        if d == 0:
            return _div0(call)
        q = abs(n) // abs(d) * (1 if (n < 0) == (d < 0) else -1)
        r = n - q * d
        q &= 0xFFFFFFFFFFFFFFFF
        r &= 0xFFFFFFFFFFFFFFFF
        call.set_reg("r2", r & 0xFFFFFFFF)
        call.set_reg("r3", r >> 32)
        return q & 0xFFFFFFFF, q >> 32


    @f("__do_div64", subsystem="lib")
    def _h_do_div64(call):
        # arch/arm/include/asm/div64.h: n in r0:r1, base in r4; quotient -> r2:r3, remainder -> r1
        n = call.arg(0) | (call.arg(1) << 32)
        base = call.machine.reg("r4")
        if base == 0:                     # div64.S Ldiv0_64: quotient and remainder 0
            call.set_reg("r2", 0)
            call.set_reg("r3", 0)
            return _div0(call)
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


    lib.set("__aeabi_llsl", _shift64("lsl"), subsystem="lib", fallback=True)
    lib.set("__ashldi3", _shift64("lsl"), subsystem="lib", fallback=True)
    lib.set("__aeabi_llsr", _shift64("lsr"), subsystem="lib", fallback=True)
    lib.set("__lshrdi3", _shift64("lsr"), subsystem="lib", fallback=True)
    lib.set("__aeabi_lasr", _shift64("asr"), subsystem="lib", fallback=True)
    lib.set("__ashrdi3", _shift64("asr"), subsystem="lib", fallback=True)


    @f("__aeabi_lmul", "__muldi3", subsystem="lib")
    def _h_lmul(call):
        v = ((call.arg(0) | (call.arg(1) << 32)) * (call.arg(2) | (call.arg(3) << 32))) & 0xFFFFFFFFFFFFFFFF
        return v & 0xFFFFFFFF, v >> 32


    # --- user copies: the emulated process has no user space; copies behave like memcpy ---

    @f("__copy_to_user", "__copy_from_user", "arm_copy_to_user", "arm_copy_from_user",
          "_copy_to_user", "_copy_from_user", "raw_copy_to_user", "raw_copy_from_user", subsystem="lib")
    def _h_copy_user(call):
        d, s, n = call.arg(0), call.arg(1), call.arg(2)
        try:
            if n:
                call.write(d, call.read(s, n))
        except Exception:
            return n
        return 0


    @f("__clear_user", "arm_clear_user", subsystem="lib")
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

    LIST_POISON1, LIST_POISON2 = 0x100, 0x122


    def _corrupt(call, message: str):
        # CHECK_DATA_CORRUPTION with Debian's CONFIG_BUG_ON_DATA_CORRUPTION=y: pr_err, then BUG()
        call.machine.log.printk(message + "\n", 3)
        call.fault(f"kernel BUG at lib/list_debug.c: {message}", "bug")

    @f("__list_add_valid", subsystem="lib")
    def _h_list_add_valid(call):
        # lib/list_debug.c (6.1), its checks in its order; a bad pointer faults as it would there
        new, prev, nxt = call.arg(0), call.arg(1), call.arg(2)
        if prev == 0:
            _corrupt(call, "list_add corruption. prev is NULL.")
        if nxt == 0:
            _corrupt(call, "list_add corruption. next is NULL.")
        if call.u32(nxt + 4) != prev:
            _corrupt(call, f"list_add corruption. next->prev should be prev ({prev:08x}), but was "
                           f"{call.u32(nxt + 4):08x}. (next={nxt:08x}).")
        if call.u32(prev) != nxt:
            _corrupt(call, f"list_add corruption. prev->next should be next ({nxt:08x}), but was "
                           f"{call.u32(prev):08x}. (prev={prev:08x}).")
        if new in (prev, nxt):
            _corrupt(call, f"list_add double add: new={new:08x}, prev={prev:08x}, next={nxt:08x}.")
        return 1

    @f("__list_del_entry_valid", subsystem="lib")
    def _h_list_del_valid(call):
        e = call.arg(0)
        prev, nxt = call.u32(e + 4), call.u32(e)
        if nxt == 0:
            _corrupt(call, f"list_del corruption, {e:08x}->next is NULL")
        if prev == 0:
            _corrupt(call, f"list_del corruption, {e:08x}->prev is NULL")
        if nxt == LIST_POISON1:
            _corrupt(call, f"list_del corruption, {e:08x}->next is LIST_POISON1 ({LIST_POISON1:08x})")
        if prev == LIST_POISON2:
            _corrupt(call, f"list_del corruption, {e:08x}->prev is LIST_POISON2 ({LIST_POISON2:08x})")
        if call.u32(prev) != e:
            _corrupt(call, f"list_del corruption. prev->next should be {e:08x}, but was {call.u32(prev):08x}. "
                           f"(prev={prev:08x})")
        if call.u32(nxt + 4) != e:
            _corrupt(call, f"list_del corruption. next->prev should be {e:08x}, but was "
                           f"{call.u32(nxt + 4):08x}. (next={nxt:08x})")
        return 1


    @f("__sw_hweight32", "__sw_hweight16", "__sw_hweight8", subsystem="lib")
    def _h_hweight(call):
        mask = {"__sw_hweight32": 0xFFFFFFFF, "__sw_hweight16": 0xFFFF, "__sw_hweight8": 0xFF}[call.name]
        return bin(call.arg(0) & mask).count("1")


    @f("__sw_hweight64", subsystem="lib")
    def _h_hweight64(call):
        return bin(call.arg(0)).count("1") + bin(call.arg(1)).count("1")


    @f("crc32_le", subsystem="lib")
    def _h_crc32_le(call):
        import binascii
        data = call.read(call.arg(1), call.arg(2)) if call.arg(2) else b""
        return binascii.crc32(data, call.arg(0) ^ 0xFFFFFFFF) ^ 0xFFFFFFFF



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


    @f("_find_first_bit_le", "_find_first_bit", subsystem="lib")
    def _h_find_first_bit(call):
        return _find(call, call.arg(0), call.arg(1), 0, 1)


    @f("_find_next_bit_le", "_find_next_bit", subsystem="lib")
    def _h_find_next_bit(call):
        return _find(call, call.arg(0), call.arg(1), call.arg(2), 1)


    @f("_find_first_zero_bit_le", "_find_first_zero_bit", subsystem="lib")
    def _h_find_first_zero_bit(call):
        return _find(call, call.arg(0), call.arg(1), 0, 0)


    @f("_find_next_zero_bit_le", "_find_next_zero_bit", subsystem="lib")
    def _h_find_next_zero_bit(call):
        return _find(call, call.arg(0), call.arg(1), call.arg(2), 0)


    @f("_find_next_and_bit", subsystem="lib")
    def _h_find_next_and_bit(call):
        return _find(call, call.arg(0), call.arg(2), call.arg(3), 1, addr2=call.arg(1))


    @f("_find_last_bit", subsystem="lib")
    def _h_find_last_bit(call):
        size = call.arg(1)
        bits = _bitmap(call, call.arg(0), size) & ((1 << size) - 1) if size else 0
        return bits.bit_length() - 1 if bits else size
