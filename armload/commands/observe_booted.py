"""`armload run`'s developer views inside the booted kernel: the oops decoded to file:line
(emu/booted/decode.py), --coverage, --trace and --gdb (emu/booted/observe.py). run_booted.py
calls these; the logic lives below them."""
from __future__ import annotations

import os

from ..errors import ArmloadError


def loaded_module(run, name: str):
    """armload's LoadedModule for a module the kernel loaded (same addresses), or None."""
    key = name.replace("-", "_")
    return next((m for m in reversed(run.session.modules) if m.name.replace("-", "_") == key), None)


def say_decoded(say, lines: list[str], vmlinux: str | None) -> None:
    if not lines:
        return
    say("armload: the oops decoded as the kernel's scripts/decode_stacktrace.sh decodes it "
        f"(addr2line -i from the modules' DWARF"
        + (f" and {vmlinux}):" if vmlinux else "; kernel frames need Debian's -dbg vmlinux: make vmlinux-dbg, then --kernel it):"))
    for ln in lines:
        say(ln)


class Observer:
    """--coverage, --trace, --gdb and --image for one booted run: hooks set before the first load
    (emu/booted/observe.py's Observation, gdb.py's GdbServer); this prints and writes files."""

    def __init__(self, run, args, say):
        from ..emu.booted.observe import Observation
        self.run, self.say = run, say
        self.out = getattr(args, "coverage", None)
        self.image = getattr(args, "image", None)
        for opt, f in (("--coverage", self.out), ("--image", self.image)):
            d = os.path.dirname(os.path.abspath(f)) if f else None
            if d and not os.access(d, os.W_OK):     # before the run, not after it
                raise ArmloadError(f"{opt}: cannot write {f}: {d} is not a writable directory")
        if getattr(args, "gdb", None) is not None and args.json:
            raise ArmloadError("--gdb cannot be combined with --json (the gdb server talks on stdout)")
        self.obs = Observation(run, coverage=bool(self.out), trace=bool(getattr(args, "trace", False)))
        self.trace = self.obs.trace
        self.gdb = None
        if getattr(args, "gdb", None) is not None:
            from ..emu.booted.gdb import GdbServer
            self.gdb = GdbServer(run, args.gdb, self.obs.allocs, say, run.session.kernel.vmlinux_debug, self.image)
        self._said = 0

    def before(self, path: str, last: bool = False) -> None:
        if self.gdb is not None and last:            # gdb stops at the last module's init
            from ..loader.elf import read_object
            self.gdb.expect(path, read_object(path).name)
        self.obs.before(path)

    def after(self, r) -> None:
        self.obs.after(r)

    def interleave(self, lines: list[str], start: int, probes=None) -> list[str]:
        """The console lines from index `start` with the trace lines (and probe hits) made among them."""
        events = []
        if probes is not None:
            pos = sorted(h[0] for h in probes.hits if h[0] >= start)
            events += list(zip(pos, probes.interleave([], start)))
        if self.trace is not None:
            made = self.trace.lines(self.obs.modules)
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
        """Write the lcov file and the --image, say the summaries; the JSON part."""
        report = {}
        if self.image and self.obs.loads:
            from ..loader.debug_image import write_debug_image
            mod = self.obs.loads[-1][2]
            if mod is None:
                raise ArmloadError(f"--image: armload's loader did not load {self.obs.loads[-1][0]}: no image")
            try:
                write_debug_image(mod, self.image)
            except OSError as e:
                raise ArmloadError(f"--image: cannot write {self.image}: {e.strerror}") from None
            self.say(f"armload: {self.image}: {mod.name} as the kernel loaded it, at its addresses, DWARF relocated "
                     f"(gdb's add-symbol-file, addr2line -e)")
            report["image"] = self.image
        if self.obs.cov is not None:
            from ..emu.coverage import write_lcov
            reps = []
            for name, rep in self.obs.coverage():
                if rep is not None:
                    reps.append(rep)
                else:
                    self.say(f"coverage: {name}: armload's loader did not load it: no coverage")
            try:
                write_lcov(reps, self.out)
            except OSError as e:
                raise ArmloadError(f"--coverage: cannot write {self.out}: {e.strerror}") from None
            for rep in reps:
                self.say(rep.summary())
            self.say(f"armload: lcov tracefile {self.out}, counted inside the booted kernel "
                     f"({'C' if self.obs.cov.native else 'Python'} block hook on the modules' allocations; "
                     f"genhtml {self.out} -o DIR renders it)")
            report["coverage"] = {"file": self.out, "modules": [r.to_dict() for r in reps]}
        if self.trace is not None:
            for path, names in self.obs.unhooked.items():
                if names:
                    self.say(f"armload: trace: not hooked (data, or not in the kernel's symbol table): "
                             f"{', '.join(names)}")
            report["trace"] = [c.to_dict() for c in self.trace.calls]
        return report
