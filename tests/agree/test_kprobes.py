"""armload's kprobes verdicts against the booted Debian 6.1 kernel's own register_kprobe (issue 24:
"the decode agreement on a sample of at least 200 encodings against the 6.1 tables", with the real
kernel as the oracle; armload/agree/kprobes.py, `armload agree kprobes`).

ARM encodings: the 1,447 words of tests/probes/test_kprobe_decode.py (the issue's named cases, Debian
module text, seeded random words with sp/pc in register fields) and one word per decode-table
entry, each written into a loaded module's text and registered as a disabled kprobe: the Image's
arch_prepare_kprobe decodes it. The kernel's kprobe_blacklist and __jump_table against armload's
(probes/ktext.py). Thumb: the armmp Image is an ARM kernel (no Thumb decoder
in it); decode_thumb is checked against the port of the tables only (test_kprobe_decode.py).
"""
import json
import os
import struct

import pytest
from testinputs import BOOT_VMLINUZ, ROOT, require_input

from armload.probes import insn as I
from armload.agree import kprobes as G
from armload.kernel import debian

MODULE_DIR = debian.MODULES
RESULT = os.path.join(ROOT, "benchmarks", "results", "probes-agree.json")


@pytest.fixture(scope="module")
def session(booted_dir):
    for rel in (G.ORACLE_MODULE, *G.SAMPLE_MODULES):
        require_input(os.path.join(MODULE_DIR, rel), "make test-inputs")
    inputs = G.Inputs(BOOT_VMLINUZ, MODULE_DIR)
    return G.OracleBoot.open(inputs)


@pytest.fixture(scope="module")
def arm_rows(session):
    """The kernel's verdict on every word of the sample (about 5 s)."""
    return G.compare_arm(session.oracle, G.arm_sample(MODULE_DIR), {w: src for src, w, _ in G.NAMED})


@pytest.fixture(scope="module")
def table_rows(session):
    """One word per decode-table entry, with pc and sp in the free register fields (about 2 s)."""
    return G.compare_arm(session.oracle, G.table_sample())


def _disagreements(rows):
    """armload's verdict computed now (probes/insn.py as it is) against the kernel's recorded one."""
    out = []
    for r in rows:
        a = G.armload_arm_verdict(r.op)
        if (a.errno, a.reason) != (r.kernel.errno, r.kernel.reason):
            out.append((f"{r.op:08x}", r.named, r.kernel, a))
    return out


def test_named_cases_are_the_words_their_sources_assemble_to():
    """keystone's encoding of each named source, and the verdict the port of the tables gives it."""
    from keystone import KS_ARCH_ARM, KS_MODE_ARM, Ks
    from oracles import kprobes_decode as K
    ks = Ks(KS_ARCH_ARM, KS_MODE_ARM)
    for src, word, want in G.NAMED:
        assert struct.unpack("<I", bytes(ks.asm(src, 0)[0]))[0] == word, src
        assert K.prepare_arm(word) == want, src


def test_the_sample_is_test_kprobe_decodes(arm_rows):
    """The same 1,447 words tests/probes/test_kprobe_decode.py holds to the port of the tables."""
    import importlib.util
    import os
    path = os.path.join(os.path.dirname(__file__), "..", "probes", "test_kprobe_decode.py")
    spec = importlib.util.spec_from_file_location("kprobe_decode_sample", path)    # another wing's file
    T = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(T)
    assert [r.op for r in arm_rows] == T._sample()
    assert [(src, want) for src, _, want in G.NAMED] == T.NAMED


def test_named_cases_get_the_issues_verdict_from_the_kernel(arm_rows):
    by_op = {r.op: r for r in arm_rows}
    for src, word, want in G.NAMED:
        r = by_op[word]
        assert r.kernel.errno == want, f"{src}: the booted kernel says {r.kernel.errno}"
        assert r.kernel.reason != "address", f"{src}: the kernel did not decode the word"
        assert r.agree, f"{src}: kernel {r.kernel}, armload {r.armload}"


def test_arm_decoder_agrees_with_the_kernel_on_the_whole_sample(arm_rows):
    assert len(arm_rows) == 1447
    bad = _disagreements(arm_rows)
    assert not bad, f"{len(bad)} of {len(arm_rows)} disagree with the booted kernel: {bad[:5]}"
    # the kernel decoded every word (p->opcode is ours), and both verdicts are well represented
    assert all(r.kernel.reason != "address" for r in arm_rows)
    refused = [r for r in arm_rows if r.kernel.errno]
    assert 200 < len(refused) < len(arm_rows) - 200
    assert {r.kernel.errno for r in refused} == {-22}
    assert sum(r.kernel.reason == "stack" for r in refused) >= 8     # the stack checker's refusals


def test_every_decode_table_entry_agrees_with_the_kernel(table_rows):
    assert len(table_rows) >= 500
    bad = _disagreements(table_rows)
    assert not bad, f"{len(bad)} of {len(table_rows)} disagree with the booted kernel: {bad[:5]}"
    assert all(r.kernel.reason != "address" for r in table_rows)
    assert 150 < sum(r.kernel.errno == 0 for r in table_rows) < len(table_rows) - 150


def test_the_kernels_decode_actions_match_armloads_outcomes(arm_rows, table_rows):
    """What the kernel simulates (INSN_GOOD_NO_SLOT) armload simulates too, except LDM/STM it runs
    out of line (the kernel's simulate_ldm1stm1 / simulate_ldm1_pc); armload simulates only ldr
    literal, adr and LDM/STM with pc as base where the kernel emulates in a slot; what armload
    emulates with rewritten registers the kernel emulates in a slot."""
    for r in arm_rows + table_rows:
        if r.kernel.errno:
            continue
        k, a = r.kernel, r.armload
        if k.kind == "no-slot" and a.kind != I.SIMULATE:
            assert a.kind == I.OUT_OF_LINE and k.handler in ("simulate_ldm1stm1", "simulate_ldm1_pc"), r
        if k.kind == "slot" and a.kind == I.SIMULATE:
            assert a.handler in ("ldr literal", "adr") or (a.handler.startswith("ldm/stm with pc")
                                                           and (r.op >> 16) & 0xF == 15), r
        if a.kind == I.EMULATE:
            assert k.kind == "slot", r


def _old_post_index_bug(real):
    def buggy(op):          # the stack checker made to ignore P (the bug the issue named)
        if (op & 0x0E000000) == 0x04000000 and (op >> 16) & 0xF == 13 and not op & (1 << 23) \
                and not op & (1 << 20):
            return op & 0xFFF
        return real(op)
    return buggy


@pytest.mark.parametrize("bug", ["post-index", "stack-limit", "register-checks", "mov-ip-sp", "errno-map"])
def test_a_deliberate_bug_in_the_decoder_turns_the_comparison_red(arm_rows, table_rows, monkeypatch, bug):
    if bug == "post-index":
        monkeypatch.setattr(I, "_stack_space", _old_post_index_bug(I._stack_space))
    elif bug == "stack-limit":
        monkeypatch.setattr(I, "MAX_STACK_SIZE", 128)
    elif bug == "register-checks":
        monkeypatch.setattr(I, "_regs_ok", lambda op, regs: True)
    elif bug == "mov-ip-sp":            # a table entry changed: `mov ip, sp` rejected, not simulated
        dp = [(m, v, I.R, w, r) if w == "mov-ip-sp" else (m, v, k, w, r) for m, v, k, w, r in I._ARM_DP_REG]
        monkeypatch.setattr(I, "_ARM_TOP", [(m, v, k, dp if w is I._ARM_DP_REG else w, r)
                                            for m, v, k, w, r in I._ARM_TOP])
    elif bug == "errno-map":
        monkeypatch.setitem(I.DECODE_ERRNO, I.REJECT, -95)
    assert _disagreements(arm_rows + table_rows), f"{bug}: the comparison did not notice"


def test_kprobe_blacklist_is_the_kernels_entry_for_entry(session):
    """populate_kprobe_blacklist's list, walked in the booted kernel, against armload's: the
    _kprobe_blacklist functions, every symbol of .kprobes.text and of the noinstr text."""
    k = session.oracle.k
    bl = G.compare_blacklist(k, k.image)
    assert bl["kernel_entries"] >= 100 and not bl["kernel_only"] and not bl["armload_only"], bl
    assert bl["same_order"] and bl["agree"] == bl["kernel_entries"] == bl["armload_entries"]


def test_blacklist_from_names_alone_misses_what_the_kernel_refuses(session, monkeypatch):
    """The disagreement the kernel showed: image.symbols keeps one address per name, so the second
    process_fetch_insn (trace_uprobe.c's; NOKPROBE_SYMBOL in both files) was no function start,
    the content search for _kprobe_blacklist stopped there, and 14 entries were missing."""
    k = session.oracle.k
    monkeypatch.setattr(k.image, "kallsyms", None)
    bl = G.compare_blacklist(k, k.image)
    assert len(bl["kernel_only"]) >= 10


def test_jump_label_sites_are_the_kernels(session):
    """Every core-text entry of the kernel's own (sorted) __jump_table is a site armload knows, and
    no other: before the fix the content search stopped at an entry in the exit text and missed
    888 of 4,862."""
    k = session.oracle.k
    js = G.compare_jump_sites(k, k.image)
    assert js["kernel_sites"] >= 4000 and js["agree"] == js["kernel_sites"] == js["armload_sites"], js


def test_thumb_cannot_be_checked_against_this_kernel(session):
    img = session.oracle.k.image
    assert "arm_probes_decode_insn" in img.symbols and "arch_prepare_kprobe" in img.symbols
    assert not any(n in img.symbols for n in G.THUMB_DECODERS)


def test_instructions_per_verdict(arm_rows):
    s = G.insn_stats([r.kernel for r in arm_rows])
    assert 20_000 < s["register_insns_mean"] < 300_000 and 5_000 < s["unregister_insns_mean"] < 200_000


def test_committed_result_is_this_run(arm_rows, table_rows):
    """benchmarks/results/probes-agree.json (make probes-agree) holds these verdicts."""
    with open(RESULT) as fh:
        res = json.load(fh)
    assert res["arm"]["encodings"] == res["arm"]["agree"] == len(arm_rows)
    for group, rows in (("arm", arm_rows), ("arm_tables", table_rows)):
        got = [[f"{r.op:08x}", r.kernel.errno, r.armload.errno] for r in rows]
        assert [[row[0], row[1], row[4]] for row in res[group]["rows"]] == got, group
