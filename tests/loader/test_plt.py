"""PLT counting under three kernel generations, and emission agreeing with counting."""
import os
import random
import sys

import numpy as np
import pytest

from armload.kernel.config import KernelConfig
from armload.constants import R
from armload.loader.elf import read_object
from armload.errors import RelocationError
from armload.kernel.provider import Kernel
from armload.loader.session import Session
from armload.loader import plt as P
from armload.loader.plt import (PltSection, _count_sorted, count_legacy, count_legacy_quadratic, exec_rel_tables,
                         heapsort_order, heapsort_order_python, kernel_order, plan_plts, sym_shndx)
from armload.inputs.synth import make_module
from armload.loader.verify import verify_module

from testinputs import SYMVERS, all_kos, sample
# The literal ports of 6.1's lib/sort.c and module-plts.c, kept apart from the package (shares no code).
from oracles.kernel_sort import kernel_sort
from oracles.module_plts import kernel_plt_counts

CALL = int(R.R_ARM_CALL)
ZERO = 0xEBFFFFFE          # bl sym     (A = -8)
PLUS8 = 0xEB000000         # bl sym+8   (A = 0)


def literal_order(r_info, variant):
    """The permutation the literal port applies: sort (index, r_info) pairs, read the indices back."""
    rels = [(i, int(x)) for i, x in enumerate(r_info)]
    kernel_sort(rels, variant)          # tests/oracles: 6.1's sort_r ("v6") or the classic heapsort ("sorted")
    return [i for i, _ in rels]


def random_r_info(rng, n):
    """Many ties: a handful of types (branches and data) and symbol indices, sometimes one key only."""
    types = rng.choice([[28], [28, 29], [28, 29, 2, 10, 30, 1]])
    nsym = rng.choice([1, 2, 3, 7, 50, 70000])
    return np.array([(rng.randrange(nsym) << 8) | rng.choice(types) for _ in range(n)], dtype=np.uint32)


def test_native_sort_is_used():
    """The compiled replay is what runs (make venv builds it); ARMLOAD_NO_NATIVE=1 opts out explicitly."""
    compiled, why = P.native_sort()
    if os.environ.get("ARMLOAD_NO_NATIVE"):
        assert compiled is None and why == "disabled by ARMLOAD_NO_NATIVE"
    else:
        assert compiled is not None, why
        assert why == "C extension armload.loader._kernsort"
        assert compiled.SOURCE_SHA256 != "unknown"


def _native_or_fail():
    if os.environ.get("ARMLOAD_NO_NATIVE"):
        pytest.skip("ARMLOAD_NO_NATIVE set: the compiled sort is opted out")
    compiled, why = P.native_sort()
    if compiled is None:
        pytest.fail(f"armload.loader._kernsort is not in use ({why}); make venv builds it")
    return compiled


def test_stale_disabled_or_missing_native_sort_is_not_used(monkeypatch):
    """Each reason the compiled sort is not used is told as such (armload bench prints it)."""
    native = _native_or_fail()
    assert P._native_sort() == (native, "C extension armload.loader._kernsort")
    monkeypatch.setattr(native, "SOURCE_SHA256", "0" * 64)
    assert P._native_sort() == (None, "armload.loader._kernsort is stale (built from another _kernsort.c; re-run make venv)")
    monkeypatch.undo()
    monkeypatch.delattr(sys.modules["armload.loader"], "_kernsort")       # as if never imported ...
    monkeypatch.setitem(sys.modules, "armload.loader._kernsort", None)     # ... and not importable
    mod, why = P._native_sort()
    assert mod is None and why.startswith("armload.loader._kernsort not built (") and why.endswith(")")
    monkeypatch.undo()
    monkeypatch.setenv("ARMLOAD_NO_NATIVE", "1")
    assert P._native_sort() == (None, "disabled by ARMLOAD_NO_NATIVE")


def test_default_backend_choice(monkeypatch):
    """native=None: the compiled sort for u32 keys (0 and 0xFFFFFFFF included), Python otherwise."""
    _native_or_fail()
    keys = np.array([0xFFFFFFFF, 0, 7, 0, 0xFFFFFFFF], dtype=np.uint32)
    want = heapsort_order(keys, "v6", native=False).tolist()
    def no_python(*a):
        raise AssertionError("the Python fallback ran")
    monkeypatch.setattr(P, "heapsort_order_python", no_python)
    assert heapsort_order(keys, "v6").tolist() == want
    assert heapsort_order(keys, "v6", native=True).tolist() == want
    assert heapsort_order(np.zeros(0, np.uint32), "v6").dtype == np.int64
    monkeypatch.undo()
    for bad in ([2**32, 1, 2**32], [-1, 3, -1]):        # just outside u32 on each side: Python
        assert heapsort_order(bad, "v6").tolist() == heapsort_order_python(bad, "v6")
@pytest.mark.parametrize("variant", ["v6", "sorted"])
def test_sort_replay_equals_literal_port(variant):
    """C, Python fallback and the literal port of lib/sort.c give the same permutation, ties included."""
    rng = random.Random(13 if variant == "v6" else 16)
    sizes = list(range(0, 40)) + [rng.randrange(40, 700) for _ in range(60)] + [4096, 4097]
    for n in sizes:
        r_info = random_r_info(rng, n)
        want = literal_order(r_info, variant)
        keys = P.sort_keys(r_info)
        py = heapsort_order(keys, variant, native=False).tolist()
        assert py == want, (variant, n)
        if P.native_sort()[0] is not None:
            assert heapsort_order(keys, variant, native=True).tolist() == want, (variant, n)
        assert kernel_order(r_info, np.zeros(n, np.uint32), variant, exact=True).tolist() == want


@pytest.mark.parametrize("variant", ["v6", "sorted"])
def test_heapsort_sorts_and_is_unstable(variant):
    rng = random.Random(1)
    for n in range(60):
        keys = [rng.randint(0, 4) for _ in range(n)]
        order = heapsort_order(keys, variant).tolist()
        assert sorted(order) == list(range(n))
        assert [keys[i] for i in order] == sorted(keys)
    keys = [1, 1, 1, 0]
    stable = [3, 0, 1, 2]
    assert heapsort_order(keys, variant).tolist() == literal_order([(k << 8) | 28 for k in keys], variant) != stable


def test_sort_variants_agree_on_ties():
    """The two kernels' heapsorts pick the same child on ties (left unless right is greater) and stop
    at the same node (the element stays above equal keys), so the literal ports of both give one
    permutation; each replay is checked against its own port above, not against this fact."""
    rng = random.Random(2016)
    for _ in range(300):
        r_info = random_r_info(rng, rng.randrange(2, 200))
        assert literal_order(r_info, "v6") == literal_order(r_info, "sorted")


def test_heapsort_rejects_bad_input(monkeypatch):
    with pytest.raises(ValueError, match=r"^unknown heapsort variant 'v5'$"):
        heapsort_order([1, 2], "v5")
    # keys beyond 32 bits cannot go to the compiled sort; the fallback still sorts them exactly
    big = [2**40, 1, 2**40 + 1, 1]
    assert heapsort_order(big, "v6").tolist() == heapsort_order(big, "v6", native=False).tolist() == [1, 3, 0, 2]
    _native_or_fail()
    for bad in ([2**32], [-1], big):
        with pytest.raises(ValueError, match=r"^native heapsort keys must be unsigned 32-bit$"):
            heapsort_order(bad, "v6", native=True)
    empty = heapsort_order([], "sorted", native=False)
    assert empty.dtype == np.int64 and empty.size == 0
    monkeypatch.setattr(P, "native_sort", lambda: (None, "disabled by ARMLOAD_NO_NATIVE"))
    with pytest.raises(RuntimeError, match=r"^native heapsort unavailable: disabled by ARMLOAD_NO_NATIVE$"):
        heapsort_order([1], "v6", native=True)
    assert heapsort_order([3, 1, 2], "v6").tolist() == [1, 2, 0]     # native=None without it: Python


def test_sample_hand_counts():
    """hello: init calls __gnu_mcount_nc and _printk, exit tail-calls _printk (all SHN_UNDEF).
    v4.0 counts .rel.init.text for .init.plt (2) and .rel.exit.text for core (1)."""
    obj = read_object(sample("hello-arm.ko"))
    plan = plan_plts(obj, KernelConfig())
    assert (plan.counts["legacy"].core, plan.counts["legacy"].init) == (1, 2)
    assert (plan.counts["sorted"].core, plan.counts["sorted"].init) == (3, 0)
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
def test_legacy_counts_at_least_sorted_when_addends_are_zero(path):
    """With zero addends the 2016 rules count one entry per (type, UND symbol) per exec table; v4.0
    counts one per r_info per table with no symbol or target filter: never fewer. (The exact v4.0
    numbers: tests/loader/test_plt_legacy.py, against the literal port.)"""
    from armload.loader.plt import legacy_rel_tables
    obj = read_object(path)
    cfg = KernelConfig(thumb2="thumb2" in path)
    plan = plan_plts(obj, cfg)
    assert plan.counts["legacy"].total >= plan.counts["sorted"].total
    for t in legacy_rel_tables(obj):
        assert count_legacy(t) == count_legacy_quadratic(t)


def test_synthetic_zero_addends_legacy_equals_the_v40_port(tmp_path):
    from oracles.module_plts import kernel_plt_counts_v40
    data = make_module(20_000, n_externals=300)
    (tmp_path / "synth.ko").write_bytes(data)
    plan = plan_plts(read_object("synth.ko", data), KernelConfig())
    assert (plan.counts["legacy"].core, plan.counts["legacy"].init) == kernel_plt_counts_v40(str(tmp_path / "synth.ko"))
    assert plan.counts["legacy"].total >= plan.counts["sorted"].total > 0


def _table(words, syms, rtype=CALL):
    from armload.loader.plt import RelTable
    n = len(words)
    r_info = np.array([(s << 8) | rtype for s in syms], dtype=np.uint32)
    return RelTable(1, 2, ".text", r_info, np.array(words, dtype=np.uint32))


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
    for variant in ("v6", "sorted"):
        assert kernel_order(r_info, words, variant).tolist() == literal_order(r_info, variant)
    # uniform ties: any order gives the same result, the fast stable order is used
    same = kernel_order(r_info, np.full(len(words), ZERO, np.uint32), "v6")
    assert same.tolist() == list(range(len(words)))
    # the same ties on a non-branch type: addends do not matter, no replay
    data = np.array([(1 << 8) | int(R.R_ARM_ABS32)] * len(words), dtype=np.uint32)
    assert kernel_order(data, words, "v6").tolist() == list(range(len(words)))


@pytest.fixture(scope="module")
def mixed_ko(tmp_path_factory):
    """20,000 relocations, ~10% of calls to externals with a non-zero addend: ties that matter."""
    p = tmp_path_factory.mktemp("mixed") / "mixed.ko"
    p.write_bytes(make_module(20_000, n_externals=200, mixed_addends=True))
    return str(p)


def test_mixed_addend_counts_equal_literal_ports(mixed_ko, monkeypatch):
    """v6 and 2016 counts with the replayed sort equal the literal ports; the Python fallback agrees;
    a stable sort would not (so the tie order really is under test)."""
    obj = read_object(mixed_ko)
    cfg = KernelConfig()
    want_v6, want_sorted = kernel_plt_counts(mixed_ko), kernel_plt_counts(mixed_ko, "sorted")
    plan = plan_plts(obj, cfg)
    assert (plan.counts["v6"].core, plan.counts["v6"].init) == want_v6
    assert plan.counts["sorted"].core == want_sorted and plan.counts["sorted"].init == 0
    monkeypatch.setattr(P, "native_sort", lambda: (None, "disabled by ARMLOAD_NO_NATIVE"))
    slow = plan_plts(obj, cfg)
    assert slow.counts == plan.counts
    assert all(np.array_equal(slow.orders[k], plan.orders[k]) for k in plan.orders)
    monkeypatch.setattr(P, "heapsort_order", lambda keys, variant, **kw: np.argsort(keys, kind="stable"))
    stable = plan_plts(obj, cfg)
    assert stable.counts["v6"] != plan.counts["v6"] and stable.counts["sorted"] != plan.counts["sorted"]


def test_emission_never_exceeds_count_with_mixed_addends():
    data = make_module(30_000, n_externals=200, mixed_addends=True)
    for alg in ("sorted", "v6", "legacy"):
        cfg = KernelConfig(plt_algorithm=alg)
        mod = Session(Kernel.builtin(cfg, simulate_all=True), cfg, "vmalloc").load("synth.ko", data=data)
        counts = mod.plt_counts[alg]
        used = {"core": 0, "init": 0}
        for e in mod.plt_entries:
            used[e.plt] += 1
        assert used["core"] <= counts.core and used["init"] <= counts.init
        if alg == "sorted":
            assert counts.init == used["init"] == 0            # the 2016 series: one .plt
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
    with pytest.raises(RelocationError, match=r"^initcore: section \d+ reloc 0 \(row \d+ of \.rel\.init\.text as readelf "
                                              r"shows it; the kernel sorted the table\) sym 'core_mix': relocation 28 "
                                              r"out of range \(0xf00000[0-9a-f]{2} -> 0xbf[0-9a-f]{6}\)"):
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
    legacy (v4.0): every branch, duplicates (same r_info and word) once per table; .rel.init.text
    for .init.plt: core = .rel.text 1 + .rel.exit.text 2 = 3; init = 4.
    sorted: UND only, duplicates once per section -> 1 + 2 + 1 = 4 (one .plt).
    v6: core = .text 1 + .exit.text 2 (+2 fixed) = 5; init = 4 (+2 fixed) = 6."""
    plan = plan_plts(read_object(sample("initcore-arm.ko")), KernelConfig())
    assert (plan.counts["legacy"].core, plan.counts["legacy"].init) == (3, 4)
    assert plan.counts["sorted"].total == 4
    assert (plan.counts["v6"].core, plan.counts["v6"].init) == (5, 6)


def test_native_reference_counts_agree(tmp_path):
    """The benchmark's C reference (benchmarks/plt_count_ref.c, qsort) counts what armload counts
    wherever tie order cannot matter, so `armload bench` compares the same work."""
    import subprocess
    from armload.bench.loader import native_reference
    exe, why = native_reference()
    assert exe, why
    synth = tmp_path / "synth.ko"
    synth.write_bytes(make_module(20_000, n_externals=300))
    for path in all_kos() + [str(synth)]:
        cfg = KernelConfig(thumb2="thumb2" in path)
        out = subprocess.run([exe, path, "1", str(cfg.n_fixed_plts)],
                             capture_output=True, text=True, check=True).stdout.split("\n")
        c = {line.split()[0]: tuple(map(int, line.split()[1:3])) for line in out if line}
        plan = plan_plts(read_object(path), cfg)
        assert c == {k: (v.core, v.init) for k, v in plan.counts.items()}, path
