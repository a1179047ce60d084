"""Seed 004's kprobe table model (probes/table.py) against the booted Debian kernel's own
kprobe_table and get_kprobe (bench/probes.py)."""
import os

import pytest

from testinputs import BOOT_VMLINUZ, require_input, sample

from armload.bench import probes as pb
from armload.probes import table

N_PROBES = 400


@pytest.fixture(scope="module")
def vmlinuz():
    return require_input(BOOT_VMLINUZ, "make test-inputs")


@pytest.fixture(scope="module")
def registered(vmlinuz):
    """A restored booted kernel with N_PROBES disabled kprobes on the Image's text."""
    from armload.emu.booted.kernel import BootedKernel
    k = BootedKernel.get(vmlinuz)
    probes, refused, costs = pb.register(k, pb.candidates(k.image), N_PROBES)
    return k, probes, refused, costs


def test_table_layout_is_mainline(registered):
    k, *_ = registered
    tab, bits = pb.table_layout(k)
    assert bits == table.KPROBE_HASH_BITS == 6
    assert k.image.stext < tab and not tab & 3


def test_kernel_hlists_are_the_models(registered):
    """The kernel's kprobe_table is the oracle for table.hash_ptr and KprobeTable.add's order."""
    k, probes, refused, costs = registered
    tab, bits = pb.table_layout(k)
    kern = pb.kernel_lists(k, tab, bits)
    assert sum(map(len, kern)) == len(probes) == N_PROBES
    for h, lst in enumerate(kern):
        assert all(table.hash_ptr(a, bits) == h for a in lst), h
    assert kern == pb.model_lists([p.addr for p in probes], bits)
    assert set(refused) <= {-22} and all(c > 10_000 for c in costs)


def test_get_kprobe_cost_follows_the_models_nodes(registered):
    k, probes, *_ = registered
    addrs = [p.addr for p in probes]
    model = pb.model_table(addrs, 6)
    by_nodes = sorted(addrs, key=lambda a: model.walk(a)[1])
    shallow, deep = by_nodes[0], by_nodes[-1]                # the model says which is dearer
    n_shallow, n_deep = model.walk(shallow)[1], model.walk(deep)[1]
    assert n_shallow == 1 and n_deep > 5
    c_shallow, r = pb.lookup_insns(k, shallow)
    assert r and k.u32(r + pb.KP_ADDR) == shallow
    c_deep, _ = pb.lookup_insns(k, deep)
    assert c_deep > c_shallow
    sample = addrs[::7]
    f = pb.fit([model.walk(a)[1] for a in sample], [pb.lookup_insns(k, a)[0] for a in sample])
    assert f["b"] == pytest.approx(6.0) and f["max_abs_residual"] < 1e-6  # ldr, cmp, bxeq, ldr, cmp, bne per node
    assert c_deep - c_shallow == 6 * (n_deep - n_shallow)
    miss = addrs[0] + 2                                      # never a probe: no ARM instruction there
    c_miss, r = pb.lookup_insns(k, miss)
    assert r == 0 and c_miss == round(f["a"] + 4 + 6 * model.walk(miss)[1])


def test_enabling_patches_and_counts(registered):
    k, probes, *_ = registered
    some = probes[:20]
    costs = []
    for p in some:
        assert p.state() == "disarmed"
        i0 = k.insns
        assert p.enable() == 0
        costs.append(k.insns - i0)
        assert p.state() == "breakpoint" and "disabled" not in p.flags()
    assert all(c > 1000 for c in costs)                     # arm_kprobe -> patch_text -> stop_machine
    assert some[0].disable() == 0 and some[0].state() == "disarmed"


def test_run_booted_is_deterministic(vmlinuz):
    a = pb.run(n_register=300, n_enable=60, step=30, n_hits=300, vmlinuz=vmlinuz, modules=())
    b = pb.run(n_register=300, n_enable=60, step=30, n_hits=300, vmlinuz=vmlinuz, modules=())
    for r in (a, b):
        r.pop("host_s")
        for s in r["enable"]["steps"]:
            s.pop("host_s")
    assert a == b
    assert a["lists_equal_model"] and a["lookup"]["hit"]["fit"]["r2"] == 1.0
    assert a["zipf"]["insns_mean"] == pytest.approx(a["zipf"]["predicted_insns_mean"])
    assert [s["enabled"] for s in a["enable"]["steps"]] == [30, 60]


def test_probes_on_a_loaded_modules_functions(vmlinuz):
    """A module loaded by the kernel's load_module: its functions' entries from the kernel's
    kallsyms, hashed into the same 64 lists as the model says."""
    ko = sample("exporter-arm.ko")
    res = pb.run(n_register=200, n_enable=20, step=20, n_hits=50, vmlinuz=vmlinuz, modules=(ko,),
                        tree=os.path.dirname(ko))
    assert [(m["module"], m["status"], m["ret"]) for m in res["modules"]] == [("exporter-arm.ko", "returned", 0)]
    assert res["module_entries"] == res["module_probes"] == 1        # armload_sample_add: its one .text function
    assert res["lists_equal_model"] and res["lookup"]["hit"]["fit"]["max_abs_residual"] < 1e-6
    assert res["register_insns_module"] > 0
