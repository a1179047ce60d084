"""JUnit XML for `armload check` (written with junitparser): one test case per module and stage
(load, verify, init), the module's path as the class name (dots between its directories, no ".ko",
see `classname`), so CI dashboards group by directory and module.

A stage whose outcome class is in --fail-on is a <failure> (an <error> for the harness classes,
timeout and internal); a stage that did not succeed but is not in --fail-on passes and says
why in <system-out>; a stage that did not run is <skipped>. So the dashboard's failures are
exactly what made the check exit 1 (baseline differences aside).
"""
from __future__ import annotations

from junitparser import Error, Failure, JUnitXml, Skipped, TestCase, TestSuite

from .outcomes import OUTCOMES, labelled, stage_results
from .worker import CheckOptions

STAGES = ("load", "verify", "init")
_TIME_KEY = {"load": "load", "verify": "verify", "init": "init"}


def build(records: list[dict], options: CheckOptions, fail_on, *, name: str = "armload check",
          timing: dict | None = None, properties: dict | None = None) -> JUnitXml:
    suite = TestSuite(name)
    for k, v in (properties or {}).items():
        suite.add_property(k, str(v))
    for rec in records:
        t = (timing or {}).get(rec["module"], {})
        for stage, (cls, why) in stage_results(rec, options).items():
            case = TestCase(stage, classname=classname(rec["module"]),
                            time=t.get(_TIME_KEY[stage]) if timing else None)
            msg = labelled(str(cls), why)
            where = rec.get("where") if cls == rec["outcome"] else (rec.get("init") or {}).get("where")
            if where and cls not in (None, "ok") and where not in msg:
                msg += f" (at {where})"
            if cls is None:
                case.result = [Skipped(why)]
            elif cls in fail_on:
                res = (Error if OUTCOMES[cls][0] == "harness" else Failure)(msg, cls)
                res.text = _detail(rec, stage)
                case.result = [res]
            elif cls != "ok" or why:
                case.system_out = f"{msg} (not a failure: {cls} is not in --fail-on)" if cls != "ok" else msg
            suite.add_testcase(case)
    suite.update_statistics()
    xml = JUnitXml()
    xml.add_testsuite(suite)
    return xml


def classname(module: str) -> str:
    """The module's path without ".ko", its directories joined by dots: viewers (Jenkins, GitLab)
    split a class name at its last dot into package and class, so "net/hamradio/6pack.ko" would
    show as class "ko" of package "net/hamradio/6pack"; "net.hamradio.6pack" shows as class
    "6pack" in package "net.hamradio". A dot inside a file name becomes "_" so that the split
    still falls between the directory and the module."""
    from ..kernel.kofile import SUFFIXES
    stem = next((module[:-len(s)] for s in sorted(SUFFIXES, key=len, reverse=True) if module.endswith(s)), module)
    parts = stem.split("/")
    return ".".join(p.replace(".", "_") for p in parts)


def _detail(rec: dict, stage: str) -> str:
    lines = [f"module: {rec['module']} ({rec['name']})", f"outcome: {rec['outcome']}"]
    if rec.get("reason"):
        lines.append(f"reason: {rec['reason']}")
    if rec.get("where"):
        lines.append(f"at: {rec['where']}")
    err = rec.get("error") or {}
    if stage == "load" and err.get("message") and err["message"] != rec.get("reason"):
        lines.append(err["message"])
    v = rec.get("verify") or {}
    if stage == "verify":
        lines += v.get("failures", [])
    i = rec.get("init") or {}
    if stage == "init":
        lines += [f"console: {x}" for x in i.get("console", [])]     # the kernel's last console lines
    return "\n".join(lines)


def write(path: str, records: list[dict], options: CheckOptions, fail_on, **kw) -> None:
    build(records, options, fail_on, **kw).write(path, pretty=True)
