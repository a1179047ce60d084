"""`armload run`'s developer views inside the booted kernel: the oops decoded to file:line
(emu/booted/decode.py), --coverage, --trace and --gdb (emu/booted/observe.py). run_booted.py
calls these; the logic lives below them."""
from __future__ import annotations


def loaded_module(run, name: str):
    """armload's LoadedModule for a module the kernel loaded (same addresses), or None."""
    key = name.replace("-", "_")
    return next((m for m in reversed(run.session.modules) if m.name.replace("-", "_") == key), None)


def decoded_oops(run, r, vmlinux: str | None) -> list[str]:
    """The result's oops through decode_stacktrace.sh's rules; [] without an oops."""
    if not r.oops:
        return []
    from ..emu.booted.decode import decode
    return decode(r.oops, run.session.modules, vmlinux)


def say_decoded(say, lines: list[str], vmlinux: str | None) -> None:
    if not lines:
        return
    say("armload: the oops decoded as the kernel's scripts/decode_stacktrace.sh decodes it "
        f"(addr2line -i from the modules' DWARF"
        + (f" and {vmlinux}):" if vmlinux else "; kernel frames need Debian's -dbg vmlinux: make vmlinux-dbg, then --kernel it):"))
    for ln in lines:
        say(ln)


class Observer:
    """--coverage and --trace for one booted run: hooks set before the first load."""

    def __init__(self, run, args, say):
        from ..emu.booted.observe import Allocations, BootedCoverage, CallTrace
        self.run, self.say = run, say
        self.allocs = Allocations(run.bk)
        self.coverage = BootedCoverage(run.bk, self.allocs) if getattr(args, "coverage", None) else None
        self.trace = CallTrace(run.bk, self.allocs) if getattr(args, "trace", False) else None
        self.out = getattr(args, "coverage", None)
        self.loads: list[tuple[str, int]] = []       # (module name, load serial)
        self.unhooked: dict[str, list[str]] = {}
        self._said = 0

    def before(self, path: str) -> None:
        if self.trace is not None:
            exports = {s.name: s.addr for m in self.run.session.modules for s in m.symbols
                       if s.bind != "local" and s.stype == "func"}
            self.unhooked[path] = self.trace.prepare(path, exports)

    def after(self, r) -> None:
        load = self.allocs.load
        self.allocs.load += 1
        self.loads.append((r.name, load))
        if self.coverage is not None:
            self.coverage.loaded(load, self.run.session.modules)
        if self.trace is not None:
            self.trace.finish(self.run.session.modules)

    def interleave(self, lines: list[str], start: int, probes=None) -> list[str]:
        """The console lines from index `start` with the trace lines (and probe hits) made among them."""
        events = []
        if probes is not None:
            pos = sorted(h[0] for h in probes.hits if h[0] >= start)
            events += list(zip(pos, probes.interleave([], start)))
        if self.trace is not None:
            made = self.trace.lines(self.run.session.modules)
            events += [e for e in made[self._said:]]
            self._said = len(made)
        events.sort(key=lambda e: e[0])
        out, i = [], 0
        for n, line in enumerate(lines):
            while i < len(events) and events[i][0] <= start + n:
                out.append(events[i][1])
                i += 1
            out.append(line)
        return out + [e[1] for e in events[i:]]

    def finish(self, as_json: bool) -> dict:
        """Write the lcov file and say the summaries; the JSON part."""
        from ..errors import ArmloadError
        report = {}
        if self.coverage is not None:
            from ..emu.coverage import write_lcov
            reps = []
            for name, load in self.loads:
                mod = loaded_module(self.run, name)
                if mod is not None:
                    reps.append(self.coverage.report(mod, load))
                else:
                    self.say(f"coverage: {name}: armload's loader did not load it: no coverage")
            try:
                write_lcov(reps, self.out)
            except OSError as e:
                raise ArmloadError(f"--coverage: cannot write {self.out}: {e.strerror}") from None
            for rep in reps:
                self.say(rep.summary())
            self.say(f"armload: lcov tracefile {self.out}, counted inside the booted kernel "
                     f"({'C' if self.coverage.native else 'Python'} block hook on the modules' allocations; "
                     f"genhtml {self.out} -o DIR renders it)")
            report["coverage"] = {"file": self.out, "modules": [r.to_dict() for r in reps]}
        if self.trace is not None:
            for path, names in self.unhooked.items():
                if names:
                    self.say(f"armload: trace: not hooked (data, or not in the kernel's symbol table): "
                             f"{', '.join(names)}")
            report["trace"] = [c.to_dict() for c in self.trace.calls]
        return report
