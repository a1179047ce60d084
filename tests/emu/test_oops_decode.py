"""The booted kernel's oops decoded to file:line as scripts/decode_stacktrace.sh decodes it
(armload/emu/booted/decode.py, armload/emu/debuginfo.py's Addr2Line), checked against binutils'
addr2line on the same loaded image."""
import json
import os
import subprocess
import sys

import pytest

from testinputs import BOOT_VMLINUZ, CACHE, CROSS, ROOT, SAMPLES, SYMVERS, devkit_line, sample
from armload.kernel.config import DEBIAN_ARMMP
from armload.kernel.provider import Kernel
from armload.kernel import debian

VMLINUX_DBG = debian.VMLINUX_DBG
DEBIAN_SYMVERS = os.path.join(CACHE, "linux-headers-6.1.0-50-armmp", "usr", "src",
                              "linux-headers-6.1.0-50-armmp", "Module.symvers")


def src_line(name: str, marker: str) -> int:
    with open(os.path.join(SAMPLES, "src", name, f"{name}.c")) as f:
        return next(i for i, ln in enumerate(f, 1) if marker in ln)


def decoded(run, path, params=""):
    from armload.emu.booted.decode import decode
    r = run.load(path, params)
    assert r.status == "oops", r.console[-5:]
    return r, decode(r.oops, run.session.modules)


def binutils_a2l(mod, addrs, tmp_path) -> dict[int, list[str]]:
    from armload.loader.debug_image import write_debug_image
    elf = str(tmp_path / "loaded.elf")
    write_debug_image(mod, elf)
    out = subprocess.run([CROSS + "addr2line", "-a", "-i", "-e", elf] + [hex(a) for a in addrs],
                         capture_output=True, text=True, check=True).stdout
    ref, cur = {}, None
    for ln in out.splitlines():
        if ln.startswith("0x"):
            cur = ref.setdefault(int(ln, 16), [])
        else:
            cur.append(ln)
    return ref


def decode_line(ln, modules=()):
    from armload.emu.booted.decode import _Decoder
    return _Decoder({m.name: m for m in modules}, None).line(ln)


def test_null_dereference_names_its_source_line(run):
    r, lines = decoded(run, sample("nullderef-arm-debug.ko"))
    want = src_line("nullderef", "v = *(volatile int *)nullderef_ptr;")
    pc = next(ln for ln in lines if "PC is at " in ln)
    assert pc.endswith(f"PC is at nullderef_init (./sample_modules/src/nullderef/nullderef.c:{want}) nullderef")
    assert pc.startswith("[") and "+0x" not in pc          # decode_stacktrace.sh drops the offset it decoded
    oops = r.oops.splitlines()
    code = next(i for i, ln in enumerate(lines) if "Code: " in ln)
    assert lines[:code] == [decode_line(ln, run.session.modules) for ln in oops[:code]]      # in order
    assert len(oops[code + 1:]) == 1
    words = r.oops.split("Code: ")[1].splitlines()[0].split()
    assert lines[code].endswith("Code: " + " ".join(words))                     # decodecode echoes it
    assert lines[code + 1:code + 3] == ["All code", "========"]
    trap = next(ln for ln in lines if ln.endswith("<-- trapping instruction"))
    fault = words[-1].strip("()")
    assert f":*\t{fault} \tldr\t" in trap                                     # the load through NULL
    assert lines[-4:-1] == ["Code starting with the faulting instruction", "=" * 43, f"   0:\t{fault} \t"
                            + trap.split(f"{fault} \t", 1)[1].split("\t\t<--")[0]]
    assert lines[-1] == oops[-1]


def test_frames_and_inlined_callers_equal_binutils_addr2line(run, tmp_path, binutils):
    """PC, LR and every backtrace frame of devkit's crash (two calls deep, spin_lock inlined)."""
    from armload.emu.booted.decode import _Decoder
    r, lines = decoded(run, sample("devkit-arm-debug.ko"), "crash=1")
    mod = next(m for m in run.session.modules if m.name == "devkit")
    assert next(ln for ln in lines if "PC is at " in ln).endswith(
        f"PC is at devkit_peek (./sample_modules/src/devkit/devkit.c:{devkit_line('return *p + 1;')}) devkit")
    syms = {s.name: s.addr for s in mod.symbols}
    sites = {"devkit_peek": 8, "devkit_crash": 0x24}          # PC is at ..., LR is at / from devkit_crash+0x24
    ref = binutils_a2l(mod, [syms[n] + o for n, o in sites.items()], tmp_path)
    lr = next(ln for ln in lines if "LR is at " in ln)
    want = " ".join(ref[syms["devkit_crash"] + 0x24])
    assert lr.endswith(f"LR is at devkit_crash ({want}) devkit")
    assert len(ref[syms["devkit_crash"] + 0x24]) > 1 and "spinlock.h" in want     # inlined spin_unlock
    frame = next(ln for ln in lines if "devkit_peek [devkit] from " in ln)
    assert frame.endswith(f"devkit_peek [devkit] from devkit_crash ({want}) devkit")
    kernel = next(ln for ln in lines if "devkit_crash [devkit] from " in ln)
    assert kernel.endswith("from do_one_initcall+0x50/0x214 (no file:line: no -dbg vmlinux given) ")


@pytest.mark.parametrize("ko", ["devkit-arm-debug.ko", "nullderef-arm-debug.ko", "walkthrough/ringdev-arm-debug.ko"])
def test_addr2line_equals_binutils_on_every_text_address(ko, tmp_path, binutils):
    """Every word of .text/.init.text/.exit.text at a kernel-like load address: lines, inlined
    call sites, discriminators, paths exactly as binutils prints them."""
    from armload.emu.debuginfo import module_addr2line
    from armload.loader.session import Session
    mod = Session(Kernel.from_files([DEBIAN_SYMVERS], DEBIAN_ARMMP), DEBIAN_ARMMP).load(sample(ko))
    addrs = [a for s in mod.sections if s.name in (".text", ".init.text", ".exit.text")
             for a in range(s.addr, s.addr + s.size, 4)]
    ref = binutils_a2l(mod, addrs, tmp_path)
    a2l = module_addr2line(mod)
    ours = {a: [str(x) for x in a2l.lookup(a)] or ["??:0"] for a in addrs}
    assert ours == ref
    if "ringdev" in ko:
        assert sum(len(v) > 1 for v in ours.values()) > 100      # inlined frames were compared


def test_line_format_is_decode_stacktrace_sh(run):
    """handle_line's rules on the kernel's shapes: timestamp re-padded, [<addr>] dropped, the last
    symbol decoded, the module name unbracketed; other lines as they are."""
    from armload.emu.booted.decode import decode
    run.load(sample("devkit-arm-debug.ko"))
    mod = next(m for m in run.session.modules if m.name == "devkit")
    peek = devkit_line("return *p + 1;")
    got = decode("[    1.5] x [<bf000224>] devkit_peek+0x8/0x14 [devkit]\n"
                 "[ 12.000001]  devkit_peek [devkit] from devkit_peek+0x8/0x14 [devkit]\n"
                 "Modules linked in: devkit(OE+)\n"
                 "pc : [<bf000224>]    lr : [<bf000254>]    psr: 60000013\n"
                 "no_such_fn+0x0/0x4 [devkit]\n"
                 "x from printk+0x0/0x4 [other]", [mod])
    loc = f"(./sample_modules/src/devkit/devkit.c:{peek})"
    assert got == [f"[         1.5] x devkit_peek {loc} devkit",
                   f"[   12.000001] devkit_peek [devkit] from devkit_peek {loc} devkit",
                   "Modules linked in: devkit(OE+)",
                   "pc : lr : psr: 60000013 ",
                   "no_such_fn+0x0/0x4 (no file:line: no_such_fn is not a function of devkit) devkit",
                   "x from printk+0x0/0x4 (no file:line: other is not a module armload loaded) other"]


def test_stripped_module_frame_says_it_has_no_debug_info(run):
    _, lines = decoded(run, sample("nullderef-arm.ko"))
    pc = next(ln for ln in lines if "PC is at " in ln)
    assert "PC is at nullderef_init+0x" in pc and "has no .debug_line (a --strip-debug'ged build)) nullderef" in pc


def test_run_prints_and_json_carries_the_decoded_oops(booted_dir):
    args = [sys.executable, "-m", "armload", "run", sample("nullderef-arm-debug.ko"),
            "--kernel", SYMVERS, "--kernel", BOOT_VMLINUZ]
    want = f"nullderef.c:{src_line('nullderef', 'v = *(volatile int *)nullderef_ptr;')})"
    out = subprocess.run(args, capture_output=True, text=True, cwd=ROOT).stdout
    head = out.index("decode_stacktrace.sh decodes it")
    assert want in out[head:] and want not in out[:head]       # after the kernel's own report
    d = json.loads(subprocess.run(args + ["--json"], capture_output=True, text=True, cwd=ROOT).stdout)
    assert any(want in ln for ln in d["modules"][0]["decoded"])


def test_check_where_names_the_line(booted_dir, tmp_path):
    import shutil
    shutil.copy(sample("nullderef-arm-debug.ko"), tmp_path / "nullderef.ko")
    subprocess.run([sys.executable, "-m", "armload", "check", str(tmp_path), "--kernel", SYMVERS, "-q",
                    "--kernel", BOOT_VMLINUZ, "--json", str(tmp_path / "c.json")],
                   capture_output=True, text=True, cwd=ROOT)
    rec = json.load(open(tmp_path / "c.json"))["modules"][0]
    line = src_line("nullderef", "v = *(volatile int *)nullderef_ptr;")
    assert rec["where"].startswith("nullderef_init+0x") and rec["where"].endswith(f"nullderef.c:{line})"), rec


@pytest.mark.skipif(not os.path.exists(VMLINUX_DBG), reason=f"no {VMLINUX_DBG}: `make vmlinux-dbg` fetches it "
                    "(620 MB, on request only)")
def test_kernel_frames_from_the_dbg_vmlinux(run, binutils):
    from armload.emu.booted.decode import decode
    r = run.load(sample("nullderef-arm-debug.ko"))
    lines = decode(r.oops, run.session.modules, VMLINUX_DBG)
    k = Kernel.from_files([VMLINUX_DBG], DEBIAN_ARMMP)
    assert k.vmlinux_debug == VMLINUX_DBG
    addr = k.symbols["do_one_initcall"].addr + 0x50
    ref = subprocess.run([CROSS + "addr2line", "-i", "-e", VMLINUX_DBG, hex(addr)], capture_output=True,
                         text=True, check=True).stdout.split("\n")[0]
    base, _, rel = ref.rpartition("/init/")               # the build directory decode_stacktrace.sh strips
    assert base and rel.startswith("main.c:")
    frame = next(ln for ln in lines if " from do_one_initcall" in ln)
    assert frame.endswith(f"nullderef_init [nullderef] from do_one_initcall (init/{rel}) ")
    assert next(ln for ln in lines if " from do_init_module" in ln).endswith("(kernel/module/main.c:2479) ")


def test_the_result_carries_the_decoded_oops_of_a_load_and_of_a_call(run):
    from armload.emu.booted.call import call
    r = run.load(sample("nullderef-arm-debug.ko"))
    want = src_line("nullderef", "v = *(volatile int *)nullderef_ptr;")
    assert any(f"nullderef.c:{want}) nullderef" in ln for ln in r.decoded) and r.to_dict()["decoded"] == r.decoded
    from armload.emu.booted.modrun import BootedRun
    run2 = BootedRun(BOOT_VMLINUZ, Kernel.from_files([SYMVERS, BOOT_VMLINUZ], DEBIAN_ARMMP), DEBIAN_ARMMP)
    assert run2.load(sample("devkit-arm-debug.ko")).ok
    c = call(run2, "devkit_crash")
    assert c.status == "oops"
    assert next(ln for ln in c.decoded if "PC is at " in ln).endswith(
        f"PC is at devkit_peek (./sample_modules/src/devkit/devkit.c:{devkit_line('return *p + 1;')}) devkit")
    ok = run2.load(sample("hello-arm.ko"))
    assert ok.decoded == [] and not ok.oops


def test_code_line_without_the_cross_binutils_says_so(monkeypatch):
    from armload.emu.booted import decode as d
    monkeypatch.setattr(d, "CROSS", "no-such-cross-")
    line = "[    1.2] Code: e8bd4010 (e5900000)"
    assert d.decode(line) == [line.strip() + "  (not disassembled: scripts/decodecode needs no-such-cross-as/strip/objdump)"]


def test_thumb_code_halfwords_are_disassembled_as_thumb(binutils):
    from armload.emu.booted.decode import decodecode
    out = decodecode("Code: 4770 bf00 (6800) 4770")      # bx lr; nop; (ldr r0, [r0]); bx lr
    assert out[0] == "Code: 4770 bf00 (6800) 4770"
    assert any(ln.endswith("<-- trapping instruction") and "ldr\tr0, [r0" in ln and ":*" in ln for ln in out)
    assert out[out.index("Code starting with the faulting instruction") + 2].split("\t")[2] == "ldr"
