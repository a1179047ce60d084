"""pytest plugin (entry point `armload` in group pytest11): fixtures for testing kernel modules.

    def test_sum(load_module):
        dk = load_module("sample_modules/devkit-arm-debug.ko", params={"count": 2})
        assert dk.init() == 0
        assert dk.call("devkit_sum", 3) == 3

Fixtures:
* `kernel` (session): the Debian image from --armload-kernel, the ini option `armload_kernel`,
  $ARMLOAD_KERNEL, <rootdir>/.cache or armload's own checkout's .cache (where `make test-inputs`
  puts it); `builtin` asks for armload's built-in kernel by name. With none of them, collecting a
  test that uses the fixtures fails with the way to get the image (the header line says which);
* `load_module(path, params=..., deps=..., thumb2=..., budget=...)`: a fresh
  `armload.devkit.testing.ModuleHandle` per call, on its own machine (nothing leaks between tests).
"""
from __future__ import annotations

import os

import pytest


def pytest_addoption(parser):
    g = parser.getgroup("armload")
    g.addoption("--armload-kernel", metavar="VMLINUZ", default=None,
                help="kernel image for the armload fixtures, or `builtin` (default: the ini option "
                     "armload_kernel, $ARMLOAD_KERNEL, .cache under the rootdir or armload's checkout)")
    parser.addini("armload_kernel", "kernel image for the armload fixtures (relative to the rootdir), or builtin")


def _find(config):
    """(path or None for builtin, where) or the ArmloadError that says how to get one."""
    from .testing import find_kernel
    ini = config.getini("armload_kernel") or None
    if ini and ini != "builtin" and not os.path.isabs(ini):
        ini = os.path.join(str(config.rootpath), ini)
    return find_kernel(config.getoption("--armload-kernel", default=None), ini, str(config.rootpath))


def _kernel_path(config) -> str | None:
    return _find(config)[0]


def pytest_report_header(config):
    from ..errors import ArmloadError
    try:
        p, where = _find(config)
    except ArmloadError as e:
        return f"armload kernel: NONE ({e})"
    return f"armload kernel: {p} (from {where})" if p else \
        f"armload kernel: built-in (asked for by {where}: Python models and fallbacks only)"


_FIXTURES = {"kernel", "load_module"}


def pytest_collection_modifyitems(session, config, items):
    """A test that uses the fixtures with no kernel to run on fails the collection, with the fix."""
    from ..errors import ArmloadError
    if not any(_FIXTURES & set(getattr(i, "fixturenames", ())) for i in items):
        return
    try:
        _find(config)
    except ArmloadError as e:
        raise pytest.UsageError(f"armload: {e}") from None


@pytest.fixture(scope="session")
def kernel(request):
    from .testing import make_kernel
    return make_kernel(_kernel_path(request.config))


@pytest.fixture
def load_module(request, kernel):
    from .testing import ModuleHandle, make_kernel
    thumb_kernels = {}

    def load(path, **kw):
        if not os.path.isabs(path) and not os.path.exists(path):
            cand = os.path.join(str(request.config.rootpath), path)
            path = cand if os.path.exists(cand) else path
        k = kernel
        if kw.get("thumb2") or (kw.get("thumb2") is None and "thumb2" in os.path.basename(path)):
            if kernel.config.thumb2 is False:
                # a Thumb-2 module needs a CONFIG_THUMB2_KERNEL kernel: the built-in one
                k = thumb_kernels.setdefault("k", make_kernel(None, thumb2=True))
        return ModuleHandle(path, kernel=k, **kw)
    return load
