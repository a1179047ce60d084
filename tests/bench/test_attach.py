"""Seed 003 on the booted Debian kernel (bench/attach): prctl(PR_SET_NAME) from pid 1's user
mode (svc, vector_swi, sys_prctl, ret_fast_syscall), a BPF
counter loaded with bpf(2) and run by the kernel's interpreter, attached through
perf_event_open's kprobe PMU and BPF_RAW_TRACEPOINT_OPEN; fentry/fexit refused by the kernel."""
import pytest

from testinputs import BOOT_VMLINUZ, require_input
from armload.bench import attach
from armload.probes.base import ProbeError

EVENTS = 40


@pytest.fixture(scope="module")
def res():
    require_input(BOOT_VMLINUZ, "make test-inputs")
    return attach.run_task_rename(events=EVENTS, vmlinuz=BOOT_VMLINUZ)


def _by(res):
    return {r["mode"]: r for r in res["rows"]}


def test_the_program_ran_once_per_event_in_every_attached_row(res):
    rows = _by(res)
    assert list(rows) == list(attach.MODES)
    for mode, r in rows.items():
        want = 0 if mode == "base" else EVENTS
        assert (r["counter"], r["interp_runs"]) == (want, want), mode      # the map's hits, ___bpf_prog_run entries
        assert r["comm"] == "bench-rename" and r["irqs_in_loop"] == 0
    # the kernel's interpreter: the JIT is off in Debian's armmp, so the programs were not JIT-ed
    assert res["bpf_jit_enable"] == 0 and set(res["jited_prog_len"].values()) == {0}
    # what the kernel's text held at __set_task_comm in each row
    assert {m: r["probe_text"] for m, r in rows.items()} == {
        "base": "original", "kprobe": "breakpoint", "kprobe-opt": "optimized", "kretprobe": "breakpoint",
        "kretprobe-opt": "optimized", "raw_tp": "original"}
    # closed (and the task work run): nothing attached any more, the base path again
    assert res["detached"]["interp_runs"] == 0 and res["detached"]["probe_text"] == "original"
    assert res["detached"]["insns_per_event"] == rows["base"]["insns_per_event"]


def test_the_seed_ordering_from_the_counts(res):
    c = {m: r["insns_per_event"] for m, r in _by(res).items()}
    assert c["base"] < c["raw_tp"] < c["kprobe-opt"] < c["kprobe"] < c["kretprobe"]
    assert c["kprobe-opt"] < c["kretprobe-opt"] < c["kretprobe"]
    assert res["verdict"]["reproduced"] and all(res["verdict"].values())
    assert all(float(r["insns"]) == r["insns_per_event"] * EVENTS for r in res["rows"])


def test_fentry_and_fexit_are_refused_by_the_kernel(res):
    for kind in ("fentry", "fexit"):
        u = res["unsupported"][kind]
        assert u["load_on_kernel_function"] == -22 and u["vmlinux_btf"] == 0    # EINVAL: no vmlinux BTF
        assert u["attach_to_bpf_program"] == -attach.ENOTSUPP
        assert u["arch_prepare_bpf_trampoline_calls"] == 1 and u["target_jited_len"] > 0


def test_two_measurements_are_equal(res):
    again = attach.run_task_rename(events=EVENTS, vmlinuz=BOOT_VMLINUZ)
    key = lambda x: [(r["mode"], r["insns"], r["counter"], r["probe_text"]) for r in x["rows"]]
    assert key(again) == key(res) and again["unsupported"] == res["unsupported"]


def test_a_program_that_is_not_attached_is_caught(monkeypatch):
    require_input(BOOT_VMLINUZ, "make test-inputs")
    real = attach.Syscalls.call

    def no_set_bpf(self, name, *args):
        if name == "ioctl" and args[1] == attach.PERF_EVENT_IOC_SET_BPF:
            return 0                                             # "attached", but never told the kernel
        return real(self, name, *args)
    monkeypatch.setattr(attach.Syscalls, "call", no_set_bpf)
    with pytest.raises(ProbeError, match="kprobe: the program ran 0 times"):
        attach.run_task_rename(events=5, vmlinuz=BOOT_VMLINUZ)


def test_the_table(res, capsys):
    attach.print_task_rename(res)
    out = capsys.readouterr().out
    assert "base > raw_tp > kprobe > kretprobe is reproduced" in out and "ENOTSUPP" in out
