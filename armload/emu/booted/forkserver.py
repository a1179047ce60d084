"""Fork server: restore the booted kernel once, load a dependency closure once, and run each
module (or test) in an os.fork() child of the process that holds it.

The child inherits everything copy-on-write: guest RAM (the snapshot's MAP_PRIVATE map, plus
the pages the closure's loading wrote), Unicorn's translated blocks and TLB, the hooks, the
Python state (the BootedRun, armload's Session with the closure loaded). A fork costs a few
milliseconds, where a restore (mmap, a new Uc, its hooks, an empty translation cache that the
kernel paths then fill again) and reloading the closure cost tenths of a second or seconds.
The parent never runs module code after `prepare`, so every child starts from exactly the state
a fresh restore plus the closure's loads would give: results are the same for any order and
any number of workers (the machine is deterministic; translated blocks do not change what runs).

Interface (used by `check`'s booted worker, ci/worker.py, and usable by pytest fixtures that
fork per test):

    h = prepare(closure, vmlinuz=..., kernel=..., config=..., tree=..., load=fn)
        # closure: paths of .ko files, loaded in order with BootedRun.load (or by `load(run,
        # closure)` when given: its return value is h.info). Without `base` the handle is LOCAL:
        # this process restores the booted kernel and loads the closure into itself (a pytest
        # session fixture). With base=<a handle>, the closure is loaded in a SERVER process
        # forked from base, which then forks once per fork_run: base stays untouched and can
        # serve the next closure (check keeps one base per worker and one server per closure).
    r = fork_run(h, fn)
        # fn(run: BootedRun) -> a picklable result, run in a fresh fork of h's process; the
        # result comes back through a pipe. Local handles take any callable (it is inherited by
        # the fork); a server's fn is pickled (a module-level function or functools.partial).
        # A child that raises, returns what does not pickle, or dies (a signal), raises ForkError
        # here, and so does a server that is gone; h is unchanged.
    close(h)
        # a server exits (also when its parent process exits: it reads EOF).

The restore itself is cached per process (`base_run`): a second prepare([]) returns the same
handle.
"""
from __future__ import annotations

import os
import pickle
import struct
import traceback


class ForkError(Exception):
    """A forked child raised or died; the message is its traceback or its signal."""


class Handle:
    def __init__(self, closure, run=None, info=None, pid=None, cmd=None, res=None):
        self.closure = tuple(closure)
        self.run = run            # local: the BootedRun in this process
        self.info = info          # what prepare's load() returned
        self.pid, self.cmd, self.res = pid, cmd, res      # server: its pid and pipe ends

    @property
    def local(self) -> bool:
        return self.pid is None


_BASES: dict = {}


def base_run(vmlinuz: str, kernel, config, tree: str | None = None):
    """The BootedRun restored in this process for (vmlinuz, tree), once (then only forked from)."""
    from .modrun import BootedRun
    k = (os.path.abspath(vmlinuz), tree, id(kernel))          # forks (pool workers too) inherit it
    if k not in _BASES:
        _BASES[k] = BootedRun(vmlinuz, kernel, config, tree=tree)
        warm(_BASES[k])
    return _BASES[k]


def _default_load(run, closure):
    return [(os.path.basename(p), r.status, r.ret) for p in closure for r in [run.load(p)]]


def prepare(closure=(), *, base: Handle | None = None, vmlinuz: str | None = None, kernel=None, config=None,
            tree: str | None = None, load=None) -> Handle:
    load = load or _default_load
    if base is None:
        run = base_run(vmlinuz, kernel, config, tree)
        info = load(run, list(closure)) if closure else None
        return Handle(closure, run=run, info=info)
    if not base.local:
        raise ValueError("a server's closure is extended from a local handle (its base)")
    cmd_r, cmd_w = os.pipe()
    res_r, res_w = os.pipe()
    pid = os.fork()
    if pid == 0:                                         # the server
        code = 0
        try:
            os.close(cmd_w)
            os.close(res_r)
            try:
                info = ("ok", load(base.run, list(closure)))
            except BaseException:
                info = ("error", traceback.format_exc())
            _send(res_w, info)
            if info[0] == "ok":
                h = Handle(closure, run=base.run, info=info[1])
                while True:
                    msg = _recv(cmd_r)
                    if msg is None:
                        break
                    try:
                        out = ("ok", fork_run(h, pickle.loads(msg)))
                    except BaseException as e:
                        out = ("error", str(e) if isinstance(e, ForkError) else traceback.format_exc())
                    _send(res_w, out)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(cmd_r)
    os.close(res_w)
    h = Handle(closure, pid=pid, cmd=cmd_w, res=res_r)
    status, info = _unpack(_recv(res_r), pid)
    if status != "ok":
        close(h)
        raise ForkError(f"loading the closure failed in the server: {info}")
    h.info = info
    return h


def fork_run(h: Handle, fn):
    if not h.local:
        data = pickle.dumps(fn)
        try:
            _send_raw(h.cmd, data)
        except BrokenPipeError:                        # the server is gone (killed): say so
            data = None
        else:
            data = _recv(h.res)
        status, out = _unpack(data, h.pid)
        if status != "ok":
            raise ForkError(out)
        return out
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            try:
                data = pickle.dumps(("ok", fn(h.run)))
            except BaseException:                      # fn raised, or its result does not pickle
                data = pickle.dumps(("error", traceback.format_exc()))
            _send_raw(w, data)
        finally:
            os._exit(0)
    os.close(w)
    try:
        data = _recv(r)
    finally:
        os.close(r)
        _, st = os.waitpid(pid, 0)
    if data is None:
        why = f"signal {os.WTERMSIG(st)}" if os.WIFSIGNALED(st) else f"exit status {os.WEXITSTATUS(st)}"
        raise ForkError(f"the forked child died ({why}) before returning")
    status, out = pickle.loads(data)
    if status != "ok":
        raise ForkError(out)
    return out


def close(h: Handle) -> None:
    if h.local or h.cmd is None:
        return
    os.close(h.cmd)
    os.close(h.res)
    h.cmd = h.res = None
    os.waitpid(h.pid, 0)


# --- length-prefixed pickles over pipes ----------------------------------------------------
def _send(fd: int, obj) -> None:
    _send_raw(fd, pickle.dumps(obj))


def _send_raw(fd: int, data: bytes) -> None:
    data = struct.pack("<Q", len(data)) + data
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read(fd: int, n: int) -> bytes | None:
    out = bytearray()
    while len(out) < n:
        b = os.read(fd, n - len(out))
        if not b:
            return None
        out += b
    return bytes(out)


def _recv(fd: int) -> bytes | None:
    head = _read(fd, 8)
    if head is None:
        return None
    return _read(fd, struct.unpack("<Q", head)[0])


def _unpack(data: bytes | None, pid: int):
    if data is None:
        return "error", f"the server (pid {pid}) died"
    return pickle.loads(data)


def warm(run) -> None:
    """What every load computes from the Image and the tree alone, computed once here so that the
    forks inherit it: the `bl` sites of the module memory allocator (modmem) and of the reserved
    per-cpu one (modload._Capture), the disassembler a data abort's access decoding starts (hw/cpu.py: ~40 ms the first time), and
    the tree's name index and modules.alias (each request_module() looks them up: built in every
    fork, the alias patterns' reading and fnmatch compiling took a sixth of `check`'s CPU)."""
    from ..hw import cpu
    from .modmem import alloc_entry, bl_sites
    cpu.arm_disassembler()
    img = run.bk.image
    bl_sites(img, alloc_entry(img)[0])
    for name in ("__alloc_reserved_percpu", "pcpu_alloc_noprof"):
        if name in img.symbols:
            bl_sites(img, img.symbols[name])
    if run.tree:
        _ = run.aliases                  # reads the tree's name index and modules.alias
