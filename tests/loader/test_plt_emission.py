"""PLT emission (get_module_plt) and the PLT helpers against module-plts.c, public API only."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from armload.kernel.config import KernelConfig
from armload.loader.elf import read_object
from armload.loader.plt import PltSection, file_words, plan_plts, plt_size, zero_addend
from testinputs import all_kos
from oracles.module_plts import Bug, PltMemory, get_module_plt_scan, get_module_plt_v61, is_zero_addend_relocation
from oracles.module_plts import kernel_plt_counts

BASE = 0xF0000000
FIXED = (0xC0108000, 0xC0108040)
vals = st.lists(st.sampled_from([0xC0200000 + 8 * i for i in range(12)] + list(FIXED) + [0]), min_size=1, max_size=80)


def _kernel(values, size, l1, fixed, scan=False, mem=None):
    """The kernel port's get_module_plt on each value: (slots, index of the BUG() or -1, memory).
    `mem`: carry on in a section that earlier calls filled."""
    cfg = KernelConfig(l1_cache_bytes=l1)
    mem = mem or PltMemory(BASE, size, cfg.plt_stride, cfg.plt_ldr)
    slots = []
    for v in values:
        try:
            slots.append(get_module_plt_scan(mem, v) if scan else get_module_plt_v61(mem, v, fixed))
        except Bug:
            return slots, len(slots), mem
    return slots, -1, mem


@settings(deadline=None)
@given(vals, st.sampled_from([32, 64]), st.sampled_from([(), FIXED]), st.integers(1, 4))
def test_get_many_last_equals_get_module_plt(values, l1, fixed, groups):
    cfg = KernelConfig(l1_cache_bytes=l1)
    size = groups * 2 * cfg.plt_stride
    want_slots, want_bad, mem = _kernel(values, size, l1, fixed)
    sec = PltSection("core", BASE, size, cfg, fixed)
    slots, bad = sec.get_many_last(np.array(values, dtype=np.uint32))
    assert bad == want_bad
    if bad < 0:
        assert slots.tolist() == want_slots
        assert sec.image() == mem.image()
        assert sec.count == mem.plt_count
    else:
        assert slots[:bad].tolist() == want_slots


@settings(deadline=None)
@given(vals, st.sampled_from([32, 64]), st.integers(1, 3))
def test_get_legacy_equals_the_scanning_get_module_plt(values, l1, groups):
    cfg = KernelConfig(l1_cache_bytes=l1)
    size = groups * 2 * cfg.plt_stride
    want_slots, want_bad, mem = _kernel(values, size, l1, (), scan=True)
    sec = PltSection("core", BASE, size, cfg, ())
    got = []
    for v in values:
        s = sec.get_legacy(v)
        if s is None:
            break
        got.append(s)
    assert got == want_slots
    assert (len(got) if len(got) < len(values) else -1) == want_bad
    if want_bad < 0:
        assert sec.image() == mem.image()


def test_entries_name_the_fixed_ones_and_skip_empty_literals():
    cfg = KernelConfig()
    sec = PltSection("init", BASE, 256, cfg, FIXED, ("ftrace_caller", "__gnu_mcount_nc"))
    slots, bad = sec.get_many_last(np.array([0xC0300000, FIXED[1], 0xC0300000, 0xC0300010], np.uint32))
    assert bad == -1 and slots.tolist() == [BASE + 8, BASE + 4, BASE + 8, BASE + 12]
    es = sec.entries({0xC0300000: "a", 0xC0300010: "b"})
    assert [(e.addr, e.target, e.plt, e.symbol, e.fixed) for e in es] == [
        (BASE, FIXED[0], "init", "ftrace_caller", True), (BASE + 4, FIXED[1], "init", "__gnu_mcount_nc", True),
        (BASE + 8, 0xC0300000, "init", "a", False), (BASE + 12, 0xC0300010, "init", "b", False)]
    assert PltSection("core", BASE, 128, cfg, ()).entries({}) == []
    assert PltSection("core", BASE, 128, cfg, ()).image() == bytes(128)


@pytest.mark.parametrize("l1", [32, 64])
@pytest.mark.parametrize("count,groups", [(0, 0), (1, 1), (8, 1), (15, 1), (16, 1), (17, 2), (33, 3)])
def test_plt_size_rounds_up_to_whole_groups(l1, count, groups):
    """round_up(count * PLT_ENT_SIZE, sizeof(struct plt_entries)), PLT_ENT_SIZE = 8."""
    per = l1 // 4                                          # entries per struct plt_entries
    g = -(-count // per)
    assert plt_size(count, KernelConfig(l1_cache_bytes=l1)) == g * 2 * l1
    if l1 == 64:
        assert g == groups


@pytest.mark.parametrize("path", all_kos()[::3], ids=lambda p: p.rsplit("/", 1)[-1])
def test_plan_sizes_from_the_kernel_counts(path):
    core, init = kernel_plt_counts(path)
    for l1 in (32, 64):
        cfg = KernelConfig(thumb2="thumb2" in path, l1_cache_bytes=l1)
        plan = plan_plts(read_object(path), cfg)
        grp = 2 * l1
        assert plan.sizes == {"core": -(-core * 8 // grp) * grp, "init": -(-init * 8 // grp) * grp}
    plan = plan_plts(read_object(path), KernelConfig(thumb2="thumb2" in path, plt_algorithm="sorted"))
    assert set(plan.sizes) == {"core"}


@settings(deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1, 28, 29, 10, 30]), st.integers(0, 0xFFFFFFFF)
                          | st.sampled_from([0xEBFFFFFE, 0xFFFEF7FF, 0xBFFEF7FF, 0x0AFFFFFE, 0xFFFE07FF,
                                             0xDFFEF7FF, 0x2FFE07FF])), min_size=1, max_size=30))
def test_zero_addend_equals_is_zero_addend_relocation(entries):
    words = np.array([w for _, w in entries], dtype=np.uint32)
    types = np.array([t for t, _ in entries], dtype=np.uint32)
    base = words.astype("<u4").tobytes()
    want = [is_zero_addend_relocation(base, (4 * i, t)) for i, (t, _) in enumerate(entries)]
    assert zero_addend(words, types).tolist() == want


def test_file_words_reads_each_place_from_the_section_on_and_zero_past_the_file():
    """count_plts reads hdr + sh_offset + r_offset: little-endian, not bounded by the section's size,
    0 standing in where the word would end past the file."""
    data = bytes(range(16)) + bytes([0xAA] * 4)
    offs = np.array([0, 4, 9, 12, 16, 17, 100], dtype=np.uint32)
    assert file_words(data, 0, offs).tolist() == [0x03020100, 0x07060504, 0x0C0B0A09, 0x0F0E0D0C,
                                                  0xAAAAAAAA, 0, 0]
    assert file_words(data, 4, np.array([0, 8, 12, 13], np.uint32)).tolist() == [0x07060504, 0x0F0E0D0C,
                                                                                 0xAAAAAAAA, 0]
    assert file_words(data, 30, np.array([0], np.uint32)).tolist() == [0]
    assert file_words(data, 0, np.zeros(0, np.uint32)).dtype == np.uint32


@settings(deadline=None)
@given(st.lists(st.tuples(st.sampled_from([28, 29, 1, 10, 30, 2]), st.integers(0, 3),
                          st.sampled_from([0xEBFFFFFE, 0xEB000000, 0x0BFFFFFE, 0xFFFEF7FF,
                                           0xBFFEF7FF, 0xFFFEF7FE, 0xDFFEF7FF, 0xF0FEF7FF])), max_size=40))
def test_legacy_hashed_count_equals_the_quadratic_scan(entries):
    from armload.loader.plt import RelTable, count_legacy, count_legacy_quadratic
    t = RelTable(1, 2, ".text", np.array([(s << 8) | ty for ty, s, _ in entries], np.uint32),
                 np.array([w for _, _, w in entries], np.uint32))
    assert count_legacy(t) == count_legacy_quadratic(t)
    # by hand (v4.0 count_plts): distinct (r_info, masked word) among branches, whatever the symbol;
    # the mask follows the type (ARM 0x00ffffff, Thumb 0x2fff07ff)
    keys = {((s << 8) | ty, w & (0x2FFF07FF if ty in (10, 30) else 0x00FFFFFF))
            for ty, s, w in entries if ty in (28, 29, 1, 10, 30)}
    assert count_legacy(t) == len(keys)


@pytest.mark.parametrize("shndx_bytes", [None, b"\x00\x00", b"\x04\x00"])
def test_symbol_index_equal_to_the_count_reads_past_the_table(tmp_path, shndx_bytes):
    """The kernel accepts ELF32_R_SYM == symbol count and reads that 'symbol' from the bytes after
    .symtab; its st_shndx decides whether the branch is counted (6.1: != the target section;
    2016: == SHN_UNDEF). shndx_bytes overwrites those two bytes (None: as in the file)."""
    import struct
    from armload.loader.plt import count_plts
    from oracles.module_plts import kernel_plt_counts_2016
    path = all_kos()[0].rsplit("/", 1)[0] + "/hello-arm.ko"
    b = bytearray(open(path, "rb").read())
    obj = read_object(path)
    st = obj.sections[obj.symtab_index]
    rel = next(s for s in obj.sections if s.name == ".rel.init.text")
    r_off, r_info = struct.unpack_from("<II", b, rel.sh_offset)
    assert r_info & 0xFF == 28
    struct.pack_into("<II", b, rel.sh_offset, r_off, (obj.symcount << 8) | 28)
    if shndx_bytes is not None:
        b[st.sh_offset + st.sh_size + 14:st.sh_offset + st.sh_size + 16] = shndx_bytes
    p = tmp_path / "phantom.ko"
    p.write_bytes(bytes(b))
    o = read_object(str(p))
    c, _ = count_plts(o, KernelConfig(), "v6")
    assert (c.core, c.init) == kernel_plt_counts(str(p))
    c, _ = count_plts(o, KernelConfig(), "sorted")
    assert c.core == kernel_plt_counts_2016(str(p))
