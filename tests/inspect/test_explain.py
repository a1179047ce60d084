"""`armload explain` against GNU binutils: readelf -r for each row, objdump for the bytes after
and for the branch targets, on every bundled sample in the module window and far in vmalloc."""
import json
import os
import re
import subprocess

import capstone
import pytest

from armload.cli import main
from armload.kernel.config import KernelConfig
from armload.inspect.explain import context_for, explain_all, explain_module, format_explanation
from armload.loader.image import write_image
from armload.kernel.provider import Kernel
from armload.loader.session import Session

from testinputs import SYMVERS, all_kos, obj, sample

CASES = [(os.path.basename(k), p) for k in all_kos() for p in ("window", "vmalloc")]


def _session(ko, placement):
    cfg = KernelConfig(thumb2="thumb2" in ko)
    s = Session(Kernel.from_files([SYMVERS], cfg), cfg, placement)
    if ko.startswith("importer"):                   # its symbols come from the exporter
        s.load(sample(ko.replace("importer", "exporter")))
    return s


def readelf_rows(cross, path):
    """{(rel section, index): (offset, info, type, symvalue, symname)} from readelf -rW."""
    out = subprocess.run([cross + "readelf", "-rW", path], capture_output=True, text=True, check=True).stdout
    rows, sec, i = {}, None, 0
    for line in out.splitlines():
        m = re.match(r"Relocation section '([^']+)'", line)
        if m:
            sec, i = m.group(1), 0
            continue
        m = re.match(r"^([0-9a-f]{8})\s+([0-9a-f]{8})\s+(R_ARM_\w+)\s*(?:([0-9a-f]{8})\s+(\S*))?", line)
        if m and sec:
            rows[(sec, i)] = (int(m.group(1), 16), int(m.group(2), 16), m.group(3),
                              int(m.group(4), 16) if m.group(4) else 0, m.group(5) or "")
            i += 1
    return rows


def objdump_bytes(cross, image):
    """address -> byte from objdump -s (every ALLOC section of the image)."""
    out = subprocess.run([cross + "objdump", "-s", image], capture_output=True, text=True, check=True).stdout
    mem = {}
    for line in out.splitlines():
        m = re.match(r"^ ([0-9a-f]{8}) ((?:[0-9a-f]{2,8} ){1,4})", line)
        if not m:
            continue
        a = int(m.group(1), 16)
        for word in m.group(2).split():
            for k in range(0, len(word), 2):
                mem[a] = int(word[k:k + 2], 16)
                a += 1
    return mem


def objdump_branch_targets(cross, image):
    """address -> decoded branch target from objdump -d."""
    out = subprocess.run([cross + "objdump", "-d", image], capture_output=True, text=True, check=True).stdout
    tg = {}
    for line in out.splitlines():
        m = re.match(r"^\s*([0-9a-f]+):\s+[0-9a-f ]+\t(bl|b|b\.w|blx)\S*\s+([0-9a-f]+)\b", line)
        if m:
            tg[int(m.group(1), 16)] = int(m.group(3), 16)
    return tg


@pytest.mark.parametrize("ko,placement", CASES)
def test_rows_match_readelf_and_bytes_match_objdump(ko, placement, binutils, tmp_path):
    path = sample(ko)
    ctx = context_for(_session(ko, placement), path, object=path.endswith(".o"))
    assert ctx.mod is not None and ctx.error is None
    want = readelf_rows(binutils, path)
    got = {(r.relsec_name, r.index): (r.r_offset, r.r_info, r.type_name, r.sym_value, r.sym_name)
           for r in ctx.rows}
    assert got == want
    image = str(tmp_path / "m.elf")
    write_image(ctx.mod, image)
    mem = objdump_bytes(binutils, image)
    targets = objdump_branch_targets(binutils, image)
    exs = explain_all(ctx, ctx.rows)
    decisions = set()
    for ex in exs:
        if not ex.row.applied:
            assert ex.decision == "not applied"
            continue
        decisions.add(ex.decision)
        if ex.row.rtype == 0:
            continue
        P = ex.row.place
        if P in ctx.mod.finalized.ftrace_old:     # ftrace_module_init replaced the call: memory holds the NOP
            nop = bytes.fromhex("0df1040d" if ctx.mod.config.thumb2 else "04d08de2")
            assert bytes(mem[P + k] for k in range(4)) == nop and "ftrace NOP" in format_explanation(ex)
            assert ex.after == ctx.mod.finalized.ftrace_old[P]
            md = capstone.Cs(capstone.CS_ARCH_ARM, capstone.CS_MODE_THUMB if ctx.mod.config.thumb2
                             else capstone.CS_MODE_ARM)
            insn = next(md.disasm(ex.after, P))     # the replaced call, decoded independently
            targets[P] = int(insn.op_str.lstrip("#"), 0)
        elif P in ctx.mod.finalized.relocated:    # a table load_module sorted after relocation
            assert bytes(mem[P + k] for k in range(4)) == ctx.mod.read(P, 4) != ex.after
            assert ex.after == ctx.mod.finalized.relocated[P] and "rewrote this word" in format_explanation(ex)
        elif P in mem or ex.after is not None:
            assert bytes(mem[P + k] for k in range(4)) == ex.after, (ex.row, format_explanation(ex))
        assert ex.consistent, format_explanation(ex)
        if ex.decision == "direct":
            assert targets[P] == ex.target & ~1
        elif ex.decision == "veneer":
            assert targets[P] == ex.plt_slot
            lit_at = ex.plt_slot + ctx.mod.config.plt_stride
            lit = int.from_bytes(bytes(mem[lit_at + k] for k in range(4)), "little")
            assert lit == ex.target           # the veneer's literal is where the branch wanted to go
            assert not ex.in_range
    # Far away every kernel call needs a veneer; in the window none does.
    if placement == "vmalloc":
        assert "veneer" in decisions and "direct" not in {e.decision for e in exs
                                                        if e.row.sym_name in ctx.mod.resolved and
                                                        not ctx.mod.resolved[e.row.sym_name].source.startswith("module")}
    else:
        assert "veneer" not in decisions


def test_sort_position_follows_the_kernels_order():
    ctx = context_for(_session("hello-arm.ko", "window"), sample("hello-arm.ko"))
    rows = [r for r in ctx.rows if r.relsec_name == ".rel.init.text"]
    by_pos = sorted(rows, key=lambda r: r.position)
    keys = [(r.rtype, r.sym) for r in by_pos]
    assert keys == sorted(keys)                          # cmp_rel: type, then symbol
    assert sorted(r.position for r in rows) == list(range(len(rows)))
    assert any(r.position != r.index for r in rows)      # the sort actually moved something


def test_branch_addend_shows_pc_bias():
    _, exs = explain_module(_session("hello-arm.ko", "window"), sample("hello-arm.ko"), symbol="_printk")
    for ex in exs:
        assert ex.A == -8 and "PC bias" in ex.A_note
        assert ex.target == ex.row.S                     # S + A - P + P + 8
        assert ex.value == ex.row.S - 8 - ex.row.place


def test_refused_interworking_has_kernel_message():
    path = obj("interwork-arm-gcc12.o")
    cfg = KernelConfig()
    ctx, exs = explain_module(Session(Kernel.builtin(cfg), cfg), path, reloc=".rel.text.arm:0", object=True)
    assert ctx.mod is None and ctx.error is not None
    assert exs[0].decision == "refused"
    assert exs[0].message == str(ctx.error)
    assert "unsupported interworking call (ARM -> Thumb)" in exs[0].message


def test_cli_json_and_errors(capsys):
    rc = main(["explain", sample("hello-arm.ko"), "--kernel", SYMVERS, "--placement", "vmalloc",
               "--symbol", "_printk", "--json"])
    assert rc == 0
    d = json.loads(capsys.readouterr().out)
    assert {e["decision"] for e in d["explanations"]} == {"veneer"}
    assert all(e["plt_slot"] for e in d["explanations"])
    rc = main(["explain", sample("hello-arm.ko"), "--kernel", SYMVERS, "--reloc", ".rel.text:99", "--json"])
    assert rc == 1
    d = json.loads(capsys.readouterr().out)
    assert d["ok"] is False and "no relocation .rel.text:99" in d["message"]
    assert main(["explain", sample("hello-arm.ko"), "--kernel", SYMVERS, "--site", "nope"]) == 1
    assert "bad --site" in capsys.readouterr().err


def test_branch_sites_named_view():
    mod = _session("hello-arm.ko", "vmalloc").load(sample("hello-arm.ko"))
    sites = mod.branch_sites()
    assert len(sites) == len(mod.branches)
    for s, row in zip(sites, mod.branches):
        assert s.place == int(row["place"]) and s.plt == int(row["plt"])
        assert s.symbol == mod.sym_names[int(row["sym"])]
        assert s.via_plt and mod.plt_entry_at(s.plt).target == s.target


def _synth(n=4000, ext=300):
    from armload.inputs.synth import make_module
    return make_module(n, n_externals=ext)


@pytest.mark.parametrize("ko", [os.path.basename(k) for k in all_kos()] + ["synth"])
def test_counted_relocations_add_up_to_each_rules_count(ko):
    from armload.loader.elf import read_object
    from armload.loader.plt import counted_relocations, plan_plts
    cfg = KernelConfig(thumb2="thumb2" in ko)
    o = read_object("s.ko", _synth()) if ko == "synth" else read_object(sample(ko))
    counts = plan_plts(o, cfg).counts
    got = counted_relocations(o, cfg)
    nf = cfg.n_fixed_plts
    assert len(got["legacy"]) == counts["legacy"].total
    assert len(got["sorted"]) == counts["sorted"].total
    assert sum(c.plt == "core" for c in got["v6"]) == counts["v6"].core - nf
    assert sum(c.plt == "init" for c in got["v6"]) == counts["v6"].init - nf


def test_plt_notes_explain_the_differences():
    from armload.loader.elf import read_object
    from armload.loader.plt import counted_relocations
    from armload.inspect.report import plt_notes
    cfg = KernelConfig(thumb2=True)
    mod = Session(Kernel.from_files([SYMVERS], cfg), cfg, "vmalloc").load(sample("hello-thumb2.ko"))
    notes = plt_notes(mod, counted_relocations(read_object(sample("hello-thumb2.ko")), cfg))
    text = "\n".join(notes)
    assert "v6 counted 3" in text and "THM_JUMP24 _printk -> .plt" in text
    assert "core 3, init 4" in text and "2 fixed ftrace entries" in text and "3 of 3" in text
    assert "fixed ftrace entry instead of a new one: __gnu_mcount_nc x1" in text
    assert "in both .plt and .init.plt: _printk" in text
    # In the window nothing is far: the same count, no entry used.
    cfg = KernelConfig()
    mod = Session(Kernel.from_files([SYMVERS], cfg), cfg).load(sample("hello-arm.ko"))
    assert "0 of 3 here, using core 0, init 0" in "\n".join(plt_notes(mod, None))
    # A symbol twice in .plt: R_ARM_CALL and R_ARM_JUMP24 runs of one sorted table.
    data = _synth()
    mod = Session(Kernel.builtin(cfg), cfg, "vmalloc").load("s.ko", data)
    notes = plt_notes(mod, counted_relocations(read_object("s.ko", data), cfg), limit=None)
    twice = [n for n in notes if " has 2 entries in .plt" in n]
    assert twice and all("R_ARM_CALL in .text" in n and "R_ARM_JUMP24 in .text" in n for n in twice)
    from collections import Counter
    c = Counter(e.symbol for e in mod.plt_entries if e.plt == "core" and not e.fixed)
    assert len(twice) == sum(1 for k in c.values() if k == 2)


OBJS = ["relocs-arm-gcc12.o", "relocs-thumb2-gcc12.o", "group-arm-gcc12.o", "cfunc-arm-gcc12.o",
        "cfunc-thumb2-gcc12.o", "v4bx-armv4t-gcc12.o", "interwork-arm-gcc12.o"]


@pytest.mark.parametrize("o", OBJS)
def test_every_relocation_type_object_matches_readelf(o, binutils):
    path = obj(o)
    cfg = KernelConfig(thumb2="thumb2" in o)
    ctx = context_for(Session(Kernel.builtin(cfg), cfg), path, object=path.endswith(".o"))
    want = readelf_rows(binutils, path)
    got = {(r.relsec_name, r.index): (r.r_offset, r.r_info, r.type_name, r.sym_value, r.sym_name)
           for r in ctx.rows}
    assert got == want
    exs = explain_all(ctx, ctx.rows)
    if ctx.error is None:
        # Every applied relocation re-encodes (relocate.py's codec, explain's S/A/P) to the loaded word.
        assert all(e.consistent for e in exs if e.row.applied and e.row.rtype), \
            [format_explanation(e) for e in exs if e.row.applied and e.row.rtype and not e.consistent][:1]
    else:
        refused = [e for e in exs if e.decision == "refused"]
        assert refused and any(e.message == str(ctx.error) for e in refused)
        assert all(e.message == str(ctx.error) or "stops there" in " ".join(e.notes) for e in exs)


def test_load_json_carries_plt_notes_and_counted(capsys):
    assert main(["load", sample("hello-arm.ko"), "--kernel", SYMVERS, "--placement", "vmalloc", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)["modules"][0]
    assert any("upper bound" in n for n in d["plt_notes"])
    assert len(d["plt_counted"]["v6"]) == d["plt_counts"]["v6"]["total"] - 4
    assert {c["symbol"] for c in d["plt_counted"]["legacy"]} == {"_printk", "__gnu_mcount_nc"}
