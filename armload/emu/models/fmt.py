"""lib/vsprintf.c's format rules in Python: the fallback for printk and the sprintf family when
no kernel image is mapped (with an image the kernel's own vsnprintf runs, every %p extension
included). tests/test_emu_differential.py checks it against the real vsnprintf."""
from __future__ import annotations

from ..errno import errno_name, s32 as _s32, s64 as _s64


def format_kernel(call, fmt: bytes, args) -> str:
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
        return "  (null)"               # padded to the width of a pointer
    # Plain %p (and %pK) before the kernel's pointer-hash key exists (it is filled from the
    # random pool only later in a booted kernel's life, never in this simulation).
    return "(ptrval)"               # 32-bit spelling of ptr_to_id()'s placeholder
