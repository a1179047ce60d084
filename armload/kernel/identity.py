"""Which kernel an image is: its release, Debian flavour and config, read from the image itself.

* release and build: the Image's `linux_banner` ("Linux version 6.1.0-50-armmp (...) #1 SMP
  PREEMPT_RT Debian 6.1.176-1 (2026-07-02)", init/version.c);
* flavour: the release after Debian's ABI part (6.1.0-50-**rt-armmp**, 6.12.107+deb12-**armmp**);
* config: the Image's own copy when it has one (CONFIG_IKCONFIG: gzip between "IKCFG_ST" and
  "IKCFG_ED", kernel/configs.c), else Debian's `config-RELEASE` beside the image in `boot/`.

A Module.symvers belongs to the kernel its headers were made for: `include/generated/utsrelease.h`
beside it names the release, and every vmlinux export it lists is in the image's `__ksymtab`.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from ..errors import KernelFileError

_BANNER = re.compile(rb"Linux version (\S+) \(([^\n\x00]*?)\) (#[^\n\x00]*)")
_RELEASE = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:-(\d+)|\+deb\d+)-([a-z0-9-]+)$")


@dataclass(frozen=True)
class KernelIdentity:
    """What the kernel image says it is: release, version, flavour and build string."""

    release: str                      # uname -r: 6.1.0-50-armmp
    version: tuple[int, int]          # (6, 1)
    flavour: str                      # armmp, armmp-lpae, rt-armmp
    build: str                        # "#1 SMP PREEMPT_RT Debian 6.1.176-1 (2026-07-02)"
    config: dict[str, str] = field(default_factory=dict, compare=False)
    config_source: str = ""           # "IKCONFIG" or the config file's path, "" when none was found

    @property
    def preempt_rt(self) -> bool:
        return "PREEMPT_RT" in self.build or self.config.get("CONFIG_PREEMPT_RT") == "y"

    @property
    def lpae(self) -> bool:
        return self.config.get("CONFIG_ARM_LPAE") == "y" if self.config else self.flavour.endswith("lpae")

    def option(self, name: str) -> str | None:
        return self.config.get(name)

    def to_dict(self) -> dict:
        return {"release": self.release, "version": ".".join(map(str, self.version)), "flavour": self.flavour,
                "build": self.build, "config": self.config_source or None}


def parse_config(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line.startswith("CONFIG_") and "=" in line:
            k, v = line.split("=", 1)
            out[k] = v.strip().strip('"')
    return out


def identify_data(data: bytes, path: str) -> KernelIdentity:
    """The identity of a decompressed Image's bytes (`path` names it, and locates boot/config-*)."""
    m = _BANNER.search(data)
    if m is None:
        raise KernelFileError(f"{path}: no linux_banner ('Linux version ...') in the image: not a Linux kernel?",
                              file=path)
    release = m.group(1).decode("ascii", "replace")
    build = m.group(3).decode("ascii", "replace").strip()
    r = _RELEASE.match(release)
    if r:
        version, flavour = (int(r.group(1)), int(r.group(2))), r.group(5)
    else:
        v = re.match(r"(\d+)\.(\d+)", release)
        version, flavour = ((int(v.group(1)), int(v.group(2))) if v else (0, 0)), ""
    config, source = {}, ""
    st, ed = data.find(b"IKCFG_ST"), data.find(b"IKCFG_ED")
    if 0 <= st < ed:
        import gzip
        try:
            config, source = parse_config(gzip.decompress(data[st + 8:ed]).decode("utf-8", "replace")), "IKCONFIG"
        except (OSError, EOFError):
            config = {}
    if not config:
        cfg = os.path.join(os.path.dirname(os.path.abspath(path)), f"config-{release}")
        if os.path.isfile(cfg):
            with open(cfg, encoding="utf-8", errors="replace") as f:
                config, source = parse_config(f.read()), cfg
    return KernelIdentity(release, version, flavour, build, config, source)


_CACHE: dict[tuple, KernelIdentity] = {}


def identify(path: str) -> KernelIdentity:
    """The identity of a kernel image file (vmlinuz/zImage/Image), once per process."""
    from .image import load_image
    st = os.stat(path)
    key = (os.path.abspath(path), st.st_size, st.st_mtime_ns)
    if key not in _CACHE:
        _CACHE[key] = identify_data(load_image(path).data, path)
    return _CACHE[key]


def symvers_release(path: str) -> str | None:
    """The release a Module.symvers was made for: UTS_RELEASE in the headers beside it."""
    uts = os.path.join(os.path.dirname(os.path.abspath(path)), "include", "generated", "utsrelease.h")
    try:
        with open(uts, encoding="utf-8", errors="replace") as f:
            m = re.search(r'#define UTS_RELEASE "([^"]+)"', f.read())
    except OSError:
        return None
    return m.group(1) if m else None


def check_symvers_belongs(symvers: str, vmlinux_exports: set[str], image: str, image_exports: set[str]) -> None:
    """Refuse a Module.symvers made for another kernel than the image (one clear error)."""
    want = identify(image).release
    have = symvers_release(symvers)
    if have is not None and have != want:
        raise KernelFileError(f"{symvers}: this Module.symvers is kernel {have}'s (its include/generated/"
                              f"utsrelease.h); the image {os.path.basename(image)} is {want}: give the "
                              f"headers of the same kernel (linux-headers-{want})", file=symvers)
    foreign = sorted(vmlinux_exports - image_exports)
    if foreign and image_exports:
        raise KernelFileError(f"{symvers}: lists {len(foreign)} vmlinux export(s) the image {want} does not "
                              f"export ({', '.join(foreign[:4])}{', ...' if len(foreign) > 4 else ''}): it is "
                              f"another kernel's Module.symvers", file=symvers)
