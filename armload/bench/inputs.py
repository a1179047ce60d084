"""The benchmarks' inputs: where the repository's samples and the Debian 6.1.0-50-armmp packages
(`make test-inputs` / `make corpus` unpack them into .cache) are, and the seeds' published figures."""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLES = os.path.join(ROOT, "sample_modules")
CACHE = os.path.join(ROOT, ".cache")
DEBIAN_REL = "6.1.0-50-armmp"
VMLINUZ = os.path.join(CACHE, f"linux-image-{DEBIAN_REL}", "boot", f"vmlinuz-{DEBIAN_REL}")
DEBIAN = os.path.join(CACHE, f"linux-image-{DEBIAN_REL}", "lib", "modules", DEBIAN_REL, "kernel")
DEBIAN_SYMVERS = os.path.join(CACHE, f"linux-headers-{DEBIAN_REL}", "usr", "src", f"linux-headers-{DEBIAN_REL}",
                              "Module.symvers")

# seed 003: test_progs "bench trig-*" on a 2.4 GHz x86 (the issue): K events/s, without / with retpoline
X86 = {"base": (2743, 2401), "kprobe": (2419, 1930), "kretprobe": (1876, 1485), "raw_tp": (2578, 2053),
       "fentry": (2710, 2351), "fexit": (2685, 2185)}
