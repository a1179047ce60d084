"""--coverage and --trace inside the booted kernel (armload/emu/booted/observe.py,
armload/commands/observe_booted.py)."""
import json
import os
import shutil
import subprocess
import sys

import pytest
from unicorn import UC_HOOK_CODE

from testinputs import BOOT_VMLINUZ, ROOT, SYMVERS, devkit_line, sample


def observed(run, path, params="", native=None):
    """Coverage and trace of one load, and every module instruction executed (a per-instruction
    code hook on each module allocation: the oracle)."""
    from armload.emu.booted.observe import Observation
    obs = Observation(run, coverage=True, trace=True, native=native)
    executed = set()
    obs.allocs.on_alloc.append(lambda a: run.bk.m.uc.hook_add(
        UC_HOOK_CODE, lambda uc, addr, size, _: executed.add(addr), begin=a.base, end=a.base + a.size - 1))
    r = obs.load(path, params)
    mod = next(m for m in run.session.modules if m.name == r.name)
    return r, mod, obs.cov, obs.trace, executed


def da(rep, line: int, file: str = "devkit/devkit.c") -> int:
    """The DA count of a line of `file` in a ModuleCoverage's lcov records."""
    recs, cur = {}, None
    for r in rep.records:
        if r.startswith("SF:"):
            cur = r[3:]
        elif r.startswith("DA:") and cur.endswith(file):
            n, c = map(int, r[3:].split(","))
            recs[n] = c
    return recs[line]


def test_observation_api_for_the_pytest_handle(run):
    """What ModuleHandle(coverage=True).coverage()/.calls/.called() stand on: counts so far, the
    calls so far (init, then a call into the module, then exit)."""
    from armload.emu.booted.call import call
    from armload.emu.booted.observe import Observation
    obs = Observation(run, coverage=True, trace=True)
    assert obs.load(sample("devkit-arm-debug.ko"), "count=2").ok
    (name, first), = obs.coverage("devkit")
    assert name == "devkit" and first.lines_hit > 0
    n = len(obs.called("kmalloc_trace"))
    assert n == 2
    assert call(run, "devkit_add", 7).returned
    assert len(obs.called("kmalloc_trace")) == 3 and obs.called("kmalloc_trace")[-1].ret
    (_, later), = obs.coverage("devkit")
    line = devkit_line("it = kmalloc(")
    assert (da(first, line), da(later, line)) == (2, 3)     # devkit_add: twice in init, once called
    assert obs.coverage("nope") == []
    with pytest.raises(ValueError, match="coverage was not recorded"):
        Observation(run).coverage()


@pytest.mark.parametrize("native", [True, False])
def test_coverage_equals_every_instruction_that_ran_init_included(run, native):
    from armload.emu.coverage import insn_counts
    r, mod, cov, _, executed = observed(run, sample("devkit-arm-debug.ko"), "count=3", native)
    assert r.ok and cov.native is native
    counts, sizes = cov.counter.blocks()
    ran, insns = insn_counts(mod, counts, sizes)
    init = next(s for s in mod.sections if s.name == ".init.text")
    assert set(ran) == executed and any(init.addr <= a < init.addr + init.size for a in ran)
    rep = cov.report(mod, 1)
    assert rep.ran == len(executed) and rep.instructions == len(insns) > rep.ran


def test_lcov_lines_counts_and_lcov_reads_it(run, tmp_path):
    from armload.emu.coverage import write_lcov
    _, mod, cov, _, _ = observed(run, sample("devkit-arm-debug.ko"), "count=3")
    rep = cov.report(mod, 1)
    path = tmp_path / "cov.info"
    write_lcov([rep], str(path))
    text = path.read_text()
    src = next(rec for rec in text.split("end_of_record") if rec.strip().splitlines()[1].endswith("devkit/devkit.c"))
    da = dict(tuple(map(int, ln[3:].split(","))) for ln in src.split() if ln.startswith("DA:"))
    assert da[devkit_line("it = kmalloc(")] == 3                 # devkit_add, once per item
    assert da[devkit_line("return *p + 1;")] == 0                # devkit_peek: crash=0
    assert da[devkit_line("if (crash)")] == 1                    # init (freed after init)
    assert "FNDA:1,devkit_init" in src and "FNDA:0,devkit_crash" in src
    if shutil.which("lcov"):
        out = subprocess.run(["lcov", "--summary", str(path)], capture_output=True, text=True).stdout + \
            subprocess.run(["lcov", "--summary", str(path)], capture_output=True, text=True).stderr
        assert f"({rep.lines_hit} of {rep.lines_found} lines)" in out, out


def test_trace_records_the_modules_calls_with_arguments_and_returns(run):
    r, mod, _, tr, _ = observed(run, sample("devkit-arm-debug.ko"), "count=3")
    assert r.ok
    km = [c for c in tr.calls if c.name == "kmalloc_trace"]
    assert len(km) == 3                                          # the kernel's own kmalloc calls are not listed
    adds = [c for c in tr.calls if c.name == "__list_add_valid"]
    assert [c.args[0] for c in adds] == [c.ret for c in km]      # the returned pointers, as the module used them
    assert all(mod.region_of(c.caller) is not None and c.module == "devkit" for c in tr.calls)
    pk = next(c for c in tr.calls if c.name == "_printk")
    assert pk.text == "\x016devkit: loaded (sum %d)\n" and pk.args[1] == 0 + 1 + 2
    assert pk.ret == len("devkit: loaded (sum 3)")    # printk returns the text it stored, its newline dropped
    assert mod.symbolize(pk.caller).startswith("devkit_init+")


def test_run_trace_lines_among_the_console_and_json(booted_dir, tmp_path):
    args = [sys.executable, "-m", "armload", "run", sample("devkit-arm-debug.ko"), "count=2", "--kernel", SYMVERS,
            "--kernel", BOOT_VMLINUZ, "--trace", "--coverage", str(tmp_path / "c.info")]
    out = subprocess.run(args, capture_output=True, text=True, cwd=ROOT).stdout.splitlines()
    pk = next(i for i, ln in enumerate(out) if ln.startswith("armload: trace: _printk("))
    loaded = next(i for i, ln in enumerate(out) if ln.endswith("devkit: loaded (sum 1)"))
    taint = next(i for i, ln in enumerate(out) if "module verification failed" in ln)
    assert taint < pk < loaded
    assert "[from devkit_init+" in out[pk] and "-> r0=" in out[pk]
    assert any(ln.startswith("coverage: devkit: ") and "lines" in ln for ln in out)
    d = json.loads(subprocess.run(args + ["--json"], capture_output=True, text=True, cwd=ROOT).stdout)
    assert [c["function"] for c in d["trace"]].count("kmalloc_trace") == 2
    assert next(c for c in d["trace"] if c["function"] == "kmalloc_trace")["where"].startswith("devkit_add+0x")
    assert d["coverage"]["modules"][0]["lines_hit"] > 0 and os.path.exists(tmp_path / "c.info")
    assert "FNDA:0,devkit_exit" in (tmp_path / "c.info").read_text()
    out = subprocess.run(args + ["--exit"], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert "armload: trace: kfree(" in out and "[from devkit_free_all+0x" in out     # exit's calls
    text = (tmp_path / "c.info").read_text()                # exit (core text) counted after init's
    assert "FNDA:1,devkit_exit" in text and "FNDA:1,devkit_init" in text and "FNDA:1,devkit_free_all" in text


@pytest.mark.parametrize("opts, msg", [
    (["--coverage", "/nonexistent/c.info"], "--coverage: cannot write /nonexistent/c.info: /nonexistent is not"),
    (["--image", "/nonexistent/m.elf"], "--image: cannot write /nonexistent/m.elf"),
    (["--gdb", "0"], "--gdb: bad port 0"),
    (["--gdb", "65536"], "--gdb: bad port 65536"),
    (["--gdb", "1234", "--json"], "--gdb cannot be combined with --json")])
def test_bad_observer_options_are_one_error_before_the_run(booted_dir, opts, msg):
    p = subprocess.run([sys.executable, "-m", "armload", "run", sample("hello-arm.ko"), "--kernel", SYMVERS,
                        "--kernel", BOOT_VMLINUZ] + opts, capture_output=True, text=True, cwd=ROOT)
    out = p.stdout + p.stderr
    assert p.returncode != 0 and msg in out and "Traceback" not in out
    assert "hello: loaded" not in out                      # refused before any module ran


def test_module_handle_coverage_and_calls(booted_dir, tmp_path):
    from armload.devkit.testing import load_module
    from armload.errors import ArmloadError
    h = load_module(sample("devkit-arm-debug.ko"), kernel=BOOT_VMLINUZ, params={"count": 2}, coverage=True, trace=True)
    assert h.init() == 0
    assert len(h.called("kmalloc_trace")) == 2 and all(c.where.startswith("devkit_add+") for c in h.called("kmalloc_trace"))
    h.call("devkit_add", 5)
    assert len(h.called("kmalloc_trace")) == 3
    rep = h.coverage(str(tmp_path / "h.info"))
    assert da(rep, devkit_line("it = kmalloc(")) == 3 and (tmp_path / "h.info").read_text().startswith("TN:")
    plain = load_module(sample("devkit-arm-debug.ko"), kernel=BOOT_VMLINUZ)
    assert plain.init() == 0
    with pytest.raises(ArmloadError, match="coverage was not recorded"):
        plain.coverage()
    with pytest.raises(ArmloadError, match="calls were not traced"):
        plain.calls
