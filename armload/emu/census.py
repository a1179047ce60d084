"""Which of a module's kernel imports run real code, a model, or nothing (static, no emulation).

`classify_imports` answers from the symbol table and the call-class table alone; `census` does it
for a whole tree and aggregates: distinct functions and (module, function) pairs per class, and
the unmodelled functions ranked by the number of modules importing them.
"""
from __future__ import annotations

import os
from collections import Counter

from .calls import CallTable
from .models import default_library
from .results import UNMODELLED

SHN_UNDEF = 0


def imported_functions(path: str, kernel) -> list[str]:
    """The kernel functions (not data) a .ko imports, from its undefined symbols."""
    from ..loader.elf import read_object
    obj = read_object(path)
    names = obj.sym_names
    out = []
    for i in range(1, obj.symcount):
        if int(obj.symtab["st_shndx"][i]) != SHN_UNDEF or not names[i]:
            continue
        n = names[i]
        e = kernel.exports.get(n) if kernel is not None else None
        if e is not None and e.kind == "data":
            continue
        if e is not None and e.owner != "vmlinux":
            continue                      # another module's export
        out.append(n)
    return sorted(set(out))


def classify_imports(names, *, has_image: bool, models=None, policy: str = "fail") -> dict[str, str]:
    table = CallTable(models or default_library(), has_image=has_image, policy=policy)
    return {n: table.decide(n).cls for n in names}


def census(root: str, kernel, *, has_image: bool) -> dict:
    per_fn: dict[str, str] = {}
    pairs = Counter()
    users: Counter = Counter()
    modules = 0
    table = CallTable(default_library(), has_image=has_image)
    for dirpath, _dirs, files in os.walk(root):
        for f in sorted(files):
            if not f.endswith(".ko"):
                continue
            try:
                names = imported_functions(os.path.join(dirpath, f), kernel)
            except Exception:
                continue
            modules += 1
            for n in names:
                c = per_fn.setdefault(n, table.decide(n).cls)
                pairs[c] += 1
                if c == UNMODELLED:
                    users[n] += 1
    distinct = Counter(per_fn.values())
    return {"modules": modules, "functions": len(per_fn), "distinct": dict(distinct), "pairs": dict(pairs),
            "top_unmodelled": users.most_common(30)}
