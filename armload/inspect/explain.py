"""One relocation, step by step: the row, its place in the kernel's sort, S, A, P, the formula,
the value, the range check, the decision and the instruction before and after.

Nothing here re-derives the loader's arithmetic: addends are decoded and words encoded with
armload/loader/relocate.py's codecs and table rows (RELOCS/spec_for), symbol values come from
armload/loader/symbols.py's symbol_values and the application order from armload/loader/plt.py's count, the
same functions the loader runs. The "after" word is read back from the loaded module, and the
explanation re-encodes it from its own S/A/P to show (and check) that the numbers agree.
"""
from __future__ import annotations

import struct
from dataclasses import asdict, dataclass, field

import numpy as np

from ..constants import (SHF_ALLOC, SHT_NOBITS, SHT_REL, STT_FUNC, STT_SECTION, THUMB_BRANCHES, R,
                        reloc_name)
from ..loader.elf import ObjectFile, read_object
from ..errors import ArmloadError, RelocationError
from ..loader.layout import PERCPU_SECTION, TEMP_COPY_BASE
from ..loader.model import LoadedModule
from ..loader.relocate import (RELOCS, arm_mov_decode, hash_x, prel31_decode, s32, spec_for, thm_mov_decode)
from ..loader.symbols import symbol_values

M32 = 0xFFFFFFFF

# The formula of each type (AAELF32 notation: S symbol, A addend, P place, T Thumb bit).
FORMULAS = {
    R.R_ARM_NONE: "nothing is written",
    R.R_ARM_ABS32: "(S + A) | T",
    R.R_ARM_TARGET1: "(S + A) | T  (treated as ABS32 by the kernel)",
    R.R_ARM_REL32: "((S + A) | T) - P",
    R.R_ARM_PC24: "((S + A) | T) - P   (24-bit word offset, +-32 MiB)",
    R.R_ARM_CALL: "((S + A) | T) - P   (bl: 24-bit word offset, +-32 MiB)",
    R.R_ARM_JUMP24: "((S + A) | T) - P   (b: 24-bit word offset, +-32 MiB)",
    R.R_ARM_V4BX: "mov pc, Rm replaces bx Rm (no symbol)",
    R.R_ARM_PREL31: "((S + A) | T) - P   (31-bit signed, +-1 GiB)",
    R.R_ARM_MOVW_ABS_NC: "(S + A) & 0xffff",
    R.R_ARM_MOVT_ABS: "(S + A) >> 16",
    R.R_ARM_MOVW_PREL_NC: "(S + A - P) & 0xffff",
    R.R_ARM_MOVT_PREL: "(S + A - P) >> 16",
    R.R_ARM_ALU_PC_G0_NC: "G0(S + A - P): first 8-bit rotated chunk",
    R.R_ARM_ALU_PC_G1_NC: "G1(S + A - P): second 8-bit rotated chunk",
    R.R_ARM_LDR_PC_G2: "G2(S + A - P): remainder after two chunks, |v| <= 0xfff",
    R.R_ARM_THM_CALL: "((S + A) | T) - P   (bl: 25-bit halfword offset, +-16 MiB)",
    R.R_ARM_THM_JUMP24: "((S + A) | T) - P   (b.w: 25-bit halfword offset, +-16 MiB)",
    R.R_ARM_THM_MOVW_ABS_NC: "(S + A) & 0xffff",
    R.R_ARM_THM_MOVT_ABS: "(S + A) >> 16",
    R.R_ARM_THM_MOVW_PREL_NC: "(S + A - P) & 0xffff",
    R.R_ARM_THM_MOVT_PREL: "(S + A - P) >> 16",
}
_DATA_TYPES = {R.R_ARM_ABS32, R.R_ARM_TARGET1, R.R_ARM_REL32, R.R_ARM_PREL31, R.R_ARM_NONE}
_THUMB_TYPES = {t for t, s in RELOCS.items() if s.thumb}


@dataclass
class RelocRow:
    """One REL entry as readelf -r shows it, with where it lands."""
    relsec: int               # ELF index of the .rel.* section
    relsec_name: str
    index: int                # entry number in the file (readelf order)
    position: int             # entry number in the order the kernel applies it (after its sort)
    target_section: int
    target_name: str
    r_offset: int
    r_info: int
    rtype: int
    type_name: str
    sym: int
    sym_name: str             # section symbols: the section's name, as readelf prints it
    sym_value: int            # st_value in the file (readelf's Sym.Value)
    place: int                # P
    S: int                    # symbol value after simplify_symbols
    applied: bool             # the target is an ALLOC section the loader relocates


@dataclass
class Explanation:
    """One relocation explained: its row, ISA, addend, result and the kernel's reasoning."""

    row: RelocRow
    isa: str                  # arm | thumb | data
    A: int
    A_note: str
    formula: str
    value: int | None         # the formula's result before encoding (branches: the offset)
    range: tuple[int, int] | None   # accepted [lo, hi) for value, None when unchecked
    in_range: bool | None
    decision: str             # direct | veneer | applied | refused | not applied
    message: str              # the kernel's error line when refused
    plt_slot: int             # veneer address (0 when direct)
    target: int | None        # branches: where control must arrive (PC bias removed)
    before: bytes
    after: bytes | None
    before_asm: str
    after_asm: str
    consistent: bool | None   # re-encoding S/A/P with relocate.py's codecs gives `after`
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["before"] = self.before.hex()
        d["after"] = self.after.hex() if self.after is not None else None
        d["range"] = list(self.range) if self.range else None
        return d


# --- where everything is --------------------------------------------------------------------
def section_addresses(obj: ObjectFile, mod: LoadedModule) -> np.ndarray:
    """Final sh_addr per section, as the loader's Layout.addr_of() gave it."""
    placed = {s.index: s.addr for s in mod.sections}
    percpu = next((r.base for r in mod.regions if r.name == "percpu"), None)
    out = []
    for s in obj.sections:
        if s.index in placed:
            out.append(placed[s.index])
        elif s.name == PERCPU_SECTION and percpu is not None:
            out.append(percpu)
        else:
            out.append(TEMP_COPY_BASE + s.sh_offset)
    return np.array(out, dtype=np.int64)


def kernel_orders(obj: ObjectFile, config) -> dict[int, np.ndarray]:
    """REL section -> application order, from the counting pass the loader runs."""
    from ..loader.plt import plan_plts
    return plan_plts(obj, config).orders


def relocation_rows(obj: ObjectFile, sec_addr: np.ndarray, syms, config,
                    orders: dict[int, np.ndarray] | None = None) -> list[RelocRow]:
    """Every REL entry of the object, in file order per section."""
    orders = kernel_orders(obj, config) if orders is None else orders
    rows = []
    st_value = obj.symtab["st_value"].tolist()
    st_info = obj.symtab["st_info"].tolist()
    st_shndx = obj.symtab["st_shndx"].tolist()
    names = obj.sym_names
    for relidx, rel in sorted(obj.rels.items()):
        rs = obj.sections[relidx]
        if rs.sh_type != SHT_REL or rs.sh_info >= len(obj.sections):
            continue
        dst = obj.sections[rs.sh_info]
        applied = bool(dst.sh_flags & SHF_ALLOC)
        order = orders.get(relidx)
        pos = np.empty(len(rel), dtype=np.int64)
        pos[order if order is not None else np.arange(len(rel))] = np.arange(len(rel))
        for i, (off, info) in enumerate(rel.tolist()):
            sym = info >> 8
            if sym < len(names):
                nm = names[sym]
                if not nm and st_info[sym] & 0xF == STT_SECTION and st_shndx[sym] < len(obj.sections):
                    nm = obj.sections[st_shndx[sym]].name
                sv = st_value[sym]
            else:
                nm, sv = "", 0
            S = int(syms.value[min(sym, len(syms.value) - 1)]) if sym < len(syms.value) else 0
            rows.append(RelocRow(relidx, rs.name, i, int(pos[i]), dst.index, dst.name, off, info, info & 0xFF,
                                 reloc_name(info & 0xFF), sym, nm, sv, (int(sec_addr[dst.index]) + off) & M32, S,
                                 applied))
    return rows


# --- one relocation -------------------------------------------------------------------------
def _isa(rtype: int) -> str:
    if rtype in _THUMB_TYPES:
        return "thumb"
    if rtype in _DATA_TYPES:
        return "data"
    return "arm"


def _word(b: bytes) -> int:
    return struct.unpack("<I", b)[0]


def disasm_word(raw: bytes, addr: int, isa: str) -> str:
    """capstone's text for the 4 bytes at addr (`.word` for data)."""
    if isa == "data":
        return f".word {_word(raw):#010x}"
    from capstone import CS_ARCH_ARM, CS_MODE_ARM, CS_MODE_THUMB, Cs
    md = Cs(CS_ARCH_ARM, CS_MODE_THUMB if isa == "thumb" else CS_MODE_ARM)
    got = list(md.disasm(raw, addr, 1))
    if not got:
        return f".inst {_word(raw):#010x} (undefined)"
    i = got[0]
    return f"{i.mnemonic} {i.op_str}".strip()


def _addend(rtype: int, w: int) -> tuple[int, str]:
    a = np.array([w], dtype=np.uint32)
    spec = RELOCS.get(rtype)
    if spec is not None and spec.branch:
        A = int(spec.decode(a)[0])
        note = f"decoded from the branch's imm field; includes the PC bias -{spec.bias} " \
               f"(the CPU reads PC as P+{spec.bias})"
        if A == -spec.bias:
            note = f"-{spec.bias}: only the PC bias (the CPU reads PC as P+{spec.bias}), the call targets S itself"
        return A, note
    if rtype in (R.R_ARM_ABS32, R.R_ARM_TARGET1, R.R_ARM_REL32):
        return w if w < 0x80000000 else w - (1 << 32), "the word at the place"
    if rtype == R.R_ARM_PREL31:
        return int(prel31_decode(a)[0]), "the low 31 bits of the word, sign-extended"
    if rtype in (R.R_ARM_MOVW_ABS_NC, R.R_ARM_MOVT_ABS, R.R_ARM_MOVW_PREL_NC, R.R_ARM_MOVT_PREL):
        return int(arm_mov_decode(a)[0]), "imm16 (imm4:imm12) of the instruction, sign-extended"
    if rtype in (R.R_ARM_THM_MOVW_ABS_NC, R.R_ARM_THM_MOVT_ABS, R.R_ARM_THM_MOVW_PREL_NC,
                 R.R_ARM_THM_MOVT_PREL):
        return int(thm_mov_decode(a)[0]), "imm16 (imm4:i:imm3:imm8) of the instruction, sign-extended"
    if rtype in (R.R_ARM_ALU_PC_G0_NC, R.R_ARM_ALU_PC_G1_NC):
        rot = (w & 0xF00) >> 7
        v = w & 0xFF
        v = ((v >> rot) | (v << (32 - rot))) & M32 if rot else v
        return (-v if w & (1 << 22) else v), "the rotated 8-bit immediate (negative for sub)"
    if rtype == R.R_ARM_LDR_PC_G2:
        v = w & 0xFFF
        return (v if w & (1 << 23) else -v), "the 12-bit offset (U bit gives the sign)"
    return 0, "none"


def explain_row(row: RelocRow, obj: ObjectFile, mod: LoadedModule | None, syms, config,
                error: ArmloadError | None = None) -> Explanation:
    dst = obj.sections[row.target_section]
    isa = _isa(row.rtype)
    at = dst.sh_offset + row.r_offset
    if dst.sh_type != SHT_NOBITS and row.r_offset + 4 <= dst.sh_size and at + 4 <= len(obj.data):
        before = obj.data[at:at + 4]      # (an SHT_NULL target may lie outside the file: issue 21)
    else:
        before = bytes(4)
    w = _word(before)
    A, A_note = _addend(row.rtype, w)
    P, S = row.place, row.S
    formula = FORMULAS.get(row.rtype, "unknown to the kernel")
    ex = Explanation(row, isa, A, A_note, formula, None, None, None, "applied", "", 0, None, before, None,
                     disasm_word(before, P, isa), "", None)
    if not row.applied:
        ex.decision = "not applied"
        ex.notes.append(f"{row.target_name} is not SHF_ALLOC: the kernel never copies it, so it skips "
                        f"this table")
        return ex
    refused_here = (error is not None and error.context.get("section") == row.relsec
                    and error.context.get("reloc") == row.position)
    rs = mod.resolved.get(row.sym_name) if mod is not None and row.sym_name else None
    if rs is not None and rs.source == "simulated":
        ex.notes.append(f"S is a simulated kernel address: no real address of {row.sym_name} is known (give "
                        f"--kernel System.map or a vmlinuz for real ones)")
    if error is not None and not refused_here:
        ex.notes.append(f"the load was refused at another entry ({error}); the kernel stops there, so nothing "
                        f"computed here is written")
    if mod is not None:
        try:
            ex.after = mod.read(P, 4)
        except ValueError:
            ex.after = None
        fin = mod.finalized
        replaced = getattr(fin, "ftrace_old", {}).get(P)
        moved = getattr(fin, "relocated", {}).get(P)
        if replaced is not None:        # what relocation wrote; memory now holds ftrace's NOP
            ex.notes.append(f"ftrace_module_init then replaced this call by the ftrace NOP "
                            f"({disasm_word(ex.after, P, isa)}, {ex.after.hex(' ')}) before init ran")
            ex.after = replaced
        elif moved is not None and ex.after is not None:
            ex.notes.append(f"load_module rewrote this word after relocation (a table it sorts, a stub it "
                            f"patches, a key it links): memory now holds {ex.after.hex(' ')}")
            ex.after = moved
        if ex.after is not None:
            ex.after_asm = disasm_word(ex.after, P, isa)
    spec = spec_for(row.rtype, config)
    if spec is None:
        ex.decision = "refused"
        ex.message = str(error) if refused_here else f"{obj.name}: unknown relocation: {row.rtype}"
        if spec is None and RELOCS.get(row.rtype) is not None and RELOCS[row.rtype].thumb:
            ex.notes.append("a Thumb-2 relocation: this kernel is not CONFIG_THUMB2_KERNEL (--thumb2)")
        return ex
    wa = np.array([w], dtype=np.uint32)
    Sa = np.array([S], dtype=np.int64)
    Pa = np.array([P], dtype=np.int64)
    if spec.branch:
        off = int(s32(np.array([A + S - P]))[0])
        ex.value = off
        ex.range = (-spec.limit + 1, spec.limit)
        ex.in_range = -spec.limit < off < spec.limit
        ex.target = (off + P + spec.bias) & M32
        thumb = row.rtype in THUMB_BRANCHES
        st = int(syms.stype[min(row.sym, len(syms.stype) - 1)])
        interwork = (st == STT_FUNC and not S & 1) if thumb else bool(S & 3)
        if interwork:
            ex.decision = "refused"
            d = "(Thumb -> ARM)" if thumb else "(ARM -> Thumb)"
            ex.message = str(error) if refused_here else \
                f"{obj.name}: section {row.relsec} reloc {row.position} sym '{row.sym_name}': unsupported " \
                f"interworking call {d}"
            return ex
        final = off
        if ex.in_range:
            ex.decision = "direct"
        elif mod is not None and len(mod.branches):
            hit = mod.branches[(mod.branches["place"] == P) & (mod.branches["section"] == row.target_section)]
            slot = int(hit["plt"][0]) if len(hit) else 0
            if slot:
                ex.decision = "veneer"
                ex.plt_slot = slot
                final = int(s32(np.array([slot - P - spec.bias]))[0])
                ent = next((e for e in mod.plt_entries if e.addr == slot), None)
                region = ent.plt if ent else "?"
                ex.notes.append(f"out of range: get_module_plt() gave the {'.init.plt' if region == 'init' else '.plt'} "
                                f"slot {slot:#x} ({'ldr.w' if config.thumb2 else 'ldr'} pc, [pc, #{config.plt_stride - (4 if config.thumb2 else 8):#x}] "
                                f"loading {ex.target:#x}); the branch now goes there: offset {final:#x}")
        else:
            ex.decision = "refused"
            ex.message = str(error) if refused_here else \
                f"{obj.name}: section {row.relsec} reloc {row.position} sym '{row.sym_name}': relocation " \
                f"{row.rtype} out of range ({hash_x(P)} -> {hash_x(S)})"
        if ex.after is not None and ex.decision != "refused":
            enc = int(spec.encode(wa, np.array([final], dtype=np.int64))[0])
            ex.consistent = enc == _word(ex.after)
    else:
        new, bad = spec.apply(wa, Sa, Pa)
        if row.rtype in (R.R_ARM_ABS32, R.R_ARM_TARGET1):
            ex.value = (S + A) & M32
        elif row.rtype in (R.R_ARM_REL32, R.R_ARM_PREL31):
            ex.value = int(s32(np.array([S + A - P]))[0])
        elif "MOV" in row.type_name:
            v = int(s32(np.array([S + A - (P if "PREL" in row.type_name else 0)]))[0])
            ex.value = (v >> 16) & 0xFFFF if "MOVT" in row.type_name else v & 0xFFFF
        if row.rtype == R.R_ARM_PREL31:
            ex.range = (-0x40000000, 0x40000000)
        if bad is not None:
            ex.in_range = not bool(bad[0])
            if not ex.in_range:
                ex.decision = "refused"
                ex.message = str(error) if refused_here else \
                    f"{obj.name}: section {row.relsec} reloc {row.position} sym '{row.sym_name}': relocation " \
                    f"{row.rtype} out of range ({hash_x(P)} -> {hash_x(S)})"
                return ex
        if ex.after is not None:
            ex.consistent = int(new[0]) == _word(ex.after)
            if not ex.consistent:
                ex.notes.append("another relocation rewrote this place later (the kernel applies entries "
                                "in order)")
    return ex


# --- entry points ---------------------------------------------------------------------------
@dataclass
class Context:
    """What explaining a module's relocations needs: the object, the loaded module, symbols, rows."""

    obj: ObjectFile
    mod: LoadedModule | None
    syms: object
    rows: list[RelocRow]
    error: ArmloadError | None
    config: object = None


def context_for(session, path: str, *, object: bool = False) -> Context:
    """Load `path` into `session`; when a relocation is refused, lay the module out again the
    same way (the allocator was released) so the refused entry can still be explained."""
    from ..loader.session import _ensure_plt_sections
    from ..loader.layout import layout_module
    from ..loader.plt import plan_plts
    from ..loader.symbols import resolve_undefined
    config = session.config
    obj = read_object(path, object=object)
    _ensure_plt_sections(obj, config)
    try:
        mod = session.load(path, object=object)
        error = None
    except RelocationError as e:
        mod, error = None, e
    plan = plan_plts(obj, config)
    if mod is not None:
        sec_addr = section_addresses(obj, mod)
        resolved = mod.resolved
    else:
        layout = layout_module(obj, config, plan.sizes if config.module_plts else {}, session.allocator)
        try:
            sec_addr = np.array([layout.addr_of(i) for i in range(len(layout.sections))], dtype=np.int64)
        finally:
            for r in layout.regions:
                session.allocator.free(r.base)
            if layout.percpu is not None:
                session.allocator.free_percpu(layout.percpu.addr)
        resolved = resolve_undefined(obj, session.kernel, session.export_tables, modversions=session.modversions)
    syms = symbol_values(obj, sec_addr, resolved)
    rows = relocation_rows(obj, sec_addr, syms, config, plan.orders)
    return Context(obj, mod, syms, rows, error, config)


def select(ctx: Context, *, reloc: str | None = None, symbol: str | None = None,
           site: int | None = None) -> list[RelocRow]:
    if reloc is not None:
        sec, _, idx = reloc.rpartition(":")
        try:
            i = int(idx, 0)
        except ValueError:
            raise ArmloadError(f"bad --reloc {reloc!r}: use SECTION:INDEX, e.g. .rel.text:3 or 5:3") from None
        got = [r for r in ctx.rows if (r.relsec_name == sec or str(r.relsec) == sec or r.target_name == sec)
               and r.index == i]
        if not got:
            tables = sorted({f"{r.relsec_name} ({sum(1 for x in ctx.rows if x.relsec == r.relsec)} entries)"
                             for r in ctx.rows})
            raise ArmloadError(f"{ctx.obj.name}: no relocation {reloc} (tables: {', '.join(tables)})")
        return got
    if symbol is not None:
        got = [r for r in ctx.rows if r.sym_name == symbol]
        if not got:
            raise ArmloadError(f"{ctx.obj.name}: no relocation against symbol {symbol!r}")
        return got
    if site is not None:
        got = [r for r in ctx.rows if r.applied and r.place <= site < r.place + 4]
        if not got:
            raise ArmloadError(f"{ctx.obj.name}: no relocation at {site:#x}")
        return got
    raise ArmloadError("give one of --reloc SECTION:INDEX, --symbol NAME, --site ADDR")


def explain_all(ctx: Context, rows: list[RelocRow]) -> list[Explanation]:
    return [explain_row(r, ctx.obj, ctx.mod, ctx.syms, ctx.config, ctx.error) for r in rows]


def explain_module(session, path: str, *, object: bool = False, **sel) -> tuple[Context, list[Explanation]]:
    ctx = context_for(session, path, object=object)
    rows = select(ctx, **sel)
    return ctx, [explain_row(r, ctx.obj, ctx.mod, ctx.syms, session.config, ctx.error) for r in rows]


def format_explanation(ex: Explanation) -> str:
    r = ex.row
    hexw = lambda v: f"{v & M32:08x}"   # noqa: E731
    out = [f"relocation {r.relsec_name}:{r.index} (section {r.relsec}, entry {r.index} in the file, "
           f"applied {'as entry ' + str(r.position) if r.applied else 'never'}"
           + (" after the kernel's sort by (type, symbol)" if r.position != r.index else "") + ")",
           "  readelf -r:  Offset    Info      Type               Sym.Value  Sym.Name",
           f"               {hexw(r.r_offset)}  {hexw(r.r_info)}  {r.type_name:<17}  {hexw(r.sym_value)}   {r.sym_name}",
           f"  target:      {r.target_name}+{r.r_offset:#x}",
           f"  formula:     {ex.formula}",
           f"  S = {r.S:#010x}  ({r.sym_name or 'symbol ' + str(r.sym)} after resolution"
           + (", Thumb bit set" if r.S & 1 else "") + ")",
           f"  A = {ex.A:#x}  ({ex.A_note})" if ex.A >= 0 else f"  A = -{-ex.A:#x}  ({ex.A_note})",
           f"  P = {r.place:#010x}  ({r.target_name} at {r.place - r.r_offset:#010x} + {r.r_offset:#x})"]
    if ex.value is not None:
        v = ex.value
        out.append(f"  value = {v:#x}" if v >= 0 else f"  value = -{-v:#x}")
    if ex.target is not None:
        out.append(f"  branch target = value + P + bias = {ex.target:#010x}")
    if ex.range is not None:
        lo, hi = ex.range
        rng = f"-{hi:#x} < value < {hi:#x}" if lo == 1 - hi else \
            f"{'-' if lo < 0 else ''}{abs(lo):#x} <= value < {hi:#x}"
        out.append(f"  range: {rng}: " + ("in range" if ex.in_range else "OUT OF RANGE"))
    out.append(f"  decision: {ex.decision}" + (f" - {ex.message}" if ex.message else ""))
    if ex.plt_slot:
        out.append(f"  veneer: {ex.plt_slot:#010x}")
    out.append(f"  before: {ex.before.hex(' ')}   {ex.before_asm}")
    if ex.after is not None:
        out.append(f"  after:  {ex.after.hex(' ')}   {ex.after_asm}")
    if ex.consistent is not None:
        out.append("  check: re-encoding S, A, P with the relocation table's codec gives the loaded bytes"
                   if ex.consistent else "  check: MISMATCH between the loaded bytes and S, A, P re-encoded")
    for n in ex.notes:
        out.append(f"  note: {n}")
    return "\n".join(out)
