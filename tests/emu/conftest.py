"""The emu wing's fixture: `run`, a BootedRun (armload/emu/booted/modrun.py) on a fresh restore of the
booted Debian kernel, with the samples' Module.symvers and the image as the loader's kernel."""
import pytest
from testinputs import BOOT_VMLINUZ, SYMVERS

from armload.kernel.config import DEBIAN_ARMMP
from armload.kernel.provider import Kernel


@pytest.fixture
def run(booted_dir):
    from armload.emu.booted.modrun import BootedRun
    return BootedRun(BOOT_VMLINUZ, Kernel.from_files([SYMVERS, BOOT_VMLINUZ], DEBIAN_ARMMP), DEBIAN_ARMMP)
