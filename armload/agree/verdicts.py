"""Agreement of armload's init verdicts with the real kernel's (the QEMU oracle's results file):
`armload agree verdicts ARMLOAD.json [--oracle RESULTS.json] [--min PERCENT]`.

Both sides are read from JSON only: the oracle's `tests/oracles/qemu/results.json` (written by
`make qemu-oracle`, which shares no code with armload) and armload's own `check --json` or
`run --json` output, so the comparison holds for whichever runtime produced it.

A verdict is what insmod sees. In the kernel, finit_module returns 0 or -errno (do_init_module
fails on ret < 0 and only warns on ret > 0, kernel/module/main.c), or the task oopses, or it never
returns. Verdict kinds, one row each:
"""
from __future__ import annotations

import json
import sys
from collections import Counter
from dataclasses import dataclass, field

from ..errors import ArmloadError

KINDS = {
    "returned":   "finit_module returned (0 or -errno): init's result or the loader's refusal",
    "oops":       "the kernel oopsed or panicked (armload: init faulted)",
    "hang":       "init did not return within the limit (QEMU: timeout; armload: budget)",
    "dependency": "a dependency failed first, so the module itself was not inserted",
    "undecided":  "armload reached no verdict (unmodelled call, harness failure, not run)",
    "missing":    "the module is not in armload's output",
}

# armload check's init status -> verdict kind ("returned" takes retval; see kernel_ret()).
INIT_KIND = {"returned": "returned", "no-function": "returned", "params-refused": "returned",
             "fault": "oops", "budget": "hang", "unmodelled": "undecided", "timeout": "undecided",
             "not-run": "undecided",
             # the booted kernel's (ci/booted.init_data): load_module's -errno is finit_module's return;
             # an oops kills insmod, a panic ends the machine (the oracle counts both as oops); a task
             # that never returns (watchdog reports, armload's proven spin, simulated time) is a hang
             "refused": "returned", "oops": "oops", "panic": "oops", "soft-lockup": "hang",
             "hung-task": "hang", "hang": "hang", "time-budget": "hang"}


@dataclass(frozen=True)
class Verdict:
    kind: str                  # a KINDS key
    ret: int | None = None     # "returned": what finit_module gives (0 or negative)
    detail: str = ""           # errno name, fault place, unmodelled function, failed dependency

    def agrees(self, other: "Verdict") -> bool:
        if self.kind != other.kind or self.kind in ("undecided", "missing"):
            return False
        return self.kind != "returned" or self.ret == other.ret

    def label(self) -> str:
        """A short class name: '0', '-ENODEV', 'oops', 'unmodelled', 'dependency (unmodelled)'..."""
        if self.kind == "returned":
            return "0" if self.ret == 0 else _errno(self.ret)
        if self.kind in ("undecided", "dependency", "hang") and self.detail:
            head = self.detail.split(":", 1)[0]
            return f"dependency ({head})" if self.kind == "dependency" else head
        return self.kind


def _errno(ret: int) -> str:
    """-19 -> '-ENODEV'; a value outside -4095..-1 (a pointer returned as an error) in hex."""
    import errno
    if -4095 <= ret < 0:
        return "-" + errno.errorcode.get(-ret, str(-ret))
    return f"{ret & 0xffffffff:#x}"


def kernel_ret(retval: int) -> int:
    """The value finit_module returns for init's return value (do_init_module: ret > 0 only warns)."""
    return retval if retval < 0 else 0


# --------------------------------------------------------------------------------------------
# Reading both sides
# --------------------------------------------------------------------------------------------
def load_json(path: str, what: str) -> dict:
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as e:
        raise ArmloadError(f"{what} {path}: {e.strerror}", errno=-e.errno) from None
    except json.JSONDecodeError as e:
        raise ArmloadError(f"{what} {path}: not JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("modules"), list):
        raise ArmloadError(f"{what} {path}: no \"modules\" list (expected {what} JSON)")
    return doc


def oracle_verdicts(doc: dict) -> dict[str, Verdict]:
    """module path (relative to the tree) -> the real kernel's verdict, from the oracle's results."""
    out = {}
    for r in doc["modules"]:
        v = r.get("verdict")
        if v in ("ok", "error"):
            out[r["module"]] = Verdict("returned", int(r["ret"]), r.get("errno") or "")
        elif v in ("oops", "panic"):
            out[r["module"]] = Verdict("oops", None, v)
        elif v == "hang":
            out[r["module"]] = Verdict("hang")
        elif v == "dependency-failed":
            bad = r.get("dep_failed") or {}
            why = "oops" if bad.get("oops") or bad.get("killed") else (bad.get("errno") or "?")
            out[r["module"]] = Verdict("dependency", None, f"{why}: {bad.get('module', '?')}")
        else:
            raise ArmloadError(f"oracle results: module {r.get('module')!r} has unknown verdict {v!r}")
    return out


def armload_verdict(rec: dict) -> Verdict:
    """The verdict of one `armload check --json` record."""
    outcome = rec.get("outcome")
    init = rec.get("init")
    if outcome == "dependency-failed":
        dep = rec.get("dependency") or {}
        failed = (init or {}).get("dependency_init_failures") or []
        why = dep.get("outcome") or "failed"
        if failed:
            f = failed[0]
            why = f.get("status", why)
            if why == "returned" and isinstance(f.get("retval"), int):
                why = _errno(kernel_ret(f["retval"]))
            elif why == "unmodelled":
                why = f"unmodelled: {(f.get('where') or f.get('reason') or '?').split()[0]}"
        return Verdict("dependency", None, f"{why}: {dep.get('module') or dep.get('name') or '?'}")
    if outcome == "load":
        err = (rec.get("error") or {}).get("errno")
        if isinstance(err, int) and err < 0:
            return Verdict("returned", err, f"load: {rec.get('reason') or ''}")
        return Verdict("undecided", None, f"load: {rec.get('reason') or ''}")
    if outcome in ("verify", "internal", "timeout"):
        return Verdict("undecided", None, f"{outcome}: {rec.get('reason') or ''}")
    if init is None:
        return Verdict("undecided", None, "not-run: init was not run (--no-emulate?)")
    return _init_verdict(init)


def _init_verdict(init: dict) -> Verdict:
    st = init.get("status")
    kind = INIT_KIND.get(st, "undecided")
    if kind == "returned":
        ret = init.get("retval")
        return Verdict("returned", kernel_ret(ret) if isinstance(ret, int) else 0, init.get("reason") or st)
    if st == "unmodelled":
        fn = init.get("unmodelled_call") or init.get("unmodelled") or "?"
        return Verdict("undecided", None, f"unmodelled: {fn}")
    if kind == "oops":
        return Verdict("oops", None, init.get("where") or "")
    if kind == "hang":
        return Verdict("hang", None, f"{st}: {init.get('where') or init.get('reason') or ''}")
    return Verdict("undecided", None, f"{st}: {init.get('reason') or ''}")


def armload_verdicts(doc: dict) -> dict[str, Verdict]:
    """Key -> verdict from `armload check --json` (key: the module's path relative to the tree) or
    `armload run --json` (key: the module's path as given; matched by suffix in compare())."""
    out = {}
    for r in doc["modules"]:
        if "outcome" in r:
            out[r["module"]] = armload_verdict(r)
        elif "run" in r or "path" in r:
            run = r.get("run")
            out[r["path"]] = _init_verdict(run) if run else Verdict("undecided", None, "not-run: no init run")
        else:
            raise ArmloadError(f"armload JSON: a module record has neither \"outcome\" (check) nor \"run\" (run)")
    return out


# --------------------------------------------------------------------------------------------
# The comparison
# --------------------------------------------------------------------------------------------
@dataclass
class Row:
    module: str
    kernel: Verdict
    armload: Verdict

    @property
    def agree(self) -> bool:
        return self.kernel.agrees(self.armload)

    @property
    def cls(self) -> str:
        """'kernel K / armload A', the disagreement class (the same text for agreements)."""
        return f"kernel {self.kernel.label()} / armload {self.armload.label()}"


@dataclass
class Agreement:
    rows: list[Row] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.rows)

    @property
    def agreed(self) -> int:
        return sum(r.agree for r in self.rows)

    @property
    def percent(self) -> float:
        return 100.0 * self.agreed / self.total if self.total else 0.0

    def disagreements(self) -> list[Row]:
        return [r for r in self.rows if not r.agree]

    def classes(self) -> Counter:
        """Disagreement class -> modules."""
        return Counter(r.cls for r in self.disagreements())

    def stopping_functions(self) -> Counter:
        """The unmodelled kernel function that stopped armload (its own init or a dependency's)."""
        c = Counter()
        for r in self.disagreements():
            d = r.armload.detail
            if "unmodelled: " in d:
                c[d.split("unmodelled: ", 1)[1].split(":", 1)[0].strip()] += 1
        return c

    def to_dict(self) -> dict:
        return {"modules": self.total, "agree": self.agreed, "percent": round(self.percent, 1),
                "classes": dict(self.classes().most_common()),
                "stopping_functions": dict(self.stopping_functions().most_common()),
                "disagreements": [{"module": r.module, "kernel": r.kernel.label(), "armload": r.armload.label(),
                                   "armload_detail": r.armload.detail, "kernel_detail": r.kernel.detail}
                                  for r in self.disagreements()]}


def compare(kernel: dict[str, Verdict], armload: dict[str, Verdict]) -> Agreement:
    """One row per module of the oracle. armload's keys are tree-relative paths (check) or any
    path ending in the oracle's (run); a module armload did not report is 'missing'."""
    rows = []
    for mod in sorted(kernel):
        v = armload.get(mod)
        if v is None:
            v = next((a for k, a in armload.items() if k.endswith("/" + mod)), Verdict("missing"))
        rows.append(Row(mod, kernel[mod], v))
    return Agreement(rows)


# --- the report (armload agree verdicts) -------------------------------------------------------------
def _table(rows, header, align) -> str:
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    fmt = lambda r: "  ".join(str(c).rjust(w) if a == "r" else str(c).ljust(w)      # noqa: E731
                              for c, w, a in zip(r, widths, align)).rstrip()
    return "\n".join([fmt(header), "  ".join("-" * w for w in widths)] + [fmt(r) for r in rows])


def report(armload_json: str, oracle_json: str, min_percent: float = 0.0, listed: int = 10,
           as_json: bool = False) -> int:
    """Print the comparison (tables, or JSON); 0 when the agreement is at least `min_percent`, else 1."""
    if not 0.0 <= min_percent <= 100.0:
        raise ArmloadError(f"--min {min_percent:g}: a percentage from 0 to 100")
    oracle = load_json(oracle_json, "oracle results")
    mine = load_json(armload_json, "armload")
    ag = compare(oracle_verdicts(oracle), armload_verdicts(mine))
    ok = ag.percent >= min_percent
    if as_json:
        json.dump({"ok": ok, "min": min_percent, **ag.to_dict()}, sys.stdout, indent=2)
        print()
        return 0 if ok else 1
    k = oracle.get("kernel", {})
    print(f"real kernel: {k.get('version') or k.get('image')} under {oracle.get('qemu', {}).get('version', 'QEMU')}")
    kinds = {}
    for r in ag.rows:
        kinds.setdefault(r.kernel.label(), [0, 0])[0] += 1
        kinds[r.kernel.label()][1] += r.agree
    print()
    print(_table([[lab, n, a, f"{100 * a / n:.1f}%"] for lab, (n, a) in sorted(kinds.items(), key=lambda x: -x[1][0])],
                 ["kernel verdict", "modules", "armload agrees", "share"], "lrrr"))
    print()
    cls = ag.classes()

    def eg(c):
        mods = [r.module for r in ag.disagreements() if r.cls == c]
        return ", ".join(mods[:3]) + (", ..." if len(mods) > 3 else "")
    print(_table([[c, n, eg(c)] for c, n in cls.most_common()], ["disagreement class", "modules", "e.g."], "lrl"))
    fns = ag.stopping_functions()
    if fns:
        print()
        print(_table([[f, n] for f, n in fns.most_common(15)],
                     ["unmodelled call that stopped armload (own init or a dependency's)", "modules"], "lr"))
    if listed:
        print()
        for c, n in cls.most_common():
            rows = [r for r in ag.disagreements() if r.cls == c][:listed]
            print(f"{c} ({n}):")
            for r in rows:
                print(f"  {r.module}: {r.armload.detail or r.armload.kind}")
    print()
    print(f"agreement: {ag.agreed} of {ag.total} modules ({ag.percent:.1f}%) "
          f"{'>=' if ok else 'below'} the minimum {min_percent:g}%")
    return 0 if ok else 1
