"""The Debian kernel booted in Unicorn (armload/emu/booted): what the kernel itself says and
stores after its own boot, determinism of simulated time, waking from idle, calls into it, and
its own load_module. The boot is paid once per cache (the session fixture `booted_dir`)."""
import os
import struct

import pytest

from testinputs import BOOT_VMLINUZ, sample
from armload.emu.booted import snapshot
from armload.emu.booted.kernel import BootedKernel, CallError
from armload.emu.booted.modload import kernel_alloc_addresses, kernel_load, kernel_load_path, user_string
from armload.emu.booted.modmem import bl_sites
from armload.kernel.modtree import parse_modinfo
from armload.kernel import debian

SYSTEM_RUNNING = 3                   # include/linux/kernel.h: enum system_states
TREE = debian.MODULES


def test_boot_reached_user_space_handover(booted):
    lines = booted.console
    assert any(ln.endswith("printk: console [ttyAMA0] enabled") for ln in lines)
    assert any("Trying to unpack rootfs image as initramfs" in ln for ln in lines)
    assert any("Freeing unused kernel image (initmem) memory" in ln for ln in lines)   # free_initmem
    assert any("Checked W+X mappings: passed" in ln for ln in lines)                   # mark_readonly
    assert not any("Kernel panic" in ln or "Oops" in ln or "WARNING:" in ln for ln in lines)
    assert not any("alg: self-tests disabled" in ln for ln in lines)     # the crypto self-tests ran
    assert booted.u32("system_state") == SYSTEM_RUNNING
    # parked where run_init_process("/init") (the kernel's kernel_execve) returned 0 to kernel_init
    assert booted.console[-1].endswith("Run /init as init process")
    assert booted.m.reg("r0") == 0 and booted.m.reg("pc") - 4 in bl_sites(booted.image, booted.image.symbols["run_init_process"])
    # current (TPIDRURO on this config) is pid 1, not the idle task, and exec named it "init"
    cur = booted.m.uc.reg_read(__import__("unicorn").arm_const.UC_ARM_REG_C13_C0_3)
    assert cur != booted.image.exports["init_task"] and b"\0init\0" in booted.read(cur, 0x800)


def test_snapshot_is_keyed_and_sparse(booted_dir):
    assert os.path.basename(booted_dir) == os.path.basename(BootedKernel.snapshot_dir(
        debian.VMLINUZ))
    other = BootedKernel.snapshot_dir(debian.VMLINUZ, "console=ttyAMA0 quiet")
    assert os.path.basename(other) != os.path.basename(booted_dir)
    assert snapshot.disk_bytes(booted_dir) < 128 << 20       # 256 MiB of RAM, mostly holes


def test_restore_brings_back_the_hardware_state(booted):
    g, t = booted.m.hw.gic, booted.m.hw.timer
    assert g.dctlr == 1 and g.cctlr & 1 and g.enabled[27] and g.enabled[33]   # the kernel's GIC setup
    assert t.ctl[1] & 1 and t.cval[1] > t.counter(booted.now_ns())           # next tick armed
    assert booted.insns == booted.meta["boot_insns"] and booted.m.hw.irqs_taken > 100


def test_time_is_deterministic_and_jiffies_follow_instructions(booted_dir, booted):
    j = booted.image.exports["jiffies_64"]
    j0, n0, i0 = booted.u32(j), booted.now_ns(), booted.insns
    assert booted.call("msleep", 10, budget=50_000_000) == 0
    di, dj, dn = booted.insns - i0, booted.u32(j) - j0, booted.now_ns() - n0
    assert dn >= 10_000_000 and 3 <= dj <= 6                # HZ=250: msleep(10) sleeps 3 ticks + 1
    assert booted.m.hw.wfi_count > 0 and di * 20 < dn      # the CPU slept in WFI, not spinning
    again = BootedKernel.get(booted.meta["vmlinuz"], booted.meta["cmdline"])
    assert again.call("msleep", 10, budget=50_000_000) == 0
    assert (again.insns - i0, again.u32(j) - j0, again.now_ns() - n0) == (di, dj, dn)
    assert again.read(0xC0000000 + 0x208000, 64) == booted.read(0xC0000000 + 0x208000, 64)


def test_calls_memory_and_errors(booted):
    p = booted.kmalloc(100)
    assert 0xC0000000 <= p < 0xD0000000 and p % 64 == 0     # SLUB kmalloc-128, cache-line aligned
    v = booted.vmalloc(3 * 4096 + 1)
    assert 0xD0000000 <= v < 0xFF000000 and v % 4096 == 0   # vmalloc area, through page tables
    booted.write(v + 4090, b"across pages")
    assert booted.read(v + 4090, 12) == b"across pages"
    big = booted.vmalloc(6 << 20)           # new first-level sections: only in swapper_pg_dir so far
    booted.write(big + (6 << 20) - 8, b"lastword")
    assert booted.read(big + (6 << 20) - 8, 8) == b"lastword"
    assert booted.call("memchr", big + (6 << 20) - 8, ord("w"), 8) == big + (6 << 20) - 4   # the kernel sees it
    assert booted.call("strlen", p) == 0                    # init_on_alloc ("heap alloc:on"): zeroed
    booted.write(p, b"armload\0")
    assert booted.call("strlen", p) == 7
    booted.vfree(v)
    ua = user_string(booted, "x=1 y=two")                 # pid 1's user memory, faulted in by the kernel
    assert ua < 0xBF000000 and booted.call("strnlen_user", ua, 100) == 10
    with pytest.raises(CallError):
        booted.call("msleep", 1000, budget=10_000)           # the budget ends the call
    with pytest.raises(KeyError):
        booted.call("no_such_function")


def test_a_block_copy_across_into_an_unfaulted_user_page_faults_that_page_in(booted):
    """An STM whose first word is on a present page and whose last is on the next, not yet
    faulted-in page: the abort is the next page's (DFAR = its first address), the kernel's
    fault handler maps it and the copy completes (it used to be an external abort: an oops)."""
    ua = booted.call("vm_mmap", 0, 0, 0x2000, 3, 0x22, 0)
    kb = booted.kmalloc(64)
    booted.write(kb, bytes(range(64)))
    assert booted.call("_copy_to_user", ua, kb, 4) == 0                 # page 0 only
    assert booted.call("_copy_to_user", ua + 0xFF8, kb, 64, budget=5_000_000) == 0   # 8 bytes on page 0, 56 on 1
    assert booted.read(ua + 0xFF8, 64) == bytes(range(64))


def test_run_until_idle_runs_deferred_work(booted):
    r = booted.run_until_idle(1_000_000_000, quiet_ns=100_000_000)
    assert r["idle"] and 100_000_000 <= r["ns"] < 1_000_000_000
    r = booted.run_until_idle(50_000_000, quiet_ns=100_000_000)     # budget before quiet: not idle
    assert not r["idle"] and 50_000_000 <= r["ns"] < 70_000_000


def test_load_module_sample_returns_init_result(booted):
    with open(sample("hello-arm.ko"), "rb") as f:
        r = kernel_load(booted, f.read(), "answer=7", name="hello")
    assert r.ret == 0 and not r.oops_text and not r.stopped
    assert any("hello: loaded, answer=42, greeting=world" in ln for ln in r.console_lines)
    assert any("hello: unknown parameter 'answer' ignored" in ln for ln in r.console_lines)
    assert r.core_base == 0xBF000000 and len(r.core_bytes) == r.allocs[0].size
    assert r.init_base > r.core_base and len(r.init_bytes) == r.allocs[1].size
    _assert_ftrace_nops(booted, r, 1)                     # hello's one site is in .init.text


def _assert_ftrace_nops(booted, r, sites):
    """ftrace_module_init ran before init: no `bl __gnu_mcount_nc` is left in core or init
    memory; the kernel's ARM NOP, `add sp, sp, #4` (0xe28dd004: drops the `push {lr}` before
    it), stands at each of the module's __mcount_loc sites (not `pop {lr}`, the pre-4.x NOP)."""
    mcount = booted.image.address("__gnu_mcount_nc")
    nops = 0
    for base, mem in ((r.core_base, r.core_bytes), (r.init_base, r.init_bytes)):
        words = struct.unpack(f"<{len(mem) // 4}I", mem)
        nops += words.count(0xE28DD004)
        for i, w in enumerate(words):
            if w & 0xFF000000 == 0xEB000000:
                off = (w & 0xFFFFFF) - (0x1000000 if w & 0x800000 else 0)
                assert base + 4 * i + 8 + 4 * off != mcount, f"bl __gnu_mcount_nc left at {base + 4 * i:#x}"
    assert nops >= sites


def test_load_module_parameters_reach_the_module(booted):
    with open(sample("devkit-arm.ko"), "rb") as f:
        r = kernel_load(booted, f.read(), "verbose=1 label=abc count=3", name="devkit")
    assert r.ret == 0
    assert any("devkit: abc/" in ln and ": 3 items" in ln for ln in r.console_lines)
    _assert_ftrace_nops(booted, r, 10)                    # 10 __mcount_loc entries


def test_load_module_unknown_symbol_refused_like_the_kernel(booted):
    with open(sample("hello-arm.ko"), "rb") as f:
        ko = f.read()
    assert ko.count(b"\0_printk\0") >= 1
    bad = ko.replace(b"\0_printk\0", b"\0_printq\0")
    r = kernel_load(booted, bad, name="hello")
    assert r.ret == -2 and r.errno == 2 and r.module == 0 and r.core_base == 0   # never reached init
    assert len(r.allocs) == 2               # 6.1 resolves symbols after move_module allocated
    assert any("hello: Unknown symbol _printq (err -2)" in ln for ln in r.console_lines)


def test_load_module_oops_is_the_kernels_own(booted):
    with open(sample("nullderef-arm.ko"), "rb") as f:
        r = kernel_load(booted, f.read(), name="nullderef")
    assert r.ret is None and r.stopped
    assert "Unable to handle kernel NULL pointer dereference at virtual address 00000000" in r.oops_text
    assert "Internal error: Oops: 5 [#1] SMP ARM" in r.oops_text        # FSR 5: section translation
    assert "PC is at nullderef_init" in r.oops_text


def test_deferred_work_runs_under_the_kernels_scheduler(booted):
    with open(sample("deferred-arm.ko"), "rb") as f:
        r = kernel_load(booted, f.read(), name="deferred", settle_ns=1_000_000_000)
    assert r.ret == 0 and not r.stopped
    text = "\n".join(r.console_lines)
    # mod_timer(jiffies + 25) (100 ms at HZ=250) fires at +26 and the 50 ms delayed work (13
    # jiffies) at +14: kernel/time/timer.c calc_index() adds one granule so a timer armed between
    # ticks never fires early. A tick delivered late by the machine would show +27 / +15.
    for what in ("deferred: work item", "deferred: tasklet", "deferred: kthread",
                 "deferred: delayed work after 14 jiffies", "deferred: timer after 26 jiffies"):
        assert what in text, what
    # and the ticks are 4 ms of simulated time apart (printk's timestamps are the arch timer's)
    stamp = {ln.split("] ", 1)[1].split(" after")[0]: float(ln[1:ln.index("]")]) for ln in r.console_lines}
    dt = stamp["deferred: timer"] - stamp["deferred: loading out-of-tree module taints kernel."]
    assert 0.100 <= dt <= 0.108, dt


def test_alloc_addresses_match_the_full_load(booted_dir):
    with open(sample("devkit-arm.ko"), "rb") as f:
        ko = f.read()
    plan = kernel_alloc_addresses(BootedKernel.get(BOOT_VMLINUZ), ko)
    full = kernel_load(BootedKernel.get(BOOT_VMLINUZ), ko)
    assert [(a.size, a.base) for a in plan] == [(a.size, a.base) for a in full.allocs]
    assert (plan[0].base, plan[1].base) == (full.core_base, full.init_base)


def test_run_init_false_stops_before_init(booted):
    with open(sample("hello-arm.ko"), "rb") as f:
        r = kernel_load(booted, f.read(), name="hello", run_init=False)
    assert r.ret is None and r.stopped == "before init" and r.module
    assert r.core_base == 0xBF000000 and r.init_bytes
    assert not any("hello: loaded" in ln for ln in r.console_lines)


def test_dependencies_load_first(booted):
    path = os.path.join(TREE, "crypto", "xor.ko")
    with open(path, "rb") as f:
        assert parse_modinfo(f.read())[0]["depends"] == ["xor-neon"]
    rs = kernel_load_path(booted, path, tree=TREE)
    assert [r.name for r in rs] == ["xor-neon.ko", "xor.ko"] and [r.ret for r in rs] == [0, 0]
    assert any("xor: using function:" in ln for ln in rs[1].console_lines)


def test_module_alloc_call_sites_found(booted):
    sites = bl_sites(booted.image, booted.image.symbols["module_alloc"])
    assert sites and all(booted.image.symbols["_stext"] <= s < booted.image.symbols["_etext"] for s in sites)


def test_restores_in_a_loop_keep_the_address_space_bounded(booted_dir):
    """Each Uc reserves a 1 GiB translation buffer and a dropped Machine is freed only by the cycle
    collector: machine.py collects once LIVE_MAX machines are alive, so a check worker's restores
    stay under its RLIMIT_AS (ci/workers.py)."""
    from armload.emu.booted import machine

    def vmsize() -> int:
        line = next(ln for ln in open("/proc/self/status") if ln.startswith("VmSize:"))
        return int(line.split()[1]) << 10
    # Machines other tests of this process still hold (fixtures, the devkit's warm runs) are not this
    # loop's: it is measured from what is alive when it starts.
    import gc
    gc.collect()
    base, v0 = len(machine._LIVE), vmsize()
    for _ in range(2 * machine.LIVE_MAX + 2):
        k = BootedKernel.get(BOOT_VMLINUZ)
        k.call("msleep", 1)
        del k
        assert len(machine._LIVE) <= base + machine.LIVE_MAX
    assert vmsize() - v0 < (machine.LIVE_MAX + 2) * (3 << 29)   # about 1.3 GiB a live machine


def test_the_safety_net_is_not_lost_when_it_fires_between_two_runs(booted):
    """The wall-clock timer's emu_stop finds no emulation when it fires while Python runs between
    two emu_start calls (a hook's service, the hostile watch's chunks): the next run stops at once,
    with its text; after the Watchdog, runs go on."""
    from armload.emu.booted.call import Watchdog
    from armload.emu.booted.machine import GuestFault
    m = booted.m
    with Watchdog(m, 600) as wd:
        wd._fire()                                  # as the timer thread would, outside emu_start
        with pytest.raises(GuestFault, match="the wall-clock safety net of 600 s stopped it"):
            booted.call("msleep", 1)
    assert wd.fired and m.wall_stop is None


def test_a_saved_machine_restores_to_the_same_state(booted, tmp_path, capsys):
    """snapshot.save then snapshot.load: the same RAM (holes where it is zero), CPU context, hardware
    and meta; a second save to the same directory keeps the first (another process saved it first)."""
    import hashlib
    from unicorn import arm_const as A
    booted.call("msleep", 1)                              # a machine that ran on after its restore
    m = booted.m
    d = str(tmp_path / "snap")
    snapshot.save(m, d, {"boot_insns": 7, "why": "test"})
    assert sorted(os.listdir(d)) == ["ram.bin", "state.pkl"] and os.listdir(tmp_path) == ["snap"]
    assert os.path.getsize(os.path.join(d, "ram.bin")) == len(m.ram)
    assert snapshot.disk_bytes(d) < len(m.ram) // 2                       # sparse: zero chunks are holes
    m2, meta = snapshot.load(booted.image, d)
    assert meta == {"boot_insns": 7, "why": "test"}
    assert hashlib.sha256(m2.ram[:]).digest() == hashlib.sha256(m.ram[:]).digest()
    regs = (A.UC_ARM_REG_PC, A.UC_ARM_REG_SP, A.UC_ARM_REG_CPSR, A.UC_ARM_REG_R4, A.UC_ARM_REG_C13_C0_3)
    assert [m2.uc.reg_read(r) for r in regs] == [m.uc.reg_read(r) for r in regs]
    assert m2.hw.insns == m.t.insns and m2.hw.timer.cval == m.hw.timer.cval and m2.hw.gic.enabled == m.hw.gic.enabled
    m.ram[0:4] = b"\xde\xad\xbe\xef"
    snapshot.save(m, d, {"boot_insns": 8})                                # the directory exists: kept
    assert snapshot.load(booted.image, d)[1] == {"boot_insns": 7, "why": "test"}
    assert os.listdir(tmp_path) == ["snap"]                                # the temporary copy is gone
    snapshot.announce(d)
    assert capsys.readouterr().err == f"booting the Debian kernel in Unicorn (once; cached in {d})\n"
