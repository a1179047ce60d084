"""armload: a simulated 32-bit ARM Linux kernel-module loader.

The package, floor by floor; a module imports only from its own folder or from floors below it
(tests/cli/test_layout.py holds every file to this):

    errors, constants   what every floor shares: the error classes, ELF and ARM numbers
    kernel/             the target kernel: its config, symbol sources (Module.symvers, System.map,
                        vmlinuz), the vmlinuz image, kallsyms
    loader/             the pipeline of load_module: elf, symbols, layout, plt, relocate, session,
                        verify, and the loaded image written back as ELF
    emu/                the booted Debian kernel (booted/, hw/), the sanitizers, coverage, DWARF, unwinding
    inspect/            human views of a load: report, disasm, explain, pictures, HTML report
    probes/             the booted kernel's own kprobes, kretprobes and ftrace; the kprobes decoder
    ci/  devkit/        the tree gate (check, baseline, JUnit); the pytest plugin and its library
    inputs/             synthetic and fuzzed modules
    agree/  bench/      armload against the real kernel (`armload agree`); every benchmark (`armload bench`)
    commands/, cli.py   the command line, one file per subcommand, each imported only when run

Public names load on first use, so `import armload` costs next to nothing:

    from armload import Session, Kernel, KernelConfig
"""
from . import _lazy

__version__ = "0.1.0"

_PUBLIC = {
    "Session": ".loader.session", "load_module": ".loader.session", "LoadedModule": ".loader.model",
    "Kernel": ".kernel.provider", "Export": ".kernel.provider",
    "KernelConfig": ".kernel.config", "DEBIAN_ARMMP": ".kernel.config",
    "ArmloadError": ".errors", "ElfFormatError": ".errors", "SymbolError": ".errors",
    "RelocationError": ".errors", "LayoutError": ".errors", "PltError": ".errors",
    "KernelFileError": ".errors", "EmulationError": ".errors",
    "BootedKernel": ".emu.booted.kernel", "BootedRun": ".emu.booted.modrun",
    "KernelProbes": ".probes.booted", "ProbeError": ".probes.base",
    "ModuleHandle": ".devkit.testing", "ModuleOops": ".devkit.testing", "ModuleStopped": ".devkit.testing",
    "SanitizerReport": ".devkit.testing",
}
__all__ = sorted(_PUBLIC)
__getattr__, __dir__ = _lazy.exports(__name__, _PUBLIC)
