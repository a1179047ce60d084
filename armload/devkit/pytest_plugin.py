"""pytest plugin (entry point `armload` in group pytest11): fixtures for testing kernel modules.

    def test_sum(load_module):
        dk = load_module("sample_modules/devkit-arm-debug.ko", params={"count": 2})
        assert dk.init() == 0
        assert dk.call("devkit_sum", 3) == 3

Fixtures:
* `kernel` (session): the Debian image from --armload-kernel / $ARMLOAD_KERNEL /
  <rootdir>/.cache/linux-image-*/boot/vmlinuz-*, else armload's built-in kernel (the header
  line says which);
* `load_module(path, params=..., deps=..., thumb2=..., budget=...)`: a fresh
  `armload.devkit.testing.ModuleHandle` per call, on its own machine (nothing leaks between tests).
"""
from __future__ import annotations

import os

import pytest


def pytest_addoption(parser):
    g = parser.getgroup("armload")
    g.addoption("--armload-kernel", metavar="VMLINUZ", default=None,
                help="kernel image for the armload fixtures (default: $ARMLOAD_KERNEL or the Debian image "
                     "under .cache; the built-in kernel when there is none)")


def _kernel_path(config) -> str | None:
    from .testing import default_kernel_path
    p = config.getoption("--armload-kernel", default=None)
    return p or default_kernel_path(str(config.rootpath))


def pytest_report_header(config):
    p = _kernel_path(config)
    return f"armload kernel: {p}" if p else "armload kernel: built-in (no image: Python models and fallbacks only)"


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
