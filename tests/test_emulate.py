"""Emulation: keystone fixtures (always) and the real sample modules (when the loader and samples exist)."""
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from emu_fixtures import build_module  # noqa: E402

from armload.emulate import Machine  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = os.path.join(ROOT, "sample_modules")
SYMVERS = os.path.join(SAMPLES, "Module.symvers")
EXTERNS = {"_printk": "func", "kmalloc": "func", "kfree": "func", "__gnu_mcount_nc": "func",
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
    assert [c.name for c in r.calls] == ["__gnu_mcount_nc", "_printk"]
    assert r.calls[1].args[1] == 42


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
    from armload.stubs import default_library
    src = {"init_module": """
        push {r4, lr}
        mov r0, #64
        mov r1, #0
        bl {kmalloc}
        cmp r0, #0
        mvneq r0, #11
        popeq {r4, pc}
        bl {kfree}
        mov r0, #0
        pop {r4, pc}
    """}
    mod, k = build_module(src, externs=EXTERNS)
    assert Machine(mod, k).run_init().retval == 0
    stubs = default_library()

    @stubs.handler("kmalloc", nargs=2)
    def no_memory(call):
        return 0
    mod, k = build_module(src, externs=EXTERNS)
    r = Machine(mod, k, stubs=stubs).run_init()
    assert r.retval == -12
    assert "ENOMEM" in r.summary()


def test_null_deref_report():
    mod, k = build_module({"init_module": "mov r3, #0\nldr r0, [r3, #8]\nbx lr"}, externs=EXTERNS)
    r = Machine(mod, k).run_init()
    assert r.status == "fault" and r.fault.kind == "null-deref"
    assert r.fault.access_addr == 8 and r.fault.access_type == "read"
    assert r.fault.pc_sym.startswith("init_module+0x4/")
    assert "[fixture]" in r.fault.pc_sym
    text = r.fault.format()
    assert "NULL pointer dereference at virtual address 00000008" in text and "r3 : 00000000" in text


def test_endless_loop_budget_and_timeout():
    mod, k = build_module({"init_module": "loop: add r0, r0, #1\nb loop"}, externs=EXTERNS)
    r = Machine(mod, k, budget=100_000).run_init()
    assert r.status == "budget" and r.instructions == 100_000
    assert "budget" in r.fault.message and r.fault.pc_sym.startswith("init_module+")
    r = Machine(mod, k, budget=0, timeout=0.2).run_init()
    assert r.status == "timeout"


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
        bl {kmalloc}
        str r0, [r0, #16]
        pop {r4, pc}"""}, externs=EXTERNS)
    r = Machine(mod, k).run_init()
    assert r.fault.kind == "heap-out-of-bounds" and "kmalloc" in r.fault.message
    mod, k = build_module({"init_module": """
        push {r4, lr}
        mov r0, #16
        mov r1, #0
        bl {kmalloc}
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
    assert Machine(mod, k).run_init().retval == 0


def test_call_named_function_with_args():
    mod, k = build_module({"init_module": "mov r0, #0\nbx lr", "add3": "add r0, r0, r1\nadd r0, r0, r2\nbx lr"},
                          externs=EXTERNS)
    r = Machine(mod, k).call("add3", [1, 2, 39])
    assert r.status == "returned" and r.retval == 42


def test_init_memory_freed_after_init():
    mod, k = build_module({"init_module": "mov r0, #0\nbx lr"}, externs=EXTERNS, init_section=True)
    mod.regions[0].init = True
    m = Machine(mod, k)
    assert m.run_init().retval == 0
    r = m.call(mod.init_addr, name="init_module again")
    assert r.fault.kind == "jump-unmapped"


# --- real samples (need the loader and sample_modules/*.ko) ---------------------------------
def _load(name, thumb, placement="window", *more):
    loader = pytest.importorskip("armload.loader")
    from armload.config import DEBIAN_ARMMP
    from armload.kernel import Kernel
    path = os.path.join(SAMPLES, f"{name}-{'thumb2' if thumb else 'arm'}.ko")
    if not os.path.exists(path):
        pytest.skip(f"{path} not built")
    cfg = DEBIAN_ARMMP.with_(thumb2=thumb)
    kernel = Kernel.from_files([SYMVERS] if os.path.exists(SYMVERS) else [], cfg)
    s = loader.Session(kernel, cfg, placement)
    return s.load(path), kernel


EXPECTED = {
    "hello": (0, ["hello: loaded, answer=42, greeting=world"]),
    "initcore": (0, ["initcore: checksum=78 mixed=2865785426"]),
    "kalloc": (0, ["kalloc: id=7 flags=0x5a name=kalloc-rec v3=3007 zeroed=0"]),
    "regdev": (0, ["regdev: registered misc minor 63"]),
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
    if placement == "vmalloc":
        # every kernel call goes through a PLT veneer
        assert all(int(b["plt"]) for b in mod.branches if mod.resolved.get(mod.sym_names[int(b["sym"])]))
    if name == "regdev":
        calls = [x["call"] for x in r.registrations]
        assert calls == ["misc_register", "platform_driver_register"]
        assert r.registrations[0]["name"] == "armload_regdev"
        assert r.registrations[1]["name"] == "armload-regdev"
    if name == "tailcall":
        assert [x["call"] for x in r.registrations] == ["platform_driver_register"]
        assert r.registrations[0]["name"] == "armload-tailcall"
    if name == "kalloc":
        assert not m.heap.live
    if r.ok:
        e = m.run_exit()
        assert e.status in ("returned", "no-function")


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


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "armload", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_cli_run_exit_status():
    pytest.importorskip("armload.loader")
    if not os.path.exists(os.path.join(SAMPLES, "hello-arm.ko")):
        pytest.skip("samples not built")
    p = _cli("run", "sample_modules/hello-arm.ko", "--trace")
    assert p.returncode == 0, p.stderr
    assert "[    0.000000] hello: loaded, answer=42, greeting=world" in p.stdout
    assert "call _printk(" in p.stdout
    assert "branches verified: 3/3" in p.stdout
    p = _cli("run", "sample_modules/enodev-thumb2.ko", "--thumb2")
    assert p.returncode == 1 and "-ENODEV" in p.stdout
    p = _cli("run", "sample_modules/nullderef-arm.ko")
    assert p.returncode == 1 and "NULL pointer dereference" in p.stdout and "Traceback" not in p.stderr
    p = _cli("run", "sample_modules/spin-arm.ko", "--budget", "100000")
    assert p.returncode == 1 and "budget" in p.stdout
    p = _cli("run", "sample_modules/tailcall-arm.ko", "--placement", "vmalloc", "--json")
    assert p.returncode == 0
    import json
    d = json.loads(p.stdout)
    assert d["ok"] and d["modules"][0]["run"]["retval"] == 0


# --- several modules in one machine ----------------------------------------------------------
def test_shared_kernel_function_runs_its_handler_once_per_call():
    # Two modules calling the same kernel function: one stub hook per machine, so each call runs
    # the handler exactly once (one hook per module used to run it once per mapped module).
    from armload.stubs import default_library
    stubs = default_library()
    seen = []

    @stubs.handler("some_func", nargs=1)
    def h(call):
        seen.append(call.arg(0))
        return call.arg(0) + 1
    ext = dict(EXTERNS, some_func="func")
    a, k = build_module({"init_module": "push {r4, lr}\nmov r0, #10\nbl {some_func}\npop {r4, pc}"},
                        externs=ext, name="moda")
    some_func = a.resolved["some_func"].addr
    # b also uses two kernel functions a does not, below and above some_func: the range of
    # b's new stubs spans a's
    b, _ = build_module({"init_module": "push {r4, lr}\nbl {low_func}\nmov r0, #20\nbl {some_func}\n"
                                        "sub r4, r0, #21\nbl {high_func}\nmov r0, r4\npop {r4, pc}"},
                        externs=dict(ext, low_func="func", high_func="func"),
                        extern_addrs={"some_func": some_func, "low_func": some_func - 0x100,
                                      "high_func": some_func + 0x100},
                        name="modb", base=0xBF100000)
    m = Machine([a, b], k, stubs=stubs)
    ra = m.run_init(a)
    rb = m.run_init(b)
    assert ra.retval == 11 and rb.retval == 0
    assert seen == [10, 20]
    assert [c.name for c in ra.calls] == ["some_func"]
    assert [c.name for c in rb.calls] == ["low_func", "some_func", "high_func"]


def test_modules_mapped_in_load_order_after_init_memory_is_freed():
    # a: all init memory at X. b: loaded at X (a's init memory, freed after a's init) and exports
    # b_func. c: calls b_func (resolved from module b): no kernel stub may be written there, and
    # c must not be mapped before b.
    from armload.model import ResolvedSymbol
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
    assert b_func & ~1 not in m._stub_at
    rc = m.run_init(c)                                   # maps b, then c
    assert [x.name for x in m.modules] == ["a", "b", "c"]
    assert rc.status == "returned" and rc.retval == 7, rc.fault and rc.fault.format()
    assert [x.name for x in rc.calls] == []              # b_func is module code, not a kernel call
    assert b_func & ~1 not in m._stub_at


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
