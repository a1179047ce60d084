"""Calls into a module's functions from pid 1's kernel context of the booted kernel
(armload/emu/booted/call.py) and the one result type (armload/emu/booted/result.py)."""

import pytest

from testinputs import sample
from armload.errors import ArmloadError

DEVKIT = "devkit-arm-debug.ko"


@pytest.fixture
def devkit_run(run):
    r = run.load(sample(DEVKIT), "count=2")
    assert (r.status, r.ret, r.function) == ("returned", 0, "init") and r.loader.identical
    return run


def test_int_arguments_and_the_signed_return_value(devkit_run):
    r = devkit_run.call("devkit_sum", 10)
    assert (r.status, r.ret, r.function, r.name) == ("returned", 10, "devkit_sum", "devkit")
    assert r.loader is None and r.instructions > 0 and r.oops == ""
    assert devkit_run.call("devkit_add", -7).ret == 0
    assert devkit_run.call("devkit_sum", 1).ret == -6                    # 0 + 1 - 7: r0 as a signed int
    assert devkit_run.call("devkit_sum", -1).ret == 6


def test_more_than_four_arguments_do_not_matter_to_a_one_argument_function(devkit_run):
    assert devkit_run.call("devkit_sum", 3, 0, 0, 0, 99, 98).ret == 3    # words 5 and 6 on the stack


def test_a_string_is_a_kmalloced_c_string(devkit_run):
    r = devkit_run.call("devkit_count_char", "banana", ord("a"))
    assert r.ret == 3 and r.args[0]["kind"] == "str" and r.args[0]["size"] == 7
    assert devkit_run.bk.read(r.args[0]["addr"], 7) == b"banana\0"
    assert devkit_run.call("devkit_count_char", b"aXa\0", ord("a")).ret == 2


def test_a_buffer_is_kernel_memory_read_back_after_the_call(devkit_run):
    from armload.emu.booted.call import Buffer
    buf = Buffer(32, b"\xff" * 32)
    r = devkit_run.call("devkit_describe", buf, len(buf))
    assert buf.text == "devkit/t0:2" and r.ret == len(buf.text)
    assert buf.bytes[:12] == b"devkit/t0:2\0" and buf.bytes[12:] == b"\xff" * 20
    a = buf.addr
    assert 0xC0000000 <= a and devkit_run.bk.call("ksize", a) >= 32      # the kernel's own slab object


def test_calls_share_the_kernels_state_and_its_deferred_work_runs(devkit_run):
    assert devkit_run.call("devkit_add_later", 40, 100).ret == 1        # schedule_delayed_work: queued
    assert devkit_run.call("devkit_sum", 1).ret == 1
    assert "devkit: deferred add 40" in " ".join(devkit_run.settle(300_000_000)["console"])
    assert devkit_run.call("devkit_sum", 1).ret == 41


def test_an_oops_in_a_call_is_the_kernels_and_pid1_is_dead_after_it(devkit_run):
    r = devkit_run.call("devkit_crash")
    assert (r.status, r.ret) == ("oops", None)
    assert "Unable to handle kernel NULL pointer dereference at virtual address 00000000" in r.oops
    assert "Internal error: Oops: 5 [#1] SMP ARM" in r.oops and "PC is at devkit_peek" in r.oops
    assert "devkit_crash" in r.oops
    again = devkit_run.call("devkit_sum", 1)
    assert again.status == "refused-dead" and "devkit: devkit_crash" in again.stopped
    assert devkit_run.load(sample("hello-arm.ko")).status == "refused-dead"
    with pytest.raises(ArmloadError, match="pid 1 died"):
        devkit_run.unload("devkit")


def test_an_oops_in_init_kills_pid1_too(run):
    assert run.load(sample("nullderef-arm.ko")).status == "oops"
    assert run.dead == "nullderef: init"
    assert run.load(sample("hello-arm.ko")).status == "refused-dead"


def test_the_budget_ends_a_call(devkit_run):
    r = devkit_run.call("devkit_sum", 1, budget=20)
    assert r.status == "budget" and "did not return within 20 instructions" in r.stopped


def test_unknown_functions_and_bad_arguments_are_refused(devkit_run):
    with pytest.raises(ArmloadError, match=r"no function 'nope' in devkit \(functions: .*devkit_sum"):
        devkit_run.call("nope")
    with pytest.raises(ArmloadError, match="cannot pass float"):
        devkit_run.call("devkit_sum", 1.5)
    with pytest.raises(ArmloadError, match="does not fit a 32-bit register"):
        devkit_run.call("devkit_sum", 1 << 32)
    with pytest.raises(ArmloadError, match="freed after init"):
        devkit_run.call("devkit_init")


def test_a_dependencys_function_is_called(run):
    assert run.load(sample("exporter-arm.ko")).ok and run.load(sample("importer-arm.ko")).ok
    r = run.call("armload_sample_add", 2, 3)
    assert (r.status, r.ret, r.name) == ("returned", 5, "exporter")


def test_the_results_dict_is_stable(devkit_run):
    d = devkit_run.call("devkit_sum", 2).to_dict()
    assert {"module", "path", "function", "status", "ret", "errno", "console", "oops", "instructions",
            "core_base", "init_base", "stopped", "reports", "decoded", "args", "loader_vs_kernel"} == set(d)
    assert d["loader_vs_kernel"] is None and d["errno"] is None and d["ret"] == 2
    e = devkit_run.call("devkit_add", 1)
    assert e.ret == 0 and devkit_run.call("devkit_sum", 1).summary() == "devkit: devkit_sum returned 2"


# --- the call path's parts, in this process (a deliberate bug in any of them turns these red) ---
def test_parse_arg_reads_each_form_and_its_bounds():
    from armload.emu.booted.call import MAX_BUF, Buffer, parse_arg
    assert parse_arg("42") == 42 and parse_arg("-1") == -1 and parse_arg("0x10") == 16 and parse_arg(7) == 7
    assert parse_arg("s:banana") == "banana" and parse_arg("s:") == ""
    b = parse_arg("b:00ff10")
    assert isinstance(b, Buffer) and b.bytes == b"\x00\xff\x10" and len(b) == 3
    one, top = parse_arg("buf:1"), parse_arg(f"buf:{MAX_BUF}")
    assert one.bytes == b"\0" and len(top) == MAX_BUF and parse_arg("buf:0x10").bytes == bytes(16)
    for bad, why in (("buf:0", "the size must be 1..1048576"), (f"buf:{MAX_BUF + 1}", "the size must be 1..1048576"),
                     ("buf:x", "buf:N takes a size, e.g. buf:64"), ("b:zz", "b: takes hex digits, e.g. b:00ff10"),
                     ("B:00", "an integer, s:TEXT, b:HEX or buf:N"), ("twelve", "an integer, s:TEXT, b:HEX or buf:N")):
        with pytest.raises(ArmloadError, match=f"bad (buffer )?argument '{bad}': " + why.replace(".", r"\.")):
            parse_arg(bad)


def test_a_buffer_before_any_call():
    from armload.emu.booted.call import Buffer
    b = Buffer(4)
    assert (b.bytes, len(b), b.addr, b._bk) == (b"\0" * 4, 4, 0, None)
    assert Buffer(2, b"xyz").bytes == b"xyz" and Buffer(data=b"ab\0cd").text == "ab"


class _FakeKernel:
    """What place() uses of a BootedKernel: kmalloc and write (to see sizes and bytes)."""
    def __init__(self, fail=False):
        self.sizes, self.writes, self.fail, self.next = [], {}, fail, 0xC1000000

    def kmalloc(self, n):
        self.sizes.append(n)
        if self.fail:
            return 0
        self.next += 0x100
        return self.next

    def write(self, addr, data):
        self.writes[addr] = data


def test_place_words_records_and_the_register_bounds():
    from armload.emu.booted.call import Buffer, place
    fk = _FakeKernel()
    buf = Buffer(3, b"abc")
    words, recs = place(fk, [True, -1, (1 << 32) - 1, -(1 << 31), "hi", b"", buf])
    assert words[:4] == [1, 0xFFFFFFFF, 0xFFFFFFFF, 0x80000000]
    assert recs[:4] == [{"kind": "int", "value": 1}, {"kind": "int", "value": -1},
                        {"kind": "int", "value": (1 << 32) - 1}, {"kind": "int", "value": -(1 << 31)}]
    assert [r["kind"] for r in recs[4:]] == ["str", "bytes", "buffer"] and [r["size"] for r in recs[4:]] == [3, 0, 3]
    assert fk.sizes == [3, 1, 3]                       # an empty copy still gets a 1-byte object
    assert fk.writes[words[4]] == b"hi\0" and fk.writes[words[6]] == b"abc" and buf.addr == words[6] and buf._bk is fk
    for v in (1 << 32, -(1 << 31) - 1):
        with pytest.raises(ArmloadError, match=f"argument {v}: does not fit a 32-bit register"):
            place(fk, [v])
    with pytest.raises(ArmloadError, match=r"^__kmalloc\(5\) for an argument returned NULL in the booted kernel$"):
        place(_FakeKernel(fail=True), ["abcd"])


def test_find_function_newest_module_first_and_the_refusal_lists_functions():
    from types import SimpleNamespace as NS
    from armload.emu.booted.call import find_function

    def sym(name, stype="func", section=".text"):
        return NS(name=name, stype=stype, section=section)
    old = NS(name="old", symbols=[sym("f"), sym("g")])
    new = NS(name="new", symbols=[sym("f"), sym("asm_fn", "notype"), sym("obj", "object"), sym("undef", section=None)])
    session = NS(modules=[old, new])
    assert find_function(session, "f")[0] is new and find_function(session, "g")[0] is old
    assert find_function(session, "asm_fn")[1].stype == "notype"       # an assembly function's symbol
    for name in ("obj", "undef"):
        with pytest.raises(ArmloadError, match=rf"^call {name}: no function '{name}' in old, new \(functions: f, g\)$"):
            find_function(session, name)
    hidden = NS(name="m", symbols=[sym("__x"), sym("$a"), sym("shown")])
    with pytest.raises(ArmloadError, match=r"in m \(functions: shown\)$"):
        find_function(NS(modules=[hidden]), "nope")
    with pytest.raises(ArmloadError, match=r"in no module \(functions: \)$"):
        find_function(NS(modules=[]), "nope")
    twenty = NS(name="m", symbols=[sym(f"f{i:02}") for i in range(20)])
    msg = "in m \\(functions: " + ", ".join(f"f{i:02}" for i in range(20)) + "\\)$"
    with pytest.raises(ArmloadError, match=msg):
        find_function(NS(modules=[twenty]), "nope")
    twenty.symbols.append(sym("f20"))
    with pytest.raises(ArmloadError, match=msg.replace("\\)$", ", \\.\\.\\.\\)$")):
        find_function(NS(modules=[twenty]), "nope")


def test_end_of_names_every_way_code_does_not_return():
    from armload.emu.booted.call import end_of
    assert end_of("oops", []) == "oops"
    for cls in ("panic", "restart", "halt", "power-off", "soft-lockup", "hang", "time-budget"):
        assert end_of(f"{cls}: why", ["x"]) == cls
    assert end_of("time-budget: 30 s", ["INFO: task init:1 blocked for more than 20 seconds."]) == "hung-task"
    assert end_of("virtual 0xd096f000 is not mapped", []) == "stopped"


def test_a_panic_in_a_call_is_a_panic_and_pid1_is_dead(devkit_run):
    """run_code's classes are the watch's (hostile.py), as for a load: a panic is a panic, with its text."""
    from armload.emu.booted.call import place, run_code
    bk = devkit_run.bk
    words, _ = place(bk, ["armload test panic"])
    r = run_code(bk, bk.image.symbols["panic"], words, name="k", path="/k", function="panic")
    assert (r.status, r.ret, r.name, r.path, r.function) == ("panic", None, "k", "/k", "panic")
    assert r.stopped.startswith("panic: ") and "Kernel panic - not syncing: armload test panic" in r.oops
    assert r.instructions > 0 and r.console[0] == r.oops.split("\n")[0]


def test_the_wall_clock_net_ends_a_call_as_stopped(devkit_run):
    from armload.emu.booted.call import run_code
    bk = devkit_run.bk
    i0 = bk.insns
    r = run_code(bk, bk.image.symbols["__loop_delay"], [0xFFFFFFFF], name="k", path="/k", function="d", timeout=0.2)
    assert (r.status, r.ret, r.oops) == ("stopped", None, "")
    assert r.stopped == "the wall-clock safety net of 0.2 s stopped it" and r.instructions == bk.insns - i0 > 0
    assert bk.m.wall_stop is None                      # cleared when the net is put away
    r = devkit_run.call("devkit_sum", 1, timeout=30)       # the timeout reaches run_code; the kernel goes on
    assert (r.status, r.ret, r.path) == ("returned", 1, sample(DEVKIT))


def test_a_refused_dead_call_and_the_buffer_record(devkit_run):
    from armload.emu.booted.call import Buffer
    buf = Buffer(16)
    r = devkit_run.call("devkit_describe", buf, 16)
    assert r.args == [{"kind": "buffer", "addr": buf.addr, "size": 16, "hex": buf.bytes.hex()},
                      {"kind": "int", "value": 16}]
    assert devkit_run.call("devkit_crash").status == "oops" and devkit_run.dead == "devkit: devkit_crash"
    d = devkit_run.call("devkit_sum", 1)
    assert (d.name, d.path, d.ret, d.status, d.console, d.oops, d.instructions, d.function) == \
        ("devkit", sample(DEVKIT), None, "refused-dead", [], "", 0, "devkit_sum")
    assert d.stopped == "pid 1 died in an oops in devkit: devkit_crash: no further call runs in this kernel"
