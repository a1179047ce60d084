"""Failure paths of the branch verifier: every branch kind, corrupted alone in a freshly loaded
module, must be reported at its site and nowhere else.

The fixtures are assembled with GNU as (arm-linux-gnueabihf-as, installed by `make toolchain`) and
loaded by armload itself, so the branch rows are the loader's own; each test loads its own copy
(window placement: kernel calls are direct; vmalloc: every kernel call goes through a veneer).
"""
import struct
import subprocess

import pytest

from armload.kernel.config import KernelConfig
from armload.kernel.provider import Kernel
from armload.loader.session import Session
from armload.loader.verify import verify_module

CONDS = ["eq", "ne", "cs", "cc", "mi", "pl", "vs", "vc", "hi", "ls", "ge", "lt", "gt", "le"]
ARM_SRC = """
	.syntax unified
	.arch	armv7-a
	.text
	.arm
	.global	init_module
	.type	init_module, %function
init_module:
	push	{r4, lr}
	bl	ext_call
	bl	helper
	b	ext_tail
""" + "".join(f"\tb{c}\text_{c}\n" for c in CONDS) + """
	bleq	ext_bleq
	bne	helper
	bl	arm_label
	pop	{r4, pc}
	.size	init_module, . - init_module
	.global	arm_label
arm_label:
	bx	lr
	.global	helper
	.type	helper, %function
helper:
	mov	r0, #0
	bx	lr
	.size	helper, . - helper
"""
THUMB_SRC = """
	.syntax unified
	.arch	armv7-a
	.thumb
	.text
	.global	init_module
	.type	init_module, %function
	.thumb_func
init_module:
	push	{r4, lr}
	bl	ext_call
	bl	helper
	it	eq
	beq.w	ext_eq
	bl	thumb_label
	b.w	ext_tail
	.size	init_module, . - init_module
	.global	thumb_label
thumb_label:
	bx	lr
	.global	helper
	.type	helper, %function
	.thumb_func
helper:
	movs	r0, #0
	bx	lr
	.size	helper, . - helper
"""
COND_CODE = {c: i for i, c in enumerate(CONDS)}
# Branches to non-function labels: the kernel checks no state for them (ARM: st_value & 3 == 0;
# Thumb: not STT_FUNC), so a BL into code of the other instruction set loads fine and is broken.
MIXED_ARM_SRC = """
	.syntax unified
	.arch	armv7-a
	.text
	.arm
	.global	init_module
	.type	init_module, %function
init_module:
	bl	other_label
	bl	thumb_label
	bx	lr
	.section .text.other, "ax", %progbits
	.arm
	.global	other_label
other_label:
	bx	lr
	.section .text.thumb, "ax", %progbits
	.thumb
	.global	thumb_label
thumb_label:
	bx	lr
"""
MIXED_THUMB_SRC = """
	.syntax unified
	.arch	armv7-a
	.text
	.thumb
	.global	init_module
	.type	init_module, %function
	.thumb_func
init_module:
	bl	other_label
	bl	arm_label
	bx	lr
	.section .text.other, "ax", %progbits
	.thumb
	.global	other_label
other_label:
	bx	lr
	.section .text.arm, "ax", %progbits
	.arm
	.global	arm_label
arm_label:
	bx	lr
"""


ISA_SRC = """
	.syntax unified
	.arch	armv7-a
	.text
	.thumb
	.global	init_module
	.type	init_module, %function
	.thumb_func
init_module:
	bl	arm_here
	bx	lr
	nop			@ 8 bytes of Thumb code: no $d padding before $a
	.arm
	.global	arm_here
arm_here:
	bx	lr
"""


@pytest.fixture(scope="module")
def objects(tmp_path_factory, binutils):
    d = tmp_path_factory.mktemp("verify")
    out = {}
    for name, src in (("arm", ARM_SRC), ("thumb", THUMB_SRC), ("mixed-arm", MIXED_ARM_SRC),
                      ("mixed-thumb", MIXED_THUMB_SRC), ("isa", ISA_SRC)):
        (d / f"{name}.S").write_text(src)
        r = subprocess.run([binutils + "as", "-march=armv7-a", "-o", str(d / f"{name}.o"), str(d / f"{name}.S")],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        out[name] = str(d / f"{name}.o")
    return out


def load(objects, thumb, placement, kernel=None):
    """A fresh module that verifies cleanly before the test corrupts it."""
    cfg = KernelConfig(thumb2=thumb)
    mod = Session(kernel or Kernel.builtin(cfg), cfg, placement).load(objects["thumb" if thumb else "arm"], object=True)
    r = verify_module(mod)
    assert r.ok and r.branches_ok == r.branches_total == len(mod.branches) > 0, r.format()
    return mod


def row(mod, symbol, rtype=None):
    rows = [b for b in mod.branches if mod.sym_names[int(b["sym"])] == symbol
            and (rtype is None or int(b["rtype"]) == rtype)]
    assert len(rows) == 1, (symbol, rtype, rows)
    return rows[0]


def peek(mod, addr):
    return struct.unpack("<I", mod.read(addr, 4))[0]


def poke(mod, addr, value):
    r = mod.region_of(addr)
    struct.pack_into("<I", r.data, addr - r.base, value & 0xFFFFFFFF)


def only_failure(mod, site, **want):
    """Exactly one branch failure, at `site`, and no PLT failure."""
    r = verify_module(mod)
    assert not r.ok
    assert [f.site for f in r.branch_failures] == [site], r.format()
    assert r.plt_failures == [], r.format()
    assert r.branches_ok == r.branches_total - 1
    assert r.summary().startswith(f"branches verified: {r.branches_total - 1}/{r.branches_total}")
    f = r.branch_failures[0]
    for k, v in want.items():
        assert getattr(f, k) == v, (k, getattr(f, k), v, f.format())
    return f


def bump_arm(mod, place):
    """imm24 + 1: the branch now goes 4 bytes further."""
    w = peek(mod, place)
    poke(mod, place, (w & 0xFF000000) | ((w + 1) & 0x00FFFFFF))


def bump_thumb(mod, place):
    """imm11 + 1 (no carry into J1/J2 for these fixtures): 2 bytes further."""
    w = peek(mod, place)
    assert (w >> 16) & 0x7FF != 0x7FF
    poke(mod, place, w + (1 << 16))


# --- ARM: direct branches -----------------------------------------------------------------------
@pytest.mark.parametrize("placement", ["window", "vmalloc"])
@pytest.mark.parametrize("rtype", [28, 29], ids=["bl-helper", "bne-helper"])
def test_arm_local_branch_corrupted(objects, placement, rtype):
    mod = load(objects, False, placement)
    b = row(mod, "helper", rtype)
    assert int(b["plt"]) == 0
    bump_arm(mod, int(b["place"]))
    f = only_failure(mod, int(b["place"]), via_plt=0, symbol="helper")
    assert f.expected == int(b["target"]) and f.actual == int(b["target"]) + 4


@pytest.mark.parametrize("symbol", ["ext_call", "ext_tail"])
def test_arm_direct_kernel_branch_corrupted(objects, symbol):
    mod = load(objects, False, "window")
    b = row(mod, symbol)
    assert int(b["plt"]) == 0                            # the module window reaches the kernel
    bump_arm(mod, int(b["place"]))
    f = only_failure(mod, int(b["place"]), via_plt=0)
    assert f.actual == int(b["target"]) + 4


@pytest.mark.parametrize("cond", CONDS + ["bleq"])
def test_arm_conditional_branch_corrupted(objects, cond):
    """The verifier must make each condition pass; a branch it never takes looks fine."""
    mod = load(objects, False, "window")
    b = row(mod, f"ext_{cond}")
    place = int(b["place"])
    assert peek(mod, place) >> 28 == COND_CODE.get(cond, 0)
    bump_arm(mod, place)
    f = only_failure(mod, place, via_plt=0)
    assert f.actual == int(b["target"]) + 4


@pytest.mark.parametrize("cond", CONDS + ["bleq", "tail", "call"])
def test_arm_veneer_routed_branch_corrupted(objects, cond):
    """A branch through a PLT veneer that no longer reaches its slot (it lands on the next one,
    a valid `ldr pc`, which goes to another kernel function)."""
    mod = load(objects, False, "vmalloc")
    b = row(mod, f"ext_{cond}")
    place, slot = int(b["place"]), int(b["plt"])
    assert slot
    bump_arm(mod, place)
    f = only_failure(mod, place, via_plt=slot, reason="did not reach its PLT slot")
    assert f.actual == slot + 4
    nxt = [e for e in mod.plt_entries if e.addr == slot + 4]
    plt = next(s for s in mod.sections if s.name == ".plt")
    assert f.actual_sym == (f"plt: {nxt[0].symbol}" if nxt else f".plt+{slot + 4 - plt.addr:#x}")


def test_arm_bl_turned_into_blx_is_wrong_instruction_set(objects):
    mod = load(objects, False, "window")
    b = row(mod, "helper", 28)
    place = int(b["place"])
    poke(mod, place, (peek(mod, place) & 0x00FFFFFF) | 0xFA000000)      # BLX imm: same address, Thumb
    f = only_failure(mod, place, reason="right address, wrong instruction set")
    assert f.actual == int(b["target"]) | 1


# --- PLT entries (veneers) ----------------------------------------------------------------------
def _entry(mod, symbol):
    e = [e for e in mod.plt_entries if e.symbol == symbol]
    assert len(e) == 1
    return e[0]


@pytest.mark.parametrize("thumb", [False, True])
def test_plt_literal_corrupted(objects, thumb):
    mod = load(objects, thumb, "vmalloc")
    e = _entry(mod, "ext_call")
    poke(mod, e.addr + mod.config.plt_stride, e.target + 0x40)
    r = verify_module(mod)
    assert [p.slot for p in r.plt_failures] == [e.addr]
    assert r.plt_failures[0].actual & ~1 == (e.target & ~1) + 0x40
    b = row(mod, "ext_call")
    assert [f.site for f in r.branch_failures] == [int(b["place"])]
    assert r.branch_failures[0].via_plt == e.addr
    assert r.summary() == (f"branches verified: {r.branches_total - 1}/{r.branches_total}, "
                           f"PLT entries verified: {r.plt_total - 1}/{r.plt_total}")


@pytest.mark.parametrize("thumb", [False, True])
def test_plt_ldr_corrupted(objects, thumb):
    """The veneer's `ldr pc, [pc, #off]` reading the neighbouring literal."""
    mod = load(objects, thumb, "vmalloc")
    e = _entry(mod, "ext_tail")
    w = peek(mod, e.addr)
    assert w == mod.config.plt_ldr
    poke(mod, e.addr, w + ((4 << 16) if thumb else 4))                   # imm12 + 4
    r = verify_module(mod)
    assert [p.slot for p in r.plt_failures] == [e.addr]
    assert [f.site for f in r.branch_failures] == [int(row(mod, "ext_tail")["place"])]


@pytest.mark.parametrize("thumb", [False, True])
def test_plt_literal_wrong_instruction_set(objects, thumb):
    """Bit 0 of the literal selects the state: flipping it must be caught (ARM kernel: Thumb
    state at an ARM function; Thumb kernel: ARM state at a Thumb function)."""
    mod = load(objects, thumb, "vmalloc")
    e = _entry(mod, "ext_call")
    poke(mod, e.addr + mod.config.plt_stride, e.target ^ 1)
    r = verify_module(mod)
    assert [p.slot for p in r.plt_failures] == [e.addr]
    bf = r.branch_failures
    assert [f.site for f in bf] == [int(row(mod, "ext_call")["place"])]
    assert bf[0].reason == "right address, wrong instruction set"


# --- Thumb-2 ------------------------------------------------------------------------------------
@pytest.mark.parametrize("placement", ["window", "vmalloc"])
@pytest.mark.parametrize("symbol", ["ext_call", "helper", "ext_eq", "ext_tail"],
                         ids=["bl-kernel", "bl-local", "it-beq.w", "b.w"])
def test_thumb_branch_corrupted(objects, placement, symbol):
    mod = load(objects, True, placement)
    b = row(mod, symbol)
    place, slot = int(b["place"]), int(b["plt"])
    bump_thumb(mod, place)
    if slot:
        f = only_failure(mod, place, via_plt=slot, reason="did not reach its PLT slot")
        assert f.actual == (slot + 2) | 1
    else:
        f = only_failure(mod, place, via_plt=0)
        assert f.actual == (int(b["target"]) + 2) | 1


def test_thumb_bl_turned_into_blx_is_wrong_instruction_set(objects):
    mod = load(objects, True, "window")
    b = row(mod, "helper")
    place = int(b["place"])
    w = peek(mod, place)
    poke(mod, place, w & ~(1 << 28) & ~(1 << 16))       # lower half: bit 12 (BL) and H clear = BLX
    f = only_failure(mod, place)
    assert f.actual is not None and not f.actual & 1     # arrived in ARM state


# --- what the report says -----------------------------------------------------------------------
def test_report_text_and_json_for_a_corrupted_veneer(objects):
    mod = load(objects, False, "vmalloc")
    e, b = _entry(mod, "ext_call"), row(mod, "ext_call")
    place = int(b["place"])
    poke(mod, e.addr + mod.config.plt_stride, e.target + 0x40)
    r = verify_module(mod)
    n, m = r.branches_total, r.plt_total
    assert r.via_plt == int((mod.branches["plt"] != 0).sum()) == 17
    landed = [n for n, rs in mod.resolved.items() if rs.addr == e.target + 0x40]     # another kernel function
    assert len(landed) == 1
    want_b = (f"{place:#010x} {mod.symbolize(place)}: R_ARM_CALL ext_call via PLT {e.addr:#010x}: "
              f"expected {e.target:#010x} (ARM), actual {e.target + 0x40:#010x} (ARM) <{landed[0]}>")
    want_p = (f"PLT slot {e.addr:#010x} (ext_call): expected {e.target:#010x} (ARM), "
              f"actual {e.target + 0x40:#010x} (ARM)")
    assert r.branch_failures[0].format() == want_b
    assert r.plt_failures[0].format() == want_p
    assert r.format().splitlines() == [
        f"{mod.name}: branches verified: {n - 1}/{n}, PLT entries verified: {m - 1}/{m} (17 branches through PLT veneers)",
        "  FAIL " + want_b, "  FAIL " + want_p]
    d = r.to_dict()
    assert d == {"module": mod.name, "ok": False, "branches_total": n, "branches_verified": n - 1, "plt_total": m,
                 "plt_verified": m - 1, "branches_via_plt": 17, "elapsed": d["elapsed"],
                 "branch_failures": [{"site": place, "site_sym": mod.symbolize(place), "rtype": "R_ARM_CALL",
                                      "symbol": "ext_call", "expected": e.target, "actual": e.target + 0x40,
                                      "via_plt": e.addr, "reason": "", "actual_sym": landed[0]}],
                 "plt_failures": [{"slot": e.addr, "symbol": "ext_call", "expected": e.target,
                                   "actual": e.target + 0x40, "reason": ""}]}


def test_report_names_where_a_local_branch_went(objects):
    mod = load(objects, False, "window")
    b = row(mod, "helper", 28)
    place, target = int(b["place"]), int(b["target"])
    bump_arm(mod, place)
    f = only_failure(mod, place)
    assert f.actual_sym == mod.symbolize(target + 4) and f.actual_sym.startswith("helper+0x4/")
    assert f.format() == (f"{place:#010x} {mod.symbolize(place)}: R_ARM_CALL helper: expected {target:#010x} (ARM), "
                          f"actual {target + 4:#010x} (ARM) <{f.actual_sym}>")
    clean = verify_module(load(objects, False, "window"))
    assert clean.format() == f"{mod.name}: {clean.summary()}" and clean.to_dict()["ok"] is True


def test_report_for_a_site_that_no_longer_branches(objects):
    mod = load(objects, True, "window")
    b = row(mod, "helper")
    place = int(b["place"])
    poke(mod, place, 0xDEFEDEFE)                          # two Thumb `udf #254`: no branch at all
    f = only_failure(mod, place, actual=None)
    assert "UC_ERR_INSN_INVALID" in f.reason and "(Thumb), actual nowhere — " in f.format()
    mod = load(objects, False, "window")
    b = row(mod, "helper", 28)
    place = int(b["place"])
    poke(mod, place, 0xE7F000F0)                          # ARM udf: the CPU faults
    f = only_failure(mod, place, actual=None)
    assert f.reason and "nowhere" in f.format() and f.format().endswith(" — " + f.reason)
    assert f.expected == int(b["target"]) and "(ARM), actual nowhere" in f.format()


def test_thumb_report_marks_the_state(objects):
    mod = load(objects, True, "window")
    b = row(mod, "helper")
    place, target = int(b["place"]), int(b["target"])
    bump_thumb(mod, place)
    f = only_failure(mod, place)
    assert f.expected == target | 1
    assert f"expected {target & ~1:#010x} (Thumb), actual {(target & ~1) + 2:#010x} (Thumb)" in f.format()
    assert f.rtype == "R_ARM_THM_CALL"


def test_report_names_kernel_symbols_when_given_the_kernel(objects):
    kernel = Kernel.builtin(KernelConfig())
    mod = load(objects, False, "window", kernel)
    b = row(mod, "ext_call")
    place, target = int(b["place"]), int(b["target"])
    bump_arm(mod, place)
    assert verify_module(mod).branch_failures[0].actual_sym == ""             # no kernel: no name
    f = verify_module(mod, kernel).branch_failures[0]
    assert f.actual_sym == kernel.symbolize(target + 4) and f.actual_sym


@pytest.mark.parametrize("thumb,label", [(False, "arm_label"), (True, "thumb_label")])
def test_state_of_a_non_function_target_comes_from_mapping_symbols(objects, thumb, label):
    """A branch to a label that is not STT_FUNC carries no state bit: $a/$t decide (so a Thumb
    label reached in ARM state, or the reverse, is a failure)."""
    mod = load(objects, thumb, "window")
    b = row(mod, label)
    target = int(b["target"])
    assert not target & 1
    place = int(b["place"])
    if thumb:
        bump_thumb(mod, place)
        f = only_failure(mod, place)
        assert f.expected == target | 1 and f.actual == (target + 2) | 1
    else:
        bump_arm(mod, place)
        f = only_failure(mod, place)
        assert f.expected == target and f.actual == target + 4


def test_site_outside_the_image_is_a_failure(objects):
    mod = load(objects, False, "window")
    i = next(i for i, b in enumerate(mod.branches) if mod.sym_names[int(b["sym"])] == "helper")
    mod.branches["place"][i] = 0x10000000                   # bookkeeping pointing outside module memory
    r = verify_module(mod)
    assert [f.to_dict() for f in r.branch_failures] == [
        {"site": 0x10000000, "site_sym": "", "rtype": "R_ARM_CALL", "symbol": "helper",
         "expected": int(mod.branches["target"][i]), "actual": None, "via_plt": 0,
         "reason": "site outside the module image", "actual_sym": ""}]
    # the other sites are still checked after it
    j = next(j for j, b in enumerate(mod.branches) if mod.sym_names[int(b["sym"])] == "ext_le")
    bump_arm(mod, int(mod.branches["place"][j]))
    r = verify_module(mod)
    assert [f.site for f in r.branch_failures] == [0x10000000, int(mod.branches["place"][j])]
    mod.branches["sym"][j] = 999                           # a symbol index past the names
    assert verify_module(mod).branch_failures[1].symbol == "#999"


def test_failure_lines_one_by_one():
    from armload.loader.verify import BranchFailure, PltFailure, VerifyResult
    p1 = PltFailure(0xBF000040, None, 0xC0100001, None, "Invalid instruction")
    assert p1.format() == "PLT slot 0xbf000040 (?): expected 0xc0100000 (Thumb), actual nowhere — Invalid instruction"
    p2 = PltFailure(0xBF000044, "x", 0xC0100000, 0xC0100007)
    assert p2.format() == "PLT slot 0xbf000044 (x): expected 0xc0100000 (ARM), actual 0xc0100006 (Thumb)"
    assert p2.to_dict() == {"slot": 0xBF000044, "symbol": "x", "expected": 0xC0100000, "actual": 0xC0100007,
                            "reason": ""}
    b1 = BranchFailure(0xBF000004, "init+0x4/0x10", "R_ARM_CALL", "f", 0xBF000101, 0xBF000106, 0, "", "g+0x2/0x4")
    assert b1.format() == ("0xbf000004 init+0x4/0x10: R_ARM_CALL f: expected 0xbf000100 (Thumb), "
                           "actual 0xbf000106 (ARM) <g+0x2/0x4>")
    b2 = BranchFailure(0xBF000008, "s", "R_ARM_JUMP24", "h", 0xBF000100, None, 0xBF000200, "boom")
    assert b2.format() == ("0xbf000008 s: R_ARM_JUMP24 h via PLT 0xbf000200: expected 0xbf000100 (ARM), "
                           "actual nowhere — boom")
    b3 = BranchFailure(0xBF00000C, "s", "R_ARM_THM_CALL", "k", 0xBF000301, 0xBF000303, 0, "")
    assert b3.format() == "0xbf00000c s: R_ARM_THM_CALL k: expected 0xbf000300 (Thumb), actual 0xbf000302 (Thumb)"
    assert b2.to_dict() == {"site": 0xBF000008, "site_sym": "s", "rtype": "R_ARM_JUMP24", "symbol": "h",
                            "expected": 0xBF000100, "actual": None, "via_plt": 0xBF000200, "reason": "boom",
                            "actual_sym": ""}
    r = VerifyResult("m", 10, 8, 4, 2, [b1, b2], [p1, p2], 0.5, 3)
    assert not r.ok and r.summary() == "branches verified: 8/10, PLT entries verified: 2/4"
    assert r.format().splitlines() == ["m: branches verified: 8/10, PLT entries verified: 2/4 (3 branches through "
                                       "PLT veneers)", "  FAIL " + b1.format(), "  FAIL " + b2.format(),
                                       "  FAIL " + p1.format(), "  FAIL " + p2.format()]
    d = r.to_dict()
    assert d == {"module": "m", "ok": False, "branches_total": 10, "branches_verified": 8, "plt_total": 4,
                 "plt_verified": 2, "branches_via_plt": 3, "branch_failures": [b1.to_dict(), b2.to_dict()],
                 "plt_failures": [p1.to_dict(), p2.to_dict()], "elapsed": 0.5}
    assert VerifyResult("m", 1, 1, 0, 0).ok and VerifyResult("m", 1, 1, 0, 0, plt_failures=[p1]).ok is False
    assert VerifyResult("m", 1, 1, 0, 0).format() == "m: branches verified: 1/1, PLT entries verified: 0/0"


def test_site_that_faults_on_a_data_access_arrives_nowhere(objects):
    """A corrupted site that loads from unmapped memory: the faulting data address is not an
    arrival (only an instruction fetch outside the image is)."""
    mod = load(objects, False, "window")
    b = row(mod, "helper", 28)
    place = int(b["place"])
    poke(mod, place, 0xE5900000)                          # ldr r0, [r0]  (r0 = 0: unmapped)
    f = only_failure(mod, place, actual=None)
    assert "UNMAPPED" in f.reason


@pytest.mark.parametrize("thumb", [False, True])
def test_branch_into_code_of_the_other_instruction_set_is_reported(objects, thumb):
    """Mapping symbols ($a/$t) decide the state a non-function label expects, also at the very
    start of a section; a BL arrives in the caller's state, so only the mixed one fails."""
    cfg = KernelConfig(thumb2=thumb)
    mod = Session(Kernel.builtin(cfg), cfg, "window").load(objects["mixed-thumb" if thumb else "mixed-arm"], object=True)
    other = row(mod, "other_label")
    mixed = row(mod, "arm_label" if thumb else "thumb_label")
    sec = next(s for s in mod.sections if s.name == ".text.other")
    assert int(other["target"]) == sec.addr                  # the label opens its section
    r = verify_module(mod)
    assert [f.site for f in r.branch_failures] == [int(mixed["place"])], r.format()
    f = r.branch_failures[0]
    t = int(mixed["target"])
    assert f.reason == "right address, wrong instruction set"
    assert (f.expected, f.actual) == ((t, t | 1) if thumb else (t | 1, t))


@pytest.mark.parametrize("thumb", [False, True])
def test_veneer_redirected_to_another_kernel_function_is_named(objects, thumb):
    mod = load(objects, thumb, "vmalloc")
    e = _entry(mod, "ext_call")
    other = _entry(mod, "ext_tail")
    poke(mod, e.addr + mod.config.plt_stride, other.target)
    r = verify_module(mod)
    bf = [f for f in r.branch_failures if f.via_plt == e.addr]
    assert len(bf) == 1 and bf[0].actual == other.target and bf[0].actual_sym == "ext_tail"


def test_thumb_arrivals_are_named_without_the_state_bit(objects):
    kernel = Kernel.builtin(KernelConfig(thumb2=True))
    mod = load(objects, True, "window", kernel)
    b = row(mod, "ext_call")
    place, target = int(b["place"]), int(b["target"])
    bump_thumb(mod, place)
    f = verify_module(mod, kernel).branch_failures[0]
    assert f.actual == (target & ~1) + 2 | 1 and f.actual_sym == kernel.symbolize((target & ~1) + 2)
    mod = load(objects, True, "window")
    b = row(mod, "helper")
    place, target = int(b["place"]), int(b["target"])
    bump_thumb(mod, place)
    assert only_failure(mod, place).actual_sym == mod.symbolize((target & ~1) + 2)


def test_thumb_veneer_bumped_onto_the_next_slot_names_it(objects):
    mod = load(objects, True, "vmalloc")
    b = row(mod, "ext_call")
    place, slot = int(b["place"]), int(b["plt"])
    w = peek(mod, place)
    poke(mod, place, w + (2 << 16))                          # imm11 + 2: 4 bytes further, the next slot
    f = only_failure(mod, place, via_plt=slot)
    nxt = next(e for e in mod.plt_entries if e.addr == slot + 4)
    assert f.actual == (slot + 4) | 1 and f.actual_sym == f"plt: {nxt.symbol}"
    poke(mod, place, w + (1 << 16))                          # 2 bytes further: inside a slot
    f = only_failure(mod, place, via_plt=slot)
    plt = next(s for s in mod.sections if s.name == ".plt")
    assert f.actual_sym == f".plt+{slot + 2 - plt.addr:#x}"


# --- every field of a failure, several failures, a site outside the image -------------------------
def test_failure_fields_of_a_direct_and_a_veneer_routed_branch(objects):
    mod = load(objects, False, "vmalloc")
    local, ext = row(mod, "helper", 28), row(mod, "ext_call")
    lp, ep, slot = int(local["place"]), int(ext["place"]), int(ext["plt"])
    bump_arm(mod, lp)
    bump_arm(mod, ep)
    r = verify_module(mod)
    a, b = sorted(r.branch_failures, key=lambda f: f.site != lp)      # both reported, not just the first
    assert (a.site, a.site_sym, a.rtype, a.symbol, a.expected, a.actual, a.via_plt, a.reason) == (
        lp, mod.symbolize(lp), "R_ARM_CALL", "helper", int(local["target"]), int(local["target"]) + 4, 0, "")
    assert a.actual_sym == mod.symbolize(int(local["target"]) + 4) != ""
    assert (b.site, b.site_sym, b.rtype, b.symbol, b.expected, b.actual, b.via_plt, b.reason) == (
        ep, mod.symbolize(ep), "R_ARM_CALL", "ext_call", int(ext["target"]), slot + 4, slot,
        "did not reach its PLT slot")
    assert r.branches_ok == r.branches_total - 2 and 0 <= r.elapsed < 60


@pytest.mark.parametrize("cond", ["call", "tail", "eq"])
def test_every_corrupted_veneer_routed_branch_is_reported(objects, cond):
    """The PLT path's failure does not stop the walk: the branches after it are still checked."""
    mod = load(objects, False, "vmalloc")
    first, later = row(mod, f"ext_{cond}"), row(mod, "ext_bleq")
    bump_arm(mod, int(first["place"]))
    bump_arm(mod, int(later["place"]))
    r = verify_module(mod)
    assert sorted(f.site for f in r.branch_failures) == sorted([int(first["place"]), int(later["place"])])


def test_a_branch_row_outside_the_image_is_reported_not_raised(objects):
    mod = load(objects, False, "window")
    b = row(mod, "helper", 28)
    i = int(next(k for k in range(len(mod.branches)) if mod.branches[k]["place"] == b["place"]))
    mod.branches[i]["place"] = 0x1000              # nothing is mapped there
    r = verify_module(mod)
    f, = r.branch_failures
    assert (f.site, f.site_sym, f.rtype, f.symbol, f.expected, f.actual, f.reason) == (
        0x1000, "", "R_ARM_CALL", "helper", int(b["target"]), None, "site outside the module image")


def test_plt_failure_text_names_the_instruction_set_it_arrived_in(objects):
    mod = load(objects, False, "vmalloc")
    e = _entry(mod, "ext_call")
    poke(mod, e.addr + mod.config.plt_stride, e.target | 1)
    p, = verify_module(mod).plt_failures
    assert p.format() == (f"PLT slot {e.addr:#010x} (ext_call): expected {e.target:#010x} (ARM), "
                          f"actual {e.target:#010x} (Thumb)")




def test_mapping_symbol_of_the_same_section_decides_the_instruction_set(objects):
    """An ARM label after Thumb code in one section: $a there makes the target ARM, so the Thumb BL
    (the kernel checks no state for a non-function label) is reported as the wrong instruction set."""
    cfg = KernelConfig(thumb2=True)
    mod = Session(Kernel.builtin(cfg), cfg, "window").load(objects["isa"], object=True)
    assert [s.name for s in mod.symbols if s.name[:1] == "$"] == ["$t", "$a"]
    b = row(mod, "arm_here")
    f = only_failure(mod, int(b["place"]), reason="right address, wrong instruction set")
    assert f.expected == int(b["target"]) & ~1 and f.actual == f.expected | 1
