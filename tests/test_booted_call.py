"""Calls into a module's functions from pid 1's kernel context of the booted kernel
(armload/emu/booted/call.py) and the one result type (armload/emu/booted/result.py)."""

import pytest

from conftest import BOOT_VMLINUZ, SYMVERS, sample
from armload.errors import ArmloadError
from armload.kernel.config import DEBIAN_ARMMP
from armload.kernel.provider import Kernel

DEVKIT = "devkit-arm-debug.ko"


@pytest.fixture
def run(booted_dir):
    from armload.emu.booted.modrun import BootedRun
    return BootedRun(BOOT_VMLINUZ, Kernel.from_files([SYMVERS, BOOT_VMLINUZ], DEBIAN_ARMMP), DEBIAN_ARMMP)


@pytest.fixture
def devkit(run):
    r = run.load(sample(DEVKIT), "count=2")
    assert (r.status, r.ret, r.function) == ("returned", 0, "init") and r.loader.identical
    return run


def test_int_arguments_and_the_signed_return_value(devkit):
    r = devkit.call("devkit_sum", 10)
    assert (r.status, r.ret, r.function, r.name) == ("returned", 10, "devkit_sum", "devkit")
    assert r.loader is None and r.instructions > 0 and r.oops == ""
    assert devkit.call("devkit_add", -7).ret == 0
    assert devkit.call("devkit_sum", 1).ret == -6                    # 0 + 1 - 7: r0 as a signed int
    assert devkit.call("devkit_sum", -1).ret == 6


def test_more_than_four_arguments_do_not_matter_to_a_one_argument_function(devkit):
    assert devkit.call("devkit_sum", 3, 0, 0, 0, 99, 98).ret == 3    # words 5 and 6 on the stack


def test_a_string_is_a_kmalloced_c_string(devkit):
    r = devkit.call("devkit_count_char", "banana", ord("a"))
    assert r.ret == 3 and r.args[0]["kind"] == "str" and r.args[0]["size"] == 7
    assert devkit.bk.read(r.args[0]["addr"], 7) == b"banana\0"
    assert devkit.call("devkit_count_char", b"aXa\0", ord("a")).ret == 2


def test_a_buffer_is_kernel_memory_read_back_after_the_call(devkit):
    from armload.emu.booted.call import Buffer
    buf = Buffer(32, b"\xff" * 32)
    r = devkit.call("devkit_describe", buf, len(buf))
    assert buf.text == "devkit/t0:2" and r.ret == len(buf.text)
    assert buf.bytes[:12] == b"devkit/t0:2\0" and buf.bytes[12:] == b"\xff" * 20
    a = buf.addr
    assert 0xC0000000 <= a and devkit.bk.call("ksize", a) >= 32      # the kernel's own slab object


def test_calls_share_the_kernels_state_and_its_deferred_work_runs(devkit):
    assert devkit.call("devkit_add_later", 40, 100).ret == 1        # schedule_delayed_work: queued
    assert devkit.call("devkit_sum", 1).ret == 1
    assert "devkit: deferred add 40" in " ".join(devkit.settle(300_000_000)["console"])
    assert devkit.call("devkit_sum", 1).ret == 41


def test_an_oops_in_a_call_is_the_kernels_and_pid1_is_dead_after_it(devkit):
    r = devkit.call("devkit_crash")
    assert (r.status, r.ret) == ("oops", None)
    assert "Unable to handle kernel NULL pointer dereference at virtual address 00000000" in r.oops
    assert "Internal error: Oops: 5 [#1] SMP ARM" in r.oops and "PC is at devkit_peek" in r.oops
    assert "devkit_crash" in r.oops
    again = devkit.call("devkit_sum", 1)
    assert again.status == "refused-dead" and "devkit: devkit_crash" in again.stopped
    assert devkit.load(sample("hello-arm.ko")).status == "refused-dead"
    with pytest.raises(ArmloadError, match="pid 1 died"):
        devkit.unload("devkit")


def test_an_oops_in_init_kills_pid1_too(run):
    assert run.load(sample("nullderef-arm.ko")).status == "oops"
    assert run.dead == "nullderef: init"
    assert run.load(sample("hello-arm.ko")).status == "refused-dead"


def test_the_budget_ends_a_call(devkit):
    r = devkit.call("devkit_sum", 1, budget=20)
    assert r.status == "budget" and "did not return within 20 instructions" in r.stopped


def test_unknown_functions_and_bad_arguments_are_refused(devkit):
    with pytest.raises(ArmloadError, match=r"no function 'nope' in devkit \(functions: .*devkit_sum"):
        devkit.call("nope")
    with pytest.raises(ArmloadError, match="cannot pass float"):
        devkit.call("devkit_sum", 1.5)
    with pytest.raises(ArmloadError, match="does not fit a 32-bit register"):
        devkit.call("devkit_sum", 1 << 32)
    with pytest.raises(ArmloadError, match="freed after init"):
        devkit.call("devkit_init")


def test_a_dependencys_function_is_called(run):
    assert run.load(sample("exporter-arm.ko")).ok and run.load(sample("importer-arm.ko")).ok
    r = run.call("armload_sample_add", 2, 3)
    assert (r.status, r.ret, r.name) == ("returned", 5, "exporter")


def test_the_results_dict_is_stable(devkit):
    d = devkit.call("devkit_sum", 2).to_dict()
    assert {"module", "path", "function", "status", "ret", "errno", "console", "oops", "instructions",
            "core_base", "init_base", "stopped", "reports", "decoded", "args", "loader_vs_kernel"} == set(d)
    assert d["loader_vs_kernel"] is None and d["errno"] is None and d["ret"] == 2
    e = devkit.call("devkit_add", 1)
    assert e.ret == 0 and devkit.call("devkit_sum", 1).summary() == "devkit: devkit_sum returned 2"
