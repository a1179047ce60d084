"""The real kernel's module_frob_arch_sections and count_plts, called in the booted Debian kernel.

An oracle for armload's PLT counting and lib/sort.c replay that shares no code with
armload/loader/plt.py: the module file is copied into the kernel's vmalloc memory, its section headers are
rewritten as setup_load_info does (sh_addr = hdr + sh_offset), and the kernel's own
module_frob_arch_sections sorts every exec REL table in place and sizes .plt/.init.plt; the
kernel's count_plts then gives each table's exact count. ELF headers are read here with struct.
"""
from __future__ import annotations

import struct

SHT_SYMTAB, SHT_REL = 2, 9
SHF_EXECINSTR = 0x4
SHDR = 40


def _shdrs(data: bytes):
    e_shoff, = struct.unpack_from("<I", data, 0x20)
    e_shnum, e_shstrndx = struct.unpack_from("<HH", data, 0x30)
    rows = [list(struct.unpack_from("<10I", data, e_shoff + i * SHDR)) for i in range(e_shnum)]
    return e_shoff, e_shnum, e_shstrndx, rows


def _name(data, rows, shstrndx, i):
    off = rows[shstrndx][4] + rows[i][0]
    return data[off:data.index(b"\0", off)].decode()


def kernel_frob(k, data: bytes) -> dict:
    """{"rc", "plt_size", "init_plt_size", "sorted": {relsec: bytes}, "counts": {relsec: n}} from
    BootedKernel `k` (a fresh restore: the calls change its memory)."""
    e_shoff, shnum, shstrndx, rows = _shdrs(data)
    buf = k.vmalloc(len(data) + 64)
    assert buf, "oracle: no memory for the module file"
    k.write(buf, data)
    for i in range(1, shnum):                     # rewrite_section_headers
        k.write(buf + e_shoff + i * SHDR + 12, struct.pack("<I", buf + rows[i][4]))
    mod = k.kmalloc(0x800)
    assert mod, "oracle: no memory for struct module"
    k.write(mod, bytes(0x800))
    k.write(mod + 12, b"oracle\0")
    i0 = k.insns
    rc = k.call("module_frob_arch_sections", buf, buf + e_shoff, buf + rows[shstrndx][4], mod)
    out = {"rc": rc - (1 << 32) if rc & 0x80000000 else rc, "sorted": {}, "counts": {}, "instructions": k.insns - i0}
    after = k.read(buf + e_shoff, shnum * SHDR)
    names = {i: _name(data, rows, shstrndx, i) for i in range(shnum)}
    for i in range(shnum):
        size = struct.unpack_from("<I", after, i * SHDR + 20)[0]
        if names[i] == ".plt":
            out["plt_size"] = size
        elif names[i] == ".init.plt":
            out["init_plt_size"] = size
    symtab = next(i for i in range(shnum) if rows[i][1] == SHT_SYMTAB)
    for i in range(1, shnum):
        if rows[i][1] != SHT_REL or not rows[i][5]:
            continue
        dst = rows[i][7]
        if not rows[dst][2] & SHF_EXECINSTR:
            continue
        out["sorted"][i] = k.read(buf + rows[i][4], rows[i][5])
        out["counts"][i] = k.call("count_plts", buf + rows[symtab][4], buf + rows[dst][4], buf + rows[i][4],
                                  rows[i][5] // 8, dst)
        out.setdefault("init_tables", set())
        if names[dst].startswith(".init"):          # module_init_layout_section (6.1)
            out["init_tables"].add(i)
    k.vfree(buf)
    k.kfree(mod)
    return out
