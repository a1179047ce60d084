import glob
import os
import shutil

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = os.path.join(ROOT, "sample_modules")
OBJS = os.path.join(SAMPLES, "obj")
SYMVERS = os.path.join(SAMPLES, "Module.symvers")
CROSS = os.environ.get("CROSS", "arm-linux-gnueabihf-")


def sample(name: str) -> str:
    p = os.path.join(SAMPLES, name)
    assert os.path.exists(p), f"missing sample {p} (make samples)"
    return p


def obj(name: str) -> str:
    p = os.path.join(OBJS, name)
    assert os.path.exists(p), f"missing object {p} (make samples-objs)"
    return p


def all_kos():
    return sorted(glob.glob(os.path.join(SAMPLES, "*.ko")))


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
