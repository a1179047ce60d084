"""`armload check-merge`: join the --json outputs of `check --shard 1/N` ... `N/N` into one report."""
from __future__ import annotations

import argparse
import json
import sys


def register(sub) -> None:
    p = sub.add_parser("check-merge", help="join the JSON of `check --shard K/N` runs into one report",
                       description="Join the --json outputs of `armload check --shard 1/N` ... `N/N` (one run "
                                   "split into N shards, e.g. over CI machines) into the report the whole run "
                                   "would have given: the same JSON (timing aside), the same text, baseline "
                                   "comparison and JUnit. The exit status is that of the whole run: 1 when a "
                                   "module's class is in the shards' --fail-on or differs from --baseline.")
    p.add_argument("shards", nargs="+", metavar="SHARD.json", help="the shards' --json outputs, in any order")
    p.add_argument("--json", metavar="FILE", help="write the merged JSON to FILE ('-' = stdout)")
    p.add_argument("--baseline", metavar="FILE", help="compare the merged run with this baseline")
    p.add_argument("--update-baseline", action="store_true",
                   help="write the merged run's pass into the --baseline FILE and exit 0")
    p.add_argument("--junit", metavar="FILE", help="write a JUnit XML report of the merged run")
    p.add_argument("--top", type=int, default=10, metavar="N", help="rows in the slowest/largest tables")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..ci import baseline as bl
    from ..ci.worker import CheckOptions
    from ..kernel.modtree import Plan
    from ..ci.merge import merge
    from ..errors import ArmloadError
    from .check import _json_default, format_report
    if args.update_baseline and not args.baseline:
        raise ArmloadError("check-merge: --update-baseline needs --baseline FILE (the file to write)")
    docs = []
    for path in args.shards:
        try:
            with open(path) as f:
                docs.append(json.load(f))
        except OSError as e:
            raise ArmloadError(f"check-merge: {path}: cannot read: {e.strerror}") from None
        except json.JSONDecodeError as e:
            raise ArmloadError(f"check-merge: {path}: not JSON: {e}") from None
    base = None
    if args.baseline and not (args.update_baseline and not __import__("os").path.exists(args.baseline)):
        base = bl.load(args.baseline)
    doc = merge(docs, args.shards)
    diff = None
    if base is not None and (bl.pass_name(doc) in base or not args.update_baseline):
        diff = bl.diff(base, doc, args.baseline)
        doc["baseline"] = diff
        if "timing" in doc:
            doc.move_to_end("timing")
    bad = 1 if doc["failed"] or (diff and diff["differences"]) else 0
    doc["ok"] = not bad
    updated = bl.update(args.baseline, doc) if args.update_baseline else None
    if args.json:
        f = sys.stdout if args.json == "-" else open(args.json, "w")
        json.dump(doc, f, indent=1, default=_json_default)
        f.write("\n")
        if f is not sys.stdout:
            f.close()
    o = doc["options"]
    opts = CheckOptions(verify=o["verify"], emulate=o["emulate"], budget=o["budget"], timeout=o["timeout"],
                        modversions=o["modversions"])
    fail_on = tuple(o["fail_on"])
    if args.junit:
        from ..ci import junit
        junit.write(args.junit, doc["modules"], opts, fail_on, name=f"armload check {doc['tree']}",
                    properties={"kernel": doc["kernel"], "fail_on": ",".join(fail_on) or "none",
                                "shards": len(docs)})
    plan = Plan([r["name"] for r in doc["modules"]], {}, {})
    timing = doc.get("timing")
    text = format_report(doc["modules"], doc["summary"], plan, opts, doc["kernel"], args.top, fail_on=fail_on,
                         timing=None, diff=diff, updated=updated, baseline_file=args.baseline, rc=bad)
    head = f"merged {len(docs)} shard(s) of {doc['tree']}: {len(doc['modules'])} modules"
    if timing:
        head += f"; slowest shard {timing['wall_seconds']:.1f} s"
    print(head + "\n" + text, file=sys.stderr if args.json == "-" else sys.stdout)
    return 0 if args.update_baseline else bad
