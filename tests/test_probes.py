"""Probes on loaded code: ftrace sites, kprobes, kretprobes and direct trampolines.

Oracles: capstone decodes every patched instruction (the NOP, `bl ftrace_caller`, the kprobe
breakpoints); the branch verifier executes patched sites; Unicorn itself runs the probed code.
"""
import os
import struct
import sys

import pytest
from capstone import CS_ARCH_ARM, CS_MODE_ARM, CS_MODE_THUMB, Cs

sys.path.insert(0, os.path.dirname(__file__))
from emu_fixtures import build_module  # noqa: E402

from armload.kernel.config import DEBIAN_ARMMP  # noqa: E402
from armload.emu import Machine  # noqa: E402
from armload.kernel.provider import Kernel  # noqa: E402
from armload.loader.session import Session  # noqa: E402
from armload.probes import ProbeError, Probes  # noqa: E402

from conftest import CACHE, ROOT, SAMPLES, SYMVERS  # noqa: E402

BOTH = [(t, p) for t in (False, True) for p in ("window", "vmalloc")]


def _exporter(thumb, placement):
    path = os.path.join(SAMPLES, f"exporter-{'thumb2' if thumb else 'arm'}.ko")
    assert os.path.exists(path) and os.path.exists(SYMVERS), "sample modules missing (make samples)"
    cfg = DEBIAN_ARMMP.with_(thumb2=thumb)
    kernel = Kernel.from_files([SYMVERS], cfg)
    mod = Session(kernel, cfg, placement).load(path)
    m = Machine(mod, kernel)
    return m, mod, Probes(m)


def _dis(data, addr, thumb):
    cs = Cs(CS_ARCH_ARM, CS_MODE_THUMB if thumb else CS_MODE_ARM)
    return [(i.mnemonic, i.op_str) for i in cs.disasm(data, addr)]


def test_unicorn_delivers_udf_as_invalid_insn_and_bkpt_at_its_own_pc():
    """The machine's breakpoint dispatch relies on both facts."""
    from unicorn import UC_ARCH_ARM, UC_HOOK_INSN_INVALID, UC_HOOK_INTR, UC_MODE_ARM, Uc
    from unicorn import arm_const as A
    for code, thumb, hook in ((struct.pack("<I", 0xE7F001F8), False, "invalid"),
                              (struct.pack("<HH", 0xF7F0, 0xA018), True, "invalid"),
                              (struct.pack("<H", 0xDE18), True, "invalid"),
                              (struct.pack("<I", 0xE1200070), False, "intr"),
                              (struct.pack("<H", 0xBE00), True, "intr")):
        uc = Uc(UC_ARCH_ARM, UC_MODE_ARM)
        uc.mem_map(0x10000, 0x1000)
        uc.mem_write(0x10000, (b"\x00\xbf" if thumb else b"\x00\x00\xa0\xe1") * 8)
        uc.mem_write(0x10004, code)
        seen = []

        def on_invalid(uc, _u):
            seen.append(("invalid", uc.reg_read(A.UC_ARM_REG_PC)))
            uc.reg_write(A.UC_ARM_REG_PC, (0x10004 + len(code)) | thumb)
            return True

        def on_intr(uc, intno, _u):
            seen.append(("intr", uc.reg_read(A.UC_ARM_REG_PC)))
            uc.reg_write(A.UC_ARM_REG_PC, (0x10004 + len(code)) | thumb)
        uc.hook_add(UC_HOOK_INSN_INVALID, on_invalid)
        uc.hook_add(UC_HOOK_INTR, on_intr)
        uc.emu_start(0x10000 | thumb, 0x10010)
        assert seen == [(hook, 0x10004)]


@pytest.mark.parametrize("thumb,placement", BOTH)
def test_ftrace_sites_nop_call_and_verify(thumb, placement):
    m, mod, pr = _exporter(thumb, placement)
    assert not pr.ftrace.errors
    site = pr.ftrace.site_of(pr.function("armload_sample_add"))
    nop = pr.read(site.addr, 4)
    # the kernel's NOP drops the pushed lr: `add sp, sp, #4` / `add.w sp, sp, #4`, as capstone spells them
    assert _dis(nop, site.addr, thumb) == [("add.w", "sp, sp, #4") if thumb else ("add", "sp, sp, #4")]
    hits = []
    ops = pr.ftrace_function("armload_sample_add", hits.append)
    new = pr.read(site.addr, 4)
    (mn, op), = _dis(new, site.addr, thumb)
    assert mn == "bl"
    dest = int(op.lstrip("#"), 16)
    if placement == "vmalloc":            # out of range: the fixed FTRACE_ADDR PLT entry
        assert site.via_plt and dest == site.via_plt
        e, = [e for e in mod.plt_entries if e.addr == dest]
        assert e.fixed and e.symbol == "ftrace_caller"
    else:
        assert site.via_plt == 0 and dest == pr.ftrace.ftrace_addr & ~1
    v, = pr.verify()
    assert v.ok and v.branches_total == 1, v.format()
    r = m.call("armload_sample_add", [20, 22])
    assert r.retval == 42
    assert [(h.kind, h.function, h.args[:2], h.addr) for h in hits] == [("ftrace", "armload_sample_add",
                                                                          [20, 22], site.addr)]
    assert hits[0].caller_sym.startswith("ret_from_initcall")
    ops.disable()
    assert pr.read(site.addr, 4) == nop
    assert m.call("armload_sample_add", [1, 2]).retval == 3 and len(hits) == 1


@pytest.mark.parametrize("thumb,placement", BOTH)
def test_verifier_catches_a_wrong_patched_site(thumb, placement):
    m, mod, pr = _exporter(thumb, placement)
    pr.ftrace_function("armload_sample_add")
    site = pr.ftrace.site_of(pr.function("armload_sample_add"))
    pr.write_code(site.addr, pr.ftrace._nop(site))          # the site no longer calls anything
    v, = pr.verify()
    assert not v.ok and v.branch_failures[0].site == site.addr


def _bl(addr, dest, thumb):
    """BL from addr to dest (ARM A1 / Thumb T1), encoded here from the ARM ARM, not by armload."""
    if not thumb:
        return struct.pack("<I", 0xEB000000 | (((dest - addr - 8) >> 2) & 0xFFFFFF))
    off = dest - addr - 4
    s, i1, i2 = (off >> 24) & 1, (off >> 23) & 1, (off >> 22) & 1
    j1, j2 = (~i1 ^ s) & 1, (~i2 ^ s) & 1
    return struct.pack("<HH", 0xF000 | s << 10 | ((off >> 12) & 0x3FF), 0xD000 | j1 << 13 | j2 << 11 | ((off >> 1) & 0x7FF))


@pytest.mark.parametrize("thumb", [False, True])
def test_verifier_reports_a_patched_site_that_misses_its_plt_slot_or_literal(thumb):
    """vmalloc: the patched call goes through the fixed ftrace_caller PLT entry. A bl to the next slot
    (the __gnu_mcount_nc entry) misses the slot; a changed literal reaches the slot but not the target."""
    m, mod, pr = _exporter(thumb, "vmalloc")
    pr.ftrace_function("armload_sample_add")
    site = pr.ftrace.site_of(pr.function("armload_sample_add"))
    assert site.via_plt
    ok, = pr.verify()
    assert (ok.module, ok.branches_total, ok.branches_ok, ok.plt_total, ok.plt_ok, ok.via_plt) == (
        mod.name, 1, 1, 0, 0, 1)
    assert ok.ok and ok.branch_failures == [] and ok.plt_failures == [] and 0 <= ok.elapsed < 60
    want = pr.ftrace.ftrace_addr & (~0 if thumb else ~1)
    rtype = "patched bl (Thumb)" if thumb else "patched bl"
    good = pr.read(site.addr, 4)
    pr.write_code(site.addr, _bl(site.addr, site.via_plt + 4, thumb))
    v, = pr.verify()
    assert (v.branches_total, v.branches_ok, v.via_plt, v.ok) == (1, 0, 1, False)
    f, = v.branch_failures
    assert (f.site, f.site_sym, f.rtype, f.symbol, f.expected, f.actual, f.via_plt, f.reason) == (
        site.addr, mod.symbolize(site.addr), rtype, "ftrace_caller", want, (site.via_plt + 4) | thumb,
        site.via_plt, "did not reach its PLT slot")
    pr.write_code(site.addr, good)
    lit = site.via_plt + DEBIAN_ARMMP.plt_stride
    mcount = struct.unpack("<I", pr.read(lit + 4, 4))[0]
    m.uc.mem_write(lit, struct.pack("<I", mcount))
    v, = pr.verify()
    f, = v.branch_failures
    assert (f.site, f.site_sym, f.rtype, f.symbol, f.expected, f.actual, f.via_plt, f.reason) == (
        site.addr, mod.symbolize(site.addr), rtype, "ftrace_caller", want, mcount, site.via_plt, "")
    assert v.branches_ok == 0


@pytest.mark.parametrize("thumb", [False, True])
def test_verifier_checks_each_patched_site_and_the_plt_as_in_memory(thumb):
    """Two verifications in a row see the memory of each moment (a copy per call, not a cache), and a
    site that names a PLT slot must go through it even when it lands on the right address."""
    from armload.loader.verify import verify_patched_sites
    m, mod, pr = _exporter(thumb, "vmalloc")
    pr.ftrace_function("armload_sample_add")
    site, = [s for s in pr.ftrace.call_sites() if s["module"] is mod]
    assert verify_patched_sites(mod, [site, site], pr.read).branches_ok == 2
    lit = site["plt"] + DEBIAN_ARMMP.plt_stride
    real = pr.read(lit, 4)
    m.uc.mem_write(lit, struct.pack("<I", 0x1000))
    bad = verify_patched_sites(mod, [site, site], pr.read)
    assert [f.actual for f in bad.branch_failures] == [0x1000, 0x1000] and bad.via_plt == 2
    m.uc.mem_write(lit, real)
    direct = dict(site, plt=site["place"] + 0x100)      # a slot it does not go through
    r = verify_patched_sites(mod, [direct], pr.read)
    assert [f.reason for f in r.branch_failures] == ["did not reach its PLT slot"]


@pytest.mark.parametrize("thumb,placement", BOTH)
def test_kprobe_pre_post_and_restore(thumb, placement):
    m, mod, pr = _exporter(thumb, placement)
    f = pr.function("armload_sample_add")
    orig = pr.read(f.start, 8)
    seen = []
    kp = pr.kprobe("armload_sample_add", 0, pre=lambda h: seen.append(("pre", h.args[:2])),
                   post=lambda h: seen.append(("post", h.args[:2])))
    bp = pr.read(f.start, 4)
    if thumb:
        assert bp[:2] == struct.pack("<H", 0xDE18)            # push {lr} is 16-bit
    else:
        assert struct.unpack("<I", bp)[0] == 0xE7F001F8        # unconditional: cond 1110
    assert m.call("armload_sample_add", [5, 6]).retval == 11
    assert seen == [("pre", [5, 6]), ("post", [5, 6])]
    kp.disable()
    assert pr.read(f.start, 8) == orig
    assert m.call("armload_sample_add", [1, 1]).retval == 2 and len(seen) == 2


@pytest.mark.parametrize("thumb,placement", BOTH)
def test_kprobe_at_every_instruction_of_a_function(thumb, placement):
    """Each instruction probed in turn (simulated or out of line): results stay right."""
    m, mod, pr = _exporter(thumb, placement)
    f = pr.function("armload_sample_add")
    site = pr.ftrace.site_of(f).addr
    at, n = f.start, 0
    while at < f.start + f.size:
        from armload.probes.insn import thumb_opcode
        size = thumb_opcode(pr.read(at, 4))[1] if thumb else 4
        if at == site:
            with pytest.raises(ProbeError, match="ftrace location"):
                pr.kprobe(f, at - f.start)
        else:
            hits = []
            kp = pr.kprobe(f, at - f.start, pre=hits.append)
            assert m.call("armload_sample_add", [n, 100]).retval == n + 100
            assert len(hits) == 1
            kp.unregister()
        at += size
        n += 1
    assert n >= 8


@pytest.mark.parametrize("thumb,placement", BOTH)
def test_kretprobe_sees_return_value(thumb, placement):
    m, mod, pr = _exporter(thumb, placement)
    f = pr.function("armload_sample_add")
    orig = pr.read(f.start, 4)
    rets = []
    rp = pr.kretprobe("armload_sample_add", lambda h: rets.append((h.ret, h.args[:2])))
    r = m.call("armload_sample_add", [30, 12])
    assert r.status == "returned" and r.retval == 42
    assert rets == [(42, [30, 12])]
    rp.disable()
    assert pr.read(f.start, 4) == orig


@pytest.mark.parametrize("thumb,placement", BOTH)
def test_direct_trampoline_entry_and_exit(thumb, placement):
    m, mod, pr = _exporter(thumb, placement)
    f = pr.function("armload_sample_add")
    site = pr.ftrace.site_of(f)
    nop = pr.read(site.addr, 4)
    ev = []
    d = pr.direct("armload_sample_add", entry=lambda h: ev.append(("entry", h.args[:2])),
                  exit=lambda h: ev.append(("exit", h.ret)))
    (mn, op), = _dis(pr.read(site.addr, 4), site.addr, thumb)
    assert mn == "bl" and int(op.lstrip("#"), 16) == d.tramp
    v, = pr.verify()
    assert v.ok, v.format()
    assert m.call("armload_sample_add", [40, 2]).retval == 42
    assert ev == [("entry", [40, 2]), ("exit", 42)]
    d.disable()
    assert pr.read(site.addr, 4) == nop


@pytest.mark.parametrize("thumb", [False, True])
def test_fexit_on_function_with_prologue_before_mcount(thumb):
    """init_module pushes {r4, lr} (or {r3, lr}) before `push {lr}; bl __gnu_mcount_nc`."""
    m, mod, pr = _exporter(thumb, "window")
    ev = []
    pr.direct("init_module", entry=lambda h: ev.append("entry"), exit=lambda h: ev.append(("exit", h.ret)))
    r = m.run_init()
    assert r.ok and r.log == ["exporter: loaded, counter=100"]
    assert ev == ["entry", ("exit", 0)]


def test_ftrace_make_nop_refuses_an_unexpected_site():
    m, mod, pr = _exporter(False, "window")
    site = pr.ftrace.site_of(pr.function("armload_sample_add"))
    pr.write_code(site.addr, struct.pack("<I", 0xE1A00000))
    with pytest.raises(ProbeError, match=r"ftrace failed to modify \[<bf000004>\] armload_sample_add\+0x4"):
        pr.ftrace_function("armload_sample_add")


def _fixture(src, thumb=False):
    mod, kernel = build_module(src, thumb=thumb, init="f")
    m = Machine(mod, kernel)
    return m, Probes(m)


def test_kprobe_refusals_match_the_kernel():
    m, pr = _fixture({"f": """
        mrc p15, 0, r0, c13, c0, 3
        svc #0
        str r0, [sp, #-68]
        str r0, [sp, #-64]
        str r1, [sp, r2]
        add r0, pc, r1
        ldr r0, [pc, #-4]
        bx lr
    """})
    for off, pat in ((0, r"returned -22 \(-EINVAL\).*ee1d0f70 \(coprocessor/svc\) is rejected by the ARM kprobes decoder"),
                     (4, r"-22 \(-EINVAL\).*coprocessor/svc"),
                     (8, r"-22 \(-EINVAL\).*68 bytes below sp"),
                     (16, r"-22 \(-EINVAL\).*register offset"),
                     (2, r"-22 \(-EINVAL\).*not word aligned"),
                     # past f's end: no function of the module there (armload: not text)
                     (64, r"-22 \(-EINVAL\).*not in kernel or module text")):
        with pytest.raises(ProbeError, match=pat) as e:
            pr.kprobe("f", off)
        assert e.value.errno == -22
    pr.kprobe("f", 12)                               # 64 bytes below sp: the limit is allowed
    pr.kprobe("f", 20)                               # add r0, pc, r1: emulated with rewritten registers
    with pytest.raises(ProbeError, match="-2 .*no function"):
        pr.kprobe("nosuch")


def test_simulated_and_conditional_arm_instructions():
    m, pr = _fixture({"f": """
        push {lr}
        cmp r0, #0
        moveq r0, #5
        addne r0, r0, #1
        ldr r1, [pc, #16]
        add r2, pc, #4
        bl {g}
        add r0, r0, r1
        pop {pc}
        .word 100
        .word 1000
    """, "g": "add r0, r0, #10\nbx lr"})
    assert m.call("f", [0]).retval == 5 + 10 + 1000            # unprobed baseline
    hits = []
    for off in (8, 16, 20, 24):
        pr.kprobe("f", off, pre=lambda h, o=off: hits.append(o))
    assert m.call("f", [0]).retval == 5 + 10 + 1000
    assert hits == [8, 16, 20, 24]
    hits.clear()
    assert m.call("f", [3]).retval == 4 + 10 + 1000
    assert hits == [16, 20, 24]          # moveq's breakpoint keeps its condition: not taken, no hit


def test_simulated_thumb_instructions():
    m, pr = _fixture({"f": """
        push {lr}
        cbz r0, skip
        adds r0, #1
    skip:
        ldr r1, [pc, #12]
        bl {g}
        adds r0, r0, r1
        pop {pc}
        nop
        nop
        .word 1000
    """, "g": "adds r0, #10\nbx lr"}, thumb=True)
    assert m.call("f", [0]).retval == 0 + 10 + 1000            # unprobed baseline
    hits = []
    for off in (2, 6, 8):
        pr.kprobe("f", off, pre=lambda h, o=off: hits.append(o))
    assert m.call("f", [0]).retval == 0 + 10 + 1000
    assert m.call("f", [4]).retval == 5 + 10 + 1000
    assert hits == [2, 6, 8, 2, 6, 8]


def test_kprobe_table_is_the_kernels_hash_of_hlists():
    from armload.probes.table import KPROBE_TABLE_SIZE, KprobeTable, hash_ptr

    class P:
        def __init__(self, addr):
            self.addr = addr
    # hash_32 of a 32-bit kernel: the top 6 bits of addr * GOLDEN_RATIO_32 (mod 2^32)
    for a in (0, 1, 0xBF000000, 0xFFFFFFFF, 0xC0008000):
        assert hash_ptr(a) == ((a * 0x61C88647) % (1 << 32)) // (1 << 26)
    assert KPROBE_TABLE_SIZE == 64
    same = [a for a in range(0xBF000000, 0xBF100000, 4) if hash_ptr(a) == hash_ptr(0xBF000000)][:10]
    for cache in (False, True):
        t = KprobeTable(cache=cache)
        probes = [P(a) for a in same]
        for p in probes:
            t.add(p)
        assert t.walk(same[-1]) == (probes[-1], 1)           # hlist_add_head: the newest first
        assert t.walk(same[0]) == (probes[0], 10)
        assert t.walk(same[-1] + 0x100000) == (None, len(t.heads[hash_ptr(same[-1] + 0x100000)]))
        t.reset_counts()
        for _ in range(3):
            assert t.get(same[0]) is probes[0]
        assert t.nodes == (10 if cache else 30)              # the cache saves the second and third walk
        assert t.cache_hits == (2 if cache else 0)
        t.remove(probes[0])
        assert t.get(same[0]) is None


def test_attach_bench_counts_are_deterministic():
    from armload.bench.probes import run_attach
    a, b = run_attach(events=40, min_time=0.0), run_attach(events=40, min_time=0.0)
    key = [(r["flavour"], r["mode"], r["insns_per_event"], r["traps_per_event"]) for r in a["rows"]]
    assert key == [(r["flavour"], r["mode"], r["insns_per_event"], r["traps_per_event"]) for r in b["rows"]]
    traps = {(r["flavour"], r["mode"]): r["traps_per_event"] for r in a["rows"]}
    assert traps[("python", "base")] == 0 and traps[("python", "kprobe")] == 1
    assert traps[("python", "kretprobe")] == 2 and traps[("emulated", "fentry")] == 0
    assert traps[("emulated", "ftrace")] == 0 and traps[("emulated", "fentry+fexit")] == 2


@pytest.mark.parametrize("thumb", [False, True])
def test_post_handler_on_a_pc_writing_instruction_is_refused_but_pre_works(thumb):
    m, mod, pr = _exporter(thumb, "window")
    f = pr.function("init_module")
    last = f.start + f.size - (2 if thumb else 4)               # pop {r4, pc} / pop {r3, pc}
    with pytest.raises(ProbeError, match="writes pc"):
        pr.kprobe(f, last - f.start, post=lambda h: None)
    hits = []
    pr.kprobe(f, last - f.start, pre=hits.append)
    add = pr.function("armload_sample_add")                     # bx lr is simulated: post runs
    pr.kprobe(add, add.size - (2 if thumb else 4), post=hits.append)
    assert m.run_init().ok and len(hits) == 1
    assert m.call("armload_sample_add", [1, 2]).retval == 3 and [h.kind for h in hits] == ["kprobe", "kprobe-post"]


@pytest.mark.parametrize("thumb", [False, True])
def test_disasm_shows_patched_sites(thumb):
    import subprocess
    ko = os.path.join(SAMPLES, f"exporter-{'thumb2' if thumb else 'arm'}.ko")
    cmd = [sys.executable, "-m", "armload", "disasm", ko, "--kernel", SYMVERS, "-f", "armload_sample_add"]
    cmd += ["--thumb2"] if thumb else []
    plain = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert plain.returncode == 0 and "patched" not in plain.stdout
    p = subprocess.run(cmd + ["--probe", "kprobe:armload_sample_add+0x8" if not thumb else
                              "kprobe:armload_sample_add+0xe", "--probe", "ftrace:armload_sample_add"],
                       capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    lines = [ln for ln in p.stdout.splitlines() if "patched:" in ln]
    assert len(lines) == 2
    assert "bl\t" in lines[0] and "ftrace call -> ftrace_caller" in lines[0]
    assert "udf" in lines[1] and "kprobe breakpoint (was " in lines[1]
    nop = subprocess.run(cmd + ["--patched"], capture_output=True, text=True, cwd=ROOT)
    assert "patched: ftrace nop (add sp, sp, #4)" in nop.stdout


@pytest.mark.parametrize("thumb", [False, True])
def test_kprobes_aggregate_at_one_address(thumb):
    """kprobe and kretprobe on one function entry share the breakpoint (register_aggr_kprobe)."""
    m, mod, pr = _exporter(thumb, "vmalloc")
    f = pr.function("armload_sample_add")
    orig = pr.read(f.start, 4)
    ev = []
    kp = pr.kprobe(f, 0, pre=lambda h: ev.append(("kprobe", h.args[:2])))
    rp = pr.kretprobe(f, lambda h: ev.append(("ret", h.ret)))
    assert m.call("armload_sample_add", [3, 4]).retval == 7
    assert ev == [("kprobe", [3, 4]), ("ret", 7)]
    kp.disable()
    assert pr.read(f.start, 4) != orig                   # still armed for the kretprobe
    assert m.call("armload_sample_add", [1, 1]).retval == 2 and ev[-1] == ("ret", 2) and len(ev) == 3
    rp.disable()
    assert pr.read(f.start, 4) == orig
    kp.unregister()
    rp.unregister()
    assert pr.table.walk(f.start)[0] is None
    assert m.call("armload_sample_add", [1, 1]).retval == 2 and len(ev) == 3


def test_thumb_probe_inside_an_it_block_is_refused():
    m, pr = _fixture({"f": """
        cmp r0, #0
        ite eq
        moveq r0, #5
        movne r0, #6
        bx lr
    """}, thumb=True)
    for off in (4, 6):
        with pytest.raises(ProbeError, match="inside an IT block"):
            pr.kprobe("f", off)
    with pytest.raises(ProbeError, match="IT blocks"):
        pr.kprobe("f", 2)                                   # the IT instruction itself
    hits = []
    pr.kprobe("f", 8, pre=hits.append)                      # after the block: fine
    assert m.call("f", [0]).retval == 5 and m.call("f", [1]).retval == 6 and len(hits) == 2
    with pytest.raises(ProbeError, match="not an instruction boundary"):
        pr.kprobe("f", 1)


def test_kprobe_outside_text_is_refused():
    m, mod, pr = _exporter(False, "window")
    data = next(s for s in mod.sections if s.name == ".data" and s.size)
    for a in (data.addr, pr.function("armload_sample_add").start + 0x1000):     # the module's, not text
        with pytest.raises(ProbeError, match=r"returned -22 \(-EINVAL\).*not in kernel or module text"):
            pr.kprobe(None, addr=a)
    # no module and no kernel text there: kallsyms_lookup_size_offset fails in _kprobe_addr (-ENOENT,
    # as the booted kernel's register_kprobe answers: tests/test_kprobes_kernel_agree.py)
    with pytest.raises(ProbeError, match=r"returned -2 \(-ENOENT\)"):
        pr.kprobe(None, addr=0xC0000000)
    pr.kprobe(None, addr=pr.function("armload_sample_add").start + 8)     # text: accepted


def test_thumb_decoder_follows_the_kernel_tables():
    from armload.probes.insn import OUT_OF_LINE, REJECT, SIMULATE, UNSUPPORTED, decode_thumb
    cases = {  # opcode (first halfword high), size -> outcome (arch/arm/probes/decode-thumb.c)
        (0xF3BF8F5B, 4): REJECT,          # dmb ish: barriers are not probed
        (0xF3AF8000, 4): SIMULATE,        # nop.w
        (0xF3AF8005, 4): REJECT,          # unallocated hint
        (0xE8BD8010, 4): OUT_OF_LINE,     # pop.w {r4, pc}
        (0xE8BDC000, 4): REJECT,          # ldm with lr and pc
        (0xE92D2010, 4): REJECT,          # stm with sp in the list
        (0xE8524F00, 4): REJECT,          # ldrex
        (0xE8D1F002, 4): UNSUPPORTED,     # tbb: simulated by the kernel, not by armload
        (0xEE1D0F70, 4): REJECT,          # mrc p15 (current)
        (0xF8DF0008, 4): SIMULATE,        # ldr.w r0, [pc, #8]
        (0xF8CDF000, 4): REJECT,          # str.w pc, [sp]
        (0xEA4F0D01, 4): REJECT,          # mov.w sp, r1 (NOSPPC)
        (0xEB0D0D01, 4): OUT_OF_LINE,     # add.w sp, sp, r1
        (0xBE00, 2): REJECT, (0xDF00, 2): REJECT, (0xDE18, 2): REJECT, (0xB672, 2): REJECT,   # bkpt, svc, udf, cpsid
        (0xBA80, 2): REJECT, (0xBF50, 2): REJECT, (0xBF20, 2): SIMULATE, (0x47F8, 2): REJECT,
        (0x44FF, 2): REJECT, (0xB510, 2): OUT_OF_LINE, (0x4478, 2): UNSUPPORTED,     # add r0, pc
    }
    for (op, size), want in cases.items():
        assert decode_thumb(op, size).outcome == want, (hex(op), decode_thumb(op, size))


VMLINUZ = os.path.join(CACHE, "linux-image-6.1.0-50-armmp", "boot", "vmlinuz-6.1.0-50-armmp")


@pytest.mark.inputs(VMLINUZ, how="the Debian image: make test-inputs")
def test_probes_with_the_debian_image_use_its_ftrace_caller_and_kretprobe_trampoline():
    cfg = DEBIAN_ARMMP
    kernel = Kernel.from_files([SYMVERS, VMLINUZ], cfg)
    mod = Session(kernel, cfg, "vmalloc").load(os.path.join(SAMPLES, "exporter-arm.ko"))
    m = Machine(mod, kernel)
    assert m.image is not None
    pr = Probes(m)
    assert pr.ftrace.ftrace_addr == m.image.address("ftrace_caller")
    ev = []
    pr.ftrace_function("armload_sample_add", lambda h: ev.append(("ftrace", h.args[:2])))
    rp = pr.kretprobe("armload_sample_add", lambda h: ev.append(("ret", h.ret)))
    assert rp.tramp == m.image.address("__kretprobe_trampoline")
    v, = pr.verify()
    assert v.ok and v.via_plt == 1, v.format()
    assert m.call("armload_sample_add", [40, 2]).retval == 42
    assert ev == [("ftrace", [40, 2]), ("ret", 42)]


def test_a_failing_handler_ends_the_run_with_a_report():
    m, mod, pr = _exporter(False, "window")

    def bad(hit):
        raise ValueError("boom")
    pr.kprobe("armload_sample_add", 8, pre=bad)
    r = m.call("armload_sample_add", [1, 2])
    assert r.status == "fault" and r.fault.kind == "handler-error" and "ValueError: boom" in r.fault.message
