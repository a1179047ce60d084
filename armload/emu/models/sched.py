"""kernel/sched, kernel/workqueue, kernel/time/timer, softirq, kthread, completion, RCU callbacks.

One CPU, cooperative: deferred work (timers, work items, tasklets, kthreads, RCU callbacks) is
an event queue ordered by simulated time. It runs after init returns (`run_pending`, top level)
and whenever module code waits (msleep, schedule_timeout, wait_for_completion, flush_work, ...),
nested inside the waiting call. Waiting for something nothing can provide ends the run as a
hung task instead of returning a value the kernel never would.
"""
from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

from ..faults import ModelFault
from .base import ModelLibrary

WORK_FUNC = 12                    # struct work_struct { data; entry; func }
DWORK_TIMER = 16                  # struct delayed_work { work; timer; wq; cpu }
TIMER_PPREV, TIMER_EXPIRES, TIMER_FUNCTION = 4, 8, 12   # struct timer_list { entry; expires; function; flags }
TASKLET_STATE, TASKLET_USE_CB, TASKLET_FUNC, TASKLET_DATA = 4, 12, 16, 20
HRTIMER_FUNCTION = 32
MAX_SCHEDULE_TIMEOUT = 0x7FFFFFFF
WQ_SIZE = 0x100
TASK_STRUCT_SIZE = 0x1000
RCU_GP_JIFFIES = 1
HORIZON_NS = 60 * 10**9          # deferred work beyond a simulated minute after init is not run


@dataclass(order=True)
class Event:
    due: int
    seq: int
    kind: str = field(compare=False)          # work | timer | tasklet | kthread | rcu | hrtimer
    obj: int = field(compare=False)           # the work/timer/tasklet/task object
    fn: int = field(compare=False)
    arg: int = field(compare=False)
    wq: int = field(compare=False, default=0)
    live: bool = field(compare=False, default=True)


class Sched:
    def __init__(self, machine):
        self.m = machine
        self.queue: list[Event] = []
        self.by_obj: dict[tuple[str, int], Event] = {}
        self.seq = itertools.count()
        self.workqueues: dict[int, str] = {}
        self.kthreads: dict[int, dict] = {}
        self.done: list[dict] = []
        self.running: list[Event] = []

    def add(self, kind, obj, fn, arg, due, wq=0) -> Event:
        self.cancel(kind, obj)
        ev = Event(due, next(self.seq), kind, obj, fn, arg, wq)
        heapq.heappush(self.queue, ev)
        self.by_obj[(kind, obj)] = ev
        return ev

    def cancel(self, kind, obj) -> bool:
        ev = self.by_obj.pop((kind, obj), None)
        if ev is None:
            return False
        ev.live = False
        return True

    def pending(self, kind, obj) -> bool:
        return (kind, obj) in self.by_obj

    def pop(self, before: int | None = None) -> Event | None:
        while self.queue:
            ev = self.queue[0]
            if not ev.live:
                heapq.heappop(self.queue)
                continue
            if before is not None and ev.due > before:
                return None
            heapq.heappop(self.queue)
            self.by_obj.pop((ev.kind, ev.obj), None)
            return ev
        return None

    # --- running one event ------------------------------------------------------------------
    def _prepare(self, ev: Event) -> None:
        m = self.m
        if ev.kind == "work":
            m.write(ev.obj, (m.read(ev.obj, 4)[0] & ~1).to_bytes(1, "little"))   # clear PENDING
        elif ev.kind in ("timer",):
            m.write(ev.obj + TIMER_PPREV, b"\0\0\0\0")
        elif ev.kind == "tasklet":
            st = int.from_bytes(m.read(ev.obj + TASKLET_STATE, 4), "little")
            m.write(ev.obj + TASKLET_STATE, (st & ~1).to_bytes(4, "little"))

    def run_nested(self, ev: Event) -> int:
        """Run an event inside a waiting model call."""
        m = self.m
        if m.clock.ns() < ev.due:
            m.clock.sleep(ev.due - m.clock.ns())
        self._prepare(ev)
        task = self.kthreads.get(ev.obj, {}).get("task") if ev.kind == "kthread" else None
        prev = m.current
        if task:
            m._set_current(task)
            self.kthreads[ev.obj]["started"] = True
        try:
            r = m.invoke(ev.fn, [ev.arg])
        finally:
            if task:
                m._set_current(prev)
        self._after(ev, r)
        return r

    def _after(self, ev: Event, r: int) -> None:
        if ev.kind == "kthread":
            k = self.kthreads[ev.obj]
            k["exited"] = True
            k["result"] = r
            if not k["stop"] and k["task"] in self.m.heap.live:
                self.m.heap.free(k["task"])      # exited on its own: reaped (kthreads are autoreaped)
        elif ev.kind == "hrtimer" and r == 1:           # HRTIMER_RESTART: re-armed by hrtimer_forward
            exp = int.from_bytes(self.m.read(ev.obj + 16, 8), "little")
            self.add("hrtimer", ev.obj, ev.fn, ev.arg, max(exp, self.m.clock.ns() + 1))

    def wait_until(self, deadline: int | None, done=lambda: False) -> bool:
        """Run due events until `done()` or the deadline; True if done() became true."""
        while not done():
            ev = self.pop(deadline)
            if ev is None:
                if deadline is not None and deadline > self.m.clock.ns():
                    self.m.clock.sleep(deadline - self.m.clock.ns())
                return done()
            self.run_nested(ev)
        return True


def sched(machine) -> Sched:
    st = machine.model_state
    if "sched" not in st:
        st["sched"] = Sched(machine)
    return st["sched"]


def run_pending(machine, budget: int) -> list[dict]:
    """After init: run every due event in time order (each a top-level call) until the queue is
    idle, `budget` instructions have run, or the simulated horizon is passed."""
    s = sched(machine)
    out: list[dict] = []
    start_insns, start_ns = machine.clock.insns, machine.clock.ns()
    while True:
        ev = s.pop()
        if ev is None:
            break
        used = machine.clock.insns - start_insns
        if used >= budget or ev.due - start_ns > HORIZON_NS:
            heapq.heappush(s.queue, ev)
            s.by_obj[(ev.kind, ev.obj)] = ev
            out.append({"kind": "stopped", "status": "returned", "why": (
                f"deferred budget of {budget:,} instructions used" if used >= budget else
                f"next event is more than {HORIZON_NS // 10**9} s of simulated time away"),
                "pending": sum(1 for e in s.queue if e.live), "fault_report": None})
            break
        if machine.clock.ns() < ev.due:
            machine.clock.sleep(ev.due - machine.clock.ns())
        s._prepare(ev)
        task = s.kthreads.get(ev.obj, {}).get("task") if ev.kind == "kthread" else None
        if task:
            s.kthreads[ev.obj]["started"] = True
        res = machine.call(ev.fn, [ev.arg], name=f"{ev.kind} {machine.symbolize(ev.fn & ~1)}",
                           budget=budget - used, task=task)
        status = res.status
        if status == "budget":
            status = "returned"          # still running when the deferred budget ended: not a fault
            note = "still running when the deferred budget ended"
        elif status == "fault" and res.fault is not None and res.fault.kind == "hung" and ev.kind == "kthread":
            status = "returned"          # a kthread waiting for what never comes sleeps; it is not a fault
            note = "sleeping: nothing in the simulation wakes it (" + res.fault.message.split(": ", 1)[-1] + ")"
        else:
            note = None
            if res.status == "returned":
                s._after(ev, res.retval & 0xFFFFFFFF)
        out.append({"kind": ev.kind, "fn": machine.symbolize(ev.fn & ~1), "status": status,
                    "retval": res.retval if ev.kind == "kthread" else None,   # the others return void "sim_ns": ev.due, "instructions": res.instructions,
                    "note": note, "fault": res.fault.to_dict() if res.fault and status != "returned" else None,
                    "fault_report": res.fault if status != "returned" else None})
        if status != "returned":
            break
    s.done.extend(out)
    return out


def create_system_workqueues(machine, addrs: dict[str, int]) -> None:
    s = sched(machine)
    for name, addr in addrs.items():
        if not name.endswith("_wq") and name != "system_wq":
            continue
        wq = machine.heap.alloc(WQ_SIZE, zero=True, kind=f"workqueue {name}")
        s.workqueues[wq] = name.replace("system_", "events_").replace("_wq", "") if name != "system_wq" else "events"
        machine.uc.mem_write(addr, wq.to_bytes(4, "little"))


def register(lib: ModelLibrary) -> None:
    m = lib.model

    def now(call):
        return call.clock.ns()

    def jiffies_due(call, expires):
        return call.clock.tick_time(expires)      # timers fire on the tick where jiffies == expires

    def hung(call, what):
        raise ModelFault(f"INFO: task blocked forever: {what} in {call.symbolize(call.lr)} "
                         f"(nothing pending in the simulation can wake it)", "hung")

    # --- workqueues ----------------------------------------------------------------------
    @m("alloc_workqueue", subsystem="sched")
    def alloc_workqueue(call):
        from .fmt import format_kernel
        name = format_kernel(call, call.string(call.arg(0), 64), call.varargs(3)) if call.arg(0) else "?"
        wq = call.heap.alloc(WQ_SIZE, zero=True, kind=f"workqueue {name}", caller=call.lr)
        if wq:
            sched(call.machine).workqueues[wq] = name
            call.machine.record("alloc_workqueue", name=name, addr=wq)
        return wq

    @m("destroy_workqueue", subsystem="sched")
    def destroy_workqueue(call):
        s = sched(call.machine)
        wq = call.arg(0)
        if wq not in s.workqueues:
            call.fault(f"destroy_workqueue of {wq:#010x}, not a workqueue", "bug")
        s.wait_until(None, lambda: not any(e.live and e.wq == wq and e.kind == "work" for e in s.queue))
        del s.workqueues[wq]
        call.heap.free(wq, caller=call.lr)

    def check_wq(call, wq):
        if wq not in sched(call.machine).workqueues:
            call.fault(f"{call.name}: {wq:#010x} is not a workqueue ({call.symbolize(wq)})",
                       "null-deref" if wq < 4096 else "bug")

    def queue_work(call, wq, work, due):
        data = int.from_bytes(call.read(work, 4), "little")
        if data & 1:
            return 0                      # already pending
        call.write(work, (data | 1).to_bytes(4, "little"))
        sched(call.machine).add("work", work, int.from_bytes(call.read(work + WORK_FUNC, 4), "little"), work, due, wq)
        return 1

    @m("queue_work_on", subsystem="sched")
    def queue_work_on(call):
        check_wq(call, call.arg(1))
        return queue_work(call, call.arg(1), call.arg(2), now(call))

    @m("queue_delayed_work_on", subsystem="sched")
    def queue_delayed_work_on(call):
        check_wq(call, call.arg(1))
        dwork, delay = call.arg(2), call.arg(3)
        due = now(call) if delay == 0 else call.clock.tick_time(call.clock.jiffies + delay)
        return queue_work(call, call.arg(1), dwork, due)

    @m("delayed_work_timer_fn", subsystem="sched")
    def delayed_work_timer_fn(call):
        # the timer of a struct delayed_work fired: queue its work on dwork->wq now
        dwork = call.arg(0) - DWORK_TIMER
        wq = call.u32(dwork + DWORK_TIMER + 20)
        check_wq(call, wq)
        queue_work(call, wq, dwork, now(call))

    @m("mod_delayed_work_on", subsystem="sched")
    def mod_delayed_work_on(call):
        check_wq(call, call.arg(1))
        dwork, delay = call.arg(2), call.arg(3)
        was = sched(call.machine).cancel("work", dwork)
        call.write(dwork, (int.from_bytes(call.read(dwork, 4), "little") & ~1).to_bytes(4, "little"))
        queue_work(call, call.arg(1), dwork, now(call) if delay == 0 else call.clock.tick_time(call.clock.jiffies + delay))
        return int(was)

    def cancel(call, work):
        was = sched(call.machine).cancel("work", work)
        if was:
            call.write(work, (int.from_bytes(call.read(work, 4), "little") & ~1).to_bytes(4, "little"))
        return int(was)

    @m("cancel_work_sync", "cancel_delayed_work_sync", "cancel_delayed_work", "cancel_work", subsystem="sched")
    def cancel_work(call):
        return cancel(call, call.arg(0))

    @m("flush_work", "flush_delayed_work", subsystem="sched")
    def flush_work(call):
        s = sched(call.machine)
        ev = s.by_obj.get(("work", call.arg(0)))
        if ev is None:
            return 0
        s.cancel("work", call.arg(0))
        s.run_nested(ev)
        return 1

    @m("__flush_workqueue", "drain_workqueue", subsystem="sched")
    def flush_workqueue(call):
        s = sched(call.machine)
        wq = call.arg(0)
        check_wq(call, wq)
        s.wait_until(None, lambda: not any(e.live and e.wq == wq for e in s.queue))

    @m("work_busy", subsystem="sched")
    def work_busy(call):
        return 1 if sched(call.machine).pending("work", call.arg(0)) else 0   # WORK_BUSY_PENDING

    # --- timers ----------------------------------------------------------------------------
    def arm_timer(call, timer, expires):
        s = sched(call.machine)
        was = s.pending("timer", timer)
        call.put_u32(timer + TIMER_EXPIRES, expires)
        call.put_u32(timer + TIMER_PPREV, call.machine.timer_base())
        s.add("timer", timer, call.u32(timer + TIMER_FUNCTION), timer, jiffies_due(call, expires))
        return int(was)

    @m("mod_timer", "timer_reduce", subsystem="time")
    def mod_timer(call):
        return arm_timer(call, call.arg(0), call.arg(1))

    @m("mod_timer_pending", subsystem="time")
    def mod_timer_pending(call):
        if not sched(call.machine).pending("timer", call.arg(0)):
            return 0
        return arm_timer(call, call.arg(0), call.arg(1))

    @m("add_timer", "add_timer_on", subsystem="time")
    def add_timer(call):
        if sched(call.machine).pending("timer", call.arg(0)):
            call.fault("kernel BUG at kernel/time/timer.c: add_timer on a pending timer", "bug")
        arm_timer(call, call.arg(0), call.u32(call.arg(0) + TIMER_EXPIRES))

    @m("del_timer", "del_timer_sync", "try_to_del_timer_sync", "timer_delete", "timer_delete_sync",
       "timer_shutdown_sync", subsystem="time")
    def del_timer(call):
        was = sched(call.machine).cancel("timer", call.arg(0))
        call.put_u32(call.arg(0) + TIMER_PPREV, 0)
        return int(was)

    @m("hrtimer_start_range_ns", subsystem="time")
    def hrtimer_start(call):
        t = call.arg(0)
        tim = call.arg64(2)
        mode = call.arg(6)
        due = now(call) + tim if mode & 1 else tim      # HRTIMER_MODE_REL
        call.write(t + 16, due.to_bytes(8, "little"))
        sched(call.machine).add("hrtimer", t, call.u32(t + HRTIMER_FUNCTION), t, max(due, now(call)))

    @m("hrtimer_cancel", "hrtimer_try_to_cancel", subsystem="time")
    def hrtimer_cancel(call):
        return int(sched(call.machine).cancel("hrtimer", call.arg(0)))

    @m("hrtimer_active", subsystem="time")
    def hrtimer_active(call):
        return int(sched(call.machine).pending("hrtimer", call.arg(0)))

    # --- softirq: tasklets -------------------------------------------------------------------
    def tasklet_fn(call, t):
        if call.read(t + TASKLET_USE_CB, 1)[0]:
            return call.u32(t + TASKLET_FUNC), t
        return call.u32(t + TASKLET_FUNC), call.u32(t + TASKLET_DATA)

    @m("__tasklet_schedule", "__tasklet_hi_schedule", subsystem="sched")
    def tasklet_schedule(call):
        fn, arg = tasklet_fn(call, call.arg(0))
        sched(call.machine).add("tasklet", call.arg(0), fn, arg, now(call))

    @m("tasklet_kill", subsystem="sched")
    def tasklet_kill(call):
        s = sched(call.machine)
        ev = s.by_obj.get(("tasklet", call.arg(0)))
        if ev is not None:
            s.cancel("tasklet", call.arg(0))
            s.run_nested(ev)

    # --- kthreads -------------------------------------------------------------------------------
    @m("kthread_create_on_node", subsystem="sched")
    def kthread_create(call):
        from .fmt import format_kernel
        name = format_kernel(call, call.string(call.arg(3), 64), call.varargs(4)) if call.arg(3) else "?"
        task = call.heap.alloc(TASK_STRUCT_SIZE, zero=True, kind=f"task_struct {name}", caller=call.lr)
        if not task:
            return (-12) & 0xFFFFFFFF
        sched(call.machine).kthreads[task] = {"fn": call.arg(0), "data": call.arg(1), "name": name, "task": task,
                                              "started": False, "exited": False, "stop": False, "result": None}
        call.machine.record("kthread_create", name=name, fn=call.symbolize(call.arg(0)), addr=task)
        return task

    @m("wake_up_process", subsystem="sched")
    def wake_up_process(call):
        s = sched(call.machine)
        k = s.kthreads.get(call.arg(0))
        if k is None or k["started"] or s.pending("kthread", call.arg(0)):
            return 0
        s.add("kthread", call.arg(0), k["fn"], k["data"], now(call))
        return 1

    @m("kthread_should_stop", subsystem="sched")
    def kthread_should_stop(call):
        k = sched(call.machine).kthreads.get(call.machine.current)
        return int(bool(k and k["stop"]))

    @m("kthread_stop", subsystem="sched")
    def kthread_stop(call):
        s = sched(call.machine)
        k = s.kthreads.get(call.arg(0))
        if k is None:
            call.fault(f"kthread_stop of {call.arg(0):#010x}, not a kthread", "bug")
        k["stop"] = True
        if not k["started"]:
            s.cancel("kthread", call.arg(0))
            k["exited"] = True
            return (-4) & 0xFFFFFFFF                 # -EINTR: threadfn never ran
        if not k["exited"]:
            call.unmodelled(f"kthread_stop of '{k['name']}' while it runs (no preemptive scheduler)")
        return k["result"] or 0

    # --- completions, sleeping ----------------------------------------------------------------
    def done_count(call, x):
        return call.u32(x)

    @m("complete", subsystem="sched")
    def complete(call):
        d = call.u32(call.arg(0))
        if d != 0xFFFFFFFF:
            call.put_u32(call.arg(0), d + 1)

    @m("complete_all", subsystem="sched")
    def complete_all(call):
        call.put_u32(call.arg(0), 0xFFFFFFFF)

    def take(call, x):
        d = call.u32(x)
        if d != 0xFFFFFFFF:
            call.put_u32(x, d - 1)

    @m("wait_for_completion", "wait_for_completion_io", "wait_for_completion_killable",
       "wait_for_completion_interruptible", subsystem="sched")
    def wait_for_completion(call):
        x = call.arg(0)
        if not sched(call.machine).wait_until(None, lambda: done_count(call, x) != 0):
            hung(call, f"{call.name}({x:#x})")
        take(call, x)
        return 0

    @m("wait_for_completion_timeout", "wait_for_completion_interruptible_timeout",
       "wait_for_completion_killable_timeout", "wait_for_completion_io_timeout", subsystem="sched")
    def wait_for_completion_timeout(call):
        x, t = call.arg(0), call.arg(1)
        deadline = now(call) + t * call.clock.jiffies_to_ns(1)
        if not sched(call.machine).wait_until(deadline, lambda: done_count(call, x) != 0):
            return 0
        take(call, x)
        return max(1, call.clock.ns_to_jiffies(deadline - now(call)))

    @m("try_wait_for_completion", subsystem="sched")
    def try_wait(call):
        if done_count(call, call.arg(0)) == 0:
            return 0
        take(call, call.arg(0))
        return 1

    @m("completion_done", subsystem="sched")
    def completion_done(call):
        return int(done_count(call, call.arg(0)) != 0)

    def sleep_jiffies(call, t):
        if t >= MAX_SCHEDULE_TIMEOUT:         # as schedule(): the next event is what wakes us
            s = sched(call.machine)
            ev = s.pop()
            if ev is None:
                hung(call, "schedule_timeout(MAX_SCHEDULE_TIMEOUT)")
            s.run_nested(ev)
            return MAX_SCHEDULE_TIMEOUT
        sched(call.machine).wait_until(now(call) + t * call.clock.jiffies_to_ns(1))
        return 0

    @m("schedule_timeout", "schedule_timeout_interruptible", "schedule_timeout_uninterruptible",
       "schedule_timeout_killable", "schedule_timeout_idle", "io_schedule_timeout", subsystem="sched")
    def schedule_timeout(call):
        return sleep_jiffies(call, call.arg(0))

    @m("schedule", "io_schedule", subsystem="sched")
    def schedule(call):
        s = sched(call.machine)
        ev = s.pop()
        if ev is None:
            hung(call, "schedule()")
        s.run_nested(ev)

    @m("msleep", subsystem="time")
    def msleep(call):
        # msleep: schedule_timeout_uninterruptible(msecs_to_jiffies(msecs) + 1)
        sleep_jiffies(call, call.clock.ns_to_jiffies(call.arg(0) * 1_000_000) + 1)

    @m("msleep_interruptible", subsystem="time")
    def msleep_interruptible(call):
        sleep_jiffies(call, call.clock.ns_to_jiffies(call.arg(0) * 1_000_000) + 1)
        return 0

    @m("usleep_range_state", subsystem="time")
    def usleep_range(call):
        sched(call.machine).wait_until(now(call) + call.arg(0) * 1000)

    @m("__cond_resched", "_cond_resched", subsystem="sched")
    def cond_resched(call):
        return 0                          # nothing else is runnable on this CPU

    @m("yield", subsystem="sched")
    def yield_(call):
        s = sched(call.machine)
        ev = s.pop(now(call))
        if ev is not None:
            s.run_nested(ev)

    @m("__wake_up", "__wake_up_sync_key", "__wake_up_locked", "__wake_up_locked_key", subsystem="sched")
    def wake_up(call):
        call.note = "no task sleeps on a wait queue in this simulation (sleepers are models)"

    # --- RCU -----------------------------------------------------------------------------------
    def gp(call):
        return now(call) + RCU_GP_JIFFIES * call.clock.jiffies_to_ns(1)

    @m("call_rcu", subsystem="sched")
    def call_rcu(call):
        sched(call.machine).add("rcu", call.arg(0), call.arg(1), call.arg(0), gp(call))

    @m("synchronize_rcu", "synchronize_net", "synchronize_rcu_expedited", "synchronize_srcu", subsystem="sched")
    def synchronize_rcu(call):
        sched(call.machine).wait_until(gp(call))

    @m("rcu_barrier", "srcu_barrier", subsystem="sched")
    def rcu_barrier(call):
        s = sched(call.machine)
        s.wait_until(None, lambda: not any(e.live and e.kind == "rcu" for e in s.queue))

    @m("kvfree_call_rcu", subsystem="sched")
    def kvfree_call_rcu(call):
        head, fn = call.arg(0), call.arg(1)
        if fn < 4096:                      # kfree_rcu: the "function" is the rcu_head's offset
            call.machine.heap.free(head - fn, caller=call.lr)   # unreachable by contract: free now
        else:
            sched(call.machine).add("rcu", head, fn, head, gp(call))
