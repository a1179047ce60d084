"""armload: a simulated 32-bit ARM Linux kernel-module loader."""
__version__ = "0.1.0"
