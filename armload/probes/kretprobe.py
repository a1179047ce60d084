"""kretprobes: a kprobe at the function entry whose handler replaces the return address.

As kernel/kprobes.c (6.1) does it: register_kretprobe makes `maxactive` instances (default
max(10, 2 * num_possible_cpus()) = 10 with armload's one CPU, as CONFIG_PREEMPTION kernels do);
pre_handler_kretprobe takes a free instance, or counts rp->nmissed and leaves the return alone
when none is free; the instance (real return address, arguments) goes on the *current task's*
list (current->kretprobe_instances) and lr becomes __kretprobe_trampoline. The function returns
there: with the Image mapped that is the Image's own trampoline code (core.kretprobe_trampoline),
which calls trampoline_handler; it pops the task's innermost instance, runs the return handler
with r0, frees the instance and returns the real return address. The oops unwinder asks
Probes for the real address of a frame that returns to the trampoline (kretprobe_find_ret_addr).
"""
from __future__ import annotations

from unicorn import arm_const as A

from .kprobe import Kprobe

NUM_POSSIBLE_CPUS = 1


class Kretprobe:
    kind = "kretprobe"

    def __init__(self, probes, target, handler=None, entry_handler=None, maxactive: int = 0):
        self.p = probes
        self.handler, self.entry_handler = handler, entry_handler
        self.kp = Kprobe(probes, target, 0, pre=self._entry)
        self.kp.kind = "kretprobe-entry"
        self.func = self.kp.func
        self.name = self.func.name
        # register_kretprobe: maxactive <= 0 means max(10, 2 * num_possible_cpus())
        self.maxactive = maxactive if maxactive > 0 else max(10, 2 * NUM_POSSIBLE_CPUS)
        self.free = self.maxactive       # instances in rp->freelist
        self.nmissed = 0
        self.nhit = 0                    # returns that ran the handler

    def register(self):
        self.kp.register()
        self.tramp = self.p.kretprobe_trampoline()

    def enable(self):
        self.kp.enable()
        return self

    def disable(self):
        self.kp.disable()
        return self

    def unregister(self):
        self.kp.unregister()

    @property
    def enabled(self):
        return self.kp.enabled

    def sites(self):
        return self.kp.sites()

    def _entry(self, hit) -> None:
        """pre_handler_kretprobe."""
        uc = self.p.uc
        self.p.charge("kretprobe-entry")
        if self.free == 0:               # no free instance: the return is not probed
            self.nmissed += 1
            return
        lr = uc.reg_read(A.UC_ARM_REG_LR)
        if self.entry_handler is not None:
            hit.kind = "kretprobe-entry"
            if self.entry_handler(hit):  # a non-zero entry_handler return: the instance goes back
                return
        self.free -= 1
        self.p.kret_instances().append((self, lr, hit.args))
        uc.reg_write(A.UC_ARM_REG_LR, self.tramp)

    def returned(self, ret: int, args, r0: int) -> int:
        """At the trampoline: the return handler, then the real return address."""
        self.free += 1
        self.nhit += 1
        h = self.p.hit("kretprobe", self.name, self.func.start, ret=r0, args=args, caller=ret)
        if self.handler is not None:
            self.handler(h)
        return ret
