"""The EHABI unwinder the sanitizers' backtraces use (emu/unwind.py).

Oracle: binutils `readelf -u` decodes every index entry's opcodes (personality 0/1/2) of the
samples and of real Debian modules; the `--image` file keeps the relocated debug sections.
"""
import os
import re
import struct
import subprocess

import pytest

from testinputs import CROSS, ROOT, devkit_line, sample

from armload.emu.unwind import (ExidxTable, Frame, UnwindError, execute, opcodes_of, prel31, unwind_frame)
from armload.kernel import debian

CACHE = os.path.join(ROOT, ".cache")
KMODS = debian.MODULES


def _mem(words: dict[int, int]):
    def read32(a):
        if a not in words:
            raise UnwindError(f"unmapped {a:#x}")
        return words[a]
    return read32


def _regs(**kw):
    r = [0] * 16
    names = {"sp": 13, "lr": 14, "pc": 15, "fp": 11}
    for k, v in kw.items():
        r[names.get(k, None) if k in names else int(k[1:])] = v
    return r


def test_vsp_arithmetic_and_finish():
    regs = _regs(sp=0x1000)
    assert execute([0x01], regs, _mem({}))[0][13] == 0x1008        # vsp += (1 << 2) + 4
    assert execute([0x3F], regs, _mem({}))[0][13] == 0x1100        # largest: 0x3f -> +0x100
    assert execute([0x41], regs, _mem({}))[0][13] == 0x0FF8
    assert execute([0xB2, 0x00], regs, _mem({}))[0][13] == 0x1204  # 0x204 + (0 << 2)
    assert execute([0xB2, 0x81, 0x01], regs, _mem({}))[0][13] == 0x1000 + 0x204 + (129 << 2)
    assert execute([0xB0, 0x01], regs, _mem({}))[0][13] == 0x1000  # finish stops before 0x01
    assert execute([0x9B], _regs(sp=0x1000, r11=0x2000), _mem({}))[0][13] == 0x2000


def test_pops():
    mem = _mem({0x1000: 4, 0x1004: 6, 0x1008: 7, 0x100C: 0xBEEF})
    vrs, pc_set = execute([0x84, 0x0D], _regs(sp=0x1000), mem)     # mask 0x40d: r4 r6 r7 r14
    assert (vrs[4], vrs[6], vrs[7], vrs[14], vrs[13], pc_set) == (4, 6, 7, 0xBEEF, 0x1010, False)
    vrs, pc_set = execute([0xA9], _regs(sp=0x1000), _mem({0x1000: 1, 0x1004: 2, 0x1008: 3}))
    assert (vrs[4], vrs[5], vrs[14], vrs[13]) == (1, 2, 3, 0x100C)   # pop {r4, r5, r14}
    vrs, _ = execute([0xA1], _regs(sp=0x1000), _mem({0x1000: 1, 0x1004: 2}))
    assert (vrs[4], vrs[5], vrs[13]) == (1, 2, 0x1008)               # pop {r4, r5}
    vrs, _ = execute([0xB1, 0x05], _regs(sp=0x1000), _mem({0x1000: 10, 0x1004: 12}))
    assert (vrs[0], vrs[2], vrs[13]) == (10, 12, 0x1008)             # pop {r0, r2}
    vrs, pc_set = execute([0x88, 0x00], _regs(sp=0x1000), _mem({0x1000: 0xC0DE}))
    assert vrs[15] == 0xC0DE and pc_set                              # pop {r15}
    vrs, _ = execute([0x82, 0x00], _regs(sp=0x1000), _mem({0x1000: 0x5000}))
    assert vrs[13] == 0x5000                                         # popped sp wins over vsp += 4


def test_vfp_and_wmmx_pops_move_vsp_only():
    r = _regs(sp=0x1000)
    assert execute([0xB3, 0x12], r, _mem({}))[0][13] == 0x1000 + 8 * 3 + 4   # FSTMFDX D1-D3
    assert execute([0xB9], r, _mem({}))[0][13] == 0x1000 + 8 * 2 + 4         # FSTMFDX D8-D9
    assert execute([0xC9, 0x83], r, _mem({}))[0][13] == 0x1000 + 8 * 4       # VPUSH D8-D11
    assert execute([0xC8, 0x00], r, _mem({}))[0][13] == 0x1000 + 8           # VPUSH D16
    assert execute([0xD7], r, _mem({}))[0][13] == 0x1000 + 8 * 8             # VPUSH D8-D15
    assert execute([0xC1], r, _mem({}))[0][13] == 0x1000 + 8 * 2             # wR10-wR11
    assert execute([0xC7, 0x03], r, _mem({}))[0][13] == 0x1000 + 8           # wCGR0-1


@pytest.mark.parametrize("ops", [[0x80, 0x00], [0xB1, 0x00], [0xB1, 0x10], [0x9D], [0x9F], [0xB4], [0xC7, 0x00],
                                 [0xD8], [0xE0], [0xFF], [0x84]])
def test_refused_and_spare_opcodes(ops):
    with pytest.raises(UnwindError):
        execute(ops, _regs(sp=0x1000), _mem({}))


def test_entry_forms():
    place = 0x2000
    assert opcodes_of(_mem({}), place, 0x80A8B0B0) == [0xA8, 0xB0, 0xB0]           # inline pr0
    with pytest.raises(UnwindError, match="CANTUNWIND"):
        opcodes_of(_mem({}), place, 1)
    # prel31 to an extab entry at 0x3000 (relative to the second word at 0x2004)
    off = (0x3000 - 0x2004) & 0x7FFFFFFF
    assert opcodes_of(_mem({0x3000: 0x8100A8B0}), place, off) == [0xA8, 0xB0]      # pr1, no extra word
    assert opcodes_of(_mem({0x3000: 0x8201A8B0, 0x3004: 0x01020304}), place, off) == [0xA8, 0xB0, 1, 2, 3, 4]
    with pytest.raises(UnwindError, match="generic personality"):
        opcodes_of(_mem({0x3000: 0x00001000}), place, off)
    with pytest.raises(UnwindError, match="personality routine index 3"):
        opcodes_of(_mem({0x3000: 0x83000000}), place, off)
    assert prel31(0x7FFFFFFC, 0x1000) == 0x0FFC and prel31(0x10, 0x1000) == 0x1010


def test_table_bounds_and_frames():
    t = ExidxTable.from_words([(0x100, (0x1000 - 0x100) & 0x7FFFFFFF, 0x80A8B0B0),
                               (0x108, (0x1040 - 0x108) & 0x7FFFFFFF, 0x80B0B0B0)], 0x1080)
    assert t.lookup(0x0FFF) is None and t.lookup(0x1000)[0] == 0x1000
    assert t.lookup(0x103F)[0] == 0x1000 and t.lookup(0x1040)[0] == 0x1040
    assert t.lookup(0x107F)[0] == 0x1040 and t.lookup(0x1080) is None
    mem = _mem({0x800: 44, 0x804: 0x2222})
    f = unwind_frame(Frame(_regs(sp=0x800, lr=0x1111, pc=0x1010)), t, mem)
    assert (f.regs[4], f.pc, f.sp) == (44, 0x2222, 0x808)            # pop {r4, lr}; pc = lr
    f = unwind_frame(Frame(_regs(sp=0x800, lr=0x1111, pc=0x1000)), t, mem)
    assert (f.pc, f.sp) == (0x1111, 0x800)                           # at the entry: the caller's frame
    f = unwind_frame(Frame(_regs(sp=0x800, lr=0x3333, pc=0x1044)), t, mem)
    assert (f.pc, f.sp) == (0x3333, 0x800)                           # leaf: nothing popped
    with pytest.raises(UnwindError):
        unwind_frame(Frame(_regs(sp=0x800, lr=0x1044, pc=0x1044)), t, mem)   # would loop


# --- readelf -u as the oracle for the opcode bytes -----------------------------------------------
def _readelf_unwind(path):
    out = subprocess.run([CROSS + "readelf", "-u", path], capture_output=True, text=True, check=True).stdout
    secs: dict[str, list] = {}
    cur = None
    for block in re.split(r"\n\s*\n", out):
        m = re.search(r"Unwind section '([^']+)'", block)
        if m:
            cur = secs.setdefault(m.group(1), [])
            continue
        if cur is None or not block.strip():
            continue
        lines = block.strip("\n").splitlines()
        if "[cantunwind]" in lines[0]:
            cur.append("cantunwind")
            continue
        ops = []
        for ln in lines[1:]:
            if "Compact model index" in ln or "Personality routine" in ln:
                continue
            ops += [int(t, 16) for t in re.findall(r"(?:^|\s)(0x[0-9a-f]{2})(?=\s)", ln.split("  ", 2)[1] + " ")] \
                if ln.startswith("  0x") else []
        cur.append(ops)
    return secs


def _strip_finish(ops):
    while ops and ops[-1] == 0xB0:
        ops = ops[:-1]
    return ops


def _corpus(name):
    p = os.path.join(KMODS, name)
    assert os.path.exists(p), f"missing Debian module {p} (make test-inputs)"
    return p


@pytest.mark.parametrize("path", [sample("devkit-arm.ko"), sample("devkit-thumb2.ko"), sample("nullderef-arm.ko"),
                                  "fs/adfs/adfs.ko", "fs/affs/affs.ko", "fs/btrfs/btrfs.ko"])
def test_opcodes_match_readelf(path):
    from armload.kernel.config import DEBIAN_ARMMP
    from armload.kernel.provider import Kernel
    from armload.loader.session import Session
    import dataclasses
    path = path if os.path.isabs(path) else _corpus(path)
    config = dataclasses.replace(DEBIAN_ARMMP, thumb2="thumb2" in path)
    mod = Session(Kernel.from_files([], config, simulate_all=True), config, modversions=False).load(path)
    read32 = lambda a: struct.unpack("<I", mod.read(a, 4))[0]
    want = _readelf_unwind(path)
    assert want, "readelf printed no unwind sections"
    n = 0
    for s in mod.sections:
        if not s.name.startswith(".ARM.exidx") or not s.size:
            continue
        exp = want[s.name]
        assert len(exp) == s.size // 8
        for i, e in enumerate(exp):
            insn = read32(s.addr + 8 * i + 4)
            if e == "cantunwind":
                assert insn == 1
                continue
            got = opcodes_of(read32, s.addr + 8 * i, insn)
            assert _strip_finish(got) == _strip_finish(e), (s.name, i, got, e)
            n += 1
    assert n >= (1 if "sample_modules" in path else 20)


def _addr2line(elf, addr):
    out = subprocess.run([CROSS + "addr2line", "-e", elf, hex(addr)], capture_output=True, text=True,
                         check=True).stdout.strip()
    f, _, line = out.rpartition(":")
    return os.path.normpath(f), int(line.split()[0])


def test_load_image_keeps_relocated_debug_sections(tmp_path):
    import sys
    out = str(tmp_path / "dk.elf")
    p = subprocess.run([sys.executable, "-m", "armload", "load", sample("devkit-arm-debug.ko"), "--simulate-symbols",
                        "--image", out], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    secs = subprocess.run([CROSS + "readelf", "-SW", out], capture_output=True, text=True, check=True).stdout
    assert ".debug_info" in secs and ".debug_line" in secs and ".rel.debug" not in secs
    nm = subprocess.run([CROSS + "nm", out], capture_output=True, text=True, check=True).stdout
    peek = next(int(l.split()[0], 16) for l in nm.splitlines() if l.endswith(" devkit_peek"))
    f, line = _addr2line(out, peek + 8)                    # `return *p + 1;`
    assert f.endswith("devkit.c") and line == devkit_line("return *p + 1;")
    fn = subprocess.run([CROSS + "addr2line", "-f", "-e", out, hex(peek + 8)], capture_output=True, text=True,
                        check=True).stdout.split()[0]
    assert fn == "devkit_peek"
