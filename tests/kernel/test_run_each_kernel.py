"""`armload run` with its default options and its observers on each kernel line (issue 31): the
sanitizers are on by default on 6.1 and 6.12 (execmem, the *_noprof allocators); on a kernel they
cannot watch (here: 6.12's image without its config beside it, which says where gfp stands in
the bucketed allocators) the run goes on without them and says so, and asking for them by name
is one clear error, never a traceback. Coverage and probes find 6.12's module memory
(execmem_alloc)."""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from testinputs import CACHE, ROOT, require_input
from test_samples_kernels import ARMMP, RT, V612, build

NOT_WATCHED = ("the sanitizers cannot watch vmlinuz-6.12.107+deb12-armmp: the kernel's config is not found: "
               "__kmalloc_node_noprof's arguments depend on CONFIG_SLAB_BUCKETS")


def kernel_args(rel: str) -> list[str]:
    how = f"make test-inputs KERNEL={rel}"
    return ["--kernel", require_input(os.path.join(CACHE, f"linux-image-{rel}", "boot", f"vmlinuz-{rel}"), how),
            "--kernel", require_input(os.path.join(CACHE, f"linux-headers-{rel}", "usr", "src", f"linux-headers-{rel}",
                                                   "Module.symvers"), how)]


def armload(*args):
    return subprocess.run([sys.executable, "-m", "armload", *args], capture_output=True, text=True, cwd=ROOT)


@pytest.fixture(scope="module")
def bare_612(tmp_path_factory):
    """6.12's image alone in a directory: no boot/config-RELEASE beside it (the boot snapshot is
    the same: it is keyed by the image's content)."""
    d = tmp_path_factory.mktemp("bare")
    img = kernel_args(V612)[1]
    shutil.copy(img, d / os.path.basename(img))
    return [str(d / os.path.basename(img)), kernel_args(V612)[3]]


def test_run_on_612_by_default_is_sanitized():
    p = armload("run", build(V612, "hello"), *kernel_args(V612), "--settle-ms", "0", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["ok"] and d["modules"][0]["status"] == "returned"
    assert d["sanitize"]["classes"] == ["heap", "leak", "locks", "stack"] and "unsupported" not in d["sanitize"]
    assert d["sanitize"]["reports"] == [] and d["sanitize"]["notes"] == []


def test_run_on_a_kernel_the_sanitizers_cannot_watch_says_so(bare_612):
    p = armload("run", build(V612, "hello"), "--kernel", bare_612[0], "--kernel", bare_612[1], "--settle-ms", "0",
                "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["ok"] and d["modules"][0]["status"] == "returned"
    assert d["sanitize"]["classes"] == [] and d["sanitize"]["unsupported"].startswith(NOT_WATCHED)
    t = armload("run", build(V612, "hello"), "--kernel", bare_612[0], "--kernel", bare_612[1], "--settle-ms", "0")
    assert t.returncode == 0 and f"armload: not sanitized: {NOT_WATCHED}" in t.stdout


@pytest.mark.parametrize("cmd", [["run", "--sanitize", "heap", "--settle-ms", "0"], ["check", "--sanitize", "all"]])
def test_sanitizers_asked_for_where_they_cannot_watch_are_one_clear_error(cmd, bare_612):
    p = armload(cmd[0], build(V612, "hello"), "--kernel", bare_612[0], "--kernel", bare_612[1], *cmd[1:])
    assert p.returncode != 0 and NOT_WATCHED in p.stderr
    assert "Traceback" not in p.stderr and "internal error" not in p.stderr


def test_coverage_and_probes_find_612s_module_memory(tmp_path):
    info = tmp_path / "hello.info"
    p = armload("run", build(V612, "hello"), *kernel_args(V612), "--sanitize", "none", "--settle-ms", "0", "--exit",
                "--coverage", str(info), "--probe", "kprobe:hello_exit")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "coverage: hello: " in p.stdout and "5/5 lines (100.0%), 2/2 functions" in p.stdout
    assert "Internal error" not in p.stdout                      # the no-execute data pages' blocks are kept
    assert "probe [kprobe] hello:hello_exit @ 0xbf" in p.stdout
    assert "hello: delete_module returned 0" in p.stdout


def _symbols(rel):
    from armload.kernel.image import load_image
    return load_image(kernel_args(rel)[1]).symbols


def test_the_sanitizers_serve_61_612_and_rt():
    from armload.emu.sanitize.support import BUCKETED, REQUIRED, unsupported
    from armload.kernel.identity import identify
    assert unsupported(_symbols(ARMMP)) is None
    v612 = _symbols(V612)
    assert unsupported(v612, identify(kernel_args(V612)[1]).config) is None
    assert unsupported(v612, None).startswith("the kernel's config is not found")
    rt = _symbols(RT)
    assert unsupported(rt) is None
    for pick in (0, -1):                                          # 6.1's names, and 6.12's
        have = {alts[pick]: 1 for alts in REQUIRED}
        assert unsupported(have, {"CONFIG_SLAB_BUCKETS": "y"}) is None
        for alts in REQUIRED:                                     # each entry point is needed
            left = {n: 1 for n in have if n not in alts}
            assert unsupported(left, {"CONFIG_SLAB_BUCKETS": "y"}).startswith(f"the kernel has no {' or '.join(alts)}:")
    assert unsupported({**{a[0]: 1 for a in REQUIRED}, BUCKETED: 1}, {}) is not None


def test_the_devkits_default_sanitizers_warn_where_they_cannot_watch_and_a_list_is_an_error(bare_612):
    from armload.devkit.testing import ModuleHandle
    from armload.emu.sanitize import SanitizerUnsupported
    h = ModuleHandle(build(V612, "hello"), kernel=bare_612[0])
    with pytest.warns(UserWarning, match=re.escape("armload: not sanitized: " + NOT_WATCHED)):
        assert h.init() == 0
    assert h.san is None
    with pytest.raises(SanitizerUnsupported, match=re.escape(NOT_WATCHED)):
        ModuleHandle(build(V612, "hello"), kernel=bare_612[0], sanitize="heap,locks").init()
