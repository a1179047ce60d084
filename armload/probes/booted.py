"""The booted kernel's own probes: kprobes, kretprobes, ftrace and function_graph of the Debian
Image, registered and run by the kernel itself (armload/emu/booted).

    kp = KernelProbes(k)                                 # k: a BootedKernel
    p = kp.kprobe("__set_task_comm", pre=lambda h: print(h.format()))
    kp.wait_optimizer()                                  # OPTIMIZE_DELAY: the kernel's kprobe_optimizer runs
    p.optimized, p.nmissed, p.hits; p.disable(); p.enable(); p.unregister()
    kp.kretprobe("do_sys_openat2", handler=lambda h: h.ret)
    kp.ftrace(["vfs_read", "vfs_write"], handler)        # several users per function: the kernel's ftrace_ops list
    kp.graph(["__set_task_comm"], entry=h1, ret=h2)      # function_graph (one user at a time in 6.1)

What runs is the kernel's: the host fills `struct kprobe`/`kretprobe`/`ftrace_ops`/`fgraph_ops`
(kmalloc'd, zeroed) and calls register_kprobe, register_kretprobe, register_ftrace_function
(+ ftrace_set_filter) and register_ftrace_graph (+ ftrace_set_global_filter). The kernel decodes
the instruction (arch/arm/probes/kprobes: its own tables and refusals), patches text through
patch_text and stop_machine, hashes the probe, takes the breakpoint through the emulated UNDEF
entry, __und_svc and its undef hook, single-steps or simulates, optimizes after OPTIMIZE_DELAY
(`b` to a detour buffer from get_optinsn_slot), returns through the Image's
__kretprobe_trampoline, and chains ftrace_ops. Its return values are the verdicts.

A handler is a Python callable `fn(hit)` or ARM code: an address (a module's or the Image's
function) or bytes of position-independent code copied into module_alloc memory. A Python
handler is entered at a `bx lr` stub in module_alloc memory: a code hook on that one address
runs it and puts its return value in r0, so the kernel's path up to the handler call and after
it is emulated, and the handler itself costs one instruction. A Python handler cannot call into
the kernel (write ARM code for that).

Layouts are 6.1's for 32-bit ARM (include/linux/kprobes.h, ftrace.h; checked against the Image:
register_kprobe fills `addr` from `symbol_name`, sets KPROBE_FLAG_ON_FUNC_ENTRY, and a kretprobe's
maxactive becomes 10).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

from unicorn import arm_const as A

from ..emu.booted.machine import GuestFault
from .base import ProbeError, errno_name

GFP_ZERO = 0xCC0 | 0x100                  # GFP_KERNEL | __GFP_ZERO
PAGE = 0x1000
BX_LR, MOV_R0_0 = 0xE12FFF1E, 0xE3A00000

# include/linux/kprobes.h (6.1), 32-bit: hlist 0, list 8, nmissed 16, addr 20, symbol_name 24,
# offset 28, pre_handler 32, post_handler 36, opcode 40, ainsn 44 (struct arch_probes_insn, 32), flags 76
KPROBE = {"list": 8, "nmissed": 16, "addr": 20, "symbol_name": 24, "offset": 28, "pre_handler": 32,
          "post_handler": 36, "opcode": 40, "flags": 76, "size": 80}
# struct kretprobe: kp, handler, entry_handler, maxactive, nmissed, data_size, freelist, rph
KRETPROBE = {"handler": 80, "entry_handler": 84, "maxactive": 88, "nmissed": 92, "data_size": 96, "size": 108}
# struct kretprobe_instance (no rethook on ARM 6.1): union{freelist, rcu_head} 0, llist 8, rph 12, ret_addr 16, fp 20
KRI_RPH, KRI_RET_ADDR = 12, 16        # struct kretprobe_holder {struct kretprobe *rp; refcount_t ref}
ARM_BREAKPOINT = 0x07F001F8              # arch/arm/probes/kprobes/core.h KPROBE_ARM_BREAKPOINT_INSTRUCTION (| cond)
KPROBE_FLAG = {"gone": 1, "disabled": 2, "optimized": 4, "ftrace": 8, "on_func_entry": 16}
# include/linux/ftrace.h: struct ftrace_ops {func, next, flags, private, saved_func, local_hash, ...}
FTRACE_OPS_SIZE, FTRACE_OPS_FLAGS = 256, 8
FTRACE_OPS_FL_SAVE_REGS = 1 << 2           # ARM 6.1 has ftrace_regs_caller: the handler gets pt_regs
# struct fgraph_ops {entryfunc, retfunc}; ftrace_graph_ent {func, depth};
# ftrace_graph_ret {func, depth, overrun, calltime (u64), rettime (u64)} __packed
FGRAPH_OPS_SIZE = 8
PT_REGS_WORDS = 18                        # arch/arm/include/uapi/asm/ptrace.h: r0-r12, sp, lr, pc, cpsr, ORIG_r0
KPROBE_OPT_DELAY_MS = 100                 # kernel/kprobes.c OPTIMIZE_DELAY is 5 jiffies; 100 ms covers any HZ


def _s32(v: int) -> int:
    return v - (1 << 32) if v & 0x80000000 else v


@dataclass
class KHit:
    """One handler call: what the kernel passed to it."""
    kind: str                 # kprobe, kprobe-post, kretprobe, kretprobe-entry, ftrace, graph-entry, graph-return
    target: str
    addr: int                 # the probed address (kprobe), the function (ftrace, graph)
    args: list[int]           # r0-r3 at the probe (from pt_regs; [] where the kernel passes none)
    caller: int               # lr at the probe, parent_ip (ftrace), the return address (kretprobe)
    insns: int
    time_ns: int
    ret: int | None = None    # kretprobe: regs->ARM_r0
    regs: int = 0             # struct pt_regs * the handler got (0 for graph)
    depth: int | None = None  # function_graph
    duration_ns: int | None = None
    kernel: object = field(default=None, repr=False)

    def caller_sym(self) -> str:
        return _sym(self.kernel, self.caller) if self.kernel is not None else f"{self.caller:#x}"

    def set_reg(self, index: int, value: int) -> None:
        """Change pt_regs->uregs[index] (a pre-handler changing what the probed code sees)."""
        if not self.regs:
            raise ProbeError(f"{self.kind}: this handler gets no struct pt_regs")
        self.kernel.write(self.regs + 4 * index, struct.pack("<I", value & 0xFFFFFFFF))

    def format(self) -> str:
        s = f"[{self.kind}] {self.target} @ {self.addr:#010x}"
        if self.ret is not None:
            s += f" returned {_s32(self.ret)} ({self.ret:#x})"
        elif self.args:
            s += " (" + ", ".join(f"{a:#x}" for a in self.args) + ")"
        if self.duration_ns is not None:
            s += f" in {self.duration_ns} ns"
        return s + f" <- {self.caller_sym()}"

    def to_dict(self) -> dict:
        return {"kind": self.kind, "target": self.target, "addr": self.addr, "args": self.args,
                "caller": self.caller, "caller_sym": self.caller_sym(), "ret": self.ret, "depth": self.depth,
                "duration_ns": self.duration_ns, "insns": self.insns, "time_ns": self.time_ns}


def _sym(k, addr: int) -> str:
    """%pS without the size, from the Image's kallsyms (host side: handlers run inside a code hook
    and cannot call the kernel's sprint_symbol); a module address is shown bare unless a
    symbolizer knows it."""
    extra = getattr(k, "symbolizer", None)
    if extra is not None:
        s = extra(addr)
        if s:
            return s
    table = k.image.kallsyms
    pos = table.symbol_pos(addr) if table is not None else None
    if pos is None:
        return f"{addr:#x}"
    i, _size, off = pos
    return f"{table.symbol(i)[2]}+{off:#x}"


class KernelProbe:
    """One registered probe (the kernel's structure at `struct`)."""

    def __init__(self, kp: KernelProbes, kind: str, target: str, struct_va: int):
        self.kp, self.kind, self.target, self.struct = kp, kind, target, struct_va
        self.hits = 0
        self.registered = True
        self.hooks: list[int] = []        # this probe's code hooks (Python handlers, hit counters)

    @property
    def _k(self):
        return self.kp.k

    @property
    def addr(self) -> int:
        return self._k.u32(self.struct + KPROBE["addr"]) if self.kind in ("kprobe", "kretprobe") else 0

    @property
    def nmissed(self) -> int:
        off = KRETPROBE["nmissed"] if self.kind == "kretprobe" else KPROBE["nmissed"]
        return self._k.u32(self.struct + off)

    @property
    def maxactive(self) -> int:
        return self._k.u32(self.struct + KRETPROBE["maxactive"])

    def flags(self) -> set[str]:
        """KPROBE_FLAG_* of the probe the kernel hashed at this address (the aggregate when the
        kernel made one: an optimized probe is always one)."""
        hashed = self._k.call("get_kprobe", self.addr) or self.struct
        f = self._k.u32(hashed + KPROBE["flags"])
        return {n for n, b in KPROBE_FLAG.items() if f & b}

    def state(self) -> str:
        """What the kernel's text holds at the probe now: "optimized" (`b` to the detour buffer),
        "breakpoint" (the undefined instruction), "disarmed" (the original instruction) or "gone"
        (the kernel killed it: its module's init text was freed, or the module went). An
        aggregate probe is flagged optimized as soon as it is queued for kprobe_optimizer; the
        text tells whether the optimizer has run."""
        if "gone" in self.flags():
            return "gone"
        w = self._k.u32(self.addr)
        if (w & 0x0FFFFFFF) == ARM_BREAKPOINT:
            return "breakpoint"
        if (w & 0x0F000000) == 0x0A000000 and "optimized" in self.flags():
            return "optimized"
        return "disarmed"

    @property
    def optimized(self) -> bool:
        return self.state() == "optimized"

    def disable(self) -> int:
        return self._toggle("disable")

    def enable(self) -> int:
        return self._toggle("enable")

    def _toggle(self, how: str) -> int:
        if self.kind not in ("kprobe", "kretprobe"):
            raise ProbeError(f"{how}_kprobe: {self.kind} {self.target} is not a kprobe")
        return _s32(self._k.call(f"{how}_kprobe", self.struct))

    def unregister(self) -> None:
        if not self.registered:
            return
        fn = {"kprobe": "unregister_kprobe", "kretprobe": "unregister_kretprobe",
              "ftrace": "unregister_ftrace_function", "graph": "unregister_ftrace_graph"}[self.kind]
        self._k.call(fn, self.struct)
        self.registered = False
        del self.kp.probes[id(self)]
        self.kp.drop_hooks(self.hooks)
        self._k.kfree(self.struct)        # the kernel no longer refers to it (unregister synchronized)

    def to_dict(self) -> dict:
        d = {"kind": self.kind, "target": self.target, "hits": self.hits, "registered": self.registered}
        if self.kind in ("kprobe", "kretprobe") and self.registered:
            d.update(addr=self.addr, nmissed=self.nmissed, flags=sorted(self.flags()))
        return d


class KernelProbes:
    """The probe machinery of one BootedKernel."""

    def __init__(self, k, on_hit=None):
        self.k = k
        self.on_hit = on_hit              # called with every KHit (after the handler)
        self.probes: dict[int, KernelProbe] = {}          # registered, in order (dict: O(1) unregister)
        self._text, self._used = 0, PAGE
        self._hooks = []
        self._new_hooks: list[int] = []   # hooks of the probe being registered
        self.handler_stubs: dict[int, tuple] = {}

    def drop_hooks(self, hooks: list[int]) -> None:
        for h in hooks:
            if h in self._hooks:
                self.k.unhook(h)
                self._hooks.remove(h)
        hooks.clear()

    # --- handler entry points ----------------------------------------------------------------
    def _alloc_text(self, n: int) -> int:
        """n bytes of never-executed module_alloc memory (executable: PAGE_KERNEL_EXEC)."""
        n = (n + 7) & ~7
        if n > PAGE:
            return self._module_alloc(n)
        if self._used + n > PAGE:
            self._text, self._used = self._module_alloc(PAGE), 0
        a = self._text + self._used
        self._used += n
        return a

    def _module_alloc(self, n: int) -> int:
        a = self.k.module_alloc((n + PAGE - 1) & ~(PAGE - 1))
        if not a:
            raise ProbeError("module_alloc failed in the booted kernel (handler text)", errno=-12)
        return a

    def handler(self, fn, kind: str, probe_ref: list, default_r0: int = 0, count: bool = True) -> int:
        """The address the kernel should call for handler `fn` (Python callable, ARM address or bytes)."""
        if fn is None:
            return 0
        if isinstance(fn, int):
            entry = fn
        elif isinstance(fn, (bytes, bytearray)):
            entry = self._alloc_text(len(fn))
            self.k.write(entry, bytes(fn))
        elif callable(fn):
            entry = self._alloc_text(8)
            self.k.write(entry, struct.pack("<II", BX_LR, BX_LR))
            self.handler_stubs[entry] = (fn, kind, probe_ref, default_r0)
            self._hooks.append(self.k.hook_code(entry, self._python))
            self._new_hooks.append(self._hooks[-1])
            return entry
        else:
            raise ProbeError(f"a handler is a Python callable, an address or ARM code, not {type(fn).__name__}")
        if count:
            self._hooks.append(self.k.hook_code(entry & ~1, lambda uc, a, s, d: self._count(uc, kind, probe_ref)))
            self._new_hooks.append(self._hooks[-1])
        return entry

    def _count(self, uc, kind: str, probe_ref) -> None:
        """A hit of ARM handler code, counted for the probe the kernel is calling it for (one
        handler may serve several probes): the kprobe is r0, the ftrace_ops r2, a kretprobe
        instance's holder (r0 + 12) points at its kretprobe."""
        if not probe_ref:
            return
        probe = probe_ref[0]
        if kind in ("kprobe", "kprobe-post"):
            mine = uc.reg_read(A.UC_ARM_REG_R0) == probe.struct
        elif kind == "ftrace":
            mine = uc.reg_read(A.UC_ARM_REG_R2) == probe.struct
        elif kind.startswith("kretprobe"):
            try:                                                 # r0 is an instance only when this is a kretprobe's call
                rph = self.k.u32(uc.reg_read(A.UC_ARM_REG_R0) + KRI_RPH)
                mine = bool(rph) and self.k.u32(rph) == probe.struct
            except GuestFault:
                mine = False
        else:
            mine = True                                          # function_graph: one user at a time
        probe.hits += mine

    def _regs(self, va: int) -> list[int]:
        return list(struct.unpack(f"<{PT_REGS_WORDS}I", self.k.read(va, 4 * PT_REGS_WORDS)))

    def _python(self, uc, addr, size, _):
        fn, kind, ref, default_r0 = self.handler_stubs[addr]
        probe = ref[0] if ref else None
        r = [uc.reg_read(x) for x in (A.UC_ARM_REG_R0, A.UC_ARM_REG_R1, A.UC_ARM_REG_R2, A.UC_ARM_REG_R3)]
        hit = self._hit(kind, probe, r)
        if probe is not None:
            probe.hits += 1
        out = fn(hit)
        if self.on_hit:
            self.on_hit(hit)
        uc.reg_write(A.UC_ARM_REG_R0, (default_r0 if out is None else int(out)) & 0xFFFFFFFF)

    def _hit(self, kind: str, probe, r: list[int]) -> KHit:
        k = self.k
        target = probe.target if probe else "?"
        common = {"insns": k.insns, "time_ns": k.now_ns(), "kernel": k}
        if kind in ("kprobe", "kprobe-post", "kretprobe", "kretprobe-entry"):
            regs = self._regs(r[1])
            h = KHit(kind, target, probe.addr if probe else regs[15], regs[:4], regs[14], regs=r[1], **common)
            if kind == "kretprobe":
                h.ret, h.caller = regs[0], k.u32(r[0] + KRI_RET_ADDR)
                h.args = []
            return h
        if kind == "ftrace":                  # (ip, parent_ip, ops, fregs)
            args = self._regs(r[3])[:4] if r[3] else []
            return KHit(kind, target, r[0], args, r[1], regs=r[3], **common)
        func, depth = struct.unpack("<Ii", k.read(r[0], 8))
        if kind == "graph-entry":
            return KHit(kind, target, func, [], 0, depth=depth, **common)
        calltime, rettime = struct.unpack("<QQ", k.read(r[0] + 12, 16))
        return KHit(kind, target, func, [], 0, depth=depth, duration_ns=rettime - calltime, **common)

    # --- registration ------------------------------------------------------------------------
    def _string(self, s: str) -> int:
        data = s.encode() + b"\0"
        p = self.k.kmalloc(len(data), GFP_ZERO)
        self.k.write(p, data)
        return p

    def _zalloc(self, n: int) -> int:
        p = self.k.kmalloc(n, GFP_ZERO)
        if not p:
            raise ProbeError(f"kmalloc({n}) failed in the booted kernel", errno=-12)
        return p

    def _place(self, p: int, target) -> str:
        """Fill addr or symbol_name+offset as kprobe_events would from FUNC, MOD:FUNC, FUNC+OFF, 0xADDR."""
        if isinstance(target, int):
            self.k.write(p + KPROBE["addr"], struct.pack("<I", target))
            return f"{target:#x}"
        name, plus, off = target.partition("+")
        if name.lower().startswith("0x"):
            self.k.write(p + KPROBE["addr"], struct.pack("<I", int(name, 16) + (int(off, 0) if plus else 0)))
            return target
        self.k.write(p + KPROBE["symbol_name"], struct.pack("<I", self._string(name)))
        if plus:
            self.k.write(p + KPROBE["offset"], struct.pack("<I", int(off, 0)))
        return target

    def _register(self, fn: str, p: int, kind: str, label: str, ref: list) -> KernelProbe:
        hooks, self._new_hooks = self._new_hooks, []
        ret = _s32(self.k.call(fn, p))
        if ret:
            self.drop_hooks(hooks)
            e = ProbeError(f"{fn}({label}) failed, returned {ret} (-{errno_name(ret)})", errno=ret)
            e.struct = p                  # the refused structure, as the kernel left it (not freed)
            raise e
        probe = KernelProbe(self, kind, label, p)
        probe.hooks = hooks
        ref.append(probe)
        self.probes[id(probe)] = probe
        return probe

    def kprobe(self, target, pre=None, post=None, *, disabled: bool = False, count: bool = True) -> KernelProbe:
        """register_kprobe on FUNC, MODULE:FUNC, FUNC+OFF or an address; the kernel's errno on refusal."""
        p, ref = self._zalloc(KPROBE["size"]), []
        label = self._place(p, target)
        hdr = struct.pack("<II", self.handler(pre, "kprobe", ref, count=count),
                          self.handler(post, "kprobe-post", ref, count=count))
        self.k.write(p + KPROBE["pre_handler"], hdr)
        if disabled:
            self.k.write(p + KPROBE["flags"], struct.pack("<I", KPROBE_FLAG["disabled"]))
        return self._register("register_kprobe", p, "kprobe", label, ref)

    def kretprobe(self, target, handler=None, entry=None, *, maxactive: int = 0, count: bool = True) -> KernelProbe:
        """register_kretprobe: `handler` at the return (hit.ret is the value), `entry` at the call."""
        p, ref = self._zalloc(KRETPROBE["size"]), []
        label = self._place(p, target)
        self.k.write(p + KRETPROBE["handler"], struct.pack(
            "<IIi", self.handler(handler, "kretprobe", ref, count=count),
            self.handler(entry, "kretprobe-entry", ref, count=count), maxactive))
        return self._register("register_kretprobe", p, "kretprobe", label, ref)

    def lookup(self, name: str) -> int:
        """The kernel's own kallsyms_lookup_name (MODULE:FUNC too); 0 when it has no such symbol."""
        return self.k.call("kallsyms_lookup_name", self._string(name))

    def _resolve(self, functions) -> list[tuple[str, int]]:
        out = []
        for f in [functions] if isinstance(functions, str) else list(functions):
            a = self.lookup(f.removeprefix("vmlinux:"))
            if not a:
                raise ProbeError(f"{f}: the kernel's kallsyms_lookup_name does not know it", errno=-2)
            out.append((f, a))
        return out

    def ftrace(self, functions, handler, *, count: bool = True) -> KernelProbe:
        """register_ftrace_function, filtered to `functions` (FUNC or MODULE:FUNC, found with the
        kernel's kallsyms_lookup_name, put in the filter by ftrace_set_filter_ip as the kernel's own
        users do); handler(ip, parent_ip, ops, fregs) with pt_regs (FTRACE_OPS_FL_SAVE_REGS)."""
        found = self._resolve(functions)
        ops, ref = self._zalloc(FTRACE_OPS_SIZE), []
        self.k.write(ops, struct.pack("<I", self.handler(handler, "ftrace", ref, count=count)))
        self.k.write(ops + FTRACE_OPS_FLAGS, struct.pack("<I", FTRACE_OPS_FL_SAVE_REGS))
        for i, (f, a) in enumerate(found):
            ret = _s32(self.k.call("ftrace_set_filter_ip", ops, a, 0, 1 if i == 0 else 0))
            if ret:
                self.drop_hooks(self._new_hooks)
                raise ProbeError(f"ftrace_set_filter_ip({f}) failed, returned {ret} (-{errno_name(ret)})", errno=ret)
        return self._register("register_ftrace_function", ops, "ftrace", ",".join(f for f, _ in found), ref)

    def graph(self, functions, entry=None, ret=None, *, count: bool = True) -> KernelProbe:
        """register_ftrace_graph (6.1: one fgraph_ops at a time, -EBUSY otherwise), limited to
        `functions` by the global filter function_graph uses (ftrace_set_global_filter, by name:
        a MODULE:FUNC filters every function of that name). 6.1's ftrace_graph_ret has no return
        value (CONFIG_FUNCTION_GRAPH_RETVAL is 6.5): a return hit carries the duration."""
        found = self._resolve(functions)           # an empty filter would trace every function
        for f, a in found:
            if not self.k.call("ftrace_location", a):
                raise ProbeError(f"{f}: no ftrace site in it (not compiled with -pg, or notrace): set_graph_function "
                                 f"and set_ftrace_filter refuse it with -EINVAL", errno=-22)
        for i, (f, _) in enumerate(found):
            s = f.rpartition(":")[2]
            self.k.call("ftrace_set_global_filter", self._string(s), len(s), 1 if i == 0 else 0)
        gops, ref = self._zalloc(FGRAPH_OPS_SIZE), []
        self.k.write(gops, struct.pack("<II", self.handler(entry or (lambda h: 1), "graph-entry", ref, 1, count),
                                       self.handler(ret or (lambda h: None), "graph-return", ref, count=count)))
        return self._register("register_ftrace_graph", gops, "graph", ",".join(f for f, _ in found), ref)

    def wait_optimizer(self, ms: int = KPROBE_OPT_DELAY_MS) -> None:
        """Let simulated time pass so the kernel's kprobe_optimizer (delayed work) runs."""
        self.k.call("msleep", ms)

    def unregister_all(self) -> None:
        for p in reversed(list(self.probes.values())):
            p.unregister()

    def close(self) -> None:
        for h in self._hooks:
            self.k.unhook(h)
        self._hooks.clear()

