"""What every wing's tests read: the committed samples, the Debian inputs `make test-inputs` fetches,
and the one rule for a missing input. A plain module (tests/ is on sys.path: pytest puts the
rootdir conftest's folder there), imported by name as `from testinputs import ...`: each wing has
a conftest.py of its own, so `conftest` is not one module to import from."""
import glob
import os

import pytest

from armload.kernel import debian

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = os.path.join(ROOT, "sample_modules")
OBJS = os.path.join(SAMPLES, "obj")
SYMVERS = os.path.join(SAMPLES, "Module.symvers")
CROSS = os.environ.get("CROSS", "arm-linux-gnueabihf-")
CACHE = os.environ.get("CACHE", os.path.join(ROOT, ".cache"))
BOOT_VMLINUZ = debian.VMLINUZ             # the Debian 6.1 armmp image the booted kernel boots
DEBIAN_SYMVERS = debian.SYMVERS           # its headers' Module.symvers

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


def devkit_line(marker: str, after: int = 0) -> int:
    """1-based line of the first line of sample_modules/src/devkit/devkit.c containing `marker`
    (plus `after`): tests name source lines by their text, not by a number that moves."""
    with open(os.path.join(SAMPLES, "src", "devkit", "devkit.c")) as f:
        for i, line in enumerate(f, 1):
            if marker in line:
                return i + after
    raise AssertionError(f"devkit.c has no line containing {marker!r}")
