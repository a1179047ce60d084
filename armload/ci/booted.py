"""What a check worker does with the booted kernel: the module's dependency closure loaded by the
kernel's own load_module (in the fork server), then the module (in a fork of it), and a Result
(armload/emu/booted/result.py) turned into check's init data. The only code of the check that runs
module code or reads its results; it returns plain data."""
from __future__ import annotations

import sys
import time

from . import sanitized
from .outcomes import HOSTILE_STATUSES, err_dict, init_class


def closure_inits(opts, run, closure) -> tuple[list, dict | None]:
    """Load the closure (in the fork server): (dependency_inits, a not-run result or None)."""
    t0 = time.perf_counter()
    dep_inits = []
    for d in closure:
        try:
            r = run.load(d.path, opts.params.get(d.name, []), budget=opts.budget, timeout=opts.timeout)
        except Exception as e:
            return dep_inits, {"status": "not-run", "reason": f"dependency {d.name}: {err_dict(e)['message']}"}
        x = init_data(r, run)
        dep_inits.append({"name": d.name, "status": x["status"], "retval": x.get("retval"),
                          "reason": x.get("reason"), "where": x.get("where")})
        if init_class(x) != "ok":            # insmod of the module never happens
            return dep_inits, {"status": "not-run", "reason": f"dependency {d.name} failed in the kernel: "
                               f"{x.get('reason')}", "elapsed": time.perf_counter() - t0}
    return dep_inits, None


def module_init(info, opts, dep_inits: list, run) -> dict:
    """The module itself (in a fork of the process holding its closure)."""
    t0 = time.perf_counter()
    dep_inits = list(dep_inits)
    try:
        me = info.name.replace("-", "_")
        r = next((x for x in run.results if x.name.replace("-", "_") == me and x.ok), None)
        san = None
        if r is None:
            san = sanitized.attach(run, opts.sanitize)
            r = (san or run).load(info.path, opts.params.get(info.name, []), budget=opts.budget, timeout=opts.timeout)
        else:                                 # a dependency's request_module loaded it already (insmod: EEXIST)
            dep_inits.append({"name": info.name, "status": "returned", "retval": 0, "reason": "autoloaded"})
        if opts.settle_ns and r.ok:
            run.settle(opts.settle_ns)
    except Exception as e:
        return {"status": "not-run", "reason": f"booted kernel: {err_dict(e)['message']}",
                "dependency_inits": dep_inits}
    out = init_data(r, run)
    if san is not None:
        out["sanitizer"] = sanitized.collect(san)
    out["dependency_inits"] = dep_inits
    out["elapsed"] = time.perf_counter() - t0
    return out


def init_data(r, run=None) -> dict:
    """A Result (emu/booted/result.py) as check's init data."""
    from ..emu.booted import hostile
    st = {"returned": "returned", "refused": "refused", "oops": "oops", "stopped": "timeout",
          "budget": "budget", **{k: k for k in HOSTILE_STATUSES}}.get(r.status, "not-run")
    out = {"status": st, "retval": r.ret, "instructions": r.instructions,
           "console": r.console[-5:], "loader_vs_kernel": r.loader.to_dict()}
    if r.ret is not None and r.ret < 0:
        out["errno_name"] = _errno_name(r.ret)
    if getattr(r, "decompressed_by", ""):
        out["decompressed_by"] = r.decompressed_by           # who inflated the .ko.xz/.zst/.gz
    if r.status == "refused":
        out["reason"] = f"load_module returned {r.ret} (-{_errno_name(r.ret)})"
    elif r.status == "returned" and r.ret and r.ret < 0:
        out["reason"] = f"init returned {r.ret} (-{_errno_name(r.ret)})"
    elif r.status in HOSTILE_STATUSES and r.status != "panic":
        out["reason"], out["where"] = hostile.reason(r.status, r.console, r.stopped)
    elif r.status in ("oops", "panic"):
        first = next((ln for ln in r.oops.splitlines() if ln.strip()), "")
        out["reason"] = first.split("] ", 1)[-1]
        out["where"] = next((ln.split("PC is at ", 1)[1] for ln in r.oops.splitlines() if "PC is at " in ln), None)
        if out["where"] and run is not None:        # with file:line, as decode_stacktrace.sh finds it
            from ..emu.booted.decode import where
            out["where"] = where(out["where"], run.session.modules, run.session.kernel.vmlinux_debug)
    elif r.status == "budget":
        out["reason"] = f"no return within {r.instructions:,} instructions"
    elif r.status == "stopped":
        # where the wall clock stopped the code depends on the machine's load: keep nothing of it
        return {"status": st, "retval": None, "reason": f"{r.stopped} (a harness failure, not module behaviour)"}
    elif r.status == "refused-dead":
        out["reason"] = r.stopped
    if not r.loader.agrees or not (r.loader.identical or r.status == "refused"):
        out["loader_differs"] = True
    return out


def _errno_name(v: int) -> str:
    from ..emu.errno import errno_name
    name = errno_name(v)
    if name.isdigit() and sys.platform.startswith("linux"):
        # The emulator's table is short; ARM Linux uses the generic errno numbers, as the host does.
        import errno
        name = errno.errorcode.get(-v, name)
    return name
