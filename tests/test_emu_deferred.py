"""Simulated time and deferred work with the real Debian kernel image: the `deferred` sample
(timer, work, delayed work, tasklet, kthread, completion, msleep)."""
import os

import pytest

from armload.kernel.config import KernelConfig
from armload.emu import Machine
from armload.kernel.provider import Kernel
from armload.loader.session import Session

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VMLINUZ = os.path.join(ROOT, ".cache", "linux-image-6.1.0-50-armmp", "boot", "vmlinuz-6.1.0-50-armmp")
SYMVERS = os.path.join(ROOT, "sample_modules", "Module.symvers")
HZ = 250


@pytest.fixture(scope="module")
def kernel():
    assert os.path.exists(VMLINUZ), "the Debian kernel image is an oracle input: make test-inputs"
    return Kernel.from_files([SYMVERS, VMLINUZ], KernelConfig())


def run(kernel, **kw):
    mod = Session(kernel, kernel.config, "window").load(os.path.join(ROOT, "sample_modules", "deferred-arm.ko"))
    m = Machine(mod, kernel, **kw)
    return m, m.run_init()


def test_deferred_work_runs_at_its_simulated_time(kernel):
    m, r = run(kernel)
    assert r.status == "returned" and r.retval == 0
    text = [x.text for x in m.log.records]
    # init waited for the work item (through the completion) and slept 20 ms: 5 + 1 jiffies
    assert "deferred: init done after 6 jiffies, ran 0x1a" in text
    # after init: the delayed work at 50 ms (msecs_to_jiffies rounds up to 13), the timer at 100 ms
    assert "deferred: delayed work after 13 jiffies" in text
    assert "deferred: timer after 25 jiffies" in text
    times = {x.text: x.time_ns for x in m.log.records}
    tick25 = 25 * 10**9 // HZ                     # the timer fires on the tick; printk comes a few instructions later
    assert tick25 < times["deferred: timer after 25 jiffies"] < tick25 + 10_000
    assert [d["kind"] for d in r.deferred] == ["work", "timer"]
    assert all(d["status"] == "returned" and d["retval"] is None for d in r.deferred)


def test_jiffies_start_at_initial_jiffies(kernel):
    m, _ = run(kernel)
    j64 = m.image.exports["jiffies_64"]
    lo, hi = (int.from_bytes(m.read(j64 + 4 * i, 4), "little") for i in range(2))
    assert hi == 0 and lo == ((-300 * HZ) & 0xFFFFFFFF) + 25      # INITIAL_JIFFIES + 100 ms of ticks


def test_the_same_run_twice_is_identical(kernel):
    runs = [run(kernel) for _ in range(2)]
    assert [r.instructions for _, r in runs][0] == [r.instructions for _, r in runs][1]
    assert [[(x.text, x.time_ns) for x in m.log.records] for m, _ in runs][0] == \
           [[(x.text, x.time_ns) for x in m.log.records] for m, _ in runs][1]


def test_waiting_for_what_nothing_provides_is_a_hung_task(kernel):
    from armload.emu import default_library
    lib = default_library()
    lib.returns("queue_work_on", 0, "test")        # the work is never queued: nothing completes init's wait
    m, r = run(kernel, models=lib)
    assert r.status == "returned" and r.retval == -16          # the sample checks schedule_work's result
    lib2 = default_library()

    def no_complete(call):
        return None
    lib2.set("complete", no_complete, subsystem="test")
    m, r = run(kernel, models=lib2)
    # the completion never fires: wait_for_completion_timeout(HZ) gives 0 after a simulated second
    assert r.status == "returned" and r.retval == -110
    assert r.sim_ns >= 10**9
