"""The sanitizers' hooks on the kernel's lock and sleeping functions (lockdep- and
might_sleep-class reports): the Sanitizer's locks half (a mixin of engine.Sanitizer)."""
from __future__ import annotations

from unicorn import arm_const as A

from ..hw import cpu
from . import locks as L
from .access import SP
from .report import Report, capture, lock_at, sym_at

R0, LR, CPSR = A.UC_ARM_REG_R0, A.UC_ARM_REG_LR, A.UC_ARM_REG_CPSR
TPIDRURO = cpu.cp15(13, 0, 0, 3)
PREEMPT_COUNT = 4                  # struct thread_info (first in task_struct): flags, preempt_count


class LockHooks:
    """engine.Sanitizer's lock, sleeper and lock-held-on-return hooks."""

    # --- locks ------------------------------------------------------------------------------------
    def _current(self, uc) -> int:
        return cpu.cp_read(uc, TPIDRURO)

    def _lock_entry(self, name, kind, op):
        def hook(uc, addr, size, _):
            lr = uc.reg_read(LR)
            mod = self.module_of(lr)
            if mod is None:
                if op == "release":
                    self._kernel_released(uc, uc.reg_read(R0))
                elif op.startswith("acquire") and kind == "mutex" and self.locks.held.get(self._current(uc)):
                    self._might_sleep(uc, name, lr)     # the kernel sleeping for the module, under its spinlock
                return
            lock = uc.reg_read(R0)
            task = self._current(uc)
            if op.startswith("acquire") and kind == "mutex":
                self._might_sleep(uc, name, lr)
            if op == "acquire":
                self._acquired(uc, task, lock, kind, name, mod, lr)
            elif op in ("try", "acquire_ret0"):
                data = {"task": task, "lock": lock, "kind": kind, "fn": name, "mod": mod, "op": op,
                        "stack": capture(uc, self.bk.m.read, self.task_name(task), lr_as_pc=True)}
                self._expect(lr, uc.reg_read(SP), self._try_returned, data)
            else:
                self._released(uc, task, lock, kind, name, mod, lr)
        return hook

    def _try_returned(self, uc, d) -> None:
        r = uc.reg_read(R0)
        if (d["op"] == "try" and r == 1) or (d["op"] == "acquire_ret0" and r == 0):
            self._acquired(uc, d["task"], d["lock"], d["kind"], d["fn"], d["mod"], 0, d["stack"])

    def _acquired(self, uc, task, lock, kind, fn, mod, lr, stack=None) -> None:
        st = stack or capture(uc, self.bk.m.read, self.task_name(task), lr_as_pc=True)
        held = self.locks.holding(task)
        for h in held:
            if h.lock == lock:
                continue
            back = self.locks.path(lock, h.lock)
            if back is not None and (h.lock, lock) not in self.locks.reported_pairs:
                self.locks.reported_pairs.add((h.lock, lock))
                self.locks.reported_pairs.add((lock, h.lock))
                self._circular(uc, task, h, lock, fn, mod, st, back)
            self.locks.edges.setdefault(h.lock, {}).setdefault(lock, (h.stack, st))
        held.append(L.Held(lock, kind, st, fn))
        self._filters_changed()
        if kind in L.INLINE_UNLOCK_STORE and lock not in self.spins:
            self.spins[lock] = kind
            for nr in self.nranges:
                nr.set_spins(self.spins)

    def _lock_name(self, lock: int) -> str:
        return lock_at(lock)

    def _circular(self, uc, task, h, lock, fn, mod, st, back) -> None:
        tn = self.task_name(task)
        first = self.locks.edges.get(lock, {}).get(back[1] if len(back) > 1 else h.lock)
        rep = Report("locks", "circular-locking", mod, "WARNING: possible circular locking dependency detected",
                     [f"{tn} is trying to acquire lock:", f" ({self._lock_name(lock)}), at: {sym_at(st.regs[15])}",
                      "", "but task is already holding lock:",
                      f" ({self._lock_name(h.lock)}), at: {sym_at(h.stack.regs[15])}", "",
                      "which lock already depends on the new lock.", "",
                      "the existing dependency chain (in reverse order) is:"])
        if first:
            rep.stacks.append((f"-> #1 ({self._lock_name(lock)}):", first[0]))
            rep.stacks.append((f"-> #0 ({self._lock_name(back[1] if len(back) > 1 else h.lock)}):", first[1]))
        rep.stacks.append(("other info that might help us debug this: the new acquisition:", st))
        rep.site_from = len(rep.stacks) - 1
        self.add(rep, ("circular", h.lock, lock))

    def _released(self, uc, task, lock, kind, fn, mod, lr) -> None:
        held = self.locks.holding(task)
        for i in range(len(held) - 1, -1, -1):
            if held[i].lock == lock:
                held.pop(i)
                self._filters_changed()
                return
        try:
            word = self.bk.u32(lock)
        except Exception:
            word = None
        state = L.lock_word_locked(kind, word) if word is not None else None
        if kind == "mutex" and state and (word & ~7) != task:
            state = False                               # locked, but by another task
        if state is False or state is None and kind != "mutex":
            if state is None:
                return
            tn = self.task_name(task)
            st = capture(uc, self.bk.m.read, tn, lr_as_pc=True)
            rep = Report("locks", "bad-unlock", mod, "WARNING: bad unlock balance detected!",
                         [f"{tn} is trying to release lock ({self._lock_name(lock)}) at:", f"{sym_at(lr)}",
                          "but there are no more locks to release!"], [("Call trace:", st)])
            self.add(rep, ("unlock", lr, lock))

    def _kernel_released(self, uc, lock: int) -> None:
        """Kernel code releases a lock the module holds: rtnl_lock() tail-calls mutex_lock (b
        mutex_lock: its LR is the module's, so the module took rtnl_mutex), rtnl_unlock() calls
        mutex_unlock from __rtnl_unlock. Released, never reported (the kernel's own balance)."""
        held = self.locks.held.get(self._current(uc), [])
        for i in range(len(held) - 1, -1, -1):
            if held[i].lock == lock:
                held.pop(i)
                self._filters_changed()
                return

    def _maybe_inline_unlock(self, uc, ea, pc, size) -> None:
        """A store by the module to a lock it took: the inlined spin_unlock (a halfword store to the
        ticket owner), read_unlock or write_unlock (a word store; locks.INLINE_UNLOCK_STORE)."""
        kind = self.spins.get(ea)
        if kind is None or not L.inline_unlock(kind, size):
            return
        task = self._current(uc)
        self._released(uc, task, ea, kind, f"{kind}_unlock", self.module_of(pc), pc)

    def _in_atomic(self, uc, task) -> list[str]:
        why = []
        held = self.locks.held.get(task, ())
        if any(h.kind in L.ATOMIC_KINDS for h in held):
            why.append("spinlock")
        if any(h.kind in L.RT_KINDS for h in held):
            why.append("rcu")
        if uc.reg_read(CPSR) & L.CPSR_I:
            why.append("irqs")
        pc = self.bk.u32(task + PREEMPT_COUNT) if task else 0
        if pc & (L.HARDIRQ_MASK | L.SOFTIRQ_MASK | L.NMI_MASK):
            why.append("interrupt")
        return why

    def _sleeper(self, name):
        def hook(uc, addr, size, _):
            lr = uc.reg_read(LR)
            task = self._current(uc)
            if self.module_of(lr) is None and not self.locks.held.get(task):
                return
            self._might_sleep(uc, name, lr)
        return hook

    def _might_sleep(self, uc, name, lr) -> None:
        if "locks" not in self.classes:
            return
        task = self._current(uc)
        why = self._in_atomic(uc, task)
        if not why:
            return
        held = self.locks.held.get(task, [])
        mod = self.module_of(lr) or (self.module_of(held[-1].stack.regs[15]) if held else None) or "?"
        tn = self.task_name(task)
        count = self.bk.u32(task + PREEMPT_COUNT)
        irqs = 1 if uc.reg_read(CPSR) & L.CPSR_I else 0
        atomic = 1 if ("spinlock" in why or count) else 0
        body = [f"in_atomic(): {atomic}, irqs_disabled(): {irqs}, non_block: 0, pid: {self.task_pid()}, "
                f"name: {tn.rsplit('/', 1)[0]}",
                f"preempt_count: {count + (len(held) if 'spinlock' in why else 0):x}, expected: 0"]
        rcu = sum(1 for h in held if h.kind in L.RT_KINDS)
        if rcu:
            body.append(f"RCU nest depth: {rcu}, expected: 0")
        if held:
            body.append(f"{len(held)} lock{'s' if len(held) > 1 else ''} held by {tn}:")
            for i, h in enumerate(held):
                body.append(f" #{i}: ({self._lock_name(h.lock)}), at: {sym_at(h.stack.regs[15])}")
        st = capture(uc, self.bk.m.read, tn, entry=True)
        rep = Report("locks", "sleep-in-atomic", mod, f"BUG: sleeping function called from invalid context at {name}",
                     body, [("Call trace:", st)])
        if held:
            rep.stacks.append(("the lock was taken at:", held[-1].stack))
        key = held[-1].stack.regs[15] if held else lr          # one report per lock hold / call site
        self.add(rep, ("sleep", key))

    def returned_to_user(self, uc, mod: str, what: str) -> None:
        if "locks" not in self.classes:
            return
        task = self._current(uc)
        held = [h for h in self.locks.held.get(task, []) if self.module_of(h.stack.regs[15]) in (mod, None)]
        if not held:
            return
        tn = self.task_name(task)
        body = [f"{tn} is leaving the kernel with locks still held! ({mod}'s {what} returned)",
                f"{len(held)} lock{'s' if len(held) > 1 else ''} held by {tn}:"]
        for i, h in enumerate(held):
            body.append(f" #{i}: ({self._lock_name(h.lock)}), at: {sym_at(h.stack.regs[15])}")
        rep = Report("locks", "lock-held-on-return", mod, "WARNING: lock held when returning to user space!", body,
                     [("the lock was taken at:", held[0].stack)])
        self.add(rep, ("held", mod, what, tuple(h.lock for h in held)))
        for h in held:                         # reported once: the next return is judged afresh
            self.locks.held[task].remove(h)
        self._filters_changed()
