"""Every refusal of armload/loader/elf.py, one edit of hello-arm.ko each: the whole message (the kernel's
pr_err text where it has one, then armload's context) and the section/symbol it names, with the
input on the accepted side of the same bound next to it. The numbers come from readelf -S of
hello-arm.ko (35 sections, header table at 0xb80 ending the file at 0x10f8)."""
import struct

import pytest

from armload.loader.elf import read_object, rela_sections
from armload.errors import ElfFormatError
from test_elf import base, get, put

N = 0x10F8                       # file size
SHOFF = 0xB80
NO_NAME = "(missing .modinfo section or name field)"


def _layout_is_the_one_described():
    b = base()
    assert len(b) == N and struct.unpack_from("<I", b, 32)[0] == SHOFF
    names = [s.name for s in read_object("x.ko", bytes(b)).sections]
    assert names[4:6] == [".init.text", ".rel.init.text"] and names[9] == ".rodata.str1.4"
    assert names[16] == ".modinfo" and names[19] == "__versions" and names[25] == ".gnu.linkonce.this_module"
    assert names[32:35] == [".symtab", ".strtab", ".shstrtab"]


_layout_is_the_one_described()
# the kernel's sizeof(struct module): what hello-arm.ko's own this_module (built by the kernel's
# headers) says, not a number written down here
from armload.loader.this_module import of_object  # noqa: E402
KERNEL_SIZE = of_object(read_object("x.ko", bytes(base()))).size
assert KERNEL_SIZE == 0x240


def hdr(b, fmt, off, value):
    struct.pack_into(fmt, b, off, value)
    return b


def sym(b, idx, field, value):
    off = get(b, 32, "sh_offset") + 16 * idx + {"st_name": 0, "st_info": 12, "st_shndx": 14}[field]
    struct.pack_into("<H" if field == "st_shndx" else ("B" if field == "st_info" else "<I"), b, off, value)
    return b


def sec(b, idx, **fields):
    for k, v in fields.items():
        if k == "sh_entsize":
            struct.pack_into("<I", b, SHOFF + 40 * idx + 36, v)
        else:
            put(b, idx, k, v)
    return b


def no_modinfo_name(b):
    at = bytes(b).index(b"\0name=hello\0") + 1
    b[at:at + 4] = b"nXme"
    return b


def rename(b, old, new):
    """Overwrite a name in .shstrtab in place (a shared suffix, e.g. of .rel.<name>, changes too)."""
    at = bytes(b).index(old.encode() + b"\0", get(b, 34, "sh_offset"))
    b[at:at + len(old)] = new.encode().ljust(len(old), b"\0")
    return b


def refused(b):
    with pytest.raises(ElfFormatError) as e:
        read_object("x.ko", bytes(b), struct_module_size=KERNEL_SIZE)
    err = e.value
    assert err.errno == -8 and err.file == "x.ko"
    assert str(err).startswith("x.ko: ")
    return str(err)[len("x.ko: "):], err.context


def accepted(b):
    return read_object("x.ko", bytes(b), struct_module_size=KERNEL_SIZE)


CASES = {
    # elf_validity_check: the header
    "type": (lambda b: hdr(b, "<H", 16, 2), "Invalid ELF header type: 2 != 1", {}),
    "machine": (lambda b: hdr(b, "<H", 18, 3),
                "Invalid architecture in ELF header: 3 (elf_check_arch: need EM_ARM=40)", {}),
    "entry": (lambda b: hdr(b, "<I", 24, 2), "Invalid architecture in ELF header: 40 (elf_check_arch: e_entry 0x2 "
              "is neither 4-byte aligned nor a Thumb address)", {}),
    "apcs26": (lambda b: hdr(b, "<I", 36, 0x08), "Invalid architecture in ELF header: 40 (elf_check_arch: e_flags "
               "0x8: unknown-EABI (version 0) APCS-26 object; no HWCAP_26BIT on ARMv7)", {}),
    "shentsize": (lambda b: hdr(b, "<H", 46, 41), "Invalid ELF section header size (e_shentsize 41 != 40)", {}),
    "shoff": (lambda b: hdr(b, "<I", 32, N), "Invalid ELF section header overflow (e_shoff 0x10f8, e_shnum 35, "
              "file size 0x10f8): truncated file?", {}),
    "shnum": (lambda b: hdr(b, "<H", 48, 36), "Invalid ELF section header overflow (e_shoff 0xb80, e_shnum 36, "
              "file size 0x10f8): truncated file?", {}),
    "shstrndx0": (lambda b: hdr(b, "<H", 50, 0),
                  "Invalid ELF section name index: 0 || e_shstrndx (0) >= e_shnum (35)", {}),
    "shstrndx35": (lambda b: hdr(b, "<H", 50, 35),
                   "Invalid ELF section name index: 35 || e_shstrndx (35) >= e_shnum (35)", {}),
    # the section name table and section 0
    "shstrtab-past-eof": (lambda b: sec(b, 34, sh_size=N - 0xA24 + 1), "Invalid ELF section hdr(type 3) (section "
                          "name table, section 34: offset 0xa24 + size 0x6d5 > file size 0x10f8)", {"section": 34}),
    "shstrtab-empty": (lambda b: sec(b, 34, sh_size=0), "empty section name table (section 34)", {"section": 34}),
    "shstrtab-unterminated": (lambda b: sec(b, 34, sh_size=0x15B), "ELF Spec violation: section name table isn't "
                              "null terminated (section 34, byte at file offset 0xb7e)", {"section": 34}),
    "sec0-type": (lambda b: sec(b, 0, sh_type=1),
                  "ELF Spec violation: section 0 type(1)!=SH_NULL or non-zero len or addr", {"section": 0}),
    "sec0-size": (lambda b: sec(b, 0, sh_size=1),
                  "ELF Spec violation: section 0 type(0)!=SH_NULL or non-zero len or addr", {"section": 0}),
    "sec0-addr": (lambda b: sec(b, 0, sh_addr=4),
                  "ELF Spec violation: section 0 type(0)!=SH_NULL or non-zero len or addr", {"section": 0}),
    # the per-section loop
    "symtab-link0": (lambda b: sec(b, 32, sh_link=0), "Invalid ELF sh_link!=SHN_UNDEF(0) or (sh_link(0) >= "
                     "hdr->e_shnum(35) (symbol table, section 32)", {"section": 32}),
    "symtab-link35": (lambda b: sec(b, 32, sh_link=35), "Invalid ELF sh_link!=SHN_UNDEF(35) or (sh_link(35) >= "
                      "hdr->e_shnum(35) (symbol table, section 32)", {"section": 32}),
    "section-past-eof": (lambda b: sec(b, 9, sh_size=N - 0xD0 + 1), "Invalid ELF section in module (section 9 type "
                         "1): offset 0xd0 + size 0x1029 is past the end of the file (0x10f8 bytes); truncated file?",
                         {"section": 9}),
    "alloc-name": (lambda b: sec(b, 9, sh_name=0x15C), "Invalid ELF section name in module (section 9 type 1): "
                   "sh_name 0x15c >= section name table size 0x15c", {"section": 9}),
    "first-bad-wins": (lambda b: sec(sec(b, 12, sh_size=N), 9, sh_name=0x15C), "Invalid ELF section name in module "
                       "(section 9 type 1): sh_name 0x15c >= section name table size 0x15c", {"section": 9}),
    # 6.1 reads sh_flags beyond the section header table for it (add_kallsyms' elf_type): an overread
    "null-symbol-shndx": (lambda b: sym(b, 0, "st_shndx", 35), "hello: symbol 0 has section index 0x23 >= e_shnum "
                          "35: 6.1 reads it unchecked (add_kallsyms' elf_type reads sh_flags from beyond the section "
                          "header table)", {"section": 32, "symbol": 0}),
    "unchecked-name-at-eof": (lambda b: sec(b, 29, sh_name=N - 0xA24), "section 29 (type 1): sh_name 0x6d4 runs "
                              "past the end of the file; 6.1 reads it unchecked (only SHF_ALLOC sections with "
                              "contents are checked)", {"section": 29}),
    "unchecked-name-no-nul": (lambda b: sec(sec(b, 34, sh_entsize=0x41414141), 29, sh_name=N - 4 - 0xA24),
                              "section 29 (type 1): sh_name 0x6d0 runs past the end of the file; 6.1 reads it "
                              "unchecked (only SHF_ALLOC sections with contents are checked)", {"section": 29}),
    # setup_load_info
    "no-symtab": (lambda b: sec(b, 32, sh_type=1), "hello: module has no symbols (stripped?)", {}),
    "no-symtab-no-name": (lambda b: sec(no_modinfo_name(b), 32, sh_type=1), NO_NAME + ": module has no symbols "
                          "(stripped?)", {}),
    "no-this-module": (lambda b: rename(b, ".gnu.linkonce.this_module", ".gnu.linkonce.this_modulX"),
                       "hello: No module found in object (a plain relocatable object? load it with --object / "
                       "object=True)", {}),
    "this-module-not-alloc": (lambda b: sec(b, 25, sh_flags=0), "hello: No module found in object (its "
                              ".gnu.linkonce.this_module is not SHF_ALLOC)", {}),
    "this-module-nobits": (lambda b: sec(b, 25, sh_type=8), "module hello: .gnu.linkonce.this_module section must "
                           "have a size set (section 25 is NOBITS; check added in Linux 6.4; 6.1 reads struct "
                           "module at sh_offset 0x300 unchecked)", {"section": 25}),
    "this-module-nobits-no-name": (lambda b: sec(no_modinfo_name(b), 25, sh_type=8), f"module {NO_NAME}: "
                                   ".gnu.linkonce.this_module section must have a size set (section 25 is NOBITS; "
                                   "check added in Linux 6.4; 6.1 reads struct module at sh_offset 0x300 "
                                   "unchecked)", {"section": 25}),
    "this-module-small": (lambda b: sec(b, 25, sh_size=0x23F), "module hello: .gnu.linkonce.this_module section "
                          "size must match the kernel's built struct module size at run time (section 25: 0x23f < "
                          "0x240; check added in Linux 6.4; 6.1's move_module copies only sh_size bytes of it and load_module runs "
                          "on the rest of a struct module it never set up: Unable to handle kernel paging request in "
                          "add_kallsyms)", {"section": 25}),
    "module-name-to-eof": (lambda b: sec(no_modinfo_name(b) + b"A" * 0x240, 25, sh_offset=N), f"{NO_NAME}: struct "
                           "module name at file offset 0x1104 runs past the end of the file; 6.1 reads it "
                           "unchecked", {"section": 25}),
    "versions-nobits": (lambda b: sec(b, 19, sh_type=8, sh_size=N - 0x1C4 + 1), "hello: section 19 (__versions) is "
                        "NOBITS with offset 0x1c4 + size 0xf35 past the end of the file (0x10f8): 6.1 reads it from "
                        "its copy of the file at sh_offset unchecked", {"section": 19}),
    "percpu-nobits": (lambda b: sec(rename(b, ".rodata.str1.4", ".data..percpu"), 9, sh_type=8,
                                    sh_size=N - 0xD0 + 1), "hello: section 9 (.data..percpu) is NOBITS with offset "
                      "0xd0 + size 0x1029 past the end of the file (0x10f8): 6.1 reads it from its copy of the file "
                      "at sh_offset unchecked", {"section": 9}),
    # simplify_symbols' reads
    "symbol-name-at-eof": (lambda b: sym(b, 1, "st_name", N - 0x810), "hello: symbol 1 name (st_name 0x8e8 in "
                           "section 33 at file offset 0x810) runs past the end of the file: 6.1 reads it unchecked "
                           "(Linux 6.12 refuses: symbol name out of bounds in string table)",
                           {"section": 32, "symbol": 1}),
    "symbol-shndx": (lambda b: sym(b, 1, "st_shndx", 35), "hello: symbol 1 has section index 0x23 >= e_shnum 35 (no "
                     "kernel checks this: 6.1's simplify_symbols adds an sh_addr read from beyond the section header "
                     "table)", {"section": 32, "symbol": 1}),
    "symbol-shndx-fff3": (lambda b: sym(b, 3, "st_shndx", 0xFFF3), "hello: symbol 3 has section index 0xfff3 >= "
                          "e_shnum 35 (no kernel checks this: 6.1's simplify_symbols adds an sh_addr read from "
                          "beyond the section header table)", {"section": 32, "symbol": 3}),
    # get_modinfo
    "modinfo-nobits": (lambda b: sec(b, 16, sh_type=8, sh_size=N - 0x128 + 1), "section 16 (.modinfo) is NOBITS with "
                       "offset 0x128 + size 0xfd1 past the end of the file: 6.1 reads it at sh_offset unchecked",
                       {"section": 16}),
    "modinfo-last-string-to-eof": (lambda b: sec(b + b"ab\0cd", 16, sh_offset=N, sh_size=5), "section 16 "
                                   "(.modinfo): last string at file offset 0x10fb runs past the end of the file; "
                                   "6.1 reads it unchecked", {"section": 16}),
    "modinfo-only-string-to-eof": (lambda b: sec(b + b"abcd", 16, sh_offset=N, sh_size=4), "section 16 "
                                   "(.modinfo): last string at file offset 0x10f8 runs past the end of the file; "
                                   "6.1 reads it unchecked", {"section": 16}),
    # module_frob_arch_sections' reads
    "exec-nobits-target": (lambda b: sec(b, 4, sh_type=8, sh_size=N - 0x94 + 1), "hello: section 5 (.rel.init.text) "
                           "relocates NOBITS executable section 4 (.init.text, offset 0x94 + size 0x1065 past the end "
                           "of the file): 6.1's count_plts reads its instructions at sh_offset in its copy of the file "
                           "unchecked", {"section": 5}),
    "exec-nobits-target-8-byte-rel": (lambda b: sec(sec(b, 4, sh_type=8, sh_size=N), 5, sh_size=8), "hello: section "
                                      "5 (.rel.init.text) relocates NOBITS executable section 4 (.init.text, offset "
                                      "0x94 + size 0x10f8 past the end of the file): 6.1's count_plts reads its "
                                      "instructions at sh_offset in its copy of the file unchecked", {"section": 5}),
    "rel-target-past-eof": (lambda b: sec(b, 5, sh_info=35), "hello: section 5 (.rel.init.text): SHT_REL with sh_info "
                            "35 >= e_shnum 35: 6.1's module_frob_arch_sections reads that section header at file "
                            "offset 0x10f8, past the end of its copy of the file (undefined; no check in any kernel)",
                            {"section": 5}),
    "rel-target-39-bytes": (lambda b: sec(b + bytes(39), 5, sh_info=35), "hello: section 5 (.rel.init.text): SHT_REL "
                            "with sh_info 35 >= e_shnum 35: 6.1's module_frob_arch_sections reads that section header "
                            "at file offset 0x10f8, past the end of its copy of the file (undefined; no check in any "
                            "kernel)", {"section": 5}),
    "rel-target-exec-garbage": (lambda b: sec(b + bytes(8) + struct.pack("<I", 4) + bytes(28), 5, sh_info=35),
                                "hello: section 5 (.rel.init.text): SHT_REL with sh_info 35 >= e_shnum 35: 6.1's "
                                "module_frob_arch_sections takes the bytes at file offset 0x10f8 as an executable "
                                "target section and sorts/counts against a garbage sh_addr (undefined)",
                                {"section": 5}),
}


@pytest.mark.parametrize("case", CASES)
def test_refusal_message_and_context(case):
    edit, message, context = CASES[case]
    got, ctx = refused(edit(base()))
    assert got == message
    assert ctx == context


ACCEPTED = {
    "entry-thumb": lambda b: hdr(b, "<I", 24, 3),
    "entry-aligned": lambda b: hdr(b, "<I", 24, 4),
    "eabi5-with-bit3": lambda b: hdr(b, "<I", 36, 0x05000008),
    "eabi0-without-bit3": lambda b: hdr(b, "<I", 36, 0x04),
    "shstrndx-last": lambda b: b,
    "shstrtab-to-eof": lambda b: sec(b, 34, sh_size=N - 0xA24),
    "symtab-link-last": lambda b: sec(b, 32, sh_link=34),
    "section-to-eof": lambda b: sec(b, 9, sh_size=N - 0xD0),
    "alloc-name-last-byte": lambda b: sec(b, 9, sh_name=0x15B),
    "unchecked-name-last-byte": lambda b: sec(b, 29, sh_name=N - 1 - 0xA24),
    "nonalloc-name-past-table": lambda b: sec(b, 29, sh_name=0x15C),
    "this-module-exact": lambda b: sec(b, 25, sh_size=0x240),
    "versions-nobits-to-eof": lambda b: sec(b, 19, sh_type=8, sh_size=N - 0x1C4),
    "symbol-name-last-byte": lambda b: sym(b, 1, "st_name", N - 1 - 0x810),
    "symbol-shndx-last": lambda b: sym(b, 3, "st_shndx", 34),
    "symbol-shndx-abs": lambda b: sym(b, 3, "st_shndx", 0xFFF1),
    "symbol-shndx-common": lambda b: sym(b, 3, "st_shndx", 0xFFF2),
    "symbol-shndx-livepatch": lambda b: sym(b, 3, "st_shndx", 0xFF20),
    "modinfo-nobits-to-eof": lambda b: sec(b, 16, sh_type=8, sh_size=N - 0x128),
    "exec-nobits-target-to-eof": lambda b: sec(b, 4, sh_type=8, sh_size=N - 0x94),
    "exec-nobits-target-7-byte-rel": lambda b: sec(sec(b, 4, sh_type=8, sh_size=N), 5, sh_size=7),
    "data-nobits-target-past-eof": lambda b: sec(b, 23, sh_type=8, sh_size=N),
    "rel-target-40-zero-bytes": lambda b: sec(b + bytes(40), 5, sh_info=35),
}


@pytest.mark.parametrize("case", ACCEPTED)
def test_accepted_at_the_bound(case):
    obj = accepted(ACCEPTED[case](base()))
    assert obj.name == "hello" and len(obj.sections) == 35


def test_modinfo_strings_running_past_the_section_are_read_to_their_nul():
    want = accepted(base()).modinfo
    assert want["name"] == ["hello"] and want["vermagic"][0].startswith("6.1.0-50-armmp ")
    for size in (0x95, 0x94, 0x50):          # final NUL cut off; mid-vermagic; mid-"name=hello"
        got = accepted(sec(base(), 16, sh_size=size)).modinfo
        last = 0x128 + size
        assert got == {k: v for k, v in want.items()
                       if 0x128 + bytes(base()).index(f"{k}=".encode(), 0x128) - 0x128 < last}, size
    # size 0: only the first string is looked at (next_string stops at once)
    assert accepted(sec(base(), 16, sh_size=0)).modinfo == {"description": ["armload sample: hello world"]}


def test_object_file_helpers():
    b = base()
    obj = accepted(b)
    assert obj.find_sec(".note.gnu.build-id").index == 1          # section 1 is searched
    assert obj.find_sec(".comment") is None                        # not SHF_ALLOC
    assert obj.find_sec(".modinfo").index == 16
    assert rela_sections(obj) == []
    obj2 = accepted(sec(base(), 5, sh_type=4))
    assert [s.index for s in rela_sections(obj2)] == [5]
    named = accepted(sym(base(), 0, "st_name", 1))               # the null symbol given a name
    assert named.sym_name(0) == named.sym_names[0] != ""
    assert named.sym_name(-1) == "" and named.sym_name(named.symcount) == ""
    assert named.sym_name(named.symcount - 1) == named.sym_names[-1] != ""


def test_names_and_strings_are_decoded_leniently():
    """Bytes that are not UTF-8 become U+FFFD in section names, symbol names and modinfo keys and values."""
    b = base()
    at = bytes(b).index(b"author=armload")
    b[at + 4] = b[at + 11] = 0xFF
    at = bytes(b).index(b".comment\0", get(b, 34, "sh_offset"))
    b[at + 2] = 0xFE
    at = bytes(b).index(b"__UNIQUE_ID_name180\0", 0x810)
    b[at + 3] = 0xFD
    obj = accepted(b)
    assert obj.modinfo["auth\ufffdr"] == ["arml\ufffdad"]
    assert obj.sections[30].name == ".c\ufffdmment"
    assert "__U\ufffdIQUE_ID_name180" in obj.sym_names


def test_modinfo_stops_at_its_last_string():
    """A key=value string after .modinfo (here in .comment) is not modinfo."""
    b = base()
    b[0x542:0x549] = b"late=1\0"
    assert "late" not in accepted(b).modinfo
    b = base()
    b[0x542:0x549] = b"late=1\0"
    assert "late" not in accepted(sec(b, 16, sh_size=0x95)).modinfo      # unterminated: read to its NUL only
