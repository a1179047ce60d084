"""The Debian inputs armload is built and tested against: the release (Debian 12's armhf
`linux-image-6.1.0-50-armmp`) and where `make test-inputs` / `make corpus` unpack its packages
(`.cache` of the checkout, or $CACHE). The one place these paths are written."""
from __future__ import annotations

import os

RELEASE = "6.1.0-50-armmp"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE = os.environ.get("CACHE", os.path.join(ROOT, ".cache"))
IMAGE_PACKAGE = os.path.join(CACHE, f"linux-image-{RELEASE}")


def image_under(cache: str) -> str:
    """Where the image package puts the vmlinuz, under a cache directory `cache`."""
    return os.path.join(cache, f"linux-image-{RELEASE}", "boot", f"vmlinuz-{RELEASE}")


VMLINUZ = image_under(CACHE)
MODULES = os.path.join(IMAGE_PACKAGE, "lib", "modules", RELEASE, "kernel")     # the module tree
SYMVERS = os.path.join(CACHE, f"linux-headers-{RELEASE}", "usr", "src", f"linux-headers-{RELEASE}", "Module.symvers")
VMLINUX_DBG = os.path.join(CACHE, f"linux-image-{RELEASE}-dbg", "usr", "lib", "debug", "boot", f"vmlinux-{RELEASE}")
