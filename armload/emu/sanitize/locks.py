"""The module's locks and the context it sleeps in (lockdep's classes).

Debian's armmp is PREEMPT_VOLUNTARY without PREEMPT_COUNT and without DEBUG_SPINLOCK: spin_lock()
leaves preempt_count alone and spin_unlock() is inlined into the module (arch_spin_unlock: a
halfword store that bumps tickets.owner), so the module's locks are followed here, per task:
- acquired at the entries of _raw_spin_lock*, _raw_read/write_lock*, mutex_lock*, down* when LR is
  in the module (trylocks when they return 1 to it);
- released at _raw_spin_unlock_bh/_irqrestore, mutex_unlock, up... called from the module, and at
  the module's own store to a spinlock or rwlock it took (the inlined spin_unlock, read_unlock,
  write_unlock: INLINE_UNLOCK_STORE);
- a release of a lock whose memory says it is not locked (ticket owner == next; mutex owner 0)
  or that this task does not hold: "bad unlock balance";
- an acquisition of B while holding A adds A -> B; a path back from B to A is a circular
  dependency (each lock is its own class: the lock's address);
- a sleeping function (msleep, mutex_lock, schedule_timeout, wait_for_completion, a blocking
  kmalloc/vmalloc...) entered while the task holds one of the module's spinlocks (on PREEMPT_RT,
  its rt_spin_lock/rt_read_lock/rt_write_lock ones: inside their rcu_read_lock()), or with IRQs
  off, or in hardirq/softirq context (preempt_count's masks) when called from the module;
- locks the module still holds when init or exit returns.
"""
from __future__ import annotations

from dataclasses import dataclass, field

HARDIRQ_MASK, SOFTIRQ_MASK, NMI_MASK = 0x000F0000, 0x0000FF00, 0x00F00000   # include/linux/preempt.h
SOFTIRQ_OFFSET = 0x100
CPSR_I = 0x80

# kernel function -> (lock kind, op): op acquire | release | try (acquired when it returns 1)
LOCK_FUNCS = {
    "_raw_spin_lock": ("spin", "acquire"), "_raw_spin_lock_bh": ("spin", "acquire"),
    "_raw_spin_lock_irq": ("spin", "acquire"), "_raw_spin_lock_irqsave": ("spin", "acquire"),
    "_raw_spin_trylock": ("spin", "try"), "_raw_spin_trylock_bh": ("spin", "try"),
    "_raw_spin_unlock_bh": ("spin", "release"), "_raw_spin_unlock_irqrestore": ("spin", "release"),
    "_raw_spin_unlock": ("spin", "release"), "_raw_spin_unlock_irq": ("spin", "release"),
    "_raw_read_lock": ("rwlock", "acquire"), "_raw_read_lock_bh": ("rwlock", "acquire"),
    "_raw_read_lock_irq": ("rwlock", "acquire"), "_raw_read_lock_irqsave": ("rwlock", "acquire"),
    "_raw_write_lock": ("rwlock", "acquire"), "_raw_write_lock_bh": ("rwlock", "acquire"),
    "_raw_write_lock_irq": ("rwlock", "acquire"), "_raw_write_lock_irqsave": ("rwlock", "acquire"),
    "_raw_read_unlock_bh": ("rwlock", "release"), "_raw_read_unlock_irqrestore": ("rwlock", "release"),
    "_raw_write_unlock_bh": ("rwlock", "release"), "_raw_write_unlock_irqrestore": ("rwlock", "release"),
    "mutex_lock": ("mutex", "acquire"), "mutex_lock_interruptible": ("mutex", "acquire_ret0"),
    "mutex_lock_killable": ("mutex", "acquire_ret0"), "mutex_lock_io": ("mutex", "acquire"),
    "mutex_trylock": ("mutex", "try"), "mutex_unlock": ("mutex", "release"),
    # PREEMPT_RT (kernel/locking/spinlock_rt.c): spinlock_t and rwlock_t are rt_mutexes, taken and
    # released by calls (no inlined unlock), holding rcu_read_lock() while held
    "rt_spin_lock": ("rt_spin", "acquire"), "rt_spin_trylock": ("rt_spin", "try"),
    "rt_spin_trylock_bh": ("rt_spin", "try"), "rt_spin_unlock": ("rt_spin", "release"),
    "rt_read_lock": ("rt_rwlock", "acquire"), "rt_write_lock": ("rt_rwlock", "acquire"),
    "rt_read_trylock": ("rt_rwlock", "try"), "rt_write_trylock": ("rt_rwlock", "try"),
    "rt_read_unlock": ("rt_rwlock", "release"), "rt_write_unlock": ("rt_rwlock", "release"),
}
ATOMIC_KINDS = ("spin", "rwlock")
# sleeping under these is __might_resched's bug too: preemptible, but inside their rcu_read_lock()
# ("RCU nest depth: N, expected: 0", kernel/sched/core.c)
RT_KINDS = ("rt_spin", "rt_rwlock")
NO_SLEEP_KINDS = ATOMIC_KINDS + RT_KINDS

# The store an inlined unlock makes to the lock's first word, by lock kind. armmp is not PREEMPTION,
# so kernel/Kconfig.locks inlines spin_unlock(_irq), read_unlock(_irq) and write_unlock(_irq) into
# the module (no _raw_spin_unlock, _raw_read_unlock or _raw_write_unlock in its kallsyms);
# arch/arm/include/asm/spinlock.h: arch_spin_unlock bumps tickets.owner with a halfword store,
# arch_write_unlock stores 0 to rw->lock, arch_read_unlock decrements it with ldrex/strex.
INLINE_UNLOCK_STORE = {"spin": 2, "rwlock": 4}


def inline_unlock(kind: str, size: int) -> bool:
    """Whether the module's store of `size` bytes to a lock of `kind` it took is its inlined unlock."""
    return INLINE_UNLOCK_STORE.get(kind) == size

# functions that may sleep (might_sleep() in their path, 6.1)
SLEEPERS = ("msleep", "msleep_interruptible", "usleep_range_state", "schedule", "schedule_timeout",
            "schedule_timeout_interruptible", "schedule_timeout_killable", "schedule_timeout_uninterruptible",
            "mutex_lock", "mutex_lock_interruptible", "mutex_lock_killable", "mutex_lock_io",
            "down", "down_interruptible", "down_killable", "down_timeout", "down_read", "down_write",
            "down_read_killable", "down_read_interruptible", "down_write_killable",
            "wait_for_completion", "wait_for_completion_interruptible", "wait_for_completion_killable",
            "wait_for_completion_timeout", "wait_for_completion_interruptible_timeout",
            "wait_for_completion_killable_timeout", "wait_for_completion_io", "wait_for_completion_io_timeout",
            "synchronize_rcu", "flush_workqueue", "__flush_workqueue", "flush_work", "cancel_work_sync",
            "cancel_delayed_work_sync", "vmalloc", "vzalloc", "__vmalloc", "kvmalloc_node", "_copy_from_user",
            "_copy_to_user", "ssleep",
            # 6.10+'s names (allocation tagging), and what an inlined copy_{from,to}_user calls (6.12)
            "vmalloc_noprof", "vzalloc_noprof", "__vmalloc_noprof", "__kvmalloc_node_noprof",
            "arm_copy_from_user", "arm_copy_to_user")


@dataclass
class Held:
    lock: int
    kind: str
    stack: object             # report.Stack of the acquisition
    fn: str


@dataclass
class LockState:
    held: dict[int, list[Held]] = field(default_factory=dict)         # task -> locks, in order
    edges: dict[int, dict[int, tuple]] = field(default_factory=dict)  # A -> {B: (held A, acquired B)}
    reported_pairs: set = field(default_factory=set)

    def holding(self, task: int) -> list[Held]:
        return self.held.setdefault(task, [])

    def path(self, a: int, b: int) -> list[int] | None:
        """A dependency path a -> ... -> b, or None."""
        seen, work = {a}, [(a, [a])]
        while work:
            n, p = work.pop()
            if n == b:
                return p
            for m in self.edges.get(n, {}):
                if m not in seen:
                    seen.add(m)
                    work.append((m, p + [m]))
        return None


def lock_word_locked(kind: str, word: int) -> bool | None:
    """Whether the lock's first word says it is held (None: not knowable from it)."""
    if kind == "spin":                    # arch_spinlock_t tickets: owner (low half), next (high half)
        return (word & 0xFFFF) != (word >> 16)
    if kind == "mutex":                   # atomic_long_t owner: the task | flag bits, 0 when free
        return word != 0
    return None
