"""lib/vsprintf.c's format rules in Python: the fallback for printk and the sprintf family when
no kernel image is mapped (with an image the kernel's own vsnprintf runs, every %p extension
included). tests/test_emu_differential.py checks it against the real vsnprintf."""
from __future__ import annotations

from ..bootdata import CTYPE as _CTYPE
from ..errno import errno_name, s32 as _s32, s64 as _s64


# struct printf_spec flags (lib/vsprintf.c)
SIGN, LEFT, PLUS, SPACE, ZEROPAD, SMALL, SPECIAL = 1, 2, 4, 8, 16, 32, 64
PAGE_SIZE = 4096
FIELD_WIDTH_MAX, PRECISION_MAX = (1 << 23) - 1, (1 << 15) - 1


def _wrap(v: int, bits: int) -> int:
    """v stored in a signed bitfield of `bits` bits."""
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v
_U64 = (1 << 64) - 1


class _Spec:
    __slots__ = ("flags", "width", "prec", "base")

    def __init__(self):
        self.flags, self.width, self.prec, self.base = 0, -1, -1, 10


def format_kernel(call, fmt: bytes, args) -> str:
    """Format `fmt` with arguments from emulated memory, like the kernel's vsnprintf. Bytes that
    are not UTF-8 survive as surrogate escapes (`format_kernel_bytes` gives the exact bytes)."""
    return format_kernel_bytes(call, fmt, args).decode("utf-8", "surrogateescape")


def format_kernel_bytes(call, fmt: bytes, args) -> bytes:
    """vsnprintf's output (unbounded; the caller truncates to the buffer size)."""
    out = bytearray()
    i, n = 0, len(fmt)
    while i < n:
        j = fmt.find(b"%", i)
        if j < 0:
            out += fmt[i:]
            break
        out += fmt[i:j]
        i = j
        # format_decode: flags, width, precision, qualifier, conversion
        spec = _Spec()
        i += 1
        while i < n and fmt[i] in b"-+ #0":
            spec.flags |= {45: LEFT, 43: PLUS, 32: SPACE, 35: SPECIAL, 48: ZEROPAD}[fmt[i]]
            i += 1
        if i < n and 0x30 <= fmt[i] <= 0x39:
            s = i
            while i < n and 0x30 <= fmt[i] <= 0x39:
                i += 1
            spec.width = _wrap(int(fmt[s:i]), 24)          # printf_spec.field_width:24
        elif i < n and fmt[i] == 0x2A:     # '*': the next int argument (set_field_width)
            w = _s32(args.next32())
            if _wrap(w, 24) != w:
                _warn_once(call, "width", f"field width {w} too large")
                w = max(-FIELD_WIDTH_MAX, min(w, FIELD_WIDTH_MAX))
            spec.width = w
            if spec.width < 0:
                spec.width, spec.flags = -spec.width, spec.flags | LEFT
            i += 1
        if i < n and fmt[i] == 0x2E:       # '.'
            i += 1
            if i < n and 0x30 <= fmt[i] <= 0x39:
                s = i
                while i < n and 0x30 <= fmt[i] <= 0x39:
                    i += 1
                spec.prec = max(_wrap(int(fmt[s:i]), 16), 0)    # printf_spec.precision:16
            elif i < n and fmt[i] == 0x2A:     # set_precision; a negative precision is 0 here
                p = _s32(args.next32())
                if _wrap(p, 16) != p:
                    _warn_once(call, "precision", f"precision {p} too large")
                    p = max(0, min(p, PRECISION_MAX))
                spec.prec = max(p, 0)
                i += 1
            else:
                spec.prec = 0
        qual = ""
        if i < n and chr(fmt[i]) in "hlLzt":
            qual = chr(fmt[i])
            i += 1
            if qual == "l" and i < n and fmt[i] == 0x6C:
                qual, i = "L", i + 1
            elif qual == "h" and i < n and fmt[i] == 0x68:
                qual, i = "H", i + 1
        conv = chr(fmt[i]) if i < n else "\0"
        if conv == "c":
            i += 1
            c = args.next32() & 0xFF
            pad = b" " * max(spec.width - 1, 0)
            out += (bytes([c]) + pad) if spec.flags & LEFT else (pad + bytes([c]))
            continue
        if conv == "s":
            i += 1
            out += _string(call, args.next32(), spec)
            continue
        if conv == "p":
            i += 1
            e = i
            while e < n and _CTYPE[fmt[e]] & 0x07:       # the kernel's isalnum(): latin-1 too
                e += 1
            out += _pointer(call, fmt[i:e].decode("latin-1"), args.next32(), spec)
            i = e
            continue
        if conv == "%":
            i += 1
            out += b"%"
            continue
        if conv == "o":
            spec.base = 8
        elif conv == "x":
            spec.base, spec.flags = 16, spec.flags | SMALL
        elif conv == "X":
            spec.base = 16
        elif conv in "di":
            spec.flags |= SIGN
        elif conv != "u":
            # %n and anything unknown: WARN_ONCE and stop formatting (arguments would be out of step)
            _warn_once(call, "format", f"Please remove unsupported %{conv} in format string")
            break
        i += 1
        signed = bool(spec.flags & SIGN)
        if qual == "L":
            v = args.next64()
            v = _s64(v) if signed else v
        elif qual == "H":
            v = args.next32() & 0xFF
            v = v - 0x100 if signed and v & 0x80 else v
        elif qual == "h":
            v = args.next32() & 0xFFFF
            v = v - 0x10000 if signed and v & 0x8000 else v
        elif qual == "t":
            v = _s32(args.next32())                 # ptrdiff_t is signed even for %tu
        else:                                       # int, long, size_t: 32 bits on ARM
            v = args.next32()
            v = _s32(v) if signed else v
        out += _number(v & _U64, spec)
    return bytes(out)


def _warn_once(call, site: str, message: str) -> None:
    """WARN_ONCE: once per call site (format_decode, set_field_width, set_precision) and machine."""
    m = getattr(call, "machine", None)
    if m is None:
        return
    st = m.model_state.setdefault("vsprintf_warned", set())
    if site not in st:
        st.add(site)
        m.log.printk("WARNING: CPU: 0 PID: 0 at lib/vsprintf.c format_decode (armload's fallback: no image)\n",
                     level=4)
        m.log.printk(message + "\n")


def _number(num: int, spec: _Spec) -> bytes:
    """lib/vsprintf.c number(): num is the 64-bit pattern."""
    flags, base = spec.flags, spec.base
    width, prec = spec.width, spec.prec
    need_pfx = bool(flags & SPECIAL) and base != 10
    is_zero = num == 0
    locase = 0x20 if flags & SMALL else 0
    if flags & LEFT:
        flags &= ~ZEROPAD
    sign = b""
    if flags & SIGN:
        if num >> 63:
            sign, num = b"-", (-num) & _U64
            width -= 1
        elif flags & PLUS:
            sign = b"+"
            width -= 1
        elif flags & SPACE:
            sign = b" "
            width -= 1
    if need_pfx:
        if base == 16:
            width -= 2
        elif not is_zero:
            width -= 1
    digits = (f"{num:o}" if base == 8 else f"{num:X}" if base == 16 else f"{num}").encode()
    if locase:
        digits = digits.lower()
    prec = max(prec, len(digits))
    width -= prec
    out = bytearray()
    if not flags & (ZEROPAD | LEFT) and width > 0:
        out += b" " * width
        width = 0
    out += sign
    if need_pfx:
        if base == 16 or not is_zero:
            out += b"0"
        if base == 16:
            out += b"x" if locase else b"X"
    if not flags & LEFT and width > 0:
        out += (b"0" if flags & ZEROPAD else b" ") * width
        width = 0
    out += b"0" * (prec - len(digits)) + digits
    if width > 0:
        out += b" " * width
    return bytes(out)


def _widen(s: bytes, spec: _Spec) -> bytes:
    """string_nocheck + widen_string: precision limits, then space padding to the width."""
    if spec.prec >= 0:
        s = s[:spec.prec]
    if len(s) >= spec.width:
        return s
    pad = b" " * (spec.width - len(s))
    return s + pad if spec.flags & LEFT else pad + s


def _error_string(s: bytes, spec: _Spec) -> bytes:
    if spec.prec < 0:
        spec.prec = 8                     # 2 * sizeof(void *)
    return _widen(s, spec)


def _string(call, p: int, spec: _Spec) -> bytes:
    if p == 0:
        return _error_string(b"(null)", spec)
    if p < PAGE_SIZE or p >= (1 << 32) - 4095:          # check_pointer_msg: IS_ERR_VALUE too
        return _error_string(b"(efault)", spec)
    try:
        s = call.string(p, spec.prec if spec.prec >= 0 else 1 << 20)
    except Exception:
        return _error_string(b"(efault)", spec)
    return _widen(s, spec)


def _pointer_string(p: int, spec: _Spec) -> bytes:
    spec.base = 16
    spec.flags |= SMALL
    if spec.width == -1:
        spec.width = 8                    # 2 * sizeof(void *), zero-padded
        spec.flags |= ZEROPAD
    spec.flags &= ~SIGN
    return _number(p, spec)


def _default_pointer(p: int, spec: _Spec) -> bytes:
    # ptr_to_id(): NULL and error pointers print as they are; anything else is hashed with a
    # key that a booted kernel fills from the random pool only once the CRNG is ready (never in
    # this simulation, nor in the Image's initial data): the 32-bit placeholder instead.
    if p == 0 or p >= (1 << 32) - 4095:
        return _pointer_string(p, spec)
    spec.width = 8
    return _error_string(b"(ptrval)", spec)


def _pointer(call, ext: str, p: int, spec: _Spec) -> bytes:
    e = ext[:1]
    if e == "x":
        return _pointer_string(p, spec)
    if e == "e" and p < (1 << 32) - 4095:
        return _default_pointer(p, spec)
    if e in ("", "K") or not (e in "SsFfBxeMmIihaE"):
        # %pK with kptr_restrict 0 (the Image's boot value) is plain %p
        return _default_pointer(p, spec)
    text = _format_pointer(call, p, ext, spec.width if spec.width >= 0 else None).encode("utf-8", "surrogateescape")
    return text if e == "h" else _widen(text, spec)       # %ph: the width is the byte count


def _format_pointer(call, p: int, ext: str, width) -> str:
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
        return ".".join((f"{x:03d}" if e == "i" else str(x)) for x in b)     # %pi4: leading zeros
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
    return f"{p:08x}"
