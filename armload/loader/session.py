"""The pipeline: parse -> count PLTs -> lay out -> resolve -> relocate, for one module or a
sequence of modules loaded into one simulated kernel (a Session)."""
from __future__ import annotations

import struct
import time

import numpy as np

from ..kernel.config import DEBIAN_ARMMP, KernelConfig
from ..constants import (SHF_ALLOC, SHF_EXECINSTR, SHN_UNDEF, SHT_NOBITS, SHT_PROGBITS, SHT_REL, SHT_RELA,
                        STB_GLOBAL, STB_LOCAL, STB_WEAK, reloc_name)
from .elf import ObjectFile, Section, read_object
from .this_module import of_object as this_module_layout
from ..errors import (EBUSY, EEXIST, ENOENT, ENOEXEC, ArmloadError, ElfFormatError, LayoutError, PltError,
                     RelocationError)
from ..kernel.provider import Kernel
from .layout import TEMP_COPY_BASE, Layout, ModuleAllocator, layout_module
from ..kernel.provider import Export
from .model import (BRANCH_DTYPE, IS_THUMB_BRANCH, LoadedModule, LoadedSection, MemRegion, ModuleSymbol, PltEntry)
from . import finalize
from .plt import PltSection, heapsort_order, plan_plts
from .relocate import PltRouter, SectionTarget, apply_rel_section, overlap_batches
from .symbols import ExportTable, check_modstruct_version, resolve_undefined, symbol_values, versions_table
from .validity import check_thumb2_image

_STYPES = {0: "notype", 1: "object", 2: "func", 3: "section", 4: "file"}
_BINDS = {STB_LOCAL: "local", STB_GLOBAL: "global", STB_WEAK: "weak"}
KSYM_SIZE = 12            # struct kernel_symbol on ARM32: value, name, namespace


class Session:
    """A simulated kernel with the modules loaded into it so far."""

    def __init__(self, kernel: Kernel | None = None, config: KernelConfig = DEBIAN_ARMMP,
                 placement: str | int = "window", *, modversions: bool = True):
        self.config = config
        self.kernel = kernel if kernel is not None else Kernel.builtin(config)
        if config.thumb2 and self.kernel.image_path:
            check_thumb2_image(self.kernel.image_path)
        self.allocator = ModuleAllocator(config, placement)
        self.placement = placement
        self.modversions = modversions
        self.modules: list[LoadedModule] = []
        self.export_tables: list[ExportTable] = []      # newest first
        # kernel_word(addr) -> int | None: a word of the running kernel's memory (jump-label key
        # state); the booted kernel sets its own reader, else the image's initial data answers.
        self.kernel_word = _image_reader(self.kernel)
        # info->hdr of the next load: where the kernel's temporary copy of the .ko lies (symbols of
        # unallocated sections keep addresses in it); the booted kernel sets its real buffer.
        self.temp_copy_base = TEMP_COPY_BASE
        self.ftrace_disabled = False                    # ftrace_bug() kills ftrace for every later module

    def load(self, path: str, data: bytes | None = None, *, object: bool = False) -> LoadedModule:
        """Load one module. object=True also accepts a plain relocatable object (.o, no
        .gnu.linkonce.this_module), which the kernel itself refuses."""
        t0 = time.perf_counter()
        sm = self.config.struct_module
        obj = read_object(path, data, object=object, struct_module_size=sm.size if sm else None,
                          size_exact=self.config.version >= (6, 4))
        t_parse = time.perf_counter()
        if any(m.name == obj.name for m in self.modules):
            raise ArmloadError(f"{obj.name}: module is already loaded", file=path, errno=-EEXIST)
        mod = _load_object(obj, self)
        mod.timings["parse"] = t_parse - t0
        mod.timings["total"] = time.perf_counter() - t0
        self.modules.append(mod)
        self.export_tables.insert(0, ExportTable(mod.name, {e.name: e for e in mod.exports}))
        return mod


    def forget(self, mod: LoadedModule) -> None:
        """The kernel freed the module without delete_module (load_module failed after forming it,
        or its init returned an error): its exports and memory are gone, nobody can use them."""
        self.modules.remove(mod)
        self.export_tables = [t for t in self.export_tables if t.module != mod.name]

    def unload(self, mod: LoadedModule) -> None:
        """delete_module(): the module's exports disappear and its memory is freed. Like the
        kernel, refuse while another loaded module uses one of its exports."""
        if mod not in self.modules:
            raise ArmloadError(f"{mod.name}: module is not loaded", file=mod.path, errno=-ENOENT)
        users = [m.name for m in self.modules if m is not mod and
                 any(r.source == f"module:{mod.name}" for r in m.resolved.values())]
        if users:
            raise ArmloadError(f"{mod.name}: module is in use by: {' '.join(users)}", file=mod.path,
                               errno=-EBUSY)
        self.modules.remove(mod)
        self.export_tables = [t for t in self.export_tables if t.module != mod.name]
        for r in mod.regions:
            if r.name == "percpu":
                self.allocator.free_percpu(r.base)
            elif not r.init:                 # init memory was released when the load finished
                self.allocator.free(r.base)


def load_module(path: str, *, kernel: Kernel | None = None, config: KernelConfig = DEBIAN_ARMMP,
                placement: str | int = "window", data: bytes | None = None, object: bool = False) -> LoadedModule:
    """Load one module into a fresh simulated kernel."""
    return Session(kernel, config, placement).load(path, data, object=object)


def check_modinfo(obj: ObjectFile, kernel: Kernel, modversions: bool) -> None:
    """check_modinfo()/same_magic(): with modversions the release (first word) may differ."""
    if kernel.vermagic is None or not obj.is_module:
        return
    have = (obj.modinfo.get("vermagic") or [None])[0]
    if have is None:
        raise ArmloadError(f"{obj.name}: no vermagic in .modinfo; the kernel refuses it without "
                           f"MODULE_FORCE_LOAD", file=obj.path, errno=-ENOEXEC)
    want = kernel.vermagic
    a, b = have, want
    if modversions and obj.versions_index:
        a, b = a.split(" ", 1)[-1], b.split(" ", 1)[-1]
    if a != b:
        raise ArmloadError(f"{obj.name}: version magic '{have}' should be '{want}'", file=obj.path,
                           errno=-ENOEXEC)


def _ensure_plt_sections(obj: ObjectFile, config: KernelConfig) -> None:
    """A .ko gets .plt/.init.plt from the module linker script; a plain .o gets them here."""
    if not config.module_plts:
        return
    names = {s.name for s in obj.sections}
    # v4.0 and 6.1 need both (v4.0: "sections missing"); the 2016 series merged them into one .plt
    want = [".plt"] if config.plt_algorithm == "sorted" else [".plt", ".init.plt"]
    missing = [n for n in want if n not in names]
    if not missing:
        return
    if obj.is_module:
        what = "module PLT section missing" if config.plt_algorithm == "sorted" else "module PLT section(s) missing"
        raise PltError(f"{obj.name}: {what} ({', '.join(missing)}; was it linked with the kernel's "
                       f"module.lds under CONFIG_ARM_MODULE_PLTS?)", file=obj.path)
    n = len(obj.sections)
    bad = next((s for s in obj.sections if s.sh_type == SHT_REL and s.sh_info >= n), None)
    if bad is not None:
        raise ElfFormatError(f"{obj.name}: section {bad.index} ({bad.name}): sh_info {bad.sh_info} >= e_shnum {n} "
                             f"would name armload's placeholder PLT section", file=obj.path, section=bad.index)
    for n in missing:
        obj.sections.append(Section(len(obj.sections), n, SHT_PROGBITS, SHF_ALLOC | SHF_EXECINSTR, 0, 0, 1,
                                    0, 0, 1, 0))
    obj.warnings.append(f"added placeholder {', '.join(missing)} as the module linker script would")


def _load_object(obj: ObjectFile, session: Session) -> LoadedModule:
    config = session.config
    if session.modversions and obj.is_module:      # load_module's order: module_layout, then the modinfo
        check_modstruct_version(obj, session.kernel, versions_table(obj))
    check_modinfo(obj, session.kernel, session.modversions)
    timings = {}
    t = time.perf_counter()
    _ensure_plt_sections(obj, config)
    plan = plan_plts(obj, config)
    timings["plt_count"] = time.perf_counter() - t

    t = time.perf_counter()
    layout = layout_module(obj, config, plan.sizes if config.module_plts else {}, session.allocator,
                           session.temp_copy_base)
    timings["layout"] = time.perf_counter() - t
    try:
        t = time.perf_counter()
        _check_export_versions(obj, session)
        resolved = resolve_undefined(obj, session.kernel, session.export_tables, modversions=session.modversions)
        sec_addr = np.array([layout.addr_of(i) for i in range(len(layout.sections))], dtype=np.int64)
        syms = symbol_values(obj, sec_addr, resolved)
        timings["resolve"] = time.perf_counter() - t

        t = time.perf_counter()
        mems, regions = _allocate_memory(obj, layout)
        plts = _plt_sections(layout, config, session.kernel)
        router = PltRouter(*(plts[k].plt if k in plts else None for k in ("core", "init")),
                           layout.within_init, config.plt_algorithm)
        counts, branches = _apply_all(obj, layout, plan, syms, mems, config, router)
        for name, sec in plts.items():
            p = layout.places[sec.index]
            name, base = _region_at(layout, p.addr)
            mems[name][0][p.addr - base:p.addr - base + sec.plt.size] = np.frombuffer(sec.plt.image(), dtype=np.uint8)
        timings["relocate"] = time.perf_counter() - t
        t = time.perf_counter()
        done = _finalize(obj, layout, regions, plts, config, session, syms, resolved)
        timings["finalize"] = time.perf_counter() - t
        mod = _build_module(obj, layout, regions, syms, resolved, plan, counts, branches, plts, config, session)
    except BaseException:
        for r in layout.regions:
            session.allocator.free(r.base)
        if layout.percpu is not None:
            session.allocator.free_percpu(layout.percpu.addr)
        raise
    mod.timings.update(timings)
    mod.finalized = done
    if done.ftrace_bug:
        mod.warnings.append(f"------------[ ftrace bug ]------------\n{done.ftrace_bug}\n"
                            f"ftrace is disabled for this and every later module (ftrace_kill)")
    # do_init_module frees the init allocation once init has run.
    for r in layout.regions:
        if r.init:
            session.allocator.free(r.base)
    return mod


class _PltSec:
    def __init__(self, index, plt):
        self.index = index
        self.plt = plt


def _plt_sections(layout: Layout, config: KernelConfig, kernel: Kernel) -> dict[str, _PltSec]:
    if not config.module_plts:
        return {}
    fixed: tuple[int, ...] = ()
    if config.plt_algorithm == "v6" and config.dynamic_ftrace:
        fixed = (_ftrace_addr(kernel, "ftrace_caller"), _ftrace_addr(kernel, "__gnu_mcount_nc"))
    out = {}
    names = (("core", ".plt"),) if config.plt_algorithm == "sorted" else (("core", ".plt"), ("init", ".init.plt"))
    for key, sname in names:
        idx = next((s.index for s in reversed(layout.sections) if s.name == sname), None)   # the last wins
        if idx is None or idx not in layout.places:
            continue
        p = layout.places[idx]
        out[key] = _PltSec(idx, PltSection(key, p.addr, p.size, config, fixed,
                                           ("ftrace_caller", "__gnu_mcount_nc") if fixed else ()))
    return out


def _ftrace_addr(kernel: Kernel, name: str) -> int:
    """FTRACE_ADDR / MCOUNT_ADDR: real when the kernel map knows them, else simulated."""
    a = kernel.lookup_address(name)
    if a is not None:
        return a
    e = kernel.find_export(name) or Export(name=name, addr=None)
    return kernel.address_of(e, "func")[0]


def _region_at(layout: Layout, addr: int) -> tuple[str, int]:
    """(name, base) of the allocation holding `addr`; the per-cpu area otherwise."""
    for r in layout.regions:
        if r.base <= addr < r.base + r.size:
            return r.name, r.base
    if layout.percpu is not None and layout.percpu.addr <= addr <= layout.percpu.addr + layout.percpu.size:
        return "percpu", layout.percpu.addr
    for r in layout.regions:              # an empty section placed exactly at the end of its allocation
        if addr == r.base + r.size:
            return r.name, r.base
    raise LayoutError(f"address {addr:#x} is in no allocation of this module")


def _allocate_memory(obj: ObjectFile, layout: Layout):
    """move_module(): zeroed allocations, ALLOC sections copied in (NOBITS stay zero)."""
    mems: dict[str, tuple[np.ndarray, bytearray]] = {}
    regions = []
    for r in layout.regions:
        buf = bytearray(r.size)
        mems[r.name] = (np.frombuffer(buf, dtype=np.uint8), buf)
        regions.append(MemRegion(r.name, r.base, r.size, buf, r.init))
    if layout.percpu is not None:
        size = (layout.percpu.size + 3) & ~3         # exact: modules' per-cpu areas may share a page
        buf = bytearray(size)
        mems["percpu"] = (np.frombuffer(buf, dtype=np.uint8), buf)
        regions.append(MemRegion("percpu", layout.percpu.addr, size, buf, False))
    for idx, p in layout.places.items():
        sec = layout.sections[idx]
        if sec.sh_type == SHT_NOBITS or p.size == 0:
            continue
        name, base = _region_at(layout, p.addr)
        off = p.addr - base
        mems[name][0][off:off + p.size] = np.frombuffer(obj.data, np.uint8, p.size, sec.sh_offset)
    if layout.percpu is not None:
        # percpu_modcopy() copies sh_size bytes from sh_addr in the temporary copy, NOBITS or not
        # (elf.py checked that they lie in the file).
        s = obj.sections[layout.percpu.index]
        mems["percpu"][0][:s.sh_size] = np.frombuffer(obj.data, np.uint8, s.sh_size, s.sh_offset)
    return mems, regions


def _apply_all(obj, layout, plan, syms, mems, config, router):
    counts: dict[int, int] = {}
    branches = []
    nsec = len(layout.sections)
    nsec = obj.e_shnum                    # apply_relocations: sh_info >= e_shnum is "not a valid relocation section"
    for sec in layout.sections:
        if sec.sh_type not in (SHT_REL, SHT_RELA) or sec.sh_info >= nsec:
            continue
        dst = layout.sections[sec.sh_info]
        if not (dst.sh_flags & SHF_ALLOC) or sec.sh_info not in layout.places:
            continue
        if sec.sh_type == SHT_RELA:
            raise RelocationError(f"module {obj.name}: REL relocation unsupported (section {sec.index} "
                                  f"{sec.name} is SHT_RELA; the ARM loader only takes SHT_REL)",
                                  file=obj.path, section=sec.index, section_name=sec.name)
        rel = obj.rels[sec.index]
        order = plan.orders.get(sec.index)
        if order is not None:
            rel = rel[order]
        p = layout.places[sec.sh_info]
        rname, rbase = _region_at(layout, p.addr)
        tgt = SectionTarget(dst.index, dst.name, p.addr, dst.sh_size, mems[rname][0],
                            p.addr - rbase)
        parts = [(a, rel[a:b]) for a, b in overlap_batches(rel["r_offset"], rel["r_info"])]
        for base_i, part in parts:
            res = apply_rel_section(obj.name, sec.index, sec.name, part["r_offset"], part["r_info"], tgt, syms,
                                    obj.symcount, config, router, obj.path, index_base=base_i,
                                    rows=None if order is None else order[base_i:base_i + len(part)])
            for k, v in res.counts.items():
                counts[k] = counts.get(k, 0) + v
            for rows in res.branches:
                arr = np.zeros(len(rows[0]), dtype=BRANCH_DTYPE)
                arr["section"] = dst.index
                for name, col in zip(("offset", "place", "rtype", "sym", "target", "plt"), rows):
                    arr[name] = col
                branches.append(arr)
    br = np.concatenate(branches) if branches else np.zeros(0, dtype=BRANCH_DTYPE)
    return counts, br


def _read_u32(regions: list[MemRegion], addr: int) -> int | None:
    for r in regions:
        if r.base <= addr and addr + 4 <= r.end:
            return struct.unpack_from("<I", r.data, addr - r.base)[0]
    return None


def _read_cstr(regions: list[MemRegion], addr: int, limit: int = 512) -> str | None:
    for r in regions:
        if r.base <= addr < r.end:
            o = addr - r.base
            end = r.data.find(b"\0", o, o + limit)
            return bytes(r.data[o:end if end >= 0 else o + limit]).decode("utf-8", "replace")
    return None


def _build_module(obj, layout, regions, syms, resolved, plan, counts, branches, plts, config, session):
    exports = _read_exports(obj, layout, regions, session)      # complete_formation may still refuse
    sections = []
    by_region = {r.name: r for r in regions}
    for idx, p in sorted(layout.places.items(), key=lambda kv: kv[1].addr):
        r = by_region[_region_at(layout, p.addr)[0]]
        o = p.addr - r.base
        sections.append(LoadedSection(idx, p.name, p.addr, p.size, p.flags, layout.sections[idx].sh_type,
                                      p.mem, bytes(r.data[o:o + p.size])))
    st = obj.symtab
    names = obj.sym_names
    shndx = st["st_shndx"].tolist()
    info = st["st_info"].tolist()
    sizes = st["st_size"].tolist()
    vals = syms.value.tolist()
    symbols = []
    for i in range(1, obj.symcount):
        if shndx[i] == SHN_UNDEF:
            continue
        stype = _STYPES.get(info[i] & 0xF, "notype")
        if stype == "file":
            continue
        sec_name = obj.sections[shndx[i]].name if shndx[i] < len(obj.sections) else None
        name = names[i] or (sec_name if stype == "section" else "")
        symbols.append(ModuleSymbol(name, vals[i], sizes[i], stype, _BINDS.get(info[i] >> 4, "global"), sec_name))
    # do_init_module() calls mod->init: the word at offsetof(struct module, init) of the relocated
    # .gnu.linkonce.this_module (normally an ABS32 to init_module), whatever put it there. The
    # offsets are the kernel's when its layout is known, else the module's own relocations say them.
    init_addr = exit_addr = None
    if obj.this_module_index and obj.this_module_index in layout.places:
        base = layout.places[obj.this_module_index].addr
        k, own = config.struct_module, this_module_layout(obj)
        init_off = k.init if k else own.init
        exit_off = k.exit if k else own.exit
        init_addr = _read_u32(regions, base + init_off) or None if init_off is not None else None
        exit_addr = _read_u32(regions, base + exit_off) or None if exit_off is not None else None
    elif not obj.is_module:
        # a plain object (--object) has no struct module: its init_module/cleanup_module symbols stand in
        for s in symbols:
            if s.name == "init_module":
                init_addr = s.addr
            elif s.name == "cleanup_module":
                exit_addr = s.addr
    plt_entries: list[PltEntry] = []
    names_by_addr = {r.addr: n for n, r in resolved.items()}
    for s in symbols:
        if s.stype == "func":
            names_by_addr.setdefault(s.addr, s.name)
    for key in ("core", "init"):
        if key in plts:
            plt_entries.extend(plts[key].plt.entries(names_by_addr))
    thumb = bool(len(branches) and IS_THUMB_BRANCH[branches["rtype"]].any()) \
        or "thumb2" in (obj.modinfo.get("vermagic") or [""])[0]
    return LoadedModule(
        name=obj.name, path=obj.path, config=config, regions=regions, sections=sections, symbols=symbols,
        resolved=resolved, sym_names=syms.names, branches=branches, plt_entries=plt_entries,
        plt_counts=plan.counts, reloc_counts={reloc_name(k): v for k, v in sorted(counts.items())},
        init_addr=init_addr, exit_addr=exit_addr, exports=exports, modinfo=obj.modinfo, thumb=thumb,
        warnings=list(obj.warnings))


def _first_alloc_section(obj: ObjectFile, layout: Layout, name: str):
    """find_sec(): the first SHF_ALLOC section of that name, as (address, size) once placed."""
    for s in obj.sections[1:]:
        if s.sh_flags & SHF_ALLOC and s.name == name:
            p = layout.places.get(s.index)
            return (p.addr, s.sh_size) if p is not None else None
    return None


def _finalize(obj, layout, regions, plts, config, session, syms, resolved) -> finalize.Finalized:
    """post_relocation's extable sort and add_kallsyms, ftrace_module_init and the jump-label
    notifier, in the kernel's order."""
    out = finalize.Finalized()
    mem = finalize.Memory([r for r in regions if r.name != "percpu"])
    if layout.kallsyms is not None and obj.symtab_index:
        out.kallsyms_core = _kallsyms(obj, layout, mem, syms, resolved)
    ex = _first_alloc_section(obj, layout, "__ex_table")
    if ex:
        out.extable_sorted = finalize.sort_extable(mem, *ex, heapsort_order)
    pv = _first_alloc_section(obj, layout, ".pv_table")      # module_finalize: the first one, by name
    if pv:
        if config.thumb2:
            obj.warnings.append(f"{obj.name}: .pv_table stubs not patched: armload implements "
                                f"__fixup_a_pv_table's ARM encodings only")
        else:
            try:
                finalize.fixup_pv_table(mem, *pv, config.pv_offset, out,
                                        high_ones=config.phys_offset < config.page_offset)
            except ValueError as e:
                raise LayoutError(f"{obj.name}: {e}; fixup_pv_table would write there", file=obj.path) from None
    mc = _first_alloc_section(obj, layout, "__mcount_loc")
    if mc and config.dynamic_ftrace and not session.ftrace_disabled:
        mcount = _ftrace_addr(session.kernel, "__gnu_mcount_nc")

        def plt_slot(ip: int, val: int):
            key = "init" if layout.within_init(np.array([ip]))[0] else "core"
            sec = plts.get(key) or plts.get("core")
            if sec is None or val not in sec.plt.lits:
                return None
            return sec.plt.slot(sec.plt.lits.index(val))
        finalize.ftrace_nops(mem, *mc, mcount, config.thumb2, plt_slot, out)
        session.ftrace_disabled = out.ftrace_bug is not None
    jt = _first_alloc_section(obj, layout, "__jump_table")
    if jt:
        text = [(p.addr, p.addr + p.size) for p in layout.places.values() if p.flags & SHF_EXECINSTR]

        def other_word(a: int):
            # Another module's init memory was freed when its load finished (do_init_module), and
            # module_alloc may since have handed the same addresses to a later module: only core
            # regions are that module's; the rest is the running kernel's memory.
            for m in session.modules:
                r = m.region_of(a)
                if r is not None and not r.init and a + 4 <= r.end:
                    return struct.unpack_from("<I", r.data, a - r.base)[0]
            return session.kernel_word(a) if session.kernel_word else None
        finalize.jump_labels(mem, *jt, config.thumb2, layout.within_init,
                             lambda a: any(lo <= a < hi for lo, hi in text), other_word, out)
    out.relocated = mem.changed()
    return out


def _kallsyms(obj, layout, mem, syms, resolved) -> int:
    """What add_kallsyms copies: simplified symbols (an unresolved weak keeps its file value)."""
    st = obj.symtab.copy()
    vals = syms.value[:len(st)].astype(np.uint32)
    names = obj.sym_names
    undef = st["st_shndx"] == SHN_UNDEF
    for i in np.flatnonzero(undef).tolist():
        if i and names[i] not in resolved:
            vals[i] = st["st_value"][i]
    st["st_value"] = vals
    if len(st):
        st["st_value"][0] = obj.symtab["st_value"][0]        # entry 0 keeps its file value
    secs = layout.sections
    flags = np.array([s.sh_flags for s in secs], dtype=np.int64)
    flags[obj.symtab_index] |= SHF_ALLOC                  # layout_symtab
    flags[secs[obj.symtab_index].sh_link] |= SHF_ALLOC
    nobits = np.array([s.sh_type == SHT_NOBITS for s in secs])
    debug = np.array([s.name.startswith(".debug") for s in secs])
    in_init = np.zeros(len(secs), dtype=bool)
    for i, p in layout.places.items():
        in_init[i] = p.mem.startswith("init_")
    in_init[obj.symtab_index] = in_init[secs[obj.symtab_index].sh_link] = True
    shndx = st["st_shndx"].astype(np.int64)
    idx = np.where(shndx < len(secs), shndx, 0)
    core = ((shndx != SHN_UNDEF) & (shndx < len(secs)) & (st["st_name"] != 0) & ((flags[idx] & SHF_ALLOC) != 0)
            & ((flags[idx] & SHF_EXECINSTR) != 0) & ~in_init[idx])       # is_core_symbol, !KALLSYMS_ALL
    types = finalize.elf_types(st, flags, nobits, debug, obj.percpu_index)
    strsec = secs[secs[obj.symtab_index].sh_link]
    return finalize.add_kallsyms(mem, layout.kallsyms, st, obj.strtab, types, core,
                                 obj.data[strsec.sh_offset:strsec.sh_offset + strsec.sh_size])


def _image_reader(kernel: Kernel):
    """Initial data of the kernel image (None outside it, or without an image)."""
    if kernel is None or not kernel.image_path:
        return None
    cache = []

    def word(a: int):
        if not cache:
            from ..kernel.image import load_image
            cache.append(load_image(kernel.image_path))
        img = cache[0]
        if img.base <= a and a + 4 <= img.end:
            return img.word(a)
        return 0 if img.end <= a < img.bss_end else None
    return word


def _check_export_versions(obj: ObjectFile, session: Session) -> None:
    """check_module_license_and_versions(): with MODVERSIONS, exports need their CRC tables, else
    try_to_force_load: with MODULE_FORCE_LOAD (Debian: y) it taints and loads, without it -ENOEXEC."""
    if not (session.modversions and obj.is_module):
        return
    for tab, crctab in (("__ksymtab", "__kcrctab"), ("__ksymtab_gpl", "__kcrctab_gpl")):
        s = obj.find_sec(tab)
        if s is not None and s.sh_size // KSYM_SIZE and obj.find_sec(crctab) is None:
            if session.config.module_force_load:        # seed 2 case 64 of make fuzz-kernel: the kernel loads it
                warn = f"{obj.name}: no versions for exported symbols: kernel tainted."
                if warn not in obj.warnings:
                    obj.warnings.append(warn)
                return
            raise ArmloadError(f"{obj.name}: no versions for exported symbols (section {s.index} {tab} without "
                               f"{crctab}); a MODVERSIONS kernel refuses it without MODULE_FORCE_LOAD",
                               file=obj.path, errno=-ENOEXEC, section=s.index)


def _read_exports(obj: ObjectFile, layout: Layout, regions: list[MemRegion], session: Session) -> list[Export]:
    """The module's __ksymtab(_gpl) after relocation (find_module_sections: section_objs), with
    CRCs from __kcrctab(_gpl). verify_exported_symbols() then looks every name up."""
    out: list[Export] = []
    for tab, crctab, gpl in (("__ksymtab", "__kcrctab", False), ("__ksymtab_gpl", "__kcrctab_gpl", True)):
        s = obj.find_sec(tab)
        if s is None or s.index not in layout.places:
            continue
        base = layout.places[s.index].addr
        n = s.sh_size // KSYM_SIZE
        if not n:
            continue
        r = next(r for r in regions if r.base <= base < r.end)
        words = np.frombuffer(r.data, "<u4", count=3 * n, offset=base - r.base).reshape(n, 3)
        c = obj.find_sec(crctab)
        cbase = layout.places[c.index].addr if c is not None and c.index in layout.places else None
        # Entries up to the first NULL name only: non-NULL ones come from the file or its relocations,
        # so a large zero-filled (NOBITS) table costs one vector scan.
        null = np.flatnonzero(words[:, 1] == 0)
        upto = int(null[0]) + 1 if len(null) else n
        for k, (value, name_ptr, ns_ptr) in enumerate(words[:upto].tolist()):
            name = _read_cstr(regions, name_ptr) if name_ptr else None
            if name is None:
                why = "NULL" if not name_ptr else f"{name_ptr:#x}, outside the module"
                raise ArmloadError(f"{obj.name}: section {s.index} ({tab}) entry {k} at {base + k * KSYM_SIZE:#x}: "
                                   f"symbol name pointer is {why}; 6.1's verify_exported_symbols dereferences it "
                                   f"(a kernel oops, not a refusal)", file=obj.path, errno=-ENOEXEC,
                                   section=s.index)
            ns = _read_cstr(regions, ns_ptr) if ns_ptr else ""
            crc = _read_u32(regions, cbase + 4 * k) if cbase is not None else None
            out.append(Export(name=name, addr=value, crc=crc, owner=obj.name, gpl=gpl, namespace=ns or ""))
    for e in out:
        owner = None
        k = session.kernel.exports.get(e.name)
        if k is not None and k.owner == "vmlinux":
            owner = "vmlinux"
        else:
            owner = next((t.module for t in session.export_tables if e.name in t.exports), None)
        if owner:
            raise ArmloadError(f"{obj.name}: exports duplicate symbol {e.name} (owned by {owner})",
                               file=obj.path, errno=-ENOEXEC, symbol=e.name)
    return out


__all__ = ["Session", "load_module"]
