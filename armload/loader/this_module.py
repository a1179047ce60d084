"""struct module's layout as a module file carries it, not as a table written down per config.

`.gnu.linkonce.this_module` is `struct module __this_module` compiled by modpost's `NAME.mod.c`
with the kernel's own headers and config: its size is that build's sizeof(struct module), its
name field holds KBUILD_MODNAME (= the `.modinfo` name), and `.rel.gnu.linkonce.this_module`
relocates `.init = init_module` and `.exit = cleanup_module` at offsetof(struct module, init) and
offsetof(struct module, exit). The kernel's load_module uses that very section as the module's
struct module (`mod = (void *)info->sechdrs[info->index.mod].sh_addr`), so these are where the
kernel reads them, for any config (PREEMPT_RT's locks move init from 0xcc to 0xc8, 6.12 moves
exit to 0x2c4).

The kernel's own layout (for the 6.4+ size check, and for a module built without an init or exit)
is the one its own modules share: `of_tree` reads it from the kernel's module tree.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from ..kernel.config import StructModule
from .elf import ObjectFile

# struct module { enum module_state state; struct list_head list; char name[MODULE_NAME_LEN]; ...}:
# 4 + 8 bytes on every 32-bit config; used only when the name is not found in the section itself.
NAME_AFTER_STATE_AND_LIST = 12
R_ARM_ABS32 = 2


@dataclass(frozen=True)
class ThisModule:
    """What one module's this_module section says (None where it does not say)."""
    size: int
    name: int | None
    init: int | None
    exit: int | None


def of_object(obj: ObjectFile) -> ThisModule | None:
    """The module's own struct module layout; None for a plain object (no this_module)."""
    if not obj.this_module_index:
        return None
    tm = obj.sections[obj.this_module_index]
    data = obj.data[tm.sh_offset:tm.sh_offset + tm.sh_size] if tm.sh_type != 8 else b""
    name = None
    want = (obj.modinfo.get("name") or [""])[0].encode()
    if want:
        at = data.find(want + b"\0")
        name = at if at >= 0 else None
    init = exit_ = None
    for idx, rel in obj.rels.items():
        if obj.sections[idx].sh_info != obj.this_module_index:
            continue
        for off, info in zip(rel["r_offset"].tolist(), rel["r_info"].tolist()):
            if info & 0xFF != R_ARM_ABS32:
                continue
            sym = obj.sym_name(info >> 8)
            if sym == "init_module" and init is None:
                init = off
            elif sym == "cleanup_module" and exit_ is None:
                exit_ = off
    return ThisModule(tm.sh_size, name, init, exit_)


def of_tree(tree: str, sample: int = 40) -> StructModule | None:
    """The kernel's struct module from its own modules: the first of the tree (in path order) that
    have an init, an exit and their name in place; their sizes must agree. None when the tree has
    no such module."""
    from ..errors import ArmloadError
    from .elf import read_object
    from ..kernel.kofile import is_module_file
    found: list[tuple[str, ThisModule]] = []
    for d, dirs, files in os.walk(tree):
        dirs.sort()
        for f in sorted(files):
            if not is_module_file(f):
                continue
            try:
                t = of_object(read_object(os.path.join(d, f)))
            except ArmloadError:
                continue
            if t is not None and t.init is not None and t.exit is not None and t.name is not None:
                found.append((f, t))
            if len(found) >= 3 or sample <= 0:
                break
            sample -= 1
        if len(found) >= 3 or sample <= 0:
            break
    if not found:
        return None
    first = found[0][1]
    for f, t in found[1:]:
        if (t.size, t.name, t.init, t.exit) != (first.size, first.name, first.init, first.exit):
            raise ArmloadError(f"{tree}: its modules disagree on struct module ({found[0][0]}: {first}; {f}: {t})")
    return StructModule(first.size, first.name, first.init, first.exit,
                        f"{tree}: {', '.join(f for f, _ in found)}")
