"""PLT counting under three kernel generations, and emission agreeing with counting."""
import random

import numpy as np
import pytest

from armload.config import KernelConfig
from armload.constants import R
from armload.elf import read_object
from armload.errors import RelocationError
from armload.kernel import Kernel
from armload.loader import Session
from armload.plt import (PltSection, _count_sorted, count_legacy, count_legacy_quadratic, exec_rel_tables,
                         heapsort_order, kernel_order, plan_plts, sym_shndx)
from armload.synth import make_module
from armload.verify import verify_module

from conftest import SYMVERS, all_kos, sample
from oracles.kernel_sort import kernel_sort

CALL = int(R.R_ARM_CALL)
ZERO = 0xEBFFFFFE          # bl sym     (A = -8)
PLUS8 = 0xEB000000         # bl sym+8   (A = 0)


@pytest.mark.parametrize("variant", ["v6", "sorted"])
def test_heapsort_sorts_and_is_unstable(variant):
    rng = random.Random(1)
    for n in range(60):
        keys = [rng.randint(0, 4) for _ in range(n)]
        order = heapsort_order(keys, variant)
        assert sorted(order) == list(range(n))
        assert [keys[i] for i in order] == sorted(keys)
    keys = [1, 1, 1, 0]
    assert heapsort_order(keys, variant) != [3, 0, 1, 2]      # a stable sort would give this


def test_sample_hand_counts():
    """hello: init calls __gnu_mcount_nc and _printk, exit tail-calls _printk (all SHN_UNDEF)."""
    obj = read_object(sample("hello-arm.ko"))
    plan = plan_plts(obj, KernelConfig())
    assert (plan.counts["legacy"].core, plan.counts["sorted"].core) == (3, 3)
    assert (plan.counts["v6"].core, plan.counts["v6"].init) == (1 + 2, 2 + 2)   # + 2 fixed ftrace each
    assert plan.sizes == {"core": 128, "init": 128}
    # no ftrace: no fixed entries; 32-byte lines: groups of 64 bytes
    plan = plan_plts(obj, KernelConfig(dynamic_ftrace=False, l1_cache_bytes=32))
    assert (plan.counts["v6"].core, plan.counts["v6"].init) == (1, 2)
    assert plan.sizes == {"core": 64, "init": 64}


def test_init_to_core_calls_count_only_under_v6():
    obj = read_object(sample("initcore-arm.ko"))
    tables = exec_rel_tables(obj)
    names = obj.sym_names
    shndx = sym_shndx(obj)
    local = 0
    for t in tables:
        rsym = (t.r_info >> 8).astype(int)
        rtype = t.r_info & 0xFF
        br = np.isin(rtype, [CALL, int(R.R_ARM_JUMP24)])
        local += int((br & (shndx[rsym] != 0) & (shndx[rsym] != t.dstsec)).sum())
    assert local > 0, "initcore must call between init and core text"
    plan = plan_plts(obj, KernelConfig())
    v6 = plan.counts["v6"].total - 4
    assert v6 >= plan.counts["sorted"].total + 1
    assert {n for n in names if n.startswith("initcore")}


@pytest.mark.parametrize("path", all_kos(), ids=lambda p: p.rsplit("/", 1)[-1])
def test_legacy_equals_sorted_when_addends_are_zero(path):
    obj = read_object(path)
    cfg = KernelConfig(thumb2="thumb2" in path)
    plan = plan_plts(obj, cfg)
    assert plan.counts["legacy"].total == plan.counts["sorted"].total
    shndx = sym_shndx(obj)
    for t in exec_rel_tables(obj):
        assert count_legacy(t, shndx, cfg.thumb2) == count_legacy_quadratic(t, shndx, cfg.thumb2)


def test_synthetic_zero_addends_legacy_equals_sorted():
    data = make_module(20_000, n_externals=300)
    obj = read_object("synth.ko", data)
    plan = plan_plts(obj, KernelConfig())
    assert plan.counts["legacy"].total == plan.counts["sorted"].total > 0


def _table(words, syms, rtype=CALL):
    from armload.plt import RelTable
    n = len(words)
    r_info = np.array([(s << 8) | rtype for s in syms], dtype=np.uint32)
    return RelTable(1, 2, ".text", r_info, np.arange(n, dtype=np.uint32) * 4, np.array(words, dtype=np.uint32))


def test_mixed_addends_order_matters_and_emission_agrees():
    """Same symbol: zero, non-zero, zero -> 3 entries; zero, zero, non-zero -> 2 (kernel comment)."""
    shndx = np.array([0, 0, 0], dtype=np.int64)          # symbol 1 is SHN_UNDEF
    cfg = KernelConfig(dynamic_ftrace=False)
    for words, expect in (([ZERO, PLUS8, ZERO], 3), ([ZERO, ZERO, PLUS8], 2)):
        t = _table(words, [1, 1, 1])
        order = np.arange(3)
        n = _count_sorted(t, order, shndx, same_section_rule=True)
        assert n == expect
        plt = PltSection("core", 0xF0000000, 128, cfg, ())
        S = 0xC0001000
        vals = np.array([(S + (-8 if w == ZERO else 0) + 8) & 0xFFFFFFFF for w in words], dtype=np.uint32)
        slots, bad = plt.get_many_last(vals)
        assert bad == -1 and plt.count == expect


def test_kernel_order_replays_heapsort_for_mixed_ties():
    words = np.array([ZERO, PLUS8, ZERO, ZERO, PLUS8] * 7, dtype=np.uint32)
    r_info = np.array([(1 << 8) | CALL] * len(words), dtype=np.uint32)
    got = kernel_order(r_info, words, "v6")
    rels = [(i, int(x)) for i, x in enumerate(r_info)]
    kernel_sort(rels)                                     # the literal lib/sort.c port (tests/oracles)
    assert got.tolist() == [i for i, _ in rels] != list(range(len(words)))
    # uniform ties: any order gives the same result, the fast stable order is used
    same = kernel_order(r_info, np.full(len(words), ZERO, np.uint32), "v6")
    assert same.tolist() == list(range(len(words)))


def test_emission_never_exceeds_count_with_mixed_addends():
    data = make_module(30_000, n_externals=200, mixed_addends=True)
    for alg in ("sorted", "v6", "legacy"):
        cfg = KernelConfig(plt_algorithm=alg)
        mod = Session(Kernel.builtin(cfg), cfg, "vmalloc").load("synth.ko", data=data)
        counts = mod.plt_counts[alg]
        used = {"core": 0, "init": 0}
        for e in mod.plt_entries:
            used[e.plt] += 1
        assert used["core"] <= counts.core and used["init"] <= counts.init
        if alg != "v6":
            assert counts.init == used["init"] == 0            # one .plt before 6.x
        assert (mod.branches["plt"] != 0).sum() > 0


def test_plt_groups_are_ldr_words_then_literals():
    cfg = KernelConfig()
    plt = PltSection("core", 0xF0000000, 256, cfg, (0xC0001000, 0xC0002000))
    slots, bad = plt.get_many_last(np.array([0xC0001000, 0xC0003000, 0xC0003000, 0xC0004000] + [0xC1000000 + 16 * i for i in range(14)], dtype=np.uint32))
    assert bad == -1
    assert slots[0] == 0xF0000000                           # fixed ftrace entry reused
    assert slots[1] == slots[2] == 0xF0000008               # last entry reused
    assert slots[-1] == 0xF0000080 + 4 * 1                  # wrapped into the second group
    words = np.frombuffer(plt.image(), "<u4")
    assert (words[:16] == 0xE59FF038).all() and (words[32:48] == 0xE59FF038).all()
    assert words[16] == 0xC0001000 and words[18] == 0xC0003000 and words[19] == 0xC0004000


def test_plt_exhaustion_is_an_error_not_a_crash():
    cfg = KernelConfig(dynamic_ftrace=False)
    plt = PltSection("core", 0xF0000000, 128, cfg, ())
    _, bad = plt.get_many_last(np.arange(0xC0000000, 0xC0000000 + 17 * 4, 4, dtype=np.uint32))
    assert bad == 16


def _far_init_session(cfg):
    """A session whose module window has room for initcore's core allocation only, so that its
    init allocation falls back to vmalloc, hundreds of MiB away from core."""
    probe = Session(Kernel.from_files([SYMVERS], cfg), cfg, "window").load(sample("initcore-arm.ko"))
    core = next(r for r in probe.regions if r.name == "core")
    session = Session(Kernel.from_files([SYMVERS], cfg), cfg, "window")
    page = 0x1000
    core_need = (core.size + page - 1) // page * page + page         # module_alloc: + guard page
    session.allocator.alloc(cfg.modules_end - cfg.modules_vaddr - core_need - page)
    return session


def test_sorted_rules_fail_on_far_init_to_core_calls():
    """The 2016 rules count only SHN_UNDEF targets and have one .plt (in core): with init far
    from core, the first init->core call (sorted order: core_mix) cannot be relocated."""
    cfg = KernelConfig(plt_algorithm="sorted")
    with pytest.raises(RelocationError, match=r"^initcore: section \d+ reloc 0 sym 'core_mix': relocation 28 out of "
                                              r"range \(0xf00000[0-9a-f]{2} -> 0xbf[0-9a-f]{6}\)"):
        _far_init_session(cfg).load(sample("initcore-arm.ko"))


def test_v6_rules_route_far_init_to_core_calls_through_init_plt():
    cfg = KernelConfig()
    mod = _far_init_session(cfg).load(sample("initcore-arm.ko"))
    regions = {r.name: r for r in mod.regions}
    assert regions["init"].base - regions["core"].base > 0x02000000           # beyond BL range
    assert verify_module(mod).ok
    init_plt = next(s for s in mod.sections if s.name == ".init.plt")
    far = [b for b in mod.branches if regions["init"].base <= int(b["place"]) < regions["init"].end
           and regions["core"].base <= int(b["target"]) < regions["core"].end]
    assert {mod.sym_names[int(b["sym"])] for b in far} == {"core_mix", "initcore_checksum"}
    assert all(init_plt.addr <= int(b["plt"]) < init_plt.addr + init_plt.size for b in far)


def test_initcore_hand_counts():
    """readelf -r initcore-arm.ko, branches only:
    .rel.text       4 x CALL __gnu_mcount_nc                         (UND)
    .rel.init.text  CALL __gnu_mcount_nc, _printk (UND); core_mix, initcore_checksum (.text)
    .rel.exit.text  CALL core_sum (.text); JUMP24 _printk (UND)
    legacy/sorted: UND only, duplicates once per section -> 1 + 2 + 1 = 4 (one .plt).
    v6: core = .text 1 + .exit.text 2 (+2 fixed) = 5; init = 4 (+2 fixed) = 6."""
    plan = plan_plts(read_object(sample("initcore-arm.ko")), KernelConfig())
    assert plan.counts["legacy"].total == plan.counts["sorted"].total == 4
    assert (plan.counts["v6"].core, plan.counts["v6"].init) == (5, 6)
