"""kretprobes: a kprobe at the function entry whose handler replaces the return address.

As kernel/kprobes.c does (pre_handler_kretprobe): at entry the real return address (lr) is
saved in an instance and lr is set to the kretprobe trampoline; the function returns there;
the trampoline (__kretprobe_trampoline: the image's address, or a simulated one) runs the
return handler with r0 (the return value) and continues at the real caller. Instances are a
per-task LIFO (recursion works; longjmp-style unwinding does not, as with the kernel's).
"""
from __future__ import annotations

from unicorn import arm_const as A

from .kprobe import Kprobe


class Kretprobe:
    kind = "kretprobe"

    def __init__(self, probes, target, handler=None, entry_handler=None):
        self.p = probes
        self.handler, self.entry_handler = handler, entry_handler
        self.kp = Kprobe(probes, target, 0, pre=self._entry)
        self.kp.kind = "kretprobe-entry"
        self.func = self.kp.func
        self.name = self.func.name
        self.instances: list[tuple[int, list[int]]] = []
        self.nmissed = 0

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
        uc = self.p.uc
        lr = uc.reg_read(A.UC_ARM_REG_LR)
        if self.entry_handler is not None:
            hit.kind = "kretprobe-entry"
            self.entry_handler(hit)
        self.instances.append((lr, hit.args))
        self.p._kret_stack.append(self)
        uc.reg_write(A.UC_ARM_REG_LR, self.tramp)

    def returned(self) -> int:
        """At the trampoline: the return handler, then the real return address."""
        ret, args = self.instances.pop()
        r0 = self.p.uc.reg_read(A.UC_ARM_REG_R0)
        h = self.p.hit("kretprobe", self.name, self.func.start, ret=r0, args=args, caller=ret)
        if self.handler is not None:
            self.handler(h)
        return ret
