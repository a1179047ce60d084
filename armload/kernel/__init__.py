"""The target kernel: what a module is loaded into and linked against.

    config     KernelConfig: the kernel build's options that change loading (Debian 6.1 armmp default)
    provider   Kernel: exports and addresses from Module.symvers, System.map, /proc/kallsyms or vmlinuz
    image      the vmlinuz/zImage parser: the decompressed Image, its sections and __ksymtab
    kallsyms/  the compressed symbol table: build, find and decode it, the lookup strategies
"""
