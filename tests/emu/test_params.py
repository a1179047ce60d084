"""Module parameters (insmod semantics) and call sequences on the command line, inside the booted
kernel (its own parse_args and param_set_*)."""
import json
import os
import subprocess
import sys

from testinputs import ROOT, sample
from armload.kernel import debian

CACHE = os.path.join(ROOT, ".cache")
VMLINUZ = debian.VMLINUZ


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


def test_cli_call_arguments_follow_the_name():
    p = _cli(sample("devkit-arm.ko"), "--call", "devkit_sum", "3")
    assert p.returncode == 0 and "devkit_sum(3) returned 9 (0x9)" in p.stdout
    p = _cli(sample("devkit-arm.ko"), "--call", "devkit_sum", "--arg", "3")     # the old form is gone
    assert p.returncode != 0 and "unrecognized arguments: --arg 3" in p.stderr and "Traceback" not in p.stderr
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
