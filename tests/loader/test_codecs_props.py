"""Property-based tests (Hypothesis): the relocation codecs over their whole field ranges, and
apply_rel_section against the port of apply_relocate() near every bound."""
import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from armload.loader.relocate import (arm_branch_decode, arm_branch_encode, arm_mov_decode, arm_mov_encode,
                              prel31_decode, prel31_encode, thm_branch_decode, thm_branch_encode, thm_mov_decode,
                              thm_mov_encode)
from oracles.apply_relocate import STT_FUNC
from test_relocate_bounds import both

u32 = st.integers(0, 0xFFFFFFFF)
A = lambda *v: np.array(v, dtype=np.int64)         # noqa: E731
W = lambda *v: np.array(v, dtype=np.uint32)        # noqa: E731


# --- codecs: decode(encode(x)) == x over the field, encode(decode(w)) == w for every word -----------
@given(u32, st.integers(-(1 << 23), (1 << 23) - 1))
@example(0xEBFFFFFE, -(1 << 23)).via("lowest imm24")
@example(0xEBFFFFFE, (1 << 23) - 1)
def test_arm_branch_codec(word, imm):
    off = imm * 4
    enc = arm_branch_encode(W(word), A(off))
    assert int(arm_branch_decode(enc)[0]) == off
    assert int(enc[0]) & 0xFF000000 == word & 0xFF000000
    assert int(arm_branch_encode(W(word), arm_branch_decode(W(word)))[0]) == word


@given(u32, st.integers(-(1 << 23), (1 << 23) - 1))
@example(0xFFFEF7FF, -(1 << 23))
@example(0xFFFEF7FF, (1 << 23) - 1)
def test_thumb_branch_codec(word, half):
    off = half * 2
    enc = int(thm_branch_encode(W(word), A(off))[0])
    assert int(thm_branch_decode(W(enc))[0]) == off
    assert enc & 0xF800 == word & 0xF800 and (enc >> 16) & 0xD000 == (word >> 16) & 0xD000
    assert int(thm_branch_encode(W(word), thm_branch_decode(W(word)))[0]) == word


@given(u32, st.integers(-0x8000, 0x7FFF))
@example(0xE3000000, -0x8000)
@example(0xE3000000, 0x7FFF)
def test_arm_mov_codec(word, v):
    enc = int(arm_mov_encode(W(word), A(v))[0])
    assert int(arm_mov_decode(W(enc))[0]) == v
    assert enc & 0xFFF0F000 == word & 0xFFF0F000
    assert int(arm_mov_encode(W(word), arm_mov_decode(W(word)))[0]) == word


@given(u32, st.integers(-0x8000, 0x7FFF))
@example(0x0000F240, -0x8000)
@example(0x0000F240, 0x7FFF)
def test_thumb_mov_codec(word, v):
    enc = int(thm_mov_encode(W(word), A(v))[0])
    assert int(thm_mov_decode(W(enc))[0]) == v
    assert enc & 0xFBF0 == word & 0xFBF0 and (enc >> 16) & 0x8F00 == (word >> 16) & 0x8F00
    assert int(thm_mov_encode(W(word), thm_mov_decode(W(word)))[0]) == word


@given(u32, st.integers(-(1 << 30), (1 << 30) - 1))
@example(0, -(1 << 30))
@example(0x80000000, (1 << 30) - 1)
def test_prel31_codec(word, v):
    enc = int(prel31_encode(W(word), A(v))[0])
    assert int(prel31_decode(W(enc))[0]) == v
    assert enc >> 31 == word >> 31
    assert int(prel31_encode(W(word), prel31_decode(W(word)))[0]) == word


# --- the driver against the kernel port, near each bound -------------------------------------------
BOUNDS = {  # rtype: (word with a known addend, bias, bound)
    28: (0xEBFFFFFE, 8, 0x02000000), 29: (0xEAFFFFFE, 8, 0x02000000), 1: (0x1AFFFFFE, 8, 0x02000000),
    10: (0xFFFEF7FF, 4, 0x01000000), 30: (0xBFFEF7FF, 4, 0x01000000), 42: (0x00000000, 0, 0x40000000),
}
near = st.integers(-12, 12)


@settings(deadline=None)
@given(st.sampled_from(sorted(BOUNDS)), st.booleans(), near, st.integers(0, 0xFFFFFFF0).map(lambda p: p & ~1),
       st.sampled_from([0, 1, 2, 3]))
def test_branch_and_prel31_bounds_match_kernel(rtype, upper, d, P, stype):
    word, bias, bound = BOUNDS[rtype]
    off = (bound if upper else -bound) + d
    both(rtype, word, P + bias + off, P, stype)


TYPES = [0, 1, 2, 3, 10, 28, 29, 30, 38, 40, 42, 43, 44, 45, 46, 47, 48, 49, 50, 57, 59, 63]
# S - P: anything, or small enough for branches and the group relocations to be in range
DELTA = (st.integers(-(1 << 31), (1 << 31) - 1) | st.integers(-(1 << 20), 1 << 20)
         | st.integers(-0x1000, 0x1000) | st.integers(0, 27).map(lambda k: 1 << k))


@settings(deadline=None)
@given(st.sampled_from(TYPES), u32, u32, u32.map(lambda p: p & ~3 & 0xFFFFFFE0), st.sampled_from([0, 1, 2, STT_FUNC, 3]))
def test_every_type_matches_kernel(rtype, word, S, P, stype):
    both(rtype, word, S, P, stype)


@settings(deadline=None)
@given(st.sampled_from(TYPES), u32, DELTA, u32.map(lambda p: p & ~3 & 0xFFFFFFE0), st.sampled_from([0, STT_FUNC]))
def test_every_type_matches_kernel_near_the_place(rtype, word, delta, P, stype):
    both(rtype, word, P + delta, P, stype)


# --- the row factories themselves (RELOCS is built at import; build fresh rows here) -------------
@settings(deadline=None)
@given(st.sampled_from([(43, False, False, False), (44, False, False, True), (45, False, True, False),
                        (46, False, True, True), (47, True, False, False), (48, True, False, True),
                        (49, True, True, False), (50, True, True, True)]), u32, u32, u32)
def test_mov_rows_built_by_the_factory(kind, word, S, P):
    from armload.loader.relocate import _mov
    from oracles.apply_relocate import apply_relocate
    rtype, thumb, prel, movt = kind
    apply = _mov(thm_mov_decode if thumb else arm_mov_decode, thm_mov_encode if thumb else arm_mov_encode, prel, movt)
    out, bad = apply(W(word), A(S), A(P))
    assert bad is None and int(out[0]) == apply_relocate(rtype, word, S, P)


@settings(deadline=None)
@given(st.sampled_from([(0, 57), (1, 59)]), u32, u32, u32)
def test_alu_rows_built_by_the_factory(kind, word, S, P):
    from armload.loader.relocate import _alu
    from oracles.apply_relocate import apply_relocate
    group, rtype = kind
    out, bad = _alu(group)(W(word), A(S), A(P))
    assert bad is None and int(out[0]) == apply_relocate(rtype, word, S, P)
    two, _ = _alu(group)(W(word, word), A(S, S + 4), A(P, P))        # element-wise over arrays
    assert int(two[0]) == int(out[0]) and int(two[1]) == apply_relocate(rtype, word, (S + 4) & 0xFFFFFFFF, P)


@given(st.lists(st.integers(0, 2**64 - 1), max_size=60))
def test_distinct_is_np_unique(values):
    """loader.model.distinct (np.unique without numpy.ma's import) gives np.unique's values and dtype."""
    from armload.loader.model import distinct
    a = np.array(values, dtype=np.uint64)
    d, u = distinct(a), np.unique(a)
    assert d.dtype == u.dtype and d.tolist() == u.tolist()
