"""The benchmarks' inputs: where the repository's samples and the Debian 6.1.0-50-armmp packages
(`make test-inputs` / `make corpus` unpack them into .cache) are, and the seeds' published figures."""
import os

from ..kernel.debian import CACHE, ROOT, SYMVERS as DEBIAN_SYMVERS, VMLINUZ  # noqa: F401
from ..kernel.debian import MODULES as DEBIAN, RELEASE as DEBIAN_REL  # noqa: F401

SAMPLES = os.path.join(ROOT, "sample_modules")

# seed 003: test_progs "bench trig-*" on a 2.4 GHz x86 (the issue): K events/s, without / with retpoline
X86 = {"base": (2743, 2401), "kprobe": (2419, 1930), "kretprobe": (1876, 1485), "raw_tp": (2578, 2053),
       "fentry": (2710, 2351), "fexit": (2685, 2185)}
