"""The emulator on the real Debian 6.1 armmp kernel: the Image's facts, the sample modules running
the kernel's own code, and the unmodelled policy. Missing Debian inputs fail (never skip)."""
import os
import struct
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from conftest import sample  # noqa: E402
from emu_fixtures import DEBIAN_SYMVERS, DEBIAN_VMLINUZ, build_module, debian_kernel, kernel_externs  # noqa: E402

from armload.emu import Machine  # noqa: E402
from armload.kernel.image import _zimage_size_table, load_image, vote_load_address  # noqa: E402


@pytest.fixture(scope="module")
def kernel():
    return debian_kernel()


@pytest.fixture(scope="module")
def image(kernel):
    return load_image(DEBIAN_VMLINUZ)


# --- the Image --------------------------------------------------------------------------------
def test_load_address_two_ways_and_bss(image):
    with open(DEBIAN_VMLINUZ, "rb") as f:
        head = f.read(0x40000)
    base, bss = _zimage_size_table(head)
    assert (base, bss) == (0xC0208000, 0x5E4D4)
    assert vote_load_address(image.data, image.symbols) == 0xC0208000      # independent of the table
    assert (image.base, image.bss_size) == (0xC0208000, 0x5E4D4)
    # a third witness: the Image starts with head.S's `bl __hyp_stub_install` (capstone decodes it)
    from capstone import CS_ARCH_ARM, CS_MODE_ARM, Cs
    insn = next(Cs(CS_ARCH_ARM, CS_MODE_ARM).disasm(image.data[:4], image.base))
    assert insn.mnemonic == "bl" and int(insn.op_str[1:], 0) == image.symbols["__hyp_stub_install"]
    assert image.stext == image.symbols["_stext"] and image.base < image.stext < image.etext < image.end
    assert image.bss_end == image.end + 0x5E4D4 and image.notes == []
    # a wrong base would not find the prologues: the vote refuses a shifted image
    assert vote_load_address(image.data[0x1000:], image.symbols) != 0xC0208000


def test_hz_from_initial_jiffies(image):
    assert image.hz == 250
    lo, hi = struct.unpack_from("<II", image.data, image.exports["jiffies_64"] - image.base)
    assert (hi << 32 | lo) == (-300 * 250) & 0xFFFFFFFF        # INITIAL_JIFFIES is 32-bit on ARM


def test_every_vmlinux_export_is_in_the_ksymtab(image):
    names = []
    with open(DEBIAN_SYMVERS) as f:
        for line in f:
            crc, name, owner, etype = line.rstrip("\n").split("\t")[:4]
            if owner == "vmlinux":
                names.append(name)
    assert len(names) == len(set(names)) == 10_173
    missing = [n for n in names if n not in image.exports]
    assert missing == []
    both = [n for n in names if n in image.symbols]
    assert len(both) > 8_000                          # functions: kallsyms has text symbols
    assert [n for n in both if image.exports[n] != image.symbols[n]] == []
    # data exports get their addresses only from the __ksymtab: inside the Image or its .bss
    for n in ("jiffies", "jiffies_64", "system_wq", "loops_per_jiffy", "__cpu_online_mask"):
        assert image.contains(image.exports[n]) and n not in image.symbols
    assert image.exports["jiffies"] == image.exports["jiffies_64"]   # little-endian alias (linker script)


# --- the samples on the kernel's own code -------------------------------------------------------
def _load(kernel, name):
    from armload.loader import session as loader
    s = loader.Session(kernel, kernel.config, "window")
    return s.load(sample(f"{name}-arm.ko"))


def _classes_right(m, r):
    """Every call record's class is the call-class table's answer for that name."""
    assert r.calls
    for c in r.calls:
        assert c.cls == m.table.decide(c.name).cls, c.format()
        assert c.cls in ("real", "model"), c.format()


def test_hello_prints_through_the_real_printk(kernel):
    mod = _load(kernel, "hello")
    m = Machine(mod, kernel)
    assert m.image is not None and m.image.base == 0xC0208000
    r = m.run_init()
    assert (r.status, r.retval) == ("returned", 0), r.fault and r.fault.format()
    assert [(x.text, x.level) for x in m.log.records] == [("hello: loaded, answer=42, greeting=world", 6)]
    assert r.log == ["hello: loaded, answer=42, greeting=world"]
    # the module's calls run real code; _printk's own code reaches the vprintk_emit model. The mcount
    # call is not among them: ftrace_module_init made it the NOP `add sp, sp, #4` at load, as 6.1 does.
    assert [(c.name, c.cls) for c in r.calls] == [("_printk", "real"), ("vprintk_emit", "model")]
    assert r.calls[0].caller_sym.startswith("hello_init+") and r.calls[0].args[1] == 42
    assert not r.calls[1].caller_sym.endswith("[hello]")        # called by the kernel, not the module
    # vprintk_emit returns the stored record's length: no level prefix, no trailing newline
    assert r.calls[1].ret == len("hello: loaded, answer=42, greeting=world")
    _classes_right(m, r)
    assert r.instructions > 500                                 # printk's real code ran


def test_kalloc_on_the_image(kernel):
    mod = _load(kernel, "kalloc")
    m = Machine(mod, kernel)
    r = m.run_init()
    assert (r.status, r.retval) == ("returned", 0), r.fault and r.fault.format()
    assert r.log == ["kalloc: id=7 flags=0x5a name=kalloc-rec v3=3007 zeroed=0"]
    got = [(c.name, c.cls) for c in r.calls if c.caller_sym.endswith("[kalloc]")]
    assert ("kmalloc_trace", "model") in got and ("strscpy", "real") in got and ("kfree", "model") in got
    _classes_right(m, r)
    assert m.leaks() == []                       # boot objects (system workqueues) aside


def test_regdev_on_the_image(kernel):
    mod = _load(kernel, "regdev")
    m = Machine(mod, kernel)
    r = m.run_init()
    assert (r.status, r.retval) == ("returned", 0), r.fault and r.fault.format()
    assert r.log == ["regdev: registered misc minor 127"]
    assert [(x["call"], x["name"]) for x in r.registrations] == [("misc_register", "armload_regdev"),
                                                                 ("platform_driver_register", "armload-regdev")]
    assert r.registrations[0]["minor"] == 127
    _classes_right(m, r)
    e = m.run_exit()
    assert e.status == "returned", e.fault and e.fault.format()
    assert {c.name for c in e.calls} >= {"misc_deregister", "platform_driver_unregister"}


def test_enodev_and_initcore_and_tailcall_on_the_image(kernel):
    for name, ret, log in (("enodev", -19, ["enodev: no device found, giving up"]),
                           ("initcore", 0, ["initcore: checksum=78 mixed=2865785426"]),
                           ("tailcall", 0, [])):
        m = Machine(_load(kernel, name), kernel)
        r = m.run_init()
        assert (r.status, r.retval, r.log) == ("returned", ret, log), r.fault and r.fault.format()
        _classes_right(m, r)
    assert "ENODEV" in Machine(_load(kernel, "enodev"), kernel).run_init().summary()


def test_nullderef_on_the_image(kernel):
    r = Machine(_load(kernel, "nullderef"), kernel).run_init()
    assert r.status == "fault" and r.fault.kind == "null-deref"
    assert r.fault.access_addr == 0 and r.fault.access_type == "read" and not r.fault.in_kernel
    assert r.fault.pc_sym.startswith("nullderef_init+") and r.fault.pc_sym.endswith("[nullderef]")
    assert r.log == ["nullderef: about to read *NULL"]


def test_spin_budget_is_deterministic(kernel):
    mod = _load(kernel, "spin")
    runs = [Machine(mod, kernel, budget=300_000).run_init() for _ in range(2)]
    for r in runs:
        assert r.status == "budget" and r.fault.pc_sym.startswith("spin_init+")
        assert r.log == ["spin: spinning forever"]
        assert 299_000 < r.instructions <= 300_000
    assert runs[0].instructions == runs[1].instructions and runs[0].fault.pc == runs[1].fault.pc
    assert runs[0].sim_ns == runs[1].sim_ns == runs[0].instructions


# --- the unmodelled policy ----------------------------------------------------------------------
# errseq_check (lib/errseq.c) is exported, pure, has no model and is not in the real-code table.
ERRSEQ = """
    push {r4, lr}
    movw r0, #{lo:eseq}
    movt r0, #{hi:eseq}
    mov r1, #0
    bl {plt:errseq_check}
    pop {r4, pc}
"""


def _errseq_module(kernel):
    externs, addrs = kernel_externs(kernel, ["errseq_check"])
    # errseq_t: errno in the low 12 bits, then the SEEN flag; 5 = -EIO, never seen
    return build_module({"init_module": ERRSEQ}, data={"eseq": struct.pack("<I", 5)}, externs=externs,
                        extern_addrs=addrs, name="errseq")[0]


def test_unmodelled_fails_by_default(kernel):
    mod = _errseq_module(kernel)
    m = Machine(mod, kernel)
    assert m.table.decide("errseq_check").cls == "unmodelled"
    r = m.run_init()
    assert r.status == "unmodelled" and r.retval is None and r.fault.unmodelled == "errseq_check"
    assert r.fault.message == "unmodelled: errseq_check called from init_module+0x10/0x18 [errseq]"
    assert [(c.name, c.cls) for c in r.calls] == [("errseq_check", "unmodelled")]
    assert "stopped: unmodelled: errseq_check" in r.summary()


def test_unmodelled_zero_returns_zero_and_says_so(kernel):
    r = Machine(_errseq_module(kernel), kernel, unmodelled="zero").run_init()
    assert (r.status, r.retval) == ("returned", 0)
    assert [(c.name, c.cls, c.ret) for c in r.calls] == [("errseq_check", "unmodelled-zero", 0)]
    assert "--unmodelled zero" in r.calls[0].note


def test_unmodelled_real_runs_the_kernel_code(kernel):
    r = Machine(_errseq_module(kernel), kernel, unmodelled="real").run_init()
    # errseq_check: cur (5) != since (0): -(cur & MAX_ERRNO)
    assert (r.status, r.retval) == ("returned", -5), r.fault and r.fault.format()
    assert [(c.name, c.cls) for c in r.calls] == [("errseq_check", "unmodelled")]
    assert "ran the kernel's own code" in r.calls[0].note


def test_a_dependency_without_init_frees_its_init_memory_and_the_next_module_runs(kernel):
    """do_init_module with mod->init == NULL still makes the module live and frees its init memory:
    xor-neon (no init) must not stop xor, whose memory reuses that init allocation."""
    from armload.loader import session as loader
    tree = os.path.join(os.path.dirname(os.path.dirname(DEBIAN_VMLINUZ)), "lib/modules/6.1.0-50-armmp/kernel")
    s = loader.Session(kernel, kernel.config, "window")
    neon = s.load(os.path.join(tree, "arch/arm/lib/xor-neon.ko"))
    xor = s.load(os.path.join(tree, "crypto/xor.ko"))
    assert neon.init_addr is None
    m = Machine([neon, xor], kernel)
    assert m.run_init(neon).status == "no-function"
    r = m.run_init(xor)
    assert (r.status, r.retval) == ("returned", 0), r.fault and r.fault.format()
    assert any("xor: using function:" in line for line in r.log)
