"""armload's file operations inside the booted kernel against the same module under QEMU
(tests/oracles/qemu/devio_results.json, made by `make qemu-devio`: the Debian kernel booted in
qemu-system-arm, the plan run by devh and busybox cat/echo). Every plan line's result, errno and
bytes must be identical; so must busybox's. The plan goes through `armload run`'s default path
(a vmlinuz given: the booted kernel). A missing or stale results file fails."""
import hashlib
import json
import os
import re

import pytest

from testinputs import BOOT_VMLINUZ, ROOT, SYMVERS, require_input

from armload.cli import main

QEMU = os.path.join(ROOT, "tests", "oracles", "qemu")
RESULTS = os.path.join(QEMU, "devio_results.json")
PLAN = os.path.join(QEMU, "devio_plan.txt")
MODULE = os.path.join(ROOT, "sample_modules", "devio", "vfsdev-arm-debug.ko")
HOW = "make qemu-devio"


def plan_args(lines: list[str]) -> list[str]:
    """The plan's lines as `armload run` options, in order (`lseek -1` as --lseek=-1)."""
    out = []
    for ln in lines:
        op, *vals = ln.split()
        if op == "lseek":
            out.append(f"--lseek={vals[0]}")
        else:
            out += [f"--{op}", *vals]
    return out


@pytest.fixture(scope="module")
def oracle():
    assert os.path.exists(RESULTS), f"missing {RESULTS}: {HOW}"          # never a skip
    res = json.load(open(RESULTS))
    plan = [ln.strip() for ln in open(PLAN) if ln.strip()]
    assert res["plan"] == plan, f"{PLAN} changed since {RESULTS} was made: {HOW}"
    assert res["module_sha256"] == hashlib.sha256(open(MODULE, "rb").read()).hexdigest(), \
        f"{MODULE} changed since {RESULTS} was made: {HOW}"
    assert res["release"] == "6.1.0-50-armmp" and res["insmod"] == [0, 0]
    return res


@pytest.fixture(scope="module")
def armload_run(oracle, booted_dir):
    import contextlib
    import io
    require_input(BOOT_VMLINUZ, "make test-inputs")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(["run", MODULE, "--kernel", BOOT_VMLINUZ, "--kernel", SYMVERS, *plan_args(oracle["plan"]), "--json"])
    doc = json.loads(out.getvalue())
    assert rc == 0 and doc["runtime"] == "booted"
    return doc


BYTES = ("read", "cat", "mmap")


def test_every_result_and_errno_is_qemus(oracle, armload_run):
    ours = armload_run["devio"]
    assert len(ours) == len(oracle["ops"])
    diffs = []
    for i, (a, q) in enumerate(zip(ours, oracle["ops"])):
        assert a["op"] == q["op"]
        if a["result"] != q["result"]:
            diffs.append((i, q["line"], "result", a["result"], q["result"]))
        elif q["result"] is not None and q["result"] >= 0 and (q["op"] in BYTES or "hex" in a):
            if a.get("hex", "") != q["hex"]:
                diffs.append((i, q["line"], "bytes", a.get("hex"), q["hex"]))
    assert not diffs
    errnos = {-q["result"] for q in oracle["ops"] if q["result"] is not None and q["result"] < 0}
    assert errnos == {2, 13, 14, 22, 25, 28}       # ENOENT EACCES EFAULT EINVAL ENOTTY ENOSPC: all compared


def test_busybox_cat_and_echo_agree(oracle, armload_run):
    ours = armload_run["devio"]
    assert len(oracle["busybox"]) >= 10
    for i, bb in oracle["busybox"].items():
        a = ours[int(i)]
        assert a["op"] == bb["op"]
        if bb["status"] == 0:
            assert a["result"] >= 0 and (bb["op"] != "cat" or a["hex"] == bb["hex"]), (i, a, bb)
        else:
            assert a["result"] == -bb["errno"], (i, a, bb)


def test_the_modules_console_lines_are_qemus(oracle, armload_run):
    strip = lambda s: re.sub(r"^(<\d>)?\[\s*[\d.]+\]\s?", "", s)
    q = [strip(s) for s in oracle["kernel"] if strip(s).startswith("vfsdev:")]
    a = [strip(s) for s in armload_run["modules"][0]["console"] if strip(s).startswith("vfsdev:")]
    assert q == a and any("misc minor" in s for s in a)


def test_a_wrong_result_would_be_caught(oracle):
    """The comparison itself: the plan covers every operation, and the errno lines are there."""
    ops = {q["op"] for q in oracle["ops"]}
    assert ops == {"open", "write", "read", "lseek", "ioctl", "poll", "mmap", "close", "cat", "echo"}
    assert plan_args(["lseek -1", "ioctl 0x7603 0", "echo 1 /x"]) == ["--lseek=-1", "--ioctl", "0x7603", "0",
                                                                       "--echo", "1", "/x"]


def test_a_pytest_file_outside_the_repository_gets_qemus_results(oracle, booted_dir, tmp_path):
    """The plugin's ModuleHandle drives vfsdev through the kernel's VFS from a test file next to
    nothing of armload's; its results are QEMU's for the plan's first lines (open .. ioctl LEN)."""
    import subprocess
    import sys
    q = {i: o for i, o in enumerate(oracle["ops"])}
    assert [q[i]["line"] for i in (1, 2, 4, 5, 9)] == ["open /dev/vfsdev", "write s:hello", "lseek 1", "read 16",
                                                       "ioctl 0x80047601 buf:4"]
    t = tmp_path / "test_mine.py"
    t.write_text(f"""
def test_vfsdev(load_module):
    m = load_module({MODULE!r})
    assert m.init() == 0
    assert m.sysfs("parameters/fill") + "\\n" == bytes.fromhex({q[0]['hex']!r}).decode()
    with m.open("/dev/vfsdev") as f:
        assert f.fd == {q[1]['result']} and f.write(b"hello") == {q[2]['result']}
        assert f.lseek(1) == {q[4]['result']} and f.read(16).hex() == {q[5]['hex']!r}
        assert f.ioctl(0x80047601, bytes(4))[1].hex() == {q[9]['hex']!r}
""")
    env = {k: v for k, v in os.environ.items() if k != "ARMLOAD_KERNEL"}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(t)], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "1 passed" in r.stdout, r.stdout + r.stderr


GOLDEN = os.path.join(ROOT, "tests", "golden", "vfsdev_plan.txt")


def _normal(text: str) -> str:
    """The run's text with what other code changes legitimately made neutral: instruction counts
    (the hardware model, the boot), the snapshot's path and the console's timestamps."""
    text = re.sub(r"[\d,]+ (boot )?instructions", r"N \1instructions", text)
    text = re.sub(r"\([\d,]+ per call", "(N per call", text)
    text = re.sub(r"restored from \S+\)", "restored from CACHE)", text)
    text = re.sub(r"booted from \S+\)", "restored from CACHE)", text)
    text = re.sub(r"^\[ *\d+\.\d+\] ", "[T] ", text, flags=re.M)
    text = re.sub(r"0xb[0-9a-f]{7}", "0xUSERADDR", text)        # mmap's address: the boot's random base
    return re.sub(r"ran for [\d.]+ ms simulated", "ran for N ms simulated", text)


def test_the_runs_text_is_the_golden_one(oracle, booted_dir):
    """What `armload run` prints for the plan (every line: the call, its result, errno, bytes and
    text, the notes), in this process, against tests/golden/vfsdev_plan.txt. After a deliberate
    change of the wording: ARMLOAD_UPDATE_GOLDEN=1 rewrites it (review the diff)."""
    import contextlib
    import io
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        rc = main(["run", MODULE, "--kernel", BOOT_VMLINUZ, "--kernel", SYMVERS, *plan_args(oracle["plan"])])
    text = _normal(out.getvalue())
    if os.environ.get("ARMLOAD_UPDATE_GOLDEN"):
        os.makedirs(os.path.dirname(GOLDEN), exist_ok=True)
        open(GOLDEN, "w").write(text)
    assert rc == 0
    assert text == open(GOLDEN).read()


GOLDEN_JSON = os.path.join(ROOT, "tests", "golden", "vfsdev_plan.json")


def test_every_record_is_the_golden_one(armload_run):
    """The --json records, each whole (its fields, result, errno, bytes, text, notes and count of
    system calls) but for its instructions and mmap's address (deterministic, but they change with
    the hardware model and the boot's random base), against tests/golden/vfsdev_plan.json; ARMLOAD_UPDATE_GOLDEN=1 rewrites it."""
    recs = [{k: v for k, v in r.items() if k not in ("instructions", "addr")} for r in armload_run["devio"]]
    assert all(0xB0000000 <= r["addr"] < 0xBF000000 for r in armload_run["devio"] if "addr" in r)   # user space
    assert all(isinstance(r["instructions"], int) and r["instructions"] >= 0 for r in armload_run["devio"])
    assert all(r["instructions"] == 0 for r in armload_run["devio"] if r["syscalls"] == 0)
    if os.environ.get("ARMLOAD_UPDATE_GOLDEN"):
        json.dump(recs, open(GOLDEN_JSON, "w"), indent=1)
    assert recs == json.load(open(GOLDEN_JSON))
