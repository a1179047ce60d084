"""The sanitizers in the devkit (the pytest plugin's ModuleHandle): on by default, a report fails
the test at the call that made it (SanitizerReport: the kernel's format, frames at file:line), an
opt-out per handle and per run (--armload-sanitize none), kmemleak's scan on demand
(scan_leaks), and the clean side of each: no report, no failure."""
import os
import subprocess
import sys

import pytest

from testinputs import BOOT_VMLINUZ, ROOT, SAMPLES

from armload.devkit import testing
from armload.devkit.testing import ModuleHandle, SanitizerReport

SANBUGS = os.path.join(SAMPLES, "sanitize", "sanbugs-arm-debug.ko")
SANERR = os.path.join(SAMPLES, "sanitize", "sanerr-arm-debug.ko")


def line(name: str, marker: str) -> str:
    src = f"sample_modules/src/{name}/{name}.c"
    with open(os.path.join(ROOT, src)) as f:
        return f"{src}:{next(i for i, ln in enumerate(f, 1) if marker in ln)}"


def test_a_report_fails_init_with_the_kasan_text(booted_dir):
    m = ModuleHandle(SANBUGS, kernel=BOOT_VMLINUZ, params={"bug": 1})
    with pytest.raises(SanitizerReport) as e:
        m.init()
    text = str(e.value)
    assert "BUG: KASAN: slab-out-of-bounds in fill+0x" in text and "Write of size 1 at addr" in text
    assert f"({line('sanbugs', 'p[i] = ')})" in text and "Allocated by task 1:" in text
    assert [(r.cls, r.kind) for r in e.value.reports] == [("heap", "slab-out-of-bounds")]
    assert m.result.status == "returned" and m.result.ret == 0      # what the kernel alone says


@pytest.mark.parametrize("bug,kind,first", [(3, "leak", "unreferenced object 0x"),
                                            (6, "lock-held-on-return",
                                             "WARNING: lock held when returning to user space!")])
def test_kmemleak_and_lockdep_reports_fail_too(booted_dir, bug, kind, first):
    m = ModuleHandle(SANBUGS, kernel=BOOT_VMLINUZ, params={"bug": bug})
    with pytest.raises(SanitizerReport) as e:
        m.init()
    assert [r.kind for r in e.value.reports] == [kind] and first in str(e.value)


def test_the_opt_out_and_the_clean_path(booted_dir):
    assert ModuleHandle(SANBUGS, kernel=BOOT_VMLINUZ, params={"bug": 1}, sanitize=None).init() == 0
    assert ModuleHandle(SANBUGS, kernel=BOOT_VMLINUZ, params={"bug": 1}, sanitize="locks").init() == 0
    m = ModuleHandle(SANBUGS, kernel=BOOT_VMLINUZ, params={"bug": 0})
    assert m.init() == 0 and m.exit() == 0 and m.reports == []          # kept is freed in exit: no leak
    with pytest.raises(Exception, match="unknown class"):
        ModuleHandle(SANBUGS, kernel=BOOT_VMLINUZ, sanitize="kasan")


def test_scan_leaks_on_demand(booted_dir):
    m = ModuleHandle(SANERR, kernel=BOOT_VMLINUZ)
    assert m.init() == 0
    assert m.call("sanerr_keep", 24) == 0
    m.scan_leaks()                                      # kept in module data: referenced
    assert m.call("sanerr_lose", 24) == 0               # a leak is found by a scan, not by the call
    with pytest.raises(SanitizerReport) as e:
        m.scan_leaks()
    (rep,) = e.value.reports
    assert rep.title.startswith("unreferenced object 0x") and rep.title.endswith("(size 24):")
    assert rep.where == line("sanerr", "char *p = kmalloc(n, GFP_KERNEL);")
    m.scan_leaks()                                      # reported once
    with pytest.raises(testing.ArmloadError, match="leak sanitizer is off"):
        ModuleHandle(SANERR, kernel=BOOT_VMLINUZ, sanitize="heap").scan_leaks()


def test_fail_kmalloc_and_the_sanitizers_together(booted_dir):
    """The devkit's fail_kmalloc is the sweep's failslab: sanerr's 3rd allocation failing leaks the
    first two (its error path returns without freeing them)."""
    m = ModuleHandle(SANERR, kernel=BOOT_VMLINUZ)
    m.fail_kmalloc(nth=3)
    with pytest.raises(SanitizerReport) as e:
        m.init()
    assert m.result.ret == -12 and [r.where for r in e.value.reports] == [
        line("sanerr", "st.a = kmalloc"), line("sanerr", "st.b = kmalloc")]


def test_the_plugin_fails_a_test_with_the_report_and_opts_out(booted_dir, tmp_path):
    t = tmp_path / "test_mine.py"
    t.write_text(f"""
def test_overrun(load_module):
    m = load_module({SANBUGS!r}, params={{"bug": 1}})
    assert m.init() == 0

def test_clean(load_module):
    m = load_module({SANBUGS!r}, params={{"bug": 0}})
    assert m.init() == 0 and m.exit() == 0
""")
    env = dict(os.environ, ARMLOAD_KERNEL=BOOT_VMLINUZ)

    def pytest_run(*extra):
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(t), *extra],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    r = pytest_run()
    assert "1 failed, 1 passed" in r.stdout, r.stdout + r.stderr
    assert "SanitizerReport" in r.stdout and "BUG: KASAN: slab-out-of-bounds in fill+0x" in r.stdout
    assert "sanbugs.c:" in r.stdout
    r = pytest_run("--armload-sanitize", "none")
    assert r.returncode == 0 and "2 passed" in r.stdout, r.stdout + r.stderr
