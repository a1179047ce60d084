"""`armload disasm --patched --probe`: the words the 32-bit ARM 6.1 kernel writes into a loaded
module for a probe (armload/probes/patch.py), decoded by capstone, and the kernel's refusals."""
import os
import re
import struct
import subprocess
import sys

import pytest
from capstone import CS_ARCH_ARM, CS_MODE_ARM, CS_MODE_THUMB, Cs

from testinputs import ROOT, SAMPLES, SYMVERS

from armload.kernel.config import DEBIAN_ARMMP
from armload.kernel.provider import Kernel
from armload.loader.session import Session
from armload.probes import insn as I
from armload.probes import patch
from armload.probes.base import ProbeError


def _load(thumb, placement="window"):
    cfg = DEBIAN_ARMMP.with_(thumb2=thumb)
    kernel = Kernel.from_files([SYMVERS], cfg)
    return Session(kernel, cfg, placement).load(os.path.join(SAMPLES, f"exporter-{'thumb2' if thumb else 'arm'}.ko")), kernel


def _dis(data, addr, thumb):
    return [(i.mnemonic, i.op_str) for i in Cs(CS_ARCH_ARM, CS_MODE_THUMB if thumb else CS_MODE_ARM).disasm(data, addr)]


@pytest.mark.parametrize("thumb", [False, True])
def test_disasm_shows_patched_sites(thumb):
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
@pytest.mark.parametrize("placement", ["window", "vmalloc"])
def test_ftrace_call_reaches_ftrace_caller_directly_or_through_the_fixed_plt(thumb, placement):
    m, kernel = _load(thumb, placement)
    view, marks = patch.patched_view(m, kernel, ["ftrace:armload_sample_add"])
    site = next(a for a, w in marks.items() if "ftrace call" in w)
    start, s = patch.function(m, "armload_sample_add")
    assert start <= site < start + s.size and site in patch.mcount_sites(m)
    assert m.read(site, 4) != view.read(site, 4)          # the loaded module itself is untouched
    (mn, op), = _dis(view.read(site, 4), site, thumb)
    assert mn == "bl"
    target = int(op.lstrip("#"), 16)
    ftrace_caller = patch._kernel_addr(m, kernel, "ftrace_caller")
    if "via PLT" in marks[site]:
        e = m.plt_entry_at(target)
        assert placement == "vmalloc" and e is not None and e.fixed and e.target == ftrace_caller
    else:
        assert target == ftrace_caller & ~1
    assert ("via PLT" in marks[site]) == (placement == "vmalloc")


@pytest.mark.parametrize("thumb", [False, True])
def test_kprobe_breakpoints_are_the_kernels_and_keep_the_condition(thumb):
    m, kernel = _load(thumb)
    off = 0xe if thumb else 0x8
    view, marks = patch.patched_view(m, kernel, [f"kprobe:armload_sample_add+{off:#x}", "kretprobe:armload_sample_add"])
    start, _ = patch.function(m, "armload_sample_add")
    for a in (start, start + off):
        was = m.read(a, 4)
        if thumb:
            op, size = I.thumb_opcode(was)
            want = I.KPROBE_THUMB16_BREAKPOINT_INSTRUCTION if size == 2 else I.KPROBE_THUMB32_BREAKPOINT_INSTRUCTION
            assert I.thumb_opcode(view.read(a, 4))[0] == want
        else:
            op = struct.unpack("<I", was)[0]
            got = struct.unpack("<I", view.read(a, 4))[0]
            assert got == (I.KPROBE_ARM_BREAKPOINT_INSTRUCTION & 0x0FFFFFFF) | (op & 0xF0000000)
        assert "breakpoint (was " + was[:size if thumb else 4].hex() in marks[a]
    assert "kretprobe" in marks[start]


@pytest.mark.parametrize("spec,errno,msg", [
    ("kprobe:armload_sample_add+0x4", -22, "is an ftrace location"),
    ("kprobe:armload_sample_add+0x2", -22, "not word aligned"),
    ("kprobe:nosuch", -2, "no function 'nosuch'"),
    ("kprobe:armload_sample_add+0x400", -22, "past the end"),
    ("ftrace:armload_sample_add+0x4", -22, "only a kprobe takes an offset"),
    ("uprobe:x", -22, "expected KIND:FUNC[+OFF]"),
    ("fentry:armload_sample_add", -524, "no BPF trampoline"),
    ("fexit:armload_sample_add", -524, "no BPF trampoline"),
])
def test_refusals(spec, errno, msg):
    m, kernel = _load(False)
    with pytest.raises(ProbeError, match=re.escape(msg)) as e:
        patch.patched_view(m, kernel, [spec])
    assert e.value.errno == errno


def test_a_rejected_instruction_is_refused_like_the_kernels_decoder(monkeypatch):
    m, kernel = _load(False)
    monkeypatch.setattr(I, "decode_arm", lambda op: I.Decoded(I.REJECT, "test"))
    with pytest.raises(ProbeError, match="rejected by the ARM kprobes decoder"):
        patch.patched_view(m, kernel, ["kprobe:armload_sample_add+0x8"])


def test_cli_refusal_is_one_line():
    ko = os.path.join(SAMPLES, "exporter-arm.ko")
    p = subprocess.run([sys.executable, "-m", "armload", "disasm", ko, "--kernel", SYMVERS, "--probe",
                        "kprobe:armload_sample_add+0x4"], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 1 and "is an ftrace location" in p.stderr and "Traceback" not in p.stderr


def test_an_address_and_graph_are_the_same_sites_as_their_names():
    m, kernel = _load(False)
    start, _ = patch.function(m, "armload_sample_add")
    by_name = patch.patched_view(m, kernel, ["kprobe:armload_sample_add+0x8", "ftrace:armload_sample_add"])
    by_addr = patch.patched_view(m, kernel, [f"kprobe:{start + 8:#x}", "graph:armload_sample_add"])
    assert by_name[1] == by_addr[1]
    assert by_name[0].read(start, 16) == by_addr[0].read(start, 16) != m.read(start, 16)
    with pytest.raises(ProbeError, match="in no function"):
        patch.patched_view(m, kernel, ["kprobe:0x10"])
