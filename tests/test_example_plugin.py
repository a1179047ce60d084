"""Example: unit tests for a kernel module, written like tests for ordinary Python code.

The `load_module` fixture comes from armload's pytest plugin (installed with the package, entry
point `pytest11`). Each call gives a fresh emulated machine with the module loaded into the
Debian kernel image (or armload's built-in kernel when the image is absent). The module under
test is sample_modules/src/devkit/devkit.c: parameters, a list under a spinlock, exported
functions, a NULL dereference behind `crash=1`.

Run just this file:  .venv/bin/python -m pytest tests/test_example_plugin.py -v
"""
import errno

import pytest
from conftest import devkit_line

from armload import ModuleOops

DEVKIT = "sample_modules/devkit-arm-debug.ko"


@pytest.fixture
def devkit(load_module):
    dk = load_module(DEVKIT, params={"count": 2})
    assert dk.init() == 0
    return dk


def test_init_fills_the_list(devkit):
    assert devkit.log[-1] == "devkit: loaded (sum 1)"          # items 0 and 1, weight 1
    assert devkit.call("devkit_sum", 10) == 10
    assert len(devkit.called("kmalloc_trace")) == 2


def test_calls_share_state(devkit):
    assert devkit.call("devkit_add", 5) == 0
    assert devkit.call("devkit_add", -7) == 0
    assert devkit.call("devkit_sum", 2) == 2 * (0 + 1 + 5 - 7)


def test_strings_and_out_buffers(devkit):
    assert devkit.call("devkit_count_char", "banana", ord("a")) == 3
    buf = devkit.buffer(32)
    n = devkit.call("devkit_describe", buf, len(buf))
    assert buf.text == "devkit/t0:2" and n == len(buf.text)


def test_parameters(load_module):
    dk = load_module(DEVKIT, params={"count": 3, "weights": [2, 3], "label": "dev", "verbose": True})
    assert dk.init() == 0
    assert dk.param("weights") == [2, 3] and dk.param("label") == "dev"
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
    dk.fail_kmalloc(nth=3)
    assert dk.init() == -errno.ENOMEM
    assert dk.leaks() == []                                    # the two items it got were freed


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


def test_a_crash_is_an_oops_with_a_backtrace(load_module):
    dk = load_module(DEVKIT, params={"crash": 1})
    with pytest.raises(ModuleOops) as e:
        dk.init()
    oops = e.value.result.fault
    assert oops.kind == "null-deref"
    assert [(f["sym"].split("+")[0], f["line"]) for f in oops.backtrace] == [
        ("devkit_peek", devkit_line("return *p + 1;")), ("devkit_crash", devkit_line("v = devkit_peek(devkit_null);"))]
    assert "devkit_lock" in oops.locks[0]
    assert "Unable to handle kernel NULL pointer dereference" in str(e.value)


def test_cleanup_frees_everything(devkit):
    devkit.exit()
    assert devkit.log[-1] == "devkit: unloaded" and devkit.leaks() == []


def test_deferred_work_runs_when_pending_work_is_run(devkit):
    assert devkit.call("devkit_add_later", 40, 100) == 1       # schedule_delayed_work: queued
    assert devkit.call("devkit_sum", 1) == 1                   # not yet: nothing runs by itself
    done = devkit.run_pending()                                # 100 ms of simulated time pass
    assert [d["status"] for d in done] == ["returned"]
    assert devkit.log[-1] == "devkit: deferred add 40" and devkit.call("devkit_sum", 1) == 41


def test_coverage_of_a_test(load_module, tmp_path):
    dk = load_module(DEVKIT, coverage=True)
    assert dk.init() == 0 and dk.call("devkit_count_char", "aXa", ord("a")) == 2
    cov = dk.coverage(lcov=str(tmp_path / "devkit.info"))
    assert cov.functions_hit == 4 and cov.ran < cov.instructions    # init, add, sum, count_char
    assert cov.summary().startswith("coverage: devkit: ")
    assert (tmp_path / "devkit.info").read_text().count("end_of_record") >= 1
