"""The validation pass's table (issue 21): per section type and flag combination, what 6.1's
load_module checks and what armload adds, and the checks that need the whole table.

6.1's elf_validity_check bounds a section's offset and size by the file (validate_section_offset)
for every type but SHT_NULL and SHT_NOBITS ("no contents"). Yet several later steps read bytes at
sh_addr = hdr + sh_offset in the kernel's copy of the file whatever the type: move_module copies
every SHF_ALLOC section that is not NOBITS (SHT_NULL included), get_modinfo walks .modinfo,
check_version scans __versions, percpu_modcopy copies .data..percpu and count_plts reads the
instructions of executable relocation targets. Outside the file those reads are out of bounds:
armload refuses them and says which reader would read what. The 2024 rework of the check
(elf_validity_cache_sechdrs, Linux 6.13) still skips SHT_NULL and SHT_NOBITS, so no later kernel
has a check to name for them.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ..constants import SHT_NOBITS, SHT_NULL

UNCHECKED_TYPES = (SHT_NULL, SHT_NOBITS)        # elf_validity_check: "continue" before validate_section_offset
TYPE_NAMES = {SHT_NULL: "SHT_NULL", SHT_NOBITS: "NOBITS"}
LATER = ("no later kernel bounds it: the 6.13 rework, elf_validity_cache_sechdrs, still skips SHT_NULL "
         "and SHT_NOBITS")


@dataclass(frozen=True)
class Rule:
    """One row of the validity table: which sections, what 6.1 checks, what armload adds."""

    sections: str          # which sections (type / flags / role)
    kernel: str            # what 6.1 checks, and what it then reads
    armload: str           # what armload adds ("-": the kernel's check alone)


# One row per section type and flag combination; elf.py applies them in the kernel's order.
SECTION_RULES = (
    Rule("section 0", "must be SHT_NULL with size 0 and addr 0", "-"),
    Rule("e_shstrndx (any type)", "offset + size inside the file, size > 0, last byte NUL",
         "every sh_name (also of unchecked sections) a C string inside the file"),
    Rule("SHT_SYMTAB", "exactly one; sh_link < e_shnum; offset + size inside the file",
         "every st_name a C string inside the file (6.12's check); st_shndx < e_shnum unless special"),
    Rule("symbol string table (sh_link, any type)", "nothing (6.1 reads names at its sh_offset); layout_symtab "
         "sets SHF_ALLOC, so move_module copies it unless NOBITS", "every symbol name ends inside the file; "
         "SHT_NULL with offset + size past the end refused (an out-of-bounds read)"),
    Rule("SHT_REL", "offset + size inside the file; sh_info >= e_shnum skipped by apply_relocations",
         "sh_info >= e_shnum: the header module_frob_arch_sections reads past the table must lie in the file "
         "and not look executable"),
    Rule("SHT_RELA", "offset + size inside the file; apply_relocate_add refuses", "-"),
    Rule("SHT_ARM_EXIDX + SHF_ALLOC", "offset + size inside the file; module_finalize registers it for "
         "unwinding", "the oops unwinder walks only these (type checked, as module_finalize does)"),
    Rule(".ARM.exidx* of another type (NOBITS, SHT_NULL, PROGBITS)", "ignored for unwinding (sh_type != "
         "ELF_SECTION_UNWIND)", "not walked by the oops unwinder"),
    Rule("other types + SHF_ALLOC", "offset + size inside the file, sh_name < name table size; copied by "
         "move_module", "-"),
    Rule("other types, no SHF_ALLOC", "offset + size inside the file; otherwise unused", "-"),
    Rule("SHT_NOBITS + SHF_ALLOC", "nothing; zero-filled, not copied", "refused when a reader below reads "
         "it outside the file"),
    Rule("SHT_NULL + SHF_ALLOC", "nothing; yet move_module copies it (type != SHT_NOBITS)",
         "refused when offset + size (size > 0) is past the end of the file: an out-of-bounds read"),
    Rule("SHT_NULL / SHT_NOBITS, no SHF_ALLOC", "nothing; unused", "refused when a reader below reads it "
         "outside the file"),
    Rule(".gnu.linkonce.this_module", "SHF_ALLOC (else 'No module found'); 6.4 adds: not NOBITS, size == "
         "sizeof(struct module)", "6.4's checks (size >= sizeof; without the kernel's module tree >= state, "
         "list and name); SHT_NULL outside the file refused as SHT_NULL + SHF_ALLOC"),
    Rule(".modinfo (first SHF_ALLOC, any type)", "nothing; get_modinfo reads its strings at sh_offset, the "
         "first one even when sh_size is 0", "refused when its bytes (at least the first) are past the end"),
    Rule("__versions (first SHF_ALLOC, any type)", "nothing; check_version scans sh_size / 64 entries",
         "refused when NOBITS or SHT_NULL and offset + size is past the end"),
    Rule(".data..percpu (first SHF_ALLOC, any type)", "nothing; percpu_modcopy copies sh_size bytes",
         "refused when NOBITS or SHT_NULL and offset + size is past the end"),
    Rule("executable target of a non-empty SHT_REL (any type)", "nothing; count_plts reads instructions "
         "at sh_addr + r_offset", "refused when NOBITS or SHT_NULL and offset + size is past the end; "
         "words past the end of a bounded section read as 0"),
)


def type_name(t: int) -> str:
    return TYPE_NAMES.get(t, f"type {t}")


def unread_alloc(sections, n: int, skip: set[int]):
    """The first SHF_ALLOC section move_module would copy from outside the file: an unchecked
    type (only SHT_NULL: NOBITS is not copied) with size > 0 and offset + size past n."""
    for s in sections[1:]:
        if s.alloc and s.sh_type == SHT_NULL and s.sh_size and s.sh_offset + s.sh_size > n and \
                s.index not in skip:
            return s
    return None


# --- the kernel image's own configuration --------------------------------------------------------
_VERMAGIC = re.compile(rb"(\d+\.\d+[\w.+~-]*) SMP [ -~]*?ARMv\d+ (thumb2 )?[ -~]*?\x00")


def image_thumb2(image_path: str) -> tuple[bool | None, str]:
    """(is the image a CONFIG_THUMB2_KERNEL kernel?, the evidence). Debian's boot/config-RELEASE
    next to vmlinuz-RELEASE first, then VERMAGIC_STRING in the image (MODULE_ARCH_VERMAGIC_ARMTHUMB
    adds "thumb2 " under CONFIG_THUMB2_KERNEL, arch/arm/include/asm/vermagic.h)."""
    base = os.path.basename(image_path)
    if base.startswith("vmlinuz-"):
        cfg = os.path.join(os.path.dirname(image_path), "config-" + base[len("vmlinuz-"):])
        try:
            with open(cfg, encoding="utf-8", errors="replace") as f:
                for line in f:
                    if line.startswith("CONFIG_THUMB2_KERNEL=y"):
                        return True, f"{cfg}: CONFIG_THUMB2_KERNEL=y"
                    if line.startswith("# CONFIG_THUMB2_KERNEL is not set"):
                        return False, f"{cfg}: CONFIG_THUMB2_KERNEL is not set"
        except OSError:
            pass
    from ..kernel.image import load_image
    m = _VERMAGIC.search(load_image(image_path).data)
    if m is None:
        return None, "no vermagic string found in the image"
    vm = m.group(0)[:-1].decode()
    return bool(m.group(2)), f"its vermagic '{vm}' {'has' if m.group(2) else 'has no'} 'thumb2'"


def check_thumb2_image(image_path: str) -> None:
    """--thumb2 against a kernel image that is not CONFIG_THUMB2_KERNEL: refused up front. 6.1's
    apply_relocate (arch/arm/kernel/module.c) handles R_ARM_THM_CALL, R_ARM_THM_JUMP24 and
    R_ARM_THM_MOVW/MOVT only #ifdef CONFIG_THUMB2_KERNEL; without it they fall to `default:` and
    the load fails ("unknown relocation", -ENOEXEC), and the image's code runs in ARM state."""
    thumb2, why = image_thumb2(image_path)
    if thumb2 is False:
        from ..errors import ENOEXEC, ArmloadError
        raise ArmloadError(f"--thumb2: the kernel image {image_path} is an ARM kernel, not CONFIG_THUMB2_KERNEL "
                           f"({why}); its apply_relocate knows Thumb relocations only under CONFIG_THUMB2_KERNEL and "
                           f"refuses them otherwise ('unknown relocation'), so this simulated kernel cannot be "
                           f"Thumb-2: drop --thumb2 or use a Thumb-2 kernel image", file=image_path, errno=-ENOEXEC)
