"""kallsyms tables: build them like scripts/kallsyms, find and decode them in a kernel image.

Four parts, following spec §5 and the kernel sources (scripts/kallsyms.c, kernel/kallsyms.c):

* **Build** (`build_tables`): exactly what the Debian 6.1 `scripts/kallsyms` does (6.1.y carries the
  backported `kallsyms_seqs_of_names`, 3-byte big-endian; its selection still has the 6.1 ignore
  lists, which mainline moved to scripts/mksysmap in 6.2).  `KallsymsTables.to_bytes()` lays the
  tables out as the generated `.S` file does in `.rodata` (`.balign 4` per label).
* **Read** (`image_payloads`, `parse_tables`): decompress an ARM zImage (XZ or gzip payload),
  or take a raw Image or an ARM vmlinux ELF, and find the tables by structure alone — the token
  table/index pair, the markers, `kallsyms_num_syms` in front of the names, the address-sorted
  offsets and the name-ordered index — then decode every symbol.
* **Decode cache** (`cache_load`/`cache_store`): decoded tables under .cache/kallsyms, keyed on the
  image's bytes and on the SHA-256 of this decoder's source (tables.py, lookup.py).

Lookups (`KallsymsTable`, `table_from_image`) are in armload/kernel/kallsyms/lookup.py, the benchmark in
armload/bench/kallsyms.py; imports go one way: bench -> lookup -> tables.

Errors are `KernelFileError` naming what was not found; every walk over image bytes is bounded.
"""
from __future__ import annotations

import hashlib
import lzma
import os
import pickle
import struct
import zlib
from dataclasses import dataclass, field

import numpy as np

from ...errors import KernelFileError

KSYM_NAME_LEN = 512            # since ≈v6.1 (was 128)
MAX_COMPRESSED_LEN = 0x3FFF    # two-byte ULEB128 length prefix
ZIMAGE_MAGIC = b"\x18\x28\x6f\x01"   # 0x016f2818 little-endian at offset 0x24
XZ_MAGIC = b"\xfd7zXZ\x00"
GZIP_MAGIC = b"\x1f\x8b\x08"
EM_ARM = 40

__all__ = [
    "KSYM_NAME_LEN", "ZIMAGE_MAGIC", "KallsymsTables", "build_tables", "select_symbols", "sort_symbols",
    "is_ignored_symbol", "compress_symbols", "expand_best_table", "parse_tables", "image_payloads",
    "write_system_map", "read_system_map", "code_version", "cache_dir", "cache_key", "cache_load",
    "cache_store", "cache_store_extra",
]


# =============================================================================================
# Build: scripts/kallsyms
# =============================================================================================

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


# =============================================================================================
# Reading tables back out of memory bytes
# =============================================================================================

def _walk_records(data: bytes, off: int, count: int, limit: int) -> int:
    """Skip `count` name records from `off`; -1 if any record is empty or runs past `limit`."""
    for _ in range(count):
        if off >= limit:
            return -1
        b = data[off]
        if b & 0x80:
            if off + 1 >= limit:
                return -1
            n = (b & 0x7F) | (data[off + 1] << 7)
            off += 2 + n
        else:
            n = b
            off += 1 + n
        if n == 0 or off > limit:
            return -1
    return off


def _find_token_tables(data: bytes):
    """Candidates (token_table_off, token_index_off, tokens) for the token table + index pair."""
    found = []
    usable = len(data) - (len(data) % 4)
    if usable < 1024:
        return found
    u16 = np.frombuffer(data, np.uint16, usable // 2)
    # token_index: 256 strictly increasing u16 starting at 0, at a 4-aligned offset
    inc = np.diff(u16.astype(np.int32)) > 0
    # run[i] = True if inc[i .. i+254] all true; via cumulative sums
    cs = np.concatenate(([0], np.cumsum(inc, dtype=np.int64)))
    n = len(u16) - 255
    if n <= 0:
        return found
    starts = np.nonzero((u16[:n] == 0) & ((cs[255:255 + n] - cs[:n]) == 255))[0]
    starts = starts[(starts % 2) == 0]          # 4-byte aligned
    for s in starts[:64].tolist():
        ti = s * 2
        idx = u16[s:s + 256].astype(np.int64).tolist()
        last = idx[255]
        # the token table ends with the last token's NUL, then padding up to ti
        for pad in range(0, 4):
            end = ti - pad                       # one past the final NUL
            if end < 1 or data[end - 1] != 0:
                continue
            # last token length L: NUL at end-1, the token starts at tt + last
            # tt is 4-aligned; try the lengths that keep tt aligned
            for L in range(0, min(KSYM_NAME_LEN, end)):
                tt = end - 1 - L - last
                if tt < 0:
                    break
                if tt % 4:
                    continue
                if data.find(b"\0", tt + last, end) != end - 1:
                    continue
                ok = True
                toks = []
                for i in range(256):
                    a = tt + idx[i]
                    b = tt + idx[i + 1] - 1 if i < 255 else end - 1
                    if b < a or data[b] != 0 or data.find(b"\0", a, b) != -1:
                        ok = False
                        break
                    toks.append(bytes(data[a:b]))
                if ok:
                    found.append((tt, ti, toks))
                    break
            else:
                continue
            break
    return found


def _u32(data: bytes, off: int) -> int:
    return struct.unpack_from("<I", data, off)[0]


def _check_seqs(data, off, n, names, names_off, markers, tokens) -> list[int] | None:
    """A 3-byte big-endian permutation of 0..n-1 ordering names by strcmp? (spot-checked)."""
    if off < 0 or off + 3 * n > len(data):
        return None
    raw = np.frombuffer(data, np.uint8, 3 * n, off).reshape(n, 3).astype(np.int64)
    seqs = (raw[:, 0] << 16) | (raw[:, 1] << 8) | raw[:, 2]
    if seqs.max(initial=0) >= n or len(np.unique(seqs)) != n:
        return None
    return seqs.tolist()


def parse_tables(data: bytes, *, base: int = 0, source: str = "image") -> dict:
    """Locate the kallsyms tables in `data` by structure and decode them.

    Returns a dict with num_syms, names, markers, token_table, addresses, relative_base, seqs
    (None when the image has no kallsyms_seqs_of_names), layout offsets and the names' end.
    Raises KernelFileError naming what could not be found.
    """
    cands = _find_token_tables(data)
    if not cands:
        raise KernelFileError(f"{source}: no kallsyms token table found (256 NUL-terminated tokens "
                              f"followed by their u16 token index); the kernel may lack CONFIG_KALLSYMS",
                              file=source)
    errors = []
    for tt, ti, toks in cands:
        try:
            return _parse_around(data, tt, ti, toks, source)
        except KernelFileError as e:
            errors.append(e.message)
    raise KernelFileError(errors[0] if len(errors) == 1 else
                          f"{source}: found {len(cands)} token-table candidates but no consistent "
                          f"kallsyms tables around them ({errors[0]})", file=source)


def _parse_around(data: bytes, tt: int, ti: int, toks: list[bytes], source: str) -> dict:
    # --- markers: u32 array starting at 0, growing by 2..(0x3FFF+2)*256 bytes per 256 symbols,
    #     ending right before the token table ("direct": pre-6.2 and mainline order) or before
    #     kallsyms_seqs_of_names ("seqs": Debian 6.1.y order, token table at align4(end + 3n)).
    usable = min(len(data) - (len(data) % 4), tt)
    u32 = np.frombuffer(data, np.uint32, usable // 4)
    lim = 256 * (MAX_COMPRESSED_LEN + 2)

    def delta_ok(m: int, delta: int) -> bool:
        return delta == 0 or (3 * (256 * (m - 1) + 1) + 3) // 4 * 4 <= delta <= (3 * 256 * m + 3) // 4 * 4

    cand = []
    # one marker (n <= 256)
    for delta in sorted({0} | {(3 * k + 3) // 4 * 4 for k in range(1, 257)}):
        ms = tt - delta - 4
        if ms >= 8 and ms % 4 == 0 and int(u32[ms // 4]) == 0:
            cand.append((ms, [0]))
    zi = np.nonzero(u32[:-1] == 0)[0]
    if len(zi):
        d = u32[zi + 1].astype(np.int64)
        zi = zi[(d >= 512) & (d <= lim)]
    for z in zi[-4096:].tolist():
        run = [0]
        j = z + 1
        while j < len(u32):
            v = int(u32[j])
            if not (512 <= v - run[-1] <= lim):
                break
            run.append(v)
            j += 1
            if delta_ok(len(run), tt - 4 * j):
                cand.append((4 * z, list(run)))

    def names_for(ms: int, markers: list[int]):
        """num_syms + names ending right before the markers at ms: (nm, n, names_end) or None."""
        m = len(markers)
        lo_n, hi_n = 256 * (m - 1) + 1, 256 * m
        last = markers[-1]
        top = (ms - last - 4) // 4            # nm/4 upper bound (names are longer than `last`)
        bot = max(1, (ms - last - 4 - 256 * (MAX_COMPRESSED_LEN + 2)) // 4)
        if top < bot:
            return None
        w = u32[bot - 1:top].astype(np.int64)      # u32 at nm-4 for nm/4 in [bot, top)
        hits = np.nonzero((w >= lo_n) & (w <= hi_n))[0][::-1]
        for h in hits[:4096].tolist():
            nm = (bot + h) * 4
            n = int(w[h])
            e = _walk_records(data, nm + last, n - 256 * (m - 1), ms)
            if e < 0 or (e + 3) // 4 * 4 != ms:
                continue
            return nm, n, e
        return None

    layout = names_info = None
    for ms, markers in cand:
        ni = names_for(ms, markers)
        if not ni:
            continue
        n = ni[1]
        me = ms + 4 * len(markers)
        if me == tt:
            layout, names_info = ("direct", ms, markers), ni
            break
        if tt - me == (3 * n + 3) // 4 * 4:
            layout, names_info = ("seqs", ms, markers, me), ni
            break
    if layout is None:
        raise KernelFileError(f"{source}: kallsyms token table at {tt:#x} but no kallsyms_markers / "
                              f"kallsyms_names / kallsyms_num_syms in front of it", file=source)
    token_index_end = ti + 512
    nm, n, names_end = names_info
    markers = layout[2]
    ms = layout[1]
    # full walk: every record valid, markers agree
    off = nm
    for i in range(n):
        if (i & 0xFF) == 0 and nm + markers[i >> 8] != off:
            raise KernelFileError(f"{source}: kallsyms_markers[{i >> 8}] disagrees with kallsyms_names",
                                  file=source)
        off = _walk_records(data, off, 1, ms)
        if off < 0:
            raise KernelFileError(f"{source}: kallsyms_names truncated at symbol {i} of {n}", file=source)
    names = bytes(data[nm:names_end])
    # --- offsets + relative_base (or absolute addresses)
    addresses = relative_base = offs_at = None

    def try_offsets(at: int, rb_at: int | None):
        if at < 0 or at + 4 * n > len(data) or at % 4:
            return None
        arr = np.frombuffer(data, np.uint32, n, at).astype(np.int64)
        if n > 1 and np.any(np.diff(arr) < 0):
            return None
        if rb_at is None:
            if arr[0] < 0xBF000000 and arr[0] != 0:
                pass
            return None if arr[0] == 0 else (None, arr)
        if rb_at + 4 > len(data):
            return None
        rb = _u32(data, rb_at)
        if arr[0] != 0:
            return None
        return rb, arr

    for at, rb_at in ((nm - 8 - 4 * n, nm - 8),                              # 6.1.y / older
                      ((token_index_end + 3) // 4 * 4, (token_index_end + 3) // 4 * 4 + 4 * n)):   # mainline
        r = try_offsets(at, rb_at)
        if r is not None:
            relative_base, arr = r
            addresses = ((arr + relative_base) & 0xFFFFFFFF).tolist()
            offs_at = at
            break
    if addresses is None:
        r = try_offsets(nm - 4 - 4 * n, None)        # kallsyms_addresses (no BASE_RELATIVE)
        if r is not None:
            addresses = r[1].tolist()
            offs_at = nm - 4 - 4 * n
    if addresses is None:
        raise KernelFileError(f"{source}: kallsyms_names found ({n} symbols) but no address-sorted "
                              f"kallsyms_offsets/kallsyms_relative_base or kallsyms_addresses next to them",
                              file=source)
    # --- seqs_of_names (optional)
    seqs = None
    seq_cands = []
    if layout[0] == "seqs":
        seq_cands.append(layout[3])
    if relative_base is not None and offs_at > nm:
        seq_cands.append(offs_at + 4 * n + 4)
    for at in seq_cands:
        seqs = _check_seqs(data, at, n, names, nm, markers, toks)
        if seqs is not None:
            break
    return {"num_syms": n, "names": names, "markers": markers, "token_table": toks,
            "addresses": addresses, "relative_base": relative_base, "seqs": seqs,
            "labels": {"kallsyms_num_syms": nm - 4, "kallsyms_names": nm, "kallsyms_markers": ms,
                       "kallsyms_token_table": tt, "kallsyms_token_index": ti,
                       ("kallsyms_offsets" if relative_base is not None else "kallsyms_addresses"): offs_at}}


# =============================================================================================
# Kernel images
# =============================================================================================

def _decompress_zimage(blob: bytes, path: str) -> bytes:
    """The payload of an ARM zImage: the first XZ (or gzip) stream that decodes completely."""
    tried = []
    codecs = (("xz", XZ_MAGIC, lambda: lzma.LZMADecompressor(format=lzma.FORMAT_XZ), lzma.LZMAError),
              ("gzip", GZIP_MAGIC, lambda: zlib.decompressobj(16 + zlib.MAX_WBITS), zlib.error))
    for name, magic, make, error in codecs:
        pos = blob.find(magic)
        while pos >= 0:
            dec = make()
            try:
                out = dec.decompress(blob[pos:], 256 << 20)
            except error as e:
                tried.append(f"{name} at {pos:#x}: {e}")
            else:
                if dec.eof:
                    return out
                tried.append(f"{name} at {pos:#x}: stream truncated after {len(out)} bytes")
            pos = blob.find(magic, pos + 1)
    detail = "; ".join(tried[:4]) if tried else "no XZ or gzip stream in the file"
    raise KernelFileError(f"{path}: ARM zImage but its compressed payload could not be decompressed ({detail})",
                          file=path)


def _elf_payload(blob: bytes, path: str) -> list[bytes]:
    """Allocated PROGBITS sections of an ARM vmlinux (.rodata first)."""
    import io
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    try:
        elf = ELFFile(io.BytesIO(blob))
        mach = elf["e_machine"]
        if mach != "EM_ARM":
            raise KernelFileError(f"{path}: not an ARM kernel: ELF machine is {mach} (expected EM_ARM)", file=path)
        if elf.elfclass != 32:
            raise KernelFileError(f"{path}: not a 32-bit ARM kernel (ELFCLASS{elf.elfclass})", file=path)
        secs = [s for s in elf.iter_sections() if s["sh_type"] == "SHT_PROGBITS" and s["sh_flags"] & 2]
        secs.sort(key=lambda s: s.name != ".rodata")
        return [s.data() for s in secs]
    except ELFError as e:
        raise KernelFileError(f"{path}: malformed ELF kernel image: {e}", file=path) from None


def image_payloads(path: str) -> tuple[list[bytes], str]:
    """The memory image(s) to search and the kind of file."""
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError as e:
        raise KernelFileError(f"{path}: cannot read kernel image: {e.strerror}", file=path) from None
    if blob[:4] == b"\x7fELF":
        return _elf_payload(blob, path), "vmlinux ELF"
    if len(blob) >= 0x28 and blob[0x24:0x28] == ZIMAGE_MAGIC:
        return [_decompress_zimage(blob, path)], "zImage"
    if blob[:4] == XZ_MAGIC[:4] or blob[:3] == GZIP_MAGIC:
        return [_decompress_zimage(blob, path)], "compressed Image"
    if len(blob) >= 0x28 and blob[0x24:0x28] == ZIMAGE_MAGIC[::-1]:
        raise KernelFileError(f"{path}: big-endian ARM zImage is not supported", file=path)
    return [blob], "raw Image"


# =============================================================================================
# Decode cache (.cache/kallsyms): keyed on the image's bytes and on this decoder's code
# =============================================================================================
# The modules whose output the cache holds: parse_tables() and the rebuild check (lookup.py).
# A change to either gives a new key, so a cached decode never outlives the code that made it.
_CODE_FILES = ("tables.py", "lookup.py")


def code_version() -> str:
    """SHA-256 (first 16 hex digits) of the decoder's source files."""
    h = hashlib.sha256()
    here = os.path.dirname(os.path.abspath(__file__))
    for name in _CODE_FILES:
        with open(os.path.join(here, name), "rb") as f:
            h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()[:16]


def cache_dir() -> str | None:
    """ARMLOAD_KALLSYMS_CACHE (empty: no cache), else .cache/kallsyms of the checkout, else ~/.cache."""
    env = os.environ.get("ARMLOAD_KALLSYMS_CACHE")
    if env is not None:
        return env or None
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    if os.path.isdir(os.path.join(root, ".cache")):
        return os.path.join(root, ".cache", "kallsyms")
    return os.path.join(os.path.expanduser("~"), ".cache", "armload", "kallsyms")


def cache_key(path: str):
    """(key, cache file or None); (None, None) when the image cannot be read."""
    d = cache_dir()
    try:
        st = os.stat(path)
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError:
        return None, None
    code = code_version()
    key = f"v2-{code}-{st.st_size}-{h.hexdigest()}"
    if not d:
        return key, None
    return key, os.path.join(d, f"{os.path.basename(path)}-{st.st_size}-{h.hexdigest()[:16]}-{code}.pkl")


def cache_load(path: str):
    """(key, cache file, cached entry or None) for an image."""
    key, cpath = cache_key(path)
    if cpath and os.path.exists(cpath):
        try:
            with open(cpath, "rb") as f:
                d = pickle.load(f)
            if d.get("key") == key:
                return key, cpath, d
        except Exception:      # a damaged or foreign pickle is a miss, decoded again
            pass
    return key, cpath, None


def cache_store(cpath: str, key: str, parsed: dict, decode_seconds: float) -> None:
    _cache_write(cpath, {"key": key, "parsed": parsed, "decode_seconds": decode_seconds})


def cache_store_extra(cpath: str, **extra) -> None:
    """Add derived data (e.g. the recovered pair table) to an existing decode-cache entry."""
    try:
        with open(cpath, "rb") as f:
            d = pickle.load(f)
        d["parsed"].update(extra)
    except (OSError, pickle.PickleError, EOFError, KeyError, TypeError):
        return
    _cache_write(cpath, d)


def _cache_write(cpath: str, d: dict) -> None:
    try:
        os.makedirs(os.path.dirname(cpath), exist_ok=True)
        tmp = cpath + f".{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            pickle.dump(d, f, protocol=4)
        os.replace(tmp, cpath)
    except OSError:
        pass


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
