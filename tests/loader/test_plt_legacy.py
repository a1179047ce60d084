"""The "legacy" PLT generation against v4.0's arch/arm/kernel/module-plts.c as released
(7d485f647c1f "ARM: 8220/1: allow modules outside of bl range").

The oracle is the literal port in tests/oracles/module_plts.py (kernel_plt_counts_v40: struct-read
section headers and REL tables, count_plts/duplicate_rel line by line); it shares no code with
armload. The hand-built objects below pin each v4.0 rule on its own: every REL table whatever its
target, no symbol filter, the mask chosen by the relocation type, core/init by the REL section's
name, emission by the place (in_init).
"""
import os
import subprocess

import numpy as np
import pytest

from armload.kernel.config import KernelConfig
from armload.loader.elf import read_object
from armload.errors import PltError
from armload.kernel.provider import Kernel
from armload.loader.session import Session
from armload.loader.plt import (count_legacy, count_legacy_quadratic, legacy_rel_tables, plan_plts)
from armload.loader.verify import verify_module

from testinputs import ROOT, SYMVERS, all_kos, require_input, sample
from oracles.module_plts import kernel_plt_counts_v40
from test_plt import _far_init_session
from armload.kernel import debian

TREE = debian.MODULES
PLT_ENT_SIZE, PLT_ENTRIES = 8, 128     # v4.0: sizeof(struct plt_entries) / PLT_ENT_COUNT; 2 x L1_CACHE_BYTES (64)
ARM_ZERO = 0xEBFFFFFE                  # bl sym   (A = -8)
ARM_PLUS8 = 0xEB000000                 # bl sym+8 (A = 0)
THM_ZERO = 0xFFFEF7FF                  # bl sym   (A = -4), as the u32 read from LE memory


def _round_up(n, m):
    return (n + m - 1) // m * m


def _objs():
    d = os.path.join(ROOT, "sample_modules", "obj")
    out = sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".o"))
    assert len(out) >= 5, f"committed objects missing in {d} (make samples-objs)"
    return out


# --- the committed samples and the Debian corpus against the literal port ----------------------
@pytest.mark.parametrize("path", all_kos() + _objs(), ids=os.path.basename)
def test_samples_legacy_counts_equal_the_v40_port(path):
    obj = read_object(path, object=path.endswith(".o"))
    core, init = kernel_plt_counts_v40(path)
    assert kernel_plt_counts_v40(path, literal=True) == (core, init)     # the port's shortcut is exact
    plan = plan_plts(obj, KernelConfig(plt_algorithm="legacy"))
    c = plan.counts["legacy"]
    assert (c.core, c.init) == (core, init)
    # module_frob_arch_sections: sh_size = round_up(n * PLT_ENT_SIZE, sizeof(struct plt_entries)), both
    assert plan.sizes == {"core": _round_up(core * PLT_ENT_SIZE, PLT_ENTRIES),
                          "init": _round_up(init * PLT_ENT_SIZE, PLT_ENTRIES)}
    # the hashed count and the O(n^2) scan as written agree table by table
    for t in legacy_rel_tables(obj):
        assert count_legacy(t) == count_legacy_quadratic(t)
    # config.thumb2 plays no part in v4.0's count
    c2 = plan_plts(obj, KernelConfig(plt_algorithm="legacy", thumb2=True)).counts["legacy"]
    assert (c2.core, c2.init) == (core, init)


def _debian_modules():
    require_input(TREE, "the Debian module tree: make corpus")
    paths = []
    for d, _, fs in os.walk(TREE):
        paths += [os.path.join(d, f) for f in fs if f.endswith(".ko")]
    paths.sort()
    assert len(paths) == 3491, f"{TREE}: {len(paths)} modules, the 6.1.0-50-armmp tree has 3,491"
    return paths


def test_debian_modules_legacy_counts_equal_the_v40_port():
    """All 3,491 real modules (a few seconds: no sort, one pass each): armload's legacy (core, init)
    equals the port's; on every ~97th module under 200 KB also the port's loop as written (O(n^2)).
    On real modules the v4.0 count differs from the 2016 one (branches to defined symbols)."""
    from armload.loader.plt import count_plts
    cfg = KernelConfig()
    paths = _debian_modules()
    bad, differ, init_total = [], 0, 0
    for k, p in enumerate(paths):
        obj = read_object(p)
        c, _ = count_plts(obj, cfg, "legacy")
        want = kernel_plt_counts_v40(p)
        if (c.core, c.init) != want:
            bad.append((os.path.relpath(p, TREE), (c.core, c.init), want))
        if k % 97 == 0 and os.path.getsize(p) < 200_000:
            assert kernel_plt_counts_v40(p, literal=True) == want, p
        if k % 97 == 0:
            differ += c.total != count_plts(obj, cfg, "sorted")[0].total
        init_total += c.init
    assert not bad, f"{len(bad)} modules differ from the v4.0 port: {bad[:10]}"
    assert differ > 0 and init_total > 0


# --- single rules, on objects assembled here -------------------------------------------------
def _assemble(binutils, tmp_path, name, body):
    src = tmp_path / f"{name}.S"
    src.write_text("\t.syntax unified\n" + body)
    out = tmp_path / f"{name}.o"
    r = subprocess.run([binutils + "as", "-march=armv7-a", "-o", str(out), str(src)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return str(out)


def _branch(rtype, sym, word):
    return f"\t.reloc ., {rtype}, {sym}\n\t.word {word:#010x}\n"


def _counts(path, **cfg):
    plan = plan_plts(read_object(path, object=True), KernelConfig(**cfg))
    return {k: (v.core, v.init) for k, v in plan.counts.items()}


def test_branch_to_a_defined_symbol_counts_under_legacy_only(binutils, tmp_path):
    """v4.0 has no symbol filter: `bl f` with f defined in .text counts; the 2016 series counts
    SHN_UNDEF only, 6.1 skips symbols of the target section."""
    p = _assemble(binutils, tmp_path, "defined", "\t.text\n\t.globl f\nf:\n" + _branch("R_ARM_CALL", "f", ARM_ZERO))
    assert kernel_plt_counts_v40(p) == (1, 0)
    c = _counts(p)
    assert c["legacy"] == (1, 0) and c["sorted"] == (0, 0)
    assert c["v6"] == (0 + 2, 0 + 2)                      # only the fixed ftrace entries


def test_branch_in_a_non_exec_section_counts_under_legacy(binutils, tmp_path):
    """v4.0 counts every SHT_REL section; the later generations only those with an exec target."""
    p = _assemble(binutils, tmp_path, "data", "\t.data\n" + _branch("R_ARM_CALL", "ext", ARM_ZERO)
                  + _branch("R_ARM_JUMP24", "ext", ARM_ZERO) + "\t.text\n\tbx lr\n")
    obj = read_object(p, object=True)
    assert [obj.sections[t.relsec].name for t in legacy_rel_tables(obj)] == [".rel.data"]
    assert kernel_plt_counts_v40(p) == (2, 0)
    c = _counts(p)
    assert c["legacy"] == (2, 0) and c["sorted"] == (0, 0) and c["v6"] == (2, 2)


def test_init_is_chosen_by_the_rel_sections_name(binutils, tmp_path):
    """strstr(name, ".init"): .rel.init.text counts for .init.plt, and so does .rel.text.init_x
    (whose target 6.1's layout places in core); .rel.exit.text counts for core."""
    body = ("\t.section .init.text,\"ax\"\n" + _branch("R_ARM_CALL", "ext", ARM_ZERO)
            + "\t.section .text.init_x,\"ax\"\n" + _branch("R_ARM_CALL", "ext", ARM_ZERO)
            + "\t.section .exit.text,\"ax\"\n" + _branch("R_ARM_CALL", "ext", ARM_ZERO))
    p = _assemble(binutils, tmp_path, "init", body)
    assert kernel_plt_counts_v40(p) == (1, 2)
    c = _counts(p)
    assert c["legacy"] == (1, 2)
    assert c["v6"] == (2 + 2, 1 + 2)                   # 6.1 goes by the target's name: .init* only
    assert c["sorted"] == (3, 0)


@pytest.mark.parametrize("thumb2", [False, True])
def test_thumb_types_use_the_thumb_mask_whatever_the_config(binutils, tmp_path, thumb2):
    """Two THM_CALLs to one symbol whose words differ only in bits 24-27 (inside 0x2fff07ff, outside
    0x00ffffff) are two entries; differing only in bits 11-15 (outside the Thumb mask, inside the ARM
    one) they are one. CONFIG_THUMB2_KERNEL does not change this in v4.0."""
    a = _branch("R_ARM_THM_CALL", "ext", THM_ZERO) + _branch("R_ARM_THM_CALL", "ext", THM_ZERO ^ 0x0F000000)
    b = _branch("R_ARM_THM_CALL", "ext", THM_ZERO) + _branch("R_ARM_THM_CALL", "ext", THM_ZERO ^ 0x0000F800)
    assert (THM_ZERO ^ (THM_ZERO ^ 0x0F000000)) & 0x2FFF07FF and not (0x0F000000 & 0x00FFFFFF)
    assert not (0x0000F800 & 0x2FFF07FF) and (0x0000F800 & 0x00FFFFFF)
    pa = _assemble(binutils, tmp_path, "ta", "\t.text\n\t.thumb\n" + a)
    pb = _assemble(binutils, tmp_path, "tb", "\t.text\n\t.thumb\n" + b)
    assert kernel_plt_counts_v40(pa) == (2, 0) and kernel_plt_counts_v40(pb) == (1, 0)
    assert _counts(pa, thumb2=thumb2)["legacy"] == (2, 0)
    assert _counts(pb, thumb2=thumb2)["legacy"] == (1, 0)


def test_same_r_info_counts_once_per_distinct_masked_word(binutils, tmp_path):
    """duplicate_rel: an earlier entry with the same r_info and the same masked word; ARM types mask
    0x00ffffff (the condition/opcode byte is ignored)."""
    cases = [((ARM_ZERO, ARM_ZERO), 1), ((ARM_ZERO, ARM_PLUS8), 2), ((ARM_ZERO, ARM_PLUS8, ARM_ZERO), 2),
             ((ARM_ZERO, 0x0BFFFFFE), 1),            # blne: same low 24 bits
             ((ARM_PLUS8, ARM_ZERO, ARM_PLUS8, 0xEB000001), 3)]
    for k, (words, want) in enumerate(cases):
        p = _assemble(binutils, tmp_path, f"dup{k}", "\t.text\n" + "".join(_branch("R_ARM_CALL", "ext", w) for w in words))
        assert kernel_plt_counts_v40(p) == (want, 0), words
        assert _counts(p)["legacy"] == (want, 0), words
    # the same words under different r_info (CALL and JUMP24) are different entries
    p = _assemble(binutils, tmp_path, "types", "\t.text\n" + _branch("R_ARM_CALL", "ext", ARM_ZERO)
                  + _branch("R_ARM_JUMP24", "ext", ARM_ZERO))
    assert kernel_plt_counts_v40(p) == (2, 0) and _counts(p)["legacy"] == (2, 0)


# --- emission: get_module_plt by place ---------------------------------------------------------
def test_legacy_routes_far_init_branches_through_init_plt_and_verifies():
    """v4.0 counts initcore's init->core calls (defined symbols) for .init.plt and get_module_plt
    picks .init.plt for places in init: the load relocates and every branch verifies (the 2016 rules
    fail this load, tests/loader/test_plt.py)."""
    cfg = KernelConfig(plt_algorithm="legacy")
    mod = _far_init_session(cfg).load(sample("initcore-arm.ko"))
    regions = {r.name: r for r in mod.regions}
    assert regions["init"].base - regions["core"].base > 0x02000000
    assert verify_module(mod).ok
    secs = {s.name: s for s in mod.sections}
    core_plt, init_plt = secs[".plt"], secs[".init.plt"]
    want = kernel_plt_counts_v40(sample("initcore-arm.ko"))
    assert (core_plt.size, init_plt.size) == tuple(_round_up(n * PLT_ENT_SIZE, PLT_ENTRIES) for n in want)
    in_init = (mod.branches["place"] >= regions["init"].base) & (mod.branches["place"] < regions["init"].end)
    via = mod.branches["plt"] != 0
    far_init = mod.branches[in_init & via]
    assert {mod.sym_names[int(b["sym"])] for b in far_init} >= {"core_mix", "initcore_checksum"}
    assert all(init_plt.addr <= int(b["plt"]) < init_plt.addr + init_plt.size for b in far_init)
    assert all(core_plt.addr <= int(b["plt"]) < core_plt.addr + core_plt.size for b in mod.branches[~in_init & via])
    # one entry per distinct target in each PLT (v4.0 reuses any equal literal), within the count
    for key, n in zip(("core", "init"), want):
        lits = [e.target for e in mod.plt_entries if e.plt == key]
        assert len(lits) == len(set(lits)) <= n


def test_legacy_plt_exhaustion_is_armloads_error(binutils, tmp_path):
    """.rel.text.init_x counts for .init.plt by its name, but its target lies in core (6.1's layout
    takes only .init* for init): with a far placement, core's .plt (0 entries, 0 bytes) has no room
    and v4.0's get_module_plt() would BUG(). armload stops with its PltError instead; the other
    generations count that call for core and load."""
    p = _assemble(binutils, tmp_path, "bug", "\t.section .text.init_x,\"ax\"\n\t.globl f\nf:\n"
                  + _branch("R_ARM_CALL", "ext", ARM_ZERO) + "\tbx lr\n")
    assert kernel_plt_counts_v40(p) == (0, 1)
    cfg = KernelConfig(plt_algorithm="legacy")
    with pytest.raises(PltError, match=r"sym 'ext': module PLT section exhausted .*\(the kernel would hit BUG\(\) "
                                       r"in get_module_plt\)"):
        Session(Kernel.builtin(cfg, simulate_all=True), cfg, "vmalloc").load(p, object=True)
    for alg in ("sorted", "v6"):
        c = KernelConfig(plt_algorithm=alg)
        mod = Session(Kernel.builtin(c, simulate_all=True), c, "vmalloc").load(p, object=True)
        assert verify_module(mod).ok and (mod.branches["plt"] != 0).sum() == 1


def test_quadratic_and_hashed_counts_agree_on_crafted_tables():
    """count_legacy (distinct pairs) equals count_legacy_quadratic (the scan as written) with mixed
    types, repeated r_info and words differing inside and outside each mask."""
    from armload.loader.plt import RelTable
    rng = np.random.default_rng(7)
    types = np.array([28, 29, 1, 10, 30, 2, 43])
    words = np.array([ARM_ZERO, ARM_PLUS8, 0x0BFFFFFE, THM_ZERO, THM_ZERO ^ 0x0F000000, THM_ZERO ^ 0xF800, 0],
                     dtype=np.uint32)
    for _ in range(200):
        n = int(rng.integers(0, 40))
        r_info = ((rng.integers(0, 4, n) << 8) | rng.choice(types, n)).astype(np.uint32)
        t = RelTable(1, 2, ".text", r_info, rng.choice(words, n).astype(np.uint32))
        want = len({(int(ri), int(w) & (0x2FFF07FF if (ri & 0xFF) in (10, 30) else 0x00FFFFFF))
                     for ri, w in zip(r_info, t.words) if (ri & 0xFF) in (28, 29, 1, 10, 30)})
        assert count_legacy(t) == count_legacy_quadratic(t) == want


@pytest.mark.parametrize("name", ["hello-arm.ko", "initcore-arm.ko", "devkit-thumb2.ko", "regdev-arm.ko"])
def test_explain_lists_what_v40_counted_per_plt(name):
    """plt.counted_relocations' legacy list: one item per counted entry, split core/init as the
    port splits them; the init items are exactly those of REL tables named *.init*."""
    from armload.loader.plt import counted_relocations
    obj = read_object(sample(name))
    got = counted_relocations(obj, KernelConfig())["legacy"]
    core, init = kernel_plt_counts_v40(sample(name))
    assert (sum(c.plt == "core" for c in got), sum(c.plt == "init" for c in got)) == (core, init)
    assert all((c.plt == "init") == (".init" in c.relsec_name) for c in got)


def test_legacy_needs_both_plt_sections(tmp_path):
    """v4.0 refuses a module without both PLT sections ("sections missing"), as 6.1 does; the 2016
    series needs only .plt."""
    data = open(sample("hello-arm.ko"), "rb").read()
    assert data.count(b".init.plt\0") == 1
    bad = tmp_path / "hello.ko"
    bad.write_bytes(data.replace(b".init.plt\0", b".iniX.plt\0"))     # ".plt" shares the string tail
    for alg in ("legacy", "v6"):
        cfg = KernelConfig(plt_algorithm=alg)
        with pytest.raises(PltError, match=r"^hello: module PLT section\(s\) missing \(\.init\.plt; "):
            Session(Kernel.from_files([SYMVERS], cfg), cfg, "vmalloc").load(str(bad))
    cfg = KernelConfig(plt_algorithm="sorted")
    mod = Session(Kernel.from_files([SYMVERS], cfg), cfg, "vmalloc").load(str(bad))
    assert verify_module(mod).ok
