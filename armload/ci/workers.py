"""check's worker processes (`--jobs N`), isolated: resource limits, and a worker that dies is
replaced without losing anything but the one module it was checking (issue 33).

Each worker is a fork of the parent (the plan, kernel and options inherited) that takes a group of
module names at a time and sends one message per module: ("start", name) before it, ("rec",
record) after. Limits (resource.setrlimit, inherited by the booted runtime's fork servers and
their per-module children):
- RLIMIT_AS: the worker's address space (AS_LIMIT; the booted kernel maps 256 MiB of guest RAM and
  Unicorn reserves its translation buffer, so the figure is address space, not resident memory);
  an allocation past it fails (MemoryError: an `internal` record) or kills the process;
- resident memory: Linux ignores RLIMIT_RSS, so the parent reads each worker's process tree's
  proportional resident memory (Pss, /proc) every WATCH_S and kills a tree that grew past RSS_LIMIT beyond its share at the fork (the module is then `internal`, named);
- RLIMIT_CPU: CPU seconds per module as the safety net behind the instruction and simulated-time
  budgets (set again before each module: the soft limit's SIGXCPU ends a worker stuck in host code).
When a worker dies (any signal, SIGKILL from the OOM killer or a user, SIGXCPU, a crash in native
code), the module it had started is recorded once as `internal` with the reason, the rest of its
group goes to a new worker, and the other workers' results are kept.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import resource
import signal
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import wait

AS_LIMIT = 16 << 30              # bytes of address space a worker may grow by: every Uc reserves a translation buffer
                                 # (a booted check worker's VmPeak: 5.5 GiB, its resident peak 0.36 GiB)
RSS_LIMIT = 3 << 30              # resident bytes per worker with its fork servers and their children
CPU_PER_MODULE = 900             # CPU seconds per module (wall clock and budgets come first)
WATCH_S = 1.0                    # how often the parent reads the workers' resident memory


@dataclass
class Limits:
    address_space: int | None
    cpu_per_module: int | None
    resident: int | None = None


def tree_of(pid: int) -> list[int]:
    """pid and its descendants (/proc/PID/task/TID/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except OSError:
            continue
    return out


def resident(pids: list[int]) -> int:
    """Their proportional resident memory (Pss, /proc/PID/smaps_rollup) in bytes: a page shared
    by n processes counts 1/n in each, so fork servers and their copy-on-write children (which
    share the guest RAM and the parent's heap) are not counted once per process, as VmRSS would."""
    total = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                for ln in f:
                    if ln.startswith("Pss:"):
                        total += int(ln.split()[1]) * 1024
                        break
        except OSError:
            continue
    return total


def _cpu_used() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def address_space() -> int:
    """This process's mapped address space (VmSize), in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) << 10
    return 0


def apply_limits(limits: Limits) -> None:
    """The address-space limit, in this process (never above a hard limit already set): what the
    forked worker already maps (inherited from its parent: a long-lived caller, e.g. a test run,
    may map gigabytes) plus limits.address_space to grow by."""
    if limits.address_space:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        want = address_space() + limits.address_space
        cap = want if hard == resource.RLIM_INFINITY else min(hard, want)
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))


def arm_cpu(limits: Limits) -> None:
    """The CPU-time limit for the next module: what this process used so far plus its share."""
    if limits.cpu_per_module:
        soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
        want = int(_cpu_used()) + limits.cpu_per_module
        if hard != resource.RLIM_INFINITY:
            want = min(want, hard)
        resource.setrlimit(resource.RLIMIT_CPU, (want, hard))


def _worker(conn, check_one, release, limits: Limits) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)      # the parent handles ^C
    apply_limits(limits)
    while True:
        group = conn.recv()
        if group is None:
            break
        try:
            for name in group:
                conn.send(("start", name))
                arm_cpu(limits)
                try:
                    rec = check_one(name)
                except BaseException as e:            # check_one never raises but for a host failure
                    conn.send(("error", f"{type(e).__name__}: {e}"[:500]))
                    os._exit(1)                       # its state is not to be trusted: a new worker
                conn.send(("rec", rec))
        finally:
            if release:
                release()
        conn.send(("done", None))
    conn.close()


def death(exitcode: int | None) -> str:
    """How a worker process ended, in words."""
    if exitcode is None:
        return "it vanished"
    if exitcode < 0:
        sig = -exitcode
        name = signal.Signals(sig).name if sig in signal.valid_signals() else str(sig)
        extra = {signal.SIGXCPU: ": its CPU-time limit (RLIMIT_CPU)", signal.SIGKILL: " (killed: by a user "
                 "or the host's OOM killer)", signal.SIGSEGV: " (a crash in native code)"}.get(sig, "")
        return f"signal {sig} ({name}){extra}"
    return f"exit status {exitcode}"


def run_pool(groups: list[list[str]], jobs: int, check_one, lost, *, release=None, limits: Limits | None = None):
    """Yield every record of every group, checked by `jobs` isolated workers, in completion order.
    `lost(name, why)` makes the record of a module whose worker died while checking it."""
    limits = limits or Limits(AS_LIMIT, CPU_PER_MODULE, RSS_LIMIT)
    killed: dict[int, str] = {}      # worker pid -> why the parent killed it
    # worker pid -> its Pss just after the fork: the pages it shares with this process (a long-lived
    # caller such as a test run may hold gigabytes) are its share of them, not its own growth
    base: dict[int, int] = {}
    ctx = mp.get_context("fork")
    todo = deque(groups)
    live = {}                 # conn -> [process, names of its group not yet recorded, the one in flight]

    def start():
        parent, child = ctx.Pipe()
        p = ctx.Process(target=_worker, args=(child, check_one, release, limits), daemon=True)
        p.start()
        child.close()
        base[p.pid] = resident([p.pid]) if limits.resident else 0   # its share of what it inherited
        live[parent] = [p, [], None]
        feed(parent)

    def feed(conn):
        g = todo.popleft() if todo else None
        live[conn][1:] = [list(g or ()), None]
        conn.send(g)

    for _ in range(min(jobs, len(todo))):
        start()
    try:
        while live:
            ready = wait(list(live), timeout=WATCH_S if limits.resident else None)
            if limits.resident:
                for conn, (p, _, now) in live.items():
                    tree = tree_of(p.pid)
                    used = resident(tree) - base.get(p.pid, 0)
                    if now is not None and used > limits.resident and p.pid not in killed:
                        killed[p.pid] = (f"killed by armload: its resident memory {used >> 20} MiB passed the "
                                         f"worker limit of {limits.resident >> 20} MiB (beyond what it inherited)")
                        for q in reversed(tree):
                            try:
                                os.kill(q, signal.SIGKILL)
                            except OSError:
                                pass
            for conn in ready:
                p, left, now = live[conn]
                try:
                    kind, value = conn.recv()
                except (EOFError, OSError):
                    p.join()
                    del live[conn]
                    conn.close()
                    if now is not None:                            # it died checking `now`
                        left.remove(now)
                        why = killed.pop(p.pid, None) or death(p.exitcode)
                        yield lost(now, f"the check worker died ({why}) while checking it; "
                                        f"the other modules' results are kept")
                    if left:
                        todo.appendleft(left)
                    if todo:
                        start()
                    continue
                if kind == "start":
                    live[conn][2] = value
                elif kind == "rec":
                    left.remove(now)
                    live[conn][2] = None
                    yield value
                elif kind == "error":
                    left.remove(now)
                    live[conn][2] = None
                    yield lost(now, f"its check failed in the worker ({value}); the worker was replaced and "
                                    f"the other modules' results are kept")
                elif kind == "done":
                    feed(conn)
    finally:
        for conn, (p, _, _) in list(live.items()):
            try:
                conn.send(None)
            except OSError:
                pass
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
