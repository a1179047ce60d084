"""`armload run --probe KIND:TARGET` inside the booted kernel: the kernel's own probes.

Each probe is registered with the Image's register_kprobe / register_kretprobe /
register_ftrace_function / register_ftrace_graph (armload/probes/booted.py): on a kernel function
before the first module loads, on a module's function (MODULE:FUNC, or a FUNC the Image does not
have) when that module is formed, at do_init_module's entry, so its init can be probed. A
refusal is the kernel's return value. Hits are printed in order with the kernel's console lines.
fentry/fexit do not exist on 32-bit ARM 6.1 (parse_spec refuses them with the kernel's -ENOTSUPP).
"""
from __future__ import annotations

from .probe_options import parse_spec


def _quiet(_hit):
    return None


class BootedProbes:
    def __init__(self, run, specs: list[str]):
        from ..probes.booted import KernelProbes
        self.run, self.k = run, run.bk
        self.specs = [parse_spec(s) for s in specs]
        self.kp = KernelProbes(self.k, on_hit=self._on_hit)
        self.hits: list[tuple[int, dict, str]] = []       # (console index, hit, text) not yet printed
        self.consumed: list[dict] = []
        self.registered: list[tuple[str, str, object]] = []
        self.pending = []
        self.errors: list[str] = []
        img = self.k.image
        for kind, target in self.specs:
            mod, sep, func = target.partition(":")
            if sep and mod == "vmlinux":
                target, sep = func, ""
            name = target.partition("+")[0]
            if not sep and (name.lower().startswith("0x") or name in img.symbols):
                self._register(kind, target)
            else:
                self.pending.append((kind, target))
        run.on_coming(self._coming)

    def _register(self, kind: str, target: str, spec: str | None = None) -> bool:
        from ..probes.base import ProbeError
        try:
            if kind == "kprobe":
                p = self.kp.kprobe(target, pre=_quiet)
            elif kind == "kretprobe":
                p = self.kp.kretprobe(target, handler=_quiet)
            elif kind == "ftrace":
                p = self.kp.ftrace(target, _quiet)
            else:
                p = self.kp.graph(target, entry=lambda h: 1, ret=_quiet)
        except ProbeError as e:
            if e.errno == -2 and ":" not in target:
                return False                              # not in this module: maybe a later one
            self.errors.append(str(e))
            return True
        self.registered.append((kind, spec or target, p))
        return True

    def _coming(self, module: str) -> None:
        left = []
        for kind, target in self.pending:
            mod, sep, func = target.partition(":")
            if sep and mod.replace("-", "_") != module:
                left.append((kind, target))
            elif not self._register(kind, target if sep else f"{module}:{target}", target):
                left.append((kind, target))
        self.pending = left

    def _on_hit(self, hit) -> None:
        self.hits.append((len(self.k.console), hit.to_dict(), "  probe " + hit.format()))

    def interleave(self, lines: list[str], start: int) -> list[str]:
        """`lines` (the console from index `start`) with the hits that happened among them, in order;
        the hits are consumed."""
        out, hits = [], sorted((h for h in self.hits if h[0] >= start), key=lambda h: h[0])
        i = 0
        for n, line in enumerate(lines):
            while i < len(hits) and hits[i][0] <= start + n:
                out.append(hits[i][2])
                i += 1
            out.append(line)
        out += [h[2] for h in hits[i:]]
        self.consumed += [h[1] for h in hits]
        self.hits = [h for h in self.hits if h[0] < start]
        return out

    def all_hits(self) -> list[dict]:
        return self.consumed + [h[1] for h in self.hits]

    def summary(self) -> list[str]:
        out = [f"probe: {e}" for e in self.errors]
        out += [f"probe: {kind}:{target}: not registered: no such function in the Image or the loaded modules "
                f"(the kernel's kallsyms_lookup_name)" for kind, target in self.pending]
        for kind, target, p in self.registered:
            s = f"probe: {kind}:{target}: {p.hits} hit(s)"
            if kind in ("kprobe", "kretprobe") and p.registered:
                s += f", {p.nmissed} missed, {p.state()}"
            out.append(s)
        return out

    @property
    def ok(self) -> bool:
        return not self.errors and not self.pending

    def to_dict(self) -> dict:
        return {"runtime": "the booted kernel's own register_kprobe/register_kretprobe/register_ftrace_function/"
                           "register_ftrace_graph; handlers are Python stubs the kernel calls",
                "hits": self.all_hits(),
                "probes": [dict(p.to_dict(), spec=f"{k}:{t}") for k, t, p in self.registered],
                "errors": self.errors, "not_found": [f"{k}:{t}" for k, t in self.pending]}
