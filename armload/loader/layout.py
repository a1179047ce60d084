"""Stage 3: place core and init sections in simulated module memory.

Follows kernel/module/main.c: rewrite_section_headers, module_enforce_rwx_sections,
layout_sections (five mask rows, index order per row), layout_symtab, and module_alloc
(first fit in the module window, falling back to vmalloc with module PLTs).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..kernel.config import PAGE_SIZE, KernelConfig
from ..constants import (SHF_ALLOC, SHF_EXECINSTR, SHF_RO_AFTER_INIT, SHF_WRITE, SHN_UNDEF, SHT_NOBITS)
from .elf import ObjectFile, Section, SYM_DTYPE
from ..errors import ENOEXEC, ENOMEM, ElfFormatError, LayoutError

PERCPU_SECTION = ".data..percpu"
RO_AFTER_INIT_SECTIONS = (".data..ro_after_init", "__jump_table")
TEMP_COPY_BASE = 0xE8000000        # where the kernel's temporary copy of the file "lives"
PERCPU_BASE = 0xC1F00000           # simulated per-cpu area for .data..percpu
PERCPU_RESERVED = 8 << 10          # PERCPU_MODULE_RESERVE (8 KiB without NEED_PER_CPU_KM)
PCPU_MIN_UNIT_SIZE = 32 << 10      # PFN_ALIGN(32 << 10)
PCPU_MIN_ALLOC_SIZE = 4            # 1 << PCPU_MIN_ALLOC_SHIFT

# (required flags, excluded flags) per row; ARCH_SHF_SMALL is 0 on ARM.
MASKS = [
    (SHF_EXECINSTR | SHF_ALLOC, 0),
    (SHF_ALLOC, SHF_WRITE),
    (SHF_RO_AFTER_INIT | SHF_ALLOC, 0),
    (SHF_WRITE | SHF_ALLOC, 0),
    (SHF_ALLOC, 0),
]
CORE_CLASSES = ("text", "rodata", "ro_after_init", "data", "data")
INIT_CLASSES = ("init_text", "init_rodata", "init_rodata", "init_data", "init_data")
MOD_KALLSYMS_SIZE = 16             # struct mod_kallsyms on 32-bit: symtab, num_symtab, strtab, typetab


def page_align(x: int) -> int:
    return (x + PAGE_SIZE - 1) & ~(PAGE_SIZE - 1)


def align(x: int, a: int) -> int:
    """The kernel's ALIGN(x, a ?: 1): mask arithmetic, so a non-power-of-2 `a` gives what the
    kernel gives (not the next multiple). Not truncated to 32 bits: callers refuse a result
    past 4 GiB, where the kernel's unsigned int would wrap."""
    a = a or 1
    return (x + (a - 1)) & ~(a - 1)


def is_init_section(name: str) -> bool:
    return name.startswith((".init", ".ARM.extab.init", ".ARM.exidx.init"))


def is_exit_section(name: str) -> bool:
    return name.startswith((".exit", ".ARM.extab.exit", ".ARM.exidx.exit"))


def init_layout_section(name: str, config: KernelConfig) -> bool:
    """module_init_layout_section(): init sections, and exit sections without MODULE_UNLOAD."""
    return is_init_section(name) or (not config.module_unload and is_exit_section(name))


@dataclass
class SectionPlace:
    """Where the layout puts one ALLOC section: its region and final address."""

    index: int
    name: str
    addr: int
    size: int
    mem: str
    flags: int
    nobits: bool


@dataclass
class Region:
    """One module memory allocation (core/init, or one per memory type in 6.4+)."""

    name: str
    base: int
    size: int
    init: bool


@dataclass
class Layout:
    """The module's layout: rewritten headers, each section's place, and the regions."""

    sections: list[Section]                 # headers after the kernel's rewrites (PLTs sized, flags)
    places: dict[int, SectionPlace]         # ELF index -> final placement, ALLOC sections only
    regions: list[Region]
    percpu: SectionPlace | None = None
    percpu_index: int = 0                   # find_pcpusec(); 0: none
    temp_base: int = TEMP_COPY_BASE         # info->hdr: where the temporary copy of the file is
    kallsyms: dict[str, int] | None = None  # layout_symtab's places: symoffs, stroffs, core_typeoffs (core);
    #                                         init_symtab, init_strtab, mod_kallsyms, init_typeoffs (init)

    def addr_of(self, index: int) -> int:
        """Final sh_addr: placed sections, per-cpu, or the temporary copy for the rest."""
        p = self.places.get(index)
        if p is not None:
            return p.addr
        if self.percpu is not None and self.percpu.index == index:
            return self.percpu.addr
        if index and index == self.percpu_index:
            return 0                       # an empty per-cpu section: mod_percpu(mod) is NULL
        return self.temp_base + self.sections[index].sh_offset

    def within_init(self, addrs: np.ndarray) -> np.ndarray:
        """within_module_init() for an array of addresses."""
        m = np.zeros(len(addrs), dtype=bool)
        for r in self.regions:
            if r.init:
                m |= (addrs >= r.base) & (addrs < r.base + r.size)
        return m


class ModuleAllocator:
    """module_alloc(): first fit, page granular, a guard page after each area (vmalloc)."""

    def __init__(self, config: KernelConfig, placement: str | int = "window"):
        self.config = config
        self.placement = placement
        self.used: list[tuple[int, int]] = []          # (start, end incl. guard page)
        self.percpu_used: list[tuple[int, int]] = []
        if isinstance(placement, int):
            if placement & (PAGE_SIZE - 1):
                raise LayoutError(f"placement address {placement:#x} is not page aligned")
            # A chosen address stands for the vmalloc area moved there: no larger than it.
            size = config.vmalloc_end - config.vmalloc_start
            self.ranges = [(placement, min(0xFFFFF000, placement + size))]
        elif placement == "window":
            self.ranges = [(config.modules_vaddr, config.modules_end)]
            if config.module_plts:
                self.ranges.append((config.vmalloc_start, config.vmalloc_end))
        elif placement == "vmalloc":
            self.ranges = [(config.vmalloc_start, config.vmalloc_end)]
        else:
            raise LayoutError(f"unknown placement {placement!r}: use window, vmalloc or an address")

    def alloc(self, size: int) -> int:
        if size > 0xFFFFFFFF:
            raise LayoutError(f"cannot allocate {size:#x} bytes of module memory", errno=-ENOMEM)
        need = page_align(size) + PAGE_SIZE
        for lo, hi in self.ranges:
            addr = lo
            for start, end in sorted(self.used):
                if end <= addr:
                    continue
                if start >= addr + need:
                    break
                addr = end
            if addr + need <= hi:
                self.used.append((addr, addr + need))
                return addr
        where = f"{self.placement:#x}" if isinstance(self.placement, int) else self.placement
        raise LayoutError(f"cannot allocate {size:#x} bytes of module memory (placement {where}); "
                          f"out of address space", errno=-ENOMEM)

    def free(self, base: int) -> None:
        self.used = [u for u in self.used if u[0] != base]

    def alloc_percpu(self, size: int, align: int) -> int:
        """The per-cpu reserved chunk (pcpu_alloc(size, align, true)): first fit, never shared.
        Like pcpu_alloc: align below 4 becomes 4, the size is rounded to 4, and a size above
        PCPU_MIN_UNIT_SIZE or an align that is not a power of 2 fails (returns NULL)."""
        align = max(align, PCPU_MIN_ALLOC_SIZE)
        size = (size + 3) & ~3
        if size > PCPU_MIN_UNIT_SIZE or align > PAGE_SIZE or align & (align - 1):
            raise LayoutError(f"illegal size ({size}) or align ({align}) for percpu allocation",
                              errno=-ENOMEM)
        addr = PERCPU_BASE
        for start, end in sorted(self.percpu_used):
            a = (addr + max(align, 1) - 1) // max(align, 1) * max(align, 1)
            if a + size <= start:
                break
            addr = max(addr, end)
        addr = (addr + max(align, 1) - 1) // max(align, 1) * max(align, 1)
        if addr + size > PERCPU_BASE + PERCPU_RESERVED:
            raise LayoutError(f"cannot allocate {size:#x} bytes of per-cpu memory: the module reserve "
                              f"({PERCPU_RESERVED // 1024} KiB) is exhausted", errno=-ENOMEM)
        self.percpu_used.append((addr, addr + size))
        return addr

    def free_percpu(self, base: int) -> None:
        self.percpu_used = [u for u in self.percpu_used if u[0] != base]


def prepare_sections(obj: ObjectFile, config: KernelConfig, plt_sizes: dict[str, int]) -> list[Section]:
    """rewrite_section_headers + module_frob_arch_sections sizing + rwx/ro_after_init marks."""
    secs = [replace(s) for s in obj.sections]
    # rewrite_section_headers: modinfo and __versions (the ones find_sec found) are not loaded;
    # layout_and_allocate: neither is the per-cpu section (allocated separately).
    for idx in (obj.versions_index, obj.modinfo_index, obj.percpu_index):
        secs[idx].sh_flags &= ~SHF_ALLOC
    for name in RO_AFTER_INIT_SECTIONS:
        s = next((x for x in secs[1:] if x.sh_flags & SHF_ALLOC and x.name == name), None)
        if s is not None:
            s.sh_flags |= SHF_RO_AFTER_INIT
    for name, key in ((".plt", "core"), (".init.plt", "init")):
        # the frob loop assigns on every match: the last section of that name wins
        s = next((x for x in reversed(secs) if x.name == name), None)
        if s is None or key not in plt_sizes:     # older kernels know only .plt
            continue
        s.sh_type = SHT_NOBITS
        s.sh_flags = SHF_EXECINSTR | SHF_ALLOC
        s.sh_addralign = config.l1_cache_bytes
        s.sh_size = plt_sizes.get(key, 0)
    if config.strict_rwx:
        for s in secs:
            if (s.sh_flags & SHF_WRITE) and (s.sh_flags & SHF_EXECINSTR):
                raise ElfFormatError(f"{obj.name}: section {s.name} (index {s.index}) has invalid WRITE|EXEC flags",
                                     file=obj.path, section=s.index)
    return secs


def _core_symbols(obj: ObjectFile, secs: list[Section], init_idx: set[int], kallsyms_all: bool) -> tuple[int, int]:
    """is_core_symbol() count and their string bytes (for the core symtab size)."""
    syms = obj.symtab
    shndx = syms["st_shndx"].astype(np.int64)
    ok = (shndx != SHN_UNDEF) & (shndx < len(secs)) & (syms["st_name"] != 0)
    flags = np.array([s.sh_flags for s in secs], dtype=np.int64)
    in_init = np.zeros(len(secs), dtype=bool)
    in_init[list(init_idx)] = True
    idx = np.where(ok, shndx, 0)
    ok &= (flags[idx] & SHF_ALLOC) != 0
    if not kallsyms_all:
        ok &= (flags[idx] & SHF_EXECINSTR) != 0
    ok &= ~in_init[idx]
    if not len(ok):
        return 0, 0
    ok[0] = True
    names = obj.sym_names
    strbytes = sum(len(names[i].encode()) + 1 for i in np.flatnonzero(ok).tolist())
    return int(ok.sum()), strbytes


def _wrap(obj: ObjectFile, cls: str, s: Section) -> LayoutError:
    return LayoutError(f"{obj.name}: section {s.index} ({s.name}, size {s.sh_size:#x}): the {cls} layout size "
                       f"exceeds 32 bits; 6.1 sums it in an unsigned int and would place sections outside its "
                       f"allocation (armload refuses rather than wrap)", file=obj.path, errno=-ENOMEM,
                       section=s.index)


def _running_offset(obj: ObjectFile, s: Section, run: int, is_init: bool) -> int:
    """6.1's module_get_offset on the pass's one counter: ALIGN(*size, sh_addralign ?: 1) in an unsigned
    int, then *size = ret + sh_size. armload's per-class offsets start each class afresh; the kernel's
    ALIGN of the running size wraps for a huge sh_addralign (seed 2 case 122 of make fuzz-kernel:
    0xffffffff puts .init.data back at 0, over the init text: the Debian kernel oopses)."""
    k = align(run, s.sh_addralign) & 0xFFFFFFFF
    if k < run:
        raise LayoutError(f"{obj.name}: section {s.index} ({s.name}) has sh_addralign {s.sh_addralign:#x}: 6.1's "
                          f"module_get_offset computes ALIGN({run:#x}, {s.sh_addralign:#x}) in an unsigned int, "
                          f"which wraps to {k:#x}: the section would be placed over the {'init' if is_init else 'core'}"
                          f" sections laid out before it (a corrupt image: the kernel oopses)", file=obj.path,
                          errno=-ENOEXEC, section=s.index)
    if k + s.sh_size > 0xFFFFFFFF:
        raise _wrap(obj, "init" if is_init else "core", s)
    return k + s.sh_size


def _alloc_or_release(allocator: ModuleAllocator, size: int, regions: list[Region]) -> int:
    """module_alloc(size); when it fails, the allocations made for this module so far are freed."""
    try:
        return allocator.alloc(size)
    except LayoutError:
        for r in regions:
            allocator.free(r.base)
        raise


def layout_module(obj: ObjectFile, config: KernelConfig, plt_sizes: dict[str, int],
                  allocator: ModuleAllocator, temp_base: int = TEMP_COPY_BASE) -> Layout:
    secs = prepare_sections(obj, config, plt_sizes)
    places: dict[int, SectionPlace] = {}
    # Offsets within each memory class, five rows, index order within a row.
    sizes: dict[str, int] = {}
    offsets: dict[int, tuple[str, int]] = {}
    strict = page_align if config.strict_rwx else (lambda x: x)
    for is_init in (False, True):
        classes = INIT_CLASSES if is_init else CORE_CLASSES
        run = 0             # 6.1: one unsigned int per pass, core_layout.size / init_layout.size
        for row, (req, excl) in enumerate(MASKS):
            cls = classes[row]
            for s in secs:
                if (s.sh_flags & req) != req or (s.sh_flags & excl) or s.index in offsets:
                    continue
                if init_layout_section(s.name, config) != is_init:
                    continue
                off = align(sizes.get(cls, 0), s.sh_addralign)
                sizes[cls] = off + s.sh_size
                offsets[s.index] = (cls, off)
                if sizes[cls] > 0xFFFFFFFF:
                    raise _wrap(obj, cls, s)
                if config.layout == "6.1":
                    run = _running_offset(obj, s, run, is_init)
            if row in ((0, 1, 4) if is_init else (0, 1, 2, 4)):
                run = strict(run)          # layout_sections' switch: strict_align at these rows' ends
    init_idx = {i for i, (c, _) in offsets.items() if c.startswith("init_")}

    # layout_symtab: trimmed core symtab in data, full symtab+strtab in init data.
    symsec = secs[obj.symtab_index]
    strsec = secs[symsec.sh_link]
    ncore, core_str = _core_symbols(obj, secs, init_idx, kallsyms_all=False)
    nsrc = obj.symcount
    # 6.1's layout_sections ends each pass with "whole core"/"whole init": strict_align() of the
    # allocation so far, so the symbol tables start on a fresh page under STRICT_MODULE_RWX
    # (6.4's per-type allocations append them directly).
    whole = page_align if config.layout == "6.1" and config.strict_rwx else (lambda x: x)
    d = align(whole(sizes.get("data", 0)), symsec.sh_addralign)
    ks = {"symoffs": d, "stroffs": d + ncore * SYM_DTYPE.itemsize}
    ks["core_typeoffs"] = ks["stroffs"] + core_str
    d += ncore * SYM_DTYPE.itemsize + core_str + ncore
    sizes["data"] = d
    i = align(whole(sizes.get("init_data", 0)), symsec.sh_addralign)
    ks["init_symtab"] = i
    i += symsec.sh_size
    i = align(i, strsec.sh_addralign)
    ks["init_strtab"] = i
    i += strsec.sh_size
    i = align(i, 4)
    ks["mod_kallsyms"] = i
    ks["init_typeoffs"] = i + MOD_KALLSYMS_SIZE
    i += MOD_KALLSYMS_SIZE + nsrc
    sizes["init_data"] = i
    for cls, sz in sizes.items():
        # The kernel sums in unsigned int: past 4 GiB its layout wraps and sections overlap.
        if sz > 0xFFFFFFFF:
            raise LayoutError(f"{obj.name}: {cls} layout size {sz:#x} exceeds 32 bits (sections too large); "
                              f"6.1 sums it in an unsigned int and would place sections outside its allocation",
                              file=obj.path, errno=-ENOMEM)

    regions: list[Region] = []
    class_base: dict[str, int] = {}
    if config.layout == "6.1":
        # Two allocations: core = text|rodata|ro_after_init|data, init = text|rodata|data.
        for name, order in (("core", ("text", "rodata", "ro_after_init", "data")),
                            ("init", ("init_text", "init_rodata", "init_data"))):
            total = 0
            for cls in order:
                class_base[cls] = total
                total = strict(total + sizes.get(cls, 0))
            if total == 0:
                continue
            base = _alloc_or_release(allocator, total, regions)
            for cls in order:
                class_base[cls] += base
            regions.append(Region(name, base, page_align(total), name == "init"))
    else:
        # >= 6.4: one allocation per memory class (enum mod_mem_type order). From 6.10
        # module_memory_alloc asks execmem_alloc for PAGE_ALIGN(mod->mem[type].size).
        for cls in ("text", "data", "rodata", "ro_after_init", "init_text", "init_data", "init_rodata"):
            sz = sizes.get(cls, 0)
            if sz == 0:
                continue
            if config.version >= (6, 10):
                sz = page_align(sz)
            base = _alloc_or_release(allocator, sz, regions)
            class_base[cls] = base
            regions.append(Region(cls, base, page_align(sz), cls.startswith("init_")))
    for idx, (cls, off) in offsets.items():
        s = secs[idx]
        places[idx] = SectionPlace(idx, s.name, class_base[cls] + off, s.sh_size, cls, s.sh_flags,
                                   s.sh_type == SHT_NOBITS)
    percpu = None
    pc = obj.sections[obj.percpu_index] if obj.percpu_index else None
    if pc is not None and pc.sh_size:
        # percpu_modalloc(): align above a page is clamped with a warning, then pcpu_alloc decides.
        pa = pc.sh_addralign
        if pa > PAGE_SIZE:
            obj.warnings.append(f"{obj.name}: per-cpu alignment {pa} > {PAGE_SIZE}")
            pa = PAGE_SIZE
        try:
            addr = allocator.alloc_percpu(pc.sh_size, pa)
        except LayoutError as e:
            for r in regions:
                allocator.free(r.base)
            raise LayoutError(f"{obj.name}: Could not allocate {pc.sh_size} bytes percpu data (section "
                              f"{pc.index} .data..percpu, sh_addralign {pc.sh_addralign}: {e})",
                              file=obj.path, errno=-ENOMEM, section=pc.index) from None
        percpu = SectionPlace(pc.index, pc.name, addr, pc.sh_size, "percpu", pc.sh_flags, pc.sh_type == SHT_NOBITS)
    kallsyms = {k: v + class_base["init_data" if k.startswith(("init_", "mod_")) else "data"]
                for k, v in ks.items()}
    kallsyms["ncore"] = ncore
    return Layout(sections=secs, places=places, regions=regions, percpu=percpu,
                  percpu_index=obj.percpu_index, temp_base=temp_base, kallsyms=kallsyms)
