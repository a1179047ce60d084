"""Emulation without a kernel image: keystone fixtures and the sample modules, on Python models and
fallbacks (tests/test_emu_image.py runs the same samples on the real Debian kernel)."""
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from conftest import sample  # noqa: E402
from emu_fixtures import build_module  # noqa: E402

from armload.emu import Machine, default_library  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXTERNS = {"_printk": "func", "__kmalloc": "func", "kfree": "func", "__gnu_mcount_nc": "func",
           "memset": "func", "some_data": "data"}


def _hello(thumb):
    return build_module({
        "init_module": """
            push {r4, lr}
            push {lr}
            bl {__gnu_mcount_nc}
            movw r0, #{lo:msg}
            movt r0, #{hi:msg}
            mov r1, #42
            movw r2, #{lo:who}
            movt r2, #{hi:who}
            bl {plt:_printk}
            bl {helper}
            pop {r4, pc}
        """,
        "helper": "mov r0, #0\nbx lr",
    }, rodata={"msg": b"\x016hello: loaded, answer=%d, greeting=%s\n\0", "who": b"world\0"},
        externs=EXTERNS, thumb=thumb)


@pytest.mark.parametrize("thumb", [False, True])
def test_fixture_init_prints_and_returns_zero(thumb):
    mod, k = _hello(thumb)
    m = Machine(mod, k)
    r = m.run_init()
    assert r.status == "returned" and r.retval == 0 and r.ok
    assert r.log == ["hello: loaded, answer=42, greeting=world"]
    assert [(x.text, x.level) for x in m.log.records] == [("hello: loaded, answer=42, greeting=world", 6)]
    # without an image __gnu_mcount_nc is its real instruction sequence (no call record);
    # _printk is the Python fallback of real code
    assert [(c.name, c.cls) for c in r.calls] == [("_printk", "fallback")]
    assert r.calls[0].args[1] == 42
    assert r.calls[0].caller_sym.startswith("init_module+") and r.calls[0].caller_sym.endswith("[fixture]")
    # printk returns the stored record's length: no level prefix, no trailing newline (printk_sprint)
    assert r.calls[0].ret == len("hello: loaded, answer=42, greeting=world")


@pytest.mark.parametrize("thumb", [False, True])
def test_mcount_returns_to_caller_with_lr_restored(thumb):
    # push {lr}; bl __gnu_mcount_nc must come back with lr = the pushed value and sp restored
    mod, k = build_module({
        "init_module": """
            mov r4, sp
            mov r5, lr
            push {lr}
            bl {__gnu_mcount_nc}
            sub r0, r4, sp
            cmp r5, lr
            addne r0, r0, #100
            bx lr
        """ if not thumb else """
            mov r4, sp
            mov r5, lr
            push {lr}
            bl {__gnu_mcount_nc}
            mov r0, sp
            subs r0, r4, r0
            cmp r5, lr
            it ne
            addne r0, #100
            bx lr
        """}, externs={"__gnu_mcount_nc": "func"}, thumb=thumb)
    r = Machine(mod, k).run_init()
    assert r.status == "returned" and r.retval == 0


def test_kmalloc_failure_gives_enomem():
    src = {"init_module": """
        push {r4, lr}
        mov r0, #64
        mov r1, #0
        bl {__kmalloc}
        cmp r0, #0
        mvneq r0, #11
        popeq {r4, pc}
        bl {kfree}
        mov r0, #0
        pop {r4, pc}
    """}
    mod, k = build_module(src, externs=EXTERNS)
    m = Machine(mod, k)
    r = m.run_init()
    assert r.retval == 0 and [(c.name, c.cls) for c in r.calls] == [("__kmalloc", "model"), ("kfree", "model")]
    assert r.calls[0].args[:2] == [64, 0] and r.calls[1].args[0] == r.calls[0].ret != 0
    assert not m.leaks()
    lib = default_library()

    @lib.model("__kmalloc", subsystem="mm", nargs=2)
    def no_memory(call):
        return 0
    mod, k = build_module(src, externs=EXTERNS)
    r = Machine(mod, k, models=lib).run_init()
    assert r.retval == -12
    assert "ENOMEM" in r.summary()
    assert [(c.name, c.ret) for c in r.calls] == [("__kmalloc", 0)]
    # the override is private to `lib`
    mod, k = build_module(src, externs=EXTERNS)
    assert Machine(mod, k).run_init().retval == 0


def test_null_deref_report():
    mod, k = build_module({"init_module": "mov r3, #0\nldr r0, [r3, #8]\nbx lr"}, externs=EXTERNS)
    r = Machine(mod, k).run_init()
    assert r.status == "fault" and r.fault.kind == "null-deref"
    assert r.fault.access_addr == 8 and r.fault.access_type == "read"
    assert r.fault.pc_sym.startswith("init_module+0x4/")
    assert "[fixture]" in r.fault.pc_sym
    text = r.fault.format()
    assert "NULL pointer dereference at virtual address 00000008" in text and "r3 : 00000000" in text


def test_endless_loop_budget():
    mod, k = build_module({"init_module": "loop: add r0, r0, #1\nb loop"}, externs=EXTERNS)
    r = Machine(mod, k, budget=100_000).run_init()
    assert r.status == "budget" and r.instructions == 100_000
    assert "budget of 100,000 instructions" in r.fault.message and r.fault.pc_sym.startswith("init_module+")
    assert r.sim_ns == 100_000                       # the stated clock: 1 instruction = 1 ns
    r2 = Machine(mod, k, budget=100_000).run_init()
    assert (r2.status, r2.instructions, r2.fault.registers["r0"]) == ("budget", 100_000, r.fault.registers["r0"])
    # a budget never overshoots: an odd budget ends before the 2-instruction loop body that would cross it
    r = Machine(mod, k, budget=99_999).run_init()
    assert r.status == "budget" and r.instructions == 99_998


@pytest.mark.parametrize("thumb", [False, True])
def test_python_and_native_counters_agree(thumb, monkeypatch):
    # the C block hook and its Python twin (machines without a compiler) count identically
    import functools

    import armload.emu.machine as machine_mod
    from armload.emu.clock import Clock
    mod, k = build_module({"init_module": "mov r0, #0\nmovw r1, #1000\nloop: add r0, r0, #1\n"
                                          "subs r1, r1, #1\nbne loop\nbx lr"}, externs=EXTERNS, thumb=thumb)
    n = 2 + 3 * 1000 + 1

    def runs():
        m = Machine(mod, k)
        return m.clock.native, [(x.status, x.retval, x.instructions) for x in
                                (m.run_init(), Machine(mod, k, budget=n).run_init(),
                                 Machine(mod, k, budget=n - 1).run_init())]
    native, native_runs = runs()
    assert native, "the C counter did not build (cc missing?)"
    monkeypatch.setattr(machine_mod, "Clock", functools.partial(Clock, native=False))
    native, py_runs = runs()
    assert not native
    assert native_runs == py_runs
    assert native_runs[:2] == [("returned", 1000, n)] * 2
    assert native_runs[2][0] == "budget" and native_runs[2][2] < n


def test_budget_both_sides_of_the_bound():
    # 2 + 10 * 3 + 1 = 33 instructions: a budget of 33 completes, 32 does not
    mod, k = build_module({"init_module": "mov r0, #0\nmov r1, #10\nloop: add r0, r0, #1\nsubs r1, r1, #1\n"
                                          "bne loop\nbx lr"}, externs=EXTERNS)
    r = Machine(mod, k).run_init()
    assert (r.status, r.retval, r.instructions) == ("returned", 10, 33)
    r = Machine(mod, k, budget=33).run_init()
    assert (r.status, r.retval, r.instructions) == ("returned", 10, 33)
    r = Machine(mod, k, budget=32).run_init()
    assert r.status == "budget" and r.instructions <= 32 and r.retval is None


def test_write_to_rodata_and_jump_to_data_fault():
    mod, k = build_module({"init_module": """
        movw r3, #{lo:msg}
        movt r3, #{hi:msg}
        str r0, [r3]
        bx lr"""}, rodata={"msg": b"abcd"}, externs=EXTERNS)
    r = Machine(mod, k).run_init()
    assert r.fault.kind == "write-protect"
    mod, k = build_module({"init_module": """
        movw r3, #{lo:var}
        movt r3, #{hi:var}
        bx r3"""}, data={"var": b"\0" * 8}, externs=EXTERNS)
    r = Machine(mod, k).run_init()
    assert r.fault.kind == "exec-protect" and "var" in r.fault.pc_sym


def test_jump_to_unmapped():
    mod, k = build_module({"init_module": "movw r3, #0x1234\nmovt r3, #0x5678\nbx r3"}, externs=EXTERNS)
    r = Machine(mod, k).run_init()
    assert r.fault.kind == "jump-unmapped" and r.fault.pc == 0x56781234


def test_stack_overflow_is_a_fault():
    mod, k = build_module({"init_module": "loop: push {r0-r7}\nb loop"}, externs=EXTERNS)
    r = Machine(mod, k).run_init()
    assert r.status == "fault" and r.fault.kind == "stack-overflow"


def test_heap_overrun_and_use_after_free():
    mod, k = build_module({"init_module": """
        push {r4, lr}
        mov r0, #16
        mov r1, #0
        bl {__kmalloc}
        str r0, [r0, #16]
        pop {r4, pc}"""}, externs=EXTERNS)
    r = Machine(mod, k).run_init()
    assert r.fault.kind == "heap-out-of-bounds" and r.fault.access_type == "write"
    assert "kmalloc object" in r.fault.message and "+0x10 (size 16, allocated by init_module+" in r.fault.message
    mod, k = build_module({"init_module": """
        push {r4, lr}
        mov r0, #16
        mov r1, #0
        bl {__kmalloc}
        mov r4, r0
        bl {kfree}
        ldr r0, [r4]
        pop {r4, pc}"""}, externs=EXTERNS)
    r = Machine(mod, k).run_init()
    assert r.fault.kind == "use-after-free"


def test_kernel_data_symbol_is_zeroed_memory():
    mod, k = build_module({"init_module": """
        movw r3, #{lo:some_data}
        movt r3, #{hi:some_data}
        ldr r0, [r3, #4]
        str r3, [r3]
        bx lr"""}, externs=EXTERNS)
    m = Machine(mod, k)
    assert m.run_init().retval == 0
    assert "kernel data some_data is zero-filled simulated memory (no kernel image)" in m.notes
    assert m.notes[0].startswith("current is a zeroed task_struct")


def test_call_named_function_with_args():
    mod, k = build_module({"init_module": "mov r0, #0\nbx lr", "add3": "add r0, r0, r1\nadd r0, r0, r2\nbx lr"},
                          externs=EXTERNS)
    r = Machine(mod, k).call("add3", [1, 2, 39])
    assert r.status == "returned" and r.retval == 42


def test_no_function_status():
    mod, k = build_module({"init_module": "mov r0, #0\nbx lr", "bye": "bx lr"}, externs=EXTERNS)
    m = Machine(mod, k)
    r = m.run_exit()                              # no cleanup_module: nothing to run, not a failure
    assert (r.status, r.ok, r.calls, r.instructions) == ("no-function", True, [], 0)
    assert r.summary() == "fixture: no cleanup_module function"
    mod, k = build_module({"init_module": "mov r0, #0\nbx lr", "bye": "mov r0, #0\nbx lr"}, externs=EXTERNS,
                          exit="bye")
    assert Machine(mod, k).run_exit().status == "returned"


def test_init_memory_freed_after_init():
    mod, k = build_module({"init_module": "mov r0, #0\nbx lr"}, externs=EXTERNS, init_section=True)
    mod.regions[0].init = True
    m = Machine(mod, k)
    assert m.run_init().retval == 0
    r = m.call(mod.init_addr, name="init_module again")
    assert r.fault.kind == "jump-unmapped"


# --- real samples (need the loader and sample_modules/*.ko) ---------------------------------
def _load(name, thumb, placement="window", *more):
    from armload.loader import session as loader
    from armload.kernel.config import DEBIAN_ARMMP
    from armload.kernel.provider import Kernel
    path = sample(f"{name}-{'thumb2' if thumb else 'arm'}.ko")
    cfg = DEBIAN_ARMMP.with_(thumb2=thumb)
    kernel = Kernel.from_files([sample("Module.symvers")], cfg)
    s = loader.Session(kernel, cfg, placement)
    return s.load(path), kernel


EXPECTED = {
    "hello": (0, ["hello: loaded, answer=42, greeting=world"]),
    "initcore": (0, ["initcore: checksum=78 mixed=2865785426"]),
    "kalloc": (0, ["kalloc: id=7 flags=0x5a name=kalloc-rec v3=3007 zeroed=0"]),
    "regdev": (0, ["regdev: registered misc minor 127"]),   # drivers/char/misc.c: first dynamic minor
    "enodev": (-19, ["enodev: no device found, giving up"]),
    "tailcall": (0, []),
}


@pytest.mark.parametrize("placement", ["window", "vmalloc"])
@pytest.mark.parametrize("thumb", [False, True])
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_sample_runs(name, thumb, placement):
    mod, kernel = _load(name, thumb, placement)
    m = Machine(mod, kernel)
    r = m.run_init()
    ret, log = EXPECTED[name]
    assert r.status == "returned", r.fault and r.fault.format()
    assert r.retval == ret
    assert r.log == log
    # no image: real kernel code runs as Python fallbacks, everything else as models
    for c in r.calls:
        assert c.cls == ("fallback" if c.name in ("_printk", "strscpy") else "model"), c.format()
    if placement == "vmalloc":
        # every kernel call goes through a PLT veneer
        assert all(int(b["plt"]) for b in mod.branches if mod.resolved.get(mod.sym_names[int(b["sym"])]))
    if name == "regdev":
        calls = [x["call"] for x in r.registrations]
        assert calls == ["misc_register", "platform_driver_register"]
        assert r.registrations[0]["name"] == "armload_regdev" and r.registrations[0]["minor"] == 127
        assert r.registrations[1]["name"] == "armload-regdev"
    if name == "tailcall":
        assert [x["call"] for x in r.registrations] == ["platform_driver_register"]
        assert r.registrations[0]["name"] == "armload-tailcall"
    if name == "kalloc":
        assert not m.heap.live
    if r.ok:
        e = m.run_exit()
        assert e.status in ("returned", "no-function"), e.fault and e.fault.format()


@pytest.mark.parametrize("thumb", [False, True])
def test_sample_nullderef(thumb):
    mod, kernel = _load("nullderef", thumb)
    r = Machine(mod, kernel).run_init()
    assert r.status == "fault" and r.fault.kind == "null-deref"
    assert r.fault.pc_sym.startswith("nullderef_init+") and r.fault.pc_sym.endswith("[nullderef]")
    assert r.log == ["nullderef: about to read *NULL"]
    assert r.fault.thumb == thumb


@pytest.mark.parametrize("thumb", [False, True])
def test_sample_spin(thumb):
    mod, kernel = _load("spin", thumb)
    r = Machine(mod, kernel, budget=200_000).run_init()
    assert r.status == "budget" and r.fault.pc_sym.startswith("spin_init+")
    assert r.log == ["spin: spinning forever"] and 199_000 < r.instructions <= 200_000
    r2 = Machine(mod, kernel, budget=200_000).run_init()
    assert (r2.status, r2.instructions, r2.fault.pc) == (r.status, r.instructions, r.fault.pc)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "armload", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


# --- several modules in one machine ----------------------------------------------------------
def test_shared_kernel_function_runs_its_handler_once_per_call():
    # Two modules calling the same kernel function: one trap per machine, so each call runs
    # the model exactly once (one hook per module used to run it once per mapped module).
    lib = default_library()
    seen = []

    @lib.model("some_func", subsystem="test", nargs=1)
    def h(call):
        seen.append(call.arg(0))
        return call.arg(0) + 1
    ext = dict(EXTERNS, some_func="func")
    a, k = build_module({"init_module": "push {r4, lr}\nmov r0, #10\nbl {some_func}\npop {r4, pc}"},
                        externs=ext, name="moda")
    some_func = a.resolved["some_func"].addr
    # b also uses two kernel functions a does not, below and above some_func: the range of
    # b's new traps spans a's
    b, _ = build_module({"init_module": "push {r4, lr}\nbl {low_func}\nmov r0, #20\nbl {some_func}\n"
                                        "sub r4, r0, #21\nbl {high_func}\nmov r0, r4\npop {r4, pc}"},
                        externs=dict(ext, low_func="func", high_func="func"),
                        extern_addrs={"some_func": some_func, "low_func": some_func - 0x100,
                                      "high_func": some_func + 0x100},
                        name="modb", base=0xBF100000)
    lib.returns("low_func", 0, subsystem="test")
    lib.returns("high_func", 0, subsystem="test")
    m = Machine([a, b], k, models=lib)
    ra = m.run_init(a)
    rb = m.run_init(b)
    assert ra.retval == 11 and rb.retval == 0
    assert seen == [10, 20]
    assert [c.name for c in ra.calls] == ["some_func"]
    assert [c.name for c in rb.calls] == ["low_func", "some_func", "high_func"]


def test_modules_mapped_in_load_order_after_init_memory_is_freed():
    # a: all init memory at X. b: loaded at X (a's init memory, freed after a's init) and exports
    # b_func. c: calls b_func (resolved from module b): no kernel trap may be written there, and
    # c must not be mapped before b.
    from armload.loader.model import ResolvedSymbol
    base = 0xBF000000
    a, k = build_module({"init_module": "mov r0, #0\nbx lr"}, externs=EXTERNS, name="a", init_section=True)
    a.regions[0].init = True
    b, _ = build_module({"init_module": "mov r0, #0\nbx lr", "b_func": "mov r0, #7\nbx lr"},
                        externs=EXTERNS, name="b", base=base)
    b_func = next(s.addr for s in b.symbols if s.name == "b_func")
    c, _ = build_module({"init_module": "push {r4, lr}\nbl {b_func}\npop {r4, pc}"},
                        externs=dict(EXTERNS, b_func="func"), extern_addrs={"b_func": b_func},
                        name="c", base=0xBF100000)
    c.resolved["b_func"] = ResolvedSymbol("b_func", b_func, "module:b", "func")
    assert a.regions[0].base == b.regions[0].base
    m = Machine([a, b, c], k)
    assert m.modules == [] and len(m.pending) == 3      # nothing mapped before it runs
    assert m.run_init(a).retval == 0                     # frees a's init memory
    assert [x.name for x in m.modules] == ["a"]
    rc = m.run_init(c)                                   # maps b, then c
    assert [x.name for x in m.modules] == ["a", "b", "c"]
    assert rc.status == "returned" and rc.retval == 7, rc.fault and rc.fault.format()
    assert [x.name for x in rc.calls] == []              # b_func is module code, not a kernel call
    assert bytes(m.uc.mem_read(b_func & ~1, 8)) == b.read(b_func & ~1, 8)   # b's code, untouched


def test_module_in_unfreed_init_memory_is_not_mapped():
    import pytest as _pt
    from armload.errors import EmulationError
    a, k = build_module({"init_module": "mov r0, #-19\nbx lr"}, externs=EXTERNS, name="a", init_section=True)
    a.regions[0].init = True
    b, _ = build_module({"init_module": "mov r0, #0\nbx lr"}, externs=EXTERNS, name="b")
    m = Machine([a, b], k)
    assert m.run_init(a).retval == -19                   # init failed: its memory is not freed
    with _pt.raises(EmulationError, match="init memory of a"):
        m.run_init(b)
    m.free_init_memory(a)                                # public API (corpus check uses it)
    assert m.run_init(b).retval == 0
