"""Probes on loaded module code, as the ARM kernel does them (issue 12).

    from armload.probes import Probes
    pr = Probes(machine)                      # ftrace_module_init: mcount sites become NOPs
    pr.kprobe("my_func", 8, pre=lambda hit: print(hit.format()))
    pr.kretprobe("my_func", lambda hit: print(hit.ret))
    pr.ftrace_function("my_func", handler)    # bl ftrace_caller at the site
    pr.direct("my_func", entry=h1, exit=h2)   # bl to a per-function trampoline

Modules: base (errno, refusals, a probed function), insn (encodings, the kprobes decoder), table
(kprobe hash table, per-cpu cache), core (the subsystem, memory, traps, hits), ftrace, kprobe,
kretprobe, direct. The benchmark is armload/bench/probes.py, the --probe option
armload/commands/probe_options.py.
"""
from .. import _lazy

_PUBLIC = {"ProbeError": ".base", "ProbeHit": ".core", "Probes": ".core"}
__all__ = sorted(_PUBLIC)
__getattr__, __dir__ = _lazy.exports(__name__, _PUBLIC)
