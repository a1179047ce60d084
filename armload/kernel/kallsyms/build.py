"""kallsyms tables built exactly as the Debian 6.1 `scripts/kallsyms` builds them (6.1.y carries the
backported `kallsyms_seqs_of_names`, 3-byte big-endian; its selection still has the 6.1 ignore
lists, which mainline moved to scripts/mksysmap in 6.2). `KallsymsTables.to_bytes()` lays the
tables out as the generated `.S` file does in `.rodata` (`.balign 4` per label). System.map
files are written and read here too (nm's `addr type name` lines)."""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field

import numpy as np

from ...errors import KernelFileError

KSYM_NAME_LEN = 512            # since ≈v6.1 (was 128)
MAX_COMPRESSED_LEN = 0x3FFF    # two-byte ULEB128 length prefix


# 6.1 scripts/kallsyms.c is_ignored_symbol(): the lists that 6.2 moved to scripts/mksysmap.
_IGNORED_SYMBOLS = (
    "kallsyms_addresses", "kallsyms_offsets", "kallsyms_relative_base", "kallsyms_num_syms",
    "kallsyms_names", "kallsyms_markers", "kallsyms_token_table", "kallsyms_token_index",
    "kallsyms_seqs_of_names", "_SDA_BASE_", "_SDA2_BASE_",
)
_IGNORED_PREFIXES = (
    "__efistub_", "__kvm_nvhe_$", "__kvm_nvhe_.L", "__AArch64ADRPThunk_", "__ARMV5PILongThunk_",
    "__ARMV7PILongThunk_", "__ThumbV7PILongThunk_", "__LA25Thunk_", "__microLA25Thunk_",
    "__kcfi_typeid_",
)
_IGNORED_SUFFIXES = ("_from_arm", "_from_thumb", "_veneer")
_IGNORED_MATCHES = (".long_branch.", ".plt_branch.")
_KEPT_ABSOLUTE = ("__kernel_syscall_via_break", "__kernel_syscall_via_epc", "__kernel_sigtramp", "__gp")


def is_ignored_symbol(name: str, typ: str, *, rules: str = "6.1") -> bool:
    """read_symbol()'s filter. rules="6.1" (Debian bookworm) or "mainline" (≥6.2, mksysmap filters)."""
    if rules == "6.1":
        if name in _IGNORED_SYMBOLS or name.startswith(_IGNORED_PREFIXES) \
                or name.endswith(_IGNORED_SUFFIXES) or any(m in name for m in _IGNORED_MATCHES):
            return True
        if typ in "Uu" or typ in "Nn":
            return True
    elif typ in "un":
        return True
    if typ.upper() == "A" and name not in _KEPT_ABSOLUTE:
        return True
    return False


def _linker_provided(name: bytes) -> bool:
    """may_be_linker_script_provide_symbol(); `name` excludes the type char."""
    n = len(name)
    if n < 8 or name[:2] != b"__":
        return False
    return (name[2:8] == b"start_" or name[2:7] == b"stop_" or name[2:6] == b"end_"
            or name[n - 6:] == b"_start" or name[n - 4:] == b"_end")


def _sort_key(addr: int, sym: bytes, seq: int):
    """compare_symbols(): address, then non-weak first, non-linker-provided first, fewer '_'."""
    name = sym[1:]
    weak = sym[0] in b"wW"
    under = len(name) - len(name.lstrip(b"_"))
    return (addr, weak, _linker_provided(name), under, seq)


def select_symbols(symbols, *, all_symbols: bool = False, rules: str = "6.1"):
    """read_map() + shrink_table(): the kept entries as (addr, b"T"+name), input order, plus _text.

    Returns (entries, text_addr).
    """
    ranges = {"_stext": None, "_etext": None, "_sinittext": None, "_einittext": None}
    read = []
    text_addr = None
    for addr, typ, name in symbols:
        if len(name) >= KSYM_NAME_LEN:
            continue          # "Symbol %s too long for kallsyms" and the line is dropped
        if name == "_text":
            text_addr = addr
        if is_ignored_symbol(name, typ, rules=rules):
            continue
        if name in ranges:
            ranges[name] = addr
        read.append((addr, (typ + name).encode("latin-1")))
    if all_symbols:
        return read, text_addr
    rng = [(ranges["_stext"] or 0, ranges["_etext"] or 0), (ranges["_sinittext"] or 0, ranges["_einittext"] or 0)]
    kept = []
    for addr, sym in read:
        name = sym[1:]
        if rules != "6.1" and (name.startswith(b"__start_") or name.startswith(b"__stop_")):
            kept.append((addr, sym))
            continue
        if not any(lo <= addr <= hi for lo, hi in rng):
            continue
        if (addr == rng[0][1] and name != b"_etext") or (addr == rng[1][1] and name != b"_einittext"):
            continue          # corner case: symbols equal to _etext/_einittext may move between passes
        kept.append((addr, sym))
    return kept, text_addr


def sort_symbols(entries):
    """sort_symbols(): entries (addr, sym) in input order -> address order with the tie rules."""
    keyed = sorted(range(len(entries)), key=lambda i: _sort_key(entries[i][0], entries[i][1], i))
    return [entries[i] for i in keyed]


def _pair_codes(blist):
    """All adjacent byte pairs inside each symbol of blist, as b0 | b1 << 8 (learn_symbol)."""
    if not blist:
        return np.zeros(0, np.int64)
    joined = b"".join(blist)
    if len(joined) < 2:
        return np.zeros(0, np.int64)
    arr = np.frombuffer(joined, np.uint8).astype(np.int64)
    codes = arr[:-1] | (arr[1:] << 8)
    ends = np.cumsum(np.fromiter(map(len, blist), np.int64, len(blist))) - 1
    ends = ends[ends < len(codes)]
    mask = np.ones(len(codes), bool)
    mask[ends] = False
    return codes[mask]


def compress_symbols(syms: list[bytes]):
    """optimize_token_table(): returns (compressed symbols, best_table) where best_table[i] is
    None (unused), an int (literal char i) or a (x, y) pair, filled from slot 255 down."""
    syms = list(syms)
    profit = np.bincount(_pair_codes(syms), minlength=65536).astype(np.int64)
    best: list = [None] * 256
    if syms:
        for c in np.unique(np.frombuffer(b"".join(syms), np.uint8)).tolist():
            best[c] = c
    for i in range(255, -1, -1):
        if best[i] is not None:
            continue
        tok = int(np.argmax(profit))        # first maximum, like the strict '>' scan
        if profit[tok] == 0:
            break
        x, y = tok & 0xFF, tok >> 8
        best[i] = (x, y)
        pair, rep = bytes((x, y)), bytes((i,))
        hit = [k for k, s in enumerate(syms) if pair in s]
        old = [syms[k] for k in hit]
        new = [s.replace(pair, rep) for s in old]   # left-to-right, non-overlapping: as compress_symbols()
        profit -= np.bincount(_pair_codes(old), minlength=65536)
        profit += np.bincount(_pair_codes(new), minlength=65536)
        for k, s in zip(hit, new):
            syms[k] = s
    return syms, best


def expand_best_table(best) -> list[bytes]:
    """expand_symbol() for every slot: the emitted kallsyms_token_table strings."""
    out: list[bytes | None] = [None] * 256

    def exp(i):
        if out[i] is not None:
            return out[i]
        v = best[i]
        if v is None:
            r = b""
        elif isinstance(v, int):
            r = bytes((v,))
        else:
            r = exp(v[0]) + exp(v[1])
        out[i] = r
        return r

    for i in range(256):
        exp(i)
    return out  # type: ignore[return-value]


@dataclass
class KallsymsTables:
    """The tables scripts/kallsyms emits, as values (not yet laid out)."""
    num_syms: int
    names: bytes                    # kallsyms_names
    markers: list[int]              # kallsyms_markers
    token_table: list[bytes]        # 256 expanded tokens
    offsets: list[int]              # kallsyms_offsets (base relative) or absolute addresses
    relative_base: int | None       # None when not base relative
    seqs_of_names: list[int]        # symbol indices in name order
    best_table: list | None = None  # the pair table (build only): None | int | (x, y)
    symbols: list[tuple[int, str, str]] = field(default_factory=list)   # (addr, type, name), address order
    text_addr: int | None = None

    @property
    def base_relative(self) -> bool:
        return self.relative_base is not None

    def token_index(self) -> list[int]:
        idx, off = [], 0
        for t in self.token_table:
            idx.append(off)
            off += len(t) + 1
        return idx

    def addresses(self) -> list[int]:
        if self.relative_base is None:
            return list(self.offsets)
        return [(self.relative_base + o) & 0xFFFFFFFF for o in self.offsets]

    def to_bytes(self, *, layout: str = "6.1", ptr_size: int = 4) -> tuple[bytes, dict[str, int]]:
        """The .rodata bytes and each label's offset. layout "6.1" is Debian 6.1.y's order
        (offsets, relative_base, num_syms, names, markers, seqs_of_names, token_table,
        token_index); "mainline" is ≥6.4's (num_syms, names, markers, token_table, token_index,
        offsets, relative_base, seqs_of_names)."""
        ptr = "<I" if ptr_size == 4 else "<Q"
        pieces = {
            "kallsyms_num_syms": struct.pack("<I", self.num_syms),
            "kallsyms_names": self.names,
            "kallsyms_markers": struct.pack(f"<{len(self.markers)}I", *self.markers),
            "kallsyms_seqs_of_names": b"".join(s.to_bytes(3, "big") for s in self.seqs_of_names),
            "kallsyms_token_table": b"".join(t + b"\0" for t in self.token_table),
            "kallsyms_token_index": struct.pack("<256H", *self.token_index()),
        }
        if self.relative_base is not None:
            pieces["kallsyms_offsets"] = struct.pack(f"<{len(self.offsets)}I", *self.offsets)
            pieces["kallsyms_relative_base"] = struct.pack(ptr, self.relative_base)
            first = ["kallsyms_offsets", "kallsyms_relative_base"]
        else:
            pieces["kallsyms_addresses"] = struct.pack(f"<{len(self.offsets)}" + ptr[1], *self.offsets)
            first = ["kallsyms_addresses"]
        mid = ["kallsyms_num_syms", "kallsyms_names", "kallsyms_markers"]
        if layout == "6.1":
            order = first + mid + ["kallsyms_seqs_of_names", "kallsyms_token_table", "kallsyms_token_index"]
        elif layout == "mainline":
            order = mid + ["kallsyms_token_table", "kallsyms_token_index"] + first + ["kallsyms_seqs_of_names"]
        else:
            raise ValueError(f"unknown layout {layout!r}")
        align = max(4, ptr_size)
        out = bytearray()
        labels = {}
        for lab in order:
            out += b"\0" * (-len(out) % align)
            labels[lab] = len(out)
            out += pieces[lab]
        return bytes(out), labels


def _encode_len(n: int) -> bytes:
    if n == 0:
        raise ValueError("kallsyms failure: unexpected zero symbol length")
    if n > MAX_COMPRESSED_LEN:
        raise ValueError("kallsyms failure: unexpected huge symbol length")
    return bytes((n,)) if n <= 0x7F else bytes(((n & 0x7F) | 0x80, (n >> 7) & 0x7F))


def build_tables(symbols, *, all_symbols: bool = False, base_relative: bool = True,
                 rules: str = "6.1") -> KallsymsTables:
    """scripts/kallsyms [--all-symbols] [--base-relative] over nm-style (addr, type, name) input."""
    entries, text_addr = select_symbols(symbols, all_symbols=all_symbols, rules=rules)
    if not entries:
        raise ValueError("No valid symbol.")
    entries = sort_symbols(entries)
    raw = [s for _, s in entries]
    addrs = [a for a, _ in entries]
    comp, best = compress_symbols(raw)
    names = bytearray()
    markers = []
    for i, c in enumerate(comp):
        if (i & 0xFF) == 0:
            markers.append(len(names))
        names += _encode_len(len(c))
        names += c
    if base_relative:
        relative_base = addrs[0]
        offsets = []
        for a in addrs:
            off = a - relative_base
            if off < 0 or off > 0xFFFFFFFF:
                raise ValueError(f"kallsyms failure: symbol value {a:#x} out of range in relative mode")
            offsets.append(off)
    else:
        relative_base, offsets = None, addrs
    # sort_symbols_by_name(): strcmp on the name (type char dropped), then address, then index
    seqs = sorted(range(len(raw)), key=lambda i: (raw[i][1:], addrs[i], i))
    syms = [(a, chr(s[0]), s[1:].decode("latin-1")) for a, s in zip(addrs, raw)]
    return KallsymsTables(num_syms=len(comp), names=bytes(names), markers=markers,
                          token_table=expand_best_table(best), offsets=offsets,
                          relative_base=relative_base, seqs_of_names=seqs, best_table=best,
                          symbols=syms, text_addr=text_addr)


def write_system_map(symbols, out) -> int:
    """`addr type name` lines (System.map / nm style). `out` is a path or a text file."""
    lines = "".join(f"{a:08x} {t} {n}\n" for a, t, n in symbols)
    if isinstance(out, (str, os.PathLike)):
        try:
            with open(out, "w", encoding="latin-1") as f:
                f.write(lines)
        except OSError as e:
            raise KernelFileError(f"{out}: cannot write System.map: {e.strerror}", file=str(out)) from None
    else:
        out.write(lines)
    return len(symbols)


def read_system_map(path: str) -> list[tuple[int, str, str]]:
    """Parse nm/System.map lines (addr type name)."""
    out = []
    with open(path, encoding="latin-1") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3:
                try:
                    out.append((int(parts[0], 16), parts[1], parts[2]))
                except ValueError:
                    continue
    return out
