"""A booted Debian kernel to call into: booted once per (vmlinuz, cmdline), cached, restored
copy-on-write for each use.

    k = BootedKernel.get(vmlinuz)            # boots once (says so on stderr), else restores
    k.call("msleep", 10)                     # from pid 1 (stopped at run_init_process)
    p = k.call("vmalloc", 4096); k.write(p, b"...")
    k.run_until_idle(50_000_000)             # simulated ns: kthreads, workqueues, RCU, timers

Calls run the kernel's own code from pid 1's context: r0-r3 and the stack carry the arguments,
LR is the return trap, the entry of run_init_process, where pid 1 is parked and which no other
code calls (head.S's stext at its virtual address is never executed either, but after
mark_readonly it is not executable: returning there is a prefetch abort, not a stop), and the
run ends when PC reaches it. While the callee sleeps, the kernel's
scheduler runs other tasks and the idle loop; timer interrupts are taken as they fall due.
Budgets are instructions (the call's own and everything that ran meanwhile).
"""
from __future__ import annotations

import os
import struct

from unicorn import UC_HOOK_CODE
from unicorn import arm_const as A

from ..hw.blocks import starts_block
from ..hw.tick import BlockHook
from . import snapshot
from .boot import DEFAULT_CMDLINE, INITRD_PA, SETTLE_NS, boot_machine, device_tree
from .initramfs import build as build_initramfs
from .machine import GuestFault, Machine

GFP_KERNEL = 0xCC0
CALL_BUDGET = 2_000_000_000
_CORE = ["r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9", "r10", "r11", "r12", "sp", "lr", "pc", "cpsr"]


class CallError(Exception):
    """A call into the booted kernel did not return (budget, or the machine stopped)."""


def default_cache_root() -> str:
    from ...kernel.cache import cache_dir
    return cache_dir("boot")


class BootedKernel:
    def __init__(self, image, machine: Machine, meta: dict, directory: str | None = None):
        self.image = image
        self.m = machine
        self.meta = meta
        self.directory = directory
        self.trap = image.symbols["run_init_process"]   # where pid 1 is parked (see above)
        self.console_mark = len(machine.hw.uart.lines)
        # service_handler(request) -> r0: what the host does for a request a hook stopped on
        # (modrun: /sbin/modprobe for request_module); `servicing` is the nesting depth.
        self.service_handler = None
        self.servicing = 0
        # every call runs through the watch: a panic, restart/halt/power-off end it; a proven spin
        # advances time to the next timer event; budgets in instructions and simulated time (hostile.py)
        from .hostile import Watch
        self.watch = Watch(self)

    # --- construction ------------------------------------------------------------------------
    @classmethod
    def snapshot_dir(cls, vmlinuz: str, cmdline: str = DEFAULT_CMDLINE, cache_root: str | None = None) -> str:
        cpio = build_initramfs()
        blob = device_tree(cmdline, (INITRD_PA, INITRD_PA + len(cpio)))
        return os.path.join(cache_root or default_cache_root(), snapshot.key(vmlinuz, blob, cmdline))

    @classmethod
    def get(cls, vmlinuz: str, cmdline: str = DEFAULT_CMDLINE, cache_root: str | None = None) -> BootedKernel:
        """Restore the cached booted state, booting first (once) when there is none."""
        from ...kernel.image import load_image
        image = load_image(vmlinuz)
        d = cls.snapshot_dir(vmlinuz, cmdline, cache_root)
        if not os.path.exists(os.path.join(d, "state.pkl")):
            snapshot.announce(d)
            import time
            t0 = time.monotonic()
            m = boot_machine(image, cmdline)
            # the deferred work of the boot runs to idle once, here, not in every restore (boot.py)
            settled = cls(image, m, {}).run_until_idle(SETTLE_NS)
            meta = {"cmdline": cmdline, "boot_insns": m.t.insns, "boot_seconds": round(time.monotonic() - t0, 2),
                    "vmlinuz": os.path.abspath(vmlinuz), "settled": settled}
            os.makedirs(os.path.dirname(d), exist_ok=True)
            snapshot.save(m, d, meta)
        m, meta = snapshot.load(image, d)
        return cls(image, m, meta, d)

    # --- memory --------------------------------------------------------------------------------
    def addr(self, name_or_addr) -> int:
        if isinstance(name_or_addr, int):
            return name_or_addr
        a = self.image.address(name_or_addr)
        if a is None:
            raise KeyError(f"the kernel has no symbol {name_or_addr!r}")
        return a

    def read(self, va: int, n: int) -> bytes:
        return self.m.read(va, n)

    def write(self, va: int, data: bytes) -> None:
        self.m.write(va, data)

    def u32(self, va) -> int:
        return self.m.u32(self.addr(va))

    def cstr(self, va: int, limit: int = 256) -> str:
        return self.m.cstr(va, limit)

    @property
    def insns(self) -> int:
        return self.m.t.insns

    def now_ns(self) -> int:
        return self.m.now_ns()

    @property
    def console(self) -> list[str]:
        return self.m.hw.uart.lines

    def console_since(self, mark: int) -> list[str]:
        return self.m.hw.uart.lines[mark:]

    # --- hooks ---------------------------------------------------------------------------------
    def hook_code(self, addr: int, fn):
        """fn(uc, addr, size, None) before each run of the instruction at `addr`; the handle for
        `unhook`. Where every run of it starts a block (hw/blocks.py) the block hook calls it, out
        of Unicorn's code-hook list; elsewhere a code hook: Unicorn puts those into blocks as it
        translates them, so a block translated before (the address already ran) is dropped."""
        if starts_block(self.image, addr):
            return self.m.block_hooks.add(addr, fn)
        h = self.m.uc.hook_add(UC_HOOK_CODE, fn, begin=addr, end=addr)
        self.m.uc.ctl_remove_cache(addr & ~1, (addr & ~1) + 4)
        return h

    def unhook(self, h) -> None:
        """Remove a hook `hook_code` returned."""
        if isinstance(h, BlockHook):
            self.m.block_hooks.remove(h)
        else:
            self.m.uc.hook_del(h)

    # --- calls ---------------------------------------------------------------------------------
    def call(self, fn, *args: int, budget: int = CALL_BUDGET) -> int:
        """r0 of `fn(*args)` run from pid 1; the CPU's core registers are put back afterwards."""
        m, uc = self.m, self.m.uc
        saved = {r: m.reg(r) for r in _CORE}
        try:
            sp = saved["sp"]
            extra = [a & 0xFFFFFFFF for a in args[4:]]
            if extra:
                sp = (sp - 4 * len(extra)) & ~7
                m.write(sp, struct.pack(f"<{len(extra)}I", *extra))
            else:
                sp &= ~7
            for i, a in enumerate(args[:4]):
                m.set_reg(f"r{i}", a)
            m.set_reg("sp", sp)
            m.set_reg("lr", self.trap)
            uc.reg_write(A.UC_ARM_REG_CPSR, (saved["cpsr"] & ~0xFF) | 0x13)   # SVC, IRQs on, ARM
            m.set_reg("pc", self.addr(fn))
            how = self.run_serviced(self.trap, budget)
            if how != "until":
                raise CallError(f"{fn}: did not return within {budget} instructions "
                                f"(pc {m.reg('pc'):#x})")
            return m.reg("r0")
        finally:
            for r in _CORE:
                if r != "cpsr":
                    m.set_reg(r, saved[r])
            uc.reg_write(A.UC_ARM_REG_CPSR, saved["cpsr"])

    def sym(self, *names: str) -> str:
        """The first of `names` this kernel has: 6.10+ renamed allocators for memory allocation
        profiling (__kmalloc -> __kmalloc_noprof, vmalloc -> vmalloc_noprof)."""
        return next((n for n in names if n in self.image.symbols), names[0])

    def copy_to_user(self, ua: int, kaddr: int, n: int) -> int:
        """The kernel's copy_to_user of n bytes from kaddr to pid 1's ua: the bytes left uncopied.
        6.12 inlines _copy_to_user: its out-of-line copy of the inline (access_ok, uaccess enabled)
        stands in; 6.1 LPAE has neither, and no domain PAN to enable: its raw arm_copy_to_user."""
        return self.call(self.sym("_copy_to_user", "_inline_copy_to_user", "arm_copy_to_user"), ua, kaddr, n)

    def run_serviced(self, until: int, budget: int) -> str:
        """Machine.run to `until`, serving the requests hooks stop on (service_handler) on the way."""
        m, uc = self.m, self.m.uc
        i0 = self.insns
        how = self.watch.run(until, budget)
        while how == "service":                       # a hook stopped at a function's entry
            req, m.service = m.service, None
            ctx = uc.context_save()
            self.servicing += 1
            try:
                r0 = self.service_handler(req) if self.service_handler else None
            finally:
                self.servicing -= 1
            uc.context_restore(ctx)
            if r0 is not None:                        # the hooked function returns r0 at once
                lr = m.reg("lr")
                m.set_reg("r0", r0)
                uc.reg_write(A.UC_ARM_REG_CPSR, uc.reg_read(A.UC_ARM_REG_CPSR) & ~0x20 | (0x20 if lr & 1 else 0))
                m.set_reg("pc", lr & ~1)
            how = self.watch.run(until, max(1, budget - (self.insns - i0)))
        return how

    def kmalloc(self, size: int, gfp: int = GFP_KERNEL) -> int:
        return self.call(self.sym("__kmalloc", "__kmalloc_noprof"), size, gfp)

    def module_alloc(self, size: int) -> int:
        """Executable kernel memory where modules go: module_alloc(size) until 6.9, 6.10+'s
        execmem_alloc(EXECMEM_MODULE_TEXT = 0, size) (include/linux/execmem.h; PAGE_KERNEL_EXEC on ARM)."""
        if "module_alloc" in self.image.symbols:
            return self.call("module_alloc", size)
        return self.call("execmem_alloc", 0, size)

    def vmalloc(self, size: int) -> int:
        return self.call(self.sym("vmalloc", "vmalloc_noprof"), size)

    def kfree(self, p: int) -> None:
        self.call("kfree", p)

    def vfree(self, p: int) -> None:
        self.call("vfree", p)

    def run_until_idle(self, budget_ns: int, step_ms: int = 10, quiet_ns: int = 200_000_000,
                       insn_budget: int = CALL_BUDGET) -> dict:
        """boot.run_until_idle on this kernel: deferred work runs until the system is idle."""
        from .boot import run_until_idle
        return run_until_idle(self, budget_ns, step_ms, quiet_ns, insn_budget)


__all__ = ["BootedKernel", "CallError", "GuestFault"]
