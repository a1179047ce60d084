"""Tests for armload.inputs.synth: synthetic kernel-module-like ELF objects."""

import io
import struct
import subprocess
import sys

import numpy as np
import pytest
from elftools.elf.elffile import ELFFile
from elftools.elf.relocation import RelocationSection

from armload.inputs import synth

READELF = "arm-linux-gnueabihf-readelf"
OBJDUMP = "arm-linux-gnueabihf-objdump"
needs_binutils = pytest.mark.usefixtures("binutils")     # fails (not skips) without make toolchain

R_ARM_ABS32, R_ARM_THM_CALL, R_ARM_CALL, R_ARM_JUMP24, R_ARM_THM_JUMP24 = 2, 10, 28, 29, 30
R_ARM_MOVW_ABS_NC, R_ARM_MOVT_ABS, R_ARM_THM_MOVW_ABS_NC, R_ARM_THM_MOVT_ABS = 43, 44, 47, 48


@pytest.fixture(scope="module")
def default_arm():
    return synth.make_module()


@pytest.fixture(scope="module")
def default_thumb():
    return synth.make_module(thumb=True)


def sections(data):
    """name -> (sh_type, sh_flags, sh_addr, sh_offset, sh_size, sh_link, sh_info, sh_addralign, sh_entsize)"""
    shoff, = struct.unpack_from("<I", data, 0x20)
    shnum, shstrndx = struct.unpack_from("<HH", data, 0x30)
    hdrs = [struct.unpack_from("<10I", data, shoff + 40 * i) for i in range(shnum)]
    stroff = hdrs[shstrndx][4]
    out = {}
    for h in hdrs[1:]:
        end = data.index(b"\0", stroff + h[0])
        out[data[stroff + h[0]:end].decode()] = h[1:]
    return out


def sec_bytes(data, name):
    s = sections(data)[name]
    return data[s[3]:s[3] + s[4]]


def rels(data, name):
    a = np.frombuffer(sec_bytes(data, name), dtype=[("offset", "<u4"), ("info", "<u4")])
    return a["offset"].astype(np.int64), (a["info"] >> 8).astype(np.int64), (a["info"] & 0xFF).astype(np.int64)


def text_words(data, offsets):
    text = np.frombuffer(sec_bytes(data, ".text"), dtype="<u4")
    return text[offsets // 4]


# ---------------------------------------------------------------------------------------------

def test_default_exact_count_and_types(default_arm):
    off, sym, typ = rels(default_arm, ".rel.text")
    assert len(off) == synth.DEFAULT_N_RELOCS == 262_573
    counts = dict(zip(*np.unique(typ, return_counts=True)))
    assert set(counts) == {R_ARM_CALL, R_ARM_JUMP24, R_ARM_MOVW_ABS_NC, R_ARM_MOVT_ABS, R_ARM_ABS32}
    assert counts[R_ARM_CALL] + counts[R_ARM_JUMP24] > 0.9 * len(off)
    assert counts[R_ARM_MOVW_ABS_NC] == counts[R_ARM_MOVT_ABS] > 0
    assert np.all(np.diff(off) > 0), "r_offsets strictly increasing, as gas emits them"
    assert np.all(off % 4 == 0)


@pytest.mark.parametrize("n", [0, 1, 2, 7, 50, 101, 1000, 12345])
@pytest.mark.parametrize("thumb", [False, True])
def test_exact_counts_small(n, thumb):
    data = synth.make_module(n, n_externals=50, thumb=thumb)
    off, _, _ = rels(data, ".rel.text")
    assert len(off) == n
    e = ELFFile(io.BytesIO(data))
    assert e.get_section_by_name(".rel.text").num_relocations() == n


def test_instruction_encodings_arm(default_arm):
    off, _, typ = rels(default_arm, ".rel.text")
    w = text_words(default_arm, off)
    assert np.all(w[typ == R_ARM_CALL] == 0xEBFFFFFE)       # bl with A = -8
    assert np.all(w[typ == R_ARM_JUMP24] == 0xEAFFFFFE)     # b with A = -8
    assert np.all((w[typ == R_ARM_MOVW_ABS_NC] & 0xFFF00000) == 0xE3000000)
    assert np.all((w[typ == R_ARM_MOVT_ABS] & 0xFFF00000) == 0xE3400000)


def test_instruction_encodings_thumb(default_thumb):
    off, _, typ = rels(default_thumb, ".rel.text")
    counts = dict(zip(*np.unique(typ, return_counts=True)))
    assert set(counts) == {R_ARM_THM_CALL, R_ARM_THM_JUMP24, R_ARM_THM_MOVW_ABS_NC,
                           R_ARM_THM_MOVT_ABS, R_ARM_ABS32}
    w = text_words(default_thumb, off)
    upper, lower = w & 0xFFFF, w >> 16
    br = (typ == R_ARM_THM_CALL) | (typ == R_ARM_THM_JUMP24)
    assert np.all(upper[br] & 0x7FF == 0x7FF)
    assert np.all(lower[br] & 0x2FFF == 0x2FFE)
    assert np.all(lower[typ == R_ARM_THM_CALL] == 0xFFFE)   # bl  f7ff fffe
    assert np.all(lower[typ == R_ARM_THM_JUMP24] == 0xBFFE)  # b.w f7ff bffe
    assert np.all(upper[typ == R_ARM_THM_MOVW_ABS_NC] & 0xFBF0 == 0xF240)
    assert np.all(upper[typ == R_ARM_THM_MOVT_ABS] & 0xFBF0 == 0xF2C0)


def test_pyelftools_structure(default_arm):
    e = ELFFile(io.BytesIO(default_arm))
    assert e["e_type"] == "ET_REL" and e["e_machine"] == "EM_ARM" and e.little_endian
    assert e.elfclass == 32 and e["e_flags"] == 0x05000000
    names = [s.name for s in e.iter_sections()]
    for need in [".text", ".init.text", ".rel.text", ".rel.init.text", ".data", ".rel.data",
                 ".rodata", ".modinfo", "__versions", ".gnu.linkonce.this_module",
                 ".rel.gnu.linkonce.this_module", ".plt", ".init.plt", ".symtab", ".strtab",
                 ".shstrtab", ".ARM.exidx"]:
        assert need in names, need
    for plt in (".plt", ".init.plt"):
        s = e.get_section_by_name(plt)
        assert s["sh_type"] == "SHT_PROGBITS" and s["sh_size"] == 1 and s["sh_addralign"] == 1
        assert s["sh_flags"] & 0x2
    assert e.get_section_by_name(".plt")["sh_flags"] & 0x4
    symtab = e.get_section_by_name(".symtab")
    # this_module: two ABS32 at the Debian 6.1 armmp offsets of init/exit
    tm = e.get_section_by_name(".gnu.linkonce.this_module")
    assert tm["sh_size"] == synth.THIS_MODULE_SIZE == 0x240
    assert tm.data()[0x0C:0x11] == b"synth"
    rel = e.get_section_by_name(".rel.gnu.linkonce.this_module")
    assert isinstance(rel, RelocationSection)
    got = {(r["r_offset"], r["r_info_type"], symtab.get_symbol(r["r_info_sym"]).name)
           for r in rel.iter_relocations()}
    assert got == {(0xCC, R_ARM_ABS32, "init_module"), (0x230, R_ARM_ABS32, "cleanup_module")}
    # modinfo / vermagic
    mi = e.get_section_by_name(".modinfo").data().split(b"\0")
    assert b"license=GPL" in mi and b"name=synth" in mi
    assert b"vermagic=6.1.0-50-armmp SMP mod_unload modversions ARMv7 p2v8 " in mi
    # __versions: 64-byte {crc, name[60]} for every undefined symbol + module_layout
    v = e.get_section_by_name("__versions").data()
    assert len(v) % 64 == 0
    ents = {v[i + 4:i + 64].split(b"\0")[0].decode(): struct.unpack_from("<I", v, i)[0]
            for i in range(0, len(v), 64)}
    und = {s.name for s in symtab.iter_symbols() if s["st_shndx"] == "SHN_UNDEF" and s.name}
    assert und | {"module_layout"} == set(ents)
    assert ents["module_layout"] == 0x8C1823F3
    assert ents["ext_func_0001"] == synth.external_crc("ext_func_0001")
    assert len([n for n in und if n.startswith("ext_func_")]) == 2000
    # mapping symbols present; locals before globals
    syms = list(symtab.iter_symbols())
    assert {"$a", "$d"} <= {s.name for s in syms}
    first_global = symtab["sh_info"]
    assert all(s["st_info"]["bind"] == "STB_LOCAL" for s in syms[:first_global])
    assert all(s["st_info"]["bind"] != "STB_LOCAL" for s in syms[first_global:])


def test_thumb_symbols_odd(default_thumb):
    e = ELFFile(io.BytesIO(default_thumb))
    symtab = e.get_section_by_name(".symtab")
    funcs = [s for s in symtab.iter_symbols() if s["st_info"]["type"] == "STT_FUNC"]
    assert funcs and all(s["st_value"] & 1 for s in funcs)
    assert "$t" in {s.name for s in symtab.iter_symbols()}
    assert "$a" not in {s.name for s in symtab.iter_symbols()}


def test_relocation_targets_mix(default_arm):
    e = ELFFile(io.BytesIO(default_arm))
    symtab = e.get_section_by_name(".symtab")
    shndx = np.array([0 if s["st_shndx"] == "SHN_UNDEF" else
                      (s["st_shndx"] if isinstance(s["st_shndx"], int) else -1)
                      for s in symtab.iter_symbols()])
    _, sym, typ = rels(default_arm, ".rel.text")
    br = (typ == R_ARM_CALL) | (typ == R_ARM_JUMP24)
    tsec = shndx[sym[br]]
    text = [i for i, s in enumerate(e.iter_sections()) if s.name == ".text"][0]
    cold = [i for i, s in enumerate(e.iter_sections()) if s.name == ".text.unlikely"][0]
    assert (tsec == 0).mean() > 0.8               # mostly undefined externals
    assert (tsec == text).sum() > 1000            # some to functions in .text
    assert (tsec == cold).sum() > 100             # some to another exec section


def test_determinism_and_seed():
    a = synth.make_module(5000, seed=1)
    b = synth.make_module(5000, seed=1)
    c = synth.make_module(5000, seed=2)
    assert a == b
    assert a != c
    assert synth.make_module(5000, seed=1, thumb=True) == synth.make_module(5000, seed=1, thumb=True)


def test_mixed_addends():
    data = synth.make_module(20000, mixed_addends=True, n_externals=100)
    off, sym, typ = rels(data, ".rel.text")
    w = text_words(data, off)
    call = typ == R_ARM_CALL
    imm = (w[call] & 0xFFFFFF).astype(np.int64)
    addend = ((imm ^ 0x800000) - 0x800000) * 4 + 8   # REL addend excluding the -8 PC bias
    assert (addend != 0).sum() > 100
    assert set(np.unique(addend)) <= {0, 4, 8, 12, 16, 32, 64}
    # the same symbol appears with both zero and non-zero addends
    s = sym[call]
    assert set(s[addend == 0]) & set(s[addend != 0])
    # default has none
    data = synth.make_module(20000, n_externals=100)
    off, _, typ = rels(data, ".rel.text")
    w = text_words(data, off)
    assert np.all(w[typ == R_ARM_CALL] == 0xEBFFFFFE)


def test_mixed_addends_thumb():
    data = synth.make_module(20000, mixed_addends=True, thumb=True, n_externals=100)
    off, _, typ = rels(data, ".rel.text")
    w = text_words(data, off)
    lower = w[typ == R_ARM_THM_CALL] >> 16
    assert (lower != 0xFFFE).sum() > 100
    assert np.all(lower & 0xD000 == 0xD000)           # still BL


def test_text_size():
    natural = len(sec_bytes(synth.make_module(1000), ".text"))
    big = synth.make_module(1000, text_size=natural + 0x10000)
    assert len(sec_bytes(big, ".text")) == natural + 0x10000
    assert len(rels(big, ".rel.text")[0]) == 1000
    with pytest.raises(ValueError):
        synth.make_module(1000, text_size=natural - 4)
    with pytest.raises(ValueError):
        synth.make_module(1000, text_size=natural + 2)
    with pytest.raises(ValueError):
        synth.make_module(1000, thumb=True, text_size=0x01000000)   # Thumb range is +-16 MiB
    synth.make_module(1000, text_size=0x01000000)                    # fine for ARM


def test_cli(tmp_path):
    out = tmp_path / "m.o"
    sv = tmp_path / "Module.symvers"
    subprocess.run([sys.executable, "-m", "armload.inputs.synth", str(out), "--relocs", "1234",
                    "--thumb", "--symvers", str(sv), "--externals", "30"], check=True)
    data = out.read_bytes()
    assert data == synth.make_module(1234, thumb=True, n_externals=30)
    assert len(sv.read_text().splitlines()) == 30
    assert len(rels(data, ".rel.text")[0]) == 1234


def test_write_module(tmp_path):
    p = tmp_path / "x.ko"
    n = synth.write_module(p, n_relocs=100, seed=5)
    assert p.stat().st_size == n and p.read_bytes() == synth.make_module(100, seed=5)


# ---- cross binutils as an independent parser ------------------------------------------------

def run_tool(*args):
    p = subprocess.run(args, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


@needs_binutils
@pytest.mark.parametrize("thumb", [False, True])
def test_readelf_no_warnings_default(tmp_path, thumb, default_arm, default_thumb):
    path = tmp_path / "synth.o"
    path.write_bytes(default_thumb if thumb else default_arm)
    rc, out, err = run_tool(READELF, "-hSrsW", str(path))
    assert rc == 0 and err == "", err[:2000]
    assert "Relocation section '.rel.text' at offset" in out
    assert "contains 262573 entries" in out
    rtype = "R_ARM_THM_CALL" if thumb else "R_ARM_CALL"
    # every relocation line of that type, counted independently with pyelftools
    elf = ELFFile(io.BytesIO(default_thumb if thumb else default_arm))
    want = sum(1 for s in elf.iter_sections() if isinstance(s, RelocationSection)
               for r in s.iter_relocations() if r["r_info_type"] == (R_ARM_THM_CALL if thumb else R_ARM_CALL))
    assert want > 200_000
    assert sum(1 for line in out.splitlines() if f" {rtype} " in line) == want


@needs_binutils
@pytest.mark.parametrize("thumb", [False, True])
def test_readelf_all_and_objdump_clean(tmp_path, thumb):
    path = tmp_path / "synth.o"
    path.write_bytes(synth.make_module(20_000, thumb=thumb, mixed_addends=True, n_externals=300))
    rc, out, err = run_tool(READELF, "-aW", str(path))
    assert rc == 0 and err == "", err[:2000]
    rc, out, err = run_tool(READELF, "-uW", str(path))
    assert rc == 0 and err == "" and "warning" not in out.lower(), (err + out)[:2000]
    rc, out, err = run_tool(OBJDUMP, "-dr", str(path))
    assert rc == 0 and err == "", err[:2000]
    assert "<unknown>" not in out and "undefined" not in out
    nrel = sum(1 for line in out.splitlines() if ": R_ARM_" in line)
    assert nrel == 20_000 + 6 + 3                  # .text + .init.text + .exit.text
    if thumb:
        assert "f7ff fffe \tbl\t" in out
    else:
        assert "ebfffffe \tbl\t" in out
