"""Bad input: one clear kernel-style error naming file, section, index and symbol; no traceback;
non-zero exit; the input file untouched."""
import hashlib
import os
import struct
import subprocess
import sys

import pytest

from armload.kernel.config import KernelConfig
from armload.loader.elf import read_object
from armload.errors import ArmloadError, ElfFormatError, LayoutError, PltError, RelocationError, SymbolError
from armload.kernel.provider import Kernel
from armload.loader.session import Session, load_module

from testinputs import SYMVERS, sample

HELLO = sample("hello-arm.ko")


def patched(tmp_path, name="bad.ko", edit=None, data=None):
    b = bytearray(open(HELLO, "rb").read() if data is None else data)
    if edit:
        edit(b)
    p = tmp_path / name
    p.write_bytes(b)
    return str(p)


def shdr(b, idx):
    shoff = struct.unpack_from("<I", b, 32)[0]
    return shoff + 40 * idx


def section_index(name):
    return next(s.index for s in read_object(HELLO).sections if s.name == name)


def cli(*args):
    return subprocess.run([sys.executable, "-m", "armload", *args], capture_output=True, text=True)


CASES = {
    "truncated": (lambda b: b.__delitem__(slice(3000, None)), ElfFormatError, "section header overflow"),
    "not-elf": (lambda b: b.__setitem__(slice(0, 4), b"MZ\0\0"), ElfFormatError, "Invalid ELF header magic"),
    "wrong-machine": (lambda b: b.__setitem__(slice(18, 20), struct.pack("<H", 62)), ElfFormatError,
                      "Invalid architecture in ELF header: 62"),
    "not-rel": (lambda b: b.__setitem__(slice(16, 18), struct.pack("<H", 2)), ElfFormatError,
                "Invalid ELF header type: 2 != 1"),
    "entry-misaligned": (lambda b: struct.pack_into("<I", b, 24, 2), ElfFormatError,
                         r"Invalid architecture in ELF header: 40 \(elf_check_arch: e_entry 0x2"),
    "apcs26": (lambda b: struct.pack_into("<I", b, 36, 0x08), ElfFormatError,
               r"Invalid architecture in ELF header: 40 \(elf_check_arch: e_flags 0x8"),
}


@pytest.mark.parametrize("case", CASES)
def test_malformed_headers(case, tmp_path):
    edit, exc, msg = CASES[case]
    p = patched(tmp_path, edit=edit)
    with pytest.raises(exc, match=msg):
        load_module(p)
    r = cli("load", p)
    assert r.returncode == 1 and "Traceback" not in r.stderr and msg.split(":")[0] in r.stderr


def test_symbol_with_bad_section_index(tmp_path):
    obj = read_object(HELLO)
    st = obj.sections[obj.symtab_index]
    sym = next(i for i in range(1, obj.symcount) if obj.symtab["st_shndx"][i] not in (0,) and obj.symtab["st_shndx"][i] < 0xff00)
    p = patched(tmp_path, edit=lambda b: struct.pack_into("<H", b, st.sh_offset + 16 * sym + 14, 999))
    with pytest.raises(ElfFormatError, match=f"symbol {sym} has section index 0x3e7 >= e_shnum"):
        load_module(p)


def _first_rel(name):
    obj = read_object(HELLO)
    rs = next(s for s in obj.sections if s.name == name)
    return obj, rs


def test_relocation_symbol_index_out_of_range(tmp_path):
    obj, rs = _first_rel(".rel.init.text")
    n = obj.symcount

    def edit(b):
        off = rs.sh_offset + 4
        info = struct.unpack_from("<I", b, off)[0]
        struct.pack_into("<I", b, off, ((n + 5) << 8) | (info & 0xFF))
    p = patched(tmp_path, edit=edit)
    with pytest.raises(RelocationError, match=rf"hello: section {rs.index} reloc \d+( \(row \d+ [^)]*\))?: bad relocation sym offset"):
        load_module(p, kernel=Kernel.from_files([SYMVERS], KernelConfig()))


def test_relocation_past_end_of_section(tmp_path):
    obj, rs = _first_rel(".rel.init.text")
    p = patched(tmp_path, edit=lambda b: struct.pack_into("<I", b, rs.sh_offset, 0x4000))
    with pytest.raises(RelocationError, match=r"out of bounds relocation, offset 16384 size \d+"):
        load_module(p, kernel=Kernel.from_files([SYMVERS], KernelConfig()))


def test_rela_section_is_rejected(tmp_path):
    obj, rs = _first_rel(".rel.init.text")
    p = patched(tmp_path, edit=lambda b: struct.pack_into("<I", b, shdr(b, rs.index) + 4, 4))
    with pytest.raises(RelocationError, match="module hello: REL relocation unsupported"):
        load_module(p, kernel=Kernel.from_files([SYMVERS], KernelConfig()))


def test_unknown_relocation_type(tmp_path):
    obj, rs = _first_rel(".rel.init.text")

    def edit(b):
        info = struct.unpack_from("<I", b, rs.sh_offset + 4)[0]
        struct.pack_into("<I", b, rs.sh_offset + 4, (info & ~0xFF) | 27)      # R_ARM_PLT32
    p = patched(tmp_path, edit=edit)
    with pytest.raises(RelocationError, match=r"hello: unknown relocation: 27 .*R_ARM_PLT32 sym '\S+'"):
        load_module(p, kernel=Kernel.from_files([SYMVERS], KernelConfig()))


def test_missing_plt_section(tmp_path):
    idx = section_index(".init.plt")

    def edit(b):
        name_off = struct.unpack_from("<I", b, shdr(b, idx))[0]
        shstr = struct.unpack_from("<H", b, 50)[0]
        base = struct.unpack_from("<I", b, shdr(b, shstr) + 16)[0]
        b[base + name_off:base + name_off + 9] = b".init.plx"
    p = patched(tmp_path, edit=edit)
    with pytest.raises(PltError, match=r"hello: module PLT section\(s\) missing"):
        load_module(p)


def test_unknown_symbol_and_crc_mismatch(tmp_path):
    cfg = KernelConfig()
    empty = tmp_path / "Module.symvers"
    empty.write_text("0x12345678\tsome_other\tvmlinux\tEXPORT_SYMBOL\t\n")
    with pytest.raises(SymbolError, match=r"hello: Unknown symbol _printk \(err -2\)"):
        load_module(HELLO, kernel=Kernel.from_files([str(empty)], cfg))
    bad = tmp_path / "bad.symvers"
    bad.write_text(open(SYMVERS).read().replace("\t_printk\t", "\t_printk\t").replace(
        next(l.split("\t")[0] for l in open(SYMVERS) if "\t_printk\t" in l), "0xdeadbeef"))
    with pytest.raises(SymbolError, match="disagrees about version of symbol _printk") as e:
        load_module(HELLO, kernel=Kernel.from_files([str(bad)], cfg))
    assert e.value.errno == -22
    r = cli("load", HELLO, "--kernel", str(bad), "--json")
    assert r.returncode == 1 and '"errno": -22' in r.stdout


def test_importer_needs_exporter_first():
    cfg = KernelConfig()
    s = Session(Kernel.from_files([SYMVERS], cfg), cfg)
    with pytest.raises(SymbolError, match=r"Unknown symbol armload_sample_\w+ \(err -2\) \[exported by module exporter"):
        s.load(sample("importer-arm.ko"))
    s.load(sample("exporter-arm.ko"))
    mod = s.load(sample("importer-arm.ko"))
    assert mod.resolved["armload_sample_add"].source == "module:exporter"
    assert mod.resolved["armload_sample_add"].crc_checked


def test_thumb2_module_on_arm_kernel_names_the_fix():
    with pytest.raises(RelocationError, match="unknown relocation: 10 .*--thumb2"):
        load_module(sample("hello-thumb2.ko"), kernel=Kernel.from_files([SYMVERS], KernelConfig()))


def test_cli_input_untouched_and_exit_codes(tmp_path):
    before = hashlib.sha256(open(HELLO, "rb").read()).hexdigest()
    img = tmp_path / "out.elf"
    r = cli("load", HELLO, "--kernel", SYMVERS, "--placement", "vmalloc", "--image", str(img))
    assert r.returncode == 0, r.stderr
    assert hashlib.sha256(open(HELLO, "rb").read()).hexdigest() == before
    assert img.read_bytes()[:4] == b"\x7fELF"
    r = cli("load", str(tmp_path / "missing.ko"))
    assert r.returncode == 1 and "cannot read" in r.stderr and "Traceback" not in r.stderr
    r = cli("load", HELLO, "--placement", "nowhere")
    assert r.returncode == 1 and "bad --placement" in r.stderr


# --- hostile input (issue 14): each defect, and the neighbour the kernel accepts --------------------
HELLO_BYTES = open(HELLO, "rb").read()
SHOFF = struct.unpack_from("<I", HELLO_BYTES, 32)[0]
SHNUM = struct.unpack_from("<H", HELLO_BYTES, 48)[0]
FIELDS = ("sh_name", "sh_type", "sh_flags", "sh_addr", "sh_offset", "sh_size", "sh_link", "sh_info",
          "sh_addralign", "sh_entsize")


def set_field(b, idx, field, value):
    struct.pack_into("<I", b, SHOFF + 40 * idx + 4 * FIELDS.index(field), value)


def get_field(b, idx, field):
    return struct.unpack_from("<I", b, SHOFF + 40 * idx + 4 * FIELDS.index(field))[0]


def hostile(tmp_path, *edits, extra=b""):
    b = bytearray(HELLO_BYTES)
    for idx, field, value in edits:
        set_field(b, section_index(idx) if isinstance(idx, str) else idx, field, value)
    return patched(tmp_path, data=bytes(b) + extra)


def kernel():
    return Kernel.from_files([SYMVERS], KernelConfig())


def test_alloc_section_outside_file_is_refused_at_the_door(tmp_path):
    i = section_index(".rodata.str1.4")
    p = hostile(tmp_path, (i, "sh_offset", 0xFFFFFF00))
    with pytest.raises(ElfFormatError, match=rf"Invalid ELF section in module \(section {i} type 1\): offset 0xffffff00"):
        load_module(p)
    # an offset + size ending exactly at the end of the file is inside it
    c = section_index(".comment")
    p = hostile(tmp_path, (c, "sh_size", len(HELLO_BYTES) - get_field(HELLO_BYTES, c, "sh_offset")))
    load_module(p, kernel=kernel())
    p = hostile(tmp_path, (c, "sh_size", len(HELLO_BYTES) - get_field(HELLO_BYTES, c, "sh_offset") + 1))
    with pytest.raises(ElfFormatError, match=rf"Invalid ELF section in module \(section {c} type 1\)"):
        load_module(p)


def test_exec_section_outside_file_refused_before_plt_counting(tmp_path):
    p = hostile(tmp_path, (".init.text", "sh_size", 0x10000000))
    with pytest.raises(ElfFormatError, match=r"Invalid ELF section in module \(section 4 type 1\)"):
        load_module(p, placement="vmalloc")


def test_symtab_shorter_than_one_entry(tmp_path):
    # No symbols at all: 6.1 counts 0 symbols and refuses the first relocation ("sym offset").
    p = hostile(tmp_path, (".symtab", "sh_size", 8))
    with pytest.raises(RelocationError, match=r"bad relocation sym offset"):
        load_module(p, kernel=kernel())


def test_nobits_versions_outside_file(tmp_path):
    v = section_index("__versions")
    p = hostile(tmp_path, (v, "sh_type", 8), (v, "sh_size", 0xFFFFFFC0))
    with pytest.raises(ElfFormatError, match=rf"section {v} \(__versions\) is NOBITS with offset 0x1c4 \+ size 0xffffffc0 past"):
        load_module(p)
    # NOBITS but inside the file: 6.1 reads the file bytes at sh_offset as the table, like PROGBITS
    p = hostile(tmp_path, (v, "sh_type", 8))
    mod = load_module(p, kernel=kernel())
    assert mod.resolved["_printk"].crc_checked


def test_huge_nobits_refused_before_allocation_at_fixed_address(tmp_path):
    b = section_index(".bss")
    for placement in ("window", "vmalloc", 0xE0000000):
        p = hostile(tmp_path, (b, "sh_size", 0x40000000))
        with pytest.raises(LayoutError, match=r"cannot allocate 0x4000.... bytes of module memory"):
            load_module(p, placement=placement)
    mod = load_module(hostile(tmp_path, (b, "sh_size", 0x100000)), placement=0xE0000000)
    assert next(s for s in mod.sections if s.name == ".bss").size == 0x100000


def test_nobits_ksymtab_refused_without_iterating(tmp_path):
    # A zero-filled __ksymtab: the first entry's name pointer is NULL (6.1 oopses in verify_exported_symbols).
    b = bytearray(HELLO_BYTES)
    names = struct.unpack_from("<I", b, SHOFF + 40 * 34 + 16)[0]
    b[names + 302:names + 307] = b"__kst"              # .bss -> "__kst" is not __ksymtab: use the name below
    i = section_index(".bss")
    p = patched(tmp_path, data=bytes(b))
    # point .bss's name at "__ksymtab" spelled into .comment's string? simpler: rename via shstrtab tail
    data = bytearray(HELLO_BYTES)
    sh = section_index(".shstrtab")
    off = get_field(data, sh, "sh_offset")
    size = get_field(data, sh, "sh_size")
    data[off + 302:off + 307] = b".bss\0"             # unchanged
    # append "__ksymtab\0" after the file and grow .shstrtab? it must stay NUL terminated: move it to the end
    new = bytes(data[off:off + size]) + b"__ksymtab\0"
    data += new
    set_field(data, sh, "sh_offset", len(HELLO_BYTES))
    set_field(data, sh, "sh_size", len(new))
    set_field(data, i, "sh_name", size)
    set_field(data, i, "sh_size", 0x8000000)
    p = patched(tmp_path, data=bytes(data))
    # with MODVERSIONS and without MODULE_FORCE_LOAD the missing __kcrctab is refused first
    # (check_module_license_and_versions); with it (Debian) try_to_force_load taints and the load goes on
    with pytest.raises(ArmloadError, match=rf"no versions for exported symbols \(section {i} __ksymtab without"):
        load_module(p, kernel=kernel(), placement="vmalloc", config=KernelConfig(module_force_load=False))
    with pytest.raises(ArmloadError, match=rf"section {i} \(__ksymtab\) entry 0 .*NULL; 6.1's verify_exported"):
        load_module(p, kernel=kernel(), placement="vmalloc")
    s = Session(kernel(), KernelConfig(), "vmalloc", modversions=False)
    with pytest.raises(ArmloadError, match=rf"section {i} \(__ksymtab\) entry 0 .*NULL; 6.1's verify_exported_symbols"):
        s.load(p)
    assert s.allocator.used == []                      # nothing left allocated
    set_field(data, i, "sh_size", 0)                  # an empty table exports nothing
    mod = load_module(patched(tmp_path, data=bytes(data)), kernel=kernel())
    assert mod.exports == []


def _rename(b, old, new):
    """Overwrite a section name in .shstrtab in place (new is NUL-padded to the old length)."""
    sh = section_index(".shstrtab")
    off = get_field(b, sh, "sh_offset")
    size = get_field(b, sh, "sh_size")
    at = bytes(b[off:off + size]).index(old.encode() + b"\0")
    assert len(new) <= len(old)
    b[off + at:off + at + len(old)] = new.encode().ljust(len(old), b"\0")


def test_percpu_alignment_follows_pcpu_alloc(tmp_path):
    b = bytearray(HELLO_BYTES)
    _rename(b, ".note.gnu.build-id", ".data..percpu")
    for align, ok in ((6, False), (12, False), (0, True), (3, True), (4, True), (8, True), (8192, True)):
        set_field(b, 1, "sh_addralign", align)
        p = patched(tmp_path, data=bytes(b))
        if ok:
            mod = load_module(p, kernel=kernel())
            pc = next(r for r in mod.regions if r.name == "percpu")
            assert pc.base % min(max(align, 4), 4096) == 0      # below 4: pcpu_alloc uses 4
            assert bytes(pc.data[:0x24]) == HELLO_BYTES[0x34:0x34 + 0x24]
            assert (align > 4096) == any("per-cpu alignment 8192 > 4096" in w for w in mod.warnings)
        else:
            with pytest.raises(LayoutError, match=rf"Could not allocate 36 bytes percpu data .*sh_addralign {align}"):
                load_module(p, kernel=kernel())


def test_non_power_of_2_alignment_uses_kernel_align_arithmetic(tmp_path):
    i = section_index("__mcount_loc")
    for align in (4, 12, 24, 7, 0x30):
        mod = load_module(hostile(tmp_path, (i, "sh_addralign", align)), kernel=kernel())
        prev = next(s for s in mod.sections if s.name == ".ARM.exidx.exit.text")
        end = prev.addr + prev.size - 0xbf001000
        expect = 0xbf001000 + ((end + align - 1) & ~(align - 1))      # include/linux/align.h ALIGN()
        got = next(s for s in mod.sections if s.name == "__mcount_loc").addr
        assert got == expect, (align, hex(got), hex(expect))
    assert expect != 0xbf001000 + -(-end // 0x30) * 0x30 or True
    assert load_module(hostile(tmp_path, (i, "sh_addralign", 12)), kernel=kernel()).sections and \
        next(s.addr for s in load_module(hostile(tmp_path, (i, "sh_addralign", 12)), kernel=kernel()).sections
             if s.name == "__mcount_loc") == 0xbf0010b0      # not the next multiple of 12 (0xbf0010b4)


def test_ko_without_this_module(tmp_path):
    b = bytearray(HELLO_BYTES)
    _rename(b, ".gnu.linkonce.this_module", ".gnu.linkonce.this_modulX")
    p = patched(tmp_path, data=bytes(b))
    with pytest.raises(ElfFormatError, match=r"hello: No module found in object"):
        load_module(p)
    r = cli("load", p, "--json", "--kernel", SYMVERS)
    assert r.returncode == 1 and '"error": "ElfFormatError"' in r.stdout and "No module found" in r.stderr
    # not SHF_ALLOC: find_sec ignores it, same refusal
    p = hostile(tmp_path, (".gnu.linkonce.this_module", "sh_flags", 0))
    with pytest.raises(ElfFormatError, match=r"No module found in object"):
        load_module(p)
    # the same file as an explicit plain object loads, init found by symbol name
    mod = load_module(patched(tmp_path, data=bytes(b)), kernel=kernel(), object=True)
    assert mod.init_addr == next(s.addr for s in mod.symbols if s.name == "init_module")
    r = cli("load", patched(tmp_path, data=bytes(b)), "--object", "--kernel", SYMVERS)
    assert r.returncode == 0, r.stderr


def test_this_module_smaller_than_struct_module_names_linux_6_4(tmp_path):
    from armload.loader.this_module import of_tree
    sm = of_tree(os.path.dirname(HELLO))                  # the kernel's layout, as its modules carry it
    assert (sm.size, sm.name, sm.init, sm.exit) == (0x240, 0x0C, 0xCC, 0x230)
    cfg = KernelConfig(struct_module=sm)
    p = hostile(tmp_path, (".gnu.linkonce.this_module", "sh_size", 0x200))
    with pytest.raises(ElfFormatError, match=r"struct module size .*check added in Linux 6.4"):
        load_module(p, config=cfg)
    with pytest.raises(RelocationError, match="cleanup_module': out of bounds relocation, offset 560 size 512"):
        load_module(p)                                    # the kernel's size unknown: the relocation refuses it
    # larger than struct module: 6.1 does not mind
    load_module(hostile(tmp_path, (".gnu.linkonce.this_module", "sh_size", 0x244)), kernel=kernel(), config=cfg)


def test_two_plt_sections_the_last_wins(tmp_path):
    cfg = KernelConfig()
    base = Session(kernel(), cfg, "vmalloc").load(HELLO)
    first = next(s for s in base.sections if s.name == ".plt")
    core = [e for e in base.plt_entries if e.plt == "core"]
    assert core and all(first.addr <= e.addr < first.addr + first.size for e in core)
    # section 20 (.data, empty) renamed to ".plt" (the tail of ".init.plt" in .shstrtab)
    p = hostile(tmp_path, (20, "sh_name", get_field(HELLO_BYTES, 8, "sh_name")))
    mod = Session(kernel(), cfg, "vmalloc").load(p)
    last = next(s for s in mod.sections if s.index == 20)
    assert last.name == ".plt" and last.size == first.size
    core = [e for e in mod.plt_entries if e.plt == "core"]
    assert core and all(last.addr <= e.addr < last.addr + last.size for e in core)
    old = next(s for s in mod.sections if s.index == 8)
    assert old.size == 1                               # the first .plt stays an ordinary 1-byte section


def test_rel_sh_info_past_the_table(tmp_path):
    rel = section_index(".rel.exit.data")
    p = hostile(tmp_path, (rel, "sh_info", SHNUM))
    with pytest.raises(ElfFormatError, match=rf"section {rel} \(.rel.exit.data\): SHT_REL with sh_info {SHNUM} "
                                             r">= e_shnum .*past the end of its copy"):
        load_module(p)
    # bytes after the table: the kernel reads them as the header; non-exec flags: skipped everywhere
    fake = bytearray(40)
    p = hostile(tmp_path, (rel, "sh_info", SHNUM), extra=bytes(fake))
    mod = load_module(p, kernel=kernel())
    assert mod.reloc_counts.get("R_ARM_ABS32") == load_module(HELLO, kernel=kernel()).reloc_counts["R_ARM_ABS32"] - 1
    struct.pack_into("<I", fake, 8, 0x6)              # SHF_ALLOC|SHF_EXECINSTR: frob sorts garbage
    with pytest.raises(ElfFormatError, match=r"executable target section"):
        load_module(hostile(tmp_path, (rel, "sh_info", SHNUM), extra=bytes(fake)))


def test_init_comes_from_struct_module_not_the_symbol_name(tmp_path):
    mod = load_module(HELLO, kernel=kernel())
    init = next(s.addr for s in mod.symbols if s.name == "init_module")
    exit_ = next(s.addr for s in mod.symbols if s.name == "cleanup_module")
    assert (mod.init_addr, mod.exit_addr) == (init, exit_)
    # move the relocation of the init field (r_offset 0xcc) to 0xd0: mod->init stays NULL
    rs = section_index(".rel.gnu.linkonce.this_module")
    off = get_field(HELLO_BYTES, rs, "sh_offset")
    b = bytearray(HELLO_BYTES)
    k = next(k for k in range(2) if struct.unpack_from("<I", b, off + 8 * k)[0] == 0xCC)
    struct.pack_into("<I", b, off + 8 * k, 0xD0)
    from armload.loader.this_module import of_object, of_tree
    cfg = KernelConfig(struct_module=of_tree(os.path.dirname(HELLO)))   # the kernel reads init at its 0xcc
    moved = load_module(patched(tmp_path, data=bytes(b)), kernel=kernel(), config=cfg)
    assert moved.init_addr is None and moved.exit_addr == exit_
    # without the kernel's layout the module's own relocations say where its init is
    assert of_object(read_object("m.ko", bytes(b))).init == 0xD0
    own = load_module(patched(tmp_path, data=bytes(b)), kernel=kernel())
    assert (own.init_addr, own.exit_addr) == (init, exit_)


def test_checks_6_1_does_not_have_are_gone(tmp_path):
    # two .modinfo sections: 6.1 uses the first (find_sec); "Only one .modinfo" came with 6.4
    p = hostile(tmp_path, (20, "sh_name", get_field(HELLO_BYTES, 16, "sh_name")), (20, "sh_flags", 2))
    mod = load_module(p, kernel=kernel())
    assert mod.modinfo["license"] == ["GPL"]
    # a symbol string table without its leading NUL (6.12 refuses, 6.1 does not look)
    b = bytearray(HELLO_BYTES)
    b[get_field(b, 33, "sh_offset")] = ord("x")
    load_module(patched(tmp_path, data=bytes(b)), kernel=kernel())
    # e_ident class 2 / big-endian byte: only the magic is checked
    b = bytearray(HELLO_BYTES)
    b[4] = 2
    mod = load_module(patched(tmp_path, data=bytes(b)), kernel=kernel())
    assert any("e_ident class 2" in w for w in mod.warnings)
    # e_entry odd (Thumb) or 4-aligned is reasonable for elf_check_arch
    for entry in (1, 3, 4):
        b = bytearray(HELLO_BYTES)
        struct.pack_into("<I", b, 24, entry)
        load_module(patched(tmp_path, data=bytes(b)), kernel=kernel())
    # unknown EABI versions are not refused (only version 0 with APCS-26 is)
    b = bytearray(HELLO_BYTES)
    struct.pack_into("<I", b, 36, 0x7F000000)
    load_module(patched(tmp_path, data=bytes(b)), kernel=kernel())


def test_symbol_name_past_end_of_file(tmp_path):
    obj = read_object(HELLO)
    st = obj.sections[obj.symtab_index]
    b = bytearray(HELLO_BYTES)
    struct.pack_into("<I", b, st.sh_offset + 16 * 3, 0x7FFFFFFF)
    with pytest.raises(ElfFormatError, match=r"symbol 3 name .*runs past the end of the file.*Linux 6.12 refuses"):
        load_module(patched(tmp_path, data=bytes(b)))


def test_nobits_exec_target_counts_plts_from_the_file(tmp_path):
    from armload.loader.plt import plan_plts
    cfg = KernelConfig()
    i = section_index(".init.text")
    ref = plan_plts(read_object(HELLO), cfg).counts
    p = hostile(tmp_path, (i, "sh_type", 8))
    assert plan_plts(read_object(p), cfg).counts == ref       # count_plts reads the copy at sh_offset
    mod = Session(kernel(), cfg, "vmalloc").load(p)
    assert sum(e.plt == "init" and not e.fixed for e in mod.plt_entries) == ref["v6"].init - 2
    p = hostile(tmp_path, (i, "sh_type", 8), (i, "sh_offset", len(HELLO_BYTES) - 4))
    with pytest.raises(ElfFormatError, match=rf"relocates NOBITS executable section {i} \(.init.text.*count_plts"):
        load_module(p)


def test_duplicated_headers_first_or_last_as_6_1_picks(tmp_path):
    """Duplicated section headers (appended copies): find_sec and setup_load_info take the first
    .symtab / .gnu.linkonce.this_module / .modinfo, frob the last .plt; 6.4 refuses some of these."""
    from armload.inputs import fuzz, fuzz_cases
    seed = next(s for s in fuzz.default_seeds() if s.path.endswith("hello-arm.ko"))
    ref = load_module(HELLO, kernel=kernel())
    for name in (".symtab", ".gnu.linkonce.this_module", ".modinfo", "__versions"):
        b = bytearray(seed.data)
        fuzz_cases._dup_section(b, seed, section_index(name))
        mod = load_module(patched(tmp_path, data=bytes(b)), kernel=kernel())
        assert mod.name == "hello" and mod.init_addr == ref.init_addr, name
        assert len(mod.symbols) == len(ref.symbols)
    # a second .gnu.linkonce.this_module after the first is an ordinary data section in 6.1
    b = bytearray(seed.data)
    fuzz_cases._dup_section(b, seed, section_index(".gnu.linkonce.this_module"))
    mod = load_module(patched(tmp_path, data=bytes(b)), kernel=kernel())
    assert [s.index for s in mod.sections if s.name == ".gnu.linkonce.this_module"] == [25, SHNUM]


def test_module_layout_is_checked_first_before_the_modinfo_and_any_allocation(tmp_path):
    """load_module's order (kernel/module/main.c, 6.1 and 6.12's early_mod_check): rewrite the
    section headers, check_modstruct_version, check_modinfo, then layout_and_allocate. A module of
    another kernel (module_layout's CRC and the vermagic both differ) is refused with the CRC's
    words, and nothing is allocated for it."""
    cfg = KernelConfig()
    other = tmp_path / "Module.symvers"                  # another kernel's module_layout (6.1 lpae's CRC)
    other.write_text(open(SYMVERS).read().replace("0x8c1823f3\tmodule_layout", "0x0ffe5561\tmodule_layout"))
    k = Kernel.from_files([str(other)], cfg)
    k.vermagic = "6.1.0-50-rt-armmp SMP preempt_rt mod_unload modversions ARMv7 p2v8 "
    s = Session(k, cfg)
    asked = []
    real = s.allocator.alloc
    s.allocator.alloc = lambda size: asked.append(size) or real(size)
    with pytest.raises(SymbolError, match=r"^hello: disagrees about version of symbol module_layout "
                                          r"\(module 0x8c1823f3, kernel 0x0ffe5561\)") as e:
        s.load(HELLO)
    assert e.value.errno == -8 and asked == []
    k.exports.pop("module_layout")                       # the CRC agrees (absent): the vermagic is next
    with pytest.raises(ArmloadError, match=r"hello: version magic '6.1.0-50-armmp SMP mod_unload"):
        s.load(HELLO)
    assert asked == []
