"""The booted kernel's own probes (armload/probes/booted.py, commands/probe_booted.py): register_kprobe,
register_kretprobe, register_ftrace_function and register_ftrace_graph of the Debian Image, its
breakpoint taken through the emulated UNDEF entry, OPTPROBES after the optimizer's delay."""
import json
import os
import struct
import subprocess
import sys

import pytest

from testinputs import BOOT_VMLINUZ, ROOT, SYMVERS, sample
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


@pytest.mark.parametrize("kind", ["fentry", "fexit"])
def test_cli_fentry_fexit_are_refused_with_the_kernels_enotsupp(booted_dir, kind):
    p = _run(sample("hello-arm.ko"), "--kernel", BOOT_VMLINUZ, "--kernel", SYMVERS, "--probe", f"{kind}:hello_init")
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert f"--probe {kind}:hello_init: 32-bit ARM 6.1 has no BPF trampoline" in p.stderr
    assert "arch_prepare_bpf_trampoline returns -ENOTSUPP, 524" in p.stderr


def test_the_models_kprobe_object_size_is_the_kernels_slab(booted):
    from armload.probes import table
    from armload.probes.booted import KPROBE
    p = booted.call("__kmalloc", KPROBE["size"], 0xCC0)
    assert booted.call("__ksize", p) == table.KPROBE_SIZE      # struct kprobe (80 bytes) lives in kmalloc-128


# --- what a handler is given, field by field (KHit), and the probe's own state ----------------------
def test_kprobe_and_post_hits_carry_the_kernels_pt_regs(kp):
    k = kp.k
    task, name = _task_and_name(kp)
    got = []
    p = kp.kprobe(SET_COMM + "+4", pre=got.append, post=got.append)
    i0, t0 = k.insns, k.now_ns()
    k.call(SET_COMM, task, name, 0)
    pre, post = got
    assert (pre.kind, post.kind) == ("kprobe", "kprobe-post")
    for h in got:
        assert h.target == SET_COMM + "+4" and h.addr == p.addr == k.image.symbols[SET_COMM] + 4
        assert h.args[:3] == [task, name, 0] and len(h.args) == 4 and h.regs
        assert h.caller == k.trap and h.caller_sym() == "run_init_process+0x0"
        assert i0 < h.insns < k.insns and t0 <= h.time_ns <= k.now_ns() and h.ret is None
    assert pre.insns < post.insns
    text = pre.format()
    assert text == (f"[kprobe] {SET_COMM}+4 @ {p.addr:#010x} ({task:#x}, {name:#x}, 0x0, {pre.args[3]:#x}) "
                    f"<- run_init_process+0x0")
    d = pre.to_dict()
    assert d["kind"] == "kprobe" and d["addr"] == p.addr and d["args"] == pre.args and d["caller"] == k.trap
    assert d["caller_sym"] == "run_init_process+0x0" and d["ret"] is None and d["insns"] == pre.insns
    pd = p.to_dict()
    assert pd == {"kind": "kprobe", "target": SET_COMM + "+4", "hits": 2, "registered": True, "addr": p.addr,
                  "nmissed": 0, "flags": []}


def test_kretprobe_entry_and_return_hits(kp):
    k = kp.k
    s = kp._string("-5")
    got = []
    r = kp.kretprobe("simple_strtol", handler=got.append, entry=got.append, maxactive=3)
    assert r.maxactive == 3 and r.nmissed == 0
    assert k.call("simple_strtol", s, 0, 10) == 0xFFFFFFFB
    entry, ret = got
    assert entry.kind == "kretprobe-entry" and entry.args[:3] == [s, 0, 10] and entry.ret is None
    assert ret.kind == "kretprobe" and ret.args == [] and ret.ret == 0xFFFFFFFB and ret.caller == k.trap
    assert ret.addr == entry.addr == r.addr == k.image.symbols["simple_strtol"]
    assert ret.format().startswith(f"[kretprobe] simple_strtol @ {r.addr:#010x} returned -5 (0xfffffffb) <- ")
    assert r.hits == 2


def test_address_forms_and_the_target_label(kp):
    a = kp.k.image.symbols[SET_COMM]
    assert kp.kprobe(a, pre=lambda h: None).addr == a
    p = kp.kprobe(f"{a + 4:#x}", pre=lambda h: None)
    assert (p.addr, p.target) == (a + 4, f"{a + 4:#x}")
    q = kp.kprobe(f"{a:#x}+12", pre=lambda h: None)
    assert (q.addr, q.target) == (a + 12, f"{a:#x}+12")


def test_ftrace_and_graph_hits(kp):
    k = kp.k
    task, name = _task_and_name(kp)
    f, g = [], []
    fo = kp.ftrace(SET_COMM, f.append)
    go = kp.graph([SET_COMM, "kstrdup"], entry=lambda h: g.append(h) or 1, ret=g.append)
    k.call(SET_COMM, task, name, 0)
    k.call("kstrdup", name, 0xCC0)
    site = k.call("ftrace_location", k.image.symbols[SET_COMM])
    (h,) = f
    assert (h.kind, h.target, h.addr, h.caller) == ("ftrace", SET_COMM, site, k.trap) and h.regs
    assert h.args[:3] == [task, name, 0] and len(h.args) == 4 and h.format().startswith(f"[ftrace] {SET_COMM} @ ")
    kinds = [(x.kind, x.addr) for x in g]
    kst = k.call("ftrace_location", k.image.symbols["kstrdup"])
    assert kinds == [("graph-entry", site), ("graph-return", site), ("graph-entry", kst), ("graph-return", kst)]
    e, r = g[0], g[1]
    assert e.target == f"{SET_COMM},kstrdup" and e.depth == r.depth and e.depth >= 0 and e.caller == 0
    assert e.duration_ns is None and 0 < r.duration_ns < 1_000_000 and r.format().endswith(" ns <- 0x0")
    with pytest.raises(ProbeError):
        e.set_reg(0, 1)                                         # graph handlers get no pt_regs
    assert fo.hits == 1 and go.hits == 4


def test_an_arm_handler_by_address_and_a_large_one(kp):
    k = kp.k
    task, name = _task_and_name(kp)
    ret0 = struct.pack("<II", 0xE3A00000, 0xE12FFF1E)          # mov r0, #0; bx lr
    big = kp.kprobe(SET_COMM, pre=ret0 + bytes(5000))           # more than a page: its own module_alloc
    entry = k.u32(big.struct + 32)
    assert entry & 0xFFF == 0 and k.read(entry, 8) == ret0
    by_addr = kp.kprobe("kstrdup", pre=entry)                   # an address: the same code, counted apart
    assert k.u32(by_addr.struct + 32) == entry
    k.call(SET_COMM, task, name, 0)
    k.call("kstrdup", name, 0xCC0)
    k.call("kstrdup", name, 0xCC0)
    assert (big.hits, by_addr.hits) == (1, 2)
    r = kp.kretprobe("kstrndup", handler=entry)                 # the same code for a kretprobe and ftrace:
    f = kp.ftrace("kstrndup", entry)                            # each hit counted for the probe it serves
    k.call("kstrndup", name, 4, 0xCC0)
    assert (big.hits, by_addr.hits, r.hits, f.hits) == (1, 2, 1, 1)


def test_unregister_frees_and_drops_the_hooks(kp):
    k = kp.k
    hooks = len(kp._hooks)
    p = kp.kprobe(SET_COMM, pre=lambda h: None, post=lambda h: None)
    assert len(kp._hooks) == hooks + 2 and list(kp.probes.values()) == [p]
    p.unregister()
    assert len(kp._hooks) == hooks and not kp.probes and p.hooks == []
    p.unregister()                                              # once only
    q = kp.kprobe(SET_COMM, pre=lambda h: None)
    kp.unregister_all()
    assert not kp.probes and not q.registered
    with pytest.raises(ProbeError):
        kp.kprobe("no_such_function", pre=lambda h: None)
    assert len(kp._hooks) == hooks                              # a refusal keeps no hook


def test_a_probe_on_init_text_is_gone_after_init(booted_dir):
    from armload.emu.booted.modrun import BootedRun
    from armload.kernel.config import DEBIAN_ARMMP
    from armload.kernel.provider import Kernel
    from armload.probes.booted import KernelProbes
    run = BootedRun(BOOT_VMLINUZ, Kernel.from_files([SYMVERS, BOOT_VMLINUZ], DEBIAN_ARMMP), DEBIAN_ARMMP)
    kp = KernelProbes(run.bk)
    probes = []
    run.on_coming(lambda name: probes.append(kp.kprobe(f"{name}:hello_init", pre=lambda h: None)))
    r = run.load(sample("hello-arm.ko"))
    (p,) = probes
    assert r.ok and r.loader.identical and p.hits == 1 and p.addr == r.init_base
    assert p.state() == "gone" and "gone" in p.flags()


def test_caller_symbols_outside_the_image(kp):
    from armload.probes.booted import KHit
    h = KHit("kprobe", "f", 0xBF000000, [], 0xBF000010, 0, 0, kernel=kp.k)
    assert h.caller_sym() == "0xbf000010"
    kp.k.symbolizer = lambda a: "mod_fn+0x10 [mod]" if a == 0xBF000010 else None
    assert h.caller_sym() == "mod_fn+0x10 [mod]"
    assert KHit("kprobe", "f", 0, [], kp.k.image.symbols[SET_COMM] + 8, 0, 0, kernel=kp.k).caller_sym() \
        == f"{SET_COMM}+0x8"


def test_graph_defaults_resets_and_names(kp):
    k = kp.k
    task, name = _task_and_name(kp)
    rets = []
    g = kp.graph(SET_COMM, ret=rets.append)                     # no entry handler: every entry traced
    k.call(SET_COMM, task, name, 0)
    assert len(rets) == 1 and g.hits == 2
    g.unregister()
    seen = []
    kp.graph("vmlinux:kstrdup", entry=lambda h: seen.append(h.addr) or 1)
    k.call(SET_COMM, task, name, 0)                             # the new filter replaced the old one
    k.call("kstrdup", name, 0xCC0)
    assert seen == [k.call("ftrace_location", k.image.symbols["kstrdup"])]
    for kind in ("graph", "ftrace"):
        with pytest.raises(ProbeError) as e:
            getattr(kp, kind)("no_such_function", lambda h: None)
        assert e.value.errno == -2 and "kallsyms_lookup_name does not know it" in str(e.value)
