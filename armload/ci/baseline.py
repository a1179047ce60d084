"""Per-module regression baselines for `armload check`: the compared fields of every module,
and the difference between two runs.

A baseline is either a previous `check --json` output or the compact form written by
`--update-baseline`: one line per module, per pass (a pass is the placement plus "+init" when
init ran), holding only the compared fields:

    "fs/btrfs/btrfs.ko": ["ok", 1404, 37, 0, 0, 1925120],

that is FIELDS: the outcome key (class plus a short stable detail), the reserved PLT entries
(core, init) under the run's PLT algorithm, the PLT entries emitted (core, init), the image
size in bytes and the content fingerprint: the file's SHA-256 (16 hex digits), its GNU
build-id and the loaded image's SHA-256 (every allocation's address and relocated bytes). A
module that never loaded has null for what only a load gives. A field is compared only where
both sides have it, so a /1 baseline (six fields) still compares what it holds.

A run over part of a tree (--module, --limit, --shard, or DIR with --deps-from) is compared
on the modules that ran; --update-baseline then rewrites only their lines.
"""
from __future__ import annotations

import json
import os
import re

from ..errors import ArmloadError

FORMAT = "armload-check-baseline/2"
FORMATS = ("armload-check-baseline/1", FORMAT)         # /1: the first six fields only
FIELDS = ("outcome", "plt_core", "plt_init", "plt_used_core", "plt_used_init", "image_bytes",
          "file_sha256", "build_id", "image_sha256")
FINGERPRINT = ("file_sha256", "build_id", "image_sha256")
# The options that change results: a baseline made with others is not comparable.
TOTALS = ("modules", "relocations", "branches")          # summary totals compared as well
RESULT_OPTIONS = ("placement", "plt_algorithm", "l1_cache_bytes", "dynamic_ftrace", "thumb2",
                  "module_unload", "verify", "emulate", "budget")


def pass_name(doc: dict) -> str:
    return str(doc["config"]["placement"]) + ("+init" if doc["options"]["emulate"] else "")


def pass_options(doc: dict) -> dict:
    both = {**doc["config"], **doc["options"]}
    return {k: both.get(k) for k in RESULT_OPTIONS}


# The loader's error classes as the one word a reader needs (the stage that refused).
ERROR_KIND = {"ElfFormatError": "format", "SymbolError": "symbol", "RelocationError": "relocation",
              "LayoutError": "layout", "PltError": "plt", "KernelFileError": "kernel-file",
              "EmulationError": "emulation", "InternalError": "internal", "ArmloadError": None}


def outcome_key(rec: dict) -> str:
    """The outcome class and a short detail that is stable across trees and machines."""
    o = rec["outcome"]
    i = rec.get("init") or {}
    if o == "load":
        err = rec.get("error") or {}
        detail = rec["stage"] if rec.get("stage") == "order" else ERROR_KIND.get(err.get("error"), "refused")
        return " ".join(x for x in (o, detail, err.get("errno_name")) if x)
    if o == "dependency-failed":
        return f"{o} {(rec.get('dependency') or {}).get('name')}"
    if o == "error":
        return f"{o} -{i.get('errno_name') or i.get('retval')}"
    if o == "sanitizer":
        from .sanitized import baseline_detail
        return f"{o} {baseline_detail(i)}"
    if o == "fault":
        fn = re.sub(r"\+0x[0-9a-f]+(/0x[0-9a-f]+)?", "", (i.get("where") or "?").split(" (")[0])   # no file:line
        return f"{o} {i.get('status')} in {fn}"
    return o


def entry(rec: dict, algorithm: str) -> list:
    fp = [rec.get("sha256"), rec.get("build_id"), rec.get("image_sha256")]
    if "relocations" not in rec:
        return [outcome_key(rec), None, None, None, None, None] + fp
    p = rec["plt"]
    c = p["counts"][algorithm]
    return [outcome_key(rec), c["core"], c["init"], p["core_entries"], p["init_entries"], rec["image_bytes"]] + fp


def is_subset(doc: dict) -> bool:
    """The run covered part of its tree (a selection or a shard)."""
    return bool(doc.get("selection") or doc.get("shard"))


def from_check(doc: dict) -> dict:
    """A `check --json` document as one baseline pass."""
    alg = doc["config"]["plt_algorithm"]
    s = doc.get("summary", {})
    return {"options": pass_options(doc), "kernel": doc.get("kernel"),
            "totals": {k: s.get(k, 0) for k in TOTALS},
            "modules": {r["module"]: entry(r, alg) for r in doc["modules"]}}


def load(path: str) -> dict:
    """{pass name: pass} from a compact baseline or a full `check --json` output."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as e:
        raise ArmloadError(f"{path}: cannot read the baseline: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise ArmloadError(f"{path}: not a JSON baseline: {e}") from None
    if isinstance(doc, dict) and doc.get("format") in FORMATS:
        return doc["passes"]
    if isinstance(doc, dict) and isinstance(doc.get("modules"), list) and "config" in doc:
        return {pass_name(doc): from_check(doc)}
    raise ArmloadError(f"{path}: neither a `check --json` output nor an armload baseline ({FORMAT})")


def is_compact(path: str) -> bool:
    try:
        with open(path) as f:
            return json.load(f).get("format") in FORMATS
    except (OSError, ValueError, AttributeError):
        return False


def write(path: str, passes: dict) -> None:
    """One line per module so that a change reads as a one-line diff in review."""
    out = ['{"format": "%s",' % FORMAT,
           ' "fields": %s,' % json.dumps(list(FIELDS)),
           ' "passes": {']
    names = sorted(passes)
    for k, name in enumerate(names):
        p = passes[name]
        out.append(f'  {json.dumps(name)}: {{"options": {json.dumps(p["options"], sort_keys=True)},')
        out.append(f'   "kernel": {json.dumps(p.get("kernel"))},')
        out.append(f'   "totals": {json.dumps(p.get("totals", {}), sort_keys=True)},')
        out.append('   "modules": {')
        mods = sorted(p["modules"].items())
        for j, (m, e) in enumerate(mods):
            out.append(f"{json.dumps(m)}:{json.dumps(e, separators=(',', ':'))}"
                       + ("," if j < len(mods) - 1 else ""))
        out.append("  }}" + ("," if k < len(names) - 1 else ""))
    out.append(" }}")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(out) + "\n")
    os.replace(tmp, path)


def update(path: str, doc: dict) -> str:
    """Write this run's pass into the compact baseline at `path` (other passes kept)."""
    passes = {}
    if os.path.exists(path):
        if not is_compact(path):
            raise ArmloadError(f"{path}: --update-baseline writes the compact baseline format; this file "
                               f"is something else (a full --json output?): give another file")
        passes = load(path)
    name = pass_name(doc)
    cur = from_check(doc)
    old = passes.get(name)
    if is_subset(doc) and old is not None:
        # Part of the tree ran: its modules' lines change, the others and the totals stay.
        cur = {**old, "options": cur["options"], "kernel": cur["kernel"],
               "modules": {**old["modules"], **cur["modules"]}}
    elif is_subset(doc):
        cur["totals"] = {}
    passes[name] = cur
    write(path, passes)
    return name


def _both(b: dict, c: dict, k: str) -> bool:
    """Whether field k differs, compared only where both sides have it."""
    return b.get(k) is not None and c.get(k) is not None and b[k] != c[k]


def _kind(b: list | None, c: list | None) -> list[str]:
    if b is None:
        return ["new module"]
    if c is None:
        return ["module gone"]
    kinds = []
    bf, cf = _fields(b), _fields(c)
    bo, co = bf["outcome"].split()[0], cf["outcome"].split()[0]
    if bf["outcome"] != cf["outcome"]:
        if bo == "ok":
            kinds.append("newly failing")
        elif co == "ok":
            kinds.append("newly passing")
        else:
            kinds.append("changed outcome")
    if any(_both(bf, cf, k) for k in ("plt_core", "plt_init", "plt_used_core", "plt_used_init")):
        kinds.append("changed PLT counts")
    if _both(bf, cf, "image_bytes"):
        kinds.append("changed image size")
    if _both(bf, cf, "build_id"):
        kinds.append("rebuilt (new build-id)")
    elif _both(bf, cf, "file_sha256"):
        same = bf.get("build_id") is not None and bf.get("build_id") == cf.get("build_id")
        kinds.append("file changed, same build-id" if same else "file changed")
    if _both(bf, cf, "image_sha256"):
        kinds.append("loaded image changed" + ("" if _both(bf, cf, "file_sha256") else
                                              " (same file: the kernel or the loader differs)"))
    return kinds


def diff(base: dict, doc: dict, path: str = "baseline") -> dict:
    """The per-module difference between the baseline pass matching `doc` and `doc`. A run over
    part of the tree is compared on the modules that ran (no "module gone", no totals)."""
    name = pass_name(doc)
    if name not in base:
        raise ArmloadError(f"{path}: no {name!r} pass in the baseline (it has {', '.join(sorted(base)) or 'none'}); "
                           f"create it with --update-baseline")
    bp = base[name]
    cur = from_check(doc)
    subset = is_subset(doc)
    notes = []
    for k in RESULT_OPTIONS:
        bv, cv = bp.get("options", {}).get(k), cur["options"].get(k)
        if bv != cv:
            notes.append(f"option {k}: {bv} in the baseline, {cv} now")
    for k in TOTALS if not subset else ():
        bv, cv = bp.get("totals", {}).get(k), cur["totals"].get(k)
        if bv is not None and bv != cv:
            notes.append(f"total {k}: {bv:,} in the baseline, {cv:,} now")
    bm, cm = bp["modules"], cur["modules"]
    reasons = {r["module"]: r.get("reason") for r in doc["modules"]}
    changes = []
    for m in sorted(set(cm) if subset else set(bm) | set(cm)):
        b, c = bm.get(m), cm.get(m)
        kinds = _kind(b, c)
        if not kinds:
            continue
        changes.append({"module": m, "kinds": kinds, "baseline": _fields(b), "now": _fields(c),
                        "reason": reasons.get(m)})
    counts: dict[str, int] = {}
    for ch in changes:
        for k in ch["kinds"]:
            counts[k] = counts.get(k, 0) + 1
    return {"file": path, "pass": name, "modules_compared": len(set(bm) & set(cm)),
            "subset": subset, "differences": len(changes) + len(notes), "option_differences": notes,
            "counts": counts, "changes": changes}


def _fields(e: list | None) -> dict | None:
    if e is None:
        return None
    e = list(e) + [None] * (len(FIELDS) - len(e))
    return {k: v for k, v in zip(FIELDS, e)}


def changed_text(ch: dict) -> tuple[str, str]:
    """(baseline, now) showing only the fields that differ."""
    b, c = ch["baseline"], ch["now"]
    if b is None or c is None:
        return _all_text(b), _all_text(c)
    bs, cs = [], []
    for label, keys, fmt in (("", ("outcome",), "{}"),
                             ("PLT reserved ", ("plt_core", "plt_init"), "{}+{}"),
                             ("PLT used ", ("plt_used_core", "plt_used_init"), "{}+{}"),
                             ("", ("image_bytes",), "{:,} bytes"),
                             ("build-id ", ("build_id",), "{:.12}"),
                             ("file ", ("file_sha256",), "{}"),
                             ("image ", ("image_sha256",), "{}")):
        bv, cv = [b.get(k) for k in keys], [c.get(k) for k in keys]
        if keys[0] in FINGERPRINT and bs:            # the kinds column names it; hashes only when alone
            continue
        if keys == ("outcome",) and bv != cv or any(_both(b, c, k) for k in keys):
            bs.append(label + fmt.format(*bv))
            cs.append(label + fmt.format(*cv))
    return "; ".join(bs), "; ".join(cs)


def _all_text(f: dict | None) -> str:
    if f is None:
        return "-"
    s = f["outcome"]
    if f.get("plt_core") is not None:
        s += (f"; PLT reserved {f['plt_core']}+{f['plt_init']}, used {f['plt_used_core']}+{f['plt_used_init']}; "
              f"{f['image_bytes']:,} bytes")
    return s
