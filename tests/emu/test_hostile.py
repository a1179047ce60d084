"""Hostile modules at run time (issue 33), in the booted Debian kernel: each sample of
sample_modules/hostile/ attacks the kernel one way, and `run`, `check` and the library report what
the real kernel shows, its own detectors given the simulated time to fire (emu/booted/hostile.py).

The oracle for each outcome is the kernel's own console (its panic, oops, soft-lockup and hung-task
reports, reboot's lines); where the kernel is silent (a spin with interrupts off: no hard-lockup
detector in Debian's armmp config), armload's own stop, named as such."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from hostile_samples import CORPUS
from testinputs import BOOT_VMLINUZ, ROOT, SAMPLES, require_input

from armload.cli import main

HOSTILE = os.path.join(SAMPLES, "hostile")
SYMVERS_H = os.path.join(HOSTILE, "Module.symvers")
SYMVERS = os.path.join(SAMPLES, "Module.symvers")
CONFIG = os.path.join(os.path.dirname(BOOT_VMLINUZ), "config-6.1.0-50-armmp")

DEPS = {"wmod": ["exporter-arm.ko"]}
# instructions each may take (the runs' own, boot excluded): bounded whatever the module does
MAX_INSNS = {"spin_irqon": 100_000_000, "wait": 60_000_000, "spin_irqoff": 60_000_000, "oom": 100_000_000}
RUN_ARGS = {"requeue": ["--settle-ms", "20"]}     # its deferred work keeps the CPU busy: 1 G instructions a second


def ko(name: str) -> str:
    return os.path.join(HOSTILE, f"hostile_{name}-arm.ko")


def test_every_sample_is_in_the_corpus():
    built = sorted(f[len("hostile_"):-len("-arm.ko")] for f in os.listdir(HOSTILE) if f.endswith(".ko"))
    src = sorted(d[len("hostile_"):] for d in os.listdir(os.path.join(SAMPLES, "src")) if d.startswith("hostile_"))
    assert built == src == sorted(CORPUS)


def test_debian_has_no_hard_lockup_detector():
    """What the `hang` outcome's text claims, read from Debian's config next to the image."""
    require_input(CONFIG, "make test-inputs")
    cfg = open(CONFIG).read()
    assert "CONFIG_SOFTLOCKUP_DETECTOR=y" in cfg and "CONFIG_DETECT_HUNG_TASK=y" in cfg
    assert "CONFIG_DEFAULT_HUNG_TASK_TIMEOUT=120" in cfg and "CONFIG_PANIC_TIMEOUT=0" in cfg
    assert "CONFIG_HARDLOCKUP_DETECTOR=y" not in cfg and "CONFIG_HARDLOCKUP_DETECTOR_PERF=y" not in cfg
    assert "# CONFIG_PREEMPT is not set" in cfg          # a spin in init is not preempted: soft lockup


def _run(name, capsys, *extra):
    require_input(BOOT_VMLINUZ, "make test-inputs")
    mods = [os.path.join(SAMPLES, d) for d in DEPS.get(name, [])] + [ko(name)]
    # The hostile ends are the kernel's, not the sanitizers' (tests/emu/test_sanitize.py owns those, and
    # test_the_sanitizers_do_not_change_a_hostile_end below runs one end with them on): off here,
    # every module instruction would be hooked for the whole 22 simulated seconds of a spin.
    sanitize = [] if "--sanitize" in extra else ["--sanitize", "none"]
    rc = main(["run", *mods, "--kernel", BOOT_VMLINUZ, "--kernel", SYMVERS_H, "--json", *sanitize, *extra])
    out, err = capsys.readouterr()
    assert "internal error" not in err and "Traceback" not in err, err
    return rc, json.loads(out)


@pytest.mark.parametrize("name", list(CORPUS))
def test_run(name, capsys, booted_dir):
    status, line, _ = CORPUS[name]
    rc, doc = _run(name, capsys, *RUN_ARGS.get(name, []))
    r = doc["modules"][-1]
    assert r["status"] == status, (r["status"], r["stopped"], r["console"][-5:])
    assert rc == (0 if status == "returned" else 1)
    if line:
        assert any(line in ln for ln in r["console"]), r["console"][-20:]
    assert r["instructions"] < MAX_INSNS.get(name, 20_000_000), r["instructions"]
    assert r["loader_vs_kernel"]["identical"]          # armload's loader agrees, whatever init does
    if status not in ("returned", "oops", "panic"):
        assert r["stopped"].startswith(f"{status}: ") or status == "hung-task"


def test_spin_with_interrupts_off_is_armloads_stop_named(capsys, booted_dir):
    rc, doc = _run("spin_irqoff", capsys)
    r = doc["modules"][0]
    assert "hostile_init+0x30/0x6c [hostile_spin_irqoff]" in r["stopped"]
    assert "CONFIG_HARDLOCKUP_DETECTOR is not set" in r["stopped"] and "armload's own stop" in r["stopped"]
    assert r["console"][-1].endswith("hostile_spin_irqoff: spinning with interrupts off")   # the kernel: silent


def test_soft_lockup_is_the_kernels_report(capsys, booted_dir):
    """Time advanced over the proven spin: the kernel's watchdog hrtimer (every 4 s) found its
    stopper thread starved for 22 s and printed its report, with the spinning PC."""
    rc, doc = _run("spin_irqon", capsys)
    c = doc["modules"][0]["console"]
    i = next(i for i, ln in enumerate(c) if "BUG: soft lockup" in ln)
    stamp = float(c[i].split("]")[0].strip("[ "))
    assert 22.0 <= stamp < 30.0
    assert any("PC is at hostile_init+0x2c/0x1000 [hostile_spin_irqon]" in ln for ln in c[i:])
    assert any("IRQs on" in ln for ln in c[i:])


def test_a_spin_that_changes_memory_it_reads_is_not_proven(capsys, booted_dir):
    """The other side of the proof: spin-arm.ko's loop increments a counter it reads, so no two
    passes read the same values; it runs to the instruction budget, no time is skipped and no
    soft lockup is invented."""
    require_input(BOOT_VMLINUZ, "make test-inputs")
    rc = main(["run", os.path.join(SAMPLES, "spin-arm.ko"), "--kernel", BOOT_VMLINUZ, "--kernel", SYMVERS,
               "--budget", "45000000", "--json", "--sanitize", "none"])
    r = json.loads(capsys.readouterr().out)["modules"][0]
    assert rc == 1 and r["status"] == "budget", r["status"]
    assert not any("soft lockup" in ln for ln in r["console"])


@pytest.mark.parametrize("name", ["bug"])
def test_the_sanitizers_do_not_change_a_hostile_end(name, capsys, booted_dir):
    """run's default (the sanitizers on) ends a hostile module as the kernel does, as without them."""
    _, on = _run(name, capsys, "--sanitize", "heap,leak,locks,stack")
    _, off = _run(name, capsys)
    assert on["modules"][-1]["status"] == off["modules"][-1]["status"] == CORPUS[name][0]


def test_simulated_time_budget_both_sides(booted_dir, monkeypatch):
    """Under 120 s the hung-task detector cannot have fired: the time budget ends the run, named;
    at 300 s (the default) the kernel's report is there."""
    from armload.emu.booted import hostile
    from armload.emu.booted.modrun import BootedRun
    from armload.kernel.config import KernelConfig
    from armload.kernel.provider import Kernel
    k = Kernel.from_files([SYMVERS_H, BOOT_VMLINUZ], KernelConfig())
    monkeypatch.setattr(hostile, "TIME_BUDGET_NS", 100_000_000_000)
    r = BootedRun(BOOT_VMLINUZ, k, k.config).load(ko("wait"))
    assert r.status == "time-budget" and "no return within 100 s of simulated time" in r.stopped
    assert not any("blocked for more than" in ln for ln in r.console)
    monkeypatch.setattr(hostile, "TIME_BUDGET_NS", 300_000_000_000)
    r = BootedRun(BOOT_VMLINUZ, k, k.config).load(ko("wait"))
    assert r.status == "hung-task" and r.stopped.startswith("time-budget: ")


def test_deferred_work_and_exit(capsys, booted_dir):
    """A work item requeueing itself keeps the system busy, said so; exit cancels it. A timer
    every jiffy leaves it idle. An exit that never returns ends at the time budget, named."""
    rc, doc = _run("requeue", capsys, "--settle-ms", "20", "--exit")
    assert rc == 0 and doc["settled"]["idle"] is False
    assert doc["unloaded"][0]["ret"] == 0 and any("hostile_requeue: ran" in ln for ln in doc["unloaded"][0]["console"])
    rc, doc = _run("timer", capsys, "--settle-ms", "400", "--exit")
    assert rc == 0 and doc["settled"]["idle"] is True and doc["unloaded"][0]["ret"] == 0
    assert any("hostile_timer: fired" in ln for ln in doc["unloaded"][0]["console"])
    rc, doc = _run("exit_hang", capsys, "--exit")
    u = doc["unloaded"][0]
    assert rc == 1 and u["ret"] is None and u["stopped"].startswith("time-budget: no return within 300 s")
    assert any("hostile_exit_hang: exit never returns" in ln for ln in u["console"])


def test_run_text_names_the_end(capsys, booted_dir):
    require_input(BOOT_VMLINUZ, "make test-inputs")
    rc = main(["run", ko("restart"), "--kernel", BOOT_VMLINUZ, "--kernel", SYMVERS_H])
    out = capsys.readouterr().out
    assert rc == 1 and "reboot: Restarting system" in out
    assert "hostile_restart: init restarted the machine: restart: the machine restarts (machine_restart)" in out


def test_check_gives_each_outcome_its_class(tmp_path, booted_dir):
    """One check over the whole corpus with ordinary modules after it, one worker (each module
    restores its own copy of the kernel: the next one is unaffected); the class in the JSON and
    the JUnit; the run itself bounded."""
    require_input(BOOT_VMLINUZ, "make test-inputs")
    tree = tmp_path / "tree"
    tree.mkdir()
    for n in CORPUS:
        shutil.copy(ko(n), tree)
    for n in ("exporter", "kalloc", "tailcall"):
        shutil.copy(os.path.join(SAMPLES, f"{n}-arm.ko"), tree)
    rc = main(["check", str(tree), "--kernel", SYMVERS, "--kernel", SYMVERS_H, "--kernel", BOOT_VMLINUZ,
               "-q", "--jobs", "1", "--json", str(tmp_path / "c.json"),
               "--junit", str(tmp_path / "c.xml")])
    recs = {r["module"]: r for r in json.load(open(tmp_path / "c.json"))["modules"]}
    assert rc == 1
    for n, (_, line, cls) in CORPUS.items():
        rec = recs[f"hostile_{n}-arm.ko"]
        assert rec["outcome"] == cls, (n, rec["outcome"], rec["reason"])
        if line and cls != "fault":
            assert line.split(" [")[0].split("at virtual")[0] in rec["reason"], (n, rec["reason"])
    for n in ("exporter", "kalloc", "tailcall"):
        assert recs[f"{n}-arm.ko"]["outcome"] == "ok"
    xml = (tmp_path / "c.xml").read_text()
    for cls in {"panic", "soft-lockup", "hung-task", "reboot", "hang", "fault"}:
        assert f'type="{cls}"' in xml, cls
    assert "internal" not in {r["outcome"] for r in recs.values()}


def test_the_classes_are_documented():
    from armload.ci.outcomes import DEFAULT_FAIL_ON, OUTCOMES
    readme = open(os.path.join(ROOT, "README.md")).read()
    for cls in ("panic", "soft-lockup", "hung-task", "reboot", "hang"):
        assert cls in OUTCOMES and cls in DEFAULT_FAIL_ON and f"`{cls}`" in readme


# the library behind the pytest plugin (its `load_module` fixture is a ModuleHandle per test)
PLUGIN = {"panic": "ModuleOops", "bug": "ModuleOops", "spin_irqoff": "ModuleStopped", "restart": "ModuleStopped",
          "halt": "ModuleStopped", "wait": "ModuleStopped", "spin_irqon": "ModuleStopped", "oom": "ModuleOops",
          "recurse": "ModuleOops", "wtext": "ModuleOops"}


@pytest.mark.parametrize("name", list(PLUGIN))
def test_pytest_plugin_raises_with_the_kernels_report(name, booted_dir):
    from armload.devkit import testing
    status, line, _ = CORPUS[name]
    m = testing.ModuleHandle(ko(name), kernel=BOOT_VMLINUZ)
    with pytest.raises(getattr(testing, PLUGIN[name])) as e:
        m.init()
    assert e.value.result.status == status
    if line and status != "hung-task":
        assert line.split(" [")[0] in str(e.value) or any(line in ln for ln in e.value.result.console)


def test_pytest_plugin_exit_that_never_returns(booted_dir):
    from armload.devkit import testing
    m = testing.ModuleHandle(ko("exit_hang"), kernel=BOOT_VMLINUZ)
    assert m.init() == 0
    with pytest.raises(testing.ModuleStopped, match=r"time-budget: no return within 300 s of simulated time") as e:
        m.exit()
    assert e.value.result.function == "exit" and e.value.result.status == "time-budget"


def test_pytest_plugin_requeue_and_timer_are_fine(booted_dir):
    from armload.devkit import testing
    for n in ("requeue", "timer"):
        m = testing.ModuleHandle(ko(n), kernel=BOOT_VMLINUZ)
        assert m.init() == 0 and m.exit() == 0
