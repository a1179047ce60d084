import glob
import os
import shutil

import pytest
from hypothesis import settings
from armload.kernel import debian

# Hypothesis: 300 examples per property normally; a mutmut worker (MUTANT_UNDER_TEST set) runs
# each property with 40, so `make mutants` stays within an hour on 2 cores.
settings.register_profile("armload", max_examples=300, deadline=None)
settings.register_profile("mutants", max_examples=40, deadline=None)
settings.load_profile("mutants" if os.environ.get("MUTANT_UNDER_TEST") else "armload")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = os.path.join(ROOT, "sample_modules")
OBJS = os.path.join(SAMPLES, "obj")
SYMVERS = os.path.join(SAMPLES, "Module.symvers")
CROSS = os.environ.get("CROSS", "arm-linux-gnueabihf-")
CACHE = os.environ.get("CACHE", os.path.join(ROOT, ".cache"))

# A missing oracle input is a failure. Only a developer who says so (ARMLOAD_OFFLINE=1, never in
# CI, where CI=true) gets skips instead, each naming the missing file.
OFFLINE = os.environ.get("ARMLOAD_OFFLINE", "") == "1" and os.environ.get("CI", "").lower() != "true"


def require_input(path: str, how: str) -> str:
    """`path` must exist (a .cache input or a committed sample); fail (or, opted out, skip) otherwise."""
    if os.path.exists(path):
        return path
    msg = f"missing test input {path} ({how})"
    if OFFLINE:
        pytest.skip(msg + " [ARMLOAD_OFFLINE=1]")
    pytest.fail(msg + "; a developer without network may set ARMLOAD_OFFLINE=1 to skip such tests",
                pytrace=False)


def sample(name: str) -> str:
    return require_input(os.path.join(SAMPLES, name), "committed sample: make samples")


def obj(name: str) -> str:
    return require_input(os.path.join(OBJS, name), "committed object: make samples-objs")


def all_kos():
    kos = sorted(glob.glob(os.path.join(SAMPLES, "*.ko")))
    assert len(kos) >= 20, f"committed samples missing in {SAMPLES} (make samples)"
    return kos


def pytest_configure(config):
    config.addinivalue_line("markers", "inputs(*paths, how=...): the test needs these files (fails without them)")
    config.addinivalue_line("markers", "regress_result: reads a `make regress` result; deselected outside it")


def pytest_runtest_setup(item):
    for m in item.iter_markers("inputs"):
        for p in m.args:
            require_input(p, m.kwargs.get("how", "make test-inputs"))


def pytest_collection_modifyitems(config, items):
    # Assertions over a corpus check result only make sense inside `make regress`, which names the
    # result files; elsewhere they are deselected (counted as such), not skipped.
    if os.environ.get("ARMLOAD_CORPUS_JSON") or os.environ.get("ARMLOAD_CORPUS_JSON_VMALLOC"):
        return
    keep, drop = [], []
    for it in items:
        (drop if it.get_closest_marker("regress_result") else keep).append(it)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(scope="session")
def binutils():
    """GNU binutils for ARM, the independent oracle (installed by `make toolchain` / .ci/run)."""
    ld = shutil.which(CROSS + "ld")
    if ld is None:
        pytest.fail(f"{CROSS}ld not found: run `make toolchain` (apt-get install binutils-arm-linux-gnueabihf)")
    return CROSS


def devkit_line(marker: str, after: int = 0) -> int:
    """1-based line of the first line of sample_modules/src/devkit/devkit.c containing `marker`
    (plus `after`): tests name source lines by their text, not by a number that moves."""
    with open(os.path.join(SAMPLES, "src", "devkit", "devkit.c")) as f:
        for i, line in enumerate(f, 1):
            if marker in line:
                return i + after
    raise AssertionError(f"devkit.c has no line containing {marker!r}")


BOOT_VMLINUZ = debian.VMLINUZ


@pytest.fixture(scope="session")
def booted_dir():
    """The booted Debian kernel's snapshot directory: booted once per cache (about 1.3 G
    instructions with the crypto self-tests), then every test restores it copy-on-write."""
    require_input(BOOT_VMLINUZ, "make test-inputs")
    from armload.emu.booted.kernel import BootedKernel
    return BootedKernel.get(BOOT_VMLINUZ).directory


@pytest.fixture
def booted(booted_dir):
    """A fresh copy-on-write restore of the booted kernel (pid 1 at run_init_process)."""
    from armload.emu.booted.kernel import BootedKernel
    return BootedKernel.get(BOOT_VMLINUZ)
