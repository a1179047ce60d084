"""armload's init verdicts against the real kernel's: armload/agree/verdicts.py, `armload agree verdicts`, the
committed QEMU oracle results (tests/oracles/qemu/results.json for 6.1 armmp, RELEASE/results.json for
the other kernels) and the oracle's own parsing."""
import json
import os

import pytest

from armload.agree.verdicts import (Verdict, armload_verdict, armload_verdicts, compare, kernel_ret,
                                    oracle_verdicts)
from armload.cli import main
from oracles.qemu import run as oracle

from testinputs import ROOT

QEMU_DIR = os.path.join(ROOT, "tests", "oracles", "qemu")
RESULTS = os.path.join(QEMU_DIR, "results.json")
# Each kernel's oracle folder and its list's least size (6.1 armmp's list is the long one, issue 20).
KERNELS = {"6.1.0-50-armmp": (QEMU_DIR, 700), "6.1.0-50-armmp-lpae": (os.path.join(QEMU_DIR, "6.1.0-50-armmp-lpae"), 250),
           "6.12.107+deb12-armmp": (os.path.join(QEMU_DIR, "6.12.107+deb12-armmp"), 250)}


def _k(module, verdict, ret=None, errno=None, dep_failed=None):
    return {"module": module, "verdict": verdict, "ret": ret, "errno": errno, "dep_failed": dep_failed}


def _a(module, outcome, init=None, **kw):
    return {"module": module, "outcome": outcome, "init": init, **kw}


ORACLE = {"kernel": {"version": "Linux version 6.1.0-50-armmp"}, "modules": [
    _k("a.ko", "ok", 0), _k("b.ko", "error", -19, "ENODEV"), _k("c.ko", "oops"), _k("d.ko", "hang"),
    _k("e.ko", "ok", 0), _k("f.ko", "ok", 0), _k("g.ko", "ok", 0), _k("h.ko", "error", -11, "EAGAIN"),
    _k("i.ko", "dependency-failed", dep_failed={"module": "x.ko", "ret": None, "killed": True, "oops": True}),
    _k("j.ko", "ok", 0),
]}
ARMLOAD = {"modules": [
    _a("a.ko", "ok", {"status": "returned", "retval": 0}),
    _a("b.ko", "error", {"status": "returned", "retval": -19}),
    _a("c.ko", "fault", {"status": "fault", "where": "f+0x4/0x8 [c]"}),
    _a("d.ko", "budget", {"status": "budget", "where": "loop [d]"}),
    _a("e.ko", "unmodelled", {"status": "unmodelled", "unmodelled_call": "crypto_alloc_shash"}),
    _a("f.ko", "dependency-failed", {"status": "not-run", "dependency_init_failures": [
        {"name": "y", "status": "unmodelled", "where": "__netlink_kernel_create called from y_init+0x8"}]},
       dependency={"name": "y", "module": "y.ko", "outcome": "unmodelled"}),
    _a("g.ko", "ok", {"status": "returned", "retval": 0xc1234567 - (1 << 32)}),    # a pointer
    _a("h.ko", "error", {"status": "returned", "retval": -22}),
    _a("i.ko", "dependency-failed", None, dependency={"name": "x", "module": "x.ko", "outcome": "fault"}),
    _a("j.ko", "budget", {"status": "budget", "where": "do_xor_speed+0x38 [j]"}),
]}


def test_each_kind_agrees_only_with_its_own():
    ag = compare(oracle_verdicts(ORACLE), armload_verdicts(ARMLOAD))
    agree = {r.module for r in ag.rows if r.agree}
    # a: 0 = 0; b: -ENODEV both; c: oops/fault; d: hang/budget; i: both stopped at a dependency.
    assert agree == {"a.ko", "b.ko", "c.ko", "d.ko", "i.ko"}
    assert (ag.total, ag.agreed) == (10, 5) and ag.percent == 50.0
    cls = ag.classes()
    assert cls == {"kernel 0 / armload unmodelled": 1, "kernel 0 / armload dependency (unmodelled)": 1,
                   "kernel 0 / armload 0xc1234567": 1, "kernel -EAGAIN / armload -EINVAL": 1,
                   "kernel 0 / armload budget": 1}
    assert ag.stopping_functions() == {"crypto_alloc_shash": 1, "__netlink_kernel_create": 1}
    d = ag.to_dict()
    assert d["agree"] == 5 and len(d["disagreements"]) == 5


# The booted kernel's init statuses (ci/booted.init_data), each against the oracle's verdict it is.
BOOTED = [({"status": "oops", "reason": "Unable to handle kernel paging request at virtual address fee0002e",
            "where": "superio_enter+0x50/0x6c [w83627ehf]"}, Verdict("oops", None, "oops")),
          ({"status": "panic", "reason": "Kernel panic - not syncing: x"}, Verdict("oops", None, "panic")),
          ({"status": "refused", "retval": -17}, Verdict("returned", -17, "EEXIST")),
          ({"status": "soft-lockup", "where": "spin+0x8/0x10 [m]"}, Verdict("hang")),
          ({"status": "hung-task", "where": "m_init"}, Verdict("hang")),
          ({"status": "hang", "where": "m_init"}, Verdict("hang")),
          ({"status": "time-budget", "where": "m_init"}, Verdict("hang"))]


@pytest.mark.parametrize("init,kernel", BOOTED, ids=[b[0]["status"] for b in BOOTED])
def test_booted_init_statuses_are_the_kernels_verdicts(init, kernel):
    # 6.12's w83627ehf oopses under QEMU and in the booted kernel alike: both are the kernel's oops
    mine = armload_verdict(_a("m.ko", "fault", init))
    assert mine.kind == kernel.kind and mine.agrees(kernel) and kernel.agrees(mine)
    assert not mine.agrees(Verdict("returned", 0))
    if mine.kind == "hang":                   # the class names the end: "kernel 0 / armload soft-lockup"
        assert mine.label() == init["status"]


def test_a_stopped_booted_run_is_undecided():
    # the wall-clock safety net (init_data's "timeout") and a restart say nothing about the module
    for outcome, st in (("timeout", "timeout"), ("reboot", "restart"), ("internal", "refused-dead")):
        assert armload_verdict(_a("m.ko", outcome, {"status": st})).kind == "undecided"


def test_return_values_compare_as_finit_module_returns_them():
    # do_init_module: ret < 0 fails the load, ret > 0 only warns: insmod sees 0.
    assert kernel_ret(5) == 0 and kernel_ret(0) == 0 and kernel_ret(-12) == -12
    pos = armload_verdict(_a("m.ko", "ok", {"status": "returned", "retval": 1}))
    assert pos.agrees(Verdict("returned", 0)) and not pos.agrees(Verdict("returned", -1))
    none = armload_verdict(_a("m.ko", "ok", {"status": "no-function", "retval": None}))
    assert none == Verdict("returned", 0, "no-function")


def test_undecided_and_missing_never_agree():
    u = Verdict("undecided", None, "unmodelled: f")
    assert not u.agrees(u) and not Verdict("missing").agrees(Verdict("missing"))
    ag = compare({"z.ko": Verdict("returned", 0)}, {})
    assert ag.rows[0].armload.kind == "missing" and ag.percent == 0.0


def test_loader_refusal_compares_its_errno_and_harness_failures_are_undecided():
    refused = armload_verdict(_a("m.ko", "load", None, reason="m: Unknown symbol f (err -2)",
                                 error={"errno": -2}))
    assert refused.agrees(Verdict("returned", -2)) and not refused.agrees(Verdict("returned", 0))
    assert armload_verdict(_a("m.ko", "load", None, reason="cycle", error={"message": "m: cycle"})).kind == "undecided"
    for outcome in ("verify", "internal", "timeout"):
        assert armload_verdict(_a("m.ko", outcome, None, reason="x")).kind == "undecided"
    assert armload_verdict(_a("m.ko", "ok", None)).kind == "undecided"     # --no-emulate: no verdict


def test_run_json_is_matched_by_path_suffix():
    run_doc = {"modules": [{"name": "b", "path": "/tmp/tree/b.ko", "run": {"status": "returned", "retval": -19}}]}
    ag = compare(oracle_verdicts(ORACLE), armload_verdicts(run_doc))
    row = next(r for r in ag.rows if r.module == "b.ko")
    assert row.agree and sum(r.armload.kind == "missing" for r in ag.rows) == 9


def _write(tmp_path, name, doc):
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return str(p)


def test_agree_command_threshold_both_sides(tmp_path, capsys):
    o, a = _write(tmp_path, "o.json", ORACLE), _write(tmp_path, "a.json", ARMLOAD)
    pct = 50.0
    assert main(["agree", "verdicts", a, "--oracle", o, "--min", f"{pct - 0.01:.2f}"]) == 0
    out = capsys.readouterr().out
    assert "agreement: 5 of 10 modules (50.0%)" in out and "kernel 0 / armload unmodelled" in out
    assert main(["agree", "verdicts", a, "--oracle", o, "--min", f"{pct + 0.01:.2f}"]) == 1


def test_agree_command_json(tmp_path, capsys):
    o, a = _write(tmp_path, "o.json", ORACLE), _write(tmp_path, "a.json", ARMLOAD)
    assert main(["agree", "verdicts", a, "--oracle", o, "--json", "--min", "60"]) == 1
    d = json.loads(capsys.readouterr().out)
    assert (d["ok"], d["modules"], d["agree"], d["percent"]) == (False, 10, 5, 50.0)


@pytest.mark.parametrize("content,msg", [("{", "not JSON"), ("[]", "no \"modules\" list"),
                                         (None, "No such file")])
def test_agree_command_bad_input_one_clear_error(tmp_path, capsys, content, msg):
    o = _write(tmp_path, "o.json", ORACLE)
    bad = str(tmp_path / "bad.json")
    if content is not None:
        open(bad, "w").write(content)
    assert main(["agree", "verdicts", bad, "--oracle", o]) == 1
    err = capsys.readouterr().err
    assert msg in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert main(["agree", "verdicts", o, "--oracle", o, "--min", "101"]) == 1
    assert "percentage" in capsys.readouterr().err


def test_oracle_unknown_verdict_is_refused():
    from armload.errors import ArmloadError
    with pytest.raises(ArmloadError, match="unknown verdict"):
        oracle_verdicts({"modules": [_k("a.ko", "maybe")]})


# --------------------------------------------------------------------------------------------
# The committed results of the QEMU oracle
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def results():
    with open(RESULTS) as f:
        return json.load(f)


@pytest.mark.parametrize("release", sorted(KERNELS))
def test_results_cover_the_committed_list(release):
    folder, least = KERNELS[release]
    with open(os.path.join(folder, "results.json")) as f:
        results = json.load(f)
    listed = oracle.read_list(os.path.join(folder, "modules.txt"))
    assert len(listed) >= least
    assert [r["module"] for r in results["modules"]] == listed
    counts = {}
    for r in results["modules"]:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    assert counts == results["verdicts"]
    assert results["kernel"]["release"] == release and f"Linux version {release} " in results["kernel"]["version"]
    assert results["kernel"]["image"] == f"vmlinuz-{release}"
    assert results["qemu"]["version"].startswith("QEMU emulator version")
    assert "-M" in results["qemu"]["argv"] and "cortex-a15" in results["qemu"]["argv"]
    kv = oracle_verdicts(results)
    assert len(kv) == len(listed)
    for r in results["modules"]:             # the record agrees with itself: ret and errno name
        if r["verdict"] == "error":
            assert r["ret"] < 0 and r["errno"].startswith("E")
        if r["verdict"] == "ok":
            assert r["ret"] == 0 and r["errno"] is None


def test_results_hold_the_kernels_self_test_summaries(results):
    by = {r["module"]: r for r in results["modules"]}
    bpf = by["lib/test_bpf.ko"]
    assert bpf["verdict"] == "ok"
    assert any("test_bpf: Summary: 1026 PASSED, 0 FAILED" in s for s in bpf["summary"])
    assert any("test_tail_calls: Summary: 10 PASSED, 0 FAILED" in s for s in bpf["summary"])
    assert any("test_skb_segment: Summary: 2 PASSED, 0 FAILED" in s for s in bpf["summary"])
    assert by["lib/test_user_copy.ko"]["verdict"] in ("ok", "hang")


# --------------------------------------------------------------------------------------------
# The oracle's own parts (no QEMU needed)
# --------------------------------------------------------------------------------------------
def test_module_names_of_every_kmod_suffix():
    assert [oracle.modname(p) for p in ("net/ipv6/ip6_gre.ko", "drivers/a/foo-bar.ko.xz", "b.ko.zst", "c-d.ko.gz")] == \
        ["ip6_gre", "foo_bar", "b", "c_d"]
    rec, _ = oracle.finish_record(0, [["fs/nls/nls_cp437.ko.xz"]], [dict(oracle.new_attempt("fs/nls/nls_cp437.ko.xz"), ret=0)],
                                  None, "done", 0.1, 0)
    assert (rec["name"], rec["verdict"]) == ("nls_cp437", "ok")


def test_modules_dep_gives_modprobe_load_order(tmp_path):
    p = tmp_path / "modules.dep"
    p.write_text("kernel/net/a.ko: kernel/net/b.ko kernel/lib/c.ko\nkernel/lib/c.ko:\n")
    dep = oracle.read_modules_dep(str(p))
    assert dep == {"net/a.ko": ["lib/c.ko", "net/b.ko"], "lib/c.ko": []}


def test_newc_archive_layout():
    data = oracle.newc([("init", 0o100755, b"abc", 0, 0), ("dev/console", 0o20600, b"", 5, 1)])
    assert data.startswith(b"070701") and data.endswith(b"\0" * (-len(data) % 4) or data[-1:])
    assert len(data) % 4 == 0 and b"TRAILER!!!\0" in data
    hdr = data[6:6 + 13 * 8]
    fields = [int(hdr[i:i + 8], 16) for i in range(0, len(hdr), 8)]
    assert fields[1] == 0o100755 and fields[6] == 3 and fields[11] == len(b"init\0")
    body = data[110:]
    assert body.startswith(b"init\0") and b"abc" in body
    second = data.index(b"070701", 6)
    f2 = [int(data[second + 6 + i:second + 14 + i], 16) for i in range(0, 104, 8)]
    assert (f2[1], f2[9], f2[10]) == (0o20600, 5, 1)


def test_oracle_record_verdicts():
    plan = [["lib/d.ko", "net/m.ko"]]
    dep_ok = dict(oracle.new_attempt("lib/d.ko"), ret=0)
    ok = dict(oracle.new_attempt("net/m.ko"), ret=-19, errno=19, lines=[(6, "m: no device")])
    rec, _ = oracle.finish_record(0, plan, [dep_ok, ok], {"ret": 0, "errno": None}, "done", 0.1, 0)
    assert (rec["verdict"], rec["ret"], rec["errno"], rec["lines"]) == ("error", -19, "ENODEV", ["<6>m: no device"])
    oops = dict(oracle.new_attempt("net/m.ko"), killed=True,
                lines=[(1, "Unable to handle kernel NULL pointer"), (0, "Internal error: Oops: 5 [#1] ARM")])
    rec, _ = oracle.finish_record(0, plan, [dep_ok, oops], None, "done", 0.1, 0)
    assert rec["verdict"] == "oops" and rec["oops"] and rec["ret"] is None
    dep_bad = dict(oracle.new_attempt("lib/d.ko"), ret=-22, errno=22)
    rec, _ = oracle.finish_record(0, plan, [dep_bad], None, "done", 0.1, 0)
    assert rec["verdict"] == "dependency-failed" and rec["dep_results"][0]["errno"] == "EINVAL"
    rec, _ = oracle.finish_record(0, plan, [dep_ok, dict(oracle.new_attempt("net/m.ko"))], None, "hang", 120, 0)
    assert rec["verdict"] == "hang" and rec["hang"] and rec["ret"] is None
    done = dict(oracle.new_attempt("net/m.ko"), ret=0)       # init returned; the removal hung
    rec, _ = oracle.finish_record(0, plan, [dep_ok, done], None, "hang", 120, 0)
    assert rec["verdict"] == "ok" and not rec["hang"] and rec["rmmod_hang"]
    many = dict(oracle.new_attempt("net/m.ko"), ret=0, lines=[(6, f"line {i} " + "x" * 300) for i in range(100)])
    rec, _ = oracle.finish_record(0, plan, [dep_ok, many], None, "done", 0.1, 0)
    assert rec["lines_total"] == 100 and len(rec["lines"]) == oracle.LINES_HEAD + oracle.LINES_TAIL + 1
    assert all(len(t) <= oracle.LINE_MAX + 3 for t in rec["lines"]) and "60 lines" in rec["lines"][oracle.LINES_HEAD]


def test_oracle_compact_record_keeps_the_failed_dependency_only():
    plan = [["lib/a.ko", "lib/d.ko", "net/m.ko"]]
    have = dict(oracle.new_attempt("lib/a.ko"), ret=0, already=True)
    bad = dict(oracle.new_attempt("lib/d.ko"), ret=-19, errno=19)
    rec, _ = oracle.finish_record(0, plan, [have, bad], None, "done", 0.1, 0)
    c = oracle.compact(rec)
    assert "dep_results" not in c and c["deps_present"] == ["lib/a.ko"] and c["rmmod"] is None
    assert c["dep_failed"] == {"module": "lib/d.ko", "ret": -19, "errno": "ENODEV", "oops": False, "killed": False}
    assert oracle_verdicts({"modules": [c]})["net/m.ko"] == Verdict("dependency", None, "ENODEV: lib/d.ko")
    ok = dict(oracle.new_attempt("lib/d.ko"), ret=0)
    rec, _ = oracle.finish_record(0, plan, [have, ok, dict(oracle.new_attempt("net/m.ko"), ret=0)],
                                  {"ret": -16, "errno": "EBUSY"}, "done", 0.1, 0)
    c = oracle.compact(rec)
    assert c["dep_failed"] is None and c["rmmod"] == -16 and c["verdict"] == "ok"


def test_oracle_module_loaded_meanwhile_by_request_module():
    """insmod's -EEXIST after a dependency's init loaded the module itself (init.sh prints @@LIVE
    once /sys/module/NAME/initstate is live): its init returned 0, and the record says so."""
    plan = [["net/6lowpan/6lowpan.ko", "net/6lowpan/nhc_ipv6.ko"]]
    dep = dict(oracle.new_attempt(plan[0][0]), ret=0)
    mine = dict(oracle.new_attempt(plan[0][1]), ret=0, errno=None, autoloaded=-17)
    rec, _ = oracle.finish_record(0, plan, [dep, mine], None, "done", 0.1, 0)
    c = oracle.compact(rec)
    assert (c["verdict"], c["ret"], c["autoloaded"]) == ("ok", 0, {"insmod_ret": -17})
    rec, _ = oracle.finish_record(0, plan, [dict(dep, autoloaded=-17), dict(mine, autoloaded=None)][:1] +
                                  [dict(oracle.new_attempt(plan[0][1]), ret=0)], None, "done", 0.1, 0)
    c = oracle.compact(rec)
    assert c["deps_autoloaded"] == [plan[0][0]] and "autoloaded" not in c
    have = dict(oracle.new_attempt(plan[0][1]), ret=0, already=True)     # live before our insmod
    rec, _ = oracle.finish_record(0, plan, [dep, have], None, "done", 0.1, 0)
    assert (rec["verdict"], rec["autoloaded"]) == ("ok", {"insmod_ret": None})


def test_oracle_reads_a_result_line_with_the_consoles_own_printk_at_its_end(tmp_path):
    """The serial console carries init.sh's output and the kernel's printk at once: a kernel line can
    start in the middle of '@@INS 0 0' (6.12's cfg80211 did). The result is read, the tail dropped
    (dmesg gives it again as @@K)."""
    console = tmp_path / "console.txt"
    console.write_text("Linux version 6.12.107+deb12-armmp (x)\n@@READY 0 1 6.12.107+deb12-armmp\n@@BEGIN 0\n"
                       "@@TRY net/wireless/cfg80211.ko.xz\n@@INS 0 0[   60.851301] cfg80211: failed to load regulatory.db\n"
                       "@@K <6>[   60.851301] cfg80211: failed to load regulatory.db\n@@RMTRY cfg80211\n"
                       "@@RM -1 16[   61.000000] x\n@@END 0\n@@ALLDONE\n")
    fake_qemu = ["sh", "-c", f"cat {console}"]          # Boot appends '-append CMDLINE': sh's $0 and $1
    info = {}
    recs, nxt, _ = oracle.run_boot(fake_qemu, "6.12.107+deb12-armmp", [["net/wireless/cfg80211.ko.xz"]], 0, 1,
                                   str(tmp_path), 0, info)
    (rec, _), = recs
    assert (nxt, info["uname_r"], rec["verdict"], rec["ret"], rec["name"]) == (1, "6.12.107+deb12-armmp", "ok", 0, "cfg80211")
    assert rec["lines"] == ["<6>cfg80211: failed to load regulatory.db"] and rec["rmmod"] == {"ret": -16, "errno": "EBUSY"}
    with pytest.raises(RuntimeError, match="uname -r 6.12.107"):
        oracle.run_boot(fake_qemu, "6.1.0-50-armmp-lpae", [["a.ko"]], 0, 1, str(tmp_path), 1, {})
