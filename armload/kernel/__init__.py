"""The target kernel: what a module is loaded into and linked against.

    config     KernelConfig: the kernel build's options that change loading (Debian 6.1 armmp default)
    provider   Kernel: exports and addresses from Module.symvers, System.map, /proc/kallsyms or vmlinuz
    image      the vmlinuz/zImage parser: the decompressed Image, its sections and __ksymtab
    kallsyms/  the compressed symbol table: build, find and decode it, the lookup strategies
"""
from .. import _lazy

_PUBLIC = {"Kernel": ".provider", "Export": ".provider", "KernelConfig": ".config", "DEBIAN_ARMMP": ".config"}
__all__ = sorted(_PUBLIC)
__getattr__, __dir__ = _lazy.exports(__name__, _PUBLIC)
