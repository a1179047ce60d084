"""`--probe KIND:TARGET` as run and disasm take it.

TARGET is FUNC, MODULE:FUNC (vmlinux:FUNC for the kernel image) and, for a kprobe, FUNC+OFF or an
address 0xADDR, as kprobe_events takes them. graph:FUNC is the function_graph tracer on FUNC.
`run` registers them with the booted kernel's own register_kprobe & co (commands/probe_booted.py);
`disasm --probe` shows the words the kernel writes for them (probes/patch.py). fentry/fexit are
refused: 32-bit ARM 6.1 has no BPF trampoline (arch_prepare_bpf_trampoline is the weak stub
returning -ENOTSUPP)."""
from __future__ import annotations

from ..probes.patch import parse_spec  # noqa: F401  (probe_booted takes it from here)


def patched_view(session, modules, specs):
    """For `disasm --patched/--probe`: the last module with the kernel's patches for `specs`, and
    {addr: what was patched}."""
    from ..probes.patch import patched_view as view
    return view(modules[-1], session.kernel, specs)
