"""`armload bench cli`: what one short command costs the user, in CPU seconds of the child process
(user + system, from wait4's rusage: load on other cores plays no part), beside the floors it
cannot go below (the interpreter, numpy's import) and GNU ld's `ld -r` of the same module (the
binutils step a module build runs). Each command runs `repeat` times; the least and the median
are printed. The children run with bytecode written and read (PYTHONDONTWRITEBYTECODE removed), as
an installed package has it: pip compiles at install. The target (issue 34): `armload load hello.ko`
within 0.1 s of CPU."""
from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from .inputs import SAMPLES

TARGET = 0.1
MODULE = os.path.join(SAMPLES, "hello-arm.ko")
SYMVERS = os.path.join(SAMPLES, "Module.symvers")
LD = os.environ.get("CROSS", "arm-linux-gnueabihf-") + "ld"


def commands(out: str) -> list[tuple[str, list[str]]]:
    """(label, argv) of every command measured; `out` is a scratch file for ld's output."""
    py, armload = sys.executable, [sys.executable, "-m", "armload"]
    rows = [("python -c pass (the interpreter)", [py, "-c", "pass"]),
            ("python -c 'import numpy'", [py, "-c", "import numpy"]),
            ("armload --help", armload + ["--help"]),
            ("armload load hello-arm.ko", armload + ["load", MODULE, "--kernel", SYMVERS])]
    if shutil.which(LD):
        rows.insert(0, (f"{os.path.basename(LD)} -r hello-arm.ko", [LD, "-r", "-o", out, MODULE]))
    return rows


def cpu_of(argv: list[str]) -> float:
    """CPU seconds (user + system) of one run of argv; a failing command is an error, not a number."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise RuntimeError(f"bench cli: {' '.join(argv)} exited {p.returncode}: {err.decode(errors='replace')[-300:]}")
    return ru.ru_utime + ru.ru_stime


def run_benchmark(repeat: int = 10) -> dict:
    with tempfile.TemporaryDirectory() as d:
        rows = []
        for label, argv in commands(os.path.join(d, "out.o")):
            cpu_of(argv)                                    # bytecode and page cache warm, once
            t = [cpu_of(argv) for _ in range(repeat)]
            rows.append({"command": label, "min": round(min(t), 4), "median": round(statistics.median(t), 4)})
    load = next(r for r in rows if r["command"].startswith("armload load"))
    return {"repeat": repeat, "rows": rows, "target": TARGET, "load_median": load["median"],
            "meets_target": load["median"] <= TARGET, "ld_found": shutil.which(LD) is not None}


def print_benchmark(r: dict) -> None:
    print(f"CPU seconds per command (user + system of the child, {r['repeat']} runs each)")
    print(f"  {'command':40} {'least':>8} {'median':>8}")
    for row in r["rows"]:
        print(f"  {row['command']:40} {row['min']:>8.3f} {row['median']:>8.3f}")
    if not r["ld_found"]:
        print(f"  ({LD} not found: make toolchain)")
    verdict = "meets" if r["meets_target"] else "misses"
    print(f"  armload load: {r['load_median']:.3f} s median, {verdict} the target of {r['target']:g} s")
