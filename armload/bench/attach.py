"""`armload bench task-rename`: seed 003 (test_progs' "bench trig-*" on task_rename) ported to
32-bit ARM 6.1, on the Debian Image's own code.

The event is the rename path through the Image's `__set_task_comm(current, name, false)`, called
by an emulated driver loop (the seed enters through prctl(PR_SET_NAME); the syscall entry is
not emulated, the same in every row). Each attachment runs the same handler, an emulated ARM
function that counts the event (what a BPF program JIT-ed by Debian's CONFIG_BPF_JIT=y would be),
reached the way the kernel reaches a BPF program:

  base         nothing attached
  kprobe       the breakpoint, exception entry, kprobe_handler (modelled: probes/cost.py), the
               pre-handler calling the program through kprobe_dispatcher/trace_call_bpf (modelled)
  kprobe-opt   the same kprobe after OPTIMIZE_DELAY: `b detour`, the detour emulated,
               optimized_callback modelled (CONFIG_OPTPROBES=y in Debian: the steady state)
  kretprobe    entry kprobe + pre_handler_kretprobe (modelled), the Image's __kretprobe_trampoline
               (emulated), trampoline_handler (modelled), the program at the return
  raw_tp       the task_rename tracepoint enabled as the kernel does: its jump label in
               __set_task_comm becomes a branch to the slow path, which calls the Image's
               __traceiter_task_rename, __bpf_trace_task_rename and bpf_trace_run2 (all emulated),
               which call prog->bpf_func, the program
  fentry/fexit not supported on 32-bit ARM 6.1: arch_prepare_bpf_trampoline is the weak stub
               returning -ENOTSUPP (the row says so and shows only the seed's x86 figure)

Costs are instructions per event: emulated ones (Machine.clock, the driver loop included) plus
the modelled ones; the verdict on the seed's ordering is decided from these deterministic counts
only, so two runs print the same verdict. Host events per second are shown beside, never deciding.
The Image's mcount calls on the path are the ftrace NOP first (as ftrace_init leaves them).
"""
from __future__ import annotations

import os
import struct

from ..probes.base import ProbeError
from .inputs import SAMPLES, VMLINUZ, X86
from .probes import counter_handler

MODES = ("base", "kprobe", "kprobe-opt", "kretprobe", "raw_tp")
UNSUPPORTED = ("fentry", "fexit")
X86_ROW = {"base": "base", "kprobe": "kprobe", "kprobe-opt": "kprobe", "kretprobe": "kretprobe", "raw_tp": "raw_tp"}
PATH_FUNCS = ("__set_task_comm", "__traceiter_task_rename", "strscpy_pad", "perf_event_comm")
BPF_PROG = {"active": 0x20, "bpf_func": 0x24, "insnsi": 0x30, "size": 0x40}     # struct bpf_prog (ARM, 6.1)
TP_FUNCS = 0x44                                                                 # struct tracepoint.funcs

_DRIVER = """
    push {r4, lr}
    movw r4, #NLO
    movt r4, #NHI
loop:
    movw r0, #CLO
    movt r0, #CHI
    movw r1, #BLO
    movt r1, #BHI
    mov r2, #0
    movw ip, #TLO
    movt ip, #THI
    blx ip
    subs r4, r4, #1
    bne loop
    pop {r4, pc}
"""


def _words(v: int, lo: str, hi: str) -> dict:
    return {lo: v & 0xFFFF, hi: v >> 16}


class TaskRename:
    """One machine with the Image; the event, the program and each attachment."""

    def __init__(self, vmlinuz: str = VMLINUZ):
        from ..emu import Machine
        from ..kernel.config import DEBIAN_ARMMP
        from ..kernel.provider import Kernel
        from ..loader.session import Session
        from ..probes.core import Probes
        from ..probes.ftrace import assemble
        symvers = os.path.join(SAMPLES, "Module.symvers")
        for f in (vmlinuz, symvers, os.path.join(SAMPLES, "exporter-arm.ko")):
            if not os.path.exists(f):
                raise ProbeError(f"bench task-rename: {f} missing (make test-inputs, make samples)")
        kernel = Kernel.from_files([symvers, vmlinuz], DEBIAN_ARMMP)
        mod = Session(kernel, DEBIAN_ARMMP, "window").load(os.path.join(SAMPLES, "exporter-arm.ko"))
        self.m = m = Machine(mod, kernel, budget=0)
        self.pr = pr = Probes(m, record=False)
        self.img = m.image
        self.func = pr.function("__set_task_comm")
        for name in PATH_FUNCS:                      # ftrace_init: the Image's mcount calls are NOPs
            pr.ftrace.kernel_nop(name)
        self.name = m.heap.alloc(32, zero=True, kind="bench: comm")
        m.write(self.name, b"bench-rename\0")
        self.counter = m.heap.alloc(4, zero=True, kind="bench: counter")
        self.prog_code = pr.alloc_text(32)
        pr.write_code(self.prog_code, counter_handler(self.counter))   # the program: (*counter)++
        self.driver = pr.alloc_text(64)
        self.events = 0
        self.assemble = assemble

    def build_driver(self, events: int) -> None:
        syms = {**_words(events, "NLO", "NHI"), **_words(self.m.current, "CLO", "CHI"),
                **_words(self.name, "BLO", "BHI"), **_words(self.func.start, "TLO", "THI")}
        self.pr.write_code(self.driver, self.assemble(_DRIVER, self.driver, False, **syms))
        self.events = events

    def count(self) -> int:
        return struct.unpack("<I", self.m.read(self.counter, 4))[0]

    def run_prog(self, _hit=None) -> None:
        """A BPF program run from a kprobe handler: kprobe_dispatcher -> kprobe_perf_func ->
        trace_call_bpf (modelled), then the program (emulated)."""
        self.pr.charge("kprobe-bpf")
        self.m.invoke(self.prog_code)

    # --- raw tracepoint -------------------------------------------------------------------------
    def raw_tp(self, on: bool) -> None:
        """bpf_raw_tracepoint_open on task_rename: tracepoint_probe_register adds
        {__bpf_trace_task_rename, prog} to __tracepoint_task_rename.funcs and the static key's
        jump label in __set_task_comm becomes `b` to the slow path (arch_jump_label_transform)."""
        import capstone
        m, pr, img = self.m, self.pr, self.img
        f = self.func
        if not hasattr(self, "_tp"):
            cs = capstone.Cs(capstone.CS_ARCH_ARM, capstone.CS_MODE_ARM)
            insns = list(cs.disasm(bytes(m.read(f.start, f.size)), f.start))
            call = next(i for i in insns if i.mnemonic == "bl" and
                        int(i.op_str.lstrip("#"), 0) == img.symbols["__traceiter_task_rename"])
            # the slow path begins after the fast path's tail call: the jump label's target
            tail = next(i for i in insns if i.mnemonic == "b" and int(i.op_str.lstrip("#"), 0) ==
                        img.symbols["perf_event_comm"])
            nop = next(i for i in insns if i.mnemonic == "nop" and i.address < tail.address)
            if call.address < tail.address:
                raise ProbeError("bench task-rename: __set_task_comm's tracepoint slow path not found")
            self._tp_nop = (nop.address, bytes(m.read(nop.address, 4)), tail.address + 4)
            tp = self._tracepoint(img)
            prog = m.heap.alloc(BPF_PROG["size"], zero=True, kind="bench: struct bpf_prog")
            active = m.heap.alloc(4, zero=True, kind="bench: prog->active (per cpu)")
            m.write(prog + BPF_PROG["active"], struct.pack("<I", active))      # TPIDRPRW is 0: one CPU
            m.write(prog + BPF_PROG["bpf_func"], struct.pack("<I", self.prog_code))
            funcs = m.heap.alloc(24, zero=True, kind="bench: tracepoint_func[]")
            m.write(funcs, struct.pack("<3I", img.symbols["__bpf_trace_task_rename"], prog, 10))
            self._tp = (tp, funcs)
        tp, funcs = self._tp
        a, orig, slow = self._tp_nop
        if on:
            from ..probes import insn as I
            b = I.arm_bl(a, slow) & ~0x01000000
            pr.write_code(a, struct.pack("<I", b))
            m.write(tp + TP_FUNCS, struct.pack("<I", funcs))
        else:
            pr.write_code(a, orig)
            m.write(tp + TP_FUNCS, b"\0\0\0\0")

    def _tracepoint(self, img) -> int:
        """&__tracepoint_task_rename: the movw/movt pair in __traceiter_task_rename (the data
        symbol is not in kallsyms without CONFIG_KALLSYMS_ALL)."""
        import capstone
        a = img.symbols["__traceiter_task_rename"]
        cs = capstone.Cs(capstone.CS_ARCH_ARM, capstone.CS_MODE_ARM)
        lo = hi = None
        for i in cs.disasm(bytes(self.m.read(a, 0x30)), a):
            if i.mnemonic == "movw":
                lo = int(i.op_str.split("#")[1], 0)
            elif i.mnemonic == "movt":
                hi = int(i.op_str.split("#")[1], 0)
            if lo is not None and hi is not None:
                return (hi << 16) | lo
        raise ProbeError("bench task-rename: __tracepoint_task_rename not found in __traceiter_task_rename")


def run_task_rename(events: int = 2000, min_time: float = 0.3, vmlinuz: str = VMLINUZ) -> dict:
    b = TaskRename(vmlinuz)
    m, pr = b.m, b.pr
    b.build_driver(events)
    from .probes import count_traps, host_rate, uncount_traps
    traps = count_traps(m)
    rows = []
    for mode in MODES:
        attached = []
        pr.optprobes = mode == "kprobe-opt"
        if mode in ("kprobe", "kprobe-opt"):
            attached.append(pr.kprobe(b.func, 0, pre=b.run_prog))
            if mode == "kprobe-opt" and pr.run_optimizer() != 1:
                raise ProbeError("bench task-rename: the kprobe on __set_task_comm was not optimized")
        elif mode == "kretprobe":
            def at_return(_h):
                pr.charge("kretprobe-bpf")
                m.invoke(b.prog_code)
            attached.append(pr.kretprobe(b.func, at_return))
        elif mode == "raw_tp":
            b.raw_tp(True)
        m.call(b.driver, budget=0)                               # warm the translation cache
        m.write(b.counter, b"\0\0\0\0")
        traps[0] = 0
        model0 = pr.model_insns
        r = m.call(b.driver, budget=0)                           # the measured run: deterministic counts
        if r.status != "returned":
            raise ProbeError(f"bench task-rename: {mode}: {r.summary()}")
        model = pr.model_insns - model0
        ran = b.count()
        want = 0 if mode == "base" else events
        if ran != want:
            raise ProbeError(f"bench task-rename: {mode}: the program ran {ran} times for {events} events")
        if m.read_cstring(m.current + 0x780, 16) != b"bench-rename":
            raise ProbeError(f"bench task-rename: {mode}: current->comm is not the new name")
        n_traps = traps[0]
        eps = host_rate(m, b.driver, events, min_time)
        rows.append({"mode": mode, "events": events, "emulated_per_event": r.instructions / events,
                     "modelled_per_event": model / events, "insns_per_event": (r.instructions + model) / events,
                     "traps_per_event": n_traps / events, "events_per_s": eps})
        for a in attached:
            a.unregister()
        if mode == "raw_tp":
            b.raw_tp(False)
    uncount_traps(m)
    base = rows[0]["insns_per_event"]
    for r in rows:
        r["extra_insns"] = r["insns_per_event"] - base
        r["rate_vs_base"] = base / r["insns_per_event"]                 # deterministic: events/s ratio at 1 insn/cycle
        r["host_vs_base"] = r["events_per_s"] / rows[0]["events_per_s"]
        x = X86[X86_ROW[r["mode"]]][0]
        r["x86_k_per_s"], r["x86_vs_base"] = x, x / X86["base"][0]
    by = {r["mode"]: r["insns_per_event"] for r in rows}
    verdict = {"base > raw_tp": by["base"] < by["raw_tp"], "raw_tp > kprobe": by["raw_tp"] < by["kprobe"],
               "kprobe > kretprobe": by["kprobe"] < by["kretprobe"],
               "raw_tp > kprobe-opt": by["raw_tp"] < by["kprobe-opt"]}
    verdict["reproduced"] = verdict["base > raw_tp"] and verdict["raw_tp > kprobe"] and verdict["kprobe > kretprobe"]
    from ..probes.direct import bpf_trampoline
    unsupported = {}
    for kind in UNSUPPORTED:
        try:
            bpf_trampoline(pr, b.func, kind)
        except ProbeError as e:
            unsupported[kind] = {"errno": e.errno, "message": str(e), "x86_k_per_s": X86[kind][0]}
    return {"events": events, "rows": rows, "verdict": verdict, "unsupported": unsupported, "cost_model": pr.cost}


def print_task_rename(res: dict) -> None:
    print(f"seed 003 on 32-bit ARM 6.1: __set_task_comm(current, name, false) called {res['events']:,} times by an "
          f"emulated loop (the Debian Image's code)")
    print("insns/event = emulated (the loop, the rename path, slots, detours, the Image's trampolines and tracepoint "
          "code, the program)")
    print("            + modelled (the kernel's C steps armload runs in Python: exception entry, kprobe_handler, "
          "kretprobe handlers,")
    print("              optimized_callback, kprobe_dispatcher..trace_call_bpf; each function's Image size, "
          "probes/cost.py). Deterministic.")
    print(f"\n  {'attach':<11}{'insns/event':>12}{'emulated':>10}{'modelled':>10}{'+insns':>8}{'rate vs base':>13}"
          f"{'traps/ev':>9}{'host ev/s':>11}{'host vs base':>13}{'x86 K/s':>9}{'x86 vs base':>12}")
    for r in res["rows"]:
        print(f"  {r['mode']:<11}{r['insns_per_event']:>12.1f}{r['emulated_per_event']:>10.1f}{r['modelled_per_event']:>10.1f}"
              f"{r['extra_insns']:>8.1f}{r['rate_vs_base']:>13.3f}{r['traps_per_event']:>9.1f}{r['events_per_s']:>11,.0f}"
              f"{r['host_vs_base']:>13.3f}{r['x86_k_per_s']:>9,}{r['x86_vs_base']:>12.3f}")
    for kind, u in res["unsupported"].items():
        print(f"  {kind:<11}{'unsupported':>12}  (the seed's x86: {u['x86_k_per_s']:,}K events/s)")
        print(f"      {u['message']}")
    v = res["verdict"]
    print(f"\n  the seed's ordering base > raw_tp > kprobe > kretprobe (fentry/fexit cannot run here): "
          f"{'reproduced' if v['reproduced'] else 'NOT reproduced'} from instruction counts "
          f"(base > raw_tp: {v['base > raw_tp']}, raw_tp > kprobe: {v['raw_tp > kprobe']}, "
          f"kprobe > kretprobe: {v['kprobe > kretprobe']}); with OPTPROBES the kprobe is "
          f"{'dearer' if v['raw_tp > kprobe-opt'] else 'cheaper'} than raw_tp.")
    print("  rate vs base = base insns/event over the row's (events/s at one instruction per cycle); traps/ev = "
          "Python stand-ins entered")
    print("  (the breakpoint, the optimized_callback and trampoline_handler traps); host columns are this Python host, "
          "beside only.")
