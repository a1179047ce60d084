"""The built-in models, one module per kernel subsystem."""
from __future__ import annotations

from . import driver, fallbacks, fs, locking, mm, module, printk, random, sched, time
from .base import ArgReader, Call, MemArgReader, Model, ModelLibrary

_DEFAULT: ModelLibrary | None = None


def default_library() -> ModelLibrary:
    """A private copy of the built-in models, safe to modify."""
    global _DEFAULT
    if _DEFAULT is None:
        lib = ModelLibrary()
        for sub in (fallbacks, printk, mm, time, sched, locking, driver, module, fs, random):
            sub.register(lib)
        driver.register_buses(lib)
        driver.register_core(lib)
        driver.register_notifiers(lib)
        driver.register_iterators(lib)
        _DEFAULT = lib
    return _DEFAULT.copy()


__all__ = ["ArgReader", "Call", "MemArgReader", "Model", "ModelLibrary", "default_library"]
