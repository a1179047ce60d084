"""`armload run`: every run inside the booted Debian kernel (commands/run.py, commands/run_booted.py):
exit statuses, --call, --image, --budget, --timeout, --no-verify, and what it refuses."""
import json

import pytest
from testinputs import BOOT_VMLINUZ, SYMVERS, sample

from armload.cli import main


def run(capsys, *argv, kernel=True):
    k = ["--kernel", SYMVERS, "--kernel", BOOT_VMLINUZ] if kernel else []
    rc = main(["run", *argv, *k, "--settle-ms", "0"])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_exit_statuses_are_the_kernels_verdicts(booted_dir, capsys):
    rc, out, err = run(capsys, sample("hello-arm.ko"))
    assert rc == 0, err
    assert "] hello: loaded, answer=42, greeting=world" in out and "hello: init returned 0" in out
    assert "hello: branches verified: 3/3" in out
    rc, out, err = run(capsys, sample("enodev-arm.ko"))
    assert rc == 1 and "init returned -19" in out
    rc, out, err = run(capsys, sample("nullderef-arm.ko"))
    assert rc == 1 and "Unable to handle kernel NULL pointer dereference" in out and "oops in init" in out


def test_budget_is_honoured(booted_dir, capsys):
    rc, out, err = run(capsys, sample("spin-arm.ko"), "--budget", "2000000", "--json")
    d = json.loads(out)
    assert rc == 1 and d["modules"][0]["status"] == "budget"
    assert 2_000_000 <= d["modules"][0]["instructions"] < 2_100_000
    rc, out, err = run(capsys, sample("hello-arm.ko"), "--budget", "0")
    assert rc == 1 and "--budget must be positive" in err


def test_timeout_is_the_wall_clock_safety_net(booted_dir, capsys):
    rc, out, err = run(capsys, sample("spin-arm.ko"), "--timeout", "0.5", "--json")
    m = json.loads(out)["modules"][0]
    assert rc == 1 and m["status"] == "stopped" and "wall-clock safety net of 0.5 s" in m["stopped"]


def test_no_verify_is_honoured(booted_dir, capsys):
    rc, out, err = run(capsys, sample("hello-arm.ko"), "--no-verify", "--json")
    d = json.loads(out)
    assert rc == 0 and d["verify"] == {}
    rc, out, err = run(capsys, sample("hello-arm.ko"), "--json")
    assert json.loads(out)["verify"]["hello"]["ok"] is True


def test_calls_with_strings_buffers_and_negative_integers(booted_dir, capsys):
    rc, out, err = run(capsys, sample("devkit-arm-debug.ko"), "count=2", "--call", "devkit_sum", "10",
                       "--call", "devkit_describe", "buf:16", "16", "--call", "devkit_count_char", "s:banana", "97")
    assert rc == 0, err
    assert "devkit: devkit_sum(10) returned 10 (0xa)" in out
    assert "devkit: devkit_describe(buf:16, 16) returned 11 (0xb)" in out
    assert "= 6465766b69742f74303a320000000000  'devkit/t0:2.....'" in out
    assert "devkit: devkit_count_char(s:banana, 97) returned 3 (0x3)" in out
    rc, out, err = run(capsys, sample("devkit-arm-debug.ko"), "--call", "devkit_sum", "-1", "--json")
    d = json.loads(out)
    assert rc == 0
    assert [(c["function"], c["status"], c["ret"]) for c in d["calls"]] == [("devkit_sum", "returned", -3)]   # count=3 by default: -(0+1+2)


def test_calls_are_refused_before_anything_runs(booted_dir, capsys):
    rc, out, err = run(capsys, sample("devkit-arm-debug.ko"), "--call", "nope")
    assert rc == 1 and "--call nope: no function 'nope' in devkit" in err and "devkit_sum" in err
    assert "init returned" not in out
    rc, out, err = run(capsys, sample("devkit-arm-debug.ko"), "--call", "devkit_sum", "1", "2")
    assert rc == 1 and "devkit_sum takes 1 argument (DWARF of devkit), 2 given" in err and "init" not in out
    rc, out, err = run(capsys, sample("devkit-arm-debug.ko"), "--call", "devkit_sum", "b:zz")
    assert rc == 1 and "b: takes hex digits" in err


def test_an_oops_in_a_call_fails_the_run_and_nothing_runs_after_it(booted_dir, capsys):
    rc, out, err = run(capsys, sample("devkit-arm-debug.ko"), "--call", "devkit_crash", "--call", "devkit_sum", "1",
                       "--json")
    d = json.loads(out)
    assert rc == 1 and [c["status"] for c in d["calls"]] == ["oops"]
    assert "PC is at devkit_peek" in d["calls"][0]["oops"]
    assert any("PC is at devkit_peek (./sample_modules/src/devkit/devkit.c:113) devkit" in ln
               for ln in d["calls"][0]["decoded"])


def test_an_oops_in_a_call_is_printed_decoded_to_file_line(booted_dir, capsys):
    rc, out, err = run(capsys, sample("devkit-arm-debug.ko"), "--call", "devkit_crash")
    assert rc == 1 and "PC is at devkit_peek+0x" in out
    assert "PC is at devkit_peek (./sample_modules/src/devkit/devkit.c:113) devkit" in out


def test_image_is_written_at_the_kernels_addresses(booted_dir, capsys, tmp_path):
    from elftools.elf.elffile import ELFFile
    out_elf = tmp_path / "dk.elf"
    rc, out, err = run(capsys, sample("devkit-arm-debug.ko"), "--image", str(out_elf), "--json")
    d = json.loads(out)
    assert rc == 0 and out_elf.exists()
    core = d["modules"][0]["core_base"]
    with open(out_elf, "rb") as f:
        elf = ELFFile(f)
        syms = {s.name: s["st_value"] for s in elf.get_section_by_name(".symtab").iter_symbols()}
        assert elf.get_section_by_name(".debug_info") is not None
    assert core <= syms["devkit_sum"] < core + 0x10000


def test_no_kernel_image_refuses_with_the_fix(capsys):
    rc, out, err = run(capsys, sample("hello-arm.ko"), kernel=False)
    assert rc == 1 and "make test-inputs" in err and "--kernel" in err and "vmlinuz" in err
    rc = main(["run", sample("hello-arm.ko"), "--kernel", SYMVERS])
    assert rc == 1 and "needs the kernel image" in capsys.readouterr().err


def test_thumb2_modules_are_refused_with_the_reason(booted_dir, capsys):
    rc, out, err = run(capsys, sample("hello-thumb2.ko"))
    assert rc == 1 and "a Thumb-2 module (R_ARM_THM_CALL relocations)" in err and "CONFIG_THUMB2_KERNEL" in err
    assert "init" not in out
    rc, out, err = run(capsys, sample("hello-thumb2.ko"), "--thumb2")
    assert rc == 1 and "built for ARM mode" in err


@pytest.mark.parametrize("kind", ["fentry", "fexit"])
def test_what_this_kernel_has_not_is_refused(booted_dir, capsys, kind):
    rc, out, err = run(capsys, sample("hello-arm.ko"), "--probe", f"{kind}:hello_init")
    assert rc == 1 and "no BPF trampoline" in err and "init returned" not in out and "Traceback" not in err


@pytest.mark.parametrize("opt", ["--runtime", "--unmodelled", "--placement"])
def test_the_model_options_are_gone(opt, capsys):
    with pytest.raises(SystemExit):
        main(["run", sample("hello-arm.ko"), opt, "x"])
    assert "unrecognized arguments" in capsys.readouterr().err
