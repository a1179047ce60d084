"""Lookups over decoded kallsyms tables (kernel/kallsyms.c and the two seed patch series).

Strategies for name -> address, all returning the same answer (lowest address among duplicate
names; None for a miss):

  (a) lookup_linear          old kernel (< v6.2): expand every name in address order, strcmp.
  (b) lookup_compressed      seed 002 (Zhen Lei): compress the query with the token table and
                             compare compressed bytes record by record, no expansion.
  (c) lookup_bsearch         current kernel: binary search over kallsyms_seqs_of_names, expanding
                             the probed names fully, then step left to the first equal name.
  (d) lookup_bsearch_tokens  seed 000: the same binary search, but the query is compared against
                             the compressed record token by token, stopping at the first mismatch;
                             plus batch_begin()/lookup_batch()/batch_end(): a transient name index
                             that exists only between batch start and end.

On (b) and the type char: the 6.1 tables compress the type char together with the name (so "T"
and the first letters may share a token).  The query's type is unknown, so (b) compresses
type+query once per type char present in the table (a handful) and accepts a record equal to any
of them.  Compression replays the token creation order (slot 255 down to 0, each pair replaced
left to right) — the same function scripts/kallsyms applied to every symbol — so equal strings give
equal bytes.  The pair behind each slot is not stored in the image; it is recovered from the
expanded tokens (see `_derive_pairs`), and any slot whose split is ambiguous is reported in
`pair_ambiguities`.
"""
from __future__ import annotations

import bisect
import sys
import time

from ...errors import KernelFileError
from ..zimage import image_payloads
from .build import build_tables
from .cache import cache_load, cache_store, cache_store_extra
from .parse import parse_tables

STRATEGIES = {
    "a": "lookup_linear",
    "b": "lookup_compressed",
    "c": "lookup_bsearch",
    "d": "lookup_bsearch_tokens",
}
STRATEGY_TITLES = {
    "a": "(a) linear, expand every name (< v6.2)",
    "b": "(b) compressed query, compare bytes (seed 002)",
    "c": "(c) bsearch seqs_of_names, full expansion (≥ v6.2)",
    "d": "(d) bsearch, token-wise compare (seed 000)",
}


class KallsymsTable:
    """Decoded kallsyms tables with the kernel's lookups."""

    def __init__(self, *, num_syms: int, names: bytes, markers: list[int], token_table: list[bytes],
                 addresses: list[int], seqs: list[int] | None, relative_base: int | None = None,
                 source: str = "", kind: str = "", labels: dict | None = None):
        self.num_syms = num_syms
        self.names = names
        self.markers = list(markers)
        self.token_table = [bytes(t) for t in token_table]
        self.addresses = list(addresses)
        self.relative_base = relative_base
        self.source = source
        self.kind = kind
        self.labels = labels or {}
        self.decode_seconds: float | None = None
        self.timing: dict = {}
        self.cached = False
        if seqs is None:
            self.seqs = self.build_seqs_of_names()
            self.seqs_source = "built (image has no kallsyms_seqs_of_names; laid out as ≥6.2 scripts/kallsyms)"
        else:
            self.seqs = list(seqs)
            self.seqs_source = "image"
        self._batch: dict[str, int] | None = None
        self._pairs: list | None = None
        self._types: bytes | None = None
        self.pair_ambiguities: list[int] = []
        self.pairs_source = "derived from the expanded tokens"
        self.cache_path: str | None = None

    # --- construction ------------------------------------------------------------------------
    @classmethod
    def from_parsed(cls, parsed: dict, *, source: str = "", decode_seconds=None, cached=False):
        t = cls(num_syms=parsed["num_syms"], names=parsed["names"], markers=parsed["markers"],
                token_table=parsed["token_table"], addresses=parsed["addresses"], seqs=parsed["seqs"],
                relative_base=parsed.get("relative_base"), source=source, kind=parsed.get("kind", ""),
                labels=parsed.get("labels"))
        t.decode_seconds = decode_seconds
        t.timing = parsed.get("timing", {})
        if parsed.get("pairs") is not None:
            t._pairs = list(parsed["pairs"])
            t.pairs_source = "decode cache (from a verified rebuild)"
        t.cached = cached
        return t

    @classmethod
    def from_tables(cls, tables, *, source: str = "built") -> "KallsymsTable":
        """From armload.kernel.kallsyms.build.KallsymsTables (a build) without going through bytes."""
        t = cls(num_syms=tables.num_syms, names=tables.names, markers=tables.markers,
                token_table=tables.token_table, addresses=tables.addresses(), seqs=tables.seqs_of_names,
                relative_base=tables.relative_base, source=source, kind="built")
        if tables.best_table is not None:
            t._pairs = list(tables.best_table)
        return t

    @classmethod
    def from_bytes(cls, data: bytes, *, source: str = "bytes") -> "KallsymsTable":
        t = cls.from_parsed(parse_tables(data, source=source), source=source)
        t.validate()
        return t

    # --- primitives (kernel/kallsyms.c) ---------------------------------------------------
    def _record(self, off: int) -> tuple[bytes, int]:
        """(compressed bytes, next offset) of the record at off."""
        names = self.names
        n = names[off]
        off += 1
        if n & 0x80:
            n = (n & 0x7F) | (names[off] << 7)
            off += 1
        return names[off:off + n], off + n

    def expand(self, off: int) -> tuple[bytes, int]:
        """kallsyms_expand_symbol(): (type char + name, offset of the next record)."""
        data, nxt = self._record(off)
        return b"".join(map(self.token_table.__getitem__, data)), nxt

    def symbol_offset(self, i: int) -> int:
        """get_symbol_offset(): markers[i >> 8], then skip i & 0xFF records."""
        names = self.names
        off = self.markers[i >> 8]
        for _ in range(i & 0xFF):
            b = names[off]
            off += ((b & 0x7F) | (names[off + 1] << 7)) + 2 if b & 0x80 else b + 1
        return off

    def symbol(self, i: int) -> tuple[int, str, str]:
        s, _ = self.expand(self.symbol_offset(i))
        return self.addresses[i], chr(s[0]), s[1:].decode("latin-1")

    def __len__(self) -> int:
        return self.num_syms

    def __iter__(self):
        """(addr, type, name) for every symbol in address order (a sequential expansion)."""
        off = 0
        addrs = self.addresses
        for i in range(self.num_syms):
            s, off = self.expand(off)
            yield addrs[i], chr(s[0]), s[1:].decode("latin-1")

    def raw_names(self) -> list[bytes]:
        """type+name bytes of every symbol, address order."""
        out, off = [], 0
        for _ in range(self.num_syms):
            s, off = self.expand(off)
            out.append(s)
        return out

    def build_seqs_of_names(self) -> list[int]:
        """sort_symbols_by_name() of ≥6.2 scripts/kallsyms: strcmp(name), then address, then index."""
        raw = self.raw_names()
        addrs = self.addresses
        return sorted(range(self.num_syms), key=lambda i: (raw[i][1:], addrs[i], i))

    def validate(self) -> None:
        """Every record decodes inside the table, markers agree, tokens non-empty where used."""
        n, names, off = self.num_syms, self.names, 0
        if len(self.addresses) != n or len(self.markers) != (n + 255) // 256:
            raise KernelFileError(f"{self.source}: kallsyms tables inconsistent (num_syms {n}, "
                                  f"{len(self.addresses)} addresses, {len(self.markers)} markers)", file=self.source)
        for i in range(n):
            if (i & 0xFF) == 0 and self.markers[i >> 8] != off:
                raise KernelFileError(f"{self.source}: kallsyms_markers[{i >> 8}] disagrees with names",
                                      file=self.source)
            if off >= len(names):
                raise KernelFileError(f"{self.source}: kallsyms_names truncated at symbol {i}", file=self.source)
            data, nxt = self._record(off)
            if nxt > len(names) or not data:
                raise KernelFileError(f"{self.source}: kallsyms_names truncated at symbol {i}", file=self.source)
            if not self.token_table[data[0]]:
                raise KernelFileError(f"{self.source}: symbol {i} uses an empty token", file=self.source)
            off = nxt
        if sorted(self.seqs) != list(range(n)):
            raise KernelFileError(f"{self.source}: kallsyms_seqs_of_names is not a permutation", file=self.source)

    # --- (a) linear ---------------------------------------------------------------------------
    def lookup_linear(self, name: str) -> int | None:
        """Old kallsyms_lookup_name(): expand every symbol in address order, strcmp."""
        if not name:
            return None
        q = name.encode("latin-1")
        tt = self.token_table
        names = self.names
        off = 0
        for i in range(self.num_syms):
            n = names[off]
            off += 1
            if n & 0x80:
                n = (n & 0x7F) | (names[off] << 7)
                off += 1
            s = b"".join(map(tt.__getitem__, names[off:off + n]))
            off += n
            if s[1:] == q:
                return self.addresses[i]
        return None

    # --- (b) compressed query --------------------------------------------------------------
    def _derive_pairs(self) -> list:
        """Recover best_table (slot -> literal char or (x, y) pair) from the expanded tokens.

        A slot s holds a literal iff its token is the single char s. Otherwise it was created as
        a pair (x, y) of earlier slots (higher numbers) or literals with exp(x)+exp(y) == token.
        When several splits fit, the one whose pair never survives adjacent in the compressed
        names is kept (after s existed, every x,y adjacency was replaced, and no later
        replacement can create one); remaining ties are recorded in pair_ambiguities.
        """
        tt = self.token_table
        pairs: list = [None] * 256
        lit = {}
        for s in range(256):
            if tt[s] == bytes((s,)):
                pairs[s] = s
                lit[tt[s]] = s
        made: dict[bytes, int] = dict(lit)       # expansion -> slot (earliest created = highest slot)
        adjacent = None
        self.pair_ambiguities = []
        for s in range(255, -1, -1):
            if pairs[s] is not None or not tt[s]:
                continue
            e = tt[s]
            opts = [(made[e[:k]], made[e[k:]]) for k in range(1, len(e)) if e[:k] in made and e[k:] in made]
            if not opts:
                raise KernelFileError(f"{self.source}: token {s} ({e!r}) is not a pair of earlier tokens",
                                      file=self.source)
            if len(opts) > 1:
                if adjacent is None:
                    adjacent = self._adjacent_pairs()
                keep = [o for o in opts if o not in adjacent]
                if len(keep) != 1:
                    self.pair_ambiguities.append(s)
                opts = keep or opts
            pairs[s] = opts[0]
            made.setdefault(e, s)
        return pairs

    def _pairs_from_rebuild(self) -> None:
        """Resolve ambiguous pair splits exactly: rerun scripts/kallsyms' compression over the
        decoded symbols. Accepted only if it reproduces this table's tokens and names byte for
        byte (it does for Debian's 6.1 image); the result is written to the decode cache."""
        try:
            b = build_tables(list(self), all_symbols=True)
        except ValueError:
            return
        if b.token_table == self.token_table and b.names == self.names:
            self._pairs = list(b.best_table)
            self.pairs_source = "rebuilt (scripts/kallsyms compression rerun, identical tables)"
            self.pair_ambiguities_resolved = list(self.pair_ambiguities)
            self.pair_ambiguities = []
            if getattr(self, "cache_path", None):
                cache_store_extra(self.cache_path, pairs=self._pairs)

    def _adjacent_pairs(self) -> set:
        seen = set()
        off = 0
        for _ in range(self.num_syms):
            data, off = self._record(off)
            seen.update(zip(data, data[1:]))
        return seen

    def _compressor(self):
        if self._pairs is None:
            self._pairs = self._derive_pairs()
            if self.pair_ambiguities:
                self._pairs_from_rebuild()
        if getattr(self, "_steps", None) is None:
            self._steps = [(bytes(p), bytes((s,))) for s in range(255, -1, -1)
                           if isinstance(p := self._pairs[s], tuple)]
            used = set()
            off = 0
            for _ in range(self.num_syms):
                data, off = self._record(off)
                used.add(self.token_table[data[0]][:1])
            self._types = b"".join(sorted(used))
        return self._steps

    def compress(self, raw: bytes) -> bytes:
        """Compress type+name bytes exactly as scripts/kallsyms compress_symbols() did."""
        for pair, rep in self._compressor():
            if pair in raw:
                raw = raw.replace(pair, rep)
        return raw

    def lookup_compressed(self, name: str) -> int | None:
        """Seed 002: compress the query, then compare compressed records (length first)."""
        if not name:
            return None
        q = name.encode("latin-1")
        self._compressor()
        wanted = {}
        for t in self._types:
            c = self.compress(bytes((t,)) + q)
            wanted.setdefault(len(c), set()).add(c)
        names = self.names
        off = 0
        for i in range(self.num_syms):
            n = names[off]
            off += 1
            if n & 0x80:
                n = (n & 0x7F) | (names[off] << 7)
                off += 1
            cs = wanted.get(n)
            if cs is not None and names[off:off + n] in cs:
                return self.addresses[i]
            off += n
        return None

    # --- (a)/(b) for many queries in one pass (same per-record work, first match wins) -------
    def lookup_linear_many(self, names) -> list[int | None]:
        """(a) for a list of names in one scan: expand each record once, first match per name.

        Same answers as calling lookup_linear per name (the scan order is the address order, so
        the first match is the lowest address); used to check every symbol in reasonable time.
        """
        want = {n.encode("latin-1") for n in names if n}
        found: dict[bytes, int] = {}
        addrs = self.addresses
        off = 0
        for i in range(self.num_syms):
            s, off = self.expand(off)
            k = s[1:]
            if k in want and k not in found:
                found[k] = addrs[i]
        return [found.get(n.encode("latin-1")) if n else None for n in names]

    def lookup_compressed_many(self, names) -> list[int | None]:
        """(b) for a list of names in one scan over the compressed records (first match wins)."""
        self._compressor()
        want: dict[bytes, str] = {}
        for n in names:
            if n:
                q = n.encode("latin-1")
                for t in self._types:
                    want.setdefault(self.compress(bytes((t,)) + q), n)
        found: dict[str, int] = {}
        addrs = self.addresses
        off = 0
        for i in range(self.num_syms):
            data, off = self._record(off)
            n = want.get(data)
            if n is not None and n not in found:
                found[n] = addrs[i]
        return [found.get(n) if n else None for n in names]

    # --- (c) binary search with full expansion ---------------------------------------------
    def _name_at(self, k: int) -> bytes:
        return self.expand(self.symbol_offset(self.seqs[k]))[0][1:]

    def lookup_bsearch(self, name: str) -> int | None:
        """kallsyms_lookup_names() (≥6.2): bsearch seqs_of_names, expand, strcmp; first equal wins."""
        if not name:
            return None
        q = name.encode("latin-1")
        low, high = 0, self.num_syms - 1
        mid = -1
        while low <= high:
            mid = low + (high - low) // 2
            s = self._name_at(mid)
            if q > s:
                low = mid + 1
            elif q < s:
                high = mid - 1
            else:
                break
        else:
            return None
        low = mid
        while low and self._name_at(low - 1) == q:
            low -= 1
        return self.addresses[self.seqs[low]]

    # --- (d) binary search comparing tokens on the fly -------------------------------------
    def _cmp_tokens(self, i: int, q: bytes) -> int:
        """strcmp(name of symbol i, q) without expanding: token by token, stop at first mismatch."""
        data, _ = self._record(self.symbol_offset(i))
        tt = self.token_table
        pos = 0
        first = True
        for b in data:
            t = tt[b]
            if first:
                t = t[1:]          # the type char
                first = False
                if not t:
                    continue
            L = len(t)
            seg = q[pos:pos + L]
            if seg != t:
                return -1 if t < seg else 1
            pos += L
        return 0 if pos == len(q) else -1

    def lookup_bsearch_tokens(self, name: str) -> int | None:
        """Seed 000: bsearch seqs_of_names comparing against compressed tokens on the fly."""
        if not name:
            return None
        if self._batch is not None:
            return self._batch.get(name)
        q = name.encode("latin-1")
        seqs = self.seqs
        low, high = 0, self.num_syms - 1
        mid = -1
        while low <= high:
            mid = low + (high - low) // 2
            r = self._cmp_tokens(seqs[mid], q)
            if r < 0:
                low = mid + 1
            elif r > 0:
                high = mid - 1
            else:
                break
        else:
            return None
        low = mid
        while low and self._cmp_tokens(seqs[low - 1], q) == 0:
            low -= 1
        return self.addresses[seqs[low]]

    # --- batch (seed 000's transient index) -----------------------------------------------------
    def batch_begin(self) -> None:
        """Build the transient name -> address index (lowest address wins), one sequential pass."""
        idx: dict[str, int] = {}
        addrs = self.addresses
        off = 0
        for i in range(self.num_syms):
            s, off = self.expand(off)
            k = s[1:].decode("latin-1")
            a = addrs[i]
            if k not in idx:           # address order: the first seen is the lowest address
                idx[k] = a
        self._batch = idx

    def batch_end(self) -> None:
        self._batch = None

    @property
    def in_batch(self) -> bool:
        return self._batch is not None

    def lookup_batch(self, names) -> list[int | None]:
        """Resolve many names at once through the batch index (begun and ended here if needed)."""
        own = self._batch is None
        if own:
            self.batch_begin()
        try:
            b = self._batch
            return [b.get(n) if n else None for n in names]
        finally:
            if own:
                self.batch_end()

    def lookup(self, name: str, strategy: str = "c") -> int | None:
        return getattr(self, STRATEGIES.get(strategy, strategy))(name)

    # --- address -> name ------------------------------------------------------------------------
    def _text_bounds(self):
        if getattr(self, "_bounds", None) is None:
            want = {"_stext", "_etext", "_sinittext", "_einittext", "_end"}
            found = {}
            for k in want:
                a = self.lookup_bsearch_tokens(k) if self._batch is None else self._batch.get(k)
                if a is not None:
                    found[k] = a
            self._bounds = found
        return self._bounds

    def is_ksym_addr(self, addr: int) -> bool:
        b = self._text_bounds()
        if "_stext" in b and "_etext" in b and b["_stext"] <= addr < b["_etext"]:
            return True
        if "_sinittext" in b and "_einittext" in b and b["_sinittext"] <= addr < b["_einittext"]:
            return True
        if not ("_stext" in b and "_etext" in b):
            return self.addresses and self.addresses[0] <= addr <= self.addresses[-1]
        return False

    def symbol_pos(self, addr: int) -> tuple[int, int, int] | None:
        """get_symbol_pos(): (index, symbol size, offset) for a kernel text address, else None."""
        if not self.is_ksym_addr(addr):
            return None
        addrs = self.addresses
        i = bisect.bisect_right(addrs, addr) - 1
        if i < 0:
            return None
        while i and addrs[i - 1] == addrs[i]:
            i -= 1
        start = addrs[i]
        j = bisect.bisect_right(addrs, start, i)
        if j < self.num_syms:
            end = addrs[j]
        else:
            b = self._text_bounds()
            if "_sinittext" in b and "_einittext" in b and b["_sinittext"] <= addr < b["_einittext"]:
                end = b["_einittext"]
            elif "_end" in b:
                end = b["_end"]
            else:
                end = b.get("_etext", start)
        return i, end - start, addr - start

    def addr_to_name(self, addr: int) -> str | None:
        """sprint_symbol(): "name+0xoff/0xsize", or None outside kernel text."""
        pos = self.symbol_pos(addr)
        if pos is None:
            return None
        i, size, off = pos
        return f"{self.symbol(i)[2]}+{off:#x}/{size:#x}"

    # --- sizes ------------------------------------------------------------------------------
    def table_bytes(self) -> int:
        """Bytes of the tables as they sit in the image."""
        n = self.num_syms
        return (4 + len(self.names) + 4 * len(self.markers) + 3 * n
                + sum(len(t) + 1 for t in self.token_table) + 512 + 4 * n + 4)


def table_from_image(path: str, *, use_cache: bool = True) -> KallsymsTable:
    """The KallsymsTable of a kernel image (zImage, raw Image or ARM vmlinux ELF), cached.

    use_cache=False decodes from the image and neither reads nor writes the cache."""
    key, cpath, d = cache_load(path) if use_cache else (None, None, None)
    if d is not None:
        t = KallsymsTable.from_parsed(d["parsed"], source=path, decode_seconds=d.get("decode_seconds"), cached=True)
        t.cache_path = cpath
        return t
    t0 = time.perf_counter()
    payloads, kind = image_payloads(path)
    t1 = time.perf_counter()
    err = None
    parsed = None
    for p in payloads:
        try:
            parsed = parse_tables(p, source=path)
            break
        except KernelFileError as e:
            err = err or e
    if parsed is None:
        raise err if err else KernelFileError(f"{path}: no data to search for kallsyms", file=path)
    parsed["kind"] = kind
    table = KallsymsTable.from_parsed(parsed, source=path)
    table.validate()
    t2 = time.perf_counter()
    parsed["timing"] = {"decompress": t1 - t0, "locate_and_decode": t2 - t1}
    table.decode_seconds = t2 - t0
    table.timing = parsed["timing"]
    if use_cache and cpath:
        table.cache_path = cpath
        cache_store(cpath, key, parsed, t2 - t0)
    return table


def symbols_from_image(path: str) -> list[tuple[int, str, str]]:
    """Every kallsyms symbol of a kernel image as (addr, type char, name), address order."""
    return list(table_from_image(path))


def load_kernel_image(path: str):
    """Alias of table_from_image for callers that want the lookup object."""
    return table_from_image(path)


def deep_size(obj, seen=None) -> int:
    """Rough recursive sys.getsizeof for dict/list/tuple/set of str/bytes/int."""
    seen = seen if seen is not None else set()
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        size += sum(deep_size(k, seen) + deep_size(v, seen) for k, v in obj.items())
    elif isinstance(obj, (list, tuple, set, frozenset)):
        size += sum(deep_size(x, seen) for x in obj)
    return size
