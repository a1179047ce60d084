"""The fork server's own rules (armload/emu/booted/forkserver.py) on a stand-in run, without a
kernel: what prepare loads and where, what a fork inherits and gives back, every way a child or
a server fails and the message each gives, the framing of results larger than a pipe's buffer,
and the per-process cache of restores. (tests/emu/test_forkserver.py holds the same rules on
the booted kernel itself.)"""
import functools
import os
import pickle
import types

import pytest

from armload.emu.booted import forkserver as fs

BIG = 1 << 20          # far over a pipe's 64 KiB buffer: the framing must loop on short writes and reads


class FakeRun:
    """What prepare and fork_run use of a BootedRun: load(path) and some mutable state."""

    def __init__(self):
        self.loaded = []

    def load(self, path):
        self.loaded.append(path)
        return types.SimpleNamespace(status="returned", ret=len(self.loaded))


def _loaded(run):
    return list(run.loaded)


def _load_more(run):
    run.load("extra.ko")
    return list(run.loaded)


def _big(run):
    return b"x" * BIG


def _echo(data, run):
    return len(data), data[:4]


def _raise(run):
    raise KeyError("no such symbol")


def _exit3(run):
    os._exit(3)


def _kill(run):
    os.kill(os.getpid(), 9)


def _unpicklable(run):
    return lambda: 0


@pytest.fixture
def forks(monkeypatch):
    """The pids of the children forked during the test."""
    pids, fork = [], os.fork

    def recorded():
        pid = fork()
        if pid:
            pids.append(pid)
        return pid
    monkeypatch.setattr(os, "fork", recorded)
    return pids


def assert_reaped(pids):
    for pid in pids:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


@pytest.fixture
def local(monkeypatch):
    run = FakeRun()
    monkeypatch.setattr(fs, "base_run", lambda *a, **k: run)
    return fs.prepare([])


def test_a_local_prepare_loads_the_closure_into_this_process_in_order(monkeypatch):
    run = FakeRun()
    calls = []
    monkeypatch.setattr(fs, "base_run", lambda *a: calls.append(a) or run)
    h = fs.prepare(["/t/a.ko", "/t/b.ko"], vmlinuz="V", kernel="K", config="C", tree="T")
    assert calls == [("V", "K", "C", "T")]
    assert h.local and h.run is run and h.pid is None and h.closure == ("/t/a.ko", "/t/b.ko")
    assert h.info == [("a.ko", "returned", 1), ("b.ko", "returned", 2)]        # _default_load's summary
    assert run.loaded == ["/t/a.ko", "/t/b.ko"]
    assert fs.prepare([]).info is None and run.loaded == ["/t/a.ko", "/t/b.ko"]     # no closure: no load
    got = []
    h = fs.prepare(("c.ko",), load=lambda r, c: got.append((r, c)) or "mine")
    assert got == [(run, ["c.ko"])] and h.info == "mine"                          # a list, as documented


def test_a_fork_inherits_the_parent_and_leaves_it_unchanged(local):
    local.run.load("first.ko")
    assert fs.fork_run(local, _load_more) == ["first.ko", "extra.ko"]
    assert local.run.loaded == ["first.ko"]
    assert fs.fork_run(local, lambda r: r is local.run) is True         # a local fn need not pickle


def test_a_local_childs_failures_are_reported_and_reaped(local, forks):
    with pytest.raises(fs.ForkError, match=r"(?s)Traceback.*KeyError: 'no such symbol'"):
        fs.fork_run(local, _raise)
    with pytest.raises(fs.ForkError) as e:
        fs.fork_run(local, _exit3)
    assert str(e.value) == "the forked child died (exit status 3) before returning"
    with pytest.raises(fs.ForkError) as e:
        fs.fork_run(local, _kill)
    assert str(e.value) == "the forked child died (signal 9) before returning"
    assert len(forks) == 3
    assert_reaped(forks)                                               # no child is left behind
    assert fs.fork_run(local, _loaded) == []                           # and the next fork works


def test_results_and_functions_larger_than_a_pipe_cross_whole(local):
    assert fs.fork_run(local, _big) == b"x" * BIG
    h = fs.prepare(["a.ko"], base=local)
    try:
        assert fs.fork_run(h, _big) == b"x" * BIG
        assert fs.fork_run(h, functools.partial(_echo, b"abcd" * (BIG // 4))) == (BIG, b"abcd")
    finally:
        fs.close(h)


def test_a_server_loads_its_closure_once_and_serves_each_fork_from_it(local):
    local.run.load("base.ko")
    h = fs.prepare(["/t/a.ko"], base=local)
    try:
        assert not h.local and h.pid > 0 and h.run is None and h.closure == ("/t/a.ko",)
        assert h.info == [("a.ko", "returned", 2)]
        assert fs.fork_run(h, _load_more) == ["base.ko", "/t/a.ko", "extra.ko"]
        assert fs.fork_run(h, _loaded) == ["base.ko", "/t/a.ko"]        # each fork starts from the server
    finally:
        fs.close(h)
    assert local.run.loaded == ["base.ko"]                              # the base never loaded the closure


def test_a_servers_children_fail_with_their_own_message_and_the_server_goes_on(local):
    h = fs.prepare(["a.ko"], base=local)
    try:
        with pytest.raises(fs.ForkError, match=r"(?s)Traceback.*KeyError: 'no such symbol'"):
            fs.fork_run(h, _raise)
        with pytest.raises(fs.ForkError) as e:
            fs.fork_run(h, _kill)
        assert str(e.value) == "the forked child died (signal 9) before returning"    # not a traceback
        with pytest.raises(fs.ForkError, match="(?s)Traceback.*(Pickling|pickle)"):
            fs.fork_run(h, _unpicklable)                     # fn pickles; its result does not
        assert fs.fork_run(h, _loaded) == ["a.ko"]
    finally:
        fs.close(h)


def test_a_closure_that_fails_to_load_is_reported_and_its_server_reaped(local, forks):
    with pytest.raises(fs.ForkError) as e:
        fs.prepare(["a.ko"], base=local, load=lambda run, c: 1 // 0)
    assert str(e.value).startswith("loading the closure failed in the server: Traceback")
    assert "ZeroDivisionError" in str(e.value)
    assert len(forks) == 1
    assert_reaped(forks)


def test_a_childs_result_that_does_not_pickle_is_its_error(local):
    with pytest.raises(fs.ForkError, match="(?s)Traceback.*(Pickling|pickle)"):
        fs.fork_run(local, _unpicklable)


def test_a_server_that_dies_is_named(local):
    with pytest.raises(fs.ForkError) as e:
        fs.prepare(["a.ko"], base=local, load=lambda run, c: os._exit(0))
    assert str(e.value) == "loading the closure failed in the server: the server (pid %d) died" % _last_pid(e)
    h = fs.prepare(["a.ko"], base=local)
    os.kill(h.pid, 9)
    os.waitpid(h.pid, 0)
    with pytest.raises(fs.ForkError) as e:
        fs.fork_run(h, _loaded)
    assert str(e.value) == f"the server (pid {h.pid}) died"


def _last_pid(excinfo):
    return int(str(excinfo.value).rsplit("(pid ", 1)[1].split(")")[0])


def test_a_server_is_extended_only_from_a_local_handle(local):
    h = fs.prepare(["a.ko"], base=local)
    try:
        with pytest.raises(ValueError, match=r"^a server's closure is extended from a local handle \(its base\)$"):
            fs.prepare(["b.ko"], base=h)
    finally:
        fs.close(h)


def test_close_reaps_a_server_once_and_leaves_local_handles_alone(local, forks):
    h = fs.prepare(["a.ko"], base=local)
    assert forks == [h.pid]
    fs.close(h)
    assert h.cmd is None and h.res is None
    assert_reaped(forks)
    fs.close(h)                                                        # a second close does nothing
    fs.close(local)
    assert fs.fork_run(local, _loaded) == []


def test_framing_round_trips_and_eof_is_none():
    r, w = os.pipe()
    try:
        fs._send(w, {"a": 1})
        fs._send_raw(w, b"")
        assert pickle.loads(fs._recv(r)) == {"a": 1}
        assert fs._recv(r) == b""                                       # an empty frame is not EOF
        os.write(w, b"\x05\0\0")                                        # a header cut short
        os.close(w)
        w = None
        assert fs._recv(r) is None
    finally:
        os.close(r)
        if w is not None:
            os.close(w)
    r, w = os.pipe()
    os.write(w, (10).to_bytes(8, "little") + b"abc")                   # a body cut short
    os.close(w)
    assert fs._recv(r) is None
    os.close(r)
    assert fs._unpack(None, 7) == ("error", "the server (pid 7) died")
    assert fs._unpack(pickle.dumps(("ok", 3)), 7) == ("ok", 3)


def test_frames_back_to_back_are_read_exactly_across_short_reads(monkeypatch):
    r, w = os.pipe()
    first = os.urandom(3000)
    fs._send_raw(w, first)
    fs._send_raw(w, b"next")                          # both frames wait in the pipe
    os.close(w)
    read, short = os.read, [True]

    def short_once(fd, n):                            # the first large read comes back short, as a pipe's may
        if fd == r and n > 2000 and short[0]:
            short[0] = False
            return read(fd, 1000)
        return read(fd, n)
    monkeypatch.setattr(os, "read", short_once)
    try:
        assert fs._recv(r) == first and not short[0]
        assert fs._recv(r) == b"next"                 # nothing of the second frame was read with the first
        assert fs._recv(r) is None
    finally:
        os.close(r)


def test_a_restore_is_made_once_per_image_and_tree_and_warmed(monkeypatch, tmp_path):
    from armload.emu.booted import modrun, modmem
    made, sites, indexed = [], [], []

    class Run:
        def __init__(self, vmlinuz, kernel, config, tree=None):
            made.append((vmlinuz, kernel, config, tree))
            self.tree = tree
            self.bk = types.SimpleNamespace(image=types.SimpleNamespace(
                symbols={"module_alloc": 0xc0300000, "__alloc_reserved_percpu": 0xc0400000, "other": 1}))

        @property
        def aliases(self):                  # the tree's modules.alias: read in the parent, once
            indexed.append(self.tree)

    monkeypatch.setattr(modrun, "BootedRun", Run)
    monkeypatch.setattr(modmem, "bl_sites", lambda img, addr: sites.append((img, addr)))
    monkeypatch.setattr(fs, "_BASES", {})
    kernel = object()
    v = str(tmp_path / "vmlinuz")
    a = fs.base_run(v, kernel, "C")
    img = a.bk.image
    assert made == [(v, kernel, "C", None)] and sites == [(img, 0xc0300000), (img, 0xc0400000)]   # warmed
    monkeypatch.chdir(tmp_path)
    assert fs.base_run("vmlinuz", kernel, "C") is a and len(made) == 1   # the same file, relative
    assert indexed == []                                                 # no tree: nothing to read
    assert fs.base_run(v, kernel, "C", tree="T") is not a and made[1] == (v, kernel, "C", "T")
    assert indexed == ["T"]
    assert fs.base_run(v, object(), "C") is not a and len(made) == 3    # another kernel object
