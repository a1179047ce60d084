"""Stage 4: count and emit module PLT entries (arch/arm/kernel/module-plts.c), three generations.

* legacy  (v4.0, 7d485f647c1f "ARM: 8220/1: allow modules outside of bl range"): no sort; every
  SHT_REL section (any target, no symbol filter) is counted against the words at its target's
  sh_offset in the file; a branch counts unless an earlier entry of the same table has the same
  r_info and the same masked word (ARM types 0x00ffffff, Thumb types 0x2fff07ff whatever
  CONFIG_THUMB2_KERNEL says), an O(n^2) scan; REL sections whose name contains ".init" go to the
  init PLT, the rest to core; emission picks the PLT by the place (in_init) and walks every group,
  reusing any equal literal.
* sorted  (2016 series): each exec REL section sorted by (type, sym) with lib/sort.c's
  heapsort; SHN_UNDEF targets only; bitwise zero-addend test against the previous entry;
  one `.plt`; emission reuses only the last entry.
* v6      (6.1): as sorted, but skips only symbols defined in the target section, counts
  core and init separately (`.plt`, `.init.plt`), and starts each at the fixed ftrace entries.

v4.0's module linker script named the core PLT `.core.plt`; armload loads 6.1-built modules, whose
core PLT is `.plt`, and uses `.plt` as the core PLT under every generation.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import numpy as np

from ..kernel.config import KernelConfig
from ..constants import SHF_EXECINSTR, SHN_UNDEF, reloc_name
from .elf import ObjectFile
from .layout import init_layout_section
from .model import IS_BRANCH, IS_THUMB_BRANCH, PltCounts, PltEntry, distinct

PLT_ENT_SIZE = 8


# --- the kernel's sort ---------------------------------------------------------------
# lib/sort.c's permutation is computed by the compiled armload.loader._kernsort when it is built and
# matches its source (setup.py compiles the source's SHA-256 in), else by the pure-Python
# transcription below; both give the same permutation. ARMLOAD_NO_NATIVE=1 forces Python.
# The extension is looked up at the first replay, not at import: most loads never replay lib/sort.c
# (kernel_order does only for ties whose order matters), and the check's hashlib loads OpenSSL.
VARIANTS = {"v6": 0, "sorted": 1}


def _native_sort():
    """(module or None, why): the compiled heapsorts, unless absent, stale or disabled."""
    if os.environ.get("ARMLOAD_NO_NATIVE"):
        return None, "disabled by ARMLOAD_NO_NATIVE"
    try:
        from . import _kernsort
    except ImportError as e:
        return None, f"armload.loader._kernsort not built ({e})"
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_kernsort.c")
    if os.path.exists(src):
        import hashlib
        with open(src, "rb") as f:
            if hashlib.sha256(f.read()).hexdigest() != _kernsort.SOURCE_SHA256:
                return None, "armload.loader._kernsort is stale (built from another _kernsort.c; re-run make venv)"
    return _kernsort, "C extension armload.loader._kernsort"


@functools.cache
def native_sort():
    """_native_sort(), once per process, at the first replay."""
    return _native_sort()


def heapsort_order(keys, variant: str, *, native: bool | None = None) -> np.ndarray:
    """Permutation (int64 indices) that lib/sort.c's heapsort applies to `keys` (ties keep heap order).

    variant "v6": the bottom-up heapsort of lib/sort.c since v5.2 (used by 6.1);
    variant "sorted": the classic heapsort lib/sort.c had in 2016.
    native: None = the compiled sort when available, True = require it, False = pure Python.
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown heapsort variant {variant!r}")
    k = np.asarray(keys)
    fits = k.size == 0 or (np.issubdtype(k.dtype, np.integer) and int(k.min()) >= 0 and int(k.max()) <= 0xFFFFFFFF)
    compiled, why = native_sort() if native is not False else (None, "")
    if native is None:
        native = compiled is not None and fits
    if native:
        if compiled is None:
            raise RuntimeError(f"native heapsort unavailable: {why}")
        if not fits:
            raise ValueError("native heapsort keys must be unsigned 32-bit")
        out = np.empty(k.size, dtype=np.int64)
        compiled.order(np.ascontiguousarray(k, dtype=np.uint32), out, VARIANTS[variant])
        return out
    return np.array(heapsort_order_python(k.tolist(), variant), dtype=np.int64)


def heapsort_order_python(keys: list[int], variant: str) -> list[int]:
    """The pure-Python fallback of heapsort_order (same loops as armload/loader/_kernsort.c)."""
    a = list(range(len(keys)))
    k = list(keys)
    n = len(a)
    if n < 2:
        return a

    def swap(i, j):
        a[i], a[j] = a[j], a[i]
        k[i], k[j] = k[j], k[i]

    if variant == "sorted":
        def sift(r, end):
            while r * 2 + 1 < end:
                c = r * 2 + 1
                if c < end - 1 and k[c] < k[c + 1]:
                    c += 1
                if k[r] >= k[c]:
                    break
                swap(r, c)
                r = c
        for i in range(n // 2 - 1, -1, -1):
            sift(i, n)
        for i in range(n - 1, 0, -1):
            swap(0, i)
            sift(0, i)
        return a

    # Bottom-up variant: find the leaf path with one compare per level, then backtrack.
    i = n // 2
    end = n
    while True:
        if i:
            i -= 1
        else:
            end -= 1
            if end == 0:
                break
            swap(0, end)
        b = i
        while True:
            c = 2 * b + 1
            d = c + 1
            if d >= end:
                break
            b = c if k[c] >= k[d] else d
        if d == end:
            b = c
        while b != i and k[i] >= k[b]:     # cmp(a, b) >= 0: keep climbing
            b = (b - 1) // 2
        c = b
        while b != i:
            b = (b - 1) // 2
            swap(b, c)
    return a


def sort_keys(r_info: np.ndarray) -> np.ndarray:
    """cmp_rel: by type, then symbol index, as one u32 (the symbol index has 24 bits)."""
    return ((r_info & np.uint32(0xFF)) << np.uint32(24)) | (r_info >> np.uint32(8))


def stable_key_order(r_info: np.ndarray) -> np.ndarray:
    """Stable argsort by (type, sym): two LSD radix passes when symbol indices fit 16 bits."""
    rsym = r_info >> np.uint32(8)
    if len(r_info) and int(rsym.max()) < 65536:
        o1 = np.argsort(rsym.astype(np.uint16), kind="stable")
        return o1[np.argsort((r_info[o1] & np.uint32(0xFF)).astype(np.uint8), kind="stable")]
    return np.argsort(sort_keys(r_info), kind="stable")


def kernel_order(r_info: np.ndarray, words: np.ndarray, variant: str, exact: bool = False) -> np.ndarray:
    """Index order of a REL table after the kernel's in-place sort.

    Ties only matter when branches with the same (type, sym) carry different addends, so a
    stable sort is used unless such a tie exists (or `exact` is asked for), in which case
    lib/sort.c is replayed.
    """
    if not exact:
        order = stable_key_order(r_info)
        ri = r_info[order]
        same = ri[1:] == ri[:-1]
        if not same.any():
            return order
        # Only branches care about order (PLT counting and slot reuse); compare their addend bits.
        t = ri & np.uint32(0xFF)
        thumb = IS_THUMB_BRANCH[t]
        branch = IS_BRANCH[t]
        addend = words[order] & np.where(thumb, np.uint32(0x2FFF07FF), np.uint32(0x00FFFFFF))
        if not (same & branch[1:] & (addend[1:] != addend[:-1])).any():
            return order
    return heapsort_order(sort_keys(r_info), variant)


def zero_addend(words: np.ndarray, rtype: np.ndarray) -> np.ndarray:
    """is_zero_addend_relocation(): bitwise test including the PC bias (-8 ARM, -4 Thumb)."""
    thumb = IS_THUMB_BRANCH[rtype]
    upper = words & np.uint32(0xFFFF)
    lower = words >> np.uint32(16)
    tz = ((upper & np.uint32(0x7FF)) == 0x7FF) & ((lower & np.uint32(0x2FFF)) == 0x2FFE)
    az = (words & np.uint32(0x00FFFFFF)) == 0x00FFFFFE
    return np.where(thumb, tz, az)


def file_words(data: bytes, sec_offset: int, r_offset: np.ndarray) -> np.ndarray:
    """The u32 count_plts (every generation) reads at base + r_offset, base being the target's sh_addr
    in the kernel's copy of the file (hdr + sh_offset, NOBITS targets too), unbounded by the section's
    size (apply_relocate checks the offset later). Past the end of the copy the kernel reads
    undefined memory: 0 stands in for it."""
    out = np.zeros(len(r_offset), dtype=np.uint32)
    at = r_offset.astype(np.int64) + sec_offset
    ok = at + 4 <= len(data)
    o = at[ok]
    b = np.frombuffer(data, dtype=np.uint8)
    out[ok] = (b[o].astype(np.uint32) | (b[o + 1].astype(np.uint32) << 8) |
               (b[o + 2].astype(np.uint32) << 16) | (b[o + 3].astype(np.uint32) << 24))
    return out


@dataclass
class RelTable:
    """One REL section as a counting pass sees it (exec targets only, but for legacy)."""
    relsec: int
    dstsec: int
    dstname: str
    r_info: np.ndarray
    words: np.ndarray      # instruction word at each entry's r_offset (from the file)
    relname: str = ""      # the REL section's own name (v4.0 picks core/init PLT by it)


def _rel_targets(obj: ObjectFile):
    """(REL section, its entries, target section) of each REL table whose sh_info names a section
    (apply_relocations skips the others)."""
    n = len(obj.sections)
    for idx, rel in obj.rels.items():
        s = obj.sections[idx]
        if s.sh_info < n:
            yield s, rel, obj.sections[s.sh_info]


def exec_rel_tables(obj: ObjectFile) -> list[RelTable]:
    out = []
    for s, rel, dst in _rel_targets(obj):
        if not (dst.sh_flags & SHF_EXECINSTR):
            continue
        # NOBITS targets too: elf.py checked that those bytes lie in the file.
        words = file_words(obj.data, dst.sh_offset, rel["r_offset"])
        out.append(RelTable(s.index, dst.index, dst.name, rel["r_info"], words))
    return out


def sym_shndx(obj: ObjectFile) -> np.ndarray:
    """st_shndx per symbol index, with the one-past-the-end entry the kernel accepts."""
    return np.concatenate([obj.symtab["st_shndx"], [_phantom_shndx(obj)]])


def _phantom_shndx(obj: ObjectFile) -> int:
    st = obj.sections[obj.symtab_index]
    off = st.sh_offset + st.sh_size + 14
    return int.from_bytes(obj.data[off:off + 2], "little") if off + 2 <= len(obj.data) else 0


def _count_sorted(t: RelTable, order: np.ndarray, shndx: np.ndarray, same_section_rule: bool) -> int:
    r_info = t.r_info[order]
    words = t.words[order]
    rtype = r_info & np.uint32(0xFF)
    rsym = (r_info >> np.uint32(8)).astype(np.int64)
    cand = IS_BRANCH[rtype]
    if not cand.any():
        return 0
    sh = shndx[np.minimum(rsym, len(shndx) - 1)]
    cand &= (sh != t.dstsec) if same_section_rule else (sh == SHN_UNDEF)
    zero = zero_addend(words, rtype)
    dup = np.zeros(len(r_info), dtype=bool)
    dup[1:] = (r_info[1:] == r_info[:-1]) & zero[:-1]
    return int((cand & ~(zero & dup)).sum())


ARM_BRANCH_MASK = 0x00FFFFFF        # __opcode_to_mem_arm(0x00ffffff)
THUMB_BRANCH_MASK = 0x2FFF07FF      # __opcode_to_mem_thumb32(0x07ff2fff), the u32 read from LE memory


def legacy_rel_tables(obj: ObjectFile) -> list[RelTable]:
    """What the v4.0 module_frob_arch_sections loop counts: every SHT_REL section from index 1, whatever
    its target. Only branch entries' words matter, so only those are read. A REL section with
    sh_info >= e_shnum makes v4.0 read a section header past the table (undefined; elf.py refuses the
    cases where that header looks executable): armload skips it, as apply_relocations does."""
    out = []
    for s, rel, dst in _rel_targets(obj):
        br = IS_BRANCH[rel["r_info"] & np.uint32(0xFF)]
        words = np.zeros(len(rel), dtype=np.uint32)
        # sh_info 0: rewrite_section_headers leaves sechdrs[0].sh_addr 0, so v4.0 would read the
        # absolute address r_offset (a fault, not modelled); 0 stands in for those words.
        if br.any() and s.sh_info:
            words[br] = file_words(obj.data, dst.sh_offset, rel["r_offset"][br])
        out.append(RelTable(s.index, dst.index, dst.name, rel["r_info"], words, s.name))
    return out


def legacy_is_init(t: RelTable) -> bool:
    """strstr(secstrings + s->sh_name, ".init"): the REL section's own name decides."""
    return ".init" in t.relname


def _legacy_candidates(t: RelTable):
    """(branch-type mask, masked word) as v4.0's count_plts sees each entry: the mask follows the type."""
    rtype = t.r_info & np.uint32(0xFF)
    cand = IS_BRANCH[rtype]
    mask = np.where(IS_THUMB_BRANCH[rtype], np.uint32(THUMB_BRANCH_MASK), np.uint32(ARM_BRANCH_MASK))
    return cand, t.words & mask


def count_legacy_quadratic(t: RelTable) -> int:
    """v4.0 count_plts exactly as written: for each branch, duplicate_rel scans all earlier entries
    for the same r_info and ((*loc1 ^ *loc2) & mask) == 0."""
    cand, masked = _legacy_candidates(t)
    r_info = t.r_info.tolist()
    m = masked.tolist()
    ret = 0
    for i in np.flatnonzero(cand).tolist():
        ri, mi = r_info[i], m[i]
        for j in range(i):
            if r_info[j] == ri and m[j] == mi:
                break
        else:
            ret += 1
    return ret


def count_legacy(t: RelTable) -> int:
    """Same result as count_legacy_quadratic: an entry counts iff no earlier entry matches, i.e. the
    number of distinct (r_info, masked word) pairs among branches (the mask is a function of the
    type, which r_info holds, so equal masked words under equal r_info mean the same mask)."""
    cand, masked = _legacy_candidates(t)
    if not cand.any():
        return 0
    key = (t.r_info[cand].astype(np.uint64) << np.uint64(32)) | masked[cand].astype(np.uint64)
    return int(len(distinct(key)))


def plt_size(count: int, config: KernelConfig) -> int:
    """round_up(count * PLT_ENT_SIZE, sizeof(struct plt_entries))."""
    group = 2 * config.plt_stride
    return -(-count * PLT_ENT_SIZE // group) * group


@dataclass
class PltPlan:
    """The PLT counts under all three generations, the chosen one's sizes and application order."""

    counts: dict[str, PltCounts]          # all three algorithms
    orders: dict[int, np.ndarray]         # REL section index -> application order (chosen algorithm)
    sizes: dict[str, int]                 # "core"/"init" -> sh_size for the chosen algorithm


def count_plts(obj: ObjectFile, config: KernelConfig, algorithm: str, *, tables: list[RelTable] | None = None,
               exact_sort: bool = False, legacy_tables: list[RelTable] | None = None
               ) -> tuple[PltCounts, dict[int, np.ndarray]]:
    """module_frob_arch_sections' count under one generation's rules, and the order in which
    that kernel applies each REL section (legacy: unsorted). `tables`: exec_rel_tables(obj),
    `legacy_tables`: legacy_rel_tables(obj), when the caller has them already."""
    from .layout import init_layout_section
    if algorithm == "legacy":
        tables = legacy_rel_tables(obj) if legacy_tables is None else legacy_tables
        core = init = 0
        for t in tables:
            n = count_legacy(t)
            if legacy_is_init(t):
                init += n
            else:
                core += n
        return PltCounts("legacy", core, init), {t.relsec: np.arange(len(t.r_info)) for t in tables}
    tables = exec_rel_tables(obj) if tables is None else tables
    shndx = sym_shndx(obj)
    core = init = 0
    orders = {}
    for t in tables:
        order = kernel_order(t.r_info, t.words, algorithm, exact=exact_sort)
        orders[t.relsec] = order
        n = _count_sorted(t, order, shndx, same_section_rule=(algorithm == "v6"))
        if algorithm == "v6" and init_layout_section(t.dstname, config):
            init += n
        else:
            core += n
    if algorithm == "v6":
        core += config.n_fixed_plts
        init += config.n_fixed_plts
    return PltCounts(algorithm, core, init), orders


def plan_plts(obj: ObjectFile, config: KernelConfig, *, exact_sort: bool = False) -> PltPlan:
    """All three generations' counts side by side; sizes and order for config.plt_algorithm."""
    tables = exec_rel_tables(obj)
    legacy_tables = legacy_rel_tables(obj)
    counts, orders = {}, {}
    for alg in ("legacy", "sorted", "v6"):
        counts[alg], orders[alg] = count_plts(obj, config, alg, tables=tables, exact_sort=exact_sort,
                                              legacy_tables=legacy_tables)
    chosen = counts[config.plt_algorithm]
    sizes = {"core": plt_size(chosen.core, config)}
    if config.plt_algorithm in ("v6", "legacy"):       # the 2016 series merged them into one .plt
        sizes["init"] = plt_size(chosen.init, config)
    return PltPlan(counts=counts, orders=orders[config.plt_algorithm], sizes=sizes)


# --- emission ------------------------------------------------------------------------------
class PltSection:
    """One PLT section being filled (`struct mod_plt_sec`)."""

    def __init__(self, name: str, base: int, size: int, config: KernelConfig, fixed: tuple[int, ...],
                 fixed_names: tuple[str, ...] = ()):
        self.name = name
        self.base = base
        self.size = size
        self.n = config.plt_ent_count
        self.stride = config.plt_stride
        self.ldr = config.plt_ldr
        self.fixed = fixed
        self.fixed_names = fixed_names
        self.count = 0
        self.lits: list[int] = []             # literal per entry index
        self.ldr_groups: set[int] | None = None   # legacy: groups whose LDR words get_module_plt wrote
        self.filled: set[int] = set()             # legacy: entry indices get_module_plt handed out

    def slot(self, idx) -> int:
        return self.base + (idx // self.n) * 2 * self.stride + (idx % self.n) * 4

    def _prealloc(self):
        """prealloc_fixed on the section's first use (the count never returns to 0 after it)."""
        if self.fixed and self.count == 0:
            self.lits = list(self.fixed)
            self.count = len(self.fixed)

    def get_many_last(self, vals: np.ndarray) -> tuple[np.ndarray, int]:
        """get_module_plt (sorted/v6) for a run of values in order. Returns slot addresses and
        the position of the first value that overflowed the section (-1 if none)."""
        self._prealloc()
        vals = vals.astype(np.uint32)
        idx = np.empty(len(vals), dtype=np.int64)
        fixed_hit = np.zeros(len(vals), dtype=bool)
        for fi, fv in enumerate(self.fixed):
            hit = (vals == np.uint32(fv)) & ~fixed_hit
            idx[hit] = fi
            fixed_hit |= hit
        rest = np.flatnonzero(~fixed_hit)
        v = vals[rest]
        if len(v):
            new = np.empty(len(v), dtype=bool)
            new[0] = self.count == 0 or self.lits[-1] != int(v[0])
            new[1:] = v[1:] != v[:-1]
            entry = self.count + np.cumsum(new) - 1
            idx[rest] = entry
            cap = self.size // PLT_ENT_SIZE
            over = np.flatnonzero(entry >= cap)
            if len(over):          # the entries before the overflow still get their slot addresses
                return self.base + (idx // self.n) * 2 * self.stride + (idx % self.n) * 4, int(rest[over[0]])
            self.lits.extend(v[new].tolist())
            self.count = int(entry[-1]) + 1
        return self.base + (idx // self.n) * 2 * self.stride + (idx % self.n) * 4, -1

    def get_legacy(self, val: int) -> int | None:
        """v4.0 get_module_plt: walk every group; None when the kernel would BUG()."""
        if not self.lits:
            self.lits = [0] * (self.size // PLT_ENT_SIZE)      # the zeroed section's literal slots
            self.ldr_groups = set()
        c = self.count
        for g in range(self.size // (2 * self.stride)):
            base_idx = g * self.n
            if c == 0:
                self.ldr_groups.add(g)        # only this path writes the LDRs (a zero literal inflates
                self.lits[base_idx] = val     # plt_count, and a later group is then filled without them)
                self.count += 1
                self.filled.add(base_idx)
                return self.slot(base_idx)
            for j in range(base_idx, base_idx + self.n):
                if self.lits[j] == 0:
                    self.lits[j] = val
                    self.count += 1
                    self.filled.add(j)
                if self.lits[j] == val:
                    return self.slot(j)
            c -= self.n
        return None

    def image(self) -> bytes:
        """Section bytes: groups of identical LDR words followed by a line of literals."""
        words = np.zeros(self.size // 4, dtype="<u4")
        for g in range(-(-len(self.lits) // self.n)):     # every literal lies inside the section
            w0 = g * 2 * self.n
            if self.ldr_groups is None or g in self.ldr_groups:
                words[w0:w0 + self.n] = self.ldr
            chunk = self.lits[g * self.n:(g + 1) * self.n]
            words[w0 + self.n:w0 + self.n + len(chunk)] = chunk
        return words.tobytes()

    def entries(self, names: dict[int, str]) -> list[PltEntry]:
        """Every entry handed out, a zero literal (a weak undefined target) included; the legacy
        walk's zero padding is not an entry."""
        out = []
        used = sorted(self.filled) if self.ldr_groups is not None else range(len(self.lits))
        for i in used:
            lit = self.lits[i]
            fixed = i < len(self.fixed)
            name = self.fixed_names[i] if fixed and i < len(self.fixed_names) else names.get(lit)
            out.append(PltEntry(addr=self.slot(i), target=lit, plt=self.name, symbol=name, fixed=fixed))
        return out


# --- which relocations each PLT rule counted ------------------------------------------------
@dataclass
class CountedEntry:
    """One relocation a PLT rule counted, with where it sits in the file."""

    relsec_name: str
    target_name: str
    index: int                # file order
    type_name: str
    symbol: str
    plt: str                  # "core" or "init": the PLT the entry was counted for


def counted_relocations(obj: ObjectFile, config) -> dict[str, list[CountedEntry]]:
    """Per rule, the branch relocations module_frob_arch_sections counted (one PLT entry each),
    built from plt.py's own pieces (exec tables, kernel order, zero-addend test, st_shndx); the
    fixed ftrace entries are not relocations and are not listed. tests/inspect/test_explain.py checks
    that the lists have exactly the lengths of count_plts(); `armload load` prints them."""
    tables = exec_rel_tables(obj)
    shndx = sym_shndx(obj)
    names = obj.sym_names
    out: dict[str, list[CountedEntry]] = {"legacy": [], "sorted": [], "v6": []}

    type_names: dict[int, str] = {}

    def entry(t, i, where):
        info = int(t.r_info[i])
        sym, rt = info >> 8, info & 0xFF
        tn = type_names.get(rt)
        if tn is None:
            tn = type_names[rt] = reloc_name(rt)
        return CountedEntry(obj.sections[t.relsec].name, t.dstname, int(i), tn,
                            names[sym] if sym < len(names) else "", where)
    for t in legacy_rel_tables(obj):          # v4.0: every REL table, no symbol filter, per-type masks
        cand, masked = _legacy_candidates(t)
        where = "init" if legacy_is_init(t) else "core"
        idx = np.flatnonzero(cand)
        # no earlier entry with the same r_info and masked word: the first of each key, in file order
        keys = (t.r_info[idx].astype(np.uint64) << np.uint64(32)) | np.asarray(masked)[idx].astype(np.uint64)
        _, first = np.unique(keys, return_index=True)
        for i in idx[np.sort(first)].tolist():
            out["legacy"].append(entry(t, i, where))
    for t in tables:
        for alg in ("sorted", "v6"):
            order = kernel_order(t.r_info, t.words, alg)
            r_info = t.r_info[order]
            words = t.words[order]
            rtype = r_info & np.uint32(0xFF)
            rsym = (r_info >> np.uint32(8)).astype(np.int64)
            c = IS_BRANCH[rtype]
            sh = shndx[np.minimum(rsym, len(shndx) - 1)]
            c &= (sh != t.dstsec) if alg == "v6" else (sh == SHN_UNDEF)
            zero = zero_addend(words, rtype)
            dup = np.zeros(len(r_info), dtype=bool)
            dup[1:] = (r_info[1:] == r_info[:-1]) & zero[:-1]
            where = "init" if alg == "v6" and init_layout_section(t.dstname, config) else "core"
            for k in np.flatnonzero(c & ~(zero & dup)).tolist():
                out[alg].append(entry(t, int(order[k]), where))
    return out
