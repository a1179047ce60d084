"""The kallsyms strategies as ARM code in the booted Debian kernel agree with the Python reference
and with the kernel's own kallsyms_lookup_name (a), and their instruction counts are deterministic."""
import os

from armload.bench.kallsyms_arm import run_benchmark
from armload.kernel import debian

VMLINUZ = debian.VMLINUZ


def test_arm_strategies_agree_and_are_deterministic():
    assert os.path.exists(VMLINUZ), "the Debian kernel image is an oracle input: make test-inputs"
    a = run_benchmark(VMLINUZ, hits=("vsnprintf", "_stext"), misses=("no_such_symbol",))
    b = run_benchmark(VMLINUZ, hits=("vsnprintf", "_stext"), misses=("no_such_symbol",))
    # run_benchmark raises unless every strategy's result equals the Python reference
    assert [r["address"] for r in a["rows"]][2] == 0 and all(r["address"] for r in a["rows"][:2])
    assert all(r[f"{s}_address"] == r["address"] for r in a["rows"] for s in "abcde")
    keys = [k for k in a["rows"][0] if k.endswith("_insns")]
    assert [[r[k] for k in keys] for r in a["rows"]] == [[r[k] for k in keys] for r in b["rows"]]
    # binary searches (a: the kernel's own, c, d) cost a few ten thousand instructions, the
    # linear compressed scan (b) a miss walks every symbol
    miss = a["rows"][2]
    assert miss["b_insns"] > 10 * max(miss["a_insns"], miss["c_insns"], miss["d_insns"])
    assert miss["d_insns"] < miss["c_insns"]


def test_batch_index_strategy_is_seed_000_complete():
    """(e): the per-batch u32 index (kallsyms_lookup_batch_start) plus the token compare; every
    result equals the kernel's own kallsyms_lookup_name (run_benchmark raises otherwise), at least
    10x fewer instructions per hit and miss than that kernel lookup, and the index costs one pass."""
    r = run_benchmark(VMLINUZ, hits=("vsnprintf", "tcp_sendmsg", "_stext"), misses=("no_such_symbol", "zzzz_last"))
    for row in r["rows"]:
        assert row["e_insns"] * 10 <= row["a_insns"], row
        assert row["e_insns"] < row["d_insns"]
    assert r["hit_gain_e_vs_a"] >= 10 and r["miss_gain_e_vs_a"] >= 10
    # building the index walks every record once: more than num_syms, less than 30 per symbol
    assert r["num_syms"] < r["batch_start_insns"] < 30 * r["num_syms"]
    assert 1 < r["break_even_vs_a"] < 1000
