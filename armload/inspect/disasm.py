"""Disassembly of a loaded module at its final addresses (capstone).

ARM, Thumb and data are told apart by the `$a`/`$t`/`$d` mapping symbols of each section (the
PLT sections, which have none, are decoded as the kernel lays them out: one cache line of LDR
slots, one line of literals). Lines are annotated with symbol names, the relocation behind each
branch and where PLT slots lead, e.g. `bl 0xbf001040 <plt: _printk>`. Given the object's
relocation rows (armload/inspect/explain.py), every relocation is listed under its instruction or data
word as `objdump -dr` does (movw/movt, ABS32 words, the PREL31 words of .ARM.exidx), and with
DWARF line tables the source lines are interleaved as `objdump -S` does.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

from capstone import CS_ARCH_ARM, CS_MODE_ARM, CS_MODE_THUMB, Cs
from capstone.arm import (ARM_INS_B, ARM_INS_BL, ARM_INS_BLX, ARM_INS_CBNZ, ARM_INS_CBZ, ARM_INS_LDR,
                          ARM_OP_IMM, ARM_OP_MEM, ARM_REG_PC)

from ..errors import EmulationError
from ..loader.model import LoadedModule

SHF_EXECINSTR = 0x4
RTYPE_NAMES = {1: "R_ARM_PC24", 28: "R_ARM_CALL", 29: "R_ARM_JUMP24", 10: "R_ARM_THM_CALL",
               30: "R_ARM_THM_JUMP24"}


@dataclass
class Line:
    addr: int
    raw: bytes
    isa: str                    # arm | thumb | data
    mnemonic: str
    op_str: str
    comment: str = ""
    label: str | None = None    # a symbol starting here
    relocs: list[str] = field(default_factory=list)   # `R_ARM_* symbol` applied at this address
    source: list[str] = field(default_factory=list)   # source lines that start here (--source)

    def format(self) -> str:
        if self.isa == "thumb" and len(self.raw) == 4:
            hexs = f"{struct.unpack('<H', self.raw[:2])[0]:04x} {struct.unpack('<H', self.raw[2:])[0]:04x}"
        elif self.isa == "thumb" and len(self.raw) == 2:
            hexs = f"{struct.unpack('<H', self.raw)[0]:04x}     "
        elif len(self.raw) == 4:
            hexs = f"{struct.unpack('<I', self.raw)[0]:08x} "
        else:
            hexs = self.raw.hex().ljust(9)
        text = f"{self.mnemonic}\t{self.op_str}" if self.op_str else self.mnemonic
        s = f"{self.addr:8x}:\t{hexs}\t{text}"
        if self.comment:
            s += f"\t{self.comment}" if self.comment.startswith("@") else f" {self.comment}"
        for r in self.relocs:
            s += f"\n\t\t\t{self.addr:x}: {r}"
        if self.source:
            s = "\n".join(self.source) + "\n" + s
        return s

    def to_dict(self) -> dict:
        return {"addr": self.addr, "bytes": self.raw.hex(), "isa": self.isa, "mnemonic": self.mnemonic,
                "op_str": self.op_str, "comment": self.comment, "label": self.label, "relocs": self.relocs,
                "source": self.source}


class Disassembler:
    def __init__(self, module: LoadedModule, kernel=None, relocs=None, source: dict | None = None):
        self.m = module
        # place -> relocation rows (explain.RelocRow) applied there; None: branch rows only
        self.relocs_at: dict[int, list] | None = None
        if relocs is not None:
            self.relocs_at = {}
            for r in relocs:
                if r.applied:
                    self.relocs_at.setdefault(r.place, []).append(r)
        self.source = source or {}
        self.kernel = kernel
        self.arm = Cs(CS_ARCH_ARM, CS_MODE_ARM)
        self.thumb = Cs(CS_ARCH_ARM, CS_MODE_THUMB)
        self.arm.detail = True
        self.thumb.detail = True
        self.labels: dict[int, str] = {}
        for s in module.symbols:
            if s.stype in ("func", "object") and s.name and module.region_of(s.addr & ~1) is not None:
                self.labels.setdefault(s.addr & ~1, s.name)
        self.ext: dict[int, str] = {}
        for name, rs in module.resolved.items():
            if rs.addr:
                self.ext.setdefault(rs.addr & ~1, name)
        self.plt_slots = {e.addr: e for e in module.plt_entries}
        for e in module.plt_entries:
            # FTRACE_ADDR/MCOUNT_ADDR may be simulated addresses no kernel symbol covers: the
            # entry's own name is the truth, not the nearest kernel symbol below it.
            if e.fixed and e.symbol:
                self.ext[e.target & ~1] = e.symbol
        self.branch_at = {}
        for row in module.branches:
            self.branch_at[int(row["place"])] = row
        self.pltsecs = [s for s in module.sections if s.name in (".plt", ".init.plt") and s.size]
        self.limit: int | None = None            # lines left to decode (disassemble(max_lines=...))

    # --- naming ----------------------------------------------------------------------
    def name_of(self, addr: int) -> str:
        a = addr & ~1
        e = self.plt_slots.get(a)
        if e is not None:
            return f"plt: {e.symbol or hex(e.target)}"
        if a in self.labels:
            return self.labels[a]
        if a in self.ext:
            return self.ext[a]
        s = self.m.symbolize(a)
        if s:
            return s.rsplit("/", 1)[0]
        if self.kernel is not None:
            try:
                k = self.kernel.symbolize(a)
            except Exception:
                k = None
            if k:
                return k.rsplit("/", 1)[0]
        sec = self.m.section_at(a)
        if sec is not None:
            return f"{sec.name}+{a - sec.addr:#x}"
        return ""

    # --- regions ---------------------------------------------------------------------
    def _mapping(self, sec) -> list[tuple[int, str]]:
        if not sec.flags & SHF_EXECINSTR:
            return [(sec.addr, "data")]
        out = []
        for s in self.m.symbols:
            if s.stype == "notype" and s.name[:2] in ("$a", "$t", "$d") and \
                    (s.section == sec.name or s.section is None) and sec.addr <= (s.addr & ~1) < sec.addr + sec.size:
                out.append((s.addr & ~1, {"$a": "arm", "$t": "thumb", "$d": "data"}[s.name[:2]]))
        out.sort()
        if not out or out[0][0] != sec.addr:
            default = "thumb" if self.m.thumb or self.m.config.thumb2 else "arm"
            out.insert(0, (sec.addr, default))
        return out

    def section_lines(self, sec, lo: int | None = None, hi: int | None = None) -> list[Line]:
        return self._decorate(self._section_lines(sec, lo, hi))

    def _decorate(self, lines: list[Line]) -> list[Line]:
        """Relocation lines (objdump -dr) and source lines (objdump -S) per instruction."""
        if self.relocs_at is None and not self.source:
            return lines
        from ..constants import R
        for ln in lines:
            n = max(len(ln.raw), 1)
            for a in range(ln.addr, ln.addr + n):
                for r in (self.relocs_at or {}).get(a, ()):
                    ln.relocs.append(f"{r.type_name}\t{r.sym_name}" + (f"\t(S = {r.S:#x})" if r.rtype else ""))
                    if r.rtype == R.R_ARM_PREL31 and len(ln.raw) == 4:
                        w = struct.unpack("<I", ln.raw)[0]
                        off = (w & 0x7FFFFFFF) - ((w & 0x40000000) << 1)
                        tgt = (ln.addr + off) & 0xFFFFFFFF
                        nm = self.name_of(tgt)
                        ln.comment = f"@ prel31 -> {tgt:#x}" + (f" <{nm}>" if nm else "")
                src = self.source.get(a)
                if src:
                    ln.source.extend(src)
        return lines

    def _section_lines(self, sec, lo: int | None = None, hi: int | None = None) -> list[Line]:
        if sec in self.pltsecs:
            return self._plt_lines(sec)[:self.limit]
        data = self.m.read(sec.addr, sec.size) if sec.size else b""
        maps = self._mapping(sec)
        lines: list[Line] = []
        for i, (start, kind) in enumerate(maps):
            if self.limit is not None and len(lines) >= self.limit:
                break
            end = maps[i + 1][0] if i + 1 < len(maps) else sec.addr + sec.size
            if lo is not None:
                start, end = max(start, lo), min(end, hi)
            if start >= end:
                continue
            chunk = data[start - sec.addr:end - sec.addr]
            if kind == "data":
                lines += self._data_lines(chunk, start)
            else:
                lines += self._code_lines(chunk, start, kind)
        return lines

    def _data_lines(self, chunk: bytes, addr: int) -> list[Line]:
        out = []
        off = 0
        while off < len(chunk):
            if (addr + off) % 4 == 0 and off + 4 <= len(chunk):
                w = struct.unpack_from("<I", chunk, off)[0]
                nm = self.name_of(w) if w else ""
                out.append(Line(addr + off, chunk[off:off + 4], "data", ".word", f"{w:#010x}",
                                f"<{nm}>" if nm else ""))
                off += 4
            else:
                out.append(Line(addr + off, chunk[off:off + 1], "data", ".byte", f"{chunk[off]:#04x}"))
                off += 1
        return out

    def _code_lines(self, chunk: bytes, addr: int, kind: str) -> list[Line]:
        md = self.thumb if kind == "thumb" else self.arm
        out = []
        off = 0
        cap = self.limit
        while off < len(chunk):
            got = False
            for insn in md.disasm(chunk[off:], addr + off):
                got = True
                out.append(self._annotate(insn, kind))
                off += insn.size
                if cap is not None and len(out) >= cap:
                    return out
            if off < len(chunk):
                step = 2 if kind == "thumb" else 4
                step = min(step, len(chunk) - off)
                raw = chunk[off:off + step]
                val = int.from_bytes(raw, "little")
                out.append(Line(addr + off, raw, kind, ".inst" if step >= 2 else ".byte", f"{val:#x}",
                                "(undefined)"))
                off += step
            elif not got:
                break
        return out

    def _annotate(self, insn, kind: str) -> Line:
        line = Line(insn.address, bytes(insn.bytes), kind, insn.mnemonic, insn.op_str)
        row = self.branch_at.get(insn.address)
        if insn.id in (ARM_INS_B, ARM_INS_BL, ARM_INS_BLX, ARM_INS_CBZ, ARM_INS_CBNZ):
            ops = insn.operands
            if ops and ops[-1].type == ARM_OP_IMM:
                tgt = ops[-1].imm & 0xFFFFFFFF
                line.op_str = line.op_str.replace(f"#{tgt:#x}", f"{tgt:#x}")
                nm = self.name_of(tgt)
                parts = []
                if nm:
                    parts.append(f"<{nm}>")
                if row is not None:
                    symname = self.m.sym_names[int(row["sym"])] if int(row["sym"]) < len(self.m.sym_names) else "?"
                    rel = RTYPE_NAMES.get(int(row["rtype"]), str(int(row["rtype"])))
                    extra = f"{rel} {symname}"
                    if int(row["plt"]) and (tgt & ~1) == int(row["plt"]):
                        extra += f" -> {int(row['target']) & ~1:#x}"
                    elif (tgt & ~1) != (int(row["target"]) & ~1):
                        extra += f" (expected {int(row['target']) & ~1:#x}!)"
                    parts.append(f"@ {extra}")
                line.comment = " ".join(parts)
        elif insn.id == ARM_INS_LDR and len(insn.operands) == 2 and insn.operands[1].type == ARM_OP_MEM \
                and insn.operands[1].mem.base == ARM_REG_PC and insn.operands[1].mem.index == 0:
            pc = (insn.address + 4) & ~3 if kind == "thumb" else insn.address + 8
            lit = (pc + insn.operands[1].mem.disp) & 0xFFFFFFFF
            try:
                val = struct.unpack("<I", self.m.read(lit, 4))[0]
                nm = self.name_of(val)
                line.comment = f"@ [{lit:#x}] = {val:#x}" + (f" <{nm}>" if nm else "")
            except ValueError:
                line.comment = f"@ [{lit:#x}]"
        return line

    def _plt_lines(self, sec) -> list[Line]:
        cfg = self.m.config
        stride = cfg.plt_stride
        kind = "thumb" if cfg.thumb2 else "arm"
        data = self.m.read(sec.addr, sec.size)
        out: list[Line] = []
        for g in range(0, sec.size, 2 * stride):
            if not any(data[g:g + 2 * stride]) and not any(sec.addr + g <= e < sec.addr + g + stride
                                                          for e in self.plt_slots):
                out.append(Line(sec.addr + g, b"", kind, "...", "", f"@ {2 * stride} bytes, no entries emitted"))
                continue
            for s in range(0, stride, 4):
                a = sec.addr + g + s
                raw = data[g + s:g + s + 4]
                lit = struct.unpack_from("<I", data, g + s + stride)[0] if g + s + stride + 4 <= sec.size else 0
                md = self.thumb if kind == "thumb" else self.arm
                insns = list(md.disasm(raw, a, 1))
                e = self.plt_slots.get(a)
                if insns:
                    ln = Line(a, raw, kind, insns[0].mnemonic, insns[0].op_str)
                else:
                    ln = Line(a, raw, kind, ".inst", f"{int.from_bytes(raw, 'little'):#x}", "(undefined)")
                if e is not None:
                    ln.label = f"plt: {e.symbol or hex(e.target)}" + (" (ftrace fixed)" if e.fixed else "")
                    nm = self.name_of(lit) if lit else ""
                    ln.comment = f"@ -> {lit:#x}" + (f" <{nm}>" if nm else "")
                    if lit != e.target:
                        ln.comment += f" (expected {e.target:#x}!)"
                elif lit == 0:
                    ln.comment = "@ (unused slot)"
                out.append(ln)
            for s in range(0, stride, 4):
                a = sec.addr + g + stride + s
                if g + stride + s + 4 > sec.size:
                    break
                w = struct.unpack_from("<I", data, g + stride + s)[0]
                nm = self.name_of(w) if w else ""
                out.append(Line(a, data[g + stride + s:g + stride + s + 4], "data", ".word", f"{w:#010x}",
                                f"<{nm}>" if nm else ""))
        return out

    # --- top level -------------------------------------------------------------------
    def sections(self, plt_only: bool = False):
        secs = [s for s in self.m.sections if ((s.flags & SHF_EXECINSTR) or (
            self.relocs_at is not None and s.name.startswith(".ARM.exidx"))) and s.size]
        if plt_only:
            secs = [s for s in secs if s in self.pltsecs]
        return sorted(secs, key=lambda s: s.addr)

    def function_range(self, name: str):
        for s in self.m.symbols:
            if s.name == name and s.stype in ("func", "notype") and s.section and \
                    self.m.region_of(s.addr & ~1) is not None and not s.name.startswith("$"):
                start = s.addr & ~1
                sec = self.m.section_at(start)
                size = s.size or (sec.addr + sec.size - start if sec else 4)
                return sec, start, start + size
        raise EmulationError(f"{self.m.name}: no function named {name!r}")


def source_map(path: str, sec_addr, search_dirs: list[str] | None = None) -> dict[int, list[str]]:
    """address -> the source lines (`file:line: text`) whose code starts there, from the DWARF
    line tables (pyelftools). In a relocatable object every DW_LNE_set_address carries one
    R_ARM_ABS32 against the code section; the table is read unrelocated and each sequence is
    moved to where the loader put that section (`sec_addr`: ELF index -> final address).
    Files are looked up as DWARF names them, then by base name in `search_dirs`; a file that
    cannot be found shows its name and line number only."""
    import os
    from elftools.dwarf.constants import DW_LNE_set_address
    from elftools.elf.elffile import ELFFile
    from elftools.elf.relocation import RelocationSection
    from ..loader.dwarf_files import file_names
    from io import BytesIO
    from ..kernel.kofile import read_module
    with BytesIO(read_module(path)) as f:
        elf = ELFFile(f)
        if not elf.has_dwarf_info():
            return {}
        dwarf = elf.get_dwarf_info(relocate_dwarf_sections=False)
        symtab = elf.get_section_by_name(".symtab")
        fixups = []                    # final base of each set_address, in file order
        for sec in elf.iter_sections():
            if isinstance(sec, RelocationSection) and sec.name == ".rel.debug_line":
                for rel in sorted(sec.iter_relocations(), key=lambda r: r["r_offset"]):
                    sym = symtab.get_symbol(rel["r_info_sym"])
                    shndx = sym["st_shndx"]
                    if not isinstance(shndx, int) or not (elf.get_section(shndx)["sh_flags"] & 0x2):
                        continue      # header strings (.debug_line_str), not code addresses
                    fixups.append(int(sec_addr[shndx]) + sym["st_value"])
        rows: list[tuple[int, str, int]] = []
        k = -1
        for cu in dwarf.iter_CUs():
            lp = dwarf.line_program_for_CU(cu)
            if lp is None:
                continue
            names = file_names(lp, cu)            # the include directories of the line program
            base = None
            for e in lp.get_entries():
                if e.is_extended and e.command == DW_LNE_set_address:
                    k += 1
                    base = fixups[k] - e.args[0] if k < len(fixups) else None
                st = e.state
                if st is None or base is None or st.end_sequence:
                    continue
                if st.file in names:
                    rows.append(((base + st.address) & 0xFFFFFFFF, names[st.file], st.line))
    cache: dict[str, list[str] | None] = {}

    def text(fname: str) -> list[str] | None:
        if fname not in cache:
            cands = [fname] + [os.path.join(d, os.path.basename(fname)) for d in (search_dirs or [])]
            cache[fname] = None
            for c in cands:
                if os.path.isfile(c):
                    with open(c, encoding="utf-8", errors="replace") as fh:
                        cache[fname] = fh.read().splitlines()
                    break
        return cache[fname]

    out: dict[int, list[str]] = {}
    last = None
    for addr, fname, line in rows:
        if (fname, line) == last or line == 0:
            continue
        last = (fname, line)
        src = text(fname)
        body = src[line - 1].rstrip() if src and line <= len(src) else "(source file not found)"
        out.setdefault(addr, []).append(f"{os.path.basename(fname)}:{line}: {body}")
    return out


def disassemble(module: LoadedModule, kernel=None, *, function: str | None = None,
                plt: bool = False, relocs=None, source: dict | None = None,
                max_lines: int | None = None) -> list[tuple[str, list[Line]]]:
    """[(header, lines)] per section (or for the one function). `relocs`: explain.RelocRow list
    (every relocation is then shown at its site, and .ARM.exidx* are listed as data); `source`:
    address -> source lines, from source_map(). `max_lines`: stop decoding after that many lines
    (later sections come back with no lines), so a big module's first lines cost what they cost."""
    d = Disassembler(module, kernel, relocs, source)
    if function:
        sec, lo, hi = d.function_range(function)
        return [(f"{function} in {sec.name} ({lo:#x}..{hi:#x})", d.section_lines(sec, lo, hi))]
    out = []
    left = max_lines
    for sec in d.sections(plt_only=plt):
        if left is not None and left <= 0:
            out.append((f"section {sec.name} ({sec.addr:#x}, {sec.size:#x} bytes)", []))
            continue
        d.limit = left
        lines = d.section_lines(sec)
        if left is not None:
            left -= len(lines)
        out.append((f"section {sec.name} ({sec.addr:#x}, {sec.size:#x} bytes)", lines))
    return out


def format_listing(module: LoadedModule, blocks, kernel=None) -> str:
    d_labels = {}
    for s in module.symbols:
        if s.stype in ("func", "object") and s.name:
            d_labels.setdefault(s.addr & ~1, s.name)
    out = [f"{module.name}: {module.path}", ""]
    for header, lines in blocks:
        out.append(f"Disassembly of {header}:")
        for ln in lines:
            lab = ln.label or d_labels.get(ln.addr)
            if lab:
                out.append("")
                out.append(f"{ln.addr:08x} <{lab}>:")
            out.append(ln.format())
        out.append("")
    return "\n".join(out)
