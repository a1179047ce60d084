"""What a probe costs the kernel where armload runs Python instead: a stated instruction model.

armload runs the exception entry, kprobe_handler and the kretprobe/ftrace C handlers as Python
at traps; the 6.1 kernel runs them as ARM code. So that per-event costs compare, each such
Python step is charged a modelled number of instructions (Probes.model_insns), beside the
instructions the emulator really retires (the probed code, slots, detour buffers, the Image's
own trampolines). The model: every function on the kernel's path counted once, whole, by its
size in the Debian Image (kallsyms: next symbol's address minus its own, in 4-byte
instructions). That is the straight path's upper bound (every branch's code counted, each loop
once); the path itself is 6.1's:

  kprobe trap      vector + vector_und stub (entry-armv.S vector_stub: 12)
                   + __und_svc (svc_entry, the call, svc_exit) + __und_fault
                   + do_undefinstr (call_undef_hook) + kprobe_trap_handler (kprobe_handler
                   inlined) + get_kprobe
  kretprobe entry  + pre_handler_kretprobe (on top of the kprobe trap)
  kretprobe return trampoline_handler + __kretprobe_trampoline_handler (the trampoline's own 8
                   instructions are the Image's, emulated)
  optimized kprobe optimized_callback + opt_pre_handler (the detour buffer is emulated)
  ftrace call      arch_ftrace_ops_list_func (ftrace_caller is emulated)
  graph return     ftrace_return_to_handler (return_to_handler is the Image's, emulated)
  BPF on a kprobe  kprobe_dispatcher + kprobe_perf_func + trace_call_bpf (kretprobe_* likewise)

Without an Image the same functions' sizes from Debian 6.1.0-50-armmp are used (FALLBACK).
A handler's own body (the BPF program or the user's callback) is not in the model: the
benchmarks run an emulated handler for that.
"""
from __future__ import annotations

import bisect

VECTOR_STUB = 12                 # W(b) vector_und + vector_stub und, UND_MODE (11 instructions)
PATHS = {
    "kprobe": ("__und_svc", "__und_fault", "do_undefinstr", "kprobe_trap_handler", "get_kprobe"),
    "kretprobe-entry": ("pre_handler_kretprobe",),
    "kretprobe-return": ("trampoline_handler", "__kretprobe_trampoline_handler"),
    "optprobe": ("optimized_callback", "opt_pre_handler"),
    "ftrace": ("arch_ftrace_ops_list_func",),
    "graph-return": ("ftrace_return_to_handler",),
    "kprobe-bpf": ("kprobe_dispatcher", "kprobe_perf_func", "trace_call_bpf"),
    "kretprobe-bpf": ("kretprobe_dispatcher", "kretprobe_perf_func", "trace_call_bpf"),
}
FALLBACK = {"__und_svc": 23, "__und_fault": 4, "do_undefinstr": 113, "kprobe_trap_handler": 103, "get_kprobe": 23,
            "pre_handler_kretprobe": 162, "trampoline_handler": 13, "__kretprobe_trampoline_handler": 89,
            "optimized_callback": 37, "opt_pre_handler": 32, "arch_ftrace_ops_list_func": 122,
            "ftrace_return_to_handler": 107, "kprobe_dispatcher": 24, "kprobe_perf_func": 133,
            "trace_call_bpf": 101, "kretprobe_dispatcher": 36, "kretprobe_perf_func": 128}


def function_sizes(image) -> dict[str, int]:
    """Instruction counts of the model's functions, from the Image's kallsyms (or FALLBACK)."""
    if image is None:
        return dict(FALLBACK)
    starts = sorted({a & ~1 for a in image.symbols.values()})
    out = {}
    for name in FALLBACK:
        a = image.symbols.get(name)
        if a is None:
            out[name] = FALLBACK[name]
            continue
        i = bisect.bisect_right(starts, a & ~1)
        out[name] = ((starts[i] if i < len(starts) else image.etext) - (a & ~1)) // 4
    return out


def model(image) -> dict[str, int]:
    """Modelled instructions per step (PATHS) for this Image."""
    sizes = function_sizes(image)
    out = {k: sum(sizes[f] for f in fs) for k, fs in PATHS.items()}
    out["kprobe"] += VECTOR_STUB
    return out
