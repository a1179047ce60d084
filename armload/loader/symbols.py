"""Stage 2: resolve undefined symbols (resolve_symbol/check_version) and compute every
symbol's final value (simplify_symbols)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..constants import SHN_COMMON, SHN_LORESERVE, SHN_UNDEF, STB_WEAK
from .elf import SYM_DTYPE, ObjectFile
from ..errors import EINVAL, ENOENT, ENOEXEC, SymbolError
from ..kernel.provider import Kernel
from ..kernel.provider import Export
from .model import IS_BRANCH, ResolvedSymbol
from .relocate import SymbolValues

GPL_COMPATIBLE = {"GPL", "GPL v2", "GPL and additional rights", "Dual BSD/GPL", "Dual MIT/GPL",
                  "Dual MPL/GPL"}
MODVERSION_ENTRY = 64          # struct modversion_info on 32-bit: u32 crc + char name[60]


@dataclass
class ExportTable:
    """A loaded module's __ksymtab/__ksymtab_gpl, searched after the kernel's."""
    module: str
    exports: dict[str, Export]


VERSION_DTYPE = np.dtype([("crc", "<u4"), ("name", "V60")])


def versions_table(obj: ObjectFile) -> dict[str, int] | None:
    """__versions as check_version() scans it: the first entry of a name wins. The section
    found by find_sec (elf.py checked its bytes lie in the file, NOBITS or not)."""
    if not obj.versions_index:
        return None
    sec = obj.sections[obj.versions_index]
    n = sec.sh_size // MODVERSION_ENTRY
    if not n:
        return {}
    tab = np.frombuffer(obj.data, VERSION_DTYPE, count=n, offset=sec.sh_offset)
    out: dict[str, int] = {}
    for crc, name in zip(tab["crc"].tolist(), tab["name"].tolist()):
        out.setdefault(name.split(b"\0", 1)[0].decode("utf-8", "replace"), crc)
    return out


def data_symbols(obj: ObjectFile) -> set[int]:
    """Symbol indices only ever used as data (never branched to, not just R_ARM_NONE)."""
    data: set[int] = set()
    code: set[int] = set()
    for rel in obj.rels.values():
        ri = rel["r_info"]
        t = ri & np.uint32(0xFF)
        sel = IS_BRANCH[t]
        code.update((ri[sel] >> np.uint32(8)).tolist())
        data.update((ri[~sel & (t != 0)] >> np.uint32(8)).tolist())
    return data - code


def gpl_ok(obj: ObjectFile) -> bool:
    lic = (obj.modinfo.get("license") or [""])[0]
    return lic in GPL_COMPATIBLE or not obj.is_module


def check_modstruct_version(obj: ObjectFile, kernel: Kernel, versions: dict[str, int] | None) -> None:
    """check_modstruct_version() (kernel/module/version.c): the module's CRC of module_layout against
    the kernel's, -ENOEXEC on a mismatch. load_module runs it before check_modinfo and before any
    allocation, so a module of another kernel is refused with these words first."""
    ml = kernel.exports.get("module_layout")
    if ml is None or ml.crc is None or versions is None:
        return
    got = versions.get("module_layout")
    if got is not None and got != ml.crc:
        raise SymbolError(f"{obj.name}: disagrees about version of symbol module_layout "
                          f"(module {got:#010x}, kernel {ml.crc:#010x})", file=obj.path,
                          errno=-ENOEXEC, symbol="module_layout")


def resolve_undefined(obj: ObjectFile, kernel: Kernel, providers: list[ExportTable], *,
                      modversions: bool = True) -> dict[str, ResolvedSymbol]:
    """resolve_symbol() for every SHN_UNDEF symbol: kernel ksymtab, kernel gpl, then modules
    newest first; CRC and namespace checks. Raises SymbolError listing every failure. module_layout's
    CRC is checked before, where load_module checks it (session._load_object: check_modstruct_version)."""
    syms = obj.symtab
    names = obj.sym_names
    versions = versions_table(obj) if modversions and obj.is_module else None
    datas = data_symbols(obj)
    gplok = gpl_ok(obj)
    imports_ns = set(obj.modinfo.get("import_ns", []))
    resolved: dict[str, ResolvedSymbol] = {}
    messages: list[str] = []
    last_err = 0
    undef = np.flatnonzero(syms["st_shndx"] == SHN_UNDEF).tolist()
    bind = (syms["st_info"] >> 4).tolist()
    mod = obj.name

    for i in undef:
        if i == 0:
            continue
        name = names[i]
        if name in resolved:
            continue          # an empty name too: 6.1 looks "" up and refuses "Unknown symbol  (err -2)"
        kind = "data" if i in datas else "func"
        exp, source = _find(name, kernel, providers, gplok)
        if exp is None:
            if bind[i] == STB_WEAK:
                resolved[name] = ResolvedSymbol(name, 0, "weak-undefined", kind)
                continue
            hint = ""
            if not gplok and _find(name, kernel, providers, True)[0] is not None:
                hint = " [exported GPL-only; this module's license is not GPL-compatible]"
            elif kernel.exporting_module(name):
                hint = f" [exported by module {kernel.exporting_module(name)}: load it first]"
            messages.append(f"{mod}: Unknown symbol {name} (err {-ENOENT}){hint}")
            last_err = -ENOENT
            continue
        checked = False
        if modversions and obj.is_module and exp.crc is not None:
            ok, err = _check_version(obj, mod, name, exp, versions, kernel.config.module_force_load)
            if err:
                messages.extend(err)
                last_err = -EINVAL
                continue
            checked = ok
        if exp.namespace and exp.namespace not in imports_ns:
            messages.append(f"{mod}: module uses symbol ({name}) from namespace {exp.namespace}, "
                            f"but does not import it.")
            messages.append(f"{mod}: Unknown symbol {name} (err {-EINVAL})")
            last_err = -EINVAL
            continue
        if source == "vmlinux":
            addr, source = kernel.address_of(exp, kind)
        else:
            addr = exp.addr
        resolved[name] = ResolvedSymbol(name, addr, source, kind, crc_checked=checked)
    if messages:
        raise SymbolError("\n".join(messages), file=obj.path, errno=last_err)
    return resolved


def _check_version(obj, mod: str, name: str, exp, versions, force_load: bool) -> tuple[bool, list[str]]:
    """check_version() for one import: (CRC checked, the kernel's lines when it refuses)."""
    if versions is None:
        if not force_load:
            return False, [f"{mod}: Unknown symbol {name} (err {-EINVAL}) [module has no __versions section; a "
                           f"MODVERSIONS kernel refuses it without MODULE_FORCE_LOAD]"]
        # try_to_force_load: CONFIG_MODULE_FORCE_LOAD (Debian: y) taints and resolves it unchecked
        warn = f"{mod}: no versions for imported symbols: kernel tainted."
        if warn not in obj.warnings:
            obj.warnings.append(warn)
        return False, []
    have = versions.get(name)
    if have is None:
        # upstream 6.1 warns once and lets it go; the Debian 6.1.0-50 kernel refuses (booted, its
        # load_module returns -EINVAL with these two lines), and it is the oracle
        return False, [f"{mod}: no symbol version for {name}", f"{mod}: Unknown symbol {name} (err {-EINVAL})"]
    if have != exp.crc:
        return False, [f"{mod}: disagrees about version of symbol {name} (module {have:#010x}, {exp.owner} "
                       f"{exp.crc:#010x})", f"{mod}: Unknown symbol {name} (err {-EINVAL})"]
    return True, []


def _find(name: str, kernel: Kernel, providers: list[ExportTable], gplok: bool) -> tuple[Export | None, str]:
    e = kernel.find_export(name)
    if e is not None and (gplok or not e.gpl) and not (kernel.default and name not in kernel.exports):
        return e, "vmlinux"
    for t in providers:                      # newest first
        m = t.exports.get(name)
        if m is not None and (gplok or not m.gpl):
            return m, f"module:{t.module}"
    if e is not None and (gplok or not e.gpl):   # the built-in kernel simulates what no module exports;
        return e, "vmlinux"                      # a GPL-only one still not for a non-GPL module (case 161)
    return None, ""


def symbol_values(obj: ObjectFile, sec_addr: np.ndarray, resolved: dict[str, ResolvedSymbol]) -> SymbolValues:
    """simplify_symbols(): final st_value per symbol index; the extra last entry is the raw
    symbol the kernel reads when a relocation names index == symcount."""
    syms = obj.symtab
    shndx = syms["st_shndx"].astype(np.int64)
    value = syms["st_value"].astype(np.int64)
    names = obj.sym_names
    common = np.flatnonzero(shndx == SHN_COMMON)
    common = [i for i in common.tolist() if not names[i].startswith("__gnu_lto")]
    if common:
        raise SymbolError(f"{obj.name}: please compile with -fno-common (common symbol "
                          f"'{names[common[0]]}')", file=obj.path, errno=-ENOEXEC, symbol=names[common[0]])
    regular = (shndx != SHN_UNDEF) & (shndx < SHN_LORESERVE)
    regular[:1] = False
    out = value.copy()
    out[regular] = value[regular] + sec_addr[shndx[regular]]
    for i in np.flatnonzero(shndx == SHN_UNDEF).tolist():
        if i == 0:
            continue
        r = resolved.get(names[i])
        out[i] = r.addr if r is not None else 0
    # SHN_ABS and SHN_LIVEPATCH keep their value.
    phantom = _phantom(obj)
    vals = np.concatenate([out & 0xFFFFFFFF, [phantom["st_value"]]]).astype(np.uint32)
    stype = np.concatenate([syms["st_info"] & 0xF, [phantom["st_info"] & 0xF]]).astype(np.uint8)
    return SymbolValues(value=vals, stype=stype, names=list(names) + [_phantom_name(obj, phantom)])


def _phantom(obj: ObjectFile):
    st = obj.sections[obj.symtab_index]
    off = st.sh_offset + st.sh_size
    raw = obj.data[off:off + SYM_DTYPE.itemsize]
    raw = raw + bytes(SYM_DTYPE.itemsize - len(raw))
    return np.frombuffer(raw, SYM_DTYPE)[0]


def _phantom_name(obj: ObjectFile, ph) -> str:
    off = int(ph["st_name"])
    end = obj.strtab.find(b"\0", off) if off < len(obj.strtab) else -1
    return obj.strtab[off:end].decode("utf-8", "replace") if end >= 0 else ""


__all__ = ["ExportTable", "check_modstruct_version", "resolve_undefined", "symbol_values", "versions_table"]
