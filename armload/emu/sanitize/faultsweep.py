"""The error-path sweep (`armload run M --fail-sweep`): init run once to count the allocations it
makes (the module's kmalloc-family calls, emu/booted/failslab.py), then once more for each n of
them, in a fresh copy of the booted kernel, with the n-th failing (the kernel's fail_nth idea:
Documentation/fault-injection/fault-injection.rst; Debian's armmp has no CONFIG_FAULT_INJECTION)
and the sanitizers on. A failure is mishandled when init then oopses (or stops), a sanitizer
reports (kmemleak's scan at the end of a failed init sees what its error path did not free) or
init returns success although the allocation failed.

The count is the module's own calls (return address in its text), not every fault point of the
task as fail_nth counts: the kernel's allocations for it (load_module's) are not failed."""
from __future__ import annotations

from dataclasses import dataclass, field

MODULES_VADDR, MODULES_END = 0xBF000000, 0xC0000000      # arch/arm: the module area below PAGE_OFFSET
VERDICTS = {
    "handled": "init failed cleanly (a negative errno, no report)",
    "oops": "init oopsed or stopped with the allocation failed",
    "report": "a sanitizer reported a bug on the error path (a leak, a bad access, a lock held...)",
    "success": "init returned 0 although the allocation failed",
}


@dataclass
class Attempt:
    nth: int
    site: str                      # the allocation call: function+0x../0x.. [mod] (file:line)
    verdict: str                   # a VERDICTS key
    status: str                    # the Result's status
    ret: int | None
    why: str                       # one line
    reports: list = field(default_factory=list)      # Report.to_dict() of the sanitizers

    def to_dict(self) -> dict:
        return {"nth": self.nth, "site": self.site, "verdict": self.verdict, "status": self.status, "ret": self.ret,
                "why": self.why, "reports": self.reports}


def _prepare(new_run, deps, classes):
    """A fresh kernel with the dependencies loaded, the sanitizers and the fail hook on it."""
    from ..booted.failslab import FailSlab
    from . import Sanitizer
    run = new_run()
    san = Sanitizer(run, classes)
    for p, ps in deps:
        r = run.load(p, ps)
        if not r.ok:
            from ...errors import ArmloadError
            raise ArmloadError(f"--fail-sweep: dependency {r.name} failed in the kernel: {r.summary()}")
    before = [(x.base, x.base + x.size) for m in run.session.modules for x in m.regions]

    def is_caller(lr: int) -> bool:
        lr &= ~1
        return MODULES_VADDR <= lr < MODULES_END and not any(lo <= lr < hi for lo, hi in before)
    return run, san, FailSlab(run.bk, is_caller)


def _site(san, lr: int) -> str:
    name = san.symbolizer.name(lr - 4)
    line = san.symbolizer.line(lr - 4)
    return f"{name} ({line})" if line else name


def sweep(new_run, path: str, params: str, deps=(), classes=None, budget: int | None = None,
          progress=None) -> dict:
    """{"module", "allocations": N, "clean": the unfailed run's Attempt-like dict, "attempts":
    [Attempt], "bad": the mishandled ones}. `new_run()`: a fresh BootedRun; `deps`: [(path,
    params)] loaded first in each."""
    from . import CLASSES
    classes = tuple(classes or CLASSES)
    kw = {"budget": budget} if budget else {}
    run, san, fs = _prepare(new_run, deps, classes)
    fs.arm(0)
    r = san.load(path, params, **kw)
    calls = list(fs.calls)
    sites = [_site(san, lr) for lr in calls]
    clean = {"status": r.status, "ret": r.ret, "reports": [x.to_dict() for x in san.formatted()],
             "why": r.summary()}
    attempts = []
    for n in range(1, len(calls) + 1):
        if progress:
            progress(n, len(calls))
        run, san, fs = _prepare(new_run, deps, classes)
        fs.arm(n)
        r = san.load(path, params, **kw)
        reps = [x.to_dict() for x in san.formatted()]
        site = sites[n - 1] if fs.failed and fs.failed[0] == calls[n - 1] else (
            _site(san, fs.failed[0]) if fs.failed else "(not reached: init took another path)")
        if r.status not in ("returned", "refused"):
            verdict, why = "oops", r.summary()
            pc = next((ln.split("PC is at ", 1)[1] for ln in (r.oops or "").splitlines() if "PC is at " in ln), None)
            if pc:
                from ..booted.decode import where
                why += f"; PC is at {where(pc.strip(), run.session.modules, run.session.kernel.vmlinux_debug)}"
        elif reps:
            verdict = "report"
            why = "; ".join(f"{x['title'].rstrip(':')} ({x['line']})" if x.get("line") else x["title"].rstrip(":") for x in reps)
        elif r.status == "returned" and r.ret == 0 and fs.failed:
            verdict, why = "success", "init returned 0 with the allocation failed"
        else:
            verdict, why = "handled", r.summary()
        attempts.append(Attempt(n, site, verdict, r.status, r.ret, why, reps))
    name = r.name
    return {"module": name, "allocations": len(calls), "sites": sites, "clean": clean,
            "attempts": [a.to_dict() for a in attempts],
            "bad": [a.to_dict() for a in attempts if a.verdict != "handled"]}
