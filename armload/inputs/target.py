"""One fuzz input through every library entry point (issue 21): Session.load (with and without
object=True), verify, the report and explain paths, and the load with init in the booted Debian
kernel's own load_module (fuzz.booted_init). The coverage-guided fuzzer (atheris_fuzz.py) calls `exercise`, and so does
the deterministic replay of the committed corpus and crash files (tests/inputs/test_fuzz_replay.py),
which needs no Atheris.

An input is the file itself, optionally behind a 3-byte control prefix b"AF" + flags:
  bit 0 object=True        bit 1 load and init in the booted kernel         bits 2-3 placement (window, vmalloc, 0xe0000000)
  bit 4 Thumb-2 config     bit 5 report + explain  bit 6 exporter-arm.ko loaded first
  bit 7 the Debian 6.1 kernel image (its kallsyms, exports and code) instead of the built-in
        kernel, when it is in .cache (ARM only: with bit 4 the session is refused up front)

Outcomes: "accepted" (loaded; verified with no failure armload is to blame for), "refused"
(an ArmloadError). Anything else raises InternalError (the fuzzer's crash).
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass

from ..errors import ArmloadError
from ..kernel.config import KernelConfig

PREFIX = b"AF"
PLACEMENTS = ("window", "vmalloc", 0xE0000000)
RUN_MAX_MEMORY = 1 << 20            # module memory above this: init not run (see fuzz.RUN_MAX_MEMORY)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXPORTER = os.path.join(ROOT, "sample_modules", "exporter-arm.ko")
from ..kernel.debian import VMLINUZ  # noqa: E402


class InternalError(Exception):
    """An input made armload fail with something other than a kernel-style refusal."""


@dataclass
class Result:
    outcome: str                    # accepted | refused
    detail: str
    flags: int


def split(data: bytes) -> tuple[int, bytes]:
    if data[:2] == PREFIX and len(data) >= 3:
        return data[2], data[3:]
    return 0, data


def with_flags(flags: int, elf: bytes) -> bytes:
    return PREFIX + bytes([flags & 0xFF]) + elf


_IMAGE_KERNELS: dict = {}


def _kernel(config, image: bool):
    """A fresh kernel per input: simulated addresses are handed out on first use (a function's
    with the Thumb bit under Thumb-2), so a shared one would carry one input's guesses into the
    next and make outcomes depend on the order of inputs. The image's kallsyms are parsed once
    and shared; only the simulated part starts empty."""
    import dataclasses
    from ..kernel.provider import Kernel
    if not image or not os.path.exists(VMLINUZ):
        return Kernel.builtin(config)
    if config not in _IMAGE_KERNELS:
        _IMAGE_KERNELS[config] = Kernel.from_files([VMLINUZ], config)
    return dataclasses.replace(_IMAGE_KERNELS[config], simulated={}, _next_text=0, _next_data=0, _sorted=None)


def exercise(data: bytes) -> Result:
    flags, elf = split(data)
    try:
        return Result("accepted", _exercise(flags, elf), flags)
    except ArmloadError as e:
        return Result("refused", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", flags)
    except InternalError:
        raise
    except Exception as e:          # noqa: BLE001 - what the fuzzer looks for
        raise InternalError(f"{type(e).__name__}: {e}") from e


def _exercise(flags: int, elf: bytes) -> str:
    from ..loader.session import Session
    from ..loader.verify import verify_module
    from .fuzz import _unexplained
    config = KernelConfig(thumb2=bool(flags & 16))
    kernel = _kernel(config, bool(flags & 128))
    where = (flags >> 2) & 3
    session = Session(kernel, config, PLACEMENTS[where] if where < 3 else "window")
    if flags & 64 and not config.thumb2:
        session.load(EXPORTER)
    mod = session.load("fuzz.ko", elf, object=bool(flags & 1))
    res = verify_module(mod, kernel)
    if not res.ok:
        bad = _unexplained(mod, res, elf)
        if bad:
            raise InternalError(f"accepted but not verifying: {bad[0]}")
    detail = "loaded"
    if flags & 32:
        detail += _inspect(session, mod, elf, bool(flags & 1))
    if flags & 2:
        detail += _run(session, elf, bool(flags & 64 and not config.thumb2), config.thumb2)
    return detail


def _inspect(session, mod, elf: bytes, object: bool) -> str:
    from ..inspect import explain, report
    report.format_text(mod, "fuzz", session.placement, verbose=True)
    report.to_dict(mod, "fuzz", session.placement)
    from ..loader.session import Session
    fresh = Session(session.kernel, session.config, session.placement)
    with tempfile.NamedTemporaryFile(suffix=".ko") as f:
        f.write(elf)
        f.flush()
        ctx = explain.context_for(fresh, f.name, object=object)
        for ex in explain.explain_all(ctx, ctx.rows[:8]):
            explain.format_explanation(ex)
    return ", reported"


def _run(session, elf: bytes, exporter: bool, thumb2: bool) -> str:
    from .fuzz import booted_init
    if sum(r.size for r in session.modules[-1].regions) > RUN_MAX_MEMORY:
        return ", init not run (module memory above RUN_MAX_MEMORY)"
    loads = ([("exporter-arm.ko", open(EXPORTER, "rb").read())] if exporter else []) + [("fuzz.ko", elf)]
    return ", " + booted_init(loads, thumb2)


def replay(paths: list[str], *, measure: bool = True) -> dict:
    """Every input of `paths` through exercise(): outcomes (by error class), internal errors, and
    the costliest case in counted Python calls, CPU seconds and traced memory peak (bytes)."""
    import collections
    import sys
    import time
    import tracemalloc
    from .fuzz import _OpCounter
    out = {"cases": 0, "outcomes": collections.Counter(), "internal": [], "slowest": None, "most_ops": None,
           "max_mem": None}
    if measure:
        tracemalloc.start()
    try:
        for p in paths:
            data = open(p, "rb").read()
            c = _OpCounter()
            if measure:
                tracemalloc.reset_peak()
                base = tracemalloc.get_traced_memory()[0]
                sys.setprofile(c)
            t = time.process_time()
            try:
                r = exercise(data)
                key = r.outcome if r.outcome == "accepted" else "refused: " + r.detail.split(":", 1)[0]
            except InternalError as e:
                key = "internal"
                out["internal"].append(f"{p}: {e}")
            finally:
                sys.setprofile(None)
            cpu = time.process_time() - t
            out["cases"] += 1
            out["outcomes"][key] += 1
            if out["slowest"] is None or cpu > out["slowest"][0]:
                out["slowest"] = (round(cpu, 3), os.path.basename(p), len(data))
            if measure:
                mem = tracemalloc.get_traced_memory()[1] - base
                if out["most_ops"] is None or c.n > out["most_ops"][0]:
                    out["most_ops"] = (c.n, os.path.basename(p), len(data))
                if out["max_mem"] is None or mem > out["max_mem"][0]:
                    out["max_mem"] = (mem, os.path.basename(p), len(data))
    finally:
        if measure:
            tracemalloc.stop()
    out["outcomes"] = dict(out["outcomes"])
    return out


def _signature(data: bytes) -> str | None:
    """The first words of the InternalError `data` raises (None: it raises none)."""
    try:
        exercise(data)
    except InternalError as e:
        return " ".join(str(e).split()[:2])
    return None


def minimise(data: bytes, max_tries: int = 3000) -> bytes:
    """A smaller input raising the same InternalError: clear control bits, cut the tail, then zero
    chunks of halving size (offsets inside the file stay valid). Needs no Atheris (libFuzzer's
    -minimize_crash re-executes argv[0], which a Python harness is not)."""
    want = _signature(data)
    if want is None:
        raise ValueError("the input raises no internal error")
    tries = 0

    def same(d: bytes) -> bool:
        nonlocal tries
        tries += 1
        return _signature(d) == want
    flags, body = split(data)
    for bit in range(8):
        if flags & (1 << bit) and tries < max_tries and same(with_flags(flags & ~(1 << bit), body)):
            flags &= ~(1 << bit)
    cut = len(body) // 2
    while cut and tries < max_tries:
        if same(with_flags(flags, body[:len(body) - cut])):
            body = body[:len(body) - cut]
        else:
            cut //= 2
    chunk = max(len(body) // 4, 1)
    while chunk and tries < max_tries:
        for at in range(0, len(body), chunk):
            if tries >= max_tries:
                break
            if any(body[at:at + chunk]):
                d = body[:at] + bytes(len(body[at:at + chunk])) + body[at + chunk:]
                if same(with_flags(flags, d)):
                    body = d
        chunk //= 2
    return with_flags(flags, body)


def main(argv=None) -> int:
    import argparse
    import json
    p = argparse.ArgumentParser(prog="python -m armload.inputs.target",
                                description="replay fuzz inputs (files or directories) through the target")
    p.add_argument("inputs", nargs="+")
    p.add_argument("--no-measure", action="store_true", help="skip the call count and memory tracing")
    p.add_argument("--minimise", metavar="OUT", help="minimise the one crashing input into OUT")
    a = p.parse_args(argv)
    if a.minimise:
        small = minimise(open(a.inputs[0], "rb").read())
        with open(a.minimise, "wb") as f:
            f.write(small)
        print(f"{a.minimise}: {len(small)} bytes, {sum(1 for x in small if x)} non-zero")
        return 0
    files = []
    for x in a.inputs:
        files += sorted(os.path.join(x, f) for f in os.listdir(x)) if os.path.isdir(x) else [x]
    res = replay([f for f in files if not f.endswith((".json", ".md"))], measure=not a.no_measure)
    print(json.dumps(res, indent=1))
    return 1 if res["internal"] else 0


if __name__ == "__main__":
    import sys
    sys.exit(main())
