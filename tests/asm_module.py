"""Build LoadedModule objects from keystone-assembled ARM/Thumb-2 snippets, in the loader's format.

    mod, kernel = build_module({
        "init_module": '''
            push {r4, lr}
            movw r0, #{lo:msg}
            movt r0, #{hi:msg}
            bl {plt:_printk}          @ through a PLT slot
            bl {helper}               @ direct call to another fixture function
            mov r0, #0
            pop {r4, pc}
        ''',
        "helper": "bx lr",
    }, rodata={"msg": b"\\x016hello %d\\n\\0"}, externs={"_printk": "func"})

Placeholders: `{name}` is the address of a function, rodata/data object or extern (Thumb
functions and externs without bit 0: B/BL encodings take the plain address), `{plt:name}` the
address of the PLT slot for an extern, `{lo:name}`/`{hi:name}` the 16-bit halves of an address.
Every direct B/BL/BLX in the text whose target is a known symbol or PLT slot becomes a row of
`module.branches`, exactly as the loader records relocated branch sites. The PLT is laid out as
the kernel's: one cache line of identical LDR words followed by one line of literals.
"""
from __future__ import annotations

import re
import struct

import numpy as np
from capstone import CS_ARCH_ARM, CS_MODE_ARM, CS_MODE_THUMB, Cs
from capstone.arm import ARM_INS_B, ARM_INS_BL, ARM_INS_BLX
from keystone import KS_ARCH_ARM, KS_MODE_ARM, KS_MODE_THUMB, Ks

from armload.kernel.config import KernelConfig
from armload.kernel.provider import Kernel
from armload.loader.model import (BRANCH_DTYPE, LoadedModule, LoadedSection, MemRegion, ModuleSymbol, PltEntry,
                           ResolvedSymbol)

R_ARM_CALL, R_ARM_JUMP24, R_ARM_THM_CALL, R_ARM_THM_JUMP24 = 28, 29, 10, 30
SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR = 1, 2, 4
MODULE_BASE = 0xBF000000
KERNEL_TEXT = 0xC0100000
KERNEL_DATA = 0xC8000000

_PH = re.compile(r"\{(?:(plt|lo|hi):)?([A-Za-z_][\w.]*)\}")


def _assemble(src: str, addr: int, thumb: bool) -> bytes:
    ks = Ks(KS_ARCH_ARM, KS_MODE_THUMB if thumb else KS_MODE_ARM)
    enc, _ = ks.asm(src, addr)
    return bytes(enc or b"")


def build_module(functions: dict[str, str], *, thumb: bool = False, rodata: dict[str, bytes] | None = None,
                 data: dict[str, bytes] | None = None, externs: dict[str, str] | None = None,
                 extern_addrs: dict[str, int] | None = None, init: str | None = "init_module",
                 exit: str | None = None, name: str = "fixture", base: int | None = None,
                 config: KernelConfig | None = None, init_section: bool = False):
    """Returns (LoadedModule, Kernel). externs: name -> "func"/"data"."""
    config = config or KernelConfig(thumb2=thumb)
    if base is None:
        base = config.modules_vaddr
    rodata = rodata or {}
    data = data or {}
    externs = dict(externs or {})
    kernel = Kernel.builtin(config)
    addrs: dict[str, int] = {}
    kinds: dict[str, str] = {}
    ti = di = 0
    for n, k in externs.items():
        if extern_addrs and n in extern_addrs:
            addrs[n] = extern_addrs[n]
        elif k == "data":
            addrs[n] = KERNEL_DATA + di * 0x10000
            di += 1
        else:
            # a Thumb-2 kernel's function pointers carry bit 0
            addrs[n] = KERNEL_TEXT + ti * 16 + (1 if thumb else 0)
            ti += 1
        kinds[n] = k
        kernel.simulated[n] = addrs[n]

    # which externs are called through the PLT (order of first use)
    plt_syms: list[str] = []
    for src in functions.values():
        for kind, nm in _PH.findall(src):
            if kind == "plt" and nm not in plt_syms:
                plt_syms.append(nm)

    def subst(src: str, table: dict[str, int], plt: dict[str, int]) -> str:
        def rep(m):
            kind, nm = m.group(1), m.group(2)
            if kind == "plt":
                return f"{plt[nm]:#x}"
            if nm not in table:
                return m.group(0)         # a register list such as {lr}
            a = table[nm]
            if kind == "lo":
                return f"{a & 0xFFFF:#x}"
            if kind == "hi":
                return f"{a >> 16:#x}"
            return f"{a & ~1:#x}"
        return _PH.sub(rep, src)

    # two passes: sizes first (placeholder addresses), then the real ones
    func_names = list(functions)
    sizes = {}
    dummy = {n: base for n in list(functions) + list(rodata) + list(data)}
    dummy.update(addrs)
    dummy_plt = {n: base for n in plt_syms}
    for n in func_names:
        sizes[n] = len(_assemble(subst(functions[n], dummy, dummy_plt), base, thumb))
    stride = config.l1_cache_bytes
    text_addr = base
    off = 0
    faddr = {}
    for n in func_names:
        faddr[n] = text_addr + off
        off += (sizes[n] + 3) & ~3
    text_size = off
    plt_addr = (text_addr + text_size + stride - 1) & ~(stride - 1)
    n_groups = (len(plt_syms) + config.plt_ent_count - 1) // config.plt_ent_count
    plt_size = n_groups * 2 * stride
    text_end = plt_addr + plt_size
    ro_addr = (text_end + 0xFFF) & ~0xFFF
    roff = 0
    oaddr = {}
    for n, b in rodata.items():
        oaddr[n] = ro_addr + roff
        roff += (len(b) + 3) & ~3
    ro_size = roff
    data_addr = (ro_addr + max(ro_size, 1) + 0xFFF) & ~0xFFF
    doff = 0
    for n, b in data.items():
        oaddr[n] = data_addr + doff
        doff += (len(b) + 3) & ~3
    data_size = doff
    end = (data_addr + max(data_size, 1) + 0xFFF) & ~0xFFF

    table = dict(addrs)
    table.update({n: a | (1 if thumb else 0) for n, a in faddr.items()})
    table.update(oaddr)
    plt_slot = {}
    for i, nm in enumerate(plt_syms):
        g, s = divmod(i, config.plt_ent_count)
        plt_slot[nm] = plt_addr + g * 2 * stride + 4 * s

    image = bytearray(end - base)
    for n in func_names:
        code = _assemble(subst(functions[n], table, plt_slot), faddr[n], thumb)
        if len(code) != sizes[n]:
            raise ValueError(f"fixture {n}: size changed between passes ({sizes[n]} -> {len(code)})")
        image[faddr[n] - base:faddr[n] - base + len(code)] = code
    plt_entries = []
    ldr = struct.pack("<I", config.plt_ldr)
    for g in range(n_groups):
        gb = plt_addr + g * 2 * stride
        for s in range(config.plt_ent_count):
            image[gb - base + 4 * s:gb - base + 4 * s + 4] = ldr
    for nm, slot in plt_slot.items():
        lit = addrs[nm]
        image[slot + stride - base:slot + stride - base + 4] = struct.pack("<I", lit)
        plt_entries.append(PltEntry(slot, lit, "core", nm))
    for n, b in rodata.items():
        image[oaddr[n] - base:oaddr[n] - base + len(b)] = b
    for n, b in data.items():
        image[oaddr[n] - base:oaddr[n] - base + len(b)] = b

    text_name = ".init.text" if init_section else ".text"
    sections = [LoadedSection(1, text_name, text_addr, text_size, SHF_ALLOC | SHF_EXECINSTR, 1,
                              "init_text" if init_section else "text", bytes(image[:text_size]))]
    if plt_size:
        sections.append(LoadedSection(2, ".plt", plt_addr, plt_size, SHF_ALLOC | SHF_EXECINSTR, 8, "text",
                                      bytes(image[plt_addr - base:plt_addr - base + plt_size])))
    if ro_size:
        sections.append(LoadedSection(3, ".rodata", ro_addr, ro_size, SHF_ALLOC, 1, "rodata",
                                      bytes(image[ro_addr - base:ro_addr - base + ro_size])))
    if data_size:
        sections.append(LoadedSection(4, ".data", data_addr, data_size, SHF_ALLOC | SHF_WRITE, 1, "data",
                                      bytes(image[data_addr - base:data_addr - base + data_size])))
    regions = [MemRegion("core", base, end - base, image, False)]

    symbols = [ModuleSymbol("$t" if thumb else "$a", text_addr, 0, "notype", "local", text_name)]
    for n in func_names:
        symbols.append(ModuleSymbol(n, table[n], sizes[n], "func", "global", text_name))
    for n in rodata:
        symbols.append(ModuleSymbol(n, oaddr[n], len(rodata[n]), "object", "local", ".rodata"))
    for n in data:
        symbols.append(ModuleSymbol(n, oaddr[n], len(data[n]), "object", "local", ".data"))
    resolved = {n: ResolvedSymbol(n, addrs[n], "simulated", kinds[n]) for n in externs}
    sym_names = [""] + func_names + list(externs)
    sym_index = {n: i for i, n in enumerate(sym_names)}

    # branch rows: every direct branch to a known address
    by_addr = {a & ~1: n for n, a in table.items() if n in externs or n in faddr}
    slot_sym = {a: n for n, a in plt_slot.items()}
    md = Cs(CS_ARCH_ARM, CS_MODE_THUMB if thumb else CS_MODE_ARM)
    rows = []
    for insn in md.disasm(bytes(image[:text_size]), text_addr):
        if insn.id not in (ARM_INS_B, ARM_INS_BL, ARM_INS_BLX) or not insn.op_str.startswith("#"):
            continue
        tgt = int(insn.op_str[1:], 0)
        if insn.size == 2:
            continue       # narrow branches carry no relocation the kernel handles
        is_call = insn.id in (ARM_INS_BL, ARM_INS_BLX)
        rtype = (R_ARM_THM_CALL if is_call else R_ARM_THM_JUMP24) if thumb else (R_ARM_CALL if is_call else R_ARM_JUMP24)
        if tgt in slot_sym:
            nm = slot_sym[tgt]
            rows.append((1, insn.address - text_addr, insn.address, rtype, sym_index[nm], addrs[nm], tgt))
        elif tgt in by_addr:
            nm = by_addr[tgt]
            rows.append((1, insn.address - text_addr, insn.address, rtype, sym_index[nm], table[nm], 0))
    branches = np.array(rows, dtype=BRANCH_DTYPE)

    mod = LoadedModule(
        name=name, path=f"<{name}>", config=config, regions=regions, sections=sections, symbols=symbols,
        resolved=resolved, sym_names=sym_names, branches=branches, plt_entries=plt_entries,
        plt_counts={}, reloc_counts={}, init_addr=table.get(init) if init else None,
        exit_addr=table.get(exit) if exit else None, exports=[], modinfo={}, thumb=thumb)
    return mod, kernel


def corrupt_word(mod: LoadedModule, addr: int, value: int) -> None:
    """Overwrite one 32-bit word of the loaded image (after loading, as an attacker or bug would)."""
    r = mod.region_of(addr)
    struct.pack_into("<I", r.data, addr - r.base, value & 0xFFFFFFFF)


def read_word(mod: LoadedModule, addr: int) -> int:
    return struct.unpack("<I", mod.read(addr, 4))[0]
