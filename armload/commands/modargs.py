"""Positional module words and --param, as insmod takes them (shared by the two run runtimes)."""
from __future__ import annotations

import os


def split_modules(words) -> list[tuple[str, list[str]]]:
    """insmod semantics on the positional words: a word that is not a module file (no .ko
    or .ko.xz/.zst/.gz suffix and no such file) is a parameter of the module before it."""
    from ..kernel.kofile import is_module_file
    out: list[tuple[str, list[str]]] = []
    for w in words:
        if is_module_file(w) or os.path.exists(w) or not out:
            out.append((w, []))
        else:
            out[-1][1].append(w)
    return out


def assign_params(names: list[str], pairs, specs) -> list[list[str]]:
    """Each module's parameters: its positional words, then --param NAME=V (the last module) or
    --param MOD.NAME=V (module MOD)."""
    out = [list(ps) for _, ps in pairs]
    for spec in specs or []:
        target = len(names) - 1
        name = spec.split("=", 1)[0]
        if "." in name:
            prefix = name.split(".", 1)[0]
            for i, n in enumerate(names):
                if n == prefix:
                    target, spec = i, spec[len(prefix) + 1:]
        out[target].append(spec)
    return out
