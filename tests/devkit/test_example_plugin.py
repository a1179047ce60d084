"""Example: unit tests for a kernel module, written like tests for ordinary Python code.

The `load_module` fixture comes from armload's pytest plugin (installed with the package, entry
point `pytest11`). Each test runs in its own forked copy of the Debian kernel booted in Unicorn;
the kernel's own load_module loads the module and runs its init. The module under test is
sample_modules/src/devkit/devkit.c: parameters, a list under a spinlock, exported functions, a NULL
dereference behind `crash=1`.

Run just this file:  .venv/bin/python -m pytest tests/devkit/test_example_plugin.py -v
"""
import errno
import os

import pytest

from armload import ModuleOops

DEVKIT = "sample_modules/devkit-arm-debug.ko"
PYTEST_PID = os.getpid()                       # collection runs in the pytest process


@pytest.fixture
def devkit(load_module):
    dk = load_module(DEVKIT, params={"count": 2})
    assert dk.init() == 0
    return dk


def test_init_fills_the_list(devkit):
    assert devkit.log[-1] == "devkit: loaded (sum 1)"          # items 0 and 1, weight 1
    assert devkit.call("devkit_sum", 10) == 10


def test_calls_share_state(devkit):
    assert devkit.call("devkit_add", 5) == 0
    assert devkit.call("devkit_add", -7) == 0
    assert devkit.call("devkit_sum", 2) == 2 * (0 + 1 + 5 - 7)


def test_nothing_leaks_between_tests(devkit):
    assert devkit.call("devkit_sum", 1) == 1                   # test_calls_share_state's adds are gone


def test_each_test_runs_in_a_forked_child(devkit):
    assert os.getpid() != PYTEST_PID and os.getppid() == PYTEST_PID


def test_two_handles_are_two_kernels(load_module):
    a, b = load_module(DEVKIT), load_module(DEVKIT)
    assert a.init() == 0 and b.init() == 0                     # not -EEXIST: each its own kernel
    assert a.call("devkit_add", 5) == 0 and b.call("devkit_sum", 1) == 3


def test_strings_and_out_buffers(devkit):
    assert devkit.call("devkit_count_char", "banana", ord("a")) == 3
    buf = devkit.buffer(32)
    n = devkit.call("devkit_describe", buf, len(buf))
    assert buf.text == "devkit/t0:2" and n == len(buf.text)


def test_parameters(load_module):
    dk = load_module(DEVKIT, params={"count": 3, "weights": [2, 3], "label": "dev", "verbose": True})
    assert dk.init() == 0
    assert dk.param("weights") == "2,3" and dk.param("label") == "dev" and dk.param("count") == "3"
    assert "devkit: dev/t0: 3 items, 2 weights" in dk.log
    assert dk.call("devkit_sum", 1) == 0 * 2 + 1 * 3 + 2 * 2


def test_memory_and_structs(devkit):
    head_next, head_prev = devkit.struct("devkit_list", "II")  # struct list_head
    value = devkit.s32(head_next + 8)                          # struct devkit_item { list_head; int value; }
    assert value == 0 and devkit.struct(head_prev, "IIi")[2] == 1
    devkit.put_struct(head_prev + 8, "i", 40)                  # poke the last item's value
    assert devkit.call("devkit_sum", 1) == 40


def test_allocation_failure_is_handled(load_module):
    dk = load_module(DEVKIT, params={"count": 4})
    dk.fail_kmalloc(nth=3)                                     # the module's third kmalloc returns NULL
    assert dk.init() == -errno.ENOMEM
    assert "devkit: loaded" not in " ".join(dk.log)
    dk = load_module(DEVKIT, params={"count": 3})
    dk.fail_kmalloc(nth=4)                                     # init makes three: none fails
    assert dk.init() == 0
    assert dk.call("devkit_add", 1) == -errno.ENOMEM           # the fourth, made by a later call
    assert dk.call("devkit_add", 1) == 0                       # count=1: only that one


def test_replace_a_kernel_function(load_module):
    dk = load_module(DEVKIT)
    sizes = []

    def kmalloc_trace(call):                                   # void *kmalloc_trace(cache, flags, size)
        sizes.append(call.arg(2))
        return 0

    dk.replace("kmalloc_trace", kmalloc_trace)
    assert dk.init() == -errno.ENOMEM and sizes == [12]


def test_returns_injects_an_error(devkit):
    devkit.returns("kmalloc_trace", 0)
    assert devkit.call("devkit_add", 1) == -errno.ENOMEM


def test_a_crash_is_the_kernels_oops(load_module):
    dk = load_module(DEVKIT, params={"crash": 1})
    with pytest.raises(ModuleOops) as e:
        dk.init()
    oops = e.value.result.oops
    assert "Unable to handle kernel NULL pointer dereference at virtual address 00000000" in oops
    assert "PC is at devkit_peek" in oops and "devkit_crash" in oops
    assert "Internal error: Oops: 5 [#1] SMP ARM" in str(e.value)


def test_cleanup_runs_on_rmmod(devkit):
    assert devkit.exit() == 0
    assert devkit.log[-1] == "devkit: unloaded"


def test_deferred_work_runs_when_pending_work_is_run(devkit):
    assert devkit.call("devkit_add_later", 40, 100) == 1       # schedule_delayed_work: queued
    assert devkit.call("devkit_sum", 1) == 1                   # not yet: it is due in 100 ms
    devkit.run_pending(300)                                    # simulated time passes, the kernel runs it
    assert devkit.log[-1] == "devkit: deferred add 40" and devkit.call("devkit_sum", 1) == 41
