"""Both sides of the ELF validity bounds kernel/module/main.c applies before loading (6.1:
elf_validity_cache_copy(), module_sig_check's neighbours, find_sec()), through the public
read_object() only: one accepted input at the bound, one refused input just past it. The
expected behaviour is the kernel's; where the kernel prints a message, its pr_err text must
appear in armload's (armload may add context after it)."""
import re
import struct

import pytest

from armload.loader.elf import read_object
from armload.errors import ElfFormatError
from testinputs import sample

HELLO = sample("hello-arm.ko")
SYMBYTES = 16


def base():
    return bytearray(open(HELLO, "rb").read())


def shoff(b):
    return struct.unpack_from("<I", b, 32)[0]


def shnum(b):
    return struct.unpack_from("<H", b, 48)[0]


def shdr_at(b, idx):
    return shoff(b) + 40 * idx


def field(b, idx, name):
    return {"sh_name": 0, "sh_type": 4, "sh_flags": 8, "sh_addr": 12, "sh_offset": 16, "sh_size": 20,
            "sh_link": 24, "sh_info": 28}[name] + shdr_at(b, idx)


def get(b, idx, name):
    return struct.unpack_from("<I", b, field(b, idx, name))[0]


def put(b, idx, name, value):
    struct.pack_into("<I", b, field(b, idx, name), value)


def index_of(name):
    return next(s.index for s in read_object(HELLO).sections if s.name == name)


def accepts(b):
    return read_object("x.ko", bytes(b))


def refuses(b, kernel_says=None):
    with pytest.raises(ElfFormatError, match=re.escape(kernel_says) if kernel_says else None) as e:
        read_object("x.ko", bytes(b))
    assert e.value.errno == -8 and str(e.value).startswith("x.ko: ") and e.value.file == "x.ko"


def test_header_length():
    refuses(base()[:51], "Invalid ELF header len 51")    # len < sizeof(Elf32_Ehdr)
    refuses(b"", "Invalid ELF header len 0")
    refuses(b"\x7fELG" + bytes(60), "Invalid ELF header magic: != \\177ELF")


def test_section_header_table_must_fit():
    """e_shoff + e_shnum * e_shentsize may end exactly at the end of the file, not one byte past."""
    b = base()
    assert shoff(b) + 40 * shnum(b) == len(b)
    accepts(b)
    refuses(b[:-1], "Invalid ELF section header overflow")
    b2 = base()
    struct.pack_into("<I", b2, 32, shoff(b2) + 1)          # table shifted one byte past the end
    refuses(b2, "Invalid ELF section header overflow")


@pytest.mark.parametrize("secname", [".comment", ".note.GNU-stack"])
def test_section_may_end_at_end_of_file(secname):
    """sh_offset + sh_size > file size is refused; == is fine (the kernel's overflow check)."""
    i = index_of(secname)
    b = base()
    put(b, i, "sh_size", len(b) - get(b, i, "sh_offset"))
    accepts(b)
    put(b, i, "sh_size", len(b) - get(b, i, "sh_offset") + 1)
    refuses(b, f"Invalid ELF section in module (section {i} type 1)")


def test_section_offset_plus_size_wraps():
    i = index_of(".comment")
    b = base()
    put(b, i, "sh_size", 0x100000000 - get(b, i, "sh_offset"))      # offset + size wraps to 0
    refuses(b, f"Invalid ELF section in module (section {i} type 1)")


def test_nobits_section_is_not_bounded_by_the_file():
    i = index_of(".bss")
    b = base()
    put(b, i, "sh_size", 0x10000000)
    assert accepts(b).sections[i].sh_size == 0x10000000


def test_section_name_index():
    """e_shstrndx must be a real section: 0 and e_shnum are refused."""
    b = base()
    n = shnum(b)
    for bad in (0, n, 0xFFFF):
        b2 = base()
        struct.pack_into("<H", b2, 50, bad)
        refuses(b2, f"Invalid ELF section name index: {bad} || e_shstrndx ({bad}) >= e_shnum ({n})")
    assert struct.unpack_from("<H", b, 50)[0] == n - 1
    accepts(b)


def test_section_zero_must_be_null():
    b = base()
    put(b, 0, "sh_type", 1)
    refuses(b, "ELF Spec violation: section 0 type(1)!=SH_NULL or non-zero len or addr")
    b = base()
    put(b, 0, "sh_size", 4)
    refuses(b, "ELF Spec violation: section 0 type(0)!=SH_NULL or non-zero len or addr")
    b = base()
    put(b, 0, "sh_addr", 4)
    refuses(b, "ELF Spec violation: section 0 type(0)!=SH_NULL")


def test_section_name_table_must_be_nul_terminated():
    b = base()
    i = struct.unpack_from("<H", b, 50)[0]
    end = get(b, i, "sh_offset") + get(b, i, "sh_size")
    assert b[end - 1] == 0
    b[end - 1] = ord("x")
    refuses(b, "ELF Spec violation: section name table isn't null terminated")


def _sym_off(b, idx):
    st = index_of(".symtab")
    return get(b, st, "sh_offset") + SYMBYTES * idx


@pytest.mark.parametrize("value,ok", [(None, True), ("n-1", True), ("n", False), (0xFEFF, False),
                                      (0xFF00, False), (0xFFF1, True), (0xFFFF, False)])
def test_symbol_section_index(value, ok):
    """st_shndx >= e_shnum: SHN_ABS is a value; other indices past the table are refused with
    the reason (6.1 checks none of them: simplify_symbols would read an sh_addr from beyond the
    section header table)."""
    b = base()
    n = shnum(b)
    sym = 1
    if value is not None:
        v = {"n-1": n - 1, "n": n}.get(value, value)
        struct.pack_into("<H", b, _sym_off(b, sym) + 14, v)
    (accepts if ok else refuses)(b)


def test_symbol_name_offset():
    """6.1 does not bound st_name by the string table (that check came in 6.12): a name just past
    it is read from the file's next bytes; only a name running past the end of the file is refused."""
    b = base()
    size = get(b, index_of(".strtab"), "sh_size")
    struct.pack_into("<I", b, _sym_off(b, 1), size - 1)
    assert accepts(b).sym_name(1) == ""
    struct.pack_into("<I", b, _sym_off(b, 1), size)
    accepts(b)
    struct.pack_into("<I", b, _sym_off(b, 1), len(b) + 16)
    refuses(b)


def _rename(b, idx, to):
    """Point section idx's sh_name at the string `to` already in .shstrtab."""
    i = struct.unpack_from("<H", b, 50)[0]
    tab = bytes(b[get(b, i, "sh_offset"):get(b, i, "sh_offset") + get(b, i, "sh_size")])
    put(b, idx, "sh_name", tab.index(to.encode() + b"\0"))


def test_a_second_this_module_is_not_a_6_1_refusal():
    """6.1's find_sec takes the first SHF_ALLOC section of the name (the "Exactly one" check
    came later); a non-ALLOC section of that name is not it."""
    b = base()
    _rename(b, index_of(".comment"), ".gnu.linkonce.this_module")
    assert accepts(b).name == "hello"


def test_a_second_modinfo_is_not_a_6_1_refusal():
    b = base()
    _rename(b, index_of(".comment"), ".modinfo")
    assert accepts(b).name == "hello"


def test_this_module_must_have_size_and_alloc():
    i = index_of(".gnu.linkonce.this_module")
    b = base()
    put(b, i, "sh_size", 0)
    # the kernel's sizeof(struct module) is derived (loader/this_module.py): Debian 6.1 armmp's is 0x240
    with pytest.raises(ElfFormatError, match=re.escape("check added in Linux 6.4")):
        read_object("x.ko", bytes(b), struct_module_size=0x240)
    put(b, i, "sh_size", 0x23C)
    with pytest.raises(ElfFormatError, match=re.escape("0x23c < 0x240")):
        read_object("x.ko", bytes(b), struct_module_size=0x240)
    put(b, i, "sh_size", 0x240)
    assert read_object("x.ko", bytes(b), struct_module_size=0x240).name == "hello"
    b = base()
    put(b, i, "sh_flags", get(b, i, "sh_flags") & ~2)
    refuses(b, "No module found in object")


def test_exactly_one_symbol_table():
    b = base()
    put(b, index_of(".symtab"), "sh_type", 1)        # no SHT_SYMTAB left: stripped
    refuses(b, "module has no symbols (stripped?)")
    b = base()
    put(b, index_of(".comment"), "sh_type", 2)       # a second SHT_SYMTAB
    refuses(b)


def test_rel_count_truncates_like_the_kernel():
    """sh_size / sizeof(Elf32_Rel): a partial trailing entry is ignored, not an error."""
    i = index_of(".rel.init.text")
    b = base()
    n = get(b, i, "sh_size") // 8
    put(b, i, "sh_size", n * 8 - 1)
    assert len(accepts(b).rels[i]) == n - 1
    put(b, i, "sh_size", n * 8 + 7)
    assert len(accepts(b).rels[i]) == n


@pytest.mark.parametrize("off,value", [(4, 2), (5, 2), (4, 0), (5, 0)])
def test_class_and_data_encoding_are_not_checked_by_6_1(off, value):
    """elf_validity_check of 6.1 reads neither EI_CLASS nor EI_DATA: armload warns and loads."""
    b = base()
    b[off] = value
    assert accepts(b).warnings


@pytest.mark.parametrize("e_type,ok", [(1, True), (0, False), (2, False), (3, False), (4, False)])
def test_only_relocatable_objects(e_type, ok):
    b = base()
    struct.pack_into("<H", b, 16, e_type)
    if ok:
        accepts(b)
    else:
        refuses(b, f"Invalid ELF header type: {e_type} != 1")


@pytest.mark.parametrize("machine,ok", [(40, True), (3, False), (62, False), (183, False)])
def test_only_arm(machine, ok):
    b = base()
    struct.pack_into("<H", b, 18, machine)
    if ok:
        accepts(b)
    else:
        refuses(b, f"Invalid architecture in ELF header: {machine}")


def test_section_header_entry_size():
    b = base()
    struct.pack_into("<H", b, 46, 41)
    refuses(b, "Invalid ELF section header size")


# --- what read_object hands on (checked against pyelftools, an independent parser) ----------------
def _pyelftools(path):
    import io
    from elftools.elf.elffile import ELFFile
    return ELFFile(io.BytesIO(open(path, "rb").read()))


@pytest.mark.parametrize("name", ["hello-arm.ko", "importer-thumb2.ko", "initcore-arm.ko"])
def test_sections_symbols_rels_match_pyelftools(name):
    path = sample(name)
    obj = read_object(path)
    elf = _pyelftools(path)
    assert [(s.index, s.name, s.sh_type, s.sh_offset, s.sh_size, s.sh_link, s.sh_info, s.sh_flags, s.sh_addralign,
             s.sh_entsize, s.sh_addr) for s in obj.sections] == [
        (i, s.name, s.header["sh_type"] if isinstance(s.header["sh_type"], int) else _SHT[s.header["sh_type"]],
         s["sh_offset"], s["sh_size"], s["sh_link"], s["sh_info"], s["sh_flags"], s["sh_addralign"], s["sh_entsize"],
         s["sh_addr"]) for i, s in enumerate(elf.iter_sections())]
    symtab = elf.get_section_by_name(".symtab")
    assert obj.symtab_index == next(i for i, s in enumerate(elf.iter_sections()) if s.name == ".symtab")
    assert obj.symcount == symtab.num_symbols()
    assert obj.sym_names == [s.name for s in symtab.iter_symbols()]
    assert obj.symtab["st_value"].tolist() == [s["st_value"] for s in symtab.iter_symbols()]
    assert obj.sym_name(obj.symcount) == "" and obj.sym_name(-1) == ""
    from elftools.elf.relocation import RelocationSection
    rels = {i: [(r["r_offset"], r["r_info"]) for r in s.iter_relocations()]
            for i, s in enumerate(elf.iter_sections()) if isinstance(s, RelocationSection) and s["sh_type"] == "SHT_REL"}
    assert {i: list(zip(a["r_offset"].tolist(), a["r_info"].tolist())) for i, a in obj.rels.items()} == rels
    assert obj.e_flags == elf.header["e_flags"]
    assert obj.section_by_name(".symtab").index == obj.symtab_index and obj.section_by_name(".nope") is None


_SHT = {"SHT_NULL": 0, "SHT_PROGBITS": 1, "SHT_SYMTAB": 2, "SHT_STRTAB": 3, "SHT_RELA": 4, "SHT_NOBITS": 8,
        "SHT_REL": 9, "SHT_NOTE": 7, "SHT_ARM_EXIDX": 0x70000001, "SHT_ARM_ATTRIBUTES": 0x70000003}


def test_modinfo_and_name():
    obj = read_object(HELLO)
    raw = obj.section_bytes(obj.section_by_name(".modinfo"))
    want = {}
    for item in raw.split(b"\0"):
        if b"=" in item:
            k, v = item.decode().split("=", 1)
            want.setdefault(k, []).append(v)
    assert obj.modinfo == want and obj.name == want["name"][0] == "hello" and obj.is_module and not obj.warnings


def test_name_from_this_module_when_modinfo_has_none():
    """Without name= in .modinfo the kernel uses struct module's name (offset 12 on 32-bit ARM)."""
    b = base()
    i = index_of(".modinfo")
    off = get(b, i, "sh_offset")
    at = bytes(b[off:off + get(b, i, "sh_size")]).index(b"name=")
    b[off + at:off + at + 4] = b"nXme"
    obj = accepts(b)
    assert "name" not in obj.modinfo and obj.name == "hello"


def test_plain_object_is_named_after_the_file(tmp_path):
    obj = read_object(sample("obj/relocs-arm-gcc12.o"), object=True)
    assert not obj.is_module and obj.name == "relocs_arm_gcc12"
    assert obj.warnings == ["plain relocatable object (no .gnu.linkonce.this_module), loaded as asked (--object); "
                            "the kernel refuses it: No module found in object"]
    assert obj.modinfo == {}


def test_rel_tables_are_private_copies_and_nobits_reads_zero():
    b = bytes(base())
    obj = read_object("x.ko", b)
    i = index_of(".rel.init.text")
    obj.rels[i]["r_info"][0] = 0                  # writable: not a view of the file bytes
    assert read_object("x.ko", b).rels[i]["r_info"][0] != 0
    bss = obj.section_by_name(".bss")
    assert obj.section_bytes(bss) == bytes(bss.sh_size)
    assert obj.section_bytes(obj.section_by_name(".comment")) == b[obj.section_by_name(".comment").sh_offset:][
        :obj.section_by_name(".comment").sh_size]
    assert obj.display == "x.ko" and obj.sections[1].alloc and not obj.section_by_name(".comment").alloc


def test_unreadable_file(tmp_path):
    with pytest.raises(ElfFormatError, match="cannot read") as e:
        read_object(str(tmp_path / "missing.ko"))
    assert e.value.file == str(tmp_path / "missing.ko")


@pytest.mark.parametrize("link", [0, "n", 0xFFFF])
def test_symbol_table_link_must_be_a_section(link):
    b = base()
    n = shnum(b)
    v = n if link == "n" else link
    put(b, index_of(".symtab"), "sh_link", v)
    refuses(b, f"Invalid ELF sh_link!=SHN_UNDEF({v})")


@pytest.mark.parametrize("edit", ["empty", "lead", "tail"])
def test_symbol_string_table_shape(edit):
    b = base()
    i = index_of(".strtab")
    off, size = get(b, i, "sh_offset"), get(b, i, "sh_size")
    if edit == "empty":
        put(b, i, "sh_size", 0)
    elif edit == "lead":
        b[off] = ord("x")
    else:
        b[off + size - 1] = ord("x")
    accepts(b)                  # the string table's shape is checked from Linux 6.12 on, not in 6.1



def test_header_of_exactly_52_bytes_is_long_enough():
    refuses(base()[:52], "Invalid ELF section header overflow")     # not "header len": 52 is enough


def test_section_header_offset_is_unsigned():
    b = base()
    struct.pack_into("<I", b, 32, 0x80000000)
    refuses(b, "Invalid ELF section header overflow")


def test_bytes_after_the_section_header_table_are_not_sections():
    b = base() + bytes(80)
    assert len(accepts(b).sections) == shnum(b)


def _modinfo(b):
    i = index_of(".modinfo")
    return get(b, i, "sh_offset"), get(b, i, "sh_size")


def _replace(b, old, new):
    off, size = _modinfo(b)
    at = bytes(b[off:off + size]).index(old)
    assert len(old) == len(new)
    b[off + at:off + at + len(old)] = new


def test_modinfo_value_keeps_later_equals_signs_and_name_wins():
    """get_modinfo(): the value is everything after the first '='; the module is called by its
    modinfo name= when there is one (even if struct module says otherwise)."""
    b = base()
    _replace(b, b"license=GPL", b"licen=e=GPL")
    _replace(b, b"name=hello", b"name=hellX")
    obj = accepts(b)
    assert obj.modinfo["licen"] == ["e=GPL"] and obj.name == "hellX"


def test_this_module_name_bytes_are_decoded_leniently():
    b = base()
    _replace(b, b"name=hello", b"nXme=hello")
    tm = get(b, index_of(".gnu.linkonce.this_module"), "sh_offset")
    assert bytes(b[tm + 12:tm + 17]) == b"hello"
    b[tm + 15] = 0xFF
    assert accepts(b).name == "hel\ufffdo"


def test_plain_object_name_stops_at_the_first_dot():
    data = open(sample("obj/relocs-arm-gcc12.o"), "rb").read()
    assert read_object("/tmp/my-mod.v2.o", data, object=True).name == "my_mod"
