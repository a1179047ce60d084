"""The instruction set a kernel image was built for, and the Thumb-2 modules it cannot run.

Debian's armmp kernel is built without CONFIG_THUMB2_KERNEL: its code runs in ARM state, and 6.1's
apply_relocate (arch/arm/kernel/module.c) knows R_ARM_THM_CALL/THM_JUMP24/THM_MOVW/MOVT only
#ifdef CONFIG_THUMB2_KERNEL. A Thumb-2 module cannot run in it, so `armload run` refuses it with
that reason (load and verify still load it, with --thumb2, without running it).
"""
from __future__ import annotations

from ..errors import ENOEXEC, ArmloadError

THUMB_RELOCATIONS = {10: "R_ARM_THM_CALL", 30: "R_ARM_THM_JUMP24", 47: "R_ARM_THM_MOVW_ABS_NC",
                     48: "R_ARM_THM_MOVT_ABS"}


def image_isa(path: str) -> str | None:
    """"ARM" or "THUMB2": the S_ISA arch/arm/kernel/traps.c __die() was built with, read from its
    format string ("Internal error: %s: %x [#%d]" S_PREEMPT S_SMP S_ISA) in the Image."""
    from .image import load_image
    data = load_image(path).data
    i = data.find(b"Internal error: %s: %x [#%d]")
    if i < 0:
        return None
    words = data[i:data.index(b"\n", i)].split()
    return words[-1].decode() if words[-1] in (b"ARM", b"THUMB2") else None


def thumb_relocation(obj) -> str | None:
    """The first Thumb-2 relocation type of a module (a loader.elf ObjectFile), None for an ARM module."""
    for rel in obj.rels.values():
        for t in sorted(set((rel["r_info"] & 0xFF).tolist()) & set(THUMB_RELOCATIONS)):
            return THUMB_RELOCATIONS[t]
    return None


def refuse_thumb2_on_arm(image_path: str | None, thumb2: bool) -> None:
    """--thumb2 (a CONFIG_THUMB2_KERNEL build) with an ARM-mode kernel image: refused up front. The
    kernel's own code would run in the wrong instruction set: say so before anything runs."""
    if not thumb2 or not image_path:
        return
    if image_isa(image_path) == "ARM":
        raise ArmloadError(f"--thumb2 with {image_path}: that kernel was built for ARM mode (its __die prints "
                           f"\"SMP ARM\", no CONFIG_THUMB2_KERNEL), and a Thumb-2 module's calls into it "
                           f"would run in the wrong instruction set. Load Thumb-2 modules without the image "
                           f"(--kernel Module.symvers) or on a CONFIG_THUMB2_KERNEL image", errno=-ENOEXEC)


def refuse_thumb2_modules(objs, image_path: str) -> None:
    """A Thumb-2 module (loader.elf ObjectFiles) cannot run in an ARM-mode kernel: refused with the
    reason, before anything runs."""
    if image_isa(image_path) != "ARM":
        return
    for o in objs:
        rel = thumb_relocation(o)
        p = o.path
        if rel:
            raise ArmloadError(f"{p}: a Thumb-2 module ({rel} relocations): it needs a CONFIG_THUMB2_KERNEL "
                               f"kernel, and {image_path} is built for ARM mode (Debian builds no "
                               f"CONFIG_THUMB2_KERNEL), so it cannot run there; `armload load --thumb2` and "
                               f"`armload verify --thumb2` load it without running it", file=p, errno=-ENOEXEC)
