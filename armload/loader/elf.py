"""Stage 1: read an ARM ELF relocatable object the way Linux 6.1 validates a module.

One validation pass establishes every invariant the later stages rely on, in the kernel's
order: elf_validity_check (header, elf_check_arch of arch/arm, section headers, section
names), setup_load_info (symbol table, .gnu.linkonce.this_module, the sections found by
name), then what module_frob_arch_sections, layout and simplify_symbols would read without
a check of their own. Where 6.1 checks nothing but reads outside its copy of the file (an
undefined result), armload refuses and says so; a check that only a later kernel has names
that kernel. After this pass:

* every PROGBITS-like section (anything but NULL/NOBITS) lies inside the file, and so does every
  SHF_ALLOC SHT_NULL section with a size (move_module copies it; validity.py has the whole table),
  and the symbol table's string table (layout_symtab makes it SHF_ALLOC);
* every section name, symbol name and modinfo string is a C string inside the file;
* the symbol table and REL tables are numpy arrays over the file (no per-entry objects);
* st_shndx of every symbol (but the null one) is < e_shnum, SHN_ABS, SHN_COMMON or SHN_LIVEPATCH;
* nothing 6.1 reads at a NOBITS or SHT_NULL section's sh_offset (__versions, .modinfo,
  .data..percpu, an executable REL target) lies outside the file.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field

import numpy as np

from ..constants import (EF_ARM_EABI_MASK, EM_ARM, ET_REL, SHF_ALLOC, SHF_EXECINSTR, SHF_WRITE, SHN_ABS, SHN_COMMON,
                        SHN_LORESERVE,
                        SHN_LIVEPATCH,
                        SHN_UNDEF, SHT_NOBITS, SHT_NULL, SHT_REL, SHT_RELA, SHT_SYMTAB)
from ..errors import ElfFormatError
from ..kernel.kofile import modinfo_strings
from .validity import LATER, UNCHECKED_TYPES, type_name, unread_alloc

SYM_DTYPE = np.dtype([("st_name", "<u4"), ("st_value", "<u4"), ("st_size", "<u4"),
                      ("st_info", "u1"), ("st_other", "u1"), ("st_shndx", "<u2")])
REL_DTYPE = np.dtype([("r_offset", "<u4"), ("r_info", "<u4")])
SHDR_DTYPE = np.dtype([("sh_name", "<u4"), ("sh_type", "<u4"), ("sh_flags", "<u4"), ("sh_addr", "<u4"),
                       ("sh_offset", "<u4"), ("sh_size", "<u4"), ("sh_link", "<u4"), ("sh_info", "<u4"),
                       ("sh_addralign", "<u4"), ("sh_entsize", "<u4")])
EHDR_SIZE = 52
SHDR_SIZE = 40
THIS_MODULE = ".gnu.linkonce.this_module"
MODULE_NAME_OFF = 0x0C              # struct module: enum state (4), list_head list (8), then char name[60],
MODULE_NAME_LEN = 60                # on every 32-bit config (the rest of the layout: loader/this_module.py)
EF_ARM_APCS_26 = 0x08
NO_NAME = "(missing .modinfo section or name field)"


@dataclass
class Section:
    """One section header of the module's ELF file, with its name."""

    index: int
    name: str
    sh_type: int
    sh_flags: int
    sh_addr: int
    sh_offset: int
    sh_size: int
    sh_link: int
    sh_info: int
    sh_addralign: int
    sh_entsize: int

    @property
    def alloc(self) -> bool:
        return bool(self.sh_flags & SHF_ALLOC)


@dataclass
class ObjectFile:
    """A parsed module: plain data, nothing lazily read."""
    path: str
    data: bytes
    e_flags: int
    sections: list[Section]
    symtab_index: int
    symtab: np.ndarray                  # SYM_DTYPE, index 0 is the null symbol
    strtab: bytes                       # the file from the string table's sh_offset on (6.1 reads names there)
    rels: dict[int, np.ndarray]         # REL section index -> REL_DTYPE array (a private copy)
    modinfo: dict[str, list[str]]
    name: str                           # module name (modinfo name=, else struct module's name)
    is_module: bool                     # has .gnu.linkonce.this_module (a .ko)
    warnings: list[str] = field(default_factory=list)
    # find_sec() results of setup_load_info / layout_and_allocate (0: none)
    this_module_index: int = 0
    modinfo_index: int = 0
    versions_index: int = 0
    percpu_index: int = 0
    e_shnum: int = 0                    # as in the file (placeholder PLT sections of --object come after)
    _names: list[str] | None = None

    @property
    def display(self) -> str:
        return os.path.basename(self.path)

    def section_by_name(self, name: str) -> Section | None:
        for s in self.sections:
            if s.name == name:
                return s
        return None

    def find_sec(self, name: str) -> Section | None:
        """find_sec(): the first SHF_ALLOC section of that name ("alloc bit cleared means ignore it")."""
        for s in self.sections[1:]:
            if s.sh_flags & SHF_ALLOC and s.name == name:
                return s
        return None

    def section_bytes(self, sec: Section) -> bytes:
        """The bytes the kernel sees at sh_addr in its temporary copy: the file at sh_offset
        (NOBITS too: rewrite_section_headers points every section into the copy)."""
        return self.data[sec.sh_offset:sec.sh_offset + sec.sh_size]

    @property
    def sym_names(self) -> list[str]:
        if self._names is None:
            st = self.strtab
            names = []
            for off in self.symtab["st_name"].tolist():
                names.append(st[off:st.index(b"\0", off)].decode(errors="replace"))
            self._names = names
        return self._names

    def sym_name(self, idx: int) -> str:
        if 0 <= idx < len(self.symtab):
            return self.sym_names[idx]
        return ""

    @property
    def symcount(self) -> int:
        return len(self.symtab)


def _fail(path: str, msg: str, **ctx) -> ElfFormatError:
    return ElfFormatError(f"{os.path.basename(path)}: {msg}", file=path, **ctx)


def read_object(path: str, data: bytes | None = None, *, object: bool = False,
                struct_module_size: int | None = None, size_exact: bool = False) -> ObjectFile:
    """Parse and validate `path` (or `data`, named `path`). Raises ElfFormatError.

    object=True accepts a plain relocatable object (no .gnu.linkonce.this_module), which the
    kernel refuses ("No module found in object"); everything else is held to 6.1's rules.
    struct_module_size: the kernel's sizeof(struct module) (KernelConfig.struct_module), which a
    smaller this_module section must not be; None when the kernel's layout is not known (then the
    size is not checked). size_exact: 6.4's rule, the size must be equal (6.1 has no check; armload
    refuses only a smaller section there, which 6.1 would overrun)."""
    from ..kernel.kofile import decompress, read_raw
    data = decompress(bytes(read_raw(path) if data is None else data), path)   # .ko.xz/.zst/.gz as kmod reads them
    v = _Validator(path, data)
    v.struct_module_size = struct_module_size
    v.size_exact = size_exact
    return v.run(object)


class _Validator:
    def __init__(self, path: str, data: bytes):
        self.path = path
        self.data = data
        self.n = len(data)
        self.warnings: list[str] = []
        self._nul = None
        self.struct_module_size: int | None = None
        self.size_exact = False

    def fail(self, msg, **ctx):
        return _fail(self.path, msg, **ctx)

    # --- C strings in the kernel's copy of the file --------------------------------------
    def nul_positions(self) -> np.ndarray:
        if self._nul is None:
            self._nul = np.flatnonzero(np.frombuffer(self.data, np.uint8) == 0)
        return self._nul

    def cstr_end(self, starts: np.ndarray) -> np.ndarray:
        """Index of the NUL ending the C string at each start (-1: none before the end of file)."""
        nul = self.nul_positions()
        starts = np.asarray(starts, dtype=np.int64)
        k = np.searchsorted(nul, starts)
        ok = (k < len(nul)) & (starts < self.n)
        out = np.full(len(starts), -1, dtype=np.int64)
        out[ok] = nul[k[ok]]
        return out

    def cstr(self, off: int) -> str | None:
        end = self.data.find(b"\0", off)
        return None if end == -1 else self.data[off:end].decode(errors="replace")

    # --- the pass ------------------------------------------------------------------------
    def run(self, object: bool) -> ObjectFile:
        path, data = self.path, self.data
        hdr = self.check_header()
        shnum, shoff, shstrndx = hdr["e_shnum"], hdr["e_shoff"], hdr["e_shstrndx"]
        raw = np.frombuffer(data, SHDR_DTYPE, count=shnum, offset=shoff)
        sections = self.check_sections(raw, shstrndx)
        # setup_load_info
        info = next((s for s in sections[1:] if s.alloc and s.name == ".modinfo"), None)
        modinfo = self.read_modinfo(info) if info is not None else {}
        name = (modinfo.get("name") or [None])[0]
        symtab_sec = next((s for s in sections[1:] if s.sh_type == SHT_SYMTAB), None)
        if symtab_sec is None:
            raise self.fail(f"{name or NO_NAME}: module has no symbols (stripped?)")
        tm = next((s for s in sections[1:] if s.alloc and s.name == THIS_MODULE), None)
        if tm is None and not object:
            why = " (its .gnu.linkonce.this_module is not SHF_ALLOC)" if any(s.name == THIS_MODULE for s in sections) \
                else " (a plain relocatable object? load it with --object / object=True)"
            raise self.fail(f"{name or NO_NAME}: No module found in object{why}")
        if tm is not None:
            self.check_this_module(tm, name)
            if not name:
                name = self.cstr(tm.sh_offset + MODULE_NAME_OFF)
                if name is None:
                    raise self.fail(f"{NO_NAME}: struct module name at file offset "
                                    f"{tm.sh_offset + MODULE_NAME_OFF:#x} runs past the end of the file; "
                                    f"6.1 reads it unchecked", section=tm.index)
        elif not name:
            name = os.path.basename(path).split(".", 1)[0].replace("-", "_")
        if tm is None:
            self.warnings.append("plain relocatable object (no .gnu.linkonce.this_module), loaded as asked "
                                 "(--object); the kernel refuses it: No module found in object")
        versions = next((s for s in sections[1:] if s.alloc and s.name == "__versions"), None)
        percpu = next((s for s in sections[1:] if s.alloc and s.name == ".data..percpu"), None)
        for s, what in ((versions, "__versions"), (percpu, ".data..percpu")):
            if s is not None and s.sh_type in UNCHECKED_TYPES and s.sh_offset + s.sh_size > self.n:
                raise self.fail(f"{name}: section {s.index} ({what}) is {type_name(s.sh_type)} with offset "
                                f"{s.sh_offset:#x} + size {s.sh_size:#x} past the end of the file ({self.n:#x}): "
                                f"6.1 reads it from its copy of the file at sh_offset unchecked", section=s.index)
        # move_module copies every SHF_ALLOC section but NOBITS; 6.1 un-ALLOCs these three first
        skip = {x.index for x in (info, versions, percpu) if x is not None}
        s = unread_alloc(sections, self.n, skip)
        if s is not None:
            raise self.fail(f"{name}: section {s.index} ({s.name}) is SHT_NULL with SHF_ALLOC, offset "
                            f"{s.sh_offset:#x} + size {s.sh_size:#x} past the end of the file ({self.n:#x}): 6.1's "
                            f"move_module copies it from outside its copy of the file (elf_validity_check bounds "
                            f"neither SHT_NULL nor NOBITS; {LATER})", section=s.index)
        st = sections[symtab_sec.sh_link]
        if st.sh_type == SHT_NULL and st.sh_size and st.sh_offset + st.sh_size > self.n:
            # layout_symtab sets SHF_ALLOC on the string table: move_module's memcpy reads sh_size bytes
            # of it (the Debian kernel oopses in mmiocpy, seed 2 case 218 of make fuzz-kernel)
            raise self.fail(f"{name}: section {st.index} ({st.name}, the symbol table's string table) is SHT_NULL "
                            f"with offset {st.sh_offset:#x} + size {st.sh_size:#x} past the end of the file "
                            f"({self.n:#x}): 6.1's layout_symtab makes it SHF_ALLOC and move_module copies it from "
                            f"outside its copy of the file (elf_validity_check bounds neither SHT_NULL nor NOBITS)",
                            section=st.index)
        symtab, strtab = self.read_symtab(symtab_sec, sections, name)
        rels = self.read_rels(sections, name)
        self.check_frob(sections, shoff, name)
        return ObjectFile(path=path, data=data, e_flags=hdr["e_flags"], sections=sections,
                          symtab_index=symtab_sec.index, symtab=symtab, strtab=strtab, rels=rels,
                          modinfo=modinfo, name=name, is_module=tm is not None, warnings=self.warnings,
                          this_module_index=tm.index if tm is not None else 0,
                          modinfo_index=info.index if info is not None else 0,
                          versions_index=versions.index if versions is not None else 0,
                          percpu_index=percpu.index if percpu is not None else 0, e_shnum=len(sections))

    def check_header(self) -> dict:
        data, n = self.data, self.n
        if n < EHDR_SIZE:
            raise self.fail(f"Invalid ELF header len {n}")
        if data[:4] != b"\x7fELF":
            raise self.fail("Invalid ELF header magic: != \\177ELF")
        (e_type, e_machine, _ver, e_entry, _phoff, e_shoff, e_flags, _ehsize, _phentsize, _phnum,
         e_shentsize, e_shnum, e_shstrndx) = struct.unpack_from("<HHIIIIIHHHHHH", data, 16)
        if e_type != ET_REL:
            raise self.fail(f"Invalid ELF header type: {e_type} != {ET_REL}")
        # arch/arm/kernel/elf.c elf_check_arch (the kernel prints e_machine whichever test failed)
        why = None
        if e_machine != EM_ARM:
            why = f"need EM_ARM={EM_ARM}"
        elif not e_entry & 1 and e_entry & 3:
            why = f"e_entry {e_entry:#x} is neither 4-byte aligned nor a Thumb address"
        elif (e_flags & EF_ARM_EABI_MASK) == 0 and e_flags & EF_ARM_APCS_26:
            why = f"e_flags {e_flags:#x}: unknown-EABI (version 0) APCS-26 object; no HWCAP_26BIT on ARMv7"
        if why:
            raise self.fail(f"Invalid architecture in ELF header: {e_machine} (elf_check_arch: {why})")
        if data[4] != 1 or data[5] != 1:
            # Only the magic of e_ident is checked; the header is read as ELF32 little-endian anyway.
            self.warnings.append(f"e_ident class {data[4]} / data {data[5]} ignored (the kernel checks only "
                                 f"the magic and reads ELF32 little-endian)")
        if e_shentsize != SHDR_SIZE:
            raise self.fail(f"Invalid ELF section header size (e_shentsize {e_shentsize} != {SHDR_SIZE})")
        if e_shoff >= n or e_shnum * SHDR_SIZE > n - e_shoff:
            raise self.fail(f"Invalid ELF section header overflow (e_shoff {e_shoff:#x}, "
                            f"e_shnum {e_shnum}, file size {n:#x}): truncated file?")
        if e_shstrndx == SHN_UNDEF or e_shstrndx >= e_shnum:
            raise self.fail(f"Invalid ELF section name index: {e_shstrndx} || e_shstrndx ({e_shstrndx}) "
                            f">= e_shnum ({e_shnum})")
        return dict(e_flags=e_flags, e_entry=e_entry, e_shoff=e_shoff, e_shnum=e_shnum, e_shstrndx=e_shstrndx)

    def check_sections(self, raw: np.ndarray, shstrndx: int) -> list[Section]:
        n = self.n
        strhdr = raw[shstrndx]
        s_off, s_size = int(strhdr["sh_offset"]), int(strhdr["sh_size"])
        if s_off + s_size > n:           # validate_section_offset (u32 wrap included)
            raise self.fail(f"Invalid ELF section hdr(type {int(strhdr['sh_type'])}) (section name table, "
                            f"section {shstrndx}: offset {s_off:#x} + size {s_size:#x} > file size {n:#x})",
                            section=shstrndx)
        if s_size == 0:
            raise self.fail(f"empty section name table (section {shstrndx})", section=shstrndx)
        if self.data[s_off + s_size - 1] != 0:
            raise self.fail(f"ELF Spec violation: section name table isn't null terminated (section {shstrndx}, "
                            f"byte at file offset {s_off + s_size - 1:#x})", section=shstrndx)
        s0 = raw[0]
        if s0["sh_type"] != SHT_NULL or s0["sh_size"] != 0 or s0["sh_addr"] != 0:
            raise self.fail(f"ELF Spec violation: section 0 type({int(s0['sh_type'])})!=SH_NULL or non-zero "
                            f"len or addr", section=0)
        # The loop of elf_validity_check: per section (from 1) the symtab link, the offset, the name.
        t, off, size = raw["sh_type"], raw["sh_offset"].astype(np.int64), raw["sh_size"].astype(np.int64)
        has_bits = (t != SHT_NULL) & (t != SHT_NOBITS)
        has_bits[0] = False
        link = raw["sh_link"]
        badlink = has_bits & (t == SHT_SYMTAB) & ((link == SHN_UNDEF) | (link >= len(raw)))
        badoff = has_bits & (off + size > n)
        badname = has_bits & ((raw["sh_flags"] & SHF_ALLOC) != 0) & (raw["sh_name"] >= s_size)
        anybad = badlink | badoff | badname
        if anybad.any():
            i = int(np.argmax(anybad))
            h = raw[i]
            if badlink[i]:
                lk = int(h["sh_link"])
                raise self.fail(f"Invalid ELF sh_link!=SHN_UNDEF({lk}) or (sh_link({lk}) >= hdr->e_shnum({len(raw)}) "
                                f"(symbol table, section {i})", section=i)
            if badoff[i]:
                raise self.fail(f"Invalid ELF section in module (section {i} type {int(h['sh_type'])}): offset "
                                f"{int(h['sh_offset']):#x} + size {int(h['sh_size']):#x} is past the end of the "
                                f"file ({n:#x} bytes); truncated file?", section=i)
            raise self.fail(f"Invalid ELF section name in module (section {i} type {int(h['sh_type'])}): sh_name "
                            f"{int(h['sh_name']):#x} >= section name table size {s_size:#x}", section=i)
        # Names: 6.1 reads secstrings + sh_name for every section (find_sec, frob); unchecked ones must
        # still be C strings inside the file.
        starts = s_off + raw["sh_name"].astype(np.int64)
        ends = self.cstr_end(starts)
        if (ends == -1).any():
            i = int(np.argmax(ends == -1))
            raise self.fail(f"section {i} (type {int(raw['sh_type'][i])}): sh_name {int(raw['sh_name'][i]):#x} "
                            f"runs past the end of the file; 6.1 reads it unchecked (only SHF_ALLOC sections "
                            f"with contents are checked)", section=i)
        rows = raw.tolist()
        sections = []
        data = self.data
        for i, (h, a, b) in enumerate(zip(rows, starts.tolist(), ends.tolist())):
            sections.append(Section(i, data[a:b].decode(errors="replace"), *h[1:]))
        return sections

    def check_this_module(self, tm: Section, name: str | None) -> None:
        who = name or NO_NAME
        if tm.sh_type == SHT_NOBITS:
            raise self.fail(f"module {who}: .gnu.linkonce.this_module section must have a size set (section "
                            f"{tm.index} is NOBITS; check added in Linux 6.4; 6.1 reads struct module at "
                            f"sh_offset {tm.sh_offset:#x} unchecked)", section=tm.index)
        want = self.struct_module_size
        if want is not None and self.size_exact and tm.sh_size != want:
            raise self.fail(f"module {who}: .gnu.linkonce.this_module section size must match the kernel's built "
                            f"struct module size at run time (section {tm.index}: {tm.sh_size:#x}, the kernel's "
                            f"{want:#x})", section=tm.index)
        # Without the kernel's size (no module tree) struct module is at least state, list and name on
        # any config. 6.1's move_module copies sh_size bytes of the section, so the final struct module
        # past them is what the layout put there: add_kallsyms writes through its init_layout.base and
        # the Debian kernel oopses (seed 3 case 132, seed 4 cases 183 and 249 of make fuzz-kernel).
        least = want if want is not None else MODULE_NAME_OFF + MODULE_NAME_LEN
        if tm.sh_size < least:
            what = f"{want:#x}" if want is not None else f"{least:#x}, struct module's state, list and name alone"
            raise self.fail(f"module {who}: .gnu.linkonce.this_module section size must match the kernel's built "
                            f"struct module size at run time (section {tm.index}: {tm.sh_size:#x} < {what}; "
                            f"check added in Linux 6.4; 6.1's move_module copies only sh_size bytes of it and "
                            f"load_module runs on the rest of a struct module it never set up: Unable to handle "
                            f"kernel paging request in add_kallsyms)", section=tm.index)
        if tm.sh_flags & SHF_EXECINSTR or not tm.sh_flags & SHF_WRITE:
            # layout_sections' masks put it in core text (SHF_EXECINSTR) or rodata (no SHF_WRITE);
            # complete_formation's module_enable_ro makes that read-only and the next line writes
            # mod->state: the Debian kernel oopses in load_module (case 317 of make fuzz-kernel)
            part = "text" if tm.sh_flags & SHF_EXECINSTR else "read-only data"
            raise self.fail(f"module {who}: .gnu.linkonce.this_module (section {tm.index}) has flags "
                            f"{tm.sh_flags:#x}: 6.1's layout puts struct module in the core {part}, which "
                            f"complete_formation makes read-only before load_module writes mod->state: "
                            f"Unable to handle kernel paging request (the kernel oopses in load_module)",
                            section=tm.index)
        at = tm.sh_offset + MODULE_NAME_OFF
        end = self.data.find(b"\0", at)              # no NUL before EOF: the reader's refusal says so
        if end - at >= MODULE_NAME_LEN:
            raise self.fail(f"module {who}: struct module name (file offset {at:#x}) is not NUL-terminated within "
                            f"MODULE_NAME_LEN ({MODULE_NAME_LEN}); 6.1's load_module runs a fortified string "
                            f"function on it and BUGs (fortify_panic: the Debian kernel oopses)", section=tm.index)

    def read_modinfo(self, sec: Section) -> dict[str, list[str]]:
        """get_modinfo()'s walk: strings from sh_offset, NUL padding skipped, at most sh_size bytes;
        the last string may run past the section (6.1 reads it to its NUL)."""
        start, size = sec.sh_offset, max(sec.sh_size, 1)    # the first string is read even when size is 0
        if start + size > self.n:
            raise self.fail(f"section {sec.index} (.modinfo) is {type_name(sec.sh_type)} with offset {start:#x} + "
                            f"size {sec.sh_size:#x} past the end of the file: 6.1 reads it at sh_offset unchecked"
                            + ("" if sec.sh_type in UNCHECKED_TYPES else " (its first string: get_modinfo reads "
                               "one even when sh_size is 0)"), section=sec.index)
        body = self.data[start:start + size]
        last = body.rfind(b"\0")
        tail_end = start + len(body)
        if last != len(body) - 1:
            # the final string is unterminated inside the section: the kernel's strncmp reads on
            e = self.data.find(b"\0", start + len(body))
            if e == -1:
                raise self.fail(f"section {sec.index} (.modinfo): last string at file offset "
                                f"{start + last + 1:#x} runs past the end of the file; 6.1 reads it unchecked",
                                section=sec.index)
            tail_end = e
        return modinfo_strings(self.data[start:tail_end])

    def read_symtab(self, st: Section, sections: list[Section], name: str):
        strsec = sections[st.sh_link]
        # The symbol table section has contents (it was checked to lie inside the file); the
        # string table may be anything: 6.1 reads names at its sh_offset unchecked.
        count = st.sh_size // SYM_DTYPE.itemsize
        syms = np.frombuffer(self.data, SYM_DTYPE, count=count, offset=st.sh_offset)
        base = strsec.sh_offset
        ends = self.cstr_end(base + syms["st_name"].astype(np.int64))
        if (ends == -1).any():
            i = int(np.argmax(ends == -1))
            raise self.fail(f"{name}: symbol {i} name (st_name {int(syms['st_name'][i]):#x} in section "
                            f"{strsec.index} at file offset {base:#x}) runs past the end of the file: 6.1 reads it "
                            f"unchecked (Linux 6.12 refuses: symbol name out of bounds in string table)",
                            section=st.index, symbol=i)
        # simplify_symbols (symbols 1..n-1) special-cases UNDEF, ABS, COMMON and LIVEPATCH; any other
        # index selects sechdrs[st_shndx], which past e_shnum is outside the section header table.
        shndx = syms["st_shndx"][1:]
        bad = (shndx >= len(sections)) & (shndx != SHN_ABS) & (shndx != SHN_COMMON) & (shndx != SHN_LIVEPATCH)
        if bad.any():
            i = int(np.argmax(bad)) + 1
            raise self.fail(f"{name}: symbol {i} has section index {int(shndx[i - 1]):#x} >= e_shnum {len(sections)} "
                            f"(no kernel checks this: 6.1's simplify_symbols adds an sh_addr read from beyond the "
                            f"section header table)", section=st.index, symbol=i)
        s0 = int(syms["st_shndx"][0]) if len(syms) else 0
        if len(sections) <= s0 < SHN_LORESERVE:
            # add_kallsyms calls elf_type on every symbol, the null one too: sechdrs[st_shndx].sh_flags
            raise self.fail(f"{name}: symbol 0 has section index {s0:#x} >= e_shnum {len(sections)}: 6.1 reads "
                            f"it unchecked (add_kallsyms' elf_type reads sh_flags from beyond the section header "
                            f"table)", section=st.index, symbol=0)
        strtab = self.data[base:]
        return syms, strtab

    def read_rels(self, sections: list[Section], name: str) -> dict[int, np.ndarray]:
        rels = {}
        for s in sections:                                # (section 0 is SHT_NULL)
            if s.sh_type != SHT_REL:
                continue
            n = s.sh_size // REL_DTYPE.itemsize          # the kernel truncates, so do we
            rels[s.index] = np.frombuffer(self.data, REL_DTYPE, count=n, offset=s.sh_offset).copy()
        return rels

    def check_frob(self, sections: list[Section], shoff: int, name: str) -> None:
        """module_frob_arch_sections reads `sechdrs + sh_info` of every SHT_REL section unchecked
        (apply_relocations skips sh_info >= e_shnum). Past the table the kernel sees whatever
        follows it: file bytes (then its flags decide) or memory beyond the copy (undefined)."""
        nsec = len(sections)
        for s in sections:                                # (section 0 is SHT_NULL)
            if s.sh_type != SHT_REL:
                continue
            if s.sh_info < nsec:
                dst = sections[s.sh_info]
                if dst.sh_flags & SHF_EXECINSTR and dst.sh_type in UNCHECKED_TYPES and \
                        dst.sh_offset + dst.sh_size > self.n and s.sh_size >= 8:
                    raise self.fail(f"{name}: section {s.index} ({s.name}) relocates {type_name(dst.sh_type)} "
                                    f"executable section "
                                    f"{dst.index} ({dst.name}, offset {dst.sh_offset:#x} + size {dst.sh_size:#x} "
                                    f"past the end of the file): 6.1's count_plts reads its instructions at "
                                    f"sh_offset in its copy of the file unchecked", section=s.index)
                continue
            at = shoff + SHDR_SIZE * s.sh_info
            if at + SHDR_SIZE > self.n:
                raise self.fail(f"{name}: section {s.index} ({s.name}): SHT_REL with sh_info {s.sh_info} >= e_shnum "
                                f"{nsec}: 6.1's module_frob_arch_sections reads that section header at file "
                                f"offset {at:#x}, past the end of its copy of the file (undefined; no check in "
                                f"any kernel)", section=s.index)
            flags, = struct.unpack_from("<I", self.data, at + 8)
            if flags & SHF_EXECINSTR:
                raise self.fail(f"{name}: section {s.index} ({s.name}): SHT_REL with sh_info {s.sh_info} >= e_shnum "
                                f"{nsec}: 6.1's module_frob_arch_sections takes the bytes at file offset {at:#x} as an "
                                f"executable target section and sorts/counts against a garbage sh_addr (undefined)",
                                section=s.index)


def rela_sections(obj: ObjectFile) -> list[Section]:
    return [s for s in obj.sections if s.sh_type == SHT_RELA]
