"""The booted kernel's own probes (armload/probes/booted.py, commands/probe_booted.py): register_kprobe,
register_kretprobe, register_ftrace_function and register_ftrace_graph of the Debian Image, its
breakpoint taken through the emulated UNDEF entry, OPTPROBES after the optimizer's delay."""
import json
import os
import struct
import subprocess
import sys

import pytest

from conftest import BOOT_VMLINUZ, ROOT, SYMVERS, sample
from armload.probes.base import ProbeError

SET_COMM = "__set_task_comm"
ARM_B = 0x0A000000


@pytest.fixture
def kp(booted):
    from armload.probes.booted import KernelProbes
    return KernelProbes(booted)


def _task_and_name(kp, name="renamed"):
    return kp.k.call("find_task_by_vpid", 1), kp._string(name)


def _comm(k, task) -> str:
    buf = k.kmalloc(16)
    k.call("__get_task_comm", buf, 16, task)
    return k.cstr(buf)


def _event(k, task, name) -> int:
    i0 = k.insns
    k.call(SET_COMM, task, name, 0)
    return k.insns - i0


def test_kprobe_traps_then_the_kernels_optimizer_makes_it_a_branch(kp):
    k = kp.k
    task, name = _task_and_name(kp)
    base = _event(k, task, name)
    seen = []
    p = kp.kprobe(SET_COMM, pre=lambda h: seen.append((h.addr, h.args[:2])))
    addr = k.image.symbols[SET_COMM]
    assert p.addr == addr and p.state() == "breakpoint"
    assert k.u32(addr) & 0x0FFFFFFF == 0x07F001F8               # KPROBE_ARM_BREAKPOINT_INSTRUCTION | cond
    trap = _event(k, task, name)
    assert seen == [(addr, [task, name])] and p.hits == 1
    kp.wait_optimizer()                                         # OPTIMIZE_DELAY: kprobe_optimizer runs
    assert p.state() == "optimized" and k.u32(addr) & 0x0F000000 == ARM_B
    opt = _event(k, task, name)
    assert p.hits == 2 and len(seen) == 2 and _comm(k, task) == "renamed"
    # instructions per event, the kernel's whole path: exception entry, kprobe_handler, single-step
    assert base < opt < trap and trap - base > 300


def test_costs_are_deterministic(booted_dir):
    from armload.emu.booted.kernel import BootedKernel
    from armload.probes.booted import KernelProbes
    out = []
    for _ in range(2):
        kp = KernelProbes(BootedKernel.get(BOOT_VMLINUZ))
        task, name = _task_and_name(kp)
        kp.kprobe(SET_COMM, pre=lambda h: None)
        out.append(_event(kp.k, task, name))
    assert out[0] == out[1]


def test_a_pre_handler_changes_what_the_probed_code_sees(kp):
    k = kp.k
    task, name = _task_and_name(kp)
    other = kp._string("changed")
    kp.kprobe(SET_COMM, pre=lambda h: h.set_reg(1, other))       # r1: the new name
    k.call(SET_COMM, task, name, 0)
    assert _comm(k, task) == "changed"


def test_a_post_handler_keeps_the_breakpoint_and_runs_after_the_single_step(kp):
    k = kp.k
    task, name = _task_and_name(kp)
    order = []
    p = kp.kprobe(SET_COMM, pre=lambda h: order.append("pre"), post=lambda h: order.append("post"))
    kp.wait_optimizer()
    assert p.state() == "breakpoint"                            # a post_handler cannot be optimized
    k.call(SET_COMM, task, name, 0)
    assert order == ["pre", "post"] and p.hits == 2


def test_disable_enable_and_unregister_restore_the_instruction(kp):
    k = kp.k
    task, name = _task_and_name(kp)
    addr = k.image.symbols[SET_COMM]
    original = k.u32(addr)
    p = kp.kprobe(SET_COMM, pre=lambda h: None)
    assert p.disable() == 0 and p.state() == "disarmed" and k.u32(addr) == original
    k.call(SET_COMM, task, name, 0)
    assert p.hits == 0
    assert p.enable() == 0 and p.state() == "breakpoint"
    k.call(SET_COMM, task, name, 0)
    assert p.hits == 1
    p.unregister()
    assert k.u32(addr) == original and not p.registered
    k.call(SET_COMM, task, name, 0)
    assert p.hits == 1


def test_disabled_registration_does_not_arm(kp):
    addr = kp.k.image.symbols[SET_COMM]
    original = kp.k.u32(addr)
    p = kp.kprobe(SET_COMM, pre=lambda h: None, disabled=True)
    assert "disabled" in p.flags() and kp.k.u32(addr) == original


@pytest.mark.parametrize("target, errno", [
    ("do_undefinstr", -22),            # the kprobe blacklist (NOKPROBE_SYMBOL)
    ("__und_svc", -22),                # entry text
    ("kprobe_handler", -2),            # static in .kprobes.text: not found by name
    ("no_such_function", -2),
    (SET_COMM + "+2", -22),            # not an instruction boundary
    (SET_COMM + "+8", -22),            # the ftrace site: no KPROBES_ON_FTRACE on ARM
])
def test_refusals_are_the_kernels(kp, target, errno):
    with pytest.raises(ProbeError) as e:
        kp.kprobe(target, pre=lambda h: None)
    assert e.value.errno == errno and f"returned {errno}" in str(e.value)


def test_accepted_beside_a_refusal(kp):
    assert kp.kprobe(SET_COMM + "+4", pre=lambda h: None).addr == kp.k.image.symbols[SET_COMM] + 4


def test_kretprobe_sees_the_return_value_through_the_images_trampoline(kp):
    k = kp.k
    s = kp._string("12345")
    got = []
    r = kp.kretprobe("simple_strtoul", handler=lambda h: got.append((h.ret, h.caller)))
    assert r.maxactive == 10                                    # max(10, 2 * possible CPUs)
    assert k.call("simple_strtoul", s, 0, 10) == 12345
    assert got == [(12345, k.trap)]                            # the real caller, not the trampoline


def _calling_handler(k, func: int, arg: int) -> bytes:
    """ARM code: func(arg, 0, 10); return 0 -- a handler that calls a probed function."""
    words = [0xE92D4010,        # push {r4, lr}
             0xE59F0014,        # ldr r0, [pc, #20]  (arg, at +32)
             0xE3A01000,        # mov r1, #0
             0xE3A0200A,        # mov r2, #10
             0xE59FC00C,        # ldr ip, [pc, #12]  (func, at +36)
             0xE12FFF3C,        # blx ip
             0xE3A00000,        # mov r0, #0
             0xE8BD8010,        # pop {r4, pc}
             arg, func]
    return struct.pack(f"<{len(words)}I", *words)


def test_a_probe_hit_inside_a_handler_is_missed_not_run(kp):
    k = kp.k
    s = kp._string("77")
    inner = kp.kprobe("simple_strtoul", pre=lambda h: None)
    outer = kp.kprobe("kstrdup", pre=_calling_handler(k, k.image.symbols["simple_strtoul"], s))
    k.call("kstrdup", s, 0xCC0)
    assert outer.hits == 1 and inner.hits == 0 and inner.nmissed == 1   # reenter_kprobe
    k.call("simple_strtoul", s, 0, 10)
    assert inner.hits == 1 and inner.nmissed == 1


def test_an_arm_handler_counts_every_event(kp):
    k = kp.k
    task, name = _task_and_name(kp)
    counter = k.call("__kmalloc", 4, 0xCC0 | 0x100)
    # ldr r0, [pc, #16]; ldr r1, [r0]; add r1, r1, #1; str r1, [r0]; mov r0, #0; bx lr; .word counter
    code = struct.pack("<7I", 0xE59F0010, 0xE5901000, 0xE2811001, 0xE5801000, 0xE3A00000, 0xE12FFF1E, counter)
    p = kp.kprobe(SET_COMM, pre=code)
    for _ in range(3):
        k.call(SET_COMM, task, name, 0)
    assert k.u32(counter) == 3 and p.hits == 3


def test_several_ftrace_users_with_their_own_filters(kp):
    k = kp.k
    task, name = _task_and_name(kp)
    s = kp._string("5")
    a, b = [], []
    fa = kp.ftrace([SET_COMM, "kstrdup"], lambda h: a.append((h.addr, h.args[:2])))
    fb = kp.ftrace(SET_COMM, lambda h: b.append(h.caller))
    k.call(SET_COMM, task, name, 0)
    k.call("kstrdup", s, 0xCC0)
    site = k.call("ftrace_location", k.image.symbols[SET_COMM])
    assert a[0] == (site, [task, name]) and len(a) == 2 and b == [k.trap]
    fa.unregister()
    k.call(SET_COMM, task, name, 0)
    assert len(a) == 2 and len(b) == 2 and fb.hits == 2


def test_function_graph_entry_and_return_and_one_user_at_a_time(kp):
    k = kp.k
    task, name = _task_and_name(kp)
    seen = []
    g = kp.graph(SET_COMM, entry=lambda h: seen.append(("in", h.depth)) or 1,
                 ret=lambda h: seen.append(("out", h.duration_ns)))
    k.call(SET_COMM, task, name, 0)
    assert [x[0] for x in seen] == ["in", "out"] and seen[1][1] > 0 and g.hits == 2
    with pytest.raises(ProbeError) as e:
        kp.graph("kstrdup")
    assert e.value.errno == -16                                 # -EBUSY: 6.1 has one fgraph_ops
    g.unregister()
    assert kp.graph("kstrdup").registered


@pytest.mark.parametrize("kind", ["graph", "ftrace"])
def test_a_function_without_an_ftrace_site_is_refused(kp, kind):
    with pytest.raises(ProbeError) as e:
        getattr(kp, kind)("simple_strtoul", lambda h: None)      # lib/vsprintf.c: no mcount call
    assert e.value.errno == -22


def _run(*args):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-m", "armload", "run", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=300)


def test_cli_probes_a_modules_init_inside_the_booted_kernel(booted_dir):
    p = _run(sample("hello-arm.ko"), "--kernel", BOOT_VMLINUZ, "--kernel", SYMVERS, "--probe", "kprobe:hello_init",
             "--probe", "kretprobe:hello:hello_init", "--probe", "kprobe:_printk", "--settle-ms", "0", "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["runtime"] == "booted"
    m = out["modules"][0]
    assert m["ret"] == 0 and m["loader_vs_kernel"]["identical"]     # probes do not disturb the comparison
    hits = out["probes"]["hits"]
    init = next(h for h in hits if h["kind"] == "kprobe" and h["target"] == "hello:hello_init")
    ret = next(h for h in hits if h["kind"] == "kretprobe")
    assert init["addr"] == m["init_base"] and ret["ret"] == 0
    states = {p["spec"]: p for p in out["probes"]["probes"]}
    assert "gone" in states["kprobe:hello_init"]["flags"]           # init text freed: the kernel killed it
    assert states["kprobe:_printk"]["hits"] >= 1


def test_cli_refusal_is_the_kernels_and_fails_the_run(booted_dir):
    p = _run(sample("hello-arm.ko"), "--kernel", BOOT_VMLINUZ, "--kernel", SYMVERS, "--probe", "kprobe:do_undefinstr",
             "--settle-ms", "0")
    assert p.returncode == 1
    assert "register_kprobe(do_undefinstr) failed, returned -22 (-EINVAL)" in p.stdout


def test_cli_fentry_runs_on_the_models_and_says_why(booted_dir):
    p = _run(sample("hello-arm.ko"), "--kernel", BOOT_VMLINUZ, "--kernel", SYMVERS, "--probe", "fentry:hello_init")
    assert "armload's own trampoline: 32-bit ARM 6.1 has none" in p.stdout


def test_the_models_kprobe_object_size_is_the_kernels_slab(booted):
    from armload.probes import table
    from armload.probes.booted import KPROBE
    p = booted.call("__kmalloc", KPROBE["size"], 0xCC0)
    assert booted.call("__ksize", p) == table.KPROBE_SIZE      # struct kprobe (80 bytes) lives in kmalloc-128
