"""Branch-reach verification must pass on correct images and fail on corrupted ones."""
import pytest
from asm_module import build_module, corrupt_word, read_word

from armload.loader.verify import verify_module

EXTERNS = {"_printk": "func", "kmalloc": "func", "kfree": "func"}
ARM = {"init_module": """
    push {r4, lr}
    bl {plt:_printk}
    bl {kmalloc}
    bl {helper}
    cmp r0, #0
    bne {plt:kfree}
    b {plt:kfree}
""", "helper": "mov r0, #0\nbx lr"}
THUMB = {"init_module": """
    push {r4, lr}
    bl {plt:_printk}
    bl {kmalloc}
    bl {helper}
    b.w {plt:kfree}
""", "helper": "movs r0, #0\nbx lr"}


def _mod(thumb):
    return build_module(THUMB if thumb else ARM, externs=EXTERNS, thumb=thumb)


@pytest.mark.parametrize("thumb", [False, True])
def test_clean_image_verifies(thumb):
    mod, k = _mod(thumb)
    r = verify_module(mod, k)
    assert r.ok, r.format()
    assert r.branches_total == len(mod.branches) == (4 if thumb else 5)
    assert r.plt_total == 2 and r.plt_ok == 2
    assert r.summary() == f"branches verified: {r.branches_total}/{r.branches_total}, PLT entries verified: 2/2"


@pytest.mark.parametrize("thumb", [False, True])
def test_corrupted_plt_literal_is_caught(thumb):
    mod, k = _mod(thumb)
    e = mod.plt_entries[0]
    corrupt_word(mod, e.addr + mod.config.plt_stride, e.target + 0x40)
    r = verify_module(mod, k)
    assert not r.ok
    assert [f.slot for f in r.plt_failures] == [e.addr]
    assert r.plt_failures[0].actual & ~1 == (e.target & ~1) + 0x40
    # the branch that goes through that slot fails too, naming the site and the symbol
    bf = [f for f in r.branch_failures if f.symbol == e.symbol]
    assert bf and bf[0].via_plt == e.addr and "via PLT" in bf[0].format()
    assert "PLT entries verified: 1/2" in r.summary()


@pytest.mark.parametrize("thumb", [False, True])
def test_corrupted_branch_offset_is_caught(thumb):
    mod, k = _mod(thumb)
    row = next(b for b in mod.branches if not int(b["plt"]))
    place = int(row["place"])
    w = read_word(mod, place)
    corrupt_word(mod, place, w + ((1 << 16) if thumb else 1))   # imm + 1 (ARM: +4 bytes, Thumb: +2)
    r = verify_module(mod, k)
    assert len(r.branch_failures) == 1
    f = r.branch_failures[0]
    assert f.site == place and f.expected & ~1 == int(row["target"]) & ~1
    assert f.actual & ~1 == (int(row["target"]) & ~1) + (2 if thumb else 4)
    assert f"branches verified: {r.branches_total - 1}/{r.branches_total}" in r.summary()


def test_wrong_instruction_set_is_caught():
    # an ARM-kernel PLT literal with bit 0 set would switch to Thumb: the entry must fail
    mod, k = _mod(False)
    e = mod.plt_entries[1]
    corrupt_word(mod, e.addr + 64, e.target | 1)
    r = verify_module(mod, k)
    assert any(f.slot == e.addr for f in r.plt_failures)
    bf = [f for f in r.branch_failures if f.via_plt == e.addr]
    assert bf and "instruction set" in bf[0].reason


def test_conditional_branch_is_taken():
    mod, k = _mod(False)
    bne = [b for b in mod.branches if read_word(mod, int(b["place"])) >> 28 == 0x1]
    assert bne
    assert verify_module(mod, k).ok


# --- real samples -----------------------------------------------------------------------------
@pytest.mark.parametrize("placement", ["window", "vmalloc"])
@pytest.mark.parametrize("thumb", [False, True])
def test_samples_verify_and_corruption_fails(thumb, placement):
    from armload.loader import session as loader
    from armload.kernel.config import DEBIAN_ARMMP
    from testinputs import sample
    path = sample(f"regdev-{'thumb2' if thumb else 'arm'}.ko")
    from armload.kernel.provider import Kernel
    cfg = DEBIAN_ARMMP.with_(thumb2=thumb)
    # regdev's fops name noop_llseek, which nothing simulates: the loader-only check invents addresses
    mod = loader.Session(Kernel.builtin(cfg, simulate_all=True), cfg, placement).load(path)
    r = verify_module(mod)
    assert r.ok, r.format()
    assert r.branches_total == len(mod.branches) > 0
    if placement == "vmalloc":
        assert r.plt_total > 0 and r.via_plt > 0
        e = next(e for e in mod.plt_entries if not e.fixed)
        corrupt_word(mod, e.addr + cfg.plt_stride, e.target ^ 0x100)
        r2 = verify_module(mod)
        assert not r2.ok and [f.slot for f in r2.plt_failures] == [e.addr]
        mod = loader.Session(None, cfg, placement).load(path)     # fresh: no leftover corruption
        assert verify_module(mod).ok
    row = mod.branches[0]
    place = int(row["place"])
    corrupt_word(mod, place, read_word(mod, place) + ((1 << 16) if thumb else 1))
    r3 = verify_module(mod)
    assert [f.site for f in r3.branch_failures] == [place] and not r3.plt_failures


def test_verifying_in_a_loop_keeps_the_address_space_bounded():
    """Each verification's Uc stays reserved (35 MiB) until the cycle collector frees it (unicorn's
    binding keeps a closure over it): verify collects every VERIFY_GC_EVERY machines, so a check
    worker verifying a whole tree stays under its RLIMIT_AS."""
    from armload.loader import verify

    def vmsize() -> int:
        line = next(ln for ln in open("/proc/self/status") if ln.startswith("VmSize:"))
        return int(line.split()[1]) << 10
    from armload.kernel.config import DEBIAN_ARMMP
    from armload.kernel.provider import Kernel
    from armload.loader import session as loader
    from testinputs import sample
    mod = loader.Session(Kernel.builtin(DEBIAN_ARMMP, simulate_all=True), DEBIAN_ARMMP).load(sample("hello-arm.ko"))
    assert verify_module(mod).ok
    start = vmsize()
    peak = 0
    for _ in range(3 * verify.VERIFY_GC_EVERY):
        assert verify_module(mod).ok
        peak = max(peak, vmsize())
    assert peak - start < (verify.VERIFY_GC_EVERY + 4) * (40 << 20)
