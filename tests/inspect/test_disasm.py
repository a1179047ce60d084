"""Disassembly: mapping symbols, annotations, PLT listing, --function."""
import sys

import pytest
from asm_module import build_module

from armload.inspect.disasm import disassemble, format_listing
from armload.errors import EmulationError
from armload.loader.model import ModuleSymbol

EXTERNS = {"_printk": "func", "kmalloc": "func"}


@pytest.mark.parametrize("thumb", [False, True])
def test_annotations(thumb):
    mod, k = build_module({"init_module": "push {r4, lr}\nbl {plt:_printk}\nbl {kmalloc}\nbl {helper}\npop {r4, pc}",
                           "helper": "bx lr"}, externs=EXTERNS, thumb=thumb)
    text = format_listing(mod, disassemble(mod, k), k)
    slot = mod.plt_entries[0].addr
    assert f"bl\t{slot:#x} <plt: _printk>" in text
    assert "<kmalloc>" in text and "<helper>" in text
    assert ("R_ARM_THM_CALL" if thumb else "R_ARM_CALL") + " _printk -> 0xc0100000" in text
    assert "<init_module>:" in text
    assert "ldr" in text and "<plt: _printk>:" in text


def test_mapping_symbols_switch_to_data():
    mod, k = build_module({"init_module": "mov r0, #0\nbx lr\n.word 0xc0100000\n.word 0x12345678"},
                          externs=EXTERNS)
    mod.symbols.append(ModuleSymbol("$d", mod.sections[0].addr + 8, 0, "notype", "local", ".text"))
    blocks = disassemble(mod, k, function="init_module")
    lines = blocks[0][1]
    assert [ln.isa for ln in lines] == ["arm", "arm", "data", "data"]
    assert lines[2].mnemonic == ".word" and "<_printk>" in lines[2].comment


def test_function_and_plt_filters():
    mod, k = build_module({"init_module": "bl {plt:_printk}\nbx lr", "other": "bx lr"}, externs=EXTERNS)
    b = disassemble(mod, k, function="other")
    assert len(b) == 1 and len(b[0][1]) == 1
    b = disassemble(mod, k, plt=True)
    assert [t.split()[1] for t, _ in b] == [".plt"]
    with pytest.raises(EmulationError):
        disassemble(mod, k, function="nope")


def test_sample_disasm_cli():
    import subprocess
    from testinputs import ROOT as root, sample
    sample("hello-thumb2.ko")
    sample("hello-arm.ko")
    p = subprocess.run([sys.executable, "-m", "armload", "disasm", "sample_modules/hello-thumb2.ko", "--thumb2",
                        "--placement", "vmalloc", "--kernel", "sample_modules/Module.symvers"], cwd=root, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "<plt: _printk>" in p.stdout and "movw" in p.stdout
    p = subprocess.run([sys.executable, "-m", "armload", "disasm", "sample_modules/hello-arm.ko", "--plt",
                        "--placement", "vmalloc", "--kernel", "sample_modules/Module.symvers"], cwd=root, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "ldr\tpc, [pc, #0x38]" in p.stdout
