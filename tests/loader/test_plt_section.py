"""PltSection (get_module_plt of each generation) on hand-picked sequences against the kernel ports in
tests/oracles/module_plts.py: overflow in a later group, reuse across calls, the v4.0 zero-literal
quirk, the entry list, and a weak undefined branch target (literal 0) in a real module."""
import struct
from dataclasses import replace

import numpy as np
import pytest

from armload.kernel.config import KernelConfig
from armload.loader.elf import read_object
from armload.kernel.provider import Kernel
from armload.loader.session import load_module
from armload.loader.plt import PltSection, plan_plts, sort_keys, sym_shndx
from armload.loader.verify import verify_module
from testinputs import SYMVERS, sample
from oracles.module_plts import PltMemory
from test_plt_emission import BASE, FIXED, _kernel

CFG32 = KernelConfig(l1_cache_bytes=32)          # 8 entries per group: small sequences cross groups


def _oracle(values, size, fixed=(), scan=False, mem=None):
    return _kernel(values, size, 32, fixed, scan, mem)


@pytest.mark.parametrize("fixed", [(), FIXED])
def test_overflow_in_the_second_group_keeps_the_slots_before_it(fixed):
    vals = [0xC0200000 + 8 * i for i in range(20)]
    want, want_bad, _ = _oracle(vals, 128, fixed)
    sec = PltSection("core", BASE, 128, CFG32, fixed)
    slots, bad = sec.get_many_last(np.array(vals, np.uint32))
    assert bad == want_bad == 16 - len(fixed)
    assert slots.dtype == np.int64
    assert slots[:bad].tolist() == want
    assert want[-1] == BASE + 64 + 4 * 7          # the last slot of group 1 was handed out


def test_reuse_across_calls_is_of_the_last_entry_only():
    a, b, c, d = (0xC0300000 + 16 * i for i in range(4))
    mem = PltMemory(BASE, 256, CFG32.plt_stride, CFG32.plt_ldr)
    sec = PltSection("core", BASE, 256, CFG32, ())
    for call in ([a, b, c], [c, d], [b], [b, b, a]):
        want, bad, mem = _oracle(call, 256, mem=mem)
        got, gbad = sec.get_many_last(np.array(call, np.uint32))
        assert (gbad, got.tolist()) == (bad, want), call
        assert (sec.count, sec.lits) == (mem.plt_count, [x for g in mem.groups for x in g[1]][:mem.plt_count])
    assert sec.image() == mem.image()


def test_v40_zero_literal_quirk_crosses_into_a_group_without_ldr_words():
    """A zero literal inflates plt_count (its slot still looks free), so the walk enters group 1 with a
    non-zero count and fills it without writing the LDR words: v4.0 as written."""
    vals = [0] + [0xC0400000 + 8 * i for i in range(10)]
    want, want_bad, mem = _oracle(vals, 128, scan=True)
    sec = PltSection("core", BASE, 128, CFG32, ())
    got = [sec.get_legacy(v) for v in vals]
    assert want_bad == -1 and got == want
    assert sec.count == mem.plt_count == len(vals)
    assert sec.image() == mem.image()
    assert mem.image()[64:96] == bytes(32)             # group 1 has literals but no LDR words
    assert sec.ldr_groups == {0}


def test_v40_walk_fills_the_last_slot_then_bugs():
    vals = [0xC0500000 + 8 * i for i in range(17)]
    want, want_bad, mem = _oracle(vals, 128, scan=True)
    sec = PltSection("core", BASE, 128, CFG32, ())
    got = []
    for v in vals:
        s = sec.get_legacy(v)
        if s is None:
            break
        got.append(s)
    assert want_bad == len(got) == 16 and got == want and got[-1] == BASE + 64 + 28
    assert sec.count == mem.plt_count == 16
    assert sec.image() == mem.image()


def test_entries_report_zero_literals_but_not_padding():
    sec = PltSection("core", BASE, 128, CFG32, FIXED, ("ftrace_caller",))   # one name for two fixed
    slots, bad = sec.get_many_last(np.array([0, 0xC0600000, 0], np.uint32))
    assert bad == -1
    es = [(e.addr, e.target, e.symbol, e.fixed) for e in sec.entries({0: "weak_fn", FIXED[1]: "mcount"})]
    assert es == [(BASE, FIXED[0], "ftrace_caller", True), (BASE + 4, FIXED[1], "mcount", True),
                  (BASE + 8, 0, "weak_fn", False), (BASE + 12, 0xC0600000, None, False),
                  (BASE + 16, 0, "weak_fn", False)]
    leg = PltSection("core", BASE, 128, CFG32, ())
    assert [leg.get_legacy(v) for v in (0xC0700000, 0, 0xC0700008)] == [BASE, BASE + 4, BASE + 4]
    # slot 1 was handed out for 0, then refilled by the next value (the kernel's walk does the same)
    assert [(e.addr, e.target) for e in leg.entries({})] == [(BASE, 0xC0700000), (BASE + 4, 0xC0700008)]


def test_sort_keys_keep_all_eight_type_bits_above_the_symbol():
    r_info = np.array([(0xFFFFFF << 8) | 0xC8, (1 << 8) | 0xFF, (5 << 8) | 1], np.uint32)
    assert sort_keys(r_info).tolist() == [0xC8FFFFFF, 0xFF000001, 0x01000005]


def _weak_hello(tmp_path):
    """hello-arm.ko with its _printk calls made to an unknown weak symbol: resolution gives 0, which is
    out of branch range from module space, so each call goes through a PLT entry whose literal is 0."""
    data = bytearray(open(sample("hello-arm.ko"), "rb").read())
    obj = read_object("hello-arm.ko", bytes(data))
    st = obj.sections[obj.symtab_index]
    strtab = obj.sections[st.sh_link]
    idx = next(i for i in range(len(obj.symtab)) if obj.sym_name(i) == "_printk")
    ent = st.sh_offset + 16 * idx
    name = strtab.sh_offset + struct.unpack_from("<I", data, ent)[0]
    data[name:name + 7] = b"_prXnk\0"
    data[ent + 12] = (2 << 4) | (data[ent + 12] & 0xF)           # STB_WEAK
    p = tmp_path / "weak-arm.ko"
    p.write_bytes(bytes(data))
    return str(p)


@pytest.mark.parametrize("alg", ["legacy", "sorted", "v6"])
def test_weak_undefined_branch_target_has_a_reported_and_verified_plt_entry(tmp_path, alg):
    cfg = KernelConfig(plt_algorithm=alg)
    mod = load_module(_weak_hello(tmp_path), kernel=Kernel.from_files([SYMVERS], cfg), config=cfg)
    weak = [b for b in mod.branch_sites() if b.symbol == "_prXnk"]
    assert len(weak) == 2 and all(b.plt for b in weak) and all(b.target == 0 for b in weak)
    by_addr = {e.addr: e for e in mod.plt_entries}
    for b in weak:
        assert by_addr[b.plt].target == 0 and by_addr[b.plt].symbol == "_prXnk"
    res = verify_module(mod)
    assert res.ok and res.plt_total == len(mod.plt_entries) and res.plt_ok == res.plt_total


def test_plan_records_name_their_generation():
    plan = plan_plts(read_object(sample("hello-arm.ko")), KernelConfig())
    assert {k: v.algorithm for k, v in plan.counts.items()} == {"legacy": "legacy", "sorted": "sorted", "v6": "v6"}


def test_the_one_past_the_end_symbol_reads_its_section_index_after_the_table():
    """A relocation may name symbol index == symcount (6.1's check is `> symcount`): count_plts then
    reads that "symbol"'s st_shndx, 14 bytes into the 16 bytes after the symbol table; armload uses 0
    where those 2 bytes would end past the file."""
    obj = read_object(sample("hello-arm.ko"))
    st = obj.sections[obj.symtab_index]
    at = st.sh_offset + st.sh_size + 14
    data = bytearray(obj.data)
    data[at:at + 2] = (0x1234).to_bytes(2, "little")
    assert sym_shndx(replace(obj, data=bytes(data)))[-1] == 0x1234
    assert sym_shndx(replace(obj, data=bytes(data[:at + 2])))[-1] == 0x1234      # ends at the end of the file
    assert sym_shndx(replace(obj, data=bytes(data[:at + 1])))[-1] == 0           # one byte short
    assert sym_shndx(obj)[:-1].tolist() == obj.symtab["st_shndx"].tolist()


def test_tables_without_branches_and_several_init_tables_against_the_6_1_port(binutils, tmp_path):
    """A non-exec REL table before the exec ones, an exec table with no branch at all, and two init
    tables: 6.1 counts 0 for the branchless table, sums both init tables, and still reads the exec
    tables after the data one (module_frob_arch_sections walks every section)."""
    from oracles.module_plts import kernel_plt_counts, kernel_plt_counts_2016
    from test_plt_legacy import ARM_ZERO, _assemble, _branch
    body = ("\t.data\n\t.word ext_data\n"                                  # .rel.data first (non-exec)
            "\t.text\n" + _branch("R_ARM_CALL", "ext_a", ARM_ZERO) +
            "\t.section .text.nobranch,\"ax\"\n\t.word ext_b\n"          # exec, R_ARM_ABS32 only
            "\t.section .init.text,\"ax\"\n" + _branch("R_ARM_CALL", "ext_c", ARM_ZERO) +
            "\t.section .init.text.more,\"ax\"\n" + _branch("R_ARM_CALL", "ext_d", ARM_ZERO)
            + _branch("R_ARM_JUMP24", "ext_e", ARM_ZERO))
    p = _assemble(binutils, tmp_path, "tables", body)
    plan = plan_plts(read_object(p, object=True), KernelConfig())
    assert (plan.counts["v6"].core, plan.counts["v6"].init) == kernel_plt_counts(p) == (1 + 2, 3 + 2)
    assert plan.counts["sorted"].core == kernel_plt_counts_2016(p) == 4
