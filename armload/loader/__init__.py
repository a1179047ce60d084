"""The loader: `kernel/module/main.c` and `arch/arm/kernel/module{,-plts}.c`, stage by stage.

    elf        parse and validate (elf_validity_check, setup_load_info); REL tables as numpy arrays
    symbols    resolve undefined symbols with modversions, GPL and namespace checks
    layout     core and init memory (6.1 and 6.4 layouts, module window, vmalloc fallback)
    plt        count and emit PLTs under three kernel generations (legacy, sorted, v6)
    relocate   every ARM/Thumb-2 relocation type, one table row each
    session    Session: the pipeline end to end, module after module; `load_module`
    model      the plain data passed between stages (LoadedModule, ...)
    verify     every branch site and PLT entry executed in isolation
    image, debug_image   the loaded image written back as ELF (objdump/gdb-compatible)
"""
from .. import _lazy

_PUBLIC = {"Session": ".session", "load_module": ".session", "LoadedModule": ".model"}
__all__ = sorted(_PUBLIC)
__getattr__, __dir__ = _lazy.exports(__name__, _PUBLIC)
