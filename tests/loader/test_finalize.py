"""load_module's writes after relocation (armload/loader/finalize.py): extable sort, ftrace NOPs,
jump labels. Encodings are checked against capstone; the passes on hand-made memory."""
import struct

import capstone
import numpy as np
import pytest

from armload.loader import finalize as F
from armload.loader.model import MemRegion
from armload.loader.plt import heapsort_order

BASE = 0xBF000000
ARM = capstone.Cs(capstone.CS_ARCH_ARM, capstone.CS_MODE_ARM)
THUMB = capstone.Cs(capstone.CS_ARCH_ARM, capstone.CS_MODE_THUMB)


def _mem(size=0x1000, base=BASE):
    return F.Memory([MemRegion("core", base, size, bytearray(size), False)])


def _cs_target(md, code, pc):
    i = next(md.disasm(code, pc))
    return i.mnemonic, int(i.op_str.lstrip("#"), 0)


@pytest.mark.parametrize("off", [-0x2000000, -0x1000, 0, 4, 0x1FFFFFC])
def test_arm_branch_encodings_agree_with_capstone_inside_the_range(off):
    pc = 0xBF800000
    insn = F.arm_branch(pc, pc + 8 + off)
    assert _cs_target(ARM, struct.pack("<I", insn), pc) == ("b", (pc + 8 + off) & 0xFFFFFFFF)
    bl = 0xEB000000 | (insn & 0xFFFFFF)
    assert F.arm_bl_target(bl, pc) == (pc + 8 + off) & 0xFFFFFFFF


@pytest.mark.parametrize("off", [-0x2000004, 0x2000000])
def test_arm_branch_out_of_range_is_none(off):
    assert F.arm_branch(0xBF800000, 0xBF800008 + off) is None


@pytest.mark.parametrize("off", [-0x1000000, -2, 0, 2, 0xFFFFFE])
def test_thumb_branch_and_bl_agree_with_capstone(off):
    pc = 0xBF800002
    h1, h2 = F.thumb_branch(pc, pc + 4 + off)
    assert _cs_target(THUMB, struct.pack("<HH", h1, h2), pc) == ("b.w", pc + 4 + off)
    bl = (h1, h2 | 0x4000)                       # the same offset as BL
    assert _cs_target(THUMB, struct.pack("<HH", *bl), pc)[1] == pc + 4 + off
    assert F.thumb_bl_target(bl, pc) == pc + 4 + off
    assert F.thumb_branch(pc, pc + 4 + (off - 0x1000002 if off <= 0 else off + 0x1000000)) is None


def test_non_branches_have_no_bl_target():
    assert F.arm_bl_target(0xEA000000, BASE) is None          # b, not bl
    assert F.arm_bl_target(0x0B000000, BASE) is None          # blEQ: not what arm_gen_branch_link writes
    assert F.thumb_bl_target((0xF000, 0x9000), BASE) is None  # b.w


def _arm_bl(pc, target):
    return 0xEB000000 | (((target - pc - 8) >> 2) & 0xFFFFFF)


def _ftrace_mem(sites, words):
    mem = _mem()
    locs = BASE + 0x800
    for i, a in enumerate(sites):
        mem.put32(locs + 4 * i, a)
    for a, w in words.items():
        mem.put32(a, w)
    return mem, locs


def test_ftrace_nops_every_site_in_sorted_order_and_skips_null_entries():
    mcount = BASE + 0x400
    sites = [BASE + 0x20, 0, BASE + 0x10]
    mem, locs = _ftrace_mem(sites, {a: _arm_bl(a, mcount) for a in sites if a})
    out = F.Finalized()
    F.ftrace_nops(mem, locs, 4 * len(sites), mcount, False, lambda ip, v: None, out)
    assert out.ftrace_bug is None and out.ftrace_nops == [BASE + 0x10, BASE + 0x20]
    assert mem.u32(BASE + 0x10) == mem.u32(BASE + 0x20) == F.ARM_FTRACE_NOP
    assert out.ftrace_old[BASE + 0x10] == struct.pack("<I", _arm_bl(BASE + 0x10, mcount))


def test_ftrace_wrong_site_stops_the_walk_with_the_kernels_message():
    mcount = BASE + 0x400
    good, bad, later = BASE + 0x10, BASE + 0x20, BASE + 0x30
    mem, locs = _ftrace_mem([later, bad, good], {good: _arm_bl(good, mcount), bad: 0xE1A00000,
                                                 later: _arm_bl(later, mcount)})
    out = F.Finalized()
    F.ftrace_nops(mem, locs, 12, mcount, False, lambda ip, v: None, out, symbolize=lambda a: "f+0x4/0x10 [m]")
    assert out.ftrace_nops == [good]
    assert out.ftrace_bug == f"ftrace failed to modify [<{bad:08x}>] f+0x4/0x10 [m]\n actual:   00:00:a0:e1"
    assert mem.u32(bad) == 0xE1A00000 and mem.u32(later) == _arm_bl(later, mcount)   # left as they were


def test_ftrace_site_outside_module_memory_faults():
    mem, locs = _ftrace_mem([0xC0000000], {})
    out = F.Finalized()
    F.ftrace_nops(mem, locs, 4, BASE + 0x400, False, lambda ip, v: None, out)
    assert out.ftrace_bug.startswith("ftrace faulted on modifying [<c0000000>]") and not out.ftrace_nops


def test_ftrace_out_of_range_mcount_goes_through_the_plt_slot():
    mcount = 0xC2312A2C                           # more than 32 MiB away from BASE + 0x10
    plt = BASE + 0x600
    site = BASE + 0x10
    mem, locs = _ftrace_mem([site], {site: _arm_bl(site, plt)})
    out = F.Finalized()
    F.ftrace_nops(mem, locs, 4, mcount, False, lambda ip, v: plt if v == mcount else None, out)
    assert out.ftrace_nops == [site] and mem.u32(site) == F.ARM_FTRACE_NOP
    # a direct-looking bl to another PLT slot is the kernel's ftrace bug
    mem, locs = _ftrace_mem([site], {site: _arm_bl(site, plt + 4)})
    out = F.Finalized()
    F.ftrace_nops(mem, locs, 4, mcount, False, lambda ip, v: plt, out)
    assert out.ftrace_bug and not out.ftrace_nops


def test_ftrace_thumb_site_gets_the_thumb_nop():
    mcount = BASE + 0x401
    site = BASE + 0x12
    h1, h2 = F.thumb_branch(site, mcount & ~1)
    mem = _mem()
    mem.put_halves(site, (h1, h2 | 0x4000))
    mem.put32(BASE + 0x800, site | 1)
    out = F.Finalized()
    F.ftrace_nops(mem, BASE + 0x800, 4, mcount, True, lambda ip, v: None, out)
    assert out.ftrace_nops == [site] and mem.halves(site) == F.THUMB_FTRACE_NOP


def test_sort_extable_sorts_by_instruction_with_the_kernels_heapsort():
    mem = _mem()
    ent = [(BASE + 0x30, 1), (BASE + 0x10, 2), (BASE + 0x30, 3), (BASE + 0x20, 4), (BASE + 0x10, 5)]
    for i, (a, b) in enumerate(ent):
        mem.put32(BASE + 0x100 + 8 * i, a)
        mem.put32(BASE + 0x104 + 8 * i, b)
    assert F.sort_extable(mem, BASE + 0x100, 40, heapsort_order) == 5
    got = [(mem.u32(BASE + 0x100 + 8 * i), mem.u32(BASE + 0x104 + 8 * i)) for i in range(5)]
    assert [g[0] for g in got] == sorted(e[0] for e in ent)
    order = heapsort_order(np.array([e[0] for e in ent], dtype=np.uint32), "v6")
    assert got == [ent[i] for i in order]       # ties in lib/sort.c's order, entries kept whole


def _jump(mem, at, entries):
    for i, (code, target, key) in enumerate(entries):
        for j, w in enumerate((code, target, key)):
            mem.put32(at + 12 * i + 4 * j, w)


def _entries(mem, at, n):
    return [tuple(mem.u32(at + 12 * i + 4 * j) for j in range(3)) for i in range(n)]


def test_jump_labels_sort_mark_init_and_link_own_keys():
    mem = _mem()
    own_key = BASE + 0x700
    mem.put32(own_key + 4, 1)                     # JUMP_TYPE_TRUE
    table = BASE + 0x200
    init_code = BASE + 0x900
    _jump(mem, table, [(BASE + 0x40, BASE + 0x80, own_key), (init_code, BASE + 0x84, own_key | 1),
                       (BASE + 0x20, BASE + 0x88, own_key)])
    out = F.Finalized()
    F.jump_labels(mem, table, 36, False, lambda codes: codes >= init_code, lambda a: True,
                  lambda a: None, out)
    assert _entries(mem, table, 3) == [(BASE + 0x20, BASE + 0x88, own_key), (BASE + 0x40, BASE + 0x80, own_key),
                                       (init_code, BASE + 0x84, own_key | 1 | F.ENTRY_INIT)]
    assert mem.u32(own_key + 4) == table | 1      # static_key_set_entries keeps the type bit
    assert out.jump_entries == 3 and not out.jump_patched


@pytest.mark.parametrize("enabled,branch,patched", [(1, 0, "b"), (0, 0, None), (1, 1, "nop"), (0, 1, None)])
def test_jump_labels_patch_sites_of_outside_keys_only_when_state_differs(enabled, branch, patched):
    mem = _mem()
    key = 0xC1000000                              # a kernel key, initially false (type 0)
    table = BASE + 0x200
    code, target = BASE + 0x40, BASE + 0x80
    mem.put32(code, 0xE320F000)
    _jump(mem, table, [(code, target, key | branch)])
    kernel = {key: enabled, key + 4: 0}
    out = F.Finalized()
    F.jump_labels(mem, table, 12, False, lambda c: c < 0, lambda a: True, kernel.get, out)
    want = {"b": F.arm_branch(code, target), "nop": F.ARM_JUMP_NOP, None: 0xE320F000}[patched]
    assert mem.u32(code) == want and out.jump_patched == ([code] if patched else [])


def test_jump_labels_leave_sites_alone_when_the_key_state_is_unknown():
    mem = _mem()
    table, code = BASE + 0x200, BASE + 0x40
    mem.put32(code, 0xE320F000)
    _jump(mem, table, [(code, BASE + 0x80, 0xC1000000)])
    out = F.Finalized()
    F.jump_labels(mem, table, 12, False, lambda c: c < 0, lambda a: True, lambda a: None, out)
    assert mem.u32(code) == 0xE320F000 and not out.jump_patched


def test_session_nops_every_mcount_call_and_a_bug_disables_ftrace_for_later_modules():
    from armload.kernel.config import DEBIAN_ARMMP
    from armload.kernel.provider import Kernel
    from armload.loader.session import Session
    from armload.loader.verify import verify_module
    from testinputs import SYMVERS, sample
    s = Session(Kernel.from_files([SYMVERS], DEBIAN_ARMMP), DEBIAN_ARMMP, "vmalloc")
    mod = s.load(sample("hello-arm.ko"))
    calls = [b for b in mod.branch_sites() if b.symbol == "__gnu_mcount_nc"]
    assert calls and all(b.plt for b in calls)          # far from the kernel: through the fixed PLT slot
    assert sorted(mod.finalized.ftrace_nops) == sorted(b.place for b in calls)
    assert all(mod.read(b.place, 4) == struct.pack("<I", F.ARM_FTRACE_NOP) for b in calls)
    assert verify_module(mod).ok                        # the replaced calls still reach __gnu_mcount_nc
    s.ftrace_disabled = True                            # what an ftrace_bug in an earlier module leaves
    mod2 = s.load(sample("enodev-arm.ko"))
    assert not mod2.finalized.ftrace_nops


def test_no_dynamic_ftrace_keeps_the_calls():
    from armload.kernel.config import DEBIAN_ARMMP
    from armload.kernel.provider import Kernel
    from armload.loader.session import Session
    from testinputs import SYMVERS, sample
    cfg = DEBIAN_ARMMP.with_(dynamic_ftrace=False)
    mod = Session(Kernel.from_files([SYMVERS], cfg), cfg).load(sample("hello-arm.ko"))
    calls = [b for b in mod.branch_sites() if b.symbol == "__gnu_mcount_nc"]
    assert calls and not mod.finalized.ftrace_nops
    assert all(F.arm_bl_target(struct.unpack("<I", mod.read(b.place, 4))[0], b.place) for b in calls)


@pytest.mark.parametrize("ko", ["hello-arm.ko", "devkit-arm-debug.ko", "regdev-thumb2.ko"])
def test_kallsyms_tables_hold_what_add_kallsyms_copies(ko):
    """Core symtab/strtab/typetab and the init mod_kallsyms, read back from module memory, against
    the .ko's own symbol table read with pyelftools (is_core_symbol: named, in an allocated
    executable non-init section)."""
    from elftools.elf.elffile import ELFFile
    from armload.kernel.config import DEBIAN_ARMMP
    from armload.kernel.provider import Kernel
    from armload.loader.session import Session
    from testinputs import SYMVERS, sample
    cfg = DEBIAN_ARMMP.with_(thumb2="thumb2" in ko)
    s = Session(Kernel.from_files([SYMVERS], cfg), cfg)
    mod = s.load(sample(ko))
    with open(sample(ko), "rb") as f:
        elf = ELFFile(f)
        secs = list(elf.iter_sections())
        want = []
        for sym in elf.get_section_by_name(".symtab").iter_symbols():
            ndx = sym["st_shndx"]
            if not isinstance(ndx, int) or ndx == 0 or not sym.name:
                continue
            sec = secs[ndx]
            if sec["sh_flags"] & 6 == 6 and not sec.name.startswith(".init"):
                want.append((sym.name, sec.name, sym["st_value"]))
    addr = {x.name: x.addr for x in mod.sections}
    assert mod.finalized.kallsyms_core == len(want) + 1
    core = [r for r in mod.regions if r.name == "core"][0]
    n = len(want) + 1
    # the core symtab is the first thing on the page after the data class (6.1 "whole core" align)
    data_end = max(x.addr + x.size for x in mod.sections if x.mem == "data")
    symoffs = (data_end + 0xFFF) & ~0xFFF
    raw = np.frombuffer(mod.read(symoffs, 16 * n), dtype=[("st_name", "<u4"), ("st_value", "<u4"),
                                                          ("st_size", "<u4"), ("info", "u1"), ("other", "u1"),
                                                          ("shndx", "<u2")])
    strs = mod.read(symoffs + 16 * n, sum(len(w[0]) + 1 for w in want) + 1)
    got = []
    for e in raw[1:]:
        name = strs[e["st_name"]:strs.index(b"\0", e["st_name"])].decode()
        got.append((name, int(e["st_value"])))
    assert got == [(nm, addr[sec] + v) for nm, sec, v in want]
    types = mod.read(symoffs + 16 * n + len(strs), n)
    assert types[1:] == b"t" * len(want) and core.base <= symoffs < core.end


def test_ftrace_sorts_the_mcount_table_in_module_memory():
    mcount = BASE + 0x400
    sites = [BASE + 0x30, BASE + 0x10, 0, BASE + 0x20]
    mem, locs = _ftrace_mem(sites, {a: _arm_bl(a, mcount) for a in sites if a})
    F.ftrace_nops(mem, locs, 16, mcount, False, lambda ip, v: None, F.Finalized())
    assert [mem.u32(locs + 4 * i) for i in range(4)] == [0, BASE + 0x10, BASE + 0x20, BASE + 0x30]


def test_pv_table_stubs_get_the_boards_offset_by_rotation():
    """`add r2, r2, #0x81000000` / `add r2, r2, #0x810000` (the compiled __PV_BITS) become
    offset<31:24> / offset<23:20> (phys2virt.S); entries are `.long insn - .`."""
    mem = _mem()
    table = BASE + 0x300
    stubs = {BASE + 0x40: 0xE2822481, BASE + 0x44: 0xE2822881, BASE + 0x48: 0xE2411481}   # add, add, sub
    for i, a in enumerate(stubs):
        mem.put32(a, stubs[a])
        mem.put32(table + 4 * i, (a - (table + 4 * i)) & 0xFFFFFFFF)
    out = F.Finalized()
    F.fixup_pv_table(mem, table, 12, 0x80000000, out)           # RAM at 0x40000000, PAGE_OFFSET 0xc0000000
    assert [mem.u32(a) for a in stubs] == [0xE2822480, 0xE2822800, 0xE2411480]
    assert next(ARM.disasm(struct.pack("<I", mem.u32(BASE + 0x40)), BASE)).op_str == "r2, r2, #128, #8"   # 0x80 ror 8
    assert out.pv_patched == list(stubs)
    F.fixup_pv_table(mem, table, 12, 0x3F300000 - 0xC0000000 & 0xFFFFFFFF, out)   # offset 0x7f300000
    assert [mem.u32(a) for a in stubs] == [0xE282247F, 0xE2822830, 0xE241147F]


def test_lpae_pv_stubs_movw_and_the_high_word():
    """LPAE (6.1.0-50-armmp-lpae's mvpp2, words the booted kernel wrote): __pv_add_carry_stub's
    `movw r1, #0x81` gets offset<31:20> (0x800), __pv_stub_mov_hi's `mov r1, #0x81` becomes `mvn r1,
    #0` when __pv_offset's high word is all ones, `mov r1, #0` when it is zero."""
    mem = _mem()
    table = BASE + 0x300
    stubs = {BASE + 0x40: 0xE3001081, BASE + 0x44: 0xE3A01081, BASE + 0x48: 0xE2822481}    # movw, mov, add
    for i, a in enumerate(stubs):
        mem.put32(a, stubs[a])
        mem.put32(table + 4 * i, (a - (table + 4 * i)) & 0xFFFFFFFF)
    F.fixup_pv_table(mem, table, 12, 0x80000000, F.Finalized(), high_ones=True)
    assert [mem.u32(a) for a in stubs] == [0xE3001800, 0xE3E01000, 0xE2822480]
    assert [next(ARM.disasm(struct.pack("<I", mem.u32(a)), a)).mnemonic for a in stubs] == ["movw", "mvn", "add"]
    F.fixup_pv_table(mem, table, 12, 0x7F300000, F.Finalized(), high_ones=False)
    assert [mem.u32(a) for a in stubs] == [0xE30017F3, 0xE3A01000, 0xE282247F]


def test_pv_table_entry_outside_module_memory_is_refused():
    mem = _mem()
    mem.put32(BASE + 0x300, 0x10000000)
    with pytest.raises(ValueError, match="outside the module's memory"):
        F.fixup_pv_table(mem, BASE + 0x300, 4, 0x80000000, F.Finalized())
