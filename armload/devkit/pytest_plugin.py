"""pytest plugin (entry point `armload` in group pytest11): fixtures for testing kernel modules
inside the booted Debian kernel.

    def test_sum(load_module):
        dk = load_module("sample_modules/devkit-arm-debug.ko", params={"count": 2})
        assert dk.init() == 0
        assert dk.call("devkit_sum", 3) == 3

Fixtures:
* `kernel` (session): the path of the Debian image from --armload-kernel, the ini option
  `armload_kernel`, $ARMLOAD_KERNEL, <rootdir>/.cache or armload's own checkout's .cache (where
  `make test-inputs` puts it). With none of them, collecting a test that uses the fixtures fails
  with the way to get the image (the header line says which);
* `load_module(path, params=..., deps=..., budget=..., sanitize=...)`: an
  `armload.devkit.testing.ModuleHandle` on its own copy of the booted kernel.

Sanitizers: on by default; a KASAN-, kmemleak- or lockdep-class report fails the test with the
report (`SanitizerReport`, the kernel's format with file:line). `--armload-sanitize LIST|none` (or
the ini option `armload_sanitize`) sets the default classes, `load_module(path, sanitize=None)`
opts one handle out, `handle.scan_leaks()` runs kmemleak's scan on demand.

Isolation and speed: every test that uses the fixtures runs in a child process forked from the
pytest process (as pytest-forked does: the reports come back through a pipe), which holds a restored
booted kernel; Unicorn's state and the copy-on-write RAM are inherited, so nothing a test does leaks
into another and no test pays for a restore. After a test ran init of a module (with these
parameters and dependencies, and no fault injection), the pytest process loads it once into a
booted kernel of its own, and later tests with the same module fork with it already loaded.
`--armload-no-fork` runs tests in the pytest process (each handle then restores its own kernel).
"""
from __future__ import annotations

import os
import pickle

import pytest

_FIXTURES = {"kernel", "load_module"}


def pytest_addoption(parser):
    g = parser.getgroup("armload")
    g.addoption("--armload-kernel", metavar="VMLINUZ", default=None,
                help="kernel image for the armload fixtures (default: the ini option armload_kernel, "
                     "$ARMLOAD_KERNEL, .cache under the rootdir or armload's checkout)")
    g.addoption("--armload-no-fork", action="store_true", default=False,
                help="run armload tests in the pytest process instead of a forked child each")
    g.addoption("--armload-sanitize", metavar="LIST|none", default=None,
                help="sanitizer classes on each module handle (default all: heap,stack,leak,locks; a report "
                     "fails the test); none turns them off")
    parser.addini("armload_kernel", "kernel image for the armload fixtures (relative to the rootdir)")
    parser.addini("armload_sanitize", "sanitizer classes for the armload fixtures (all, a list, or none)")


def _find(config):
    """(path, where) or the ArmloadError that says how to get one."""
    from .testing import find_kernel
    ini = config.getini("armload_kernel") or None
    if ini and not os.path.isabs(ini):
        ini = os.path.join(str(config.rootpath), ini)
    return find_kernel(config.getoption("--armload-kernel", default=None), ini, str(config.rootpath))


def pytest_report_header(config):
    from ..errors import ArmloadError
    try:
        p, where = _find(config)
    except ArmloadError as e:
        return f"armload kernel: NONE ({e})"
    return f"armload kernel: {p} (from {where}), booted in Unicorn; a forked child per test"


def pytest_collection_modifyitems(session, config, items):
    """A test that uses the fixtures with no kernel to run on fails the collection, with the fix."""
    from ..errors import ArmloadError
    if not any(_FIXTURES & set(getattr(i, "fixturenames", ())) for i in items):
        return
    try:
        _find(config)
    except ArmloadError as e:
        raise pytest.UsageError(f"armload: {e}") from None


def _uses_fixtures(item) -> bool:
    return bool(_FIXTURES & set(getattr(item, "fixturenames", ())))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """Fork: the child runs setup, call and teardown and sends the reports back; the parent logs them."""
    if not _uses_fixtures(item) or item.config.getoption("--armload-no-fork") or not hasattr(os, "fork"):
        return None
    from _pytest.runner import runtestprotocol
    from . import testing
    vmlinuz = _find(item.config)[0]
    testing.base(vmlinuz)                       # a restored kernel in this process, inherited by the child
    ihook = item.ihook
    ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                                # the child: its own copy of everything
        os.close(r)
        code = 0
        try:
            del testing.USED[:]
            reports = runtestprotocol(item, log=False, nextitem=None)
            data = [item.config.hook.pytest_report_to_serializable(config=item.config, report=x) for x in reports]
            payload = pickle.dumps((data, list(testing.USED)))
        except BaseException as e:              # a harness failure: said, never a silent pass
            payload = pickle.dumps(([], []))
            os.write(2, f"armload: the forked test {item.nodeid} failed to run: {e!r}\n".encode())
            code = 1
        with os.fdopen(w, "wb") as f:
            f.write(payload)
        os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        payload = f.read()
    _, status = os.waitpid(pid, 0)
    data, used = pickle.loads(payload) if payload else ([], [])
    reports = [item.config.hook.pytest_report_from_serializable(config=item.config, data=d) for d in data]
    if not reports:                             # the child died (a crash, a signal): a failed test, said so
        from _pytest.reports import TestReport
        reports = [TestReport(item.nodeid, item.location, {}, "failed",
                              f"armload: the forked child running this test died (wait status {status:#x})",
                              "call")]
    for rep in reports:
        ihook.pytest_runtest_logreport(report=rep)
    # what the parent set up for earlier tests (a module, a directory) and the next test does not
    # need is torn down here, as pytest's own teardown phase does (runner.pytest_runtest_teardown):
    # the child's teardown ran in the child only
    item.session._setupstate.teardown_exact(nextitem)
    ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    for key in used:                            # later tests with this module fork with it loaded
        testing.warm(key)
    return True


@pytest.fixture(scope="session")
def kernel(request):
    """The kernel image the fixtures boot (a path)."""
    return _find(request.config)[0]


@pytest.fixture
def load_module(request, kernel):
    from .testing import ModuleHandle

    def load(path, **kw):
        if not os.path.isabs(path) and not os.path.exists(path):
            cand = os.path.join(str(request.config.rootpath), path)
            path = cand if os.path.exists(cand) else path
        kw.setdefault("sanitize", request.config.getoption("--armload-sanitize", default=None)
                      or request.config.getini("armload_sanitize") or "all")
        return ModuleHandle(path, kernel=kw.pop("kernel", kernel), **kw)
    return load
