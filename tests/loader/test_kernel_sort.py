"""The kernel's REL sort and PLT count against literal ports of lib/sort.c and module-plts.c.

The oracles live in tests/oracles/ (written from the kernel source, no armload code); armload is
only reached through its public functions (heapsort_order, kernel_order, count_plts), so these
tests hold whatever the replay inside armload/loader/plt.py looks like.
"""
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from armload.kernel.config import KernelConfig
from armload.loader.elf import read_object
from armload.loader.plt import count_plts, heapsort_order, kernel_order
from armload.inputs.synth import make_module
from testinputs import all_kos
from oracles.kernel_sort import cmp_3way, cmp_rel, kernel_sort, sort_classic, sort_r_v52
from oracles.module_plts import kernel_plt_counts, kernel_plt_counts_2016

VARIANTS = {"v6": sort_r_v52, "sorted": sort_classic}
R_ARM_CALL, R_ARM_JUMP24, R_ARM_THM_CALL, R_ARM_ABS32 = 28, 29, 10, 2
ZERO, PLUS8 = 0xEBFFFFFE, 0xEB000000        # bl sym (A = -8), bl sym+8 (A = 0)


def oracle_permutation(keys, variant):
    """Where each element ends up when the kernel sorts `keys`: the C sort run on indices."""
    idx = list(range(len(keys)))
    VARIANTS[variant](idx, lambda x, y: cmp_3way(keys[x], keys[y]), 8)
    return idx


# --- the oracle itself ----------------------------------------------------------------------
@pytest.mark.parametrize("variant", ["v6", "sorted"])
def test_oracle_sorts(variant):
    rng = random.Random(4)
    rels = [(i * 4, (rng.randrange(20) << 8) | rng.choice([28, 29, 2])) for i in range(500)]
    mine = list(rels)
    kernel_sort(mine, variant)
    key = lambda r: (r[1] & 0xFF, r[1] >> 8)        # noqa: E731
    assert [key(r) for r in mine] == sorted(key(r) for r in rels)
    assert sorted(mine) == sorted(rels)
    assert all(cmp_rel(a, b) <= 0 for a, b in zip(mine, mine[1:]))


def test_oracle_is_unstable_like_the_kernel():
    """Hand-run of sort_r() on [1, 1, 1, 0] (keys): heapify sifts index 1 then 0, then three
    extractions; the tied 1s come out as 2, 1, 0 -- not the stable 0, 1, 2."""
    assert oracle_permutation([1, 1, 1, 0], "v6") == [3, 2, 1, 0]
    assert oracle_permutation([1, 1, 1, 0], "sorted") != [3, 0, 1, 2]


# --- armload's replay against the oracle ------------------------------------------------------
@pytest.mark.parametrize("variant", ["v6", "sorted"])
@pytest.mark.parametrize("n", list(range(0, 40)) + [63, 64, 65, 127, 128, 129, 1000])
def test_heapsort_order_equals_lib_sort(variant, n):
    rng = random.Random(n)
    for spread in (1, 2, 3, 7, n + 1):
        keys = [rng.randrange(spread) for _ in range(n)]
        assert heapsort_order(keys, variant).tolist() == oracle_permutation(keys, variant), (spread, keys)


@settings(deadline=None)
@given(st.sampled_from(["v6", "sorted"]), st.lists(st.integers(0, 5), max_size=200))
def test_heapsort_order_property(variant, keys):
    assert heapsort_order(keys, variant).tolist() == oracle_permutation(keys, variant)


def _addend(rtype, word):
    """The bits counting compares (branches only: other types' order among ties never matters)."""
    if rtype in (R_ARM_THM_CALL, 30):
        return word & 0x2FFF07FF
    return word & 0x00FFFFFF if rtype in (1, R_ARM_CALL, R_ARM_JUMP24) else None


def _oracle_sequence(r_info, words, variant):
    rels = [(int(w), int(i)) for i, w in zip(r_info, words)]         # (word stands in for r_offset)
    kernel_sort(rels, variant)
    return [(i, _addend(i & 0xFF, w)) for w, i in rels]


rel_entry = st.tuples(st.sampled_from([R_ARM_CALL, R_ARM_JUMP24, R_ARM_ABS32, R_ARM_THM_CALL, 30, 1]),
                      st.integers(1, 4) | st.sampled_from([65535, 65536, 65537, 0xFFFFFF]),
                      st.sampled_from([ZERO, PLUS8, 0xEB000004, 0x0AFFFFFE, 0xEAFFFFFE, 0xFFFEF7FF, 0xBFFEF7FF,
                                       0xF800F000]))


@settings(deadline=None)
@given(st.sampled_from(["v6", "sorted"]), st.booleans(), st.lists(rel_entry, max_size=120))
def test_kernel_order_sequence_equals_lib_sort(variant, exact, entries):
    """What counting sees (type, sym, addend bits, in order) is the kernel's sequence, whether
    armload replays the heapsort or takes its stable shortcut."""
    r_info = np.array([(s << 8) | t for t, s, _ in entries], dtype=np.uint32)
    words = np.array([w for _, _, w in entries], dtype=np.uint32)
    order = kernel_order(r_info, words, variant, exact=exact)
    assert sorted(order.tolist()) == list(range(len(entries)))
    got = [(int(r_info[i]), _addend(int(r_info[i]) & 0xFF, int(words[i]))) for i in order]
    assert got == _oracle_sequence(r_info.tolist(), words.tolist(), variant)


def test_kernel_order_mixed_ties_is_the_heap_order():
    words = np.array([ZERO, PLUS8, ZERO, ZERO, PLUS8] * 7, dtype=np.uint32)
    r_info = np.array([(1 << 8) | R_ARM_CALL] * len(words), dtype=np.uint32)
    want = oracle_permutation([1] * len(words), "v6")
    assert kernel_order(r_info, words, "v6").tolist() == want
    assert want != list(range(len(words)))               # the case where a stable sort would be wrong


# --- PLT counts against module-plts.c ---------------------------------------------------------
@pytest.mark.parametrize("thumb", [False, True])
def test_count_plts_mixed_addends_equals_module_plts(tmp_path, thumb):
    """A synthetic module where the same symbols carry different addends: the count depends on
    the heapsort's tie order (a stable sort gives a different number)."""
    p = tmp_path / "mixed.ko"
    p.write_bytes(make_module(30_000, n_externals=150, mixed_addends=True, thumb=thumb, seed=3))
    c, _ = count_plts(read_object(str(p)), KernelConfig(thumb2=thumb), "v6")
    assert (c.core, c.init) == kernel_plt_counts(str(p))
    c, _ = count_plts(read_object(str(p)), KernelConfig(thumb2=thumb), "sorted")
    assert (c.core, c.init) == (kernel_plt_counts_2016(str(p)), 0)


@pytest.mark.parametrize("path", all_kos(), ids=lambda p: p.rsplit("/", 1)[-1])
def test_count_plts_samples_equal_module_plts(path):
    c, _ = count_plts(read_object(path), KernelConfig(thumb2="thumb2" in path), "v6")
    assert (c.core, c.init) == kernel_plt_counts(path)
    c, _ = count_plts(read_object(path), KernelConfig(thumb2="thumb2" in path), "sorted")
    assert (c.core, c.init) == (kernel_plt_counts_2016(path), 0)


@settings(deadline=None)
@given(st.lists(st.integers(0, 4), max_size=300))
def test_both_lib_sort_generations_give_the_same_order(keys):
    """The bottom-up sift of v5.2+ stops at the same node as the classic sift-down (the deepest
    node on the max-child path that compares greater), so the two heapsorts permute ties alike:
    the 2016 and 6.1 counts differ by their rules, never by their sort."""
    assert oracle_permutation(keys, "v6") == oracle_permutation(keys, "sorted")
