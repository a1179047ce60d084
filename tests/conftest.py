"""What every wing's tests need from pytest: the Hypothesis profiles, the markers and their rules,
and the fixtures of more than one wing (binutils, the booted kernel). The paths and helpers they
share are in testinputs.py; a wing's own fixtures are in its conftest.py."""
import os
import shutil

import pytest
from hypothesis import settings

from testinputs import BOOT_VMLINUZ, CROSS, require_input

# Hypothesis: 300 examples per property normally; a mutmut worker (MUTANT_UNDER_TEST set) runs
# each property with 40, so `make mutants` stays within an hour on 2 cores.
settings.register_profile("armload", max_examples=300, deadline=None)
settings.register_profile("mutants", max_examples=40, deadline=None)
settings.load_profile("mutants" if os.environ.get("MUTANT_UNDER_TEST") else "armload")


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
