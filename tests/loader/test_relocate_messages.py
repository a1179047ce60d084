"""apply_rel_section's refusals: the kernel's pr_err text (arch/arm/kernel/module.c, v6.1) as the
head of each message, armload's context after it, the error's fields, and which entry of a
table is reported (the first that fails, in table order, like the kernel's loop)."""
import numpy as np
import pytest

from armload.kernel.config import KernelConfig
from armload.errors import PltError, RelocationError
from armload.loader.relocate import PltRouter, SectionTarget, SymbolValues, apply_rel_section

CFG = KernelConfig(thumb2=False, module_plts=False)
BL, B = 0xEBFFFFFE, 0xEAFFFFFE
P = 0xBF000000


def run(entries, config=CFG, values=(0, P + 0x100, 0), stypes=(0, 2, 0), names=("", "f", "g"), symcount=2,
        size=64, index_base=0, plt=None, relidx=3):
    """entries: (r_offset, sym, rtype, word). Returns the section memory after relocation."""
    mem = np.zeros(size, dtype=np.uint8)
    for off, _, _, word in entries:
        if off + 4 <= size:
            mem[off:off + 4] = np.frombuffer(np.uint32(word).tobytes(), np.uint8)
    syms = SymbolValues(value=np.array(values, np.uint32), stype=np.array(stypes, np.uint8), names=list(names))
    tgt = SectionTarget(1, ".text", P, size, mem, 0)
    apply_rel_section("m", relidx, ".rel.text", np.array([e[0] for e in entries], np.uint32),
                      np.array([(e[1] << 8) | e[2] for e in entries], np.uint32), tgt, syms, symcount, config, plt,
                      "m.ko", index_base=index_base)
    return mem


def refused(entries, cls=RelocationError, **kw):
    with pytest.raises(cls) as e:
        run(entries, **kw)
    return e.value


def test_bad_symbol_index_message_and_fields():
    e = refused([(0, 2, 2, 0), (4, 5, 2, 0)], index_base=10)
    assert e.message == ("m: section 3 reloc 11: bad relocation sym offset [.rel.text -> .text+0x4] "
                         "(symbol index 5 > 2 symbols)")
    assert e.to_dict() == {"error": "RelocationError", "message": e.message, "errno": -8, "errno_name": "ENOEXEC",
                           "file": "m.ko", "section": 3, "section_name": ".rel.text", "reloc": 11, "offset": 4,
                           "target_section": ".text", "type": "R_ARM_ABS32"}


def test_out_of_bounds_message():
    e = refused([(61, 1, 2, 0)])
    assert e.message == ("m: section 3 reloc 0 sym 'f': out of bounds relocation, offset 61 size 64 "
                         "[.rel.text -> .text+0x3d]")
    assert e.context["symbol"] == "f" and e.context["offset"] == 61


@pytest.mark.parametrize("rtype,hint", [(10, True), (30, True), (47, True), (99, False), (103, False)])
def test_unknown_relocation_message(rtype, hint):
    e = refused([(0, 1, rtype, 0)])
    name = {10: "R_ARM_THM_CALL", 30: "R_ARM_THM_JUMP24", 47: "R_ARM_THM_MOVW_ABS_NC", 103: "R_ARM_THM_JUMP8"}.get(rtype, f"R_ARM_{rtype}")
    want = f"m: unknown relocation: {rtype} [.rel.text -> .text+0x0] {name} sym 'f' reloc 0 of section 3"
    if hint:
        want += " (a Thumb-2 relocation: this kernel is not CONFIG_THUMB2_KERNEL; try --thumb2)"
    assert e.message == want


def test_group_relocations_unknown_without_config():
    e = refused([(0, 1, 57, 0xE28F0000)], config=CFG.with_(group_relocs=False))
    assert e.message.startswith("m: unknown relocation: 57 ")


def test_interworking_messages():
    e = refused([(0, 1, 28, BL)], values=(0, P + 0x101, 0))
    assert e.message == ("m: section 3 reloc 0 sym 'f': unsupported interworking call (ARM -> Thumb) "
                         "[.rel.text -> .text+0x0]")
    assert e.context["type"] == "R_ARM_CALL"
    e = refused([(0, 1, 10, 0xFFFEF7FF)], config=CFG.with_(thumb2=True))
    assert e.message == ("m: section 3 reloc 0 sym 'f': unsupported interworking call (Thumb -> ARM) "
                         "[.rel.text -> .text+0x0]")


@pytest.mark.parametrize("S,shown", [(0, "0"), (0x10, "0x10"), (0xC0100000 + 0x04000000, "0xc4100000")])
def test_out_of_range_message_prints_like_printf_hash_x(S, shown):
    """`(%#lx -> %#x)` of loc and sym->st_value: %#x prints a zero as plain 0."""
    e = refused([(8, 1, 29, B)], values=(0, S, 0))
    assert e.message == (f"m: section 3 reloc 0 sym 'f': relocation 29 out of range ({P + 8:#x} -> {shown}) "
                         f"[.rel.text -> .text+0x8]")


def test_out_of_range_prel31_and_ldr_g2_messages():
    e = refused([(0, 1, 42, 0)], values=(0, P + 0x40000000, 0))
    assert e.message == f"m: section 3 reloc 0 sym 'f': relocation 42 out of range ({P:#x} -> {P + 0x40000000:#x}) " \
                        "[.rel.text -> .text+0x0]"
    e = refused([(4, 1, 63, 0xE5901000)], values=(0, P + 4 + 0x7F7F1000 - (1 << 32), 0))
    assert "relocation 63 out of range" in e.message


def test_first_failing_entry_wins_in_table_order():
    """The kernel stops at the first entry that fails, whatever kind of failure comes later."""
    entries = [(0, 1, 2, 0), (4, 1, 29, B), (8, 9, 2, 0), (70, 1, 2, 0), (12, 1, 99, 0)]
    e = refused(entries, values=(0, 0x10, 0))
    assert e.context["reloc"] == 1 and "relocation 29 out of range" in e.message
    e = refused([entries[0]] + entries[2:])
    assert e.context["reloc"] == 1 and "bad relocation sym offset" in e.message
    e = refused([entries[0], entries[3], entries[4]])
    assert e.context["reloc"] == 1 and "out of bounds relocation" in e.message
    e = refused([entries[0], entries[4]])
    assert e.context["reloc"] == 1 and "unknown relocation: 99" in e.message


def test_symbol_name_of_the_one_past_the_end_index():
    """An entry whose symbol index equals the count names no symbol in its message."""
    e = refused([(0, 2, 29, B)], values=(0, 0, 0))
    assert e.message.startswith("m: section 3 reloc 0 sym 'g': relocation 29 out of range")


def test_words_written_little_endian_and_none_writes_nothing():
    mem = run([(0, 1, 2, 0x11223344), (4, 1, 0, 0xAABBCCDD), (8, 1, 3, 0)])
    w = np.frombuffer(mem[:12].tobytes(), "<u4")
    assert w[0] == (0x11223344 + P + 0x100) & 0xFFFFFFFF
    assert w[1] == 0xAABBCCDD                                    # R_ARM_NONE
    assert w[2] == 0x100 - 8                                     # REL32: S - P
    assert mem[:4].tolist() == [(int(w[0]) >> (8 * k)) & 0xFF for k in range(4)]


def test_plt_exhausted_is_a_plt_error():
    class Full:
        size = 8

        def get_many_last(self, vals):
            return np.zeros(len(vals), np.int64), 0

    router = PltRouter(core=Full(), init=None, within_init=lambda p: np.zeros(len(p), bool), algorithm="v6")
    e = refused([(0, 1, 2, 0), (4, 1, 28, BL)], cls=PltError, values=(0, 0x10000000, 0),
                config=CFG.with_(module_plts=True), plt=router)
    assert e.message == ("m: section 3 reloc 1 sym 'f': module PLT section exhausted [.rel.text -> .text+0x4] "
                         "(the kernel would hit BUG_ON in get_module_plt)")


def test_counts_per_type_and_branch_rows():
    res = None
    mem = np.zeros(64, np.uint8)
    syms = SymbolValues(np.array([0, P + 0x20, 0], np.uint32), np.array([0, 2, 0], np.uint8), ["", "f", "g"])
    for off, word in ((0, BL), (4, B), (8, 0)):
        mem[off:off + 4] = np.frombuffer(np.uint32(word).tobytes(), np.uint8)
    res = apply_rel_section("m", 3, ".rel.text", np.array([0, 4, 8], np.uint32),
                            np.array([(1 << 8) | 28, (1 << 8) | 29, (1 << 8) | 2], np.uint32),
                            SectionTarget(1, ".text", P, 64, mem, 0), syms, 2, CFG, None, "m.ko")
    assert res.counts == {28: 1, 29: 1, 2: 1}
    (offs, places, types, symi, targets, slots), = res.branches
    assert offs.tolist() == [0, 4] and places.tolist() == [P, P + 4] and types.tolist() == [28, 29]
    assert symi.tolist() == [1, 1] and targets.tolist() == [P + 0x20, P + 0x20] and slots.tolist() == [0, 0]


def test_plt_exhaustion_names_the_entry_that_overflows():
    """A 2-entry PLT and three far calls to different functions: the kernel gives the first two
    their slots and hits BUG_ON at the third (reloc 2); the two before it are fine."""
    from armload.loader.plt import PltSection
    cfg = CFG.with_(module_plts=True, dynamic_ftrace=False)
    sec = PltSection("core", P + 0x1000, 16, cfg, ())
    router = PltRouter(core=sec, init=None, within_init=lambda p: np.zeros(len(p), bool), algorithm="v6")
    e = refused([(0, 1, 28, BL), (4, 2, 28, BL), (8, 3, 28, BL)], cls=PltError, config=cfg, plt=router,
                values=(0, 0x10000000, 0x10000100, 0x10000200, 0), stypes=(0, 2, 2, 2, 0),
                names=("", "a", "b", "c", ""), symcount=4)
    assert e.message.startswith("m: section 3 reloc 2 sym 'c': module PLT section exhausted")
    mem = run([(0, 1, 28, BL), (4, 2, 28, BL)], config=cfg, values=(0, 0x10000000, 0x10000100, 0),
              stypes=(0, 2, 2, 0), names=("", "a", "b", ""), symcount=3,
              plt=PltRouter(core=PltSection("core", P + 0x1000, 16, cfg, ()), init=None,
                            within_init=lambda p: np.zeros(len(p), bool), algorithm="v6"))
    w = np.frombuffer(mem[:8].tobytes(), "<u4")
    assert w.tolist() == [0xEB000000 | ((0x1000 - 8) >> 2), 0xEB000000 | ((0x1004 - 4 - 8) >> 2)]


@pytest.mark.parametrize("off,via_plt", [(-0x02000000, True), (-0x01FFFFFC, False), (0x01FFFFFC, False),
                                         (0x02000000, True)])
def test_plt_routing_uses_the_kernel_bounds(off, via_plt):
    """`offset <= (s32)0xfe000000 || offset >= (s32)0x02000000` routes through a PLT entry: the
    encodable -32 MiB goes through the PLT too."""
    from armload.loader.plt import PltSection
    cfg = CFG.with_(module_plts=True, dynamic_ftrace=False)
    sec = PltSection("core", P + 0x1000, 128, cfg, ())
    router = PltRouter(core=sec, init=None, within_init=lambda p: np.zeros(len(p), bool), algorithm="v6")
    S = (P + 8 + off) & 0xFFFFFFFF
    mem = run([(0, 1, 28, BL)], config=cfg, plt=router, values=(0, S, 0))
    w = int(np.frombuffer(mem[:4].tobytes(), "<u4")[0])
    if via_plt:
        assert w == 0xEB000000 | ((0x1000 - 8) >> 2) and sec.lits == [S]
    else:
        assert w == 0xEB000000 | ((off >> 2) & 0xFFFFFF) and sec.lits == []


# --- the last word of a section, a section shorter than a word, sorted rows, type order ------------
def test_the_last_word_of_the_section_is_relocated():
    mem = run([(60, 1, 2, 0x10)])
    assert int(np.frombuffer(mem[60:64].tobytes(), "<u4")[0]) == P + 0x110


def test_a_section_shorter_than_a_word_is_not_bounded_by_the_kernel_but_by_module_memory():
    """`offset > sh_size - sizeof(u32)` wraps for sh_size < 4, so 6.1 writes past the section; with
    nothing after it in module memory armload refuses instead of writing outside."""
    e = refused([(0, 1, 2, 0)], size=2)
    assert e.message == ("m: section 3 reloc 0: place 0xbf000000 lies outside module memory (section .text is "
                         "2 bytes) [.rel.text -> .text+0x0]")
    assert (e.context["reloc"], e.context["symbol"], e.context["offset"]) == (0, "f", 0)


def test_error_names_the_file_row_of_a_sorted_table():
    mem = np.zeros(64, np.uint8)
    syms = SymbolValues(np.array([0, P, 0], np.uint32), np.array([0, 2, 0], np.uint8), ["", "f", ""])
    with pytest.raises(RelocationError) as e:
        apply_rel_section("m", 3, ".rel.text", np.array([0, 4], np.uint32), np.array([(1 << 8) | 2, (9 << 8) | 2],
                          np.uint32), SectionTarget(1, ".text", P, 64, mem, 0), syms, 2, CFG, None, "m.ko",
                          index_base=4, rows=np.array([7, 2]))
    assert e.value.message.startswith("m: section 3 reloc 5 (row 2 of .rel.text as readelf shows it; the kernel "
                                      "sorted the table): bad relocation sym offset")
    assert (e.value.context["reloc"], e.value.context["row"]) == (5, 2)


def test_a_failing_entry_of_a_later_type_is_found_before_an_earlier_refusal():
    """The checks are per type but the report is per entry, in table order: an out-of-range PREL31
    (type 42) at entry 0 wins over a bad symbol (type 2) or an unknown type (10 without Thumb-2) at
    entry 1."""
    far = P + 0x40000000                 # PREL31: offset >= 0x40000000 is out of range
    for second in ((4, 9, 2, 0), (4, 1, 10, 0)):
        e = refused([(0, 1, 42, 0), second], values=(0, far, 0))
        assert e.message.startswith("m: section 3 reloc 0 sym 'f': relocation 42 out of range"), (second, e.message)


def test_far_branch_without_a_plt_router_is_exhausted_at_the_first_one():
    e = refused([(0, 1, 28, BL), (4, 1, 28, BL)], cls=PltError, values=(0, 0x10000000, 0),
                config=CFG.with_(module_plts=True))
    assert e.message.startswith("m: section 3 reloc 0 sym 'f': module PLT section exhausted")


def test_legacy_exhaustion_says_bug():
    from armload.loader.plt import PltSection
    cfg = CFG.with_(module_plts=True, dynamic_ftrace=False, plt_algorithm="legacy")
    router = PltRouter(core=PltSection("core", P + 0x1000, 0, cfg, ()), init=None,
                       within_init=lambda p: np.zeros(len(p), bool), algorithm="legacy")
    e = refused([(0, 1, 28, BL)], cls=PltError, config=cfg, plt=router, values=(0, 0x10000000, 0))
    assert e.message == ("m: section 3 reloc 0 sym 'f': module PLT section exhausted [.rel.text -> .text+0x0] "
                         "(the kernel would hit BUG() in get_module_plt)")
