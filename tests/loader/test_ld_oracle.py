"""Independent oracle: GNU ld links the same objects at the addresses armload chose, and every
relocated byte must match (capstone decodes any difference for the failure message)."""
import os
import struct
import subprocess

import capstone
import pytest

from armload.kernel.config import KernelConfig
from armload.constants import SHF_ALLOC
from armload.loader.elf import read_object
from armload.kernel.provider import Kernel
from armload.loader.layout import TEMP_COPY_BASE
from armload.loader.session import Session

from testinputs import OBJS, SYMVERS, all_kos

ARM_OBJS = ["relocs-arm-gcc12.o", "cfunc-arm-gcc12.o", "group-arm-gcc12.o", "v4bx-armv4t-gcc12.o"]
THUMB_OBJS = ["relocs-thumb2-gcc12.o", "cfunc-thumb2-gcc12.o"]


def link_like(mod, path, tmp_path, cross):
    """Link `path` with ld so that every section lands where armload put it."""
    obj = read_object(path, object=path.endswith(".o"))
    placed = {s.index: s.addr for s in mod.sections}
    names = [s.name for s in obj.sections]
    lines = ["SECTIONS {"]
    base = os.path.basename(path)
    for s in obj.sections:
        if not (s.sh_flags & SHF_ALLOC) or not s.name:
            continue
        assert names.count(s.name) == 1, f"duplicate section name {s.name} in {base}"
        addr = placed.get(s.index, TEMP_COPY_BASE + s.sh_offset)
        lines.append(f"  {s.name} {addr:#x} : {{ *({s.name}) }}")
    lines.append("}")
    script = tmp_path / "link.ld"
    script.write_text("\n".join(lines) + "\n")
    out = tmp_path / "linked.elf"
    # External symbols are defined by a small assembled object, each in its own section at the
    # address armload resolved, typed like the kernel's (Thumb functions in a Thumb-2 kernel), so
    # that ld makes the same interworking decisions the kernel does.
    asm, placed_ext = [".syntax unified"], []
    for n, r in sorted(mod.resolved.items()):
        sec = f".ext.{len(placed_ext)}"
        asm.append(f'.section {sec},"ax",%progbits')
        asm.append(f".global {n}")
        if r.kind == "func":
            asm += [".thumb", ".thumb_func"] if r.addr & 1 else [".arm", f".type {n}, %function"]
        asm.append(f"{n}: .word 0")
        placed_ext.append(f"  {sec} {r.addr & ~1:#x} : {{ *({sec}) }}")
    ext_s = tmp_path / "ext.S"
    ext_s.write_text("\n".join(asm) + "\n")
    ext_o = tmp_path / "ext.o"
    r = subprocess.run([cross + "as", "-march=armv7-a", "-o", str(ext_o), str(ext_s)], capture_output=True, text=True)
    # ld merges SHF_MERGE string sections (moving strings); the kernel copies them verbatim.
    data = bytearray(open(path, "rb").read())
    for s in obj.sections:
        flags_at = int.from_bytes(data[32:36], "little") + s.index * 40 + 8
        data[flags_at:flags_at + 4] = (s.sh_flags & ~0x30).to_bytes(4, "little")
    path = str(tmp_path / base)
    with open(path, "wb") as f:
        f.write(data)
    assert r.returncode == 0, r.stderr
    script.write_text("\n".join(lines[:-1] + placed_ext + lines[-1:]) + "\n")
    cmd = [cross + "ld", "-o", str(out), "-T", str(script), "--fix-v4bx", "--no-merge-exidx-entries",
           "-e", "0", "--no-warn-rwx-segments", "--no-check-sections", path, str(ext_o)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, f"ld failed: {r.stderr}"
    from elftools.elf.elffile import ELFFile
    with open(out, "rb") as f:
        elf = ELFFile(f)
        return {s.name: (s["sh_addr"], s.data()) for s in elf.iter_sections() if s["sh_flags"] & SHF_ALLOC}


ARM_FTRACE_NOP, THUMB_FTRACE_NOP = bytes.fromhex("04d08de2"), bytes.fromhex("0df1040d")   # add sp, sp, #4


def _ftrace_sites(mod, linked, md, thumb):
    """Where ld's link holds `bl __gnu_mcount_nc` (capstone decodes it), armload must hold the NOP
    ftrace_module_init writes (add sp, sp, #4); returns those addresses, each checked."""
    mcount = mod.resolved.get("__gnu_mcount_nc")
    if mcount is None:
        return set()
    sites = set()
    for name, (addr, data) in linked.items():
        if name == "__mcount_loc":
            for (a,) in struct.iter_unpack("<I", data[:len(data) // 4 * 4]):
                sites.add(a & ~1)
    for a in sites:
        s = mod.section_at(a)
        ld_addr, ld_data = linked[s.name]
        insn = next(md.disasm(ld_data[a - ld_addr:a - ld_addr + 4], a))
        assert insn.mnemonic == "bl" and int(insn.op_str.lstrip("#"), 0) == mcount.addr & ~1, \
            f"{mod.name}: ld has {insn.mnemonic} {insn.op_str} at __mcount_loc site {a:#x}"
        assert mod.read(a, 4) == (THUMB_FTRACE_NOP if thumb else ARM_FTRACE_NOP), f"{a:#x} not NOPed"
    assert sorted(sites) == sorted(mod.finalized.ftrace_nops)
    return sites


def compare(mod, linked, thumb):
    md = capstone.Cs(capstone.CS_ARCH_ARM, capstone.CS_MODE_THUMB if thumb else capstone.CS_MODE_ARM)
    checked = 0
    nops = {a + h for a in _ftrace_sites(mod, linked, md, thumb) for h in (0, 2)}   # halfwords they cover
    for s in mod.sections:
        if s.name in (".plt", ".init.plt") or s.name not in linked or s.sh_type == 8:
            continue
        addr, data = linked[s.name]
        assert addr == s.addr, f"{s.name}: ld placed it at {addr:#x}, armload at {s.addr:#x}"
        for off in range(0, min(len(data), len(s.data)), 2):
            if data[off:off + 2] != s.data[off:off + 2]:
                if s.addr + off in nops:
                    continue
                w = (s.addr + off) & ~3                  # a word load_module rewrote after relocation:
                before = mod.finalized.relocated.get(w)  # ld's link must hold what relocation wrote
                if before is not None and data[w - s.addr:w - s.addr + 4] == before:
                    continue
                o = off & ~3 if not thumb else off & ~1
                ours = " ".join(f"{i.mnemonic} {i.op_str}" for i in md.disasm(s.data[o:o + 4], s.addr + o))
                theirs = " ".join(f"{i.mnemonic} {i.op_str}" for i in md.disasm(data[o:o + 4], s.addr + o))
                pytest.fail(f"{mod.name} {s.name}+{o:#x}: armload {s.data[o:o+4].hex()} ({ours}) "
                            f"!= ld {data[o:o+4].hex()} ({theirs})")
        checked += len(s.data)
    return checked


@pytest.mark.parametrize("name", ARM_OBJS + THUMB_OBJS)
@pytest.mark.parametrize("placement", ["window", 0xBF400000])
def test_object_matches_ld(name, placement, tmp_path, binutils):
    path = os.path.join(OBJS, name)
    thumb = name in THUMB_OBJS
    cfg = KernelConfig(thumb2=thumb)
    mod = Session(Kernel.builtin(cfg, simulate_all=True), cfg, placement).load(path, object=True)
    assert sum(mod.reloc_counts.values()) > 0
    linked = link_like(mod, path, tmp_path, binutils)
    assert compare(mod, linked, thumb) > 0


@pytest.mark.parametrize("layout", ["6.1", "6.4"])
@pytest.mark.parametrize("path", [p for p in all_kos() if "debug" not in p], ids=os.path.basename)
def test_sample_ko_matches_ld(path, layout, tmp_path, binutils):
    """Real kbuild modules: every allocated byte equals GNU ld's link at the same addresses."""
    thumb = "thumb2" in path
    cfg = KernelConfig(thumb2=thumb, layout=layout)
    session = Session(Kernel.from_files([SYMVERS], cfg), cfg)
    if "importer" in path:
        session.load(path.replace("importer", "exporter"))
    mod = session.load(path)
    assert mod.branches.size and (mod.branches["plt"] == 0).all()   # window: all direct
    linked = link_like(mod, path, tmp_path, binutils)
    assert compare(mod, linked, thumb) > 0


def _cs(thumb):
    md = capstone.Cs(capstone.CS_ARCH_ARM, capstone.CS_MODE_THUMB if thumb else capstone.CS_MODE_ARM)
    md.detail = True
    return md


def _branch_dest(md, code, addr):
    insn = next(md.disasm(code, addr), None)
    assert insn is not None, f"cannot decode {code.hex()} at {addr:#x}"
    assert insn.mnemonic.rstrip(".w").startswith(("bl", "b")), f"{insn.mnemonic} {insn.op_str} at {addr:#x}"
    return insn.operands[0].imm & 0xFFFFFFFF


@pytest.mark.parametrize("name", ["relocs-arm-gcc12.o", "cfunc-arm-gcc12.o", "relocs-thumb2-gcc12.o",
                                  "cfunc-thumb2-gcc12.o"])
def test_far_placement_routes_through_ldr_veneers(name):
    """vmalloc placement: every external call lands on a PLT slot holding `ldr pc, [pc, #L1-8]`
    (or the Thumb-2 ldr.w) whose literal is the symbol's address (capstone decodes both)."""
    thumb = "thumb2" in name
    cfg = KernelConfig(thumb2=thumb)
    mod = Session(Kernel.builtin(cfg, simulate_all=True), cfg, "vmalloc").load(os.path.join(OBJS, name), object=True)
    md = _cs(thumb)
    via = mod.branches[mod.branches["plt"] != 0]
    assert len(via) > 0
    for row in via:
        place, slot = int(row["place"]), int(row["plt"])
        assert _branch_dest(md, mod.read(place, 4), place) == slot
        ldr = next(md.disasm(mod.read(slot, 4), slot))
        assert ldr.mnemonic in ("ldr", "ldr.w") and ldr.op_str.startswith("pc, [pc, #"), ldr.op_str
        disp = ldr.operands[1].mem.disp
        pc = slot + (4 if thumb else 8)
        lit_addr = pc + disp
        assert lit_addr == slot + cfg.l1_cache_bytes
        lit = int.from_bytes(mod.read(lit_addr, 4), "little")
        assert lit == int(row["target"]), f"slot {slot:#x}: literal {lit:#x} != target {int(row['target']):#x}"
        sym = mod.sym_names[int(row["sym"])]
        if sym in mod.resolved:
            bias_free = (lit - mod.resolved[sym].addr) & 0xFFFFFFFF
            assert bias_free < 0x2000, f"literal {lit:#x} is not {sym} (+ a small addend)"
