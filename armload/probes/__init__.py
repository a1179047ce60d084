"""Probes on loaded module code and kernel image text, as the 32-bit ARM 6.1 kernel does them
(issues 12 and 24).

    from armload.probes import Probes
    pr = Probes(machine)                      # ftrace_module_init: mcount sites become NOPs
    pr.kprobe("my_func", 8, pre=lambda hit: print(hit.format()))
    pr.kretprobe("my_func", lambda hit: print(hit.ret))
    pr.ftrace_function("my_func", handler)    # bl ftrace_caller at the site
    pr.ftrace.graph(entry=h1, ret=h2)         # function_graph: ARM 6.1's way to see returns
    pr.bpf_trampoline("my_func")              # fentry on 32-bit ARM 6.1: -ENOTSUPP, as the kernel says
    pr.direct("my_func", entry=h1, exit=h2)   # armload's own trampoline: an extension, labelled so

Modules: base (errno, refusals, a probed function), insn (encodings, the kprobes decoder), table
(kprobe hash table, per-cpu cache, cache-line model), ktext (kernel text and the kprobe
blacklist), core (the subsystem, memory, traps, hits), ftrace (several users, function_graph),
kprobe (+ optprobes), kretprobe, direct (armload's trampolines, an extension). The benchmark is armload/bench/probes.py, the --probe option
armload/commands/probe_options.py.
"""
from .. import _lazy

_PUBLIC = {"ProbeError": ".base", "ProbeHit": ".core", "Probes": ".core"}
__all__ = sorted(_PUBLIC)
__getattr__, __dir__ = _lazy.exports(__name__, _PUBLIC)
