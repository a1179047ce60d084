"""Independent oracles for the tests: literal ports of kernel C code, written from the kernel
source and sharing no code with armload (never import armload here)."""
