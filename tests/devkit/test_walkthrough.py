"""The module developer's walkthrough (issue 22) on sample_modules/src/ringdev: a misc device
over a kmalloc'd ring buffer, self-re-arming delayed work, exported functions, a NULL
dereference behind bug=1. Each test fails without the fix it names."""
import os
import re
import subprocess
import sys

import pytest
from testinputs import BOOT_VMLINUZ, DEBIAN_SYMVERS, ROOT, sample  # noqa: F401

from armload.cli import main

RINGDEV = os.path.join(ROOT, "sample_modules", "walkthrough", "ringdev-arm-debug.ko")
pytestmark = pytest.mark.inputs(DEBIAN_SYMVERS, BOOT_VMLINUZ, RINGDEV)


def run(capsys, *argv):
    rc = main(["run", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_parameters_after_options_and_image_before_symvers(capsys):
    # item 8: insmod words after --kernel; the image named first keeps param_ops_int's address
    rc, out, err = run(capsys, RINGDEV, "--kernel", BOOT_VMLINUZ, "--kernel", DEBIAN_SYMVERS, "ring_size=32")
    assert rc == 0, err
    assert "ringdev: 32 bytes, peek -1" in out
    rc, out, err = run(capsys, RINGDEV, "--kernel", BOOT_VMLINUZ, "ring_size=abc", "--kernel", DEBIAN_SYMVERS)
    assert rc == 1 and "unrecognized arguments" not in err
    assert "ring_size" in out and "init_module" not in out      # the kernel's parameter error; init never ran


def test_unknown_call_and_missing_arguments_are_refused_before_init(capsys):
    rc, out, err = run(capsys, RINGDEV, "--kernel", DEBIAN_SYMVERS, "--kernel", BOOT_VMLINUZ, "--call", "ringdev_nope")
    assert rc == 1 and "--call ringdev_nope: no function 'ringdev_nope' in ringdev" in err
    assert "ringdev_push" in err and "init returned" not in out
    rc, out, err = run(capsys, RINGDEV, "--kernel", DEBIAN_SYMVERS, "--kernel", BOOT_VMLINUZ,
                       "--call", "ringdev_push", "s:abc")
    assert rc == 1 and "ringdev_push takes 2 arguments (DWARF of ringdev), 1 given" in err
    assert "init returned" not in out
    rc, out, err = run(capsys, RINGDEV, "--kernel", DEBIAN_SYMVERS, "--kernel", BOOT_VMLINUZ,
                       "--call", "ringdev_push", "s:abc", "3", "--call", "ringdev_count", "--settle-ms", "0")
    assert rc == 0 and "ringdev_push(s:abc, 3) returned 3" in out and "ringdev_count() returned 3" in out


def test_run_without_kernel_says_how_to_get_it(capsys):
    rc, out, err = run(capsys, RINGDEV)
    assert rc == 1 and "needs the kernel image" in err
    assert "make test-inputs" in err and "--kernel" in err


def test_thumb2_on_the_arm_image_is_refused_up_front(capsys):
    rc, out, err = run(capsys, sample("hello-thumb2.ko"), "--thumb2", "--kernel", BOOT_VMLINUZ)
    assert rc == 1 and "built for ARM mode" in err and 'prints "SMP ARM"' in err
    assert "instructions" not in out                             # nothing ran
    from armload.devkit.testing import ModuleHandle
    from armload.errors import ArmloadError
    with pytest.raises(ArmloadError, match="built for ARM mode"):
        ModuleHandle(sample("hello-thumb2.ko"), kernel=BOOT_VMLINUZ, thumb2=True)
    with pytest.raises(ArmloadError, match="a Thumb-2 module .* CONFIG_THUMB2_KERNEL"):
        ModuleHandle(sample("hello-thumb2.ko"), kernel=BOOT_VMLINUZ)


def test_oops_as_the_kernel_prints_it(capsys):
    # inside the booted kernel the oops is the kernel's own __die report, printed on its console
    rc, out, err = run(capsys, RINGDEV, "bug=1", "--kernel", DEBIAN_SYMVERS, "--kernel", BOOT_VMLINUZ)
    assert rc == 1
    lines = [ln.split("] ", 1)[-1] for ln in out.splitlines()]
    i = lines.index("8<--- cut here ---")
    assert lines[i + 1] == "Unable to handle kernel NULL pointer dereference at virtual address 00000000"
    assert "Internal error: Oops: 805 [#1] SMP ARM" in lines          # FS 5 (section translation) | FSR_WRITE
    assert "Modules linked in: ringdev(OE+)" in lines and "Hardware name: Generic DT based system" in lines
    assert any(ln.startswith("PC is at ringdev_init+") and ln.endswith("[ringdev]") for ln in lines)
    assert "Flags: nZCv  IRQs on  FIQs on  Mode SVC_32  ISA ARM  Segment none" in lines
    assert "ringdev: oops in init (the kernel's own report above)" in out


def test_the_budget_is_not_an_oops():
    from armload.devkit.testing import ModuleHandle, ModuleOops, ModuleStopped
    h = ModuleHandle(RINGDEV, kernel=BOOT_VMLINUZ, budget=100_000)
    with pytest.raises(ModuleStopped) as e:
        h.init()
    assert not isinstance(e.value, ModuleOops) and e.value.result.status == "budget"
    text = str(e.value)
    assert "did not return within 100000 instructions" in text and "cut here" not in text
    h = ModuleHandle(RINGDEV, kernel=BOOT_VMLINUZ, params={"bug": 1})
    with pytest.raises(ModuleOops, match="Internal error: Oops: 805") as e:
        h.init()
    # the message ends with the frames decoded to a source line, as decode_stacktrace.sh prints them
    head, located = str(e.value).split("\nthe frames with a source line (scripts/decode_stacktrace.sh):\n")
    assert "Internal error: Oops" in head and located.splitlines()[0].split("] ", 1)[1].startswith("PC is at ringdev_init (")
    assert all(re.search(r"ringdev\.c:\d+", ln) or ".h:" in ln for ln in located.splitlines())
    assert set(located.splitlines()) <= set(e.value.result.decoded)


def test_plugin_outside_the_repository_finds_the_kernel(tmp_path):
    t = tmp_path / "test_rd.py"
    t.write_text(f"def test_it(load_module):\n    m = load_module({RINGDEV!r})\n    assert m.init() == 0\n")
    env = {k: v for k, v in os.environ.items() if k != "ARMLOAD_KERNEL"}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(t)], cwd=tmp_path,
                       env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(t),
                        "--armload-kernel", str(tmp_path / "missing")], cwd=tmp_path, env=env,
                       capture_output=True, text=True)
    assert r.returncode != 0 and "no such kernel file" in r.stderr and "make test-inputs" in r.stderr


def test_device_io_from_the_cli(capsys):
    """Real system calls inside the booted kernel (ringdev has no poll: the VFS's DEFAULT_POLLMASK)."""
    rc, out, err = run(capsys, RINGDEV, "--kernel", DEBIAN_SYMVERS, "--kernel", BOOT_VMLINUZ, "--open", "/dev/ringdev",
                       "--write", "s:abc", "--read", "2", "--ioctl", "0x80047201", "buf:4", "--read", "16",
                       "--ioctl", "5", "0", "--poll", "--close")
    assert rc == 0, err
    assert "real system calls from pid 1's user mode through the kernel's VFS" in out
    got = [ln for ln in out.splitlines() if ln.startswith("/dev/ringdev:")]
    assert got == ["/dev/ringdev: open = 3", "/dev/ringdev: write(s:abc) = 3",
                   "/dev/ringdev: read(2) = 2  6162  'ab'",
                   "/dev/ringdev: ioctl(0x80047201, buf:4) = 0  buffer 01000000",     # RINGDEV_IOC_COUNT: 1 left
                   "/dev/ringdev: read(16) = 1  63  'c'",
                   "/dev/ringdev: ioctl(5, 0) = -25 (-ENOTTY)",
                   "/dev/ringdev: poll(POLLIN|POLLPRI|POLLOUT, timeout 0): revents 0x5 (POLLIN|POLLOUT)",
                   "/dev/ringdev: close = 0"]
    rc, out, err = run(capsys, RINGDEV, "--kernel", DEBIAN_SYMVERS, "--kernel", BOOT_VMLINUZ, "--open", "/dev/ringdev",
                       "--write", "b:00ff", "--read", "4", "--json")
    import json
    doc = json.loads(out)
    dev = doc["devio"]
    assert rc == 0 and [(d["op"], d["result"]) for d in dev] == [("open", 3), ("write", 2), ("read", 2)]
    assert dev[2]["hex"] == "00ff"
    rc, out, err = run(capsys, RINGDEV, "--kernel", DEBIAN_SYMVERS, "--kernel", BOOT_VMLINUZ, "--read", "3")
    assert rc == 1 and "--read needs an --open PATH before it" in err and "ringdev" not in out


def test_disasm_source_finds_headers_as_objdump_does(capsys):
    # item 6: the line program's include directories (DWARF 3 here: 1-based, 0 = comp dir)
    from testinputs import CROSS
    rc = main(["disasm", RINGDEV, "--kernel", DEBIAN_SYMVERS, "--source"])
    out = capsys.readouterr().out
    assert rc == 0 and "(source file not found)" not in out
    ours = set(re.findall(r"^([\w.-]+\.[ch]):(\d+): ", out, re.M))
    dump = subprocess.run([f"{CROSS}objdump", "-dl", RINGDEV], capture_output=True, text=True).stdout
    # the sample's DWARF is repository-relative (mk/samples.mk: comp dir ".", run from the root)
    theirs = {(os.path.basename(f), n) for f, n in re.findall(r"^([./]\S+\.[ch]):(\d+)", dump, re.M)}
    assert ("slab.h", "568") in ours and ("slab.h", "568") in theirs
    assert {f for f, _ in ours} == {f for f, _ in theirs}        # the same files, headers included
    hdr = next(f for f, n in re.findall(r"^([./]\S+slab\.h):(\d+)", dump, re.M))
    line = open(hdr).read().splitlines()[567].rstrip()
    assert f"slab.h:568: {line}" in out


def test_plt_notes_use_the_numpy_columns_not_one_object_per_branch(monkeypatch):
    # item 10: the report of a 200,000-branch object must not build a BranchSite per branch; the
    # numbers are those of the per-branch view (computed here from branch_sites() as before)
    from collections import Counter
    from armload import Kernel, KernelConfig, Session
    from armload.inspect.report import _users, plt_notes
    from armload.loader.model import LoadedModule
    cfg = KernelConfig()
    s = Session(Kernel.from_files([DEBIAN_SYMVERS], cfg), cfg, placement="vmalloc")
    mod = s.load(sample("kalloc-arm.ko"))
    sites = mod.branch_sites()
    fixed = {e.addr for e in mod.plt_entries if e.fixed}
    want_fixed = Counter(b.symbol for b in sites if b.plt in fixed)
    want_far = sum(1 for b in sites if b.plt)
    for e in mod.plt_entries:
        want = Counter((b.section_name, b.type_name) for b in sites if b.plt == e.addr)
        assert _users(mod, mod.branches["plt"] == e.addr) == want
    monkeypatch.setattr(LoadedModule, "branch_sites", lambda self: pytest.fail("per-branch objects built"))
    notes = plt_notes(mod, None, limit=None)
    assert f"take an entry: {want_far} of {len(sites)} here" in " ".join(notes)
    if want_fixed:
        assert any(", ".join(f"{k} x{v}" for k, v in sorted(want_fixed.items())) in n for n in notes)
