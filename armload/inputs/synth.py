"""Synthetic 32-bit ARM kernel-module-like relocatable objects of any size.

``make_module()`` writes a valid ELF32 little-endian ARM ``ET_REL`` object that looks like a
Debian 6.1 armmp ``.ko`` to a loader (``.gnu.linkonce.this_module`` with its two ABS32
relocations, ``.modinfo`` with the real vermagic, 64-byte ``__versions`` entries, ``.plt`` and
``.init.plt`` placeholders, ``.ARM.exidx``, mapping symbols ...) but whose ``.text`` holds an
arbitrary number of relocated instructions, each encoded exactly as gas emits it for that
relocation (``bl ext`` = ``0xebfffffe``, Thumb ``bl ext`` = ``f7ff fffe``, ``b.w`` = ``f7ff bffe``,
MOVW/MOVT and literal words holding the REL addend in place).

Everything is built with numpy and ``struct`` (no toolchain at run time) and is fully
deterministic for a given set of arguments.  The default reproduces the scale of the large
module in our seeds: 262,573 relocations in one ``.rel.text``.

Layout of ``.text``: ``F`` functions ``synth_fn_NNNNN`` (STB_GLOBAL, so gas-style relocations
are kept for calls between them), each ``push {r4, lr}`` / body / epilogue / literal pool.  The
body interleaves filler ALU instructions with ``bl`` (R_ARM_CALL / R_ARM_THM_CALL) and
``movw r3``/``movt r3`` pairs (R_ARM_[THM_]MOVW_ABS_NC + MOVT_ABS).  A function ends either
with ``mov r0, #0; pop {r4, pc}`` or with a tail call ``pop {r4, lr}; b target``
(R_ARM_JUMP24 / R_ARM_THM_JUMP24).  The literal pool after the epilogue holds R_ARM_ABS32 words
(``$d`` mapping symbol).  Branch targets are undefined externals ``ext_func_NNNN`` (Zipf-like
popularity, every external used at least once when there are enough relocations), global
functions in ``.text`` and local (STB_LOCAL STT_FUNC) functions in ``.text.unlikely``.
"""

from __future__ import annotations

import argparse
import struct
import sys

import numpy as np

from .synth_parts import (_ARM, _RANGE, _RANGE_MARGIN, _SYM_DTYPE, _THUMB, UNWIND_PR0, _arm_branch, _arm_movw, _rels,
                          _StrTab, _syms, _thumb_branch, _thumb_movw, external_crc, external_names, symvers_text)

__all__ = [
    "make_module", "write_module", "external_names", "external_crc", "symvers_text",
    "DEFAULT_N_RELOCS", "VERMAGIC",
]

DEFAULT_N_RELOCS = 262_573
VERMAGIC = "6.1.0-50-armmp SMP mod_unload modversions ARMv7 p2v8 "

# struct module as built by Debian 6.1.0-50-armmp (from the sample .ko files' relocations).
THIS_MODULE_SIZE = 0x240
THIS_MODULE_NAME_OFF = 0x0C
THIS_MODULE_INIT_OFF = 0xCC
THIS_MODULE_EXIT_OFF = 0x230


# ELF constants
SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB, SHT_NOBITS, SHT_REL = 1, 2, 3, 8, 9
SHT_ARM_EXIDX, SHT_ARM_ATTRIBUTES = 0x70000001, 0x70000003
SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR, SHF_MERGE, SHF_STRINGS, SHF_INFO_LINK, SHF_LINK_ORDER = (
    0x1, 0x2, 0x4, 0x10, 0x20, 0x40, 0x80)
STB_LOCAL, STB_GLOBAL = 0, 1
STT_NOTYPE, STT_OBJECT, STT_FUNC, STT_SECTION = 0, 1, 2, 3

R_ARM_NONE, R_ARM_ABS32, R_ARM_THM_CALL, R_ARM_CALL, R_ARM_JUMP24 = 0, 2, 10, 28, 29
R_ARM_THM_JUMP24, R_ARM_PREL31 = 30, 42
R_ARM_MOVW_ABS_NC, R_ARM_MOVT_ABS, R_ARM_THM_MOVW_ABS_NC, R_ARM_THM_MOVT_ABS = 43, 44, 47, 48

# .ARM.attributes of the Debian-built sample modules (Tag_CPU_name "7-A", v7, Thumb-2, ...).
ARM_ATTRIBUTES = bytes.fromhex(
    "412e000000616561626900012400000005372d4100060a0741080109021202140115011703"
    "180119011a021e022201")

# ---------------------------------------------------------------------------------------------

def make_module(n_relocs: int = DEFAULT_N_RELOCS, *, n_externals: int = 2000, thumb: bool = False,
                seed: int = 0, text_size: int | None = None, mixed_addends: bool = False,
                name: str = "synth") -> bytes:
    """Return the bytes of a synthetic kernel-module-like ELF32 LE ARM relocatable object.

    n_relocs:      exact number of entries in ``.rel.text`` (other REL sections are extra).
    n_externals:   number of undefined ``ext_func_NNNN`` symbols (only those referenced are
                   emitted; all are referenced when there are enough relocations).
    thumb:         Thumb-2 code (THM_CALL/THM_JUMP24/THM_MOVW/MOVT, odd function symbols).
    seed:          numpy Generator seed; the output is a pure function of all arguments.
    text_size:     size of ``.text`` in bytes (multiple of 4, at least the natural size);
                   padding is spread as filler instructions.  Must stay below the branch range
                   (32 MiB ARM, 16 MiB Thumb, minus 4 KiB) so every intra-.text branch encodes.
    mixed_addends: ~10% of branches to externals get a non-zero addend (+4..+64) in place,
                   so the same symbol is referenced with different addends.
    name:          module name (``.modinfo`` name= and ``__this_module.name``).
    """
    if n_relocs < 0:
        raise ValueError("n_relocs must be >= 0")
    if n_externals < 1:
        raise ValueError("n_externals must be >= 1")
    if not name or len(name.encode()) >= 56:
        raise ValueError("module name must be 1..55 bytes")
    rng = np.random.default_rng(seed)
    enc = _THUMB if thumb else _ARM
    T = 1 if thumb else 0
    R_CALL, R_JUMP = (R_ARM_THM_CALL, R_ARM_THM_JUMP24) if thumb else (R_ARM_CALL, R_ARM_JUMP24)
    R_MOVW, R_MOVT = ((R_ARM_THM_MOVW_ABS_NC, R_ARM_THM_MOVT_ABS) if thumb
                      else (R_ARM_MOVW_ABS_NC, R_ARM_MOVT_ABS))
    branch = _thumb_branch if thumb else _arm_branch
    movw = _thumb_movw if thumb else _arm_movw

    # ---- how many of each kind -------------------------------------------------------------
    n = int(n_relocs)
    n_abs = n // 100                      # literal-pool words (R_ARM_ABS32)
    n_pairs = n // 50                     # MOVW/MOVT pairs
    n_br = n - n_abs - 2 * n_pairs        # branches
    n_fn = max(1, n_br // 10)             # functions in .text
    n_jump = min(n_fn, (n_br * 8 + 99) // 100)  # tail calls (~8%), at most one per function
    n_call = n_br - n_jump
    n_cold = max(2, n_fn // 64)           # local functions in .text.unlikely
    RODATA_SIZE = 0x1000

    # ---- body items: calls (1 slot) and movw/movt pairs (2 slots), grouped by function ------
    kind = np.concatenate((np.zeros(n_call, np.int8), np.ones(n_pairs, np.int8)))
    fid = rng.integers(0, n_fn, kind.size)
    order = np.lexsort((rng.random(kind.size), fid))
    kind, fid = kind[order], fid[order]
    gap = rng.integers(0, 3, kind.size)               # filler instructions before each item
    isz = gap + 1 + kind
    bsz = np.bincount(fid, weights=isz, minlength=n_fn).astype(np.int64)
    pool = np.bincount(rng.integers(0, n_fn, n_abs), minlength=n_fn).astype(np.int64)
    lead = np.zeros(n_fn, np.int64)                   # padding fillers after the push
    fsz = 1 + lead + bsz + 2 + pool
    natural = int(fsz.sum()) * 4
    limit = _RANGE[thumb] - _RANGE_MARGIN
    if text_size is not None:
        if text_size % 4 or text_size < natural:
            raise ValueError(f"text_size must be a multiple of 4 and >= {natural:#x} "
                             f"for {n} relocations")
        extra = (text_size - natural) // 4
        lead = extra // n_fn + (np.arange(n_fn) < extra % n_fn)
        fsz = 1 + lead + bsz + 2 + pool
    text_bytes = int(fsz.sum()) * 4
    if text_bytes > limit:
        raise ValueError(f".text would be {text_bytes:#x} bytes, over the {'Thumb' if thumb else 'ARM'}"
                         f" branch limit {limit:#x}; use fewer relocations or a smaller text_size")

    fstart = np.concatenate(([0], np.cumsum(fsz)[:-1]))          # in slots
    body0 = fstart + 1 + lead
    epi = body0 + bsz                                           # epilogue slot
    pool0 = epi + 2
    csum = np.cumsum(isz) - isz                                   # exclusive, global
    bstart_cs = np.concatenate(([0], np.cumsum(bsz)[:-1]))
    item_slot = body0[fid] + (csum - bstart_cs[fid]) + gap
    is_tail = np.zeros(n_fn, bool)
    if n_jump:
        is_tail[rng.choice(n_fn, n_jump, replace=False)] = True

    # ---- relocation targets ----------------------------------------------------------------
    # target kind: 0 external, 1 .text global function, 2 .text.unlikely local function,
    # 3 .rodata section symbol
    call_slot = item_slot[kind == 0]
    pair_slot = item_slot[kind == 1]
    tail_fn = np.flatnonzero(is_tail)
    tail_slot = epi[tail_fn] + 1
    abs_slot = np.repeat(pool0, pool) + (np.arange(n_abs) - np.repeat(np.cumsum(pool) - pool, pool))

    def pick(count, probs):
        return np.searchsorted(np.cumsum(probs), rng.random(count), side="right").astype(np.int8)

    call_tk = pick(n_call, [0.90, 0.07, 0.03])
    tail_tk = pick(n_jump, [0.85, 0.10, 0.05])
    pair_tk = np.where(rng.random(n_pairs) < 0.5, 0, 3).astype(np.int8)
    abs_tk = pick(n_abs, [0.4, 0.3, 0.0, 0.3])

    # externals: Zipf-like popularity, each used once if possible
    tk_all = np.concatenate((call_tk, tail_tk, pair_tk, abs_tk))
    ext_mask = tk_all == 0
    n_eref = int(ext_mask.sum())
    pz = 1.0 / np.arange(1, n_externals + 1)
    ext_idx = np.searchsorted(np.cumsum(pz / pz.sum()), rng.random(n_eref), side="right")
    ext_idx = np.minimum(ext_idx, n_externals - 1)
    if n_eref >= n_externals:
        ext_idx[rng.permutation(n_eref)[:n_externals]] = np.arange(n_externals)
    ext_idx = rng.permutation(n_externals)[ext_idx]
    tidx_all = np.zeros(tk_all.size, np.int64)
    tidx_all[ext_mask] = ext_idx
    m = tk_all == 1
    tidx_all[m] = rng.integers(0, n_fn, int(m.sum()))
    m = tk_all == 2
    tidx_all[m] = rng.integers(0, n_cold, int(m.sum()))
    m = tk_all == 3
    tidx_all[m] = rng.integers(0, RODATA_SIZE // 4, int(m.sum())) * 4   # offset in .rodata

    # in-place addends
    add_all = np.zeros(tk_all.size, np.int64)
    add_all[tk_all == 3] = tidx_all[tk_all == 3]
    n_branch_refs = n_call + n_jump
    if mixed_addends and n_branch_refs:
        br_ext = np.flatnonzero(tk_all[:n_branch_refs] == 0)
        sel = br_ext[rng.random(br_ext.size) < 0.10]
        add_all[sel] = rng.choice(np.array([4, 8, 12, 16, 32, 64]), sel.size)

    # ---- .text words -----------------------------------------------------------------------
    n_slots = text_bytes // 4
    fill = np.array(enc["fill"], dtype=np.uint32)
    words = fill[rng.integers(0, fill.size, n_slots)]
    words[fstart] = enc["push"]
    words[epi[~is_tail]] = enc["ret0"]
    words[epi[~is_tail] + 1] = enc["pop_pc"]
    words[epi[is_tail]] = enc["pop_lr"]
    s0, s1, s2 = n_call, n_call + n_jump, n_call + n_jump + n_pairs
    words[call_slot] = branch(add_all[:s0], True)
    words[tail_slot] = branch(add_all[s0:s1], False)
    words[pair_slot] = movw(add_all[s1:s2], False)
    words[pair_slot + 1] = movw(add_all[s1:s2], True)
    words[abs_slot] = add_all[s2:].astype(np.uint32)   # literal words hold the addend

    # ---- symbol table ----------------------------------------------------------------------
    # section indices (fixed order, see `sections` below)
    SEC = {nm: i for i, nm in enumerate([
        "", ".text", ".rel.text", ".text.unlikely", ".init.text", ".rel.init.text", ".exit.text",
        ".rel.exit.text", ".plt", ".init.plt", ".rodata", ".ARM.exidx", ".rel.ARM.exidx",
        ".modinfo", "__versions", ".data", ".rel.data", ".gnu.linkonce.this_module",
        ".rel.gnu.linkonce.this_module", ".bss", ".note.GNU-stack", ".ARM.attributes",
        ".symtab", ".strtab", ".shstrtab"])}
    strtab = _StrTab()
    code_map = "$t" if thumb else "$a"
    parts = [np.zeros(1, dtype=_SYM_DTYPE)]

    sec_syms = [".text", ".text.unlikely", ".init.text", ".exit.text", ".rodata", ".ARM.exidx",
                ".modinfo", "__versions", ".data", ".gnu.linkonce.this_module", ".bss"]
    parts.append(_syms(0, 0, 0, STB_LOCAL, STT_SECTION, [SEC[s] for s in sec_syms]))
    symidx_sec = {s: 1 + i for i, s in enumerate(sec_syms)}

    # mapping symbols: code at each code section start; in .text $d at each pool and code again
    # at the next function
    o_code, o_d = strtab.add(code_map), strtab.add("$d")
    has_pool = np.flatnonzero(pool > 0)
    nxt = has_pool[has_pool + 1 < n_fn] + 1
    map_text = np.concatenate(([0], pool0[has_pool] * 4, fstart[nxt] * 4))
    map_is_d = np.concatenate(([False], np.ones(has_pool.size, bool), np.zeros(nxt.size, bool)))
    o = np.argsort(map_text, kind="stable")
    parts.append(_syms(np.where(map_is_d[o], o_d, o_code), map_text[o], 0, STB_LOCAL,
                       STT_NOTYPE, SEC[".text"]))
    parts.append(_syms(o_code, 0, 0, STB_LOCAL, STT_NOTYPE,
                       [SEC[".text.unlikely"], SEC[".init.text"], SEC[".exit.text"]]))
    parts.append(_syms(o_d, 0, 0, STB_LOCAL, STT_NOTYPE,
                       [SEC[s] for s in (".rodata", ".ARM.exidx", ".modinfo", "__versions",
                                         ".data", ".gnu.linkonce.this_module")]))

    # local functions
    INIT_WORDS, EXIT_WORDS = 9, 3
    parts.append(_syms(strtab.add("synth_init"), T, INIT_WORDS * 4, STB_LOCAL, STT_FUNC,
                       SEC[".init.text"], n=1))
    parts.append(_syms(strtab.add("synth_exit"), T, EXIT_WORDS * 4, STB_LOCAL, STT_FUNC,
                       SEC[".exit.text"], n=1))
    first_cold = sum(len(p) for p in parts)
    cold_names = [f"synth_cold_{i:04d}" for i in range(n_cold)]
    parts.append(_syms(strtab.add_many(cold_names), np.arange(n_cold) * 8 + T, 8, STB_LOCAL,
                       STT_FUNC, SEC[".text.unlikely"]))
    first_global = sum(len(p) for p in parts)

    # global functions in .text
    first_fn = first_global
    fn_names = [f"synth_fn_{i:05d}" for i in range(n_fn)]
    parts.append(_syms(strtab.add_many(fn_names), fstart * 4 + T, fsz * 4, STB_GLOBAL,
                       STT_FUNC, SEC[".text"]))
    idx_init = first_fn + n_fn
    parts.append(_syms(strtab.add("init_module"), T, INIT_WORDS * 4, STB_GLOBAL, STT_FUNC,
                       SEC[".init.text"], n=1))
    idx_exit = idx_init + 1
    parts.append(_syms(strtab.add("cleanup_module"), T, EXIT_WORDS * 4, STB_GLOBAL, STT_FUNC,
                       SEC[".exit.text"], n=1))
    parts.append(_syms(strtab.add("__this_module"), 0, THIS_MODULE_SIZE, STB_GLOBAL,
                       STT_OBJECT, SEC[".gnu.linkonce.this_module"], n=1))

    # the two extra externals init/exit use: the most popular one
    hot_ext = int(np.bincount(ext_idx, minlength=n_externals).argmax()) if n_eref else 0
    used = np.unique(np.concatenate((ext_idx, [hot_ext])))
    first_ext = sum(len(p) for p in parts)
    all_ext_names = external_names(n_externals)
    used_names = [all_ext_names[i] for i in used]
    parts.append(_syms(strtab.add_many(used_names), 0, 0, STB_GLOBAL, STT_NOTYPE, 0))
    ext_symidx = np.full(n_externals, -1, np.int64)
    ext_symidx[used] = first_ext + np.arange(used.size)
    idx_pr0 = first_ext + used.size
    parts.append(_syms(strtab.add(UNWIND_PR0), 0, 0, STB_GLOBAL, STT_NOTYPE, 0, n=1))
    symtab = np.concatenate(parts)

    # ---- .rel.text -------------------------------------------------------------------------
    symidx = np.select(
        [tk_all == 0, tk_all == 1, tk_all == 2, tk_all == 3],
        [ext_symidx[np.where(tk_all == 0, tidx_all, 0)],
         first_fn + np.where(tk_all == 1, tidx_all, 0),
         first_cold + np.where(tk_all == 2, tidx_all, 0),
         np.full(tk_all.size, symidx_sec[".rodata"])])
    r_off = np.concatenate((call_slot, tail_slot, pair_slot, pair_slot + 1, abs_slot)) * 4
    r_sym = np.concatenate((symidx[:s1], symidx[s1:s2], symidx[s1:s2], symidx[s2:]))
    r_type = np.concatenate((np.full(n_call, R_CALL), np.full(n_jump, R_JUMP),
                             np.full(n_pairs, R_MOVW), np.full(n_pairs, R_MOVT),
                             np.full(n_abs, R_ARM_ABS32)))
    o = np.argsort(r_off, kind="stable")
    rel_text = _rels(r_off[o], r_sym[o], r_type[o])
    assert len(rel_text) == n

    # ---- .text.unlikely, .init.text, .exit.text --------------------------------------------
    cold = np.empty(2 * n_cold, np.uint32)
    cold[0::2] = enc["ret0"]
    cold[1::2] = enc["bx_lr"]
    hot_sym = int(ext_symidx[hot_ext])
    # init: push; bl synth_cold_0; bl synth_cold_last; bl synth_cold_1; movw/movt r0,.rodata;
    #       bl <hot external>; mov r0,#0; pop {r4,pc}.  It only calls leaf functions (in core
    #       text, so init->core branches need PLTs when init is placed far away) and one
    #       external, so it can be executed when that external returns.
    init = np.array([enc["push"], 0, 0, 0, 0, 0, 0, enc["ret0"], enc["pop_pc"]], np.uint32)
    init[1:4] = branch(np.zeros(3, np.int64), True)
    init[4] = movw([0], False, rd=0)[0]                    # movw r0, #:lower16:.rodata
    init[5] = movw([0], True, rd=0)[0]                     # movt r0, #:upper16:.rodata
    init[6] = branch(np.zeros(1, np.int64), True)[0]
    rel_init = _rels(np.array([1, 2, 3, 4, 5, 6]) * 4,
                     [first_cold, first_cold + n_cold - 1, first_cold + 1, symidx_sec[".rodata"],
                      symidx_sec[".rodata"], hot_sym],
                     [R_CALL, R_CALL, R_CALL, R_MOVW, R_MOVT, R_CALL])
    exit_ = np.array([movw([16], False, rd=0)[0], movw([16], True, rd=0)[0],
                      branch(np.zeros(1, np.int64), False)[0]], np.uint32)
    rel_exit = _rels([0, 4, 8], [symidx_sec[".rodata"], symidx_sec[".rodata"], hot_sym],
                     [R_MOVW, R_MOVT, R_JUMP])

    # ---- .rodata, .data --------------------------------------------------------------------
    rodata = bytearray((np.arange(RODATA_SIZE) * 37 % 251).astype(np.uint8).tobytes())
    rodata[0:16] = b"synth: loaded\n\0\0"
    rodata[16:32] = b"synth: unloaded\n"
    rodata[31] = 0
    n_data = max(4, n // 512)
    d_tk = pick(n_data, [0.4, 0.4, 0.0, 0.2])
    d_sym = np.select([d_tk == 0, d_tk == 1, d_tk == 3],
                      [ext_symidx[used[rng.integers(0, used.size, n_data)]],
                       first_fn + rng.integers(0, n_fn, n_data),
                       np.full(n_data, symidx_sec[".rodata"])])
    d_add = np.where(d_tk == 3, rng.integers(0, RODATA_SIZE // 4, n_data) * 4, 0)
    data = d_add.astype("<u4").tobytes()
    rel_data = _rels(np.arange(n_data) * 4, d_sym, np.full(n_data, R_ARM_ABS32))

    # ---- .ARM.exidx for .text: {PREL31 to function, inline "pop {r4, lr}; finish"} ----------
    exidx = np.empty(2 * n_fn, "<u4")
    exidx[0::2] = (fstart * 4) & 0x7FFFFFFF
    exidx[1::2] = 0x80A8B0B0
    rel_exidx = np.concatenate((
        _rels([0], [symidx_sec[".text"]], [R_ARM_PREL31]),
        _rels([0], [idx_pr0], [R_ARM_NONE]),
        _rels(np.arange(1, n_fn) * 8, np.full(n_fn - 1, symidx_sec[".text"]),
              np.full(n_fn - 1, R_ARM_PREL31))))

    # ---- .modinfo, __versions, .gnu.linkonce.this_module -----------------------------------
    modinfo = (f"license=GPL\0description=armload synthetic module ({n} relocations)\0"
               f"depends=\0name={name}\0vermagic={VERMAGIC}\0").encode()
    ver_names = used_names + [UNWIND_PR0, "module_layout"]
    versions = np.zeros(len(ver_names), dtype=[("crc", "<u4"), ("name", "S60")])
    versions["crc"] = [external_crc(v) for v in ver_names]
    versions["name"] = [v.encode() for v in ver_names]
    this_module = bytearray(THIS_MODULE_SIZE)
    this_module[THIS_MODULE_NAME_OFF:THIS_MODULE_NAME_OFF + len(name)] = name.encode()
    rel_this = _rels([THIS_MODULE_INIT_OFF, THIS_MODULE_EXIT_OFF], [idx_init, idx_exit],
                     [R_ARM_ABS32, R_ARM_ABS32])

    # ---- sections --------------------------------------------------------------------------
    AX, A, WA = SHF_ALLOC | SHF_EXECINSTR, SHF_ALLOC, SHF_ALLOC | SHF_WRITE
    sy, ix = SEC[".symtab"], SHF_INFO_LINK

    def rel(nm, arr):
        return (nm, SHT_REL, ix, arr.tobytes(), sy, SEC[nm[4:]], 4, 8)

    # (name, type, flags, data|size, link, info, align, entsize)
    sections = [
        None,
        (".text", SHT_PROGBITS, AX, words.tobytes(), 0, 0, 4, 0),
        rel(".rel.text", rel_text),
        (".text.unlikely", SHT_PROGBITS, AX, cold.tobytes(), 0, 0, 4, 0),
        (".init.text", SHT_PROGBITS, AX, init.astype("<u4").tobytes(), 0, 0, 4, 0),
        rel(".rel.init.text", rel_init),
        (".exit.text", SHT_PROGBITS, AX, exit_.astype("<u4").tobytes(), 0, 0, 4, 0),
        rel(".rel.exit.text", rel_exit),
        (".plt", SHT_PROGBITS, AX, b"\0", 0, 0, 1, 0),
        (".init.plt", SHT_PROGBITS, A, b"\0", 0, 0, 1, 0),
        (".rodata", SHT_PROGBITS, A, bytes(rodata), 0, 0, 4, 0),
        (".ARM.exidx", SHT_ARM_EXIDX, A | SHF_LINK_ORDER, exidx.tobytes(), SEC[".text"], 0, 4, 0),
        rel(".rel.ARM.exidx", rel_exidx),
        (".modinfo", SHT_PROGBITS, A, modinfo, 0, 0, 1, 0),
        ("__versions", SHT_PROGBITS, A, versions.tobytes(), 0, 0, 4, 0),
        (".data", SHT_PROGBITS, WA, data, 0, 0, 4, 0),
        rel(".rel.data", rel_data),
        (".gnu.linkonce.this_module", SHT_PROGBITS, WA, bytes(this_module), 0, 0, 64, 0),
        rel(".rel.gnu.linkonce.this_module", rel_this),
        (".bss", SHT_NOBITS, WA, 16, 0, 0, 4, 0),
        (".note.GNU-stack", SHT_PROGBITS, 0, b"", 0, 0, 1, 0),
        (".ARM.attributes", SHT_ARM_ATTRIBUTES, 0, ARM_ATTRIBUTES, 0, 0, 1, 0),
        (".symtab", SHT_SYMTAB, 0, symtab.tobytes(), SEC[".strtab"], first_global, 4, 16),
        (".strtab", SHT_STRTAB, 0, strtab.bytes(), 0, 0, 1, 0),
        (".shstrtab", SHT_STRTAB, 0, None, 0, 0, 1, 0),
    ]
    assert [s[0] for s in sections[1:]] == list(SEC)[1:]
    shstr = _StrTab()
    sh_names = [0] + [shstr.add(s[0]) for s in sections[1:]]
    shstrtab = shstr.bytes()
    sections[-1] = sections[-1][:3] + (shstrtab,) + sections[-1][4:]

    out = [b""]
    pos = 52
    shdrs = [b"\0" * 40]
    for i, (nm, typ, flags, payload, link, info, align, entsize) in enumerate(sections[1:], 1):
        if typ == SHT_NOBITS:
            size = payload
            shdrs.append(struct.pack("<10I", sh_names[i], typ, flags, 0, pos, size, link, info,
                                     align, entsize))
            continue
        pad = (-pos) % max(align, 1)
        if pad:
            out.append(b"\0" * pad)
            pos += pad
        shdrs.append(struct.pack("<10I", sh_names[i], typ, flags, 0, pos, len(payload), link,
                                 info, align, entsize))
        out.append(payload)
        pos += len(payload)
    pad = (-pos) % 4
    out.append(b"\0" * pad)
    shoff = pos + pad
    ident = b"\x7fELF" + bytes([1, 1, 1, 0]) + b"\0" * 8
    out[0] = ident + struct.pack("<HHIIIIIHHHHHH", 1, 40, 1, 0, 0, shoff, 0x05000000, 52, 0, 0,
                                 40, len(sections), SEC[".shstrtab"])
    out.extend(shdrs)
    return b"".join(out)


def write_module(path, **kw) -> int:
    """Write make_module(**kw) to `path`; return the number of bytes written."""
    data = make_module(**kw)
    with open(path, "wb") as f:
        f.write(data)
    return len(data)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m armload.inputs.synth",
                                description="Write a synthetic ARM kernel-module-like ELF object.")
    p.add_argument("out", help="output .o/.ko path")
    p.add_argument("--relocs", type=int, default=DEFAULT_N_RELOCS,
                   help=f"entries in .rel.text (default {DEFAULT_N_RELOCS})")
    p.add_argument("--externals", type=int, default=2000, help="undefined ext_func_* symbols")
    p.add_argument("--thumb", action="store_true", help="Thumb-2 code")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--text-size", type=lambda s: int(s, 0), default=None)
    p.add_argument("--mixed-addends", action="store_true")
    p.add_argument("--name", default="synth", help="module name")
    p.add_argument("--symvers", metavar="PATH",
                   help="also write a Module.symvers exporting the externals")
    a = p.parse_args(argv)
    size = write_module(a.out, n_relocs=a.relocs, n_externals=a.externals, thumb=a.thumb,
                        seed=a.seed, text_size=a.text_size, mixed_addends=a.mixed_addends,
                        name=a.name)
    if a.symvers:
        with open(a.symvers, "w") as f:
            f.write(symvers_text(a.externals))
    print(f"{a.out}: {size} bytes, {a.relocs} relocations in .rel.text", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
