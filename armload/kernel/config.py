"""Kernel configuration that changes how a module is loaded.

One small frozen object is passed down the pipeline; nothing reads globals.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from .choices import LAYOUTS, PLT_ALGORITHMS

SZ_1M = 1 << 20
PAGE_SIZE = 4096


@dataclass(frozen=True)
class StructModule:
    """The kernel's struct module, as its own modules' .gnu.linkonce.this_module lay it out
    (loader/this_module.py derives it; nothing here is written down per config)."""
    size: int                         # sizeof(struct module)
    name: int                         # offsetof(struct module, name)
    init: int                         # offsetof(struct module, init)
    exit: int                         # offsetof(struct module, exit) (CONFIG_MODULE_UNLOAD)
    source: str = ""                  # where it was read


@dataclass(frozen=True)
class KernelConfig:
    """The CONFIG_* choices of the simulated kernel (defaults: Debian 6.1 armmp)."""

    thumb2: bool = False              # CONFIG_THUMB2_KERNEL
    l1_cache_bytes: int = 64          # 1 << CONFIG_ARM_L1_CACHE_SHIFT
    dynamic_ftrace: bool = True       # CONFIG_DYNAMIC_FTRACE: two fixed PLT entries
    module_unload: bool = True        # CONFIG_MODULE_UNLOAD: .exit.text stays in core
    module_plts: bool = True          # CONFIG_ARM_MODULE_PLTS
    plt_algorithm: str = "v6"         # legacy (v4.0) | sorted (2016 series) | v6 (6.1)
    group_relocs: bool = True         # CONFIG_ARM_HAS_GROUP_RELOCS
    strict_rwx: bool = True           # CONFIG_STRICT_MODULE_RWX
    layout: str = "6.1"               # 6.1: core+init allocations; 6.4: one per mem class
    page_offset: int = 0xC0000000     # CONFIG_PAGE_OFFSET (VMSPLIT_3G)
    text_offset: int = 0x8000
    highmem: bool = True
    lowmem_size: int = 760 * SZ_1M    # decides high_memory, hence VMALLOC_START
    phys_offset: int = 0x40000000     # PHYS_OFFSET: RAM start of the board (QEMU's and armload's virt)
    module_force_load: bool = True    # CONFIG_MODULE_FORCE_LOAD (Debian: y): no __versions taints, loads
    version: tuple = (6, 1)           # the kernel's Linux version (loader/for_kernel.py: from the image)
    struct_module: StructModule | None = field(default=None, compare=False)
    #   the kernel's layout when known (its module tree); None: each module's own this_module says

    def __post_init__(self):
        if self.plt_algorithm not in PLT_ALGORITHMS:
            raise ValueError(f"unknown PLT algorithm {self.plt_algorithm!r}; choose from {', '.join(PLT_ALGORITHMS)}")
        if self.l1_cache_bytes not in (32, 64):
            raise ValueError("L1 cache line must be 32 or 64 bytes")
        if self.layout not in LAYOUTS:
            raise ValueError(f"unknown layout {self.layout!r}; choose from {', '.join(LAYOUTS)}")

    def with_(self, **kw) -> "KernelConfig":
        return replace(self, **kw)

    # --- memory map (arch/arm/include/asm/memory.h, pgtable.h) -------------
    @property
    def kernel_text(self) -> int:
        """_stext: PAGE_OFFSET + TEXT_OFFSET."""
        return self.page_offset + self.text_offset

    @property
    def modules_vaddr(self) -> int:
        # Thumb-2 kernels keep modules within +-16 MiB of the kernel.
        return self.page_offset - (8 if self.thumb2 else 16) * SZ_1M

    @property
    def modules_end(self) -> int:
        # The pkmap area takes the top PMD (2 MiB) with HIGHMEM.
        return self.page_offset - (2 * SZ_1M if self.highmem else 0)

    @property
    def vmalloc_start(self) -> int:
        high_memory = self.page_offset + self.lowmem_size
        return (high_memory + 8 * SZ_1M) & ~(8 * SZ_1M - 1)

    @property
    def vmalloc_end(self) -> int:
        return 0xFF800000

    @property
    def pv_offset(self) -> int:
        """__pv_offset (ARM_PATCH_PHYS_VIRT): PHYS_OFFSET - PAGE_OFFSET, 32 bits."""
        return (self.phys_offset - self.page_offset) & 0xFFFFFFFF

    @property
    def plt_stride(self) -> int:
        return self.l1_cache_bytes

    @property
    def plt_ent_count(self) -> int:
        return self.l1_cache_bytes // 4

    @property
    def plt_ldr(self) -> int:
        """The one LDR word repeated in every slot, as stored in memory (LE u32)."""
        if self.thumb2:
            insn = 0xF8DFF000 | (self.plt_stride - 4)      # ldr.w pc, [pc, #STRIDE-4]
            return ((insn & 0xFFFF) << 16) | (insn >> 16)  # __opcode_to_mem_thumb32: halfword swap
        return 0xE59FF000 | (self.plt_stride - 8)          # ldr pc, [pc, #STRIDE-8]

    @property
    def n_fixed_plts(self) -> int:
        return 2 if self.dynamic_ftrace else 0

    @property
    def vermagic_flags(self) -> str:
        return ("thumb2 " if self.thumb2 else "")


DEBIAN_ARMMP = KernelConfig()
