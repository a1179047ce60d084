"""check's isolated workers (issue 33, ci/workers.py): limits in each worker, a worker killed in
the middle of a run replaced, its module reported once as `internal` with the reason, every
other module's result kept."""
from __future__ import annotations

import json
import os
import resource
import signal

import pytest

from test_check import check, make_tree

from armload.ci import workers
from armload.ci.worker import Worker

MODS = ("hello", "kalloc", "tailcall", "initcore", "enodev", "regdev")


def _killing(victim, how=signal.SIGKILL):
    real = Worker.check_one

    def one(self, name):
        if self.plan.modules[name].rel == f"{victim}-arm.ko":
            os.kill(os.getpid(), how)
        return real(self, name)
    return one


@pytest.mark.parametrize("sig,word", [(signal.SIGKILL, "SIGKILL"), (signal.SIGSEGV, "SIGSEGV"),
                                      (signal.SIGXCPU, "SIGXCPU")])
def test_a_worker_killed_mid_run(tmp_path, monkeypatch, sig, word):
    tree = make_tree(tmp_path, *MODS)
    rc0, doc0, good = check(tree, "--jobs", "2", "--fail-on", "none", "--no-timing", name="good")
    monkeypatch.setattr(Worker, "check_one", _killing("tailcall", sig))
    rc, doc, recs = check(tree, "--jobs", "2", "--fail-on", "none", "--no-timing", name="killed")
    assert rc == 0 and sorted(recs) == sorted(good) == sorted(f"{m}-arm.ko" for m in MODS)
    lost = recs["tailcall-arm.ko"]
    assert lost["outcome"] == "internal" and lost["stage"] == "worker"
    assert lost["reason"].startswith(f"the check worker died (signal {int(sig)} ({word})")
    assert lost["reason"].endswith("while checking it; the other modules' results are kept")
    assert [r["module"] for r in doc["modules"]].count("tailcall-arm.ko") == 1
    for m, r in recs.items():                   # everything else as in the run without the kill
        if m != "tailcall-arm.ko":
            assert r["outcome"] == good[m]["outcome"] and r.get("image") == good[m].get("image"), m
    assert doc["summary"]["outcomes"]["internal"] == 1


def test_every_worker_killed_still_completes(tmp_path, monkeypatch):
    """Each of two workers dies on its first module: the replacements finish the run."""
    tree = make_tree(tmp_path, *MODS)
    real = Worker.check_one
    done = tmp_path / "died"
    done.mkdir()

    def one(self, name):
        mark = done / f"{os.getppid()}-{os.getpid()}"
        if len(os.listdir(done)) < 2 and not mark.exists():
            mark.write_text(name)
            os.kill(os.getpid(), signal.SIGKILL)
        return real(self, name)
    monkeypatch.setattr(Worker, "check_one", one)
    rc, doc, recs = check(tree, "--jobs", "2", "--fail-on", "none", "--no-timing")
    assert sorted(recs) == sorted(f"{m}-arm.ko" for m in MODS)
    assert sum(r["outcome"] == "internal" for r in recs.values()) == 2


def test_workers_run_with_limits(tmp_path, monkeypatch):
    """RLIMIT_AS and RLIMIT_CPU as set in the worker, both sides: the parent is not limited."""
    tree = make_tree(tmp_path, "hello", "kalloc")
    real = Worker.check_one

    def one(self, name):
        rec = real(self, name)
        rec["reason"] = json.dumps([resource.getrlimit(resource.RLIMIT_AS)[0], resource.getrlimit(resource.RLIMIT_CPU)[0]])
        return rec
    monkeypatch.setattr(Worker, "check_one", one)
    monkeypatch.setattr(workers, "AS_LIMIT", 5 << 30)
    monkeypatch.setattr(workers, "CPU_PER_MODULE", 123)
    rc, doc, recs = check(tree, "--jobs", "2", "--fail-on", "none", "--no-timing")
    for r in recs.values():
        as_, cpu = json.loads(r["reason"])
        # what the forked worker inherited (this test process's mappings) plus the 5 GiB it may grow by
        assert 5 << 30 < as_ <= (5 << 30) + workers.address_space() + (1 << 30) and 123 <= cpu < 123 + 60
    assert resource.getrlimit(resource.RLIMIT_AS)[0] == resource.RLIM_INFINITY


def test_a_worker_out_of_address_space(tmp_path, monkeypatch):
    """A worker that runs out of its address space: the allocation fails in that worker only."""
    tree = make_tree(tmp_path, *MODS)
    real = Worker.check_one

    def one(self, name):
        if self.plan.modules[name].rel == "kalloc-arm.ko":
            hog = bytearray(20 << 30)           # past the default limit (16 GiB)
            hog[0] = 1
        return real(self, name)
    monkeypatch.setattr(Worker, "check_one", one)
    rc, doc, recs = check(tree, "--jobs", "2", "--fail-on", "none", "--no-timing")
    lost = recs["kalloc-arm.ko"]
    assert lost["outcome"] == "internal" and lost["reason"].startswith("its check failed in the worker (MemoryError")
    assert all(r["outcome"] != "internal" for m, r in recs.items() if m != "kalloc-arm.ko")


def test_death_words():
    assert workers.death(-9).startswith("signal 9 (SIGKILL) (killed")
    assert workers.death(-24) == "signal 24 (SIGXCPU): its CPU-time limit (RLIMIT_CPU)"
    assert workers.death(3) == "exit status 3"


def test_a_worker_past_its_resident_limit_is_killed(tmp_path, monkeypatch):
    """Linux ignores RLIMIT_RSS: the parent's watch kills a worker whose tree's resident memory
    passes the limit; the module is `internal` with that reason, the rest unaffected."""
    tree = make_tree(tmp_path, *MODS)
    real = Worker.check_one

    def one(self, name):
        if self.plan.modules[name].rel == "regdev-arm.ko":
            hog = bytearray(600 << 20)          # touched: resident
            import time
            time.sleep(30)                       # the watch must come first
            return hog
        return real(self, name)
    monkeypatch.setattr(Worker, "check_one", one)
    monkeypatch.setattr(workers, "RSS_LIMIT", 500 << 20)
    monkeypatch.setattr(workers, "WATCH_S", 0.2)
    rc, doc, recs = check(tree, "--jobs", "2", "--fail-on", "none", "--no-timing")
    lost = recs["regdev-arm.ko"]
    assert lost["outcome"] == "internal"
    assert "killed by armload: its resident memory" in lost["reason"] and "the worker limit of 500 MiB" in lost["reason"]
    assert all(r["outcome"] != "internal" for m, r in recs.items() if m != "regdev-arm.ko")
