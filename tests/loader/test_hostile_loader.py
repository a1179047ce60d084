"""Hostile loader input, round two (issue 21; the run-time hostility corpus is tests/emu/test_hostile.py): one regression test per input class, both sides of each
bound, and the operation bounds of the worst classes (counted Python calls, not wall clock).

The oracle for what 6.1 reads is the kernel source (cited in armload/loader/validity.py); the
loader's own parse is not used to build the inputs: headers are patched at fixed offsets."""
import os
import re
import shutil
import struct
import sys

import numpy as np
import pytest

from testinputs import OBJS, ROOT, require_input, sample

from armload.errors import ArmloadError, ElfFormatError
from armload.inputs import fuzz
from armload.kernel.config import KernelConfig
from armload.loader import relocate, session as session_mod, validity
from armload.loader.relocate import overlap_batches
from armload.loader.session import Session
from armload.kernel import debian

FIELDS = ("sh_name", "sh_type", "sh_flags", "sh_addr", "sh_offset", "sh_size", "sh_link", "sh_info",
          "sh_addralign", "sh_entsize")
VMLINUZ = debian.VMLINUZ
HELLO = open(sample("hello-arm.ko"), "rb").read()
N = len(HELLO)                      # hello-arm.ko: section 9 .rodata.str1.4 (0xd0, 0x47), 16 .modinfo,
                                    # 19 __versions, 25 .gnu.linkonce.this_module, 4 .init.text


def sec(b: bytes, i: int, **kw) -> bytes:
    b = bytearray(b)
    shoff, = struct.unpack_from("<I", b, 32)
    for k, v in kw.items():
        struct.pack_into("<I", b, shoff + 40 * i + 4 * FIELDS.index(k), v)
    return bytes(b)


def field(b: bytes, i: int, name: str) -> int:
    shoff, = struct.unpack_from("<I", b, 32)
    return struct.unpack_from("<I", b, shoff + 40 * i + 4 * FIELDS.index(name))[0]


def load(data, **kw):
    return Session().load("x.ko", data, **kw)


# --- SHT_NULL + SHF_ALLOC: move_module copies it ---------------------------------------------------
@pytest.mark.parametrize("idx,name", [(9, ".rodata.str1.4"), (4, ".init.text"), (25, ".gnu.linkonce.this_module")])
@pytest.mark.parametrize("obj", [False, True])
def test_sht_null_alloc_outside_the_file_is_refused(idx, name, obj):
    size = field(HELLO, idx, "sh_size")
    with pytest.raises(ElfFormatError, match=rf"section {idx} \({re.escape(name)}\) is SHT_NULL with SHF_ALLOC, "
                                             rf"offset 0x{N - size + 1:x} \+ size 0x{size:x} past the end of the file "
                                             rf".*move_module copies it from outside .*elf_validity_cache_sechdrs"):
        load(sec(HELLO, idx, sh_type=0, sh_offset=N - size + 1), object=obj)


def test_sht_null_alloc_inside_the_file_is_copied_as_6_1_does():
    """The other side: offset + size == file size loads, and the bytes copied are the file's."""
    size = field(HELLO, 9, "sh_size")
    m = load(sec(HELLO, 9, sh_type=0, sh_offset=N - size))
    s = next(x for x in m.sections if x.name == ".rodata.str1.4")
    assert s.data == HELLO[N - size:]
    m0 = load(sec(HELLO, 9, sh_type=0, sh_offset=N + 0x1000, sh_size=0))     # memcpy of 0 bytes
    assert next(x for x in m0.sections if x.name == ".rodata.str1.4").size == 0


def test_plain_object_sht_null_text_outside_is_refused():
    o = open(os.path.join(OBJS, "relocs-arm-gcc12.o"), "rb").read()
    shoff, = struct.unpack_from("<I", o, 32)
    text = next(i for i in range(1, struct.unpack_from("<H", o, 48)[0])
                if field(o, i, "sh_flags") & 0x6 == 0x6 and field(o, i, "sh_size"))
    with pytest.raises(ElfFormatError, match="is SHT_NULL with SHF_ALLOC"):
        load(sec(o, text, sh_type=0, sh_offset=len(o) + 0x10), object=True)
    load(o, object=True)


# --- the sections 6.1 reads whatever their type ----------------------------------------------------
def test_versions_sht_null_outside_is_refused_inside_is_read():
    with pytest.raises(ElfFormatError, match=r"section 19 \(__versions\) is SHT_NULL with offset 0x10e8 \+ size "
                                             r"0x100 past the end of the file \(0x10f8\)"):
        load(sec(HELLO, 19, sh_type=0, sh_offset=N - 0x10))
    m = load(sec(HELLO, 19, sh_type=0))          # inside: check_version reads the same CRCs
    assert m.resolved


def test_modinfo_sht_null_outside_is_refused():
    with pytest.raises(ElfFormatError, match=r"section 16 \(\.modinfo\) is SHT_NULL with offset 0x1108 \+ size "
                                             r"0x96 past the end of the file: 6.1 reads it at sh_offset unchecked"):
        load(sec(HELLO, 16, sh_type=0, sh_offset=N + 0x10))
    with pytest.raises(ElfFormatError, match=r"\.modinfo\) is SHT_NULL with offset 0x10f8 \+ size 0x0 .*"):
        load(sec(HELLO, 16, sh_type=0, sh_offset=N, sh_size=0))           # the first string is still read
    m = load(sec(HELLO, 16, sh_type=0))
    assert m.modinfo.get("license") == ["GPL"]


def test_percpu_sht_null_outside_is_refused():
    b = bytearray(HELLO)
    at = field(HELLO, 34, "sh_offset") + field(HELLO, 9, "sh_name")
    b[at:at + 14] = b".data..percpu\0"
    with pytest.raises(ElfFormatError, match=r"section 9 \(\.data\.\.percpu\) is SHT_NULL with offset"):
        load(sec(bytes(b), 9, sh_type=0, sh_flags=3, sh_offset=N - 4))


def test_exec_rel_target_sht_null_outside_is_refused():
    with pytest.raises(ElfFormatError, match=r"relocates SHT_NULL executable section 4 \(\.init\.text"):
        load(sec(sec(HELLO, 4, sh_type=0, sh_offset=N - 4), 4, sh_flags=0x4))


# --- .ARM.exidx of the wrong type: not unwound -------------------------------------------------------
class _CountingMachine:
    def __init__(self, mod):
        self.mod, self.read_bytes = mod, 0

    def read(self, addr, size):
        self.read_bytes += size
        r = self.mod.region_of(addr)
        return bytes(r.data[addr - r.base:addr - r.base + size])


def test_nobits_exidx_is_not_walked():
    from armload.emu import unwind
    d = open(sample("nullderef-arm.ko"), "rb").read()
    assert field(d, 9, "sh_type") == 0x70000001 and field(d, 13, "sh_type") == 0x70000001
    big = sec(d, 9, sh_type=8, sh_size=0xE0000)
    m = load(big)
    assert [s.index for s in unwind.unwind_sections(m)] == [13]         # type, not name, decides
    mc = _CountingMachine(m)
    t = unwind.module_table(mc, m)
    assert mc.read_bytes == 8 and len(t.starts) == 1
    m_ok = load(d)                                                       # the other side: both walked
    assert sorted(s.index for s in unwind.unwind_sections(m_ok)) == [9, 13]


def test_nobits_exidx_unwind_table_is_bounded_in_operations():
    """A 16 MiB NOBITS .ARM.exidx.exit.text in core memory: the unwind table the sanitizers' backtraces use
    (emu/unwind.module_table, over armload's image of the module) ignores it as 6.1's
    module_finalize does, and costs a bounded number of Python calls, not one per zero entry (the
    model's name-based walk read its 2M entries one by one: 8.5M calls, 5.6 GB for a 19 KB input)."""
    from armload.emu import unwind
    d = sec(open(sample("nullderef-arm.ko"), "rb").read(), 9, sh_type=8, sh_size=0x1000000)

    class Mem:
        def __init__(self, m):
            self.m = m

        def read(self, addr, n):
            return self.m.read(addr, n)

    def go():
        s = Session(placement="vmalloc")
        m = s.load("x.ko", d)
        table = unwind.module_table(Mem(m), m)
        return m, table
    ops, (m, table) = _count(go)
    big = [x for x in m.sections if x.size == 0x1000000]
    assert [x.name for x in big] == [".ARM.exidx.exit.text"] and big[0] not in unwind.unwind_sections(m)
    assert table is not None and table.starts                 # the other index sections are read
    assert ops < fuzz.OPS_BASE + fuzz.OPS_PER_BYTE * len(d), ops


def test_nobits_exidx_oops_in_the_booted_kernel(booted_dir):
    """init faults (NULL dereference) with a 16 MiB NOBITS .ARM.exidx: the booted kernel's own
    load_module takes it (the kernel unwinds by section type too) and prints its oops; armload's
    image is the kernel's, and the run is bounded in instructions (the model runtime's name-based
    walk read 2M zero entries one by one: 8.5M Python calls, 5.6 GB for a 19 KB input)."""
    from armload.emu.booted.modrun import BootedRun
    from armload.kernel.provider import Kernel
    d = sec(open(sample("nullderef-arm.ko"), "rb").read(), 9, sh_type=8, sh_size=0x1000000)
    k = Kernel.from_files([os.path.join(ROOT, "sample_modules", "Module.symvers"), VMLINUZ], KernelConfig())
    import tempfile
    with tempfile.TemporaryDirectory() as t:
        p = os.path.join(t, "nullderef.ko")
        open(p, "wb").write(d)
        r = BootedRun(VMLINUZ, k, k.config).load(p, budget=50_000_000)
    assert r.status == "oops" and "Unable to handle kernel NULL pointer dereference" in r.oops, r.status
    assert r.loader.agrees and r.loader.identical
    assert r.instructions < 50_000_000


def _count(fn):
    c = fuzz._OpCounter()
    sys.setprofile(c)
    try:
        out = fn()
    finally:
        sys.setprofile(None)
    return c.n, out


# --- overlapping relocations: only the overlapping entries leave the vector path ---------------------
def _rows(*pairs):
    off = np.array([p[0] for p in pairs], dtype=np.uint32)
    info = np.array([p[1] for p in pairs], dtype=np.uint32)
    return off, info


def test_overlap_batches():
    ABS, NONE = 2, 0
    assert overlap_batches(*_rows()) == []
    assert overlap_batches(*_rows((0, ABS), (4, ABS), (8, ABS))) == [(0, 3)]
    assert overlap_batches(*_rows((0, ABS), (4, ABS), (8, ABS), (4, ABS), (12, ABS))) == [(0, 3), (3, 5)]
    assert overlap_batches(*_rows((8, ABS), (0, ABS), (5, ABS))) == [(0, 2), (2, 3)]      # 5..8 overlaps 8
    assert overlap_batches(*_rows((4, NONE), (4, ABS), (4, NONE))) == [(0, 3)]            # NONE writes nothing
    assert overlap_batches(*_rows(*[(0, ABS)] * 5)) == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]
    assert overlap_batches(*_rows((0, ABS), (3, ABS))) == [(0, 1), (1, 2)]
    assert overlap_batches(*_rows((0, ABS), (4, ABS))) == [(0, 2)]                          # adjacent: no cut


def _overlapping_pair(d: bytes) -> bytes:
    """The second entry of the biggest REL table of `d` made to overlap the first."""
    shoff, = struct.unpack_from("<I", d, 32)
    shnum, = struct.unpack_from("<H", d, 48)
    rels = [i for i in range(1, shnum) if field(d, i, "sh_type") == 9]
    big = max(rels, key=lambda i: field(d, i, "sh_size"))
    off = field(d, big, "sh_offset")
    b = bytearray(d)
    r0, = struct.unpack_from("<I", b, off)
    struct.pack_into("<I", b, off + 8, r0)
    return bytes(b), big


def test_one_overlapping_pair_keeps_the_fast_path(monkeypatch):
    d = open(sample("devkit-arm.ko"), "rb").read()
    data, big = _overlapping_pair(d)
    calls = []
    real = session_mod.apply_rel_section

    def counting(*a, **kw):
        calls.append(len(a[3]))
        return real(*a, **kw)
    monkeypatch.setattr(session_mod, "apply_rel_section", counting)
    m = load(data)
    n_tables = len(calls)
    # per-entry would be one call per entry of the big table; the pair costs one extra call
    entries = field(d, big, "sh_size") // 8
    assert entries > 20 and sum(calls) >= entries
    calls.clear()
    load(d)
    assert n_tables <= len(calls) + 2
    # the result is the entry-by-entry result
    monkeypatch.setattr(session_mod, "overlap_batches", lambda off, info: [(i, i + 1) for i in range(len(off))])
    calls.clear()
    m1 = load(data)
    assert len(calls) >= entries
    assert [r.data for r in m.regions] == [r.data for r in m1.regions]


# --- --thumb2 against the ARM-only Debian image --------------------------------------------------------
def test_thumb2_with_the_arm_image_is_refused_up_front():
    require_input(VMLINUZ, "make test-inputs")
    from armload.kernel.provider import Kernel
    cfg = KernelConfig(thumb2=True)
    k = Kernel.from_files([VMLINUZ], cfg)
    with pytest.raises(ArmloadError, match=r"--thumb2: the kernel image .* is an ARM kernel, not "
                                           r"CONFIG_THUMB2_KERNEL \(.*config-6.1.0-50-armmp: CONFIG_THUMB2_KERNEL "
                                           r"is not set\).*unknown relocation"):
        Session(k, cfg)
    Session(Kernel.from_files([VMLINUZ], KernelConfig()), KernelConfig())      # ARM: fine
    Session(Kernel.builtin(cfg), cfg)                                           # no image: nothing to contradict


def test_image_vermagic_says_arm_only_without_a_config_file(tmp_path):
    require_input(VMLINUZ, "make test-inputs")
    p = tmp_path / "zImage"
    os.symlink(VMLINUZ, p)
    thumb2, why = validity.image_thumb2(str(p))
    assert thumb2 is False and why == ("its vermagic '6.1.0-50-armmp SMP mod_unload modversions ARMv7 p2v8 ' "
                                       "has no 'thumb2'")
    assert validity._VERMAGIC.search(b"x\x006.1.0-50-armmp SMP mod_unload modversions ARMv7 thumb2 p2v8 \x00").group(2)
    (tmp_path / "config-9.9").write_text("CONFIG_THUMB2_KERNEL=y\n")
    os.symlink(VMLINUZ, tmp_path / "vmlinuz-9.9")
    assert validity.image_thumb2(str(tmp_path / "vmlinuz-9.9"))[0] is True


# --- the table and its documentation ----------------------------------------------------------------
def test_every_rule_is_documented():
    readme = open(os.path.join(ROOT, "README.md")).read()
    part = readme[readme.index("### What the validation pass checks"):]
    for r in validity.SECTION_RULES:
        assert f"| {r.sections} |" in part, r.sections
    assert validity.UNCHECKED_TYPES == (0, 8)
