"""The loader's configuration as the kernel image says it, not as flags default it.

From the image (kernel/identity.py): its release and config decide the module memory layout
(Linux 6.4 replaced core/init layouts with one allocation per memory type, `mod_mem[]`) and
CONFIG_THUMB2_KERNEL / ARM_MODULE_PLTS / DYNAMIC_FTRACE / MODULE_UNLOAD when its config is known;
from the Debian package's module tree beside it (lib/modules/REL/kernel): struct module's layout
(loader/this_module.py). A flag that contradicts the image is refused.
"""
from __future__ import annotations

import dataclasses
import os

from ..errors import ArmloadError
from ..kernel.config import KernelConfig

# KernelConfig field -> the CONFIG_ option that decides it (y/n), when the image's config is known
BOOL_OPTIONS = {"thumb2": "CONFIG_THUMB2_KERNEL", "module_plts": "CONFIG_ARM_MODULE_PLTS",
                "dynamic_ftrace": "CONFIG_DYNAMIC_FTRACE", "module_unload": "CONFIG_MODULE_UNLOAD"}


def package_tree(image: str, release: str) -> str | None:
    """boot/vmlinuz-REL -> lib/modules/REL/kernel of the same unpacked package, if there."""
    d = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(image))), "lib", "modules", release, "kernel")
    return d if os.path.isdir(d) else None


def layout_of(version: tuple[int, int]) -> str:
    return "6.4" if version >= (6, 4) else "6.1"


def follow_kernel(config: KernelConfig, image: str | None, *, layout_given: str | None = None,
                  tree: str | None = None) -> KernelConfig:
    """`config` with what the image decides. layout_given: the --layout the user gave (None: none),
    refused when it is not the image's."""
    if not image:
        return config.with_(layout=layout_given) if layout_given else config
    from ..kernel.identity import identify
    ident = identify(image)
    layout = layout_of(ident.version)
    if layout_given and layout_given != layout:
        raise ArmloadError(f"--layout {layout_given}: the image is Linux {'.'.join(map(str, ident.version))} "
                           f"({ident.release}), whose load_module uses the {layout} layout")
    kw = {"layout": layout, "version": ident.version}
    if ident.config:
        default = KernelConfig()
        for fld, opt in BOOL_OPTIONS.items():
            want = ident.config.get(opt) == "y"
            have = getattr(config, fld)
            if have != want and have != getattr(default, fld):
                raise ArmloadError(f"the image {ident.release} is built with {opt}={'y' if want else 'n'}: "
                                   f"the option that says otherwise contradicts it")
            kw[fld] = want
        shift = ident.config.get("CONFIG_ARM_L1_CACHE_SHIFT")
        if shift and shift.isdigit() and 1 << int(shift) in (32, 64):
            kw["l1_cache_bytes"] = 1 << int(shift)
    from .this_module import of_tree
    t = tree if tree and os.path.isdir(tree) else package_tree(image, ident.release)
    if t:
        kw["struct_module"] = of_tree(t)
    return dataclasses.replace(config, **kw)


def follow_headers(config: KernelConfig, symvers: str, *, layout_given: str | None = None) -> KernelConfig:
    """Without an image: the release the Module.symvers' headers name (include/generated/
    utsrelease.h beside it) decides the version and the layout; nothing else is known."""
    import re
    from ..kernel.identity import symvers_release
    rel = symvers_release(symvers)
    m = re.match(r"(\d+)\.(\d+)", rel or "")
    if m is None:
        return config.with_(layout=layout_given) if layout_given else config
    version = (int(m.group(1)), int(m.group(2)))
    layout = layout_of(version)
    if layout_given and layout_given != layout:
        raise ArmloadError(f"--layout {layout_given}: {symvers} is kernel {rel}'s, whose load_module uses the "
                           f"{layout} layout")
    return dataclasses.replace(config, layout=layout, version=version)
