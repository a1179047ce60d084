"""kernel/locking: spinlocks, rwlocks, mutexes, semaphores, rwsems on one CPU.

Lock words are the real ones (ARM ticket spinlock {owner, next}; mutex owner = current task;
semaphore count), so code that inspects them sees what the kernel would. Taking a lock this
CPU already holds is the deadlock the real kernel would hang in: reported as such, at once.
"""
from __future__ import annotations

from .base import ModelLibrary

IRQ_FLAGS = 0x13                  # saved CPSR of the caller: SVC mode, IRQs enabled
SEM_COUNT = 4                     # struct semaphore { raw_spinlock_t lock; unsigned int count; ... }


def held(call) -> dict:
    """lock address -> (kind, taken at) for the locks held now (shown in oops reports)."""
    return call.state("locking.held", dict)


def register(lib: ModelLibrary) -> None:
    m = lib.model

    def spin_lock(call, lock):
        w = call.u32(lock)
        owner, nxt = w & 0xFFFF, w >> 16
        if owner != nxt:
            call.fault(f"BUG: spinlock recursion on CPU#0: lock {call.symbolize(lock)} is already held "
                       f"(taken at {held(call).get(lock, ('?', '?'))[1]}); the kernel would deadlock here",
                       "deadlock")
        call.put_u32(lock, owner | (((nxt + 1) & 0xFFFF) << 16))
        held(call)[lock] = ("spinlock", call.symbolize(call.lr))

    def spin_unlock(call, lock):
        w = call.u32(lock)
        owner, nxt = w & 0xFFFF, w >> 16
        if owner == nxt:
            call.fault(f"BUG: spinlock already unlocked: {call.symbolize(lock)}", "bug")
        call.put_u32(lock, ((owner + 1) & 0xFFFF) | (nxt << 16))
        held(call).pop(lock, None)

    @m("_raw_spin_lock", "_raw_spin_lock_bh", "_raw_spin_lock_irq", "_raw_spin_lock_nested", subsystem="locking")
    def lock(call):
        spin_lock(call, call.arg(0))

    @m("_raw_spin_lock_irqsave", "_raw_spin_lock_irqsave_nested", subsystem="locking")
    def lock_irqsave(call):
        spin_lock(call, call.arg(0))
        return IRQ_FLAGS

    @m("_raw_spin_unlock", "_raw_spin_unlock_bh", "_raw_spin_unlock_irq", "_raw_spin_unlock_irqrestore",
       subsystem="locking")
    def unlock(call):
        spin_unlock(call, call.arg(0))

    @m("_raw_spin_trylock", "_raw_spin_trylock_bh", subsystem="locking")
    def trylock(call):
        w = call.u32(call.arg(0))
        if w & 0xFFFF != w >> 16:
            return 0
        spin_lock(call, call.arg(0))
        return 1

    # rwlocks (arch_rwlock_t: one word; writers set bit 31, readers count)
    @m("_raw_read_lock", "_raw_read_lock_bh", "_raw_read_lock_irq", "_raw_read_lock_irqsave", subsystem="locking")
    def read_lock(call):
        w = call.u32(call.arg(0))
        if w & 0x80000000:
            call.fault(f"deadlock: read_lock of {call.symbolize(call.arg(0))} held for writing on this CPU", "deadlock")
        call.put_u32(call.arg(0), w + 1)
        return IRQ_FLAGS if call.name.endswith("irqsave") else None

    @m("_raw_read_unlock", "_raw_read_unlock_bh", "_raw_read_unlock_irq", "_raw_read_unlock_irqrestore",
       subsystem="locking")
    def read_unlock(call):
        call.put_u32(call.arg(0), (call.u32(call.arg(0)) - 1) & 0xFFFFFFFF)

    @m("_raw_write_lock", "_raw_write_lock_bh", "_raw_write_lock_irq", "_raw_write_lock_irqsave",
       subsystem="locking")
    def write_lock(call):
        if call.u32(call.arg(0)):
            call.fault(f"deadlock: write_lock of {call.symbolize(call.arg(0))} already held on this CPU", "deadlock")
        call.put_u32(call.arg(0), 0x80000000)
        return IRQ_FLAGS if call.name.endswith("irqsave") else None

    @m("_raw_write_unlock", "_raw_write_unlock_bh", "_raw_write_unlock_irq", "_raw_write_unlock_irqrestore",
       subsystem="locking")
    def write_unlock(call):
        call.put_u32(call.arg(0), 0)

    # mutexes: owner word = current task
    def mutex_lock(call):
        owner = call.u32(call.arg(0)) & ~7
        if owner:
            who = "this task" if owner == call.machine.current else f"task {owner:#x}"
            call.fault(f"deadlock: mutex {call.symbolize(call.arg(0))} is held by {who} "
                       f"(taken at {held(call).get(call.arg(0), ('?', '?'))[1]})", "deadlock")
        call.put_u32(call.arg(0), call.machine.current)
        held(call)[call.arg(0)] = ("mutex", call.symbolize(call.lr))

    @m("mutex_lock", "mutex_lock_nested", "mutex_lock_io", subsystem="locking")
    def mutex_lock_(call):
        mutex_lock(call)

    @m("mutex_lock_interruptible", "mutex_lock_killable", "mutex_lock_interruptible_nested",
       "mutex_lock_killable_nested", subsystem="locking")
    def mutex_lock_int(call):
        mutex_lock(call)
        return 0

    @m("mutex_trylock", subsystem="locking")
    def mutex_trylock(call):
        if call.u32(call.arg(0)) & ~7:
            return 0
        mutex_lock(call)
        return 1

    @m("mutex_unlock", subsystem="locking")
    def mutex_unlock(call):
        owner = call.u32(call.arg(0)) & ~7
        if owner != call.machine.current:
            call.fault(f"DEBUG_LOCKS_WARN_ON: mutex_unlock of {call.symbolize(call.arg(0))} not held by "
                       f"this task (owner {owner:#x})", "bug")
        call.put_u32(call.arg(0), 0)
        held(call).pop(call.arg(0), None)

    # semaphores
    def down(call):
        sem = call.arg(0)
        c = call.u32(sem + SEM_COUNT)
        if c == 0:
            call.fault(f"deadlock: down() on semaphore {call.symbolize(sem)} with count 0 and no other "
                       f"task to up() it", "hung")
        call.put_u32(sem + SEM_COUNT, c - 1)

    @m("down", subsystem="locking")
    def down_(call):
        down(call)

    @m("down_interruptible", "down_killable", subsystem="locking")
    def down_int(call):
        down(call)
        return 0

    @m("down_trylock", subsystem="locking")
    def down_trylock(call):
        c = call.u32(call.arg(0) + SEM_COUNT)
        if c == 0:
            return 1
        call.put_u32(call.arg(0) + SEM_COUNT, c - 1)
        return 0

    @m("up", subsystem="locking")
    def up(call):
        call.put_u32(call.arg(0) + SEM_COUNT, call.u32(call.arg(0) + SEM_COUNT) + 1)

    # rw semaphores: count word (reader bias 0x100, writer bit 0), as in 6.1 rwsem.c
    @m("down_read", "down_read_killable", "down_read_interruptible", subsystem="locking")
    def down_read(call):
        c = call.u32(call.arg(0))
        if c & 1:
            call.fault(f"deadlock: down_read on {call.symbolize(call.arg(0))} held for writing", "deadlock")
        call.put_u32(call.arg(0), c + 0x100)
        return 0 if call.name != "down_read" else None

    @m("up_read", subsystem="locking")
    def up_read(call):
        call.put_u32(call.arg(0), (call.u32(call.arg(0)) - 0x100) & 0xFFFFFFFF)

    @m("down_write", "down_write_killable", subsystem="locking")
    def down_write(call):
        if call.u32(call.arg(0)):
            call.fault(f"deadlock: down_write on {call.symbolize(call.arg(0))} already held", "deadlock")
        call.put_u32(call.arg(0), 1)
        return 0 if call.name != "down_write" else None

    @m("up_write", "downgrade_write", subsystem="locking")
    def up_write(call):
        call.put_u32(call.arg(0), 0x100 if call.name == "downgrade_write" else 0)

    @m("down_read_trylock", "down_write_trylock", subsystem="locking")
    def rw_trylock(call):
        c = call.u32(call.arg(0))
        if call.name == "down_write_trylock":
            if c:
                return 0
            call.put_u32(call.arg(0), 1)
            return 1
        if c & 1:
            return 0
        call.put_u32(call.arg(0), c + 0x100)
        return 1

    @m("__local_bh_enable_ip", subsystem="locking")
    def bh_enable(call):
        from .sched import sched
        s = sched(call.machine)
        while True:                       # pending softirqs (tasklets) run when BHs are re-enabled
            ev = next((e for e in sorted(s.queue) if e.live and e.kind == "tasklet"), None)
            if ev is None:
                break
            s.cancel("tasklet", ev.obj)
            s.run_nested(ev)

    @m("preempt_schedule", "preempt_schedule_notrace", subsystem="locking")
    def preempt_schedule(call):
        call.note = "no other task to switch to on this CPU"
