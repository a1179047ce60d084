"""The 32-bit ARM 6.1 kernel's probes (issues 12 and 24).

    from armload.probes.booted import KernelProbes
    kp = KernelProbes(booted_kernel)          # the booted kernel's own register_kprobe & co
    kp.kprobe("my_func", pre=lambda hit: print(hit))

Modules: booted (the kernel's own kprobes, kretprobes, ftrace_ops and function_graph, registered
in the booted Debian kernel), base (errno, the refusal error), insn (encodings, the ARM/Thumb
kprobes decoder), patch (the words the kernel writes for a probe, for `disasm --probe`), table
(the kprobe hash table, per-cpu cache, cache-line model: seed 004's arithmetic), ktext (kernel
text, the kprobe blacklist and jump label sites). The `run --probe` option is
armload/commands/probe_booted.py; the booted kernel as the oracle of insn and ktext is
armload/agree/kprobes.py (`armload agree kprobes`, make probes-agree).
"""
from .. import _lazy

_PUBLIC = {"ProbeError": ".base", "KernelProbes": ".booted"}
__all__ = sorted(_PUBLIC)
__getattr__, __dir__ = _lazy.exports(__name__, _PUBLIC)
