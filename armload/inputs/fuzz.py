"""A deterministic mutation fuzzer for the loader (issue 14).

Each case takes one sample module, applies one mutation of one class (byte flips, truncation,
ELF header / section header / symbol / relocation fields set to boundary values, oversized
NOBITS sections, duplicated section headers, corrupted .modinfo, __versions, __ksymtab and
.gnu.linkonce.this_module; since issue 21 also the classes of mutators.py: two fields of one
header changed together, renamed (per-cpu) and duplicated key sections, broken string tables,
non-ELF inputs; the seeds include the plain .o files, loaded with object=True), loads it, and
classifies the result:

* accepted  - loaded; the image must then verify (armload.loader.verify), except at branch sites whose
              relocated word is no longer a B/BL of the relocation's kind (the input broke it);
* refused   - an ArmloadError: the kernel-style refusal;
* internal  - any other exception: a bug in armload.

Cost is measured per case, deterministically where possible: Python function calls (builtins
included, via sys.setprofile) as the operation count, tracemalloc's peak as memory. Both must
stay below a budget proportional to the file and to what the simulated kernel allocated.

    python -m armload.inputs.fuzz --cases 20000 [--seed 1] [--big] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import struct
import threading
import sys
import time
import tracemalloc
from dataclasses import dataclass, field

import numpy as np

from ..loader.elf import read_object
from ..errors import ArmloadError
from .fuzz_cases import CLASSES, Case, Seed, default_seeds, make_case

# Budgets per case (deterministic counts; the wall clock is only a safety net).
OPS_BASE = 300_000              # function calls; load + verify of the largest sample takes ~35k
OPS_PER_BYTE = 20
RUN_BUDGET = 300_000_000        # instructions per load_module (--run): the booted kernel loads and inits
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from ..kernel.debian import VMLINUZ  # noqa: E402  (the booted kernel --run boots)
RUN_MAX_MEMORY = 1 << 20        # --run skips modules with more module memory (the case's cost stays bounded)
MEM_BASE = 24 << 20             # tracemalloc peak: interpreter churn, numpy, unicorn wrappers
MEM_PER_BYTE = 64               # per byte of file
MEM_PER_ALLOC = 4               # per byte of simulated module memory handed out
WALL_SAFETY = 20.0              # seconds; far above any budgeted case


@dataclass
class Outcome:
    case: Case
    kind: str                    # accepted | refused | internal
    detail: str = ""
    ops: int = 0
    mem_peak: int = 0
    allocated: int = 0
    wall: float = 0.0
    verify_unexplained: list = field(default_factory=list)
    over_budget: str = ""


# --- running one case --------------------------------------------------------------------------
class _SafetyNet(BaseException):
    """Raised by the wall-clock alarm; not an Exception, so nothing inside armload swallows it."""


def _alarm(signum, frame):
    raise _SafetyNet()


class _OpCounter:
    def __init__(self):
        self.n = 0

    def __call__(self, frame, event, arg):
        if event == "call" or event == "c_call":
            self.n += 1


def _relocated_words(mod, data: bytes | None) -> np.ndarray:
    """Sorted final addresses of every relocated word of the input (all types, all sections)."""
    if data is None:
        return np.unique(mod.branches["place"].astype(np.int64))
    obj = read_object(mod.path, data, object=True)
    addr = {s.index: s.addr for s in mod.sections}
    parts = [np.asarray(rel["r_offset"], dtype=np.int64) + addr[obj.sections[i].sh_info]
             for i, rel in obj.rels.items() if obj.sections[i].sh_info in addr]
    return np.sort(np.concatenate(parts)) if parts else np.zeros(0, np.int64)


def _unexplained(mod, res, data: bytes | None = None) -> list[str]:
    """Branch failures at sites that still hold an unconditional-kind B/BL (or B.W/BL) after
    relocation: those are armload's fault. Any other word at a branch site came from the input,
    and so does a site that a second relocation of the input overlaps (it reads or overwrites
    the first one's result, as in the kernel)."""
    out = []
    words = _relocated_words(mod, data)
    stype = {s.name: s.stype for s in mod.symbols}
    if data is not None:
        # by symbol index, not name: names may be empty or shared (section symbols, mutated names)
        st_type = read_object(mod.path, data, object=True).symtab["st_info"] & 0xF
        br = mod.branches
        place_func = {}
        for place, sym in zip(br["place"].tolist(), br["sym"].tolist()):
            is_func = sym < len(st_type) and int(st_type[sym]) == 2
            place_func[place] = place_func.get(place, False) or is_func
    for f in res.branch_failures:
        lo, hi = np.searchsorted(words, [f.site - 3, f.site + 4])
        if hi - lo > 1:
            continue          # overlapping relocations in the input
        if f.expected & ~1 == 0:
            continue          # a NULL target (weak undefined): the kernel's branch goes to 0 either way
        func = place_func.get(f.site, False) if data is not None else stype.get(f.symbol) == "func"
        if f.actual is not None and (f.actual & ~1) == (f.expected & ~1) and not func:
            continue          # not a function: 6.1 branches without interworking, by design
        try:
            w, = struct.unpack("<I", mod.read(f.site, 4))
        except ValueError:
            out.append(f.format())
            continue
        if f.rtype.startswith("R_ARM_THM"):
            upper, lower = w & 0xFFFF, w >> 16
            branch = (upper & 0xF800) == 0xF000 and (lower & 0xD000) in (0xD000, 0x9000)
        else:
            branch = ((w >> 25) & 7) == 5 and (w >> 28) != 0xF
        if branch:
            out.append(f.format())
    out.extend(p.format() for p in res.plt_failures)
    return out


def booted_init(loads: list[tuple[str, bytes]], thumb2: bool = False) -> str:
    """'init: ...' for the files `loads` [(name, bytes)] loaded in order, each in the booted Debian
    kernel with its own load_module (init included) in one fresh restore, stopping at the first
    that does not return 0. Module code runs only there: without the image, or for a Thumb-2
    module (the Debian kernel is an ARM kernel), it is not run, and the result says so. The
    kernel's instructions are not Python operations: the profile counter is off meanwhile."""
    if thumb2:
        return "init: not run (Thumb-2: the Debian kernel is an ARM kernel, no CONFIG_THUMB2_KERNEL)"
    if not os.path.exists(VMLINUZ):
        return "init: not run (no kernel image: module code runs only inside the booted kernel; make test-inputs)"
    from ..emu.booted.kernel import BootedKernel
    from ..emu.booted.machine import GuestFault
    from ..emu.booted.modload import kernel_load
    from ..emu.errno import errno_name
    prof = sys.getprofile()
    sys.setprofile(None)
    try:
        k = BootedKernel.get(VMLINUZ)
        for name, data in loads:
            r = kernel_load(k, data, name=name, budget=RUN_BUDGET)
            if r.ret != 0 or r.oops_text or r.stopped:
                break
    except GuestFault as e:
        return f"init: the booted machine stopped: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
    finally:
        sys.setprofile(prof)
    if r.oops_text:
        return "init: oops"
    if r.stopped:
        return f"init: stopped ({r.stopped})"
    return "init: returned 0" if r.ret == 0 else f"init: load_module returned {r.ret} ({errno_name(r.ret)})"


def run_case(case: Case, seed: Seed, kernels: dict, verify: bool = True, measure: bool = True,
             run: bool = False) -> Outcome:
    from ..loader.session import Session
    from ..loader.verify import verify_module
    cfg = seed.config
    kernel = kernels[cfg]
    session = Session(kernel, cfg, case.placement)
    if os.path.basename(seed.path).startswith("importer-"):
        # its imports come from the (unmutated) exporter of the same build
        session.load(seed.path.replace("importer-", "exporter-"))
    peak_alloc = [0]
    orig_alloc = session.allocator.alloc

    def alloc(size):
        a = orig_alloc(size)
        peak_alloc[0] += size
        return a
    session.allocator.alloc = alloc
    counter = _OpCounter()
    out = Outcome(case, "accepted")
    t0 = time.perf_counter()
    armed = threading.current_thread() is threading.main_thread()
    if armed:
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, WALL_SAFETY)
    if measure:
        tracemalloc.reset_peak()
        base_mem = tracemalloc.get_traced_memory()[0]
        sys.setprofile(counter)
    try:
        mod = session.load(f"fuzz-{case.index}-{case.seed}", case.data, object=seed.object)
        if verify:
            res = verify_module(mod, kernel)
            if not res.ok:
                out.verify_unexplained = _unexplained(mod, res, case.data)
        if run and sum(r.size for r in mod.regions) > RUN_MAX_MEMORY:
            out.detail = "init: not run (module memory above RUN_MAX_MEMORY)"
        elif run:
            loads = [(os.path.basename(m.path), open(m.path, "rb").read()) for m in session.modules[:-1]]
            out.detail = booted_init(loads + [(mod.name, case.data)], cfg.thumb2)
    except ArmloadError as e:
        out.kind, out.detail = "refused", f"{type(e).__name__}: {str(e).splitlines()[0]}"
    except Exception as e:           # noqa: BLE001 - this is what the fuzzer looks for
        out.kind, out.detail = "internal", f"{type(e).__name__}: {e}"
    except _SafetyNet:
        out.kind, out.detail = "internal", f"no result after the {WALL_SAFETY} s wall-clock safety net"
        out.over_budget = out.detail
    finally:
        if armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        if measure:
            sys.setprofile(None)
            out.mem_peak = tracemalloc.get_traced_memory()[1] - base_mem
    out.wall = time.perf_counter() - t0
    out.ops = counter.n
    out.allocated = peak_alloc[0]
    if measure:
        ops_budget = OPS_BASE + OPS_PER_BYTE * len(case.data)
        mem_budget = MEM_BASE + MEM_PER_BYTE * len(case.data) + MEM_PER_ALLOC * out.allocated
        if out.over_budget:
            pass
        elif out.ops > ops_budget:
            out.over_budget = f"{out.ops} operations > budget {ops_budget}"
        elif out.mem_peak > mem_budget:
            out.over_budget = f"memory peak {out.mem_peak} > budget {mem_budget}"
        elif out.wall > WALL_SAFETY:
            out.over_budget = f"wall clock {out.wall:.1f} s > safety net {WALL_SAFETY} s"
    return out


@dataclass
class Stats:
    cases: int = 0
    by_class: dict = field(default_factory=dict)          # class -> {accepted, refused, internal}
    internal: list = field(default_factory=list)
    unverified: list = field(default_factory=list)
    over_budget: list = field(default_factory=list)
    max_ops: int = 0
    max_mem: int = 0
    max_wall: float = 0.0
    refusals: dict = field(default_factory=dict)          # first words of the message -> count
    runs: dict = field(default_factory=dict)              # accepted cases: the booted kernel's load -> count

    def add(self, o: Outcome) -> None:
        self.cases += 1
        c = self.by_class.setdefault(o.case.cls, {"accepted": 0, "refused": 0, "internal": 0})
        c[o.kind] += 1
        if o.kind == "internal":
            self.internal.append(f"case {o.case.index} [{o.case.cls}] {o.case.seed} {o.case.what} "
                                 f"@{o.case.placement}: {o.detail}")
        if o.verify_unexplained:
            self.unverified.append(f"case {o.case.index} [{o.case.cls}] {o.case.seed} {o.case.what}: "
                                   f"{o.verify_unexplained[0]}")
        if o.over_budget:
            self.over_budget.append(f"case {o.case.index} [{o.case.cls}] {o.case.seed} {o.case.what}: "
                                    f"{o.over_budget}")
        if o.kind == "accepted" and o.detail.startswith("init: "):
            k = " ".join(o.detail[6:].split()[:2]).rstrip(":")
            self.runs[k] = self.runs.get(k, 0) + 1
        if o.kind == "refused":
            key = o.detail.split(": ", 1)[0] + ": " + " ".join(o.detail.split(": ", 2)[-1].split()[:4])
            self.refusals[key] = self.refusals.get(key, 0) + 1
        self.max_ops = max(self.max_ops, o.ops)
        self.max_mem = max(self.max_mem, o.mem_peak)
        self.max_wall = max(self.max_wall, o.wall)

    def to_dict(self) -> dict:
        return {"cases": self.cases, "by_class": self.by_class, "internal_errors": len(self.internal),
                "internal": self.internal[:50], "unverified": self.unverified[:50],
                "over_budget": self.over_budget[:50], "init_runs": self.runs, "max_ops": self.max_ops, "max_mem_peak": self.max_mem,
                "max_wall_s": round(self.max_wall, 3)}

    def format(self) -> str:
        lines = [f"cases: {self.cases}", f"{'class':<12} {'accepted':>9} {'refused':>9} {'internal':>9}"]
        tot = {"accepted": 0, "refused": 0, "internal": 0}
        for cls in CLASSES:
            c = self.by_class.get(cls)
            if not c:
                continue
            lines.append(f"{cls:<12} {c['accepted']:>9} {c['refused']:>9} {c['internal']:>9}")
            for k in tot:
                tot[k] += c[k]
        lines.append(f"{'total':<12} {tot['accepted']:>9} {tot['refused']:>9} {tot['internal']:>9}")
        lines.append(f"internal errors: {len(self.internal)}; accepted but not verifying: {len(self.unverified)}; "
                     f"over budget: {len(self.over_budget)}")
        lines.append(f"max per case: {self.max_ops} operations, {self.max_mem / 2**20:.1f} MiB traced peak, "
                     f"{self.max_wall:.2f} s wall")
        for title, items in (("internal", self.internal), ("unverified", self.unverified),
                             ("over budget", self.over_budget)):
            for x in items[:20]:
                lines.append(f"  {title}: {x}")
        if self.runs:
            lines.append("accepted cases loaded and inited by the booted kernel: " +
                         ", ".join(f"{k} {n}" for k, n in sorted(self.runs.items(), key=lambda kv: -kv[1])))
        top = sorted(self.refusals.items(), key=lambda kv: -kv[1])[:12]
        if top:
            lines.append("most frequent refusals:")
            lines.extend(f"  {n:>6}  {k}" for k, n in top)
        return "\n".join(lines)


def campaign(n_cases: int, seed_value: int = 1, *, big: bool = False, verify: bool = True,
             measure: bool = True, run: bool = False, seeds: list[Seed] | None = None, progress=None) -> Stats:
    from ..kernel.provider import Kernel
    seeds = seeds or default_seeds()
    symvers = os.path.join(os.path.dirname(seeds[0].path), "Module.symvers")
    kernels = {}
    for s in seeds:
        if s.config not in kernels:
            kernels[s.config] = Kernel.from_files([symvers], s.config)
    warm = next((s for s in seeds if not s.object and not s.config.thumb2), None)
    if run and warm is not None:
        # the booted path's one-time setup (imports, caches) is not case 0's cost: one unmutated load
        # first (case 0 went 55 MB over its memory budget without it)
        booted_init([(os.path.basename(warm.path), warm.data)])
    stats = Stats()
    started = not measure or tracemalloc.is_tracing()
    if not started:
        tracemalloc.start()
    try:
        for i in range(n_cases):
            case, sd = make_case(seeds, i, seed_value, big)
            stats.add(run_case(case, sd, kernels, verify=verify, measure=measure, run=run))
            if progress and (i + 1) % 250 == 0:
                progress(i + 1, stats)
    finally:
        if not started:
            tracemalloc.stop()
    return stats


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m armload.inputs.fuzz", description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=int, default=2000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--big", action="store_true", help="also 128 MiB NOBITS sections (allocatable; slower)")
    p.add_argument("--no-verify", action="store_true")
    p.add_argument("--run", action="store_true", help=f"also load each accepted module with the booted Debian "
                                                      f"kernel's own load_module, init included ({RUN_BUDGET:,} "
                                                      f"instructions)")
    p.add_argument("--no-measure", action="store_true", help="skip the operation/memory accounting (faster)")
    p.add_argument("--json", metavar="FILE", help="also write the numbers as JSON")
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    stats = campaign(a.cases, a.seed, big=a.big, verify=not a.no_verify, measure=not a.no_measure, run=a.run,
                     progress=lambda n, s: print(f"... {n} cases, {len(s.internal)} internal errors, "
                                                 f"max {s.max_wall:.2f} s/case", file=sys.stderr, flush=True))
    print(stats.format())
    print(f"wall: {time.perf_counter() - t0:.1f} s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(stats.to_dict(), f, indent=2)
    return 1 if stats.internal or stats.unverified or stats.over_budget else 0


if __name__ == "__main__":
    sys.exit(main())
