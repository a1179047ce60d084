"""`armload run --probe KIND:TARGET`: attach probes to a machine and print every hit.

TARGET is FUNC, MODULE:FUNC (vmlinux:FUNC for the kernel image) and, for a kprobe, FUNC+OFF or an
address 0xADDR, as kprobe_events takes them. graph:FUNC is the function_graph tracer on FUNC
(its entry and its return value). fentry/fexit are armload's own trampolines: 32-bit
ARM 6.1 has no BPF trampoline (arch_prepare_bpf_trampoline is the weak stub returning
-ENOTSUPP), so they are an extension, and say so."""
from __future__ import annotations

from ..errors import ArmloadError

KINDS = ("kprobe", "kretprobe", "ftrace", "graph", "fentry", "fexit")


def parse_spec(spec: str) -> tuple[str, str]:
    kind, sep, rest = spec.partition(":")
    if not sep or kind not in KINDS or not rest:
        raise ArmloadError(f"--probe {spec!r}: expected KIND:FUNC[+OFF] (or KIND:MODULE:FUNC, kprobe:0xADDR) with "
                           f"KIND one of {', '.join(KINDS)}", errno=-22)
    if kind != "kprobe" and ("+" in rest or rest.lower().startswith("0x")):
        raise ArmloadError(f"--probe {spec!r}: only a kprobe takes an offset or an address", errno=-22)
    func, plus, off = rest.partition("+")
    if plus:
        try:
            int(off, 0)
        except ValueError:
            raise ArmloadError(f"--probe {spec!r}: bad offset {off!r}", errno=-22) from None
    return kind, rest


def attach(machine, specs, say, report: dict):
    """Attach every --probe to `machine`; hits are printed with `say` and kept in report["probes"]."""
    if not specs:
        return None
    from ..probes.core import Probes
    parsed = [parse_spec(s) for s in specs]
    hits: list[dict] = []
    report["probes"] = {"specs": list(specs), "hits": hits,
                        "note": "handlers run in Python at traps: the kernel's trap entry and kprobe_handler "
                                "are not emulated instructions"}

    def on_hit(h):
        hits.append(h.to_dict())
        say("  probe " + h.format())
    pr = Probes(machine, record=False, on_hit=on_hit)
    for e in pr.ftrace.errors:
        say(f"ftrace: {e}")
    directs: dict[str, list] = {}
    for kind, func in parsed:
        if kind in ("fentry", "fexit"):
            say(f"probe: {kind}:{func} is armload's own trampoline (an extension): 32-bit ARM 6.1 has no BPF "
                f"trampoline, arch_prepare_bpf_trampoline returns -ENOTSUPP")
        if kind == "kprobe":
            pr.kprobe(func, pre=lambda h: None)
        elif kind == "kretprobe":
            pr.kretprobe(func, lambda h: None)
        elif kind == "ftrace":
            pr.ftrace_function(func, lambda h: None)
        elif kind == "graph":                   # function_graph: entry and return of FUNC
            pr.ftrace.graph(entry=lambda h: None, ret=lambda h: None, functions=[func])
        else:
            directs.setdefault(func, []).append(kind)
    for func, kinds in directs.items():        # fentry and fexit on one function share a trampoline
        pr.direct(func, entry=(lambda h: None) if "fentry" in kinds else None,
                  exit=(lambda h: None) if "fexit" in kinds else None)
    for site in pr.patched_sites():
        if "nop" not in site["what"]:
            say(f"probe: {site['addr']:#010x} {machine.symbolize(site['addr'])}: {site['what']}")
    for v in pr.verify():
        if v.branches_total:
            say(f"probe: {v.module}: patched call sites verified: {v.branches_ok}/{v.branches_total}")
            if not v.ok:
                raise ArmloadError(f"{v.module}: a patched ftrace site does not reach its target: "
                                   f"{v.branch_failures[0].format()}")
    return pr


def patched_view(session, modules, specs):
    """For `disasm --patched/--probe`: the last module as the machine holds it after
    ftrace_module_init and the given probes, and {addr: what was patched}."""
    import dataclasses

    from ..emu import Machine
    from ..loader.model import MemRegion
    machine = Machine(modules, session.kernel)
    pr = attach(machine, specs, lambda _t: None, {}) if specs else None
    if pr is None:
        from ..probes.core import Probes
        pr = Probes(machine, record=False)
    m = modules[-1]
    regions = [MemRegion(r.name, r.base, r.size, bytearray(pr.read(r.base, r.size)) if r.size else bytearray(),
                         r.init) for r in m.regions]
    view = dataclasses.replace(m, regions=regions)
    marks = {s["addr"]: s["what"] for s in pr.patched_sites() if s["module"] == m.name}
    return view, marks
