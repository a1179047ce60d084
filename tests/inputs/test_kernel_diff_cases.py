"""The open kernel differentials of make fuzz-kernel, closed (issue 33), each as its one- or two-field
change of a sample (the minimised reproducer: test_reproducer_is_the_campaigns_case checks it is what
`make fuzz-kernel KDIFF_SEED=S` made as case N) with both sides: armload now decides as the booted
Debian kernel's own load_module does, and the sample as built still loads.

seed 1:
- case 317: struct module's section .gnu.linkonce.this_module with sh_flags 0x6 (SHF_ALLOC |
  SHF_EXECINSTR): 6.1's layout_sections puts it in core text, complete_formation makes that
  read-only and load_module then writes mod->state: the kernel oopses ("Unable to handle kernel
  paging request"). armload accepted it; it now refuses, saying so.
- case 161: .modinfo sh_size 154 -> 7: get_modinfo's walk sees only the first string, so the
  module has no license, is not GPL-compatible, and its GPL-only imports are "Unknown symbol ...
  (err -2)" in the kernel. armload's lookup fell back to the GPL-only export; it now refuses.
seeds 2-4 (the kernel oopses in load_module, armload accepted):
- seed 2 case 122: .init.data sh_addralign 0xffffffff: module_get_offset's ALIGN of the init pass's
  running size (0x2000) wraps in an unsigned int to 0, over the init text (oops in strnchrnul).
- seed 2 case 218: .strtab SHT_NULL with sh_size 0x100000: elf_validity_check skips SHT_NULL,
  layout_symtab makes the string table SHF_ALLOC and move_module copies 1 MiB from past the end of
  its copy of the file (oops in mmiocpy).
- seed 3 case 132, seed 4 case 183: a 4-byte data section (.init.data, .exit.data) renamed
  .gnu.linkonce.this_module, ahead of the real one: find_sec takes it as struct module; seed 4
  case 249: this_module's sh_size 0. move_module copies sh_size bytes of struct module, the rest is
  never set up and add_kallsyms writes through its init_layout.base (oops in add_kallsyms). armload
  accepted these because the differential ran without the kernel's module tree (sizeof(struct
  module) unknown): it now runs with what `armload run --kernel` follows (booted_diff.config_of),
  and without the tree refuses a section smaller than struct module's state, list and name.
seed 2, kernel-only:
- case 64: __kcrctab renamed .strtab: with MODVERSIONS the exports have no CRCs, and Debian's
  CONFIG_MODULE_FORCE_LOAD=y makes try_to_force_load taint and load ("exporter: no versions for
  exported symbols: kernel tainted."). armload refused; it now warns with the kernel's words."""
from __future__ import annotations

import os
import struct

import pytest

from testinputs import BOOT_VMLINUZ, ROOT, SYMVERS, require_input, sample

from armload.errors import ArmloadError
from armload.kernel.config import DEBIAN_ARMMP
from armload.kernel.provider import Kernel
from armload.loader.session import Session

FIELDS = {"sh_name": 0, "sh_type": 1, "sh_flags": 2, "sh_size": 5, "sh_addralign": 8}


def patched(name: str, sec_name: str, fields: dict[str, int]) -> bytes:
    """`name` with the section header words of section `sec_name` set as `fields` says."""
    b = bytearray(open(sample(name), "rb").read())
    shoff, = struct.unpack_from("<I", b, 32)
    shnum, shstrndx = struct.unpack_from("<H", b, 48)[0], struct.unpack_from("<H", b, 50)[0]
    stroff = struct.unpack_from("<I", b, shoff + 40 * shstrndx + 16)[0]
    for i in range(shnum):
        nm = struct.unpack_from("<I", b, shoff + 40 * i)[0]
        if bytes(b[stroff + nm:b.index(0, stroff + nm)]).decode() == sec_name:
            for f, v in fields.items():
                struct.pack_into("<I", b, shoff + 40 * i + 4 * FIELDS[f], v)
            return bytes(b)
    raise KeyError(sec_name)


TM = r"\.gnu\.linkonce\.this_module section size must match the kernel's built struct module size at run time "
CASES = {   # (seed, case) -> (sample, section, the case's fields, the sample's own, the booted row, armload's refusal)
    (1, 317): ("initcore-arm.ko", ".gnu.linkonce.this_module", {"sh_flags": 0x6}, {"sh_flags": 0x3}, "kernel-crashed",
               r"module initcore: \.gnu\.linkonce\.this_module \(section 29\) has flags 0x6: 6\.1's layout puts struct "
               r"module in the core text, .*Unable to handle kernel paging request"),
    (1, 161): ("regdev-arm.ko", ".modinfo", {"sh_size": 7}, {"sh_size": 154}, "both-refuse",
               r"regdev: Unknown symbol \S+ \(err -2\) \[exported GPL-only; this module's license is not GPL-compatible\]"),
    (2, 122): ("kalloc-arm.ko", ".init.data", {"sh_addralign": 0xFFFFFFFF}, {"sh_addralign": 4}, "kernel-crashed",
               r"kalloc: section 23 \(\.init\.data\) has sh_addralign 0xffffffff: 6\.1's module_get_offset computes "
               r"ALIGN\(0x2000, 0xffffffff\) in an unsigned int, which wraps to 0x0: the section would be placed over "
               r"the init sections laid out before it"),
    (2, 218): ("deferred-arm.ko", ".strtab", {"sh_type": 0, "sh_size": 0x100000}, {"sh_type": 3, "sh_size": 0x347},
               "kernel-crashed", r"deferred: section 39 \(\.strtab, the symbol table's string table\) is SHT_NULL with "
               r"offset 0x1354 \+ size 0x100000 past the end of the file \(0x2214\): 6\.1's layout_symtab makes it "
               r"SHF_ALLOC and move_module copies it from outside its copy of the file"),
    (3, 132): ("kalloc-arm.ko", ".init.data", {"sh_name": 0x10A}, {"sh_name": 0xFB}, "kernel-crashed",
               r"module kalloc: " + TM + r"\(section 23: 0x4 < 0x48, struct module's state, list and name alone; "
               r".*add_kallsyms\)"),
    (4, 183): ("spin-arm.ko", ".exit.data", {"sh_name": 0xFB}, {"sh_name": 0xDD}, "kernel-crashed",
               r"module spin: " + TM + r"\(section 20: 0x4 < 0x48, struct module's state, list and name alone; "),
    (4, 249): ("enodev-arm.ko", ".gnu.linkonce.this_module", {"sh_size": 0}, {"sh_size": 0x240}, "kernel-crashed",
               r"module enodev: " + TM + r"\(section 24: 0x0 < 0x48, "),
    (2, 64): ("exporter-arm.ko", "__kcrctab", {"sh_name": 0x9}, {"sh_name": 0x82}, "both-accept", None),
}


def _kernel():
    require_input(BOOT_VMLINUZ, "make test-inputs")
    return Kernel.from_files([SYMVERS, BOOT_VMLINUZ], DEBIAN_ARMMP)


@pytest.mark.parametrize("case", list(CASES))
def test_armload_refuses_as_the_kernel(case):
    name, sec, bad, good, _, msg = CASES[case]
    k = _kernel()
    if msg is None:
        mod = Session(k, k.config).load(name, patched(name, sec, bad))
        assert "exporter: no versions for exported symbols: kernel tainted." in mod.warnings
    else:
        with pytest.raises(ArmloadError, match=msg):
            Session(k, k.config).load(name, patched(name, sec, bad))
    Session(k, k.config).load(name, patched(name, sec, good))          # the sample as built


def test_reproducer_is_the_campaigns_case():
    """Each patch is byte for byte what make fuzz-kernel's mutation made (armload/agree/loader.py's
    seeds and fuzz.make_case), so the differential's rows name these inputs."""
    from armload.inputs.fuzz import default_seeds, make_case
    seeds = [s for s in default_seeds() if not s.object and not s.config.thumb2]
    for (seed, i), (name, sec, bad, _, _, _) in CASES.items():
        if seed == 1:
            continue                   # closed last round from the campaign's own description
        case, sd = make_case(seeds, i, seed)
        assert os.path.basename(sd.path) == name
        assert case.data == patched(name, sec, bad), (seed, i, case.what)


def test_this_module_size_with_the_kernels_struct_module():
    """With the kernel's module tree (what run --kernel follows) the bound is sizeof(struct module)."""
    from armload.inputs.booted_diff import config_of
    require_input(BOOT_VMLINUZ, "make test-inputs")
    config = config_of(BOOT_VMLINUZ)
    assert config.struct_module is not None and config.struct_module.size == 0x240
    k = Kernel.from_files([SYMVERS, BOOT_VMLINUZ], config)
    for sz in (0, 0x48, 0x23F):
        with pytest.raises(ArmloadError, match=TM + rf"\(section 24: {sz:#x} < 0x240; "):
            Session(k, config).load("enodev-arm.ko", patched("enodev-arm.ko", ".gnu.linkonce.this_module",
                                                              {"sh_size": sz}))
    Session(k, config).load("enodev-arm.ko", patched("enodev-arm.ko", ".gnu.linkonce.this_module", {"sh_size": 0x240}))


@pytest.mark.parametrize("align,refused", [(0xFFFFFFFF, True), (0xFFFFE001, True), (0xFFFFE000, False),
                                           (0x1000, False), (3, False), (0, False)])
def test_init_data_alignment_at_the_wrap(align, refused):
    """ALIGN(0x2000, a) wraps for a - 1 > 0xffffdfff: 0xffffe001 wraps to 0, 0xffffe000 gives 0x2000
    (its mask 0xffffdfff leaves bit 13); a power of 2, 3 (mask arithmetic) and 0 (?: 1) load."""
    k = _kernel()
    d = patched("kalloc-arm.ko", ".init.data", {"sh_addralign": align})
    if refused:
        with pytest.raises(ArmloadError, match=r"in an unsigned int, which wraps to 0x0"):
            Session(k, k.config).load("kalloc-arm.ko", d)
    else:
        Session(k, k.config).load("kalloc-arm.ko", d)


@pytest.mark.parametrize("flags,refused", [(0x2, True), (0x7, True), (0x3, False), (0x200003, False)])
def test_this_module_flags_both_sides(flags, refused):
    """read-only data (A), text (WAX) refused; data (WA) and ro_after_init data (W) load."""
    k = _kernel()
    d = patched("initcore-arm.ko", ".gnu.linkonce.this_module", {"sh_flags": flags})
    if refused:
        with pytest.raises(ArmloadError, match=r"6\.1's layout puts struct module in the core"):
            Session(k, k.config).load("initcore-arm.ko", d)
    else:
        Session(k, k.config).load("initcore-arm.ko", d)


@pytest.mark.parametrize("case", list(CASES))
def test_the_booted_kernel_agrees(case, booted_dir):
    """The oracle: the kernel's own load_module on the same bytes, next to armload's loader."""
    from armload.inputs import booted_diff
    name, sec, bad, good, row, _ = CASES[case]
    got, detail = booted_diff.check(patched(name, sec, bad))
    assert got == row, detail
    assert booted_diff.check(patched(name, sec, good))[0] == "both-accept"


@pytest.mark.parametrize("align,row", [(0xFFFFE001, "kernel-crashed"), (0xFFFFE000, "both-accept")])
def test_the_booted_kernel_at_the_wrap(align, row, booted_dir):
    from armload.inputs import booted_diff
    got, detail = booted_diff.check(patched("kalloc-arm.ko", ".init.data", {"sh_addralign": align}))
    assert got == row, detail


# findings of this round's booted campaign (atheris with booted_diff, make fuzz-kernel seed 2): each an
# armload exception in the booted path, committed unminimised in tests/fuzz_crashes/
FOUND = {"booted-decode-unreadable-elf": ("both-accept", "loaded; init: oops"),       # decode: pyelftools' ELFError
         "booted-kallsyms-null-symbol-shndx": ("overread", "symbol 0 has section index 0x100 >= e_shnum 47"),
         # issue 33's fresh campaign (Atheris, booted_diff): deferred-arm.ko's symbol 80 (UNDEF, GLOBAL) with
         # st_name one byte back, on the NUL before its name: 6.1's simplify_symbols looks "" up and refuses
         # "deferred: Unknown symbol  (err -2)"; armload skipped empty names and accepted (armload-only)
         "booted-undefined-symbol-empty-name": ("both-refuse", "same errno"),
         # the same run, resumed: leds-gpio.ko (a Debian seed) with its __versions entry for gpiod_set_value
         # mangled; the kernel refuses "no symbol version for gpiod_set_value" (-22). armload knew the export's
         # address from the vmlinuz but not its CRC (the samples' Module.symvers lacks it), so it skipped
         # check_version: the differential now gives it the kernel's own Module.symvers too (symvers_of)
         "booted-versions-entry-mangled-debian-seed": ("both-refuse", "same errno")}


CRASHES = os.path.join(ROOT, "tests", "fuzz_crashes")


@pytest.mark.parametrize("name", list(FOUND))
def test_booted_findings_replay(name, booted_dir):
    from armload.inputs import booted_diff, target
    data = target.split(open(os.path.join(CRASHES, name), "rb").read())[1]
    row, detail = booted_diff.differential(data)
    assert row == FOUND[name][0], (row, detail)
    assert FOUND[name][1] in detail


def test_an_undefined_symbol_with_an_empty_name_is_unknown():
    from armload.inputs import target
    data = target.split(open(os.path.join(CRASHES, "booted-undefined-symbol-empty-name"), "rb").read())[1]
    k = _kernel()
    with pytest.raises(ArmloadError, match=r"^deferred: Unknown symbol  \(err -2\)$"):
        Session(k, k.config).load("deferred-arm.ko", data)
