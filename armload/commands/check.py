"""`armload check`: load, relocate, verify and run every module of a tree, in dependency order."""
from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
import time
from collections import OrderedDict

from ..errors import ArmloadError
from .load import add_common_args, config_from_args, follow_image, parse_placement


def register(sub) -> None:
    from ..ci.outcomes import DEFAULT_FAIL_ON, OUTCOMES
    from ..emu.limits import BOOTED_BUDGET as DEFAULT_BUDGET, BOOTED_TIMEOUT as DEFAULT_TIMEOUT    # ci.worker's
    classes = "\n".join(f"  {c:<18} {meaning}" for c, (kind, meaning) in OUTCOMES.items())
    fill = lambda t: textwrap.fill(t, 90)                                     # noqa: E731
    p = sub.add_parser("check", help="check every module of a tree (regression suite)",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description=fill("Walk a module tree, order modules by their .modinfo depends=, and for "
                                        "every module run the whole pipeline: modversions check, layout, PLT "
                                        "counting, relocation, branch-reach verification, then (with --kernel "
                                        "vmlinuz) init inside the booted Debian kernel: a fresh copy of it loads "
                                        "the module's dependency closure and then the module with its own "
                                        "load_module, which runs init, and armload's image is compared with the "
                                        "kernel's, as `armload run` does (the same verdict). Without a kernel "
                                        "image, init is not run (load and verify only) and check says so. Every "
                                        "module ends in one outcome class:") + "\n\n" + classes + "\n\n"
                       + fill("The exit status is 1 when a module's class is in --fail-on or, with "
                              "--baseline, when any module differs from the baseline."))
    p.add_argument("tree", metavar="DIR", help="directory of .ko files (searched recursively), or one .ko")
    add_common_args(p)
    p.add_argument("--builtin-kernel", action="store_true",
                   help="without --kernel, use the built-in kernel that invents an address for every symbol "
                        "(check refuses to run without --kernel otherwise)")
    p.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1, metavar="N",
                   help="worker processes, at least 1 (default: number of CPUs)")
    p.add_argument("--ray", metavar="ADDRESS",
                   help="run the module checks as Ray tasks (pip install 'armload[cluster]'): 'local' starts a "
                        "local Ray instance with --jobs CPUs, 'auto' joins the cluster `ray start` made, or a "
                        "cluster's address; the JSON is the same as a local run's")
    p.add_argument("--json", metavar="FILE", help="write per-module records as JSON to FILE ('-' = stdout); "
                                                  "wall-clock data only under the top-level \"timing\"")
    p.add_argument("--no-timing", action="store_true",
                   help="leave wall-clock data out of the JSON and the text (two runs then give identical JSON)")
    p.add_argument("--fail-on", default=",".join(DEFAULT_FAIL_ON), metavar="CLASSES",
                   help="comma-separated outcome classes that make the check fail, or all / none "
                        f"(default: {','.join(DEFAULT_FAIL_ON)})")
    p.add_argument("--baseline", metavar="FILE",
                   help="compare every module with a previous --json output or a baseline written by "
                        "--update-baseline; any difference fails the check and is listed")
    p.add_argument("--update-baseline", action="store_true",
                   help="write this run's pass (placement, +init) into the --baseline FILE in the compact "
                        "one-line-per-module form (other passes kept; a subset or shard rewrites only its "
                        "modules' lines) and exit 0 once written, whatever --fail-on says")
    p.add_argument("--junit", metavar="FILE", help="write a JUnit XML report: one test case per module and stage")
    p.add_argument("--no-emulate", action="store_true", help="do not run init (load and verify only)")
    p.add_argument("--no-verify", action="store_true", help="skip branch-reach verification")
    p.add_argument("--limit", type=int, metavar="N", help="check only the first N modules in dependency order")
    p.add_argument("--module", action="append", default=[], metavar="NAME",
                   help="check only these modules: a module name, a path relative to the tree, a directory "
                        "of the tree or a glob over either ('drivers/net/can', '*wifi*'); their dependencies "
                        "come from the whole tree; repeatable")
    p.add_argument("--deps-from", metavar="TREE",
                   help="check the modules of DIR only, taking the dependencies they need from the full tree "
                        "TREE (a DIR inside TREE names its modules by their path in TREE, so a baseline of "
                        "TREE applies)")
    p.add_argument("--shard", metavar="K/N",
                   help="check shard K of N (every N-th module of the selection); the baseline is compared "
                        "on the modules that ran; `armload check-merge` joins the shards' --json outputs")
    p.add_argument("--budget", type=int, default=None, metavar="INSNS",
                   help=f"instruction budget per load_module (the kernel's loading and init), for each "
                        f"dependency and the module (default {DEFAULT_BUDGET:,})")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help=f"wall-clock safety net per load (default {DEFAULT_TIMEOUT:g}); when it ends one "
                        "the outcome is 'timeout', a harness failure")
    p.add_argument("--params", metavar="FILE",
                   help="module parameters, one module a line: `MODULE name=value ...` (# comments); passed "
                        "to the kernel's load_module as insmod passes them")
    from .sanitize_opts import add_args as add_sanitize_args
    add_sanitize_args(p, default="none", what="on each module's init (off by default in check: a report is the "
                                              "outcome class sanitizer)")
    p.add_argument("--top", type=int, default=10, metavar="N", help="rows in the slowest/largest tables")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=run)


class Progress:
    """Progress on stderr: a rich bar on a terminal (done/total, failures, rate, ETA, the module
    just finished), a plain line every few seconds otherwise. The rate counts the modules checked
    since the start, not the ones decided before it (blocked by the plan), and is shown once a
    module has been checked."""

    def __init__(self, stream=sys.stderr, enabled: bool = True, every: float = 5.0):
        self.stream = stream
        self.enabled = enabled
        self.tty = enabled and hasattr(stream, "isatty") and stream.isatty()
        self.every = every
        self.t0 = None
        self.done0 = 0
        self.last = 0.0
        self.bar = None

    def rate_eta(self, done: int, total: int) -> tuple[float | None, float | None]:
        el = time.perf_counter() - self.t0
        n = done - self.done0
        if n < 1 or el <= 0:
            return None, None
        rate = n / el
        return rate, (total - done) / rate

    def __call__(self, done: int, total: int, failures: int, rec) -> None:
        if not self.enabled:
            return
        if self.t0 is None:                       # the first call: what the plan decided alone
            self.t0, self.done0 = time.perf_counter(), done
            if self.tty:
                self._start_bar(done, total)
        mod = rec["module"] if rec else ""
        if self.bar is not None:
            bar, task = self.bar
            bar.update(task, completed=done, failures=failures, module=mod)
            return
        now = time.perf_counter()
        if now - self.last < self.every and done < total:
            return
        self.last = now
        rate, eta = self.rate_eta(done, total)
        frac = done / total if total else 1.0
        speed = f"{_rate(rate)} modules/s, ETA {_hms(eta)}" if rate else "rate not known yet"
        self.stream.write(f"check: {done}/{total} modules ({frac:.0%}), {failures} failed, {speed}, "
                          f"{now - self.t0:.0f}s elapsed" + (f", last {mod}" if mod else "") + "\n")
        self.stream.flush()

    def _start_bar(self, done: int, total: int) -> None:
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress as Bar, ProgressColumn,
                                   TextColumn, TimeElapsedColumn)
        from rich.text import Text
        prog = self

        class RateEta(ProgressColumn):
            def render(self, task):
                rate, eta = prog.rate_eta(int(task.completed), int(task.total or 0))
                return Text(f"{_rate(rate):>5}/s ETA {_hms(eta)}" if rate else "    -/s ETA -")
        bar = Bar(TextColumn("check"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("[red]{task.fields[failures]} failed"), RateEta(), TimeElapsedColumn(),
                  TextColumn("{task.fields[module]}"), console=Console(file=self.stream), transient=False)
        task = bar.add_task("check", total=total, completed=done, failures=0, module="")
        bar.start()
        self.bar = (bar, task)

    def close(self) -> None:
        if self.bar is not None:
            self.bar[0].stop()
            self.bar = None


def _rate(r: float) -> str:
    return f"{r:.1f}" if r >= 1 else f"{r:.2g}"


def _hms(sec: float | None) -> str:
    if sec is None:
        return "-"
    sec = int(round(sec))
    return f"{sec // 3600}:{sec // 60 % 60:02d}:{sec % 60:02d}" if sec >= 3600 else f"{sec // 60}:{sec % 60:02d}"


def run(args) -> int:
    from ..ci import baseline as bl
    from ..ci.corpus import build_kernel, run_checks
    from ..ci.outcomes import failed_modules, parse_fail_on, summarize
    from ..ci.selection import parse_shard, scan_with_deps, select, shard
    from ..ci.worker import CheckOptions, DEFAULT_BUDGET, DEFAULT_TIMEOUT
    from ..kernel.modtree import plan_order, scan_tree
    from ..ci.merge import shard_info
    from ..emu.sanitize import parse_classes
    if not os.path.exists(args.tree):
        raise ArmloadError(f"{args.tree}: no such file or directory")
    if not args.kernel and not args.builtin_kernel:
        raise ArmloadError("check: no --kernel given: pass Module.symvers (and vmlinuz or System.map for "
                           "addresses) with --kernel, or --builtin-kernel to use the built-in kernel, which "
                           "invents an address for every symbol")
    if args.jobs < 1:
        raise ArmloadError(f"check: --jobs {args.jobs}: at least one worker is needed")
    try:
        fail_on = parse_fail_on(args.fail_on)
    except ValueError as e:
        raise ArmloadError(f"check: --fail-on: {e}") from None
    if args.update_baseline and not args.baseline:
        raise ArmloadError("check: --update-baseline needs --baseline FILE (the file to write)")
    base = None
    if args.baseline and not (args.update_baseline and not os.path.exists(args.baseline)):
        base = bl.load(args.baseline)           # read first: a bad file fails before the long run
    config = config_from_args(args)
    t_start = time.perf_counter()
    kernel = build_kernel(args.kernel, config)
    kernel.vermagic = getattr(args, "vermagic", None)
    config = follow_image(config, kernel, args)
    filters = []
    if args.deps_from:
        if not os.path.isdir(args.deps_from):
            raise ArmloadError(f"check: --deps-from {args.deps_from}: not a directory")
        mods, mine = scan_with_deps(args.tree, args.deps_from)
        filters.append(f"modules of {args.tree} with dependencies from {args.deps_from}")
    else:
        mods = scan_tree(args.tree)
        mine = None
    if not mods or mine == []:
        raise ArmloadError(f"{args.tree}: no .ko files found")
    plan = plan_order(mods)
    names = list(plan.order) if mine is None else [n for n in plan.order if n in set(mine)]
    if args.module:
        try:
            want = set(select(plan, args.module))
        except ValueError as e:
            raise ArmloadError(f"check: --module: no module named or matching {e} in "
                               f"{args.deps_from or args.tree}") from None
        names = [n for n in names if n in want]
        filters.append("--module " + " ".join(args.module))
    if args.limit is not None:
        names = names[:max(0, args.limit)]
        filters.append(f"--limit {args.limit}")
    shard_of = None
    if args.shard:
        try:
            k, n = parse_shard(args.shard)
        except ValueError as e:
            raise ArmloadError(f"check: --shard {e}") from None
        shard_of = (k, n, names)
        names = shard(names, k, n)
    image = getattr(kernel, "image_path", None)
    opts = CheckOptions(verify=not args.no_verify, emulate=not args.no_emulate and bool(image),
                        budget=args.budget or DEFAULT_BUDGET, timeout=args.timeout or DEFAULT_TIMEOUT,
                        placement=parse_placement(args.placement),
                        modversions=not args.no_modversions, params=read_params_file(args.params),
                        image=image, no_init="--no-emulate" if args.no_emulate else
                        "no kernel image: give --kernel vmlinuz to run init inside the booted kernel",
                        tree=os.path.abspath(args.deps_from or (args.tree if os.path.isdir(args.tree) else
                                                                os.path.dirname(args.tree))),
                        sanitize=parse_classes(args.sanitize))
    if opts.sanitize and opts.emulate:
        from ..emu.sanitize.support import unsupported
        from ..kernel.identity import identify
        from ..kernel.image import load_image
        why = unsupported(load_image(image).symbols, identify(image).config)
        if why:
            raise ArmloadError(f"--sanitize: the sanitizers cannot watch {os.path.basename(image)}: {why}")
    if not opts.emulate and not args.no_emulate and not args.quiet:
        print(f"check: init was not run: {opts.no_init}; load and verify only", file=sys.stderr)
    t_setup = time.perf_counter() - t_start
    progress = Progress(enabled=not args.quiet)
    executor = None
    if args.ray:
        from ..ci import cluster
        executor = cluster.executor(cluster.connect(args.ray, args.jobs),
                                    {"kernel": list(args.kernel), "vermagic": kernel.vermagic, "config": config,
                                     "options": opts}, plan)
    try:
        stats = run_checks(plan, kernel, config, opts, jobs=args.jobs, names=names, progress=progress,
                           executor=executor)
    finally:
        progress.close()
    recs = stats.records
    summ = summarize(recs)
    failed = failed_modules(recs, fail_on)
    timing = {"jobs": args.jobs, "wall_seconds": round(time.perf_counter() - t_start, 3),
              "check_seconds": round(stats.wall, 3), "setup_seconds": round(t_setup, 3),
              "modules": stats.timing}
    doc = OrderedDict({"ok": None, "tree": args.tree, "kernel": kernel.describe(),
           "config": {"plt_algorithm": config.plt_algorithm, "l1_cache_bytes": config.l1_cache_bytes,
                      "dynamic_ftrace": config.dynamic_ftrace, "thumb2": config.thumb2,
                      "module_unload": config.module_unload, "layout": config.layout,
                      "placement": args.placement},
           "options": {"verify": opts.verify, "emulate": opts.emulate, "budget": opts.budget,
                       "timeout": opts.timeout, "modversions": opts.modversions, "init_not_run": None if opts.emulate else opts.no_init,
                       "fail_on": list(fail_on)},
           "summary": summ,
           "failed": failed,
           "duplicates": [{"name": n, "path": p} for n, p in plan.duplicates],
           "selection": ({"filters": filters, "modules": len(shard_of[2]) if shard_of else len(names),
                          "of": len(plan.order)} if filters else None),
           "modules": recs})
    if shard_of:
        doc["shard"] = shard_info(plan, *shard_of)
        doc.move_to_end("modules")
    diff = None
    if base is not None and (bl.pass_name(doc) in base or not args.update_baseline):
        diff = bl.diff(base, doc, args.baseline)
        doc["baseline"] = diff
    # --update-baseline records this run as the new truth: once written, the check has done its job.
    bad = 1 if failed or (diff and diff["differences"]) else 0
    rc = 0 if args.update_baseline else bad
    doc["ok"] = not bad
    if not args.no_timing:
        doc["timing"] = timing
    # The baseline is written from the records without the timing object.
    updated = bl.update(args.baseline, doc) if args.update_baseline else None
    if args.json:
        if args.json == "-":
            json.dump(doc, sys.stdout, indent=1, default=_json_default)
            print()
        else:
            with open(args.json, "w") as f:
                json.dump(doc, f, indent=1, default=_json_default)
                f.write("\n")
    if args.junit:
        from ..ci import junit
        junit.write(args.junit, recs, opts, fail_on, name=f"armload check {args.tree}",
                    timing=None if args.no_timing else stats.timing,
                    properties={"kernel": kernel.describe(), "fail_on": ",".join(fail_on) or "none"})
    out = sys.stderr if args.json == "-" else sys.stdout
    print(format_report(recs, summ, plan, opts, kernel.describe(), args.top, fail_on=fail_on,
                        timing=None if args.no_timing else timing, diff=diff, updated=updated,
                        baseline_file=args.baseline, rc=bad), file=out)
    return rc


def _json_default(o):
    try:
        import numpy as np
        if isinstance(o, np.integer):
            return int(o)
        if isinstance(o, np.floating):
            return float(o)
    except ImportError:
        pass
    return str(o)


def format_report(recs: list[dict], summ: dict, plan, opts, kernel_desc: str, top: int = 10, *,
                  fail_on=(), timing: dict | None = None, diff: dict | None = None, updated: str | None = None,
                  baseline_file: str | None = None, rc: int = 0) -> str:
    from ..ci.baseline import changed_text
    from ..ci.outcomes import OUTCOMES
    from ..inspect.report import table
    n = summ.get("modules", 0)
    g = summ.get
    lines = [f"kernel: {kernel_desc}", ""]
    rows = [["modules", n, ""],
            ["loaded and relocated", g("loaded", 0), f"{g('relocations', 0):,} relocations"]]
    if opts.verify:
        rows.append(["verified", g("verified", 0),
                     f"{g('branches_verified', 0):,}/{g('branches', 0):,} branch sites, "
                     f"{g('plt_verified', 0):,}/{g('plt_entries', 0):,} PLT entries"])
    else:
        rows.append(["verified", "-", "not run (--no-verify)"])
    if opts.emulate:
        rows.append(["init run", g("init_run", 0),
                     f"budget {opts.budget:,} instructions, wall-clock safety net {opts.timeout:g} s"])
    else:
        rows.append(["init run", "-", f"not run ({opts.no_init})"])
    lines.append(table([[a, str(b), c] for a, b, c in rows], ["", "modules", ""], "lrl"))
    lines.append("")
    oc = summ["outcomes"]
    rows = [[c, str(oc.get(c, 0)), meaning + (" (harness)" if kind == "harness" else ""),
             "fails" if c in fail_on and oc.get(c) else ("fail-on" if c in fail_on else "")]
            for c, (kind, meaning) in OUTCOMES.items()]
    lines.append(table(rows, ["outcome", "modules", "", "--fail-on"], "lrll"))
    sc = summ["success"]
    if sc["ratio"] is not None:
        lines.append(f"success: {sc['ok']:,} of {sc['decided']:,} modules ({sc['ratio']:.2%}): outcome ok, over "
                     f"all modules whose outcome was decided (harness classes excluded)")
    if timing:
        lines.append(f"wall time {timing['wall_seconds']:.1f} s with {timing['jobs']} job(s) "
                     f"(setup {timing['setup_seconds']:.1f} s, checks {timing['check_seconds']:.1f} s)")

    mt = (timing or {}).get("modules", {})
    done = [r for r in recs if r["module"] in mt and "relocations" in r]
    if done and top > 0:
        lines += ["", "slowest modules:"]
        slow = sorted(done, key=lambda r: (-mt[r["module"]].get("total", 0), r["module"]))[:top]
        lines.append(table([[r["module"], *(_ms(mt[r["module"]].get(k)) for k in ("total", "deps", "load",
                                                                                   "verify", "init")),
                             str(len(plan.closure.get(r["name"], [])))] for r in slow],
                           ["module", "total ms", "deps ms", "load ms", "verify ms", "init ms", "deps"], "lrrrrrr"))
    big = sorted([r for r in recs if "relocations" in r], key=lambda r: (-r["relocations"], r["module"]))[:top]
    if big and top > 0:
        alg = next(iter(big[0]["plt"]["counts"]))
        alg = "v6" if "v6" in big[0]["plt"]["counts"] else alg
        lines += ["", "largest modules:"]
        lines.append(table([[r["module"], f"{r['size']:,}", f"{r['relocations']:,}",
                             str(r["branches"]["sites"]),
                             f"{r['plt']['counts'][alg]['core']}+{r['plt']['counts'][alg]['init']}"] for r in big],
                           ["module", "bytes", "relocations", "branches", f"{alg} PLTs"], "lrrrr"))
    if len(recs) <= 20:
        lines += ["", "modules:"]
        lines.append(table([[r["module"], r["outcome"], str(r.get("relocations", "-")),
                             str((r.get("branches") or {}).get("sites", "-")), _init_text(r)] for r in recs],
                           ["module", "outcome", "relocations", "branches", "init"], "llrrl"))
    bad = [r for r in recs if r["outcome"] != "ok"]
    if bad:
        lines += ["", f"modules that did not succeed ({len(bad)}), by outcome:"]
        for c in OUTCOMES:
            grp = [r for r in bad if r["outcome"] == c]
            if not grp:
                continue
            lines.append(f"{c} ({len(grp)}{', in --fail-on' if c in fail_on else ''}):")
            for r in grp:
                where = f"; at {r['where']}" if r.get("where") and r["where"] not in (r.get("reason") or "") else ""
                lines.append(f"  {r['module']}: {r.get('reason') or c}{where}")
    if diff is not None:
        ran = ", the modules that ran" if diff.get("subset") else ""
        lines += ["", f"baseline {diff['file']} (pass {diff['pass']}, {diff['modules_compared']:,} modules compared{ran}): "
                  + (_diff_text(diff) if diff["differences"] else "no difference")]
        for note in diff["option_differences"]:
            lines.append(f"  {note}")
        if diff["changes"]:
            lines.append("  " + ", ".join(f"{k} {v}" for k, v in sorted(diff["counts"].items())))
            rows = []
            for ch in diff["changes"]:
                b, c = changed_text(ch)
                rows.append([ch["module"], ", ".join(ch["kinds"]), b, c])
            lines.append(table(rows, ["module", "change", "baseline", "now"], "llll"))
            for ch in diff["changes"]:
                if ch.get("reason") and "newly failing" in ch["kinds"] or "changed outcome" in ch["kinds"]:
                    lines.append(f"  {ch['module']}: {ch.get('reason')}")
    if updated:
        lines.append(f"baseline {baseline_file}: pass {updated} written")
    fails = failed_modules_text(summ, fail_on)
    verdict = [f"{fails} (--fail-on {','.join(fail_on) or 'none'})"] if fails else []
    if diff and diff["differences"] and not updated:
        verdict.append(f"baseline: {_diff_text(diff)}")
    if updated:
        lines += ["", f"check: baseline written (exit status 0 with --update-baseline)"
                  + (f"; without it: FAILED: {'; '.join(verdict)}" if verdict else "")]
    else:
        lines += ["", f"check: {'FAILED: ' + '; '.join(verdict) if rc else 'passed'}"
                  + ("" if rc or not fail_on else f" (no module in --fail-on {','.join(fail_on)})")]
    return "\n".join(lines)


def _diff_text(diff: dict) -> str:
    n, other = len(diff["changes"]), len(diff["option_differences"])
    return f"{n} module(s) differ" + (f", {other} option/total difference(s)" if other else "")


def failed_modules_text(summ: dict, fail_on) -> str:
    hit = [(c, summ["outcomes"].get(c, 0)) for c in fail_on if summ["outcomes"].get(c)]
    if not hit:
        return ""
    return f"{sum(n for _, n in hit)} module(s) in " + ", ".join(f"{c} {n}" for c, n in hit)


def _init_text(r: dict) -> str:
    i = r.get("init")
    if not i:
        return "-"
    st = i.get("status")
    if st == "returned":
        v = i.get("retval")
        return f"returned {v}" + (f" ({i['errno_name']})" if i.get("errno_name") else "")
    from ..ci.outcomes import labelled
    where = i.get("where")
    return labelled(st, i.get("reason")) + (f" (at {where})" if where and where not in (i.get("reason") or "") else "")


def _ms(v) -> str:
    return "-" if v is None else f"{v * 1000:.0f}"


def read_params_file(path: str | None) -> dict[str, list[str]]:
    """`MODULE name=value ...` lines -> {module: [words]} (module names with - or _ alike)."""
    import shlex
    out: dict[str, list[str]] = {}
    if not path:
        return out
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError as e:
        raise ArmloadError(f"--params: cannot read {path}: {e.strerror}") from None
    for n, line in enumerate(lines, 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            words = shlex.split(line)
        except ValueError as e:
            raise ArmloadError(f"--params {path}:{n}: {e}") from None
        out.setdefault(words[0].replace("-", "_"), []).extend(words[1:])
    return out
