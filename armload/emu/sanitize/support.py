"""Which kernels the sanitizers serve. The detectors hook the kernel's own entry points by name
(engine.py, heap_hooks.py, locks.py): a kernel without them is refused at the door with the
reason, never run with a detector that would silently see nothing; a kernel with lock entry
points the lock detector does not know is served with that gap said (Sanitizer.notes)."""
from __future__ import annotations

from ...errors import ArmloadError

# the module's memory (engine: its code hooks, init's return) and the heap family's core (heap_hooks)
REQUIRED = ("module_alloc", "module_memfree", "do_init_module", "do_one_initcall",
            "__kmalloc", "kmalloc_trace", "kmem_cache_alloc", "kfree")
# PREEMPT_RT: spinlock_t and rwlock_t are rt_mutex-based (kernel/locking/spinlock_rt.c)
RT_LOCKS = ("rt_spin_lock", "rt_read_lock", "rt_write_lock")


class SanitizerUnsupported(ArmloadError):
    """The sanitizers cannot watch this kernel (its entry points are not the ones they hook)."""


def unsupported(symbols) -> str | None:
    """Why the sanitizers cannot serve a kernel with these symbols, or None."""
    miss = [n for n in REQUIRED if n not in symbols]
    if not miss:
        return None
    why = []
    if "execmem_alloc" in symbols:
        why.append("module memory comes from execmem_alloc (6.10+)")
    if "__kmalloc_noprof" in symbols:
        why.append("the allocators are the *_noprof family of allocation tagging (6.10+)")
    return (f"the kernel has no {', '.join(miss)}" + (f" ({'; '.join(why)})" if why else "")
            + ": the detectors hook 6.1's entry points")


def gaps(symbols, classes) -> list[str]:
    """What a detector cannot see on this kernel, said once per run."""
    out = []
    if "locks" in classes and any(n in symbols for n in RT_LOCKS):
        out.append("locks: PREEMPT_RT's spinlock_t and rwlock_t (rt_spin_lock, rt_read_lock, rt_write_lock) "
                   "are not hooked: a module's spin_lock, read_lock and write_lock are not seen (raw_spinlock_t is)")
    return out
