"""The fork server (armload/emu/booted/forkserver.py): a child starts from exactly the parent's
state and leaves it unchanged, a closure server's children equal a fresh restore plus the
closure's loads, failures are reported, and `check --runtime booted` gives byte-identical JSON
for --jobs 1, --jobs 2 and another order."""
import json
import os
import shutil

import pytest

from testinputs import BOOT_VMLINUZ, SYMVERS, sample
from armload.emu.booted import forkserver as fs
from armload.kernel.config import DEBIAN_ARMMP
from armload.kernel.provider import Kernel


@pytest.fixture(scope="module")
def symbols():
    """The loader's Kernel (the samples' Module.symvers and the image); the devkit plugin's `kernel` is a path."""
    return Kernel.from_files([SYMVERS, BOOT_VMLINUZ], DEBIAN_ARMMP)


@pytest.fixture
def base(booted_dir, symbols):
    return fs.prepare([], vmlinuz=BOOT_VMLINUZ, kernel=symbols, config=DEBIAN_ARMMP)


def _summary(r):
    return (r.name, r.status, r.ret, r.instructions, r.core_base, r.console, r.loader.to_dict())


def test_a_fork_starts_from_the_parent_and_leaves_it_unchanged(base):
    run = base.run
    i0, c0, n0 = run.bk.insns, len(run.bk.console), len(run.results)
    first = fs.fork_run(base, lambda r: (_summary(r.load(sample("hello-arm.ko"))), r.bk.insns))
    assert first[0][1:3] == ("returned", 0) and first[1] > i0
    assert (run.bk.insns, len(run.bk.console), len(run.results)) == (i0, c0, n0)
    assert fs.fork_run(base, lambda r: (_summary(r.load(sample("hello-arm.ko"))), r.bk.insns)) == first
    assert fs.prepare([], vmlinuz=BOOT_VMLINUZ, kernel=run.session.kernel, config=DEBIAN_ARMMP) .run is run


def test_a_closure_servers_children_equal_a_fresh_restore(base, symbols):
    from armload.emu.booted.modrun import BootedRun
    h = fs.prepare([sample("exporter-arm.ko")], base=base)
    try:
        assert not h.local and h.info == [("exporter-arm.ko", "returned", 0)]
        one = fs.fork_run(h, _load_importer)
        assert one == fs.fork_run(h, _load_importer)
    finally:
        fs.close(h)
    fresh = BootedRun(BOOT_VMLINUZ, symbols, DEBIAN_ARMMP)
    fresh.load(sample("exporter-arm.ko"))
    assert one == _load_importer(fresh) and one[1:3] == ("returned", 0)
    assert base.run.results == []                        # the base never loaded the closure


def _load_importer(run):
    return _summary(run.load(sample("importer-arm.ko")))


def _raise(run):
    return 1 // 0


def _die(run):
    os.kill(os.getpid(), 9)


def test_a_child_that_raises_or_dies_is_reported(base):
    with pytest.raises(fs.ForkError, match="ZeroDivisionError"):
        fs.fork_run(base, _raise)
    with pytest.raises(fs.ForkError, match="signal 9"):
        fs.fork_run(base, _die)
    h = fs.prepare([sample("exporter-arm.ko")], base=base)
    try:
        with pytest.raises(fs.ForkError, match="signal 9"):
            fs.fork_run(h, _die)
        assert fs.fork_run(h, _load_importer)[1:3] == ("returned", 0)     # the server goes on
    finally:
        fs.close(h)
    with pytest.raises(fs.ForkError, match="ZeroDivisionError"):
        fs.prepare(["x"], base=base, load=lambda run, c: 1 // 0)


def test_check_json_is_identical_for_any_jobs_and_order(booted_dir, tmp_path, symbols):
    from armload.ci.corpus import run_checks
    from armload.ci.selection import scan_with_deps
    from armload.ci.worker import BOOTED_BUDGET, CheckOptions
    from armload.kernel.modtree import plan_order
    from armload.cli import main
    tree = tmp_path / "tree"
    tree.mkdir()
    for n in ("hello", "nullderef", "enodev", "exporter", "importer"):
        shutil.copy(sample(f"{n}-arm.ko"), tree)
    docs = []
    for jobs in ("1", "2"):
        out = tmp_path / f"c{jobs}.json"
        assert main(["check", str(tree), "--kernel", SYMVERS, "--kernel", BOOT_VMLINUZ, "-q",
                     "--jobs", jobs, "--json", str(out), "--fail-on", "none", "--no-timing"]) == 0
        docs.append(out.read_bytes())
    assert docs[0] == docs[1]
    mods, _ = scan_with_deps(str(tree), str(tree))
    plan = plan_order(mods)
    opts = CheckOptions(image=BOOT_VMLINUZ, tree=str(tree), budget=BOOTED_BUDGET)
    stats = run_checks(plan, symbols, DEBIAN_ARMMP, opts, jobs=2, names=list(reversed(plan.order)))
    theirs = {r["module"]: r for r in json.loads(docs[0])["modules"]}
    ours = {r["module"]: r for r in stats.records}
    assert len(ours) == 5 and all(ours[m] == theirs[m] for m in theirs)
