"""The committed result of `make boot-selftests`: the kernel's own self-test modules, loaded by
its own load_module in the booted kernel. Regenerate with `make boot-selftests` (a few minutes)."""
import json
import os

from testinputs import ROOT

RESULTS = os.path.join(ROOT, "tests", "boot_selftests.json")


def _results():
    with open(RESULTS) as f:
        return json.load(f)


def _last(rel):
    return _results()["modules"][rel][-1]


def test_results_are_for_this_kernel_with_the_full_self_tests():
    r = _results()
    assert r["kernel"] == "vmlinuz-6.1.0-50-armmp" and "cryptomgr.notests" not in r["cmdline"]
    assert r["boot_instructions"] > 1_000_000_000                 # the crypto self-tests ran at boot


def test_bpf_suite_passes_as_on_the_real_kernel():
    m = _last("lib/test_bpf.ko")
    assert m["ret"] == 0 and not m["oops"]
    assert "test_bpf: Summary: 1026 PASSED, 0 FAILED, [0/1014 JIT'ed]" in m["lines"]
    assert "test_bpf: test_tail_calls: Summary: 10 PASSED, 0 FAILED, [0/10 JIT'ed]" in m["lines"]
    assert "test_bpf: test_skb_segment: Summary: 2 PASSED, 0 FAILED" in m["lines"]


def test_user_copy_and_static_keys_pass():
    assert _last("lib/test_user_copy.ko")["ret"] == 0
    assert "test_user_copy: tests passed." in _last("lib/test_user_copy.ko")["lines"]
    keys = _results()["modules"]["lib/test_static_keys.ko"]
    assert [m["name"] for m in keys] == ["test_static_key_base.ko", "test_static_keys.ko"]
    assert [m["ret"] for m in keys] == [0, 0]


def test_dependencies_and_module_memory():
    xor = _results()["modules"]["crypto/xor.ko"]
    assert [(m["name"], m["ret"]) for m in xor] == [("xor-neon.ko", 0), ("xor.ko", 0)]
    assert xor[0]["core"][0] == 0xBF000000 and xor[1]["core"][0] > xor[0]["core"][0]
    assert any(ln.startswith("xor: using function:") for ln in xor[1]["lines"])
