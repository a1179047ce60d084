"""Bad input: one clear kernel-style error naming file, section, index and symbol; no traceback;
non-zero exit; the input file untouched."""
import hashlib
import struct
import subprocess
import sys

import pytest

from armload.config import KernelConfig
from armload.elf import read_object
from armload.errors import ElfFormatError, PltError, RelocationError, SymbolError
from armload.kernel import Kernel
from armload.loader import Session, load_module

from conftest import SYMVERS, sample

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
    "64-bit": (lambda b: b.__setitem__(4, 2), ElfFormatError, "64-bit"),
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
    with pytest.raises(ElfFormatError, match=f"symbol {sym} has bad section index 999"):
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
