"""`armload check`: load, relocate, verify and run every module of a tree, in dependency order."""
from __future__ import annotations

import json
import os
import sys
import time

from ..errors import ArmloadError
from .load import add_common_args, config_from_args, parse_placement


def register(sub) -> None:
    p = sub.add_parser("check", help="check every module of a tree (regression suite)",
                       description="Walk a module tree, order modules by their .modinfo depends=, and for "
                                   "every module run the whole pipeline: modversions check, layout, PLT "
                                   "counting, relocation, branch-reach verification and init_module in the "
                                   "emulator. Each module is loaded into its own simulated kernel after its "
                                   "dependency closure; a module whose dependency fails to load is skipped.")
    p.add_argument("tree", metavar="DIR", help="directory of .ko files (searched recursively), or one .ko")
    add_common_args(p)
    p.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1, metavar="N",
                   help="worker processes (default: number of CPUs)")
    p.add_argument("--json", metavar="FILE", help="write per-module records as JSON to FILE ('-' = stdout)")
    p.add_argument("--no-emulate", action="store_true", help="do not run init_module in the emulator")
    p.add_argument("--no-verify", action="store_true", help="skip branch-reach verification")
    p.add_argument("--no-dep-inits", action="store_true",
                   help="do not run the dependencies' init functions before a module's own init")
    p.add_argument("--limit", type=int, metavar="N", help="check only the first N modules in dependency order")
    p.add_argument("--module", action="append", default=[], metavar="NAME",
                   help="check only this module (its dependencies are loaded for it); repeatable")
    p.add_argument("--budget", type=int, default=None, metavar="INSNS",
                   help="instruction budget per init run (default 5,000,000)")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help="wall-clock limit per init run (default 5)")
    p.add_argument("--params", metavar="FILE",
                   help="module parameters, one module a line: `MODULE name=value ...` (# comments); set "
                        "through each module's __param table before its init, as insmod would")
    p.add_argument("--top", type=int, default=10, metavar="N", help="rows in the slowest/largest tables")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=run)


class Progress:
    """`\\r` status line on a TTY, a plain line every few seconds otherwise."""

    def __init__(self, stream=sys.stderr, enabled: bool = True, every: float = 5.0):
        self.stream = stream
        self.enabled = enabled
        self.tty = enabled and hasattr(stream, "isatty") and stream.isatty()
        self.every = every
        self.t0 = time.perf_counter()
        self.last = 0.0
        self.width = 0

    def __call__(self, done: int, total: int, failures: int, rec) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        el = now - self.t0
        finished = done >= total
        if self.tty:
            if now - self.last < 0.1 and not finished:
                return
        elif now - self.last < self.every and not finished:
            return
        self.last = now
        rate = done / el if el > 0 else 0.0
        eta = (total - done) / rate if rate > 0 else 0.0
        frac = done / total if total else 1.0
        if self.tty:
            n = 28
            bar = "#" * int(frac * n) + "-" * (n - int(frac * n))
            line = (f"[{bar}] {done}/{total} modules  {failures} failed  {rate:.1f}/s  "
                    f"{el:.0f}s elapsed, ~{eta:.0f}s left")
            pad = max(0, self.width - len(line))
            self.width = len(line)
            self.stream.write("\r" + line + " " * pad + ("\n" if finished else ""))
        else:
            self.stream.write(f"check: {done}/{total} modules ({frac:.0%}), {failures} failed, "
                              f"{rate:.1f} modules/s, {el:.0f}s elapsed\n")
        self.stream.flush()


def run(args) -> int:
    from ..corpus import (CheckOptions, DEFAULT_BUDGET, DEFAULT_TIMEOUT, build_kernel, plan_order,
                          run_checks, scan_tree, summarize)
    if not os.path.exists(args.tree):
        raise ArmloadError(f"{args.tree}: no such file or directory")
    config = config_from_args(args)
    t_start = time.perf_counter()
    kernel = build_kernel(args.kernel, config)
    kernel.vermagic = getattr(args, "vermagic", None)
    mods = scan_tree(args.tree)
    if not mods:
        raise ArmloadError(f"{args.tree}: no .ko files found")
    plan = plan_order(mods)
    names = list(plan.order)
    if args.module:
        want = [m.replace("-", "_") for m in args.module]
        unknown = [m for m in want if m not in plan.modules]
        if unknown:
            raise ArmloadError(f"no module named {', '.join(unknown)} in {args.tree}")
        names = [n for n in names if n in want]
    if args.limit is not None:
        names = names[:max(0, args.limit)]
    opts = CheckOptions(verify=not args.no_verify, emulate=not args.no_emulate,
                        budget=args.budget or DEFAULT_BUDGET, timeout=args.timeout or DEFAULT_TIMEOUT,
                        dep_inits=not args.no_dep_inits, placement=parse_placement(args.placement),
                        modversions=not args.no_modversions, params=read_params_file(args.params))
    jobs = max(1, args.jobs)
    t_setup = time.perf_counter() - t_start
    progress = Progress(enabled=not args.quiet)
    stats = run_checks(plan, kernel, config, opts, jobs=jobs, names=names, progress=progress)
    recs = stats.records
    summ = summarize(recs)
    wall = time.perf_counter() - t_start
    summ.update(wall_seconds=round(wall, 3), check_seconds=round(stats.wall, 3),
                setup_seconds=round(t_setup, 3), jobs=jobs)

    if args.json:
        doc = {"ok": _exit_status(summ) == 0, "tree": args.tree, "kernel": kernel.describe(),
               "config": {"plt_algorithm": config.plt_algorithm, "l1_cache_bytes": config.l1_cache_bytes,
                          "dynamic_ftrace": config.dynamic_ftrace, "thumb2": config.thumb2,
                          "module_unload": config.module_unload, "placement": args.placement},
               "options": {"verify": opts.verify, "emulate": opts.emulate, "budget": opts.budget,
                           "timeout": opts.timeout, "dep_inits": opts.dep_inits},
               "summary": summ,
               "duplicates": [{"name": n, "path": p} for n, p in plan.duplicates],
               "modules": recs}
        if args.json == "-":
            json.dump(doc, sys.stdout, indent=1, default=_json_default)
            print()
        else:
            with open(args.json, "w") as f:
                json.dump(doc, f, indent=1, default=_json_default)
    out = sys.stderr if args.json == "-" else sys.stdout
    print(format_report(recs, summ, plan, opts, kernel.describe(), args.top), file=out)
    return _exit_status(summ)


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


def _exit_status(summ: dict) -> int:
    bad = summ.get("load_failed", 0) + summ.get("verify_failed", 0) + summ.get("skipped", 0)
    return 1 if bad else 0


def format_report(recs: list[dict], summ: dict, plan, opts, kernel_desc: str, top: int = 10) -> str:
    from ..corpus import failing_apis
    from ..report import table
    n = summ.get("modules", 0)
    g = summ.get
    lines = [f"kernel: {kernel_desc}", ""]
    rows = [["modules", n, ""],
            ["loaded", g("loaded", 0), f"{g('relocations', 0):,} relocations"],
            ["relocated", g("relocated", 0), ""],
            ["failed to load", g("load_failed", 0), ""]]
    if opts.verify:
        rows.append(["verified", g("verified", 0),
                     f"{g('branches_verified', 0):,}/{g('branches', 0):,} branch sites, "
                     f"{g('plt_verified', 0):,}/{g('plt_entries', 0):,} PLT entries"])
        rows.append(["verification failed", g("verify_failed", 0), ""])
    else:
        rows.append(["verified", "-", "not run (--no-verify)"])
    if opts.emulate:
        run_ = g("init_run", 0)
        ok = g("init_returned_0", 0)
        rows += [["init returned 0", ok, f"{ok / run_:.1%} of runs" if run_ else ""],
                 ["no init function", g("init_no_init", 0), ""],
                 ["init returned an error", g("init_returned_error", 0), ""],
                 ["init faulted", g("init_fault", 0), ""],
                 ["init out of budget", g("init_budget", 0), f"{opts.budget:,} instructions"],
                 ["init timed out", g("init_timeout", 0), f"{opts.timeout:g} s"],
                 ["init not run", g("init_not_run", 0), ""]]
    else:
        rows.append(["init", "-", "not run (--no-emulate)"])
    rows.append(["skipped (dependency)", g("skipped", 0), ""])
    lines.append(table([[a, str(b), c] for a, b, c in rows], ["result", "modules", ""], "lrl"))
    lines.append(f"wall time {g('wall_seconds', 0):.1f} s with {g('jobs', 1)} job(s) "
                 f"(setup {g('setup_seconds', 0):.1f} s, checks {g('check_seconds', 0):.1f} s)")

    done = [r for r in recs if r["status"] not in ("skipped",) and r.get("time")]
    if done:
        lines += ["", "slowest modules:"]
        slow = sorted(done, key=lambda r: -r["time"].get("total", 0))[:top]
        lines.append(table([[r["module"], f"{r['time'].get('total', 0) * 1000:.0f}",
                             f"{r['time'].get('deps', 0) * 1000:.0f}", f"{r['time'].get('load', 0) * 1000:.0f}",
                             _ms(r['time'].get('verify')), _ms(r['time'].get('init')),
                             str(len(plan.closure.get(r['module'], [])))] for r in slow],
                           ["module", "total ms", "deps ms", "load ms", "verify ms", "init ms", "deps"], "lrrrrrr"))
        big = sorted([r for r in done if "relocations" in r], key=lambda r: -r["relocations"])[:top]
        if big:
            lines += ["", "largest modules:"]
            lines.append(table([[r["module"], f"{r['size']:,}", f"{r['relocations']:,}",
                                 str(r["branches"]["sites"]),
                                 f"{r['plt']['counts']['v6']['core']}+{r['plt']['counts']['v6']['init']}",
                                 f"{r['time'].get('load', 0) * 1000:.0f}"] for r in big],
                               ["module", "bytes", "relocations", "branches", "v6 PLTs", "load ms"],
                               "lrrrrr"))
    if len(recs) <= 20:
        lines += ["", "modules:"]
        lines.append(table([[r["module"], r["status"], str(r.get("relocations", "-")),
                             str((r.get("branches") or {}).get("sites", "-")), _init_text(r)] for r in recs],
                           ["module", "status", "relocations", "branches", "init"], "llrrl"))
    bad = [r for r in recs if r["status"] != "ok"]
    if bad:
        lines += ["", f"failures ({len(bad)}):"]
        for r in bad[:40]:
            msg = (r.get("error") or {}).get("message", "").replace("\n", "\n      ")
            lines.append(f"  {r['module']}: {r['status']}: {msg}")
        if len(bad) > 40:
            lines.append(f"  ... {len(bad) - 40} more (see --json)")
    if opts.emulate:
        rows = failing_apis(recs, 15)
        if rows:
            lines += ["", "init runs that did not return 0, by the last kernel call made:"]
            lines.append(table([[k, str(n), ", ".join(f"{o} {c}" for o, c in v.most_common(3))]
                                for k, n, v in rows], ["kernel function", "modules", "outcomes"], "lrl"))
    return "\n".join(lines)


def _init_text(r: dict) -> str:
    i = r.get("init")
    if not i:
        return "-"
    o = i["outcome"]
    if o == "returned-0":
        return "returned 0"
    if o == "returned-error":
        return f"returned {i['retval']} ({i.get('errno_name', '')})"
    if i.get("fault"):
        f = i["fault"]
        return f"{o}: {f['message']} (pc {f['pc_sym']})"
    return o + (f": {i['error']}" if i.get("error") else "")


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
