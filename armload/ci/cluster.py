"""Module checks as Ray tasks (`check --ray`, `matrix --ray`): the optional extra
`pip install armload[cluster]`. Local `--jobs` needs none of this.

A task checks one group of modules (worker.Worker.check_group) exactly as a local worker does: the
records are the same, so the JSON is the same as a local run's. Each Ray worker process builds
the kernel of a cell once (Module.symvers, the image and its kallsyms, from the same paths: the
trees and kernels must be at the same paths on every node, e.g. a shared file system) and keeps
it for the later tasks of that cell; the plan travels once per run through the object store.
"""
from __future__ import annotations

from .corpus import build_kernel
from .worker import Worker

_KERNELS: dict = {}        # in a Ray worker: (kernel files, vermagic, config) -> Kernel
_WORKERS: dict = {}        # in a Ray worker: "current" -> the Worker of the run it last served


def _check(spec: dict, plan, names: list[str]) -> list[dict]:
    """The body of one task, in a Ray worker."""
    key = (tuple(spec["kernel"]), spec["vermagic"], repr(spec["config"]))
    kernel = _KERNELS.get(key)
    if kernel is None:
        kernel = build_kernel(list(spec["kernel"]), spec["config"])
        kernel.vermagic = spec["vermagic"]
        _KERNELS[key] = kernel
    w = _WORKERS.get("current")
    if w is None or w.run != spec["run"]:
        if w is not None:
            w.close()
        w = _WORKERS["current"] = Worker(kernel, spec["config"], spec["options"], plan, run=spec["run"])
    return w.check_group(names)


def connect(address: str, cpus: int | None = None):
    """Start a local Ray instance ("local", with `cpus` CPUs) or join a running cluster ("auto":
    the one `ray start` made on this machine; or its address, "HOST:6379" / "ray://HOST:10001")."""
    try:
        import ray
    except ImportError:
        from ..errors import ArmloadError
        raise ArmloadError("--ray needs Ray: pip install 'armload[cluster]' (or pip install ray)") from None
    if not ray.is_initialized():
        kw = dict(include_dashboard=False, log_to_driver=False, logging_level="ERROR")
        if address == "local":
            ray.init(num_cpus=cpus, **kw)
        else:
            try:
                ray.init(address=address, **kw)
            except ConnectionError as e:       # no head at `address`: ray.init's own wording, then the way out
                from ..errors import ArmloadError
                raise ArmloadError(f"--ray {address}: no running Ray cluster ({e}); start one with "
                                   f"`ray start --head` (then --ray auto), or use --ray local") from None
    return ray


def executor(ray, spec: dict, plan):
    """run_checks' executor: every group a task, results as they finish."""
    import dataclasses
    import os
    import uuid
    # Workers need not share the driver's working directory: every path absolute.
    spec = {**spec, "run": uuid.uuid4().hex, "kernel": [os.path.abspath(p) for p in spec["kernel"]]}
    plan = dataclasses.replace(plan, modules={n: dataclasses.replace(m, path=os.path.abspath(m.path))
                                              for n, m in plan.modules.items()})
    task = ray.remote(num_cpus=1, max_retries=0)(_check)
    spec_ref, plan_ref = ray.put(spec), ray.put(plan)

    def run(groups):
        pending = [task.remote(spec_ref, plan_ref, g) for g in groups]
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                yield ray.get(ref)
    return run
