"""The samples built against each Debian armhf kernel's own headers run in that kernel, booted
(issue 31): the kernel's load_module and init, a call into the module, file operations on its misc
device, and the kernel's delete_module with the module's exit, armload's image identical to the
kernel's at every load. 6.1.0-50-armmp's builds are the committed samples (mk/samples.mk); the
others are built by `make samples-kernels` (mk/samples-kernels.mk) into build/samples-kernels.
A module built for another kernel is refused, by the kernel and by armload, in the kernel's words."""
import gzip
import os
import re
import subprocess

import pytest

from testinputs import CACHE, ROOT, SAMPLES, require_input

ARMMP, LPAE, RT, V612 = "6.1.0-50-armmp", "6.1.0-50-armmp-lpae", "6.1.0-50-rt-armmp", "6.12.107+deb12-armmp"
V612_LPAE, V612_RT = "6.12.107+deb12-armmp-lpae", "6.12.107+deb12-rt-armmp"
NAMES = ("hello", "exporter", "importer", "ringdev")
# 6.1 armmp's builds are the committed ones (ringdev is the walkthrough's, unstripped)
COMMITTED = {"hello": "hello-arm.ko", "exporter": "exporter-arm.ko", "importer": "importer-arm.ko",
             "ringdev": os.path.join("walkthrough", "ringdev-arm-debug.ko")}
NOEXEC = -8
# What each kernel says when it refuses a module built against another one's headers: 6.12's
# elf_validity_cache_index_mod compares .gnu.linkonce.this_module's size with its struct module
# (0x300; 6.1's is 0x240) before anything else; the 6.1 kernels' check_modstruct_version finds
# that module_layout's CRC (each kernel's own) differs, before check_modinfo's vermagic; so do the
# 6.12 flavours among themselves (one struct module size, 0x300, three module_layout CRCs).
SIZE = "module hello: .gnu.linkonce.this_module section size must match the kernel's built struct module size at run time"
CRC = "hello: disagrees about version of symbol module_layout"
REFUSED = [(ARMMP, V612, SIZE), (V612, ARMMP, CRC), (ARMMP, LPAE, CRC), (LPAE, RT, CRC), (RT, ARMMP, CRC),
           (V612, V612_LPAE, CRC), (V612_LPAE, V612_RT, CRC), (V612_RT, V612, CRC)]
SLEEP_MS = 10                  # rt-armmp prints from its console kthread: pid 1 sleeps so that it runs


def build(rel: str, name: str) -> str:
    if rel == ARMMP:
        return require_input(os.path.join(SAMPLES, COMMITTED[name]), "committed sample: make samples")
    return require_input(os.path.join(ROOT, "build", "samples-kernels", rel, name, f"{name}.ko"), "make samples-kernels")


def booted(rel: str):
    """A restored copy of `rel`'s booted kernel (its boot snapshot, shared with the other tests)."""
    from armload.emu.booted.modrun import BootedRun
    from armload.kernel.config import DEBIAN_ARMMP
    from armload.kernel.provider import Kernel
    from armload.loader.for_kernel import follow_kernel
    how = f"make test-inputs KERNEL={rel}"
    image = require_input(os.path.join(CACHE, f"linux-image-{rel}", "boot", f"vmlinuz-{rel}"), how)
    symvers = require_input(os.path.join(CACHE, f"linux-headers-{rel}", "usr", "src", f"linux-headers-{rel}",
                                         "Module.symvers"), how)
    cfg = follow_kernel(DEBIAN_ARMMP, image)
    return BootedRun(image, Kernel.from_files([symvers, image], cfg), cfg)


def said(run, mark: int) -> list[str]:
    """The kernel's console lines since `mark`, timestamps dropped, once pid 1 slept (msleep)."""
    run.bk.call("msleep", SLEEP_MS)
    return [ln.split("] ", 1)[-1] for ln in run.bk.console[mark:]]


def devio(run, ops, dv=None):
    """System calls of pid 1 (its files closed after them, as at a process's exit); the records of
    these and the DevioRun, whose mounts the next operations reuse."""
    from armload.emu.booted.fileops import DevioRun
    dv = dv or DevioRun(run.bk, lambda *_: None)
    mark = len(dv.records)
    assert dv.run(ops)
    return dv.records[mark:], dv


@pytest.mark.parametrize("rel", [ARMMP, LPAE, RT, V612, V612_LPAE, V612_RT])
def test_each_kernels_samples_run_in_it(rel):
    from armload.loader.elf import read_object
    kos = {n: build(rel, n) for n in NAMES}
    for n, ko in kos.items():                       # built against this kernel's headers
        assert read_object(ko).modinfo["vermagic"][0].split(" ")[0] == rel, ko
    run = booted(rel)
    mark = len(run.bk.console)
    for n in NAMES:
        r = run.load(kos[n], "ring_size=32" if n == "ringdev" else "")
        assert (r.status, r.ret) == ("returned", 0), r.to_dict()
        assert r.loader.identical and r.loader.agrees and r.loader.compared > 0, r.loader.to_dict()
    assert run.call("armload_sample_add", 1, 2).ret == 3               # exporter's, as importer calls it
    assert run.call("ringdev_push", "abc", 3).ret == 3
    assert run.call("ringdev_count").ret == 3
    recs, dv = devio(run, [("open", ["/dev/ringdev"]), ("write", ["s:xy"]), ("read", ["8"])])
    assert [r["result"] for r in recs] == [3, 2, 5] and bytes.fromhex(recs[2]["hex"]) == b"abcxy"
    for n in reversed(NAMES):                       # delete_module: each module's exit
        assert run.unload(n)[0] == 0, n
    lines = said(run, mark)
    for want in ("hello: loaded, answer=42, greeting=world", "exporter: loaded, counter=100",
                 "importer: add(40,2)=42 counter=101", "ringdev: 32 bytes, peek -1",
                 "importer: unloaded", "exporter: unloaded, counter=0", "hello: unloaded"):
        assert want in lines, (want, lines)
    # ringdev's exit deregistered its misc device: the node is gone
    recs, _ = devio(run, [("open", ["/dev/ringdev"])], dv)
    assert recs[0].get("errno") == "ENOENT", recs


@pytest.mark.parametrize("built,into,words", REFUSED, ids=[f"{b}-into-{i}" for b, i, _ in REFUSED])
def test_a_module_of_another_kernel_is_refused_in_the_kernels_words(built, into, words):
    run = booted(into)
    mark = len(run.bk.console)
    r = run.load(build(built, "hello"))
    assert (r.status, r.ret) == ("refused", NOEXEC), r.to_dict()
    assert words in said(run, mark)                                      # the kernel's own line
    assert words in r.loader.refusal and r.loader.agrees, r.loader.to_dict()   # armload's, in its words


def make_value(*names: str) -> list[str]:
    """Variables of the Makefile (mk/samples-kernels.mk), as make expands them."""
    rule = "print-vars: ; @" + "; ".join(f"echo '$({n})'" for n in names)
    p = subprocess.run(["make", "-s", "--no-print-directory", "--eval", rule, "print-vars", f"CACHE={CACHE}"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout.splitlines()


def debian_version(tree: str) -> str:
    """An unpacked package's version: the first line of its changelog.Debian.gz."""
    doc = os.path.join(tree, "usr", "share", "doc")
    (name,) = os.listdir(doc)
    with gzip.open(os.path.join(doc, name, "changelog.Debian.gz"), "rt") as f:
        return re.match(r"\S+ \(([^)]+)\)", f.readline()).group(1)


def test_each_kernels_build_fetches_what_its_headers_name():
    """mk/samples-kernels.mk's table against the headers themselves: the kernels are this test's
    (6.1 armmp's are the committed samples), and each one's packages are its linux-headers, the
    common tree its Makefile includes and the linux-kbuild its scripts link reaches (mkktree.sh
    reads the same two), the kbuild pinned at the headers' own Debian version."""
    kernels, debs = make_value("KSAMPLES_KERNELS", "KSAMPLES_DEBS")
    assert kernels.split() == [LPAE, RT, V612, V612_LPAE, V612_RT]
    want = []
    for rel in kernels.split():
        pkg = require_input(os.path.join(CACHE, f"linux-headers-{rel}"), f"make test-inputs KERNEL={rel}")
        hdr = os.path.join(pkg, "usr", "src", f"linux-headers-{rel}")
        common = re.fullmatch(r"include /usr/src/(linux-headers-[^/]+)/Makefile\n", open(os.path.join(hdr, "Makefile")).read())
        kbuild = re.fullmatch(r"\.\./\.\./lib/(linux-kbuild-[^/]+)/scripts", os.readlink(os.path.join(hdr, "scripts")))
        want += [f"linux-headers-{rel}:armhf", common.group(1), f"{kbuild.group(1)}={debian_version(pkg)}"]
    assert debs.split() == want
