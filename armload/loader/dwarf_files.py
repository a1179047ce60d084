"""File names of a DWARF line program (pyelftools), shared by the emulator's line tables and
the disassembler's --source."""
from __future__ import annotations

import os


def file_names(lp, cu, normalize: bool = True) -> dict[int, str]:
    """The line program's file index -> its path: DWARF 5 counts files and directories from 0,
    DWARF 2-4 from 1 with directory 0 the compilation directory; relative directories are
    under DW_AT_comp_dir. normalize=False keeps the joined path as binutils' addr2line prints it
    (`./a/b.c`, `x/../y.h`)."""
    hdr = lp.header
    dirs = [d.decode() if isinstance(d, bytes) else d for d in hdr.get("include_directory", [])]
    comp_dir = cu.get_top_DIE().attributes.get("DW_AT_comp_dir")
    comp_dir = comp_dir.value.decode() if comp_dir else ""
    out = {}
    base = 0 if lp.header.version >= 5 else 1
    for i, fe in enumerate(hdr.get("file_entry", [])):
        name = fe.name.decode() if isinstance(fe.name, bytes) else fe.name
        di = fe.dir_index
        if not os.path.isabs(name):
            if lp.header.version >= 5:
                d = dirs[di] if di < len(dirs) else ""
            else:
                d = dirs[di - 1] if 0 < di <= len(dirs) else comp_dir
            if d and not os.path.isabs(d):
                d = os.path.join(comp_dir, d)
            name = os.path.join(d, name) if d else name
        out[i + base] = os.path.normpath(name) if normalize else name
    return out
