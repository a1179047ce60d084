"""The two open kernel differentials of make fuzz-kernel (seed 1), closed (issue 33), each as its
one-field change of a sample (the minimised reproducer) with both sides: armload now decides as
the booted Debian kernel's own load_module does, and the unchanged field still loads.

- case 317: struct module's section .gnu.linkonce.this_module with sh_flags 0x6 (SHF_ALLOC |
  SHF_EXECINSTR): 6.1's layout_sections puts it in core text, complete_formation makes that
  read-only and load_module then writes mod->state: the kernel oopses ("Unable to handle kernel
  paging request"). armload accepted it; it now refuses, saying so.
- case 161: .modinfo sh_size 154 -> 7: get_modinfo's walk sees only the first string, so the
  module has no license, is not GPL-compatible, and its GPL-only imports are "Unknown symbol ...
  (err -2)" in the kernel. armload's lookup fell back to the GPL-only export; it now refuses."""
from __future__ import annotations

import os
import struct

import pytest

from conftest import BOOT_VMLINUZ, SYMVERS, require_input, sample

from armload.errors import ArmloadError
from armload.kernel.config import DEBIAN_ARMMP
from armload.kernel.provider import Kernel
from armload.loader.session import Session

def patched(name: str, sec_name: str, field: int, value: int) -> bytes:
    """`name` with one section header word (index `field`: 2 sh_flags, 5 sh_size) set to `value`."""
    b = bytearray(open(sample(name), "rb").read())
    shoff, = struct.unpack_from("<I", b, 32)
    shnum, shstrndx = struct.unpack_from("<H", b, 48)[0], struct.unpack_from("<H", b, 50)[0]
    stroff = struct.unpack_from("<I", b, shoff + 40 * shstrndx + 16)[0]
    for i in range(shnum):
        nm = struct.unpack_from("<I", b, shoff + 40 * i)[0]
        if bytes(b[stroff + nm:b.index(0, stroff + nm)]).decode() == sec_name:
            struct.pack_into("<I", b, shoff + 40 * i + 4 * field, value)
            return bytes(b)
    raise KeyError(sec_name)


CASES = {   # case -> (sample, section, field, the case's value, the sample's own value, armload's refusal)
    317: ("initcore-arm.ko", ".gnu.linkonce.this_module", 2, 0x6, 0x3,
          r"module initcore: \.gnu\.linkonce\.this_module \(section 29\) has flags 0x6: 6\.1's layout puts struct "
          r"module in the core text, .*Unable to handle kernel paging request"),
    161: ("regdev-arm.ko", ".modinfo", 5, 7, 154,
          r"regdev: Unknown symbol \S+ \(err -2\) \[exported GPL-only; this module's license is not GPL-compatible\]"),
}


def _kernel():
    require_input(BOOT_VMLINUZ, "make test-inputs")
    return Kernel.from_files([SYMVERS, BOOT_VMLINUZ], DEBIAN_ARMMP)


@pytest.mark.parametrize("case", list(CASES))
def test_armload_refuses_as_the_kernel(case):
    name, sec, field, bad, good, msg = CASES[case]
    k = _kernel()
    with pytest.raises(ArmloadError, match=msg):
        Session(k, k.config).load(name, patched(name, sec, field, bad))
    Session(k, k.config).load(name, patched(name, sec, field, good))          # the sample as built


@pytest.mark.parametrize("flags,refused", [(0x2, True), (0x7, True), (0x3, False), (0x200003, False)])
def test_this_module_flags_both_sides(flags, refused):
    """read-only data (A), text (WAX) refused; data (WA) and ro_after_init data (W) load."""
    k = _kernel()
    d = patched("initcore-arm.ko", ".gnu.linkonce.this_module", 2, flags)
    if refused:
        with pytest.raises(ArmloadError, match=r"6\.1's layout puts struct module in the core"):
            Session(k, k.config).load("initcore-arm.ko", d)
    else:
        Session(k, k.config).load("initcore-arm.ko", d)


@pytest.mark.parametrize("case", list(CASES))
def test_the_booted_kernel_agrees(case, booted_dir):
    """The oracle: the kernel's own load_module on the same bytes, next to armload's loader."""
    from armload.inputs import booted_diff
    name, sec, field, bad, good, _ = CASES[case]
    row, detail = booted_diff.check(patched(name, sec, field, bad))
    assert row == {317: "kernel-crashed", 161: "both-refuse"}[case], detail
    assert booted_diff.check(patched(name, sec, field, good))[0] == "both-accept"


# findings of this round's booted campaign (atheris with booted_diff, make fuzz-kernel seed 2): each an
# armload exception in the booted path, committed unminimised in tests/fuzz_crashes/
FOUND = {"booted-decode-unreadable-elf": ("both-accept", "loaded; init: oops"),       # decode: pyelftools' ELFError
         "booted-kallsyms-null-symbol-shndx": ("overread", "symbol 0 has section index 0x100 >= e_shnum 47")}


@pytest.mark.parametrize("name", list(FOUND))
def test_booted_findings_replay(name, booted_dir):
    from armload.inputs import booted_diff, target
    data = target.split(open(os.path.join(os.path.dirname(__file__), "fuzz_crashes", name), "rb").read())[1]
    row, detail = booted_diff.differential(data)
    assert row == FOUND[name][0], (row, detail)
    assert FOUND[name][1] in detail
