"""Lazy re-exports for package `__init__` files (PEP 562): a public name's module is imported on
first use, so importing a package, or one small module inside it, never pulls in its siblings."""
from __future__ import annotations

import importlib
import sys


def exports(package: str, table: dict[str, str]):
    """`(__getattr__, __dir__)` for `package`; `table` maps a public name to the module (relative to
    the package) that defines it."""
    def __getattr__(name: str):
        where = table.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where, package), name)
        setattr(sys.modules[package], name, value)      # the next lookup is an ordinary attribute
        return value

    def __dir__() -> list[str]:
        return sorted(set(table) | set(vars(sys.modules[package])))
    return __getattr__, __dir__
