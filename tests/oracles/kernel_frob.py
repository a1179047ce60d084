"""The real kernel's module_frob_arch_sections and count_plts, run from the Debian Image.

An oracle for armload's PLT counting and lib/sort.c replay that shares no code with
armload/loader/plt.py: the module file is copied into emulated kernel memory, its section headers are
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


def kernel_frob(machine, data: bytes) -> dict:
    """{"rc", "plt_size", "init_plt_size", "sorted": {relsec: bytes}, "counts": {relsec: n}}."""
    e_shoff, shnum, shstrndx, rows = _shdrs(data)
    heap = machine.heap
    buf = heap.alloc(len(data) + 64, area="vmalloc", kind="oracle: module file")
    assert buf, "oracle: no memory for the module file"
    machine.uc.mem_write(buf, data)
    for i in range(1, shnum):                     # rewrite_section_headers
        machine.uc.mem_write(buf + e_shoff + i * SHDR + 12, struct.pack("<I", buf + rows[i][4]))
    mod = heap.alloc(0x800, zero=True, kind="oracle: struct module")
    machine.uc.mem_write(mod + 12, b"oracle\0")
    frob = machine.kernel_function("module_frob_arch_sections")
    r = machine.call(frob, [buf, buf + e_shoff, buf + rows[shstrndx][4], mod], name="module_frob_arch_sections")
    assert r.status == "returned", f"oracle: the kernel's frob did not return: {r.fault and r.fault.message}"
    out = {"rc": r.retval, "sorted": {}, "counts": {}, "instructions": r.instructions}
    after = bytes(machine.uc.mem_read(buf + e_shoff, shnum * SHDR))
    names = {i: _name(data, rows, shstrndx, i) for i in range(shnum)}
    for i in range(shnum):
        size = struct.unpack_from("<I", after, i * SHDR + 20)[0]
        if names[i] == ".plt":
            out["plt_size"] = size
        elif names[i] == ".init.plt":
            out["init_plt_size"] = size
    symtab = next(i for i in range(shnum) if rows[i][1] == SHT_SYMTAB)
    count = machine.kernel_function("count_plts")
    for i in range(1, shnum):
        if rows[i][1] != SHT_REL or not rows[i][5]:
            continue
        dst = rows[i][7]
        if not rows[dst][2] & SHF_EXECINSTR:
            continue
        out["sorted"][i] = bytes(machine.uc.mem_read(buf + rows[i][4], rows[i][5]))
        c = machine.call(count, [buf + rows[symtab][4], buf + rows[dst][4], buf + rows[i][4], rows[i][5] // 8, dst],
                         name="count_plts")
        assert c.status == "returned", f"oracle: count_plts did not return: {c.fault and c.fault.message}"
        out["counts"][i] = c.retval
        out.setdefault("init_tables", set())
        if names[dst].startswith(".init"):          # module_init_layout_section (6.1)
            out["init_tables"].add(i)
    heap.free(buf)
    heap.free(mod)
    return out
