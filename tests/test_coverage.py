"""--coverage: the block-hook coverage against a per-instruction Unicorn code hook (the oracle),
the lcov tracefile's line/function records, genhtml accepting it, and the CLI summary."""
import os
import shutil
import subprocess
import sys

import pytest
from unicorn import UC_HOOK_CODE

from conftest import ROOT, devkit_line, sample
from armload.emu.coverage import insn_counts

VMLINUZ = os.path.join(ROOT, ".cache", "linux-image-6.1.0-50-armmp", "boot", "vmlinuz-6.1.0-50-armmp")


@pytest.fixture(scope="module")
def kernel():
    from armload.devkit.testing import make_kernel
    assert os.path.exists(VMLINUZ), f"missing {VMLINUZ} (make test-inputs)"
    return make_kernel(VMLINUZ)


def _run(kernel, native, path="devkit-arm-debug.ko", thumb=False, calls=(("devkit_sum", 2),)):
    from armload.emu.coverage import Coverage
    from armload.devkit.testing import ModuleHandle, make_kernel
    k = kernel if not thumb else make_kernel(None, thumb2=True)
    h = ModuleHandle(sample(path), kernel=k)
    m = h.module
    cov = Coverage(h.machine, [m], native=native)
    executed = set()
    for s in m.sections:
        if s.flags & 4 and s.size and m.region_of(s.addr):
            h.machine.uc.hook_add(UC_HOOK_CODE, lambda uc, a, sz, _: executed.add(a), begin=s.addr,
                                  end=s.addr + s.size - 1)
    assert h.init() == 0
    for name, *args in calls:
        h.call(name, *args)
    return h, cov, executed


@pytest.mark.parametrize("native", [True, False])
def test_block_coverage_equals_per_instruction_trace(kernel, native):
    h, cov, executed = _run(kernel, native)
    assert cov.native is native
    ran, insns = insn_counts(h.module, cov.counts, cov.sizes)
    assert set(ran) == executed and executed
    assert set(insns) >= executed
    (rep,) = cov.report()
    assert rep.ran == len(executed) and rep.instructions == len(insns)


def test_thumb2_coverage_equals_trace():
    h, cov, executed = _run(None, True, "devkit-thumb2.ko", thumb=True,
                            calls=(("devkit_count_char", "banana", 0x61),))
    ran, _ = insn_counts(h.module, cov.counts, cov.sizes)
    assert set(ran) == executed and executed


def test_lcov_records(kernel, tmp_path):
    from armload.emu.coverage import write_lcov
    h, cov, _ = _run(kernel, True, calls=(("devkit_sum", 2), ("devkit_sum", 3)))
    (rep,) = cov.report()
    assert rep.has_dwarf and rep.functions_found == 11
    text = "\n".join(rep.records)
    fnda = dict(l[5:].split(",")[::-1] for l in rep.records if l.startswith("FNDA:"))
    assert fnda["devkit_init"] == "1" and fnda["devkit_sum"] == "3"       # once from init, twice called
    assert fnda["devkit_add"] == "3" and fnda["devkit_crash"] == "0" and fnda["devkit_count_char"] == "0"
    assert rep.functions_hit == sum(1 for v in fnda.values() if v != "0") == 3
    src = [l for l in rep.records if l.startswith("SF:") and l.endswith("devkit.c")]
    assert len(src) == 1
    da = {}
    cur = None
    for l in rep.records:
        if l.startswith("SF:"):
            cur = l
        elif l.startswith("DA:") and cur == src[0]:
            line, n = map(int, l[3:].split(","))
            da[line] = n
    assert da[devkit_line("v = devkit_peek(devkit_null);")] == 0 and da[devkit_line("for (; *s; s++)")] == 0                # devkit_crash's peek, count_char's loop: not run
    assert da[devkit_line("loaded (sum %d)")] == 1 and da[devkit_line("sum += it->value")] == 3 * 3            # init's pr_info; sum's loop body: 3 items x 3 calls
    out = tmp_path / "cov.info"
    write_lcov([rep], str(out))
    assert out.read_text().count("end_of_record") == text.count("end_of_record")
    genhtml = shutil.which("genhtml")
    assert genhtml, "genhtml not installed: run `make devtools` (Debian package lcov)"
    g = subprocess.run([genhtml, str(out), "-o", str(tmp_path / "html"), "--ignore-errors", "source"],
                       capture_output=True, text=True)
    assert g.returncode == 0, g.stderr
    assert (tmp_path / "html" / "index.html").exists()
    assert f"functions..: {100 * 3 / 11:.1f}% (3 of 11 functions)" in g.stdout


def test_cli_summary_and_stripped_module(tmp_path):
    out = tmp_path / "c.info"
    p = subprocess.run([sys.executable, "-m", "armload", "run", "--kernel", VMLINUZ, sample("devkit-arm-debug.ko"),
                        sample("nullderef-arm.ko"), "--coverage", str(out)], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 1, p.stdout + p.stderr                      # nullderef oopses
    assert "coverage: devkit: " in p.stdout and "3/11 functions" in p.stdout
    assert "coverage: nullderef: " in p.stdout and "no DWARF" in p.stdout
    assert out.read_text().startswith("TN:")
