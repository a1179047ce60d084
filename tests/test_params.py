"""Module parameters (insmod semantics) and call sequences.

The oracle for armload's Python param_set_* (used without a kernel image) is the Debian kernel's
own code: the same words are set once through the image's param_set_* and once in Python, and
the result (errno and the stored value) must agree on both sides of every bound.
"""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, sample

CACHE = os.path.join(ROOT, ".cache")
VMLINUZ = os.path.join(CACHE, "linux-image-6.1.0-50-armmp", "boot", "vmlinuz-6.1.0-50-armmp")


@pytest.fixture(scope="module")
def kernels():
    from armload.kernel.config import DEBIAN_ARMMP
    from armload.kernel.provider import Kernel
    assert os.path.exists(VMLINUZ), f"missing the Debian kernel image {VMLINUZ} (make test-inputs)"
    return (Kernel.from_files([VMLINUZ], DEBIAN_ARMMP),
            Kernel.from_files([], DEBIAN_ARMMP, simulate_all=True))


def _machine(kernel):
    from armload.kernel.config import DEBIAN_ARMMP
    from armload.emu import Machine
    from armload.loader.session import Session
    m = Session(kernel, DEBIAN_ARMMP).load(sample("devkit-arm.ko"))
    mach = Machine([m], kernel, console=None)
    mach.map_module(m)
    return mach, m


def test_kernel_param_set_before_init(kernels):
    from armload.emu.params import apply_params, read_param
    mach, m = _machine(kernels[0])
    o = apply_params(mach, m, ["count=5", "weights=1,2,3", "label=hello world", "verbose", "tag=abc"])
    assert o.ok and o.error == 0 and not o.notes
    assert [a["how"] for a in o.applied] == ["kernel"] * 5
    assert read_param(mach, m, "count") == 5
    assert read_param(mach, m, "weights") == [1, 2, 3]
    assert read_param(mach, m, "label") == "hello world"
    assert read_param(mach, m, "verbose") is True and read_param(mach, m, "tag") == "abc"
    r = mach.run_init(m)
    assert r.ok and r.log == ["devkit: hello world/abc: 5 items, 3 weights", "devkit: loaded (sum 19)"]


def test_unknown_parameter_is_warned_and_ignored(kernels):
    # 6.1 unknown_module_param_cb: pr_warn("%s: unknown parameter '%s' ignored") and return 0
    from armload.emu.params import apply_params
    for k in kernels:
        mach, m = _machine(k)
        o = apply_params(mach, m, "bogus=1 dyndbg=+p count=1")
        assert o.ok and o.log == ["devkit: unknown parameter 'bogus' ignored"]
        assert any("dyndbg" in n for n in o.notes)


CASES = {
    "count": ["0", "4294967295", "4294967296", "-1", "0x10", "0X1f", "010", "08", "+7", "7\n", "", "0x", " 1"],
    "crash": ["-2147483648", "2147483647", "2147483648", "-2147483649", "x", "-0", "--1"],
    "verbose": ["y", "N", "on", "oN", "of", "off", "o", "maybe", "", "1", "0", None],
    "tag": ["1234567", "12345678", ""],
    "weights": ["1,2,3,4", "1,2,3,4,5", "1,,2", "7", "1,x"],
    "label": ["x" * 1024, "x" * 1025, ""],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_python_param_ops_match_the_kernel(kernels, name):
    from armload.emu.params import apply_params, read_param
    machines = [_machine(k) for k in kernels]
    fresh = [[(r.base, mach.read(r.base, r.size)) for r in m.regions if r.size] for mach, m in machines]
    for val in CASES[name]:
        got = []
        for (mach, m), snap in zip(machines, fresh):
            for base, data in snap:           # the module's memory as loaded: every case starts fresh
                mach.uc.mem_write(base, data)
            word = name if val is None else f'{name}="{val}"' if " " in val or not val else f"{name}={val}"
            o = apply_params(mach, m, word)
            got.append((o.error, read_param(mach, m, name), [a["how"] for a in o.applied]))
        (e_k, v_k, how_k), (e_p, v_p, how_p) = got
        assert (e_k, v_k) == (e_p, v_p), f"{name}={val!r}: kernel {got[0]} python {got[1]}"
        assert how_k in ([], ["kernel"]) and how_p in ([], ["python"])


def test_refused_value_messages_and_errno(kernels):
    from armload.emu.params import apply_params
    mach, m = _machine(kernels[0])
    o = apply_params(mach, m, ["count=x", "tag=abcdefghij"])
    # parse_args goes on after an error and fails the load with the last one
    assert not o.ok and o.error == -28
    assert o.log == ["devkit: `x' invalid for parameter `count'", "tag: string doesn't fit in 7 chars.",
                     "devkit: `abcdefghij' too large for parameter `tag'"]
    o = apply_params(mach, m, ["count"])       # a uint needs a value (no KERNEL_PARAM_OPS_FL_NOARG)
    assert o.error == -22 and o.log == ["devkit: `' invalid for parameter `count'"]


def test_next_arg_quoting():
    from armload.emu.params import join_args, next_args
    assert next_args('a=1 b="x y" "c=z w" d') == [("a", "1"), ("b", "x y"), ("c", "z w"), ("d", None)]
    assert next_args(join_args(["label=two words", "v"])) == [("label", "two words"), ("v", None)]


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "armload", "run", "--kernel", VMLINUZ, *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_cli_params_calls_and_buffers():
    p = _cli(sample("devkit-arm.ko"), "count=2", "label=dev", "--param", "weights=5,7",
             "--call", "devkit_add", "10", "--call", "devkit_sum", "2",
             "--call", "devkit_describe", "buf:16", "16", "--call", "devkit_count_char", "s:banana", "0x61",
             "--exit")
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    assert "devkit: loaded (sum 7)" in out                           # the kernel's parse_args set them
    assert "devkit_sum(2) returned 34 (0x22)" in out               # (0*5 + 1*7 + 10) * 2, same state
    assert "'dev/t0:3........'" in out and "returned 8 (0x8)" in out
    assert "devkit_count_char(s:banana, 0x61) returned 3 (0x3)" in out
    assert out.index("devkit_count_char") < out.index("devkit: unloaded") < out.index("delete_module returned 0")
    p = _cli(sample("devkit-arm.ko"), "--call", "devkit_describe", "buf:16", "16", "--json")
    d = json.loads(p.stdout)
    calls = d["calls"]
    assert calls[0]["ret"] == 11 and bytes.fromhex(calls[0]["args"][0]["hex"])[:12] == b"devkit/t0:3\0"


def test_cli_refused_parameter_inside_the_booted_kernel():
    """The kernel's own parse_args refuses it: the same message, -EINVAL, init never runs."""
    p = _cli(sample("devkit-arm.ko"), "count=x")
    assert p.returncode == 1
    assert "devkit: `x' invalid for parameter `count'" in p.stdout
    assert "devkit: load_module refused it: -22" in p.stdout and "devkit: loaded" not in p.stdout
    assert "refused after loading (parameters, sysfs or a notifier); armload's image up to there is identical" \
        in p.stdout


def test_cli_old_arg_form_still_works_and_arg_alone_is_refused():
    p = _cli(sample("devkit-arm.ko"), "--call", "devkit_sum", "--arg", "3")
    assert p.returncode == 0 and "devkit_sum(3) returned 9 (0x9)" in p.stdout
    assert "deprecated" in p.stderr
    p = _cli(sample("devkit-arm.ko"), "--arg", "3")
    assert p.returncode == 1 and "--arg needs --call" in p.stderr + p.stdout
    p = _cli(sample("devkit-arm.ko"), "--call", "devkit_sum", "s:")
    assert p.returncode == 0
    p = _cli(sample("devkit-arm.ko"), "--call", "devkit_sum", "zz")
    assert p.returncode == 1 and "bad argument 'zz'" in p.stderr + p.stdout


def test_check_takes_parameters_from_a_file(tmp_path):
    import shutil
    tree = tmp_path / "tree"
    tree.mkdir()
    shutil.copy(sample("devkit-arm.ko"), tree)
    symvers = os.path.join(CACHE, "linux-headers-6.1.0-50-armmp", "usr", "src", "linux-headers-6.1.0-50-armmp",
                           "Module.symvers")
    assert os.path.exists(symvers), f"missing {symvers} (make test-inputs)"
    results = {}
    for text in ("# devkit's parameters\ndevkit count=2 'label=a b' verbose\n", "devkit count=x\n"):
        pf = tmp_path / "params.txt"
        pf.write_text(text)
        out = tmp_path / "c.json"
        p = subprocess.run([sys.executable, "-m", "armload", "check", str(tree), "--kernel", symvers, "--kernel",
                            VMLINUZ, "--params", str(pf), "-q", "-j1", "--json", str(out)], cwd=ROOT,
                           capture_output=True, text=True, timeout=300)
        results[text] = json.loads(out.read_text())["modules"][0]["init"]
    ok, bad = results.values()          # inside the booted kernel: its own parse_args
    assert ok["status"] == "returned" and ok["retval"] == 0
    assert any(line.endswith("devkit: a b/t0: 2 items, 4 weights") for line in ok["console"])
    assert (bad["status"], bad["retval"]) == ("refused", -22)
    assert any(line.endswith("devkit: `x' invalid for parameter `count'") for line in bad["console"])
