"""Probes on the kernel image's own text (the Debian Image mapped by the emulator), the kernel's
kprobe blacklist, the probe-point forms, changes during a run and per-probe hit/miss counts."""
import os
import struct
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from conftest import SAMPLES, SYMVERS  # noqa: E402
from emu_fixtures import DEBIAN_VMLINUZ  # noqa: E402

from armload.emu import Machine  # noqa: E402
from armload.kernel.config import DEBIAN_ARMMP  # noqa: E402
from armload.kernel.provider import Kernel  # noqa: E402
from armload.loader.session import Session  # noqa: E402
from armload.probes import ProbeError, Probes  # noqa: E402

COMM = 0x780                     # offsetof(struct task_struct, comm): `add r0, r4, #0x780` in __set_task_comm


@pytest.fixture(scope="module")
def kernel():
    assert os.path.exists(DEBIAN_VMLINUZ), "the Debian kernel image is an input: make test-inputs"
    return Kernel.from_files([SYMVERS, DEBIAN_VMLINUZ], DEBIAN_ARMMP)


def _machine(kernel):
    mod = Session(kernel, DEBIAN_ARMMP, "window").load(os.path.join(SAMPLES, "exporter-arm.ko"))
    m = Machine(mod, kernel)
    return m, Probes(m)


def _rename(m, pr, name=b"renamed"):
    q = m.heap.alloc(32, zero=True, kind="test: name")
    m.write(q, name + b"\0")
    r = m.call(pr.function("__set_task_comm").start, [m.current, q, 0], name="__set_task_comm")
    assert r.status == "returned", r.summary()
    return m.read_cstring(m.current + COMM, 16)


def test_kprobe_on_a_kernel_function_runs_and_counts(kernel):
    m, pr = _machine(kernel)
    assert _rename(m, pr, b"before") == b"before"
    hits = []
    f = pr.function("__set_task_comm")
    assert f.module is pr.ktext and f.size == 0x9C
    entry = pr.kprobe("__set_task_comm", pre=hits.append)
    mid = pr.kprobe("vmlinux:__set_task_comm+0x10")          # mov r0, r7
    assert _rename(m, pr) == b"renamed"
    assert [h.function for h in hits] == ["__set_task_comm+0x0"] and hits[0].args[0] == m.current
    assert (entry.nhit, mid.nhit, entry.nmissed) == (1, 1, 0)
    entry.disable()
    assert pr.read(f.start, 4) == struct.pack("<I", 0xE92D41F0)   # push {r4-r8, lr}: the original word
    assert _rename(m, pr, b"again") == b"again" and entry.nhit == 1 and mid.nhit == 2
    by_addr = pr.kprobe(f"{f.start + 0x10:#x}")               # an address form joins the kprobe there
    assert by_addr.name == "__set_task_comm+0x10"


@pytest.mark.parametrize("spec,why", [
    ("do_undefinstr", "NOKPROBE_SYMBOL(do_undefinstr) in _kprobe_blacklist"),
    ("notify_die", "NOKPROBE_SYMBOL(notify_die)"),
    ("get_kprobe", "NOKPROBE_SYMBOL(get_kprobe)"),
    ("kprobe_trap_handler", ".kprobes.text"),
    ("__kretprobe_trampoline", ".kprobes.text"),
    ("__und_svc", "entry text"),
    ("__set_task_comm+0x8", "ftrace location"),
])
def test_kernel_blacklist_is_refused_with_einval(kernel, spec, why):
    m, pr = _machine(kernel)
    with pytest.raises(ProbeError, match=r"returned -22 \(-EINVAL\)") as e:
        pr.kprobe(spec)
    assert why in str(e.value)


def test_blacklist_bounds_both_sides(kernel):
    m, pr = _machine(kernel)
    kt = pr.ktext
    assert len(kt.blacklist_table) >= 20 and kt.blacklist_at is not None
    s, e = m.image.symbols["__kprobes_text_start"], m.image.symbols["__kprobes_text_end"]
    assert ".kprobes.text" in kt.blacklisted(s) and ".kprobes.text" in kt.blacklisted(e - 4)
    assert ".kprobes.text" not in (kt.blacklisted(e) or "") and ".kprobes.text" not in (kt.blacklisted(s - 4) or "")
    f = kt.function("do_undefinstr")
    assert "do_undefinstr" in kt.blacklisted(f.start + f.size - 4)
    assert "do_undefinstr" not in (kt.blacklisted(f.start + f.size) or "")
    ok = pr.kprobe("__set_task_comm+0xc")                    # an ordinary function: accepted
    assert ok.registered


def test_probe_point_forms_and_bad_ones(kernel):
    m, pr = _machine(kernel)
    a = pr.kprobe("exporter:armload_sample_add")
    assert a.func.module.name == "exporter"
    for spec, pat in (("nosuch:armload_sample_add", r"-2 .*no module 'nosuch'"),
                      ("exporter:__set_task_comm", r"-2 .*no function '__set_task_comm' in exporter"),
                      ("__set_task_comm+zz", r"-22 .*expected FUNC\[\+OFF\]"),
                      # kallsyms places no symbol there: -ENOENT (the booted kernel's register_kprobe says
                      # so too, tests/test_kprobes_kernel_agree.py); the vectors page it places: -EINVAL
                      ("0x00001000", r"-2 \(-ENOENT\).*no symbol kallsyms knows"),
                      ("0xffff0000", r"-22 .*not in kernel or module text")):
        with pytest.raises(ProbeError, match=pat):
            pr.kprobe(spec)
    # FUNC+OFF past FUNC's end probes what follows, as _kprobe_addr folds it (the booted kernel
    # accepts __set_task_comm+0x200: tests/test_kprobes_kernel_agree.py)
    past = pr.kprobe("__set_task_comm+0x200", enable=False)
    nxt = pr.ktext.function_at(past.addr)
    assert past.addr == pr.function("__set_task_comm").start + 0x200 and past.func.name == nxt.name
    assert past.name == f"{nxt.name}+{past.addr - nxt.start:#x}"


def test_enable_disable_unregister_during_a_run_and_nmissed(kernel):
    m, pr = _machine(kernel)
    f = pr.function("armload_sample_add")
    seen = []
    later = pr.kprobe(f, f.size - 4, pre=lambda h: seen.append("later"))

    def first(h):
        seen.append("first")
        later.disable()                  # disarmed before execution reaches it
    kp = pr.kprobe(f, 0, pre=first)
    assert m.call("armload_sample_add", [2, 3]).retval == 5
    assert seen == ["first"] and later.nhit == 0
    later.enable()
    kp.unregister()                      # gone: only `later` fires now
    seen.clear()
    assert m.call("armload_sample_add", [2, 3]).retval == 5 and seen == ["later"]

    # a handler running probed code: the inner hit is missed (reenter_kprobe), the code still runs
    inner = []

    def reenter(h):
        inner.append(m.invoke(f.start, [10, 20]))
    rk = pr.kprobe(f, 0, pre=reenter)
    assert m.call("armload_sample_add", [1, 1]).retval == 2
    assert inner == [30] and rk.nhit == 1 and rk.nmissed == 1 and later.nmissed == 1 and later.nhit == 2


# --- kretprobes ---------------------------------------------------------------------------------
def test_kretprobe_runs_the_images_trampoline(kernel):
    m, pr = _machine(kernel)
    base = m.call("armload_sample_add", [40, 2])
    rets = []
    rp = pr.kretprobe("armload_sample_add", lambda h: rets.append((h.ret, h.caller)))
    r = m.call("armload_sample_add", [40, 2])
    assert r.retval == 42 and rets and rets[0][0] == 42 and rp.nhit == 1 and rp.free == rp.maxactive == 10
    # the Image's __kretprobe_trampoline runs as instructions: sub, push, mov, bl, mov, pop, add, mov pc
    # (the entry kprobe's own instruction runs out of line: its slot adds `ldr pc, =next`), and the
    # two trapping instructions retire: the breakpoint and the one standing for trampoline_handler
    assert r.instructions - base.instructions == 8 + 1 + 2
    tramp = m.image.symbols["__kretprobe_trampoline"]
    assert pr.kretprobe_trampoline() == tramp


def test_kretprobe_maxactive_and_nmissed():
    import sys as _s
    _s.path.insert(0, os.path.dirname(__file__))
    from emu_fixtures import build_module
    mod, k = build_module({"f": """
        push {r4, lr}
        subs r4, r0, #1
        movlt r0, #0
        poplt {r4, pc}
        mov r0, r4
        bl {f}
        add r0, r0, #1
        pop {r4, pc}
    """}, init="f")
    m = Machine(mod, k)
    pr = Probes(m)
    seen = []
    rp = pr.kretprobe("f", lambda h: seen.append(h.ret), maxactive=3)
    assert m.call("f", [6]).retval == 6
    # the 3 outermost calls took the 3 instances; the 4 deeper ones were missed
    assert (rp.nmissed, rp.nhit, rp.free) == (4, 3, 3) and seen == [4, 5, 6]
    rp2 = pr.kretprobe("f", maxactive=0)
    assert rp2.maxactive == 10                          # max(10, 2 * num_possible_cpus())
    assert pr.kret_instances() == [] and pr.kret_instances(0x1234) == []    # per task, all returned


def test_oops_backtrace_through_the_kretprobe_trampoline_finds_the_real_caller(kernel):
    from armload.emu.params import apply_params
    mod = Session(kernel, DEBIAN_ARMMP).load(os.path.join(SAMPLES, "devkit-arm-debug.ko"))
    m = Machine([mod], kernel)
    m.map_module(mod)
    pr = Probes(m)
    pr.kretprobe("devkit_peek")
    assert apply_params(m, mod, "crash=1").ok
    f = m.run_init(mod).fault
    names = [x["sym"].split("+")[0] for x in f.backtrace]
    assert names == ["devkit_peek", "devkit_crash"], names
    # without the fix-up (kretprobe_find_ret_addr) the walk stops in the trampoline
    m2 = Machine([Session(kernel, DEBIAN_ARMMP).load(os.path.join(SAMPLES, "devkit-arm-debug.ko"))], kernel)
    mod2 = m2._all_modules[0] if hasattr(m2, "_all_modules") else None
    m2.map_module(mod2)
    pr2 = Probes(m2)
    pr2.kretprobe("devkit_peek")
    m2.unwind_fixup = None
    assert apply_params(m2, mod2, "crash=1").ok
    names2 = [x["sym"].split("+")[0] for x in m2.run_init(mod2).fault.backtrace]
    assert "devkit_crash" not in names2 and any("kretprobe_trampoline" in n for n in names2), names2


# --- ftrace: several users, filters, function_graph ----------------------------------------------
def _sample(kernel, name):
    mod = Session(kernel, DEBIAN_ARMMP, "window").load(os.path.join(SAMPLES, name))
    m = Machine(mod, kernel)
    return m, mod, Probes(m)


def test_several_ftrace_users_of_one_function_and_filters(kernel):
    m, mod, pr = _sample(kernel, "exporter-arm.ko")
    site = pr.ftrace.site_of(pr.function("armload_sample_add"))
    nop = pr.read(site.addr, 4)
    a, b = [], []
    oa = pr.ftrace_function("armload_sample_add", lambda h: a.append(h.args[:2]))
    ob = pr.ftrace_function("armload_sample_add", lambda h: b.append(h.args[:2]))     # the kernel allows it
    assert m.call("armload_sample_add", [1, 2]).retval == 3 and a == b == [[1, 2]]
    oa.disable()
    assert site.state == "call"                   # still used by ob
    assert m.call("armload_sample_add", [3, 4]).retval == 7 and a == [[1, 2]] and b == [[1, 2], [3, 4]]
    ob.disable()
    assert site.state == "nop" and pr.read(site.addr, 4) == nop
    # an ops with no filter traces every traceable function; set_filter narrows it
    seen = []
    every = pr.ftrace_function(None, lambda h: seen.append(h.function))
    assert {s.state for s in pr.ftrace.traceable()} == {"call"}
    m.call("armload_sample_add", [1, 1])
    every.set_filter(["exporter_init"])
    assert site.state == "nop"
    m.call("armload_sample_add", [1, 1])
    assert seen == ["armload_sample_add"] and every.nhit == 1
    # armload's direct trampoline (an extension) cannot share a site with ftrace users, either way
    every.set_filter(["armload_sample_add"])
    with pytest.raises(ProbeError, match="-16"):
        pr.direct("armload_sample_add", entry=lambda h: None)
    every.disable()
    d = pr.direct("armload_sample_add", entry=lambda h: None)
    with pytest.raises(ProbeError, match=r"-16 .*taken by armload's fentry trampoline"):
        pr.ftrace_function("armload_sample_add")
    d.disable()


@pytest.mark.parametrize("with_image", [False, True])
def test_function_graph_entries_and_returns_nest(kernel, with_image):
    k = kernel if with_image else Kernel.from_files([SYMVERS], DEBIAN_ARMMP)
    m, mod, pr = _sample(k, "initcore-arm.ko")
    base = m.run_init(mod)
    m, mod, pr = _sample(k, "initcore-arm.ko")
    rets = []
    pr.kretprobe("core_sum", lambda h: rets.append(h.ret))
    ev, stack = [], []

    def entry(h):
        stack.append(h.function)
        ev.append((">", h.function))

    def ret(h):
        assert stack.pop() == h.function and h.depth == len(stack)
        ev.append(("<", h.function, h.ret))
    g = pr.ftrace.graph(entry=entry, ret=ret)
    r = m.run_init(mod)
    assert r.status == base.status == "returned" and r.retval == base.retval
    assert not stack and g.nhit == len([e for e in ev if e[0] == ">"]) > 10 and g.nmissed == 0
    assert ev[0] == (">", "initcore_init") and ev[-1][:2] == ("<", "initcore_init")
    assert ("<", "core_sum", rets[0]) in ev                   # the same return value a kretprobe sees
    if with_image:
        assert pr.ftrace.return_to_handler() == m.image.symbols["return_to_handler"]
    g.disable()
    assert {s.state for s in pr.ftrace.traceable()} == {"nop"}


def test_function_graph_depth_limit_and_filter(kernel):
    m, mod, pr = _sample(kernel, "initcore-arm.ko")
    ev = []
    g = pr.ftrace.graph(ret=lambda h: ev.append(h.function), functions=["core_sum"])
    assert m.run_init(mod).status == "returned"
    assert ev == ["core_sum"] and g.nhit == 1
    from armload.probes.ftrace import FTRACE_RETFUNC_DEPTH
    assert FTRACE_RETFUNC_DEPTH == 50
    m, mod, pr = _sample(kernel, "initcore-arm.ko")
    full = pr.ftrace.ret_stack()
    full.extend([None] * FTRACE_RETFUNC_DEPTH)               # a task already 50 deep
    g = pr.ftrace.graph(ret=lambda h: ev.append(h.function), functions=["initcore_init"])
    assert m.run_init(mod).status == "returned" and g.nmissed == 1 and g.nhit == 0


def test_fentry_is_not_supported_on_32bit_arm(kernel):
    m, pr = _machine(kernel)
    with pytest.raises(ProbeError, match=r"returned -524 \(-ENOTSUPP\).*arch_prepare_bpf_trampoline \(the Image's "
                                         r"weak stub at 0x[0-9a-f]+\)") as e:
        pr.bpf_trampoline("armload_sample_add")
    assert e.value.errno == -524
    from armload.probes.direct import EXTENSION
    assert "extension" in EXTENSION and "-ENOTSUPP" in EXTENSION


# --- OPTPROBES ----------------------------------------------------------------------------------
def test_optprobe_after_the_optimizer_delay(kernel):
    m, pr = _machine(kernel)
    f = pr.function("armload_sample_add")
    base = m.call("armload_sample_add", [1, 2])
    seen = []
    kp = pr.kprobe(f, 0, pre=lambda h: seen.append(h.args[:2]))
    delay = kp.OPTIMIZE_DELAY * 1_000_000_000 // m.clock.hz
    assert kp.OPTIMIZE_DELAY == 5                          # kernel/kprobes.c OPTIMIZE_DELAY (jiffies)
    kp.armed_ns = m.clock.ns() - delay + 10**6              # the optimizer has not run yet
    trap = m.call("armload_sample_add", [1, 2])
    assert not kp.optimized and trap.retval == 3
    kp.armed_ns = m.clock.ns() - delay                      # now it has: this hit optimizes
    m.call("armload_sample_add", [1, 2])
    assert kp.optimized and pr.read(f.start, 4)[3] == 0xEA  # `b detour` (cond AL) over the probe
    r = m.call("armload_sample_add", [5, 6])
    assert r.retval == 11 and seen[-1] == [5, 6] and kp.nhit == 3
    # the detour's instructions are emulated: push, mov, bl, (trap), pop, the instruction, b back
    assert r.instructions - base.instructions == 7 - 1 + 1
    assert pr.model_counts == {"kprobe": 2, "optprobe": 1}
    kp.disable()
    assert pr.read(f.start, 4) == kp.orig and not kp.optimized
    assert m.call("armload_sample_add", [5, 6]).retval == 11 and kp.nhit == 3


def test_optprobe_is_not_used_with_a_post_handler_or_thumb(kernel):
    m, pr = _machine(kernel)
    f = pr.function("armload_sample_add")
    posts = []
    a = pr.kprobe(f, 0, post=posts.append)                   # kprobe_optready: a post_handler: no
    assert pr.run_optimizer() == 0 and not a.optimized
    b = pr.kprobe(f, 0)                                      # joins the aggregate: still not
    assert pr.run_optimizer() == 0 and not b.optimized
    assert m.call("armload_sample_add", [1, 2]).retval == 3 and len(posts) == 1
    a.unregister()
    assert pr.run_optimizer() == 1 and (b.leader or b).optimized
    from armload.probes.core import Probes as P
    from armload.kernel.config import DEBIAN_ARMMP as D
    cfg = D.with_(thumb2=True)
    k2 = Kernel.from_files([SYMVERS], cfg)
    mod2 = Session(k2, cfg, "window").load(os.path.join(SAMPLES, "exporter-thumb2.ko"))
    pr2 = P(Machine(mod2, k2))
    t = pr2.kprobe("armload_sample_add")
    assert not pr2.optprobes and pr2.run_optimizer() == 0 and not t.optimized


def test_optprobe_on_kernel_text_and_handler_register_changes(kernel):
    m, pr = _machine(kernel)
    kp = pr.kprobe("__set_task_comm", pre=lambda h: None)
    assert pr.run_optimizer() == 1 and kp.detour < m.config.page_offset     # module_alloc memory
    assert _rename(m, pr, b"opt") == b"opt" and kp.nhit == 1
    add = pr.kprobe("armload_sample_add", pre=lambda h: h.set_reg("r1", 100))
    pr.run_optimizer()
    assert add.optimized and m.call("armload_sample_add", [1, 2]).retval == 101


# --- seed 003 ------------------------------------------------------------------------------------
def test_task_rename_bench_is_deterministic_and_reproduces_the_ordering():
    from armload.bench.attach import run_task_rename
    a = run_task_rename(events=30, min_time=0.0)
    b = run_task_rename(events=30, min_time=0.0)
    key = lambda res: [(r["mode"], r["insns_per_event"], r["emulated_per_event"], r["traps_per_event"])
                       for r in res["rows"]]
    assert key(a) == key(b) and a["verdict"] == b["verdict"]
    by = {r["mode"]: r for r in a["rows"]}
    # run_task_rename raises unless the program ran once per event (0 for base) and comm was renamed
    assert by["base"]["modelled_per_event"] == 0 and by["raw_tp"]["modelled_per_event"] == 0
    assert by["raw_tp"]["traps_per_event"] == 0 and by["kprobe"]["traps_per_event"] == 1
    assert by["kretprobe"]["traps_per_event"] == 2
    assert by["base"]["insns_per_event"] < by["raw_tp"]["insns_per_event"] < by["kprobe-opt"]["insns_per_event"] \
        < by["kprobe"]["insns_per_event"] < by["kretprobe"]["insns_per_event"]
    assert a["verdict"]["reproduced"]
    assert {k: u["errno"] for k, u in a["unsupported"].items()} == {"fentry": -524, "fexit": -524}


def test_ftrace_and_graph_on_a_kernel_function(kernel):
    m, pr = _machine(kernel)
    f = pr.function("__set_task_comm")
    site_addr = f.start + 8
    assert pr.ktext.is_mcount_site(site_addr)
    ev = []
    o = pr.ftrace_function("__set_task_comm", lambda h: ev.append(("ftrace", h.args[0])))
    site = pr.ftrace.site_of(f)
    assert site.addr == site_addr and site.state == "call"
    g = pr.ftrace.graph(ret=lambda h: ev.append(("ret", h.caller)), functions=["__set_task_comm"])
    assert _rename(m, pr, b"traced") == b"traced"
    assert ev[0] == ("ftrace", m.current) and ev[1][0] == "ret"
    o.disable()
    g.disable()
    from armload.probes.insn import ARM_FTRACE_NOP
    assert site.state == "nop" and pr.read(site_addr, 4) == struct.pack("<I", ARM_FTRACE_NOP)
    with pytest.raises(ProbeError, match="ftrace location"):
        pr.kprobe("__set_task_comm+0x8")


def test_handlers_may_be_emulated_code(kernel):
    m, pr = _machine(kernel)
    counter = m.heap.alloc(4, zero=True, kind="test: counter")
    code = pr.alloc_text(32)
    pr.write_code(code, struct.pack("<6I", 0xE59F000C, 0xE5901000, 0xE2811001, 0xE5801000, 0xE12FFF1E, counter))
    pr.kprobe("armload_sample_add", pre=code)
    pr.kretprobe("armload_sample_add", code)
    pr.ftrace_function("armload_sample_add", code)
    assert m.call("armload_sample_add", [2, 3]).retval == 5
    assert struct.unpack("<I", m.read(counter, 4))[0] == 3
    with pytest.raises(TypeError, match="callable or a code address"):
        pr.kprobe("armload_sample_add", pre="nope")


def test_a_kernel_function_armload_traps_is_refused_as_armloads_limit(kernel):
    m, pr = _machine(kernel)
    with pytest.raises(ProbeError, match=r"-95 \(-EOPNOTSUPP\).*armload traps calls to _raw_spin_lock"):
        pr.kprobe("_raw_spin_lock")
