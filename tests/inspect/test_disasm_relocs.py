"""disasm annotates every relocation at its site (as objdump -dr does) and interleaves DWARF source
lines (as objdump -S/-l does); both checked against GNU objdump on the bundled samples."""
import json
import re
import subprocess

import pytest

from armload.cli import main

from testinputs import SYMVERS, all_kos, sample
import os


def objdump_relocs(cross, path):
    """{(section, offset, type, symbol)} for relocations of ALLOC sections, from objdump -r + -h."""
    heads = subprocess.run([cross + "objdump", "-h", path], capture_output=True, text=True, check=True).stdout
    alloc = set()
    lines = heads.splitlines()
    for i, ln in enumerate(lines):
        m = re.match(r"^\s*\d+\s+(\S+)\s+[0-9a-f]{8}", ln)
        if m and i + 1 < len(lines) and "ALLOC" in lines[i + 1]:
            alloc.add(m.group(1))
    out = subprocess.run([cross + "objdump", "-r", path], capture_output=True, text=True, check=True).stdout
    got, sec = set(), None
    for ln in out.splitlines():
        m = re.match(r"RELOCATION RECORDS FOR \[(.+)\]:", ln)
        if m:
            sec = m.group(1)
            continue
        m = re.match(r"^([0-9a-f]{8}) (R_ARM_\w+)\s+(\S*)", ln)
        if m and sec in alloc:
            got.add((sec, int(m.group(1), 16), m.group(2), m.group(3)))
    return got, alloc


def _disasm_json(capsys, args):
    assert main(["disasm", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("ko", [os.path.basename(k) for k in all_kos() if "importer" not in k])
def test_every_relocation_annotated_like_objdump_r(ko, binutils, capsys):
    path = sample(ko)
    want, alloc = objdump_relocs(binutils, path)
    extra = ["--thumb2"] if "thumb2" in ko else []
    d = _disasm_json(capsys, [path, "--kernel", SYMVERS, *extra])
    # Section bases from the listing's headers: "section NAME (0xADDR, ...)".
    got = set()
    for b in d["blocks"]:
        m = re.match(r"section (\S+) \((0x[0-9a-f]+),", b["title"])
        name, base = m.group(1), int(m.group(2), 16)
        for ln in b["lines"]:
            for r in ln["relocs"]:
                # objdump names the place relative to the start of its section, as `addr: TYPE sym`.
                rtype, _, rest = r.partition("\t")
                sym = rest.split("\t")[0]
                got.add((name, ln["addr"] - base, rtype, sym))
    # Every relocation of a listed (executable or .ARM.exidx) section, nothing else.
    listed = {re.match(r"section (\S+)", b["title"]).group(1) for b in d["blocks"]}
    assert got == {w for w in want if w[0] in listed}
    assert any(w[2] == "R_ARM_PREL31" for w in got)        # unwind entries are shown
    assert any("MOV" in w[2] for w in got)                 # movw/movt of a symbol address


def test_source_lines_match_objdump_l(binutils, capsys):
    path = sample("hello-arm-debug.ko")
    out = subprocess.run([binutils + "objdump", "-dl", path], capture_output=True, text=True, check=True).stdout
    want, sec = [], None
    pending = None
    for ln in out.splitlines():
        m = re.match(r"Disassembly of section (\S+):", ln)
        if m:
            sec = m.group(1)
        m = re.match(r"^\S*/(\w+\.c):(\d+)", ln)
        if m:
            pending = (m.group(1), int(m.group(2)))
            continue
        m = re.match(r"^\s+([0-9a-f]+):\t", ln)
        if m and pending:
            want.append((sec, int(m.group(1), 16), pending))
            pending = None
    assert want, "objdump -l printed no line information"
    d = _disasm_json(capsys, [path, "--kernel", SYMVERS, "--source"])
    got = {}
    for b in d["blocks"]:
        m = re.match(r"section (\S+) \((0x[0-9a-f]+),", b["title"])
        for ln in b["lines"]:
            got[(m.group(1), ln["addr"] - int(m.group(2), 16))] = ln["source"]
    for sec, off, (fname, line) in want:
        assert any(s.startswith(f"{fname}:{line}:") for s in got[(sec, off)]), (sec, off, got[(sec, off)])
    # The source text comes from sample_modules/src/hello/hello.c (found by base name).
    flat = [s for v in got.values() for s in v]
    assert any("pr_info(\"hello: loaded" in s for s in flat)


def test_source_without_dwarf_says_so(capsys):
    assert main(["disasm", sample("hello-arm.ko"), "--kernel", SYMVERS, "--source"]) == 0
    assert "no DWARF line table" in capsys.readouterr().err


def test_thumb2_ftrace_entry_named_by_its_plt_entry(capsys):
    assert main(["disasm", sample("hello-thumb2.ko"), "--kernel", SYMVERS, "--thumb2", "--placement",
                 "vmalloc", "--plt"]) == 0
    out = capsys.readouterr().out
    assert "__aeabi_unwind_cpp_pr1+" not in out
    first = next(ln for ln in out.splitlines() if "ldr.w" in ln)
    assert "<ftrace_caller>" in first
