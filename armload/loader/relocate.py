"""Stage 5: apply relocations exactly as arch/arm/kernel/module.c:apply_relocate().

Every type is one row of RELOCS. A row's `apply(words, S, P)` works on numpy arrays of
instruction words (u32, little-endian; a Thumb-2 pair is upper | lower << 16) and returns the
new words plus a mask of entries that fail the kernel's range check. Branches are rows too,
but the driver routes out-of-range ones through the PLT between decode and encode.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..kernel.config import KernelConfig
from ..constants import STT_FUNC, THUMB_BRANCHES, R, reloc_name
from ..errors import PltError, RelocationError
from .model import IS_THUMB_BRANCH, distinct, type_table

U32 = np.uint32
M32 = 0xFFFFFFFF


def s32(x: np.ndarray) -> np.ndarray:
    """Wrap int64 values to signed 32 bits, as the kernel's s32 arithmetic does."""
    return ((x.astype(np.int64) + 0x80000000) & M32) - 0x80000000


def sext(x: np.ndarray, bits: int) -> np.ndarray:
    """sign_extend32(x, bits-1) on int64 arrays."""
    x = x.astype(np.int64) & ((1 << bits) - 1)
    sign = 1 << (bits - 1)
    return (x ^ sign) - sign


def hash_x(v: int) -> str:
    """printf("%#x"): no 0x prefix for zero."""
    return f"{v:#x}" if v else "0"


# --- codecs: pure functions, each the inverse of its partner ------------------------------
def arm_branch_decode(w: np.ndarray) -> np.ndarray:
    return sext((w.astype(np.int64) & 0x00FFFFFF) << 2, 26)


def arm_branch_encode(w: np.ndarray, off: np.ndarray) -> np.ndarray:
    return ((w.astype(np.int64) & 0xFF000000) | ((off >> 2) & 0x00FFFFFF)).astype(U32)


def thm_branch_decode(w: np.ndarray) -> np.ndarray:
    w = w.astype(np.int64)
    upper, lower = w & 0xFFFF, w >> 16
    sign = (upper >> 10) & 1
    j1 = (lower >> 13) & 1
    j2 = (lower >> 11) & 1
    off = ((sign << 24) | ((~(j1 ^ sign) & 1) << 23) | ((~(j2 ^ sign) & 1) << 22)
           | ((upper & 0x03FF) << 12) | ((lower & 0x07FF) << 1))
    return sext(off, 25)


def thm_branch_encode(w: np.ndarray, off: np.ndarray) -> np.ndarray:
    w = w.astype(np.int64)
    upper, lower = w & 0xFFFF, w >> 16
    off = off.astype(np.int64)
    sign = (off >> 24) & 1
    j1 = sign ^ (~(off >> 23) & 1)
    j2 = sign ^ (~(off >> 22) & 1)
    upper = (upper & 0xF800) | (sign << 10) | ((off >> 12) & 0x03FF)
    lower = (lower & 0xD000) | (j1 << 13) | (j2 << 11) | ((off >> 1) & 0x07FF)
    return (upper | (lower << 16)).astype(U32)


def arm_mov_decode(w: np.ndarray) -> np.ndarray:
    w = w.astype(np.int64)
    return sext(((w & 0xF0000) >> 4) | (w & 0xFFF), 16)


def arm_mov_encode(w: np.ndarray, v: np.ndarray) -> np.ndarray:
    w = w.astype(np.int64)
    return ((w & 0xFFF0F000) | ((v & 0xF000) << 4) | (v & 0x0FFF)).astype(U32)


def thm_mov_decode(w: np.ndarray) -> np.ndarray:
    w = w.astype(np.int64)
    upper, lower = w & 0xFFFF, w >> 16
    return sext(((upper & 0xF) << 12) | ((upper & 0x400) << 1) | ((lower & 0x7000) >> 4) | (lower & 0xFF), 16)


def thm_mov_encode(w: np.ndarray, v: np.ndarray) -> np.ndarray:
    w = w.astype(np.int64)
    upper, lower = w & 0xFFFF, w >> 16
    upper = (upper & 0xFBF0) | ((v & 0xF000) >> 12) | ((v & 0x0800) >> 1)
    lower = (lower & 0x8F00) | ((v & 0x0700) << 4) | (v & 0xFF)
    return (upper | (lower << 16)).astype(U32)


def prel31_decode(w: np.ndarray) -> np.ndarray:
    return sext(w, 31)


def prel31_encode(w: np.ndarray, v: np.ndarray) -> np.ndarray:
    return ((w.astype(np.int64) & 0x80000000) | (v & 0x7FFFFFFF)).astype(U32)


def get_group_rem(group: int, val: int) -> tuple[int, int]:
    """get_group_rem(): (shift, remaining value) after removing `group` 8-bit chunks."""
    shift = 32
    while True:
        shift = ((31 - (val.bit_length() - 1)) & ~1) if val else 32
        rem = val
        if not val:
            break
        val &= 0xFFFFFF >> shift
        if group == 0:
            break
        group -= 1
    return shift, rem


def _ror32(x: int, r: int) -> int:
    r &= 31
    return ((x >> r) | (x << (32 - r))) & M32 if r else x


def alu_group_one(w: int, S: int, P: int, group: int) -> int:
    off = _ror32(w & 0xFF, (w & 0xF00) >> 7)
    if w & (1 << 22):
        off = -off
    off = int(s32(np.array([off + S - P]))[0])
    if off < 0:
        off = -off
        w = (w & ~(1 << 23)) | (1 << 22)
    else:
        w = (w & ~(1 << 22)) | (1 << 23)
    shift, off = get_group_rem(group, off & M32)
    if shift < 24:
        off >>= 24 - shift
        off |= (shift + 8) << 7
    return ((w & ~0xFFF) | off) & M32


def ldr_g2_one(w: int, S: int, P: int) -> tuple[int, bool]:
    off = w & 0xFFF
    if not (w & (1 << 23)):
        off = -off
    off = int(s32(np.array([off + S - P]))[0])
    if off < 0:
        off = -off
        w &= ~(1 << 23)
    else:
        w |= 1 << 23
    _, off = get_group_rem(2, off & M32)
    if off > 0xFFF:
        return w & M32, True
    return ((w & ~0xFFF) | off) & M32, False


# --- the table ------------------------------------------------------------------------------
Apply = Callable[[np.ndarray, np.ndarray, np.ndarray], "tuple[np.ndarray, np.ndarray | None]"]


@dataclass(frozen=True)
class RelocSpec:
    """One row of the relocation table: the type, its codec, and the kernel's rules for it."""

    num: int
    name: str
    apply: Apply | None                   # None for branches (the driver handles them)
    thumb: bool = False                   # needs CONFIG_THUMB2_KERNEL
    group: bool = False                   # needs CONFIG_ARM_HAS_GROUP_RELOCS
    branch: bool = False
    decode: Callable | None = None        # branches: addend from the place
    encode: Callable | None = None        # branches: write an offset
    limit: int = 0                        # branches: |off| must be < limit (lower bound exclusive)
    bias: int = 0                         # branches: PC bias (8 ARM, 4 Thumb)


def _abs32(w, S, P):
    return ((w.astype(np.int64) + S) & M32).astype(U32), None


def _rel32(w, S, P):
    return ((w.astype(np.int64) + S - P) & M32).astype(U32), None


def _v4bx(w, S, P):
    return ((w & U32(0xF000000F)) | U32(0x01A0F000)).astype(U32), None


def _prel31(w, S, P):
    off = s32(prel31_decode(w) + S - P)
    bad = (off >= 0x40000000) | (off < -0x40000000)
    return prel31_encode(w, off), bad


def _mov(decode, encode, prel: bool, movt: bool) -> Apply:
    def apply(w, S, P):
        v = s32(decode(w) + S)
        if prel:
            v = s32(v - P)
        if movt:
            v = v >> 16                       # arithmetic shift of s32
        return encode(w, v), None
    return apply


def _alu(group: int) -> Apply:
    def apply(w, S, P):
        out = np.array([alu_group_one(int(a), int(b), int(c), group)
                        for a, b, c in zip(w.tolist(), S.tolist(), P.tolist())], dtype=U32)
        return out, None
    return apply


def _ldr_g2(w, S, P):
    res = [ldr_g2_one(int(a), int(b), int(c)) for a, b, c in zip(w.tolist(), S.tolist(), P.tolist())]
    return (np.array([r[0] for r in res], dtype=U32), np.array([r[1] for r in res], dtype=bool))


def _none(w, S, P):
    return w, None


_ARM_BR = dict(branch=True, decode=arm_branch_decode, encode=arm_branch_encode, limit=0x02000000, bias=8)
_THM_BR = dict(branch=True, decode=thm_branch_decode, encode=thm_branch_encode, limit=0x01000000, bias=4,
               thumb=True)

RELOCS: dict[int, RelocSpec] = {s.num: s for s in [
    RelocSpec(R.R_ARM_NONE, "R_ARM_NONE", _none),
    RelocSpec(R.R_ARM_ABS32, "R_ARM_ABS32", _abs32),
    RelocSpec(R.R_ARM_TARGET1, "R_ARM_TARGET1", _abs32),
    RelocSpec(R.R_ARM_REL32, "R_ARM_REL32", _rel32),
    RelocSpec(R.R_ARM_PC24, "R_ARM_PC24", None, **_ARM_BR),
    RelocSpec(R.R_ARM_CALL, "R_ARM_CALL", None, **_ARM_BR),
    RelocSpec(R.R_ARM_JUMP24, "R_ARM_JUMP24", None, **_ARM_BR),
    RelocSpec(R.R_ARM_V4BX, "R_ARM_V4BX", _v4bx),
    RelocSpec(R.R_ARM_PREL31, "R_ARM_PREL31", _prel31),
    RelocSpec(R.R_ARM_MOVW_ABS_NC, "R_ARM_MOVW_ABS_NC", _mov(arm_mov_decode, arm_mov_encode, False, False)),
    RelocSpec(R.R_ARM_MOVT_ABS, "R_ARM_MOVT_ABS", _mov(arm_mov_decode, arm_mov_encode, False, True)),
    RelocSpec(R.R_ARM_MOVW_PREL_NC, "R_ARM_MOVW_PREL_NC", _mov(arm_mov_decode, arm_mov_encode, True, False)),
    RelocSpec(R.R_ARM_MOVT_PREL, "R_ARM_MOVT_PREL", _mov(arm_mov_decode, arm_mov_encode, True, True)),
    RelocSpec(R.R_ARM_ALU_PC_G0_NC, "R_ARM_ALU_PC_G0_NC", _alu(0), group=True),
    RelocSpec(R.R_ARM_ALU_PC_G1_NC, "R_ARM_ALU_PC_G1_NC", _alu(1), group=True),
    RelocSpec(R.R_ARM_LDR_PC_G2, "R_ARM_LDR_PC_G2", _ldr_g2, group=True),
    RelocSpec(R.R_ARM_THM_CALL, "R_ARM_THM_CALL", None, **_THM_BR),
    RelocSpec(R.R_ARM_THM_JUMP24, "R_ARM_THM_JUMP24", None, **_THM_BR),
    RelocSpec(R.R_ARM_THM_MOVW_ABS_NC, "R_ARM_THM_MOVW_ABS_NC",
              _mov(thm_mov_decode, thm_mov_encode, False, False), thumb=True),
    RelocSpec(R.R_ARM_THM_MOVT_ABS, "R_ARM_THM_MOVT_ABS", _mov(thm_mov_decode, thm_mov_encode, False, True),
              thumb=True),
    RelocSpec(R.R_ARM_THM_MOVW_PREL_NC, "R_ARM_THM_MOVW_PREL_NC",
              _mov(thm_mov_decode, thm_mov_encode, True, False), thumb=True),
    RelocSpec(R.R_ARM_THM_MOVT_PREL, "R_ARM_THM_MOVT_PREL", _mov(thm_mov_decode, thm_mov_encode, True, True),
              thumb=True),
]}


def spec_for(rtype: int, config: KernelConfig) -> RelocSpec | None:
    """The row the configured kernel would use, or None for "unknown relocation"."""
    spec = RELOCS.get(rtype)
    if spec is None or (spec.thumb and not config.thumb2) or (spec.group and not config.group_relocs):
        return None
    return spec


# --- the driver -----------------------------------------------------------------------------
@dataclass
class SymbolValues:
    """simplify_symbols() output, indexed by symbol number (one extra for idx == symcount)."""
    value: np.ndarray       # u32 st_value after resolution
    stype: np.ndarray       # u8 ELF32_ST_TYPE
    names: list[str]


@dataclass
class SectionTarget:
    """The section a REL table patches: where it is loaded, and its bytes."""

    index: int
    name: str
    addr: int
    size: int
    mem: np.ndarray         # u8 view of the region holding the section
    mem_off: int            # section start within `mem`


@dataclass
class PltRouter:
    """Picks the PLT section for a place and hands out slots (get_module_plt)."""
    core: object | None
    init: object | None
    within_init: Callable[[np.ndarray], np.ndarray]
    algorithm: str

    def route(self, places: np.ndarray, vals: np.ndarray) -> tuple[np.ndarray, int]:
        slots = np.zeros(len(vals), dtype=np.int64)
        if self.algorithm == "legacy":
            # v4.0 get_module_plt: in_init(loc) picks init_plt, else core_plt; any equal literal is reused
            use_init = self.within_init(places)
            for i, (v, ini) in enumerate(zip(vals.tolist(), use_init.tolist())):
                sec = self.init if ini else self.core
                s = sec.get_legacy(v) if sec is not None else None
                if s is None:
                    return slots, i
                slots[i] = s
            return slots, -1
        use_init = self.within_init(places) if self.algorithm == "v6" else np.zeros(len(vals), bool)
        first_bad = -1
        for sec, sel in ((self.core, ~use_init), (self.init, use_init)):
            pos = np.flatnonzero(sel)
            if not len(pos):
                continue
            if sec is None:
                bad = int(pos[0])
            else:
                got, bad_local = sec.get_many_last(vals[pos])
                slots[pos] = got
                bad = int(pos[bad_local]) if bad_local >= 0 else -1
            if bad >= 0 and (first_bad < 0 or bad < first_bad):
                first_bad = bad
        return slots, first_bad


@dataclass
class AppliedSection:
    """What relocating one section did: counts per type and the branch sites."""

    counts: dict[int, int]
    branches: list[tuple]      # arrays: offset, place, rtype, sym, target, plt


def apply_rel_section(modname: str, relidx: int, relname: str, r_offset: np.ndarray, r_info: np.ndarray,
                      tgt: SectionTarget, syms: SymbolValues, symcount: int, config: KernelConfig,
                      plt: PltRouter | None, file: str, index_base: int = 0,
                      rows: np.ndarray | None = None) -> AppliedSection:
    """apply_relocate() for one REL section whose entries are already in kernel order.
    `rows`: each entry's row in the file (readelf's order) when the kernel sorted the table."""
    n = len(r_info)
    rtype = (r_info & U32(0xFF)).astype(np.int64)
    rsym = (r_info >> U32(8)).astype(np.int64)

    def err(i: int, msg: str, cls=RelocationError):
        sym = syms.names[rsym[i]] if rsym[i] <= symcount and rsym[i] < len(syms.names) else None
        return cls(msg, file=file, section=relidx, section_name=relname, reloc=i + index_base,
                   row=None if rows is None else int(rows[i]), offset=int(r_offset[i]), target_section=tgt.name,
                   symbol=sym, type=reloc_name(int(rtype[i])))

    def where(i: int) -> str:
        return f" [{relname} -> {tgt.name}+{int(r_offset[i]):#x}]"

    def reloc(i: int) -> str:
        """The kernel's index counts the table after its sort; readelf shows the file's rows."""
        ii = i + index_base
        if rows is None or int(rows[i]) == ii:
            return f"reloc {ii}"
        return f"reloc {ii} (row {int(rows[i])} of {relname} as readelf shows it; the kernel sorted the table)"

    # Checks in the kernel's order for each entry; the first failing entry wins.
    bad_sym = rsym > symcount
    oob = r_offset.astype(np.int64) > ((tgt.size - 4) & M32)
    specs = {t: spec_for(t, config) for t in distinct(rtype).tolist()}
    unknown = type_table(t for t, s in specs.items() if s is None)[rtype]
    pre = bad_sym | oob | unknown

    safe_sym = np.minimum(rsym, symcount)
    S = syms.value[safe_sym].astype(np.int64)
    P = (tgt.addr + r_offset.astype(np.int64)) & M32
    mo = tgt.mem_off + r_offset.astype(np.int64)
    inmem = (mo >= 0) & (mo + 4 <= len(tgt.mem))
    m = tgt.mem
    o = mo[inmem]                 # a place outside module memory is refused below, after the kernel's checks
    words = np.zeros(n, dtype=np.uint32)
    words[inmem] = (m[o].astype(np.uint32) | (m[o + 1].astype(np.uint32) << 8)
                    | (m[o + 2].astype(np.uint32) << 16) | (m[o + 3].astype(np.uint32) << 24))
    new = words.copy()
    range_bad = np.zeros(n, dtype=bool)
    interwork_bad = np.zeros(n, dtype=bool)
    plt_bad_at = n
    br_rows = []

    ok = ~pre
    br_mask = np.zeros(n, dtype=bool)
    for t, spec in specs.items():
        if spec is None:
            continue
        sel = (rtype == t) & ok
        if not sel.any():
            continue
        if spec.branch:
            br_mask |= sel
            continue
        w2, bad = spec.apply(words[sel], S[sel], P[sel])
        new[sel] = w2
        if bad is not None:
            range_bad[sel] = bad

    if br_mask.any():
        idx = np.flatnonzero(br_mask)                        # application order
        t_ = rtype[idx]
        thumb = IS_THUMB_BRANCH[t_]
        w = words[idx]
        A = np.where(thumb, thm_branch_decode(w), arm_branch_decode(w))
        off = s32(A + S[idx] - P[idx])
        limit = np.where(thumb, 0x01000000, 0x02000000)
        bias = np.where(thumb, 4, 8)
        iw = np.where(thumb, (syms.stype[safe_sym[idx]] == STT_FUNC) & ((S[idx] & 1) == 0), (S[idx] & 3) != 0)
        interwork_bad[idx] = iw
        target = (off + P[idx] + bias) & M32
        out = ((off <= -limit) | (off >= limit)) & ~iw
        slot = np.zeros(len(idx), dtype=np.int64)
        if config.module_plts and out.any():
            need = np.flatnonzero(out)
            # The PLT must see entries in order, but an entry after the first error never runs.
            got, bad_local = plt.route(P[idx][need], target[need]) if plt else (np.zeros(len(need), np.int64), 0)
            if bad_local >= 0:
                plt_bad_at = int(idx[need[bad_local]])
                keep = need[:bad_local]
                got = got[:bad_local]
            else:
                keep = need
            slot[keep] = got
            off[keep] = s32(got - P[idx][keep] - bias[keep])
        still = ((off <= -limit) | (off >= limit)) & ~iw
        range_bad[idx] = still
        enc = np.where(thumb, thm_branch_encode(w, off), arm_branch_encode(w, off))
        new[idx] = enc
        br_rows.append((r_offset[idx], P[idx], t_, rsym[idx], target, slot))

    # Find the first entry that fails anything.
    post = interwork_bad | range_bad
    if plt_bad_at < n:
        post = post.copy()
        post[plt_bad_at] = True
    bad_any = pre | post
    if bad_any.any():
        i = int(np.argmax(bad_any))
        symname = syms.names[rsym[i]] if rsym[i] <= symcount and rsym[i] < len(syms.names) else ""
        head = f"{modname}: section {relidx} {reloc(i)}"
        if bad_sym[i]:
            raise err(i, f"{head}: bad relocation sym offset{where(i)} (symbol index {int(rsym[i])} "
                         f"> {symcount} symbols)")
        if oob[i]:
            raise err(i, f"{head} sym '{symname}': out of bounds relocation, offset {int(r_offset[i])} "
                         f"size {tgt.size}{where(i)}")
        if unknown[i]:
            hint = ""
            if RELOCS.get(int(rtype[i])) and RELOCS[int(rtype[i])].thumb:
                hint = " (a Thumb-2 relocation: this kernel is not CONFIG_THUMB2_KERNEL; try --thumb2)"
            raise err(i, f"{modname}: unknown relocation: {int(rtype[i])}{where(i)} "
                         f"{reloc_name(int(rtype[i]))} sym '{symname}' {reloc(i)} of section {relidx}{hint}")
        if interwork_bad[i]:
            d = "(Thumb -> ARM)" if int(rtype[i]) in THUMB_BRANCHES else "(ARM -> Thumb)"
            raise err(i, f"{head} sym '{symname}': unsupported interworking call {d}{where(i)}")
        if i == plt_bad_at:
            raise err(i, f"{head} sym '{symname}': module PLT section exhausted{where(i)} "
                         f"(the kernel would hit {'BUG()' if config.plt_algorithm == 'legacy' else 'BUG_ON'} "
                         f"in get_module_plt)", cls=PltError)
        sv = int(syms.value[safe_sym[i]])
        raise err(i, f"{head} sym '{symname}': relocation {int(rtype[i])} out of range "
                     f"({hash_x(int(P[i]))} -> {hash_x(sv)}){where(i)}")
    if not inmem.all():
        i = int(np.argmax(~inmem))
        raise err(i, f"{modname}: section {relidx} {reloc(i)}: place {int(P[i]):#x} lies outside module memory "
                     f"(section {tgt.name} is {tgt.size} bytes){where(i)}")

    # Write back; a place touched twice must see the first write (the kernel is sequential).
    live = rtype != R.R_ARM_NONE                    # R_ARM_NONE writes nothing (often shares a place)
    _scatter(m, mo[live], new[live])
    counts = dict(zip(*np.unique(rtype, return_counts=True)))
    return AppliedSection(counts={int(k): int(v) for k, v in counts.items()}, branches=br_rows)


def _scatter(m: np.ndarray, mo: np.ndarray, words: np.ndarray) -> None:
    w = words.astype(np.uint32)
    m[mo] = (w & 0xFF).astype(np.uint8)
    m[mo + 1] = ((w >> 8) & 0xFF).astype(np.uint8)
    m[mo + 2] = ((w >> 16) & 0xFF).astype(np.uint8)
    m[mo + 3] = (w >> 24).astype(np.uint8)


def has_overlaps(r_offset: np.ndarray, r_info: np.ndarray) -> bool:
    """Two entries whose 4-byte places overlap need sequential application (R_ARM_NONE aside)."""
    o = r_offset[(r_info & U32(0xFF)) != R.R_ARM_NONE]
    if len(o) < 2:
        return False
    o = np.sort(o.astype(np.int64))
    return bool((np.diff(o) < 4).any())


def overlap_batches(r_offset: np.ndarray, r_info: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) runs of the table that can be applied as one vector each, in table order, with
    the result of entry-by-entry application (apply_relocate). Entries whose 4-byte places overlap
    form a cluster; every member of a cluster but its first in table order starts a new run, so no
    run holds two overlapping entries and each sees its predecessors' writes. One overlapping pair
    costs two runs, not one run per entry. R_ARM_NONE writes nothing and never cuts."""
    n = len(r_offset)
    live = np.flatnonzero((r_info & U32(0xFF)) != R.R_ARM_NONE)
    if len(live) < 2:
        return [(0, n)] if n else []
    o = r_offset[live].astype(np.int64)
    order = np.argsort(o, kind="stable")
    so, si = o[order], live[order]
    new_cluster = np.ones(len(so), dtype=bool)
    new_cluster[1:] = np.diff(so) >= 4
    if new_cluster.all():
        return [(0, n)]
    cid = np.cumsum(new_cluster) - 1
    first = np.full(cid[-1] + 1, n, dtype=np.int64)
    np.minimum.at(first, cid, si)
    cuts = distinct(si[si != first[cid]])
    edges = [0] + cuts.tolist() + [n]
    return [(a, b) for a, b in zip(edges[:-1], edges[1:]) if b > a]
