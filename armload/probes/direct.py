"""armload's own direct trampolines (fentry/fexit style) on the ftrace site of a module function:
an EXTENSION, not a 32-bit ARM 6.1 feature.

On 32-bit ARM 6.1 BPF fentry/fexit do not exist: bpf_trampoline_update calls
arch_prepare_bpf_trampoline, which on ARM is only the weak stub of kernel/bpf/trampoline.c
returning -ENOTSUPP (the Debian Image holds just that stub), and ARM has no
DYNAMIC_FTRACE_WITH_DIRECT_CALLS. `bpf_trampoline()` says so, as the kernel would; what follows
is armload's design, offered for comparison and labelled as such wherever it is printed. On
ARM the kernel's way to see returns is function_graph (ftrace.py) or a kretprobe.

The site's NOP becomes `bl tramp` (range permitting: the trampoline is allocated next to the
module, as the kernel allocates trampolines with module_alloc; the module's fixed PLT entries
only hold FTRACE_ADDR and MCOUNT_ADDR). The trampoline is emitted ARM (or Thumb-2) code:

    stmdb sp!, {r0-r3, lr}      @ the arguments and the way back into the function
    mov   r0, sp
    bl    entry                 @ a trap: the entry handler sees r0-r3; fexit: hook the return
    ldmia sp!, {r0-r3}
    ldr   lr, [sp, #4]          @ mcount_exit: the caller's lr, as `push {lr}` saved it
    ldr   pc, [sp], #8
  exit:                         @ fexit: the function returns here (a trap: the exit handler
                                @ sees r0 = the return value, then the real caller)

For fexit the return address is found where the function keeps it at the site: the word
`push {lr}` saved (when the site opens the function), or the lr slot of the one `push {..., lr}`
prologue before it; any other prologue is refused.
"""
from __future__ import annotations

import struct

from unicorn import arm_const as A

from .base import ENOTSUPP, EOPNOTSUPP, refuse

EXTENSION = "armload extension: 32-bit ARM 6.1 has no BPF trampoline (arch_prepare_bpf_trampoline: -ENOTSUPP)"


def bpf_trampoline(probes, target, kind: str = "fentry"):
    """BPF_TRACE_FENTRY/FEXIT attach on 32-bit ARM 6.1: bpf_trampoline_update ->
    arch_prepare_bpf_trampoline, the weak stub, -ENOTSUPP (524). Raises that refusal, naming the
    Image's stub when it is mapped."""
    f = probes.function(target) if isinstance(target, str) else target
    img = probes.m.image
    where = ""
    if img is not None and "arch_prepare_bpf_trampoline" in img.symbols:
        where = f" (the Image's weak stub at {img.symbols['arch_prepare_bpf_trampoline']:#010x})"
    raise refuse(f"bpf_trampoline_update for {kind}:{f.name}", ENOTSUPP,
                 f"arch_prepare_bpf_trampoline{where} is not implemented on 32-bit ARM; armload's own "
                 f"trampolines (Probes.direct) are an extension")
from .ftrace import assemble, thumb_frame_code

_ARM = """
    stmdb sp!, {r0-r3, lr}
    mov r0, sp
    bl ENTRY
    ldmia sp!, {r0-r3}
    ldr lr, [sp, #4]
    ldr pc, [sp], #8
"""
EXIT_OFF, ENTRY_OFF, TRAMP_SIZE = 24, 32, 40


class DirectTrampoline:
    kind = "fentry"

    def __init__(self, probes, target, entry=None, exit=None, *, entry_code: int | None = None):
        self.p = probes
        self.func = probes.function(target) if isinstance(target, str) else target
        self.name = self.func.name
        self.entry, self.exit = entry, exit
        self.entry_code = entry_code            # emulated handler called by `bl` (no trap): fn(regs *)
        self.kind = "fexit" if exit is not None and entry is None else ("fentry+fexit" if exit else "fentry")
        self.site = probes.ftrace.site_of(self.func)
        self.thumb = self.site.thumb
        self.ret_slot = self._return_slot() if exit is not None else None
        self.instances: list[int] = []
        self.enabled = False
        self.tramp = 0

    def _return_slot(self) -> int:
        """Offset from the trampoline's sp (at the entry trap) of the word holding the return
        address: the trampoline's frame is ftrace_caller's (stmdb sp!, {r0-r3, lr}), so it is where
        prepare_ftrace_return would find the lr (Ftrace._parent_slot)."""
        p, f, s = self.p, self.func, self.site
        off = p.ftrace._parent_slot(s, 0)
        if off is None:
            raise refuse("register_fexit", EOPNOTSUPP, f"{self.name}: armload cannot find where the function "
                         f"keeps its return address at the ftrace site (prologue "
                         f"{p.read_original(f.start, max(0, s.addr - f.start)).hex()})")
        return off

    def _build(self) -> None:
        p, th = self.p, self.thumb
        t = p.alloc_kernel_near(TRAMP_SIZE) if self.func.module is p.ktext else p.alloc_near(self.func.module, TRAMP_SIZE)
        call = self.entry_code if self.entry_code is not None and self.exit is None else t + ENTRY_OFF
        if th:
            code = thumb_frame_code(t, call, struct.pack("<H", 0x4668))     # mov r0, sp
        else:
            code = assemble(_ARM, t, False, ENTRY=call & ~1)
        p.write_code(t, code)
        p.stub(th, self._on_entry, addr=t + ENTRY_OFF)
        if self.exit is not None:
            p.trap(t + EXIT_OFF, th, self._on_exit)
        self.tramp = t
        p.name_code(t, TRAMP_SIZE, f"direct_trampoline[{self.name}]")

    def enable(self):
        if not self.enabled:
            if not self.tramp:
                self._build()
            self.p.ftrace.make_call(self.site, self.tramp | (1 if self.thumb else 0), self, fixed_plt=False)
            self.enabled = True
        return self

    def disable(self):
        if self.enabled:
            self.p.ftrace.make_nop(self.site)
            self.enabled = False
        return self

    def sites(self):
        return []

    def _on_entry(self, machine) -> None:
        p = self.p
        sp = p.uc.reg_read(A.UC_ARM_REG_SP)
        frame = struct.unpack("<6I", p.read(sp, 24))
        if self.entry is not None:
            self.entry(p.hit("fentry", self.name, self.func.start, args=list(frame[:4]), caller=frame[5]))
        if self.exit is not None:
            slot = sp + self.ret_slot
            real = struct.unpack("<I", p.read(slot, 4))[0]
            self.instances.append((real, list(frame[:4])))
            p.uc.mem_write(slot, struct.pack("<I", (self.tramp + EXIT_OFF) | (1 if self.thumb else 0)))

    def _on_exit(self, machine, at) -> None:
        real, args = self.instances.pop()
        r0 = self.p.uc.reg_read(A.UC_ARM_REG_R0)
        self.exit(self.p.hit("fexit", self.name, self.func.start, ret=r0, args=args, caller=real))
        self.p.set_pc(real)
