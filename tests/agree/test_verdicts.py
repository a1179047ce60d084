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
    _a("c.ko", "fault", {"status": "oops", "where": "f+0x4/0x8 [c]"}),
    _a("d.ko", "budget", {"status": "budget", "where": "loop [d]"}),
    _a("e.ko", "timeout", {"status": "timeout", "retval": None, "reason": "the wall clock (a harness failure)"}),
    _a("f.ko", "dependency-failed", {"status": "not-run", "dependency_init_failures": [
        {"name": "y", "status": "oops", "retval": None}]},
       dependency={"name": "y", "module": "y.ko", "outcome": "fault"}),
    _a("g.ko", "ok", {"status": "returned", "retval": 0xc1234567 - (1 << 32)}),    # a pointer
    _a("h.ko", "error", {"status": "returned", "retval": -22}),
    _a("i.ko", "dependency-failed", None, dependency={"name": "x", "module": "x.ko", "outcome": "fault"}),
    _a("j.ko", "budget", {"status": "budget", "where": "do_xor_speed+0x38 [j]"}),
]}


def test_each_kind_agrees_only_with_its_own():
    ag = compare(oracle_verdicts(ORACLE), armload_verdicts(ARMLOAD))
    agree = {r.module for r in ag.rows if r.agree}
    # a: 0 = 0; b: -ENODEV both; c: oops both; d: hang/budget; i: both stopped at a dependency.
    assert agree == {"a.ko", "b.ko", "c.ko", "d.ko", "i.ko"}
    assert (ag.total, ag.agreed) == (10, 5) and ag.percent == 50.0
    cls = ag.classes()
    assert cls == {"kernel 0 / armload timeout": 1, "kernel 0 / armload dependency (oops)": 1,
                   "kernel 0 / armload 0xc1234567": 1, "kernel -EAGAIN / armload -EINVAL": 1,
                   "kernel 0 / armload budget": 1}
    d = ag.to_dict()
    assert d["agree"] == 5 and len(d["disagreements"]) == 5


# Every status the booted runtime ends a run with (emu/booted/result.py, check's init data) against
# what the QEMU oracle records for the same end: -no-reboot and panic=-1 make QEMU exit at a panic,
# a PSCI reset or power-off ('panic' in the oracle, an oops-kind verdict); machine_halt spins.
STATUS_VERDICT = {"returned": "returned", "refused": "returned", "oops": "oops", "panic": "oops",
                  "restart": "oops", "power-off": "oops", "halt": "hang", "budget": "hang",
                  "time-budget": "hang", "soft-lockup": "hang", "hung-task": "hang", "hang": "hang",
                  "timeout": "undecided", "stopped": "undecided", "refused-dead": "undecided",
                  "not-run": "undecided"}


def test_every_booted_status_has_its_oracle_kind():
    from armload.ci.outcomes import INIT_STATUS
    from armload.emu.booted.result import STATUSES
    assert set(STATUS_VERDICT) >= set(STATUSES) | set(INIT_STATUS)
    for st, kind in STATUS_VERDICT.items():
        assert armload_verdict(_a("m.ko", "x", {"status": st, "retval": -5})).kind == kind, st
    oracle_of = {"returned": _k("m.ko", "error", -5, "EIO"), "oops": _k("m.ko", "oops"),
                 "hang": _k("m.ko", "hang")}
    for st, kind in STATUS_VERDICT.items():
        v = armload_verdict(_a("m.ko", "x", {"status": st, "retval": -5}))
        for okind, rec in oracle_of.items():
            assert v.agrees(oracle_verdicts({"modules": [rec]})["m.ko"]) == (okind == kind), (st, okind)
    panic = oracle_verdicts({"modules": [_k("m.ko", "panic")]})["m.ko"]
    assert armload_verdict(_a("m.ko", "panic", {"status": "panic"})).agrees(panic)


def test_refused_is_load_modules_errno():
    v = armload_verdict(_a("m.ko", "error", {"status": "refused", "retval": -8}))
    assert v.agrees(Verdict("returned", -8)) and not v.agrees(Verdict("returned", 0))


def test_return_values_compare_as_finit_module_returns_them():
    # do_init_module: ret < 0 fails the load, ret > 0 only warns: insmod sees 0.
    assert kernel_ret(5) == 0 and kernel_ret(0) == 0 and kernel_ret(-12) == -12
    pos = armload_verdict(_a("m.ko", "ok", {"status": "returned", "retval": 1}))
    assert pos.agrees(Verdict("returned", 0)) and not pos.agrees(Verdict("returned", -1))


def test_undecided_and_missing_never_agree():
    u = Verdict("undecided", None, "timeout: the wall clock")
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
    # `armload run --json`'s module records are result.Result.to_dict(): status and ret at the top
    run_doc = {"modules": [{"module": "b", "path": "/tmp/tree/b.ko", "function": "init", "status": "returned",
                            "ret": -19},
                           {"module": "c", "path": "/tmp/tree/c.ko", "function": "init", "status": "oops", "ret": None},
                           {"module": "a", "path": "/tmp/tree/a.ko", "function": "init", "status": "refused", "ret": -2}]}
    ag = compare(oracle_verdicts(ORACLE), armload_verdicts(run_doc))
    rows = {r.module: r for r in ag.rows}
    assert rows["b.ko"].agree and rows["c.ko"].agree and not rows["a.ko"].agree
    assert rows["a.ko"].armload == Verdict("returned", -2, "refused")
    assert sum(r.armload.kind == "missing" for r in ag.rows) == 7


def _write(tmp_path, name, doc):
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return str(p)


def test_agree_command_threshold_both_sides(tmp_path, capsys):
    o, a = _write(tmp_path, "o.json", ORACLE), _write(tmp_path, "a.json", ARMLOAD)
    pct = 50.0
    assert main(["agree", "verdicts", a, "--oracle", o, "--min", f"{pct - 0.01:.2f}"]) == 0
    out = capsys.readouterr().out
    assert "agreement: 5 of 10 modules (50.0%)" in out and "kernel 0 / armload timeout" in out
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


# --------------------------------------------------------------------------------------------
# The whole report, text and JSON, against tests/golden/agree_verdicts.{txt,json}
# --------------------------------------------------------------------------------------------
RICH_ORACLE = {"kernel": {"version": "Linux version 6.12.107+deb12-armmp"}, "qemu": {"version": "QEMU emulator version 7.2"},
               "modules": ORACLE["modules"] + [
                   _k("k.ko", "panic"), _k("l.ko", "error", -2, "ENOENT"), _k("m.ko", "ok", 0),
                   _k("n.ko", "dependency-failed", dep_failed={"module": "z.ko", "ret": -19, "errno": "ENODEV"}),
                   _k("o.ko", "ok", 0), _k("p.ko", "hang"), _k("q.ko", "ok", 0)]}
RICH_ARMLOAD = {"modules": ARMLOAD["modules"] + [
    _a("k.ko", "panic", {"status": "panic", "where": "hostile_panic_init+0x10/0x20 [k]"}),
    _a("l.ko", "load", None, reason="l: Unknown symbol nope (err -2)", error={"errno": -2}),
    _a("m.ko", "error", {"status": "refused", "retval": -22, "reason": "load_module returned -22 (-EINVAL)"}),
    _a("n.ko", "dependency-failed", {"status": "not-run", "dependency_init_failures": [
        {"name": "z", "status": "returned", "retval": -19}]}, dependency={"name": "z", "module": "z.ko"}),
    _a("o.ko", "verify", None, reason="a branch does not reach its target"),
    _a("p.ko", "soft-lockup", {"status": "soft-lockup", "where": "spin [p]"}),
]}
GOLDEN = os.path.join(ROOT, "tests", "golden")


@pytest.mark.parametrize("fmt", ["txt", "json"])
def test_the_whole_report_is_the_golden_one(tmp_path, capsys, fmt):
    """Every line of `agree verdicts` (the per-verdict table, the classes with examples, each
    disagreement's detail, the closing line) and every JSON field; ARMLOAD_UPDATE_GOLDEN=1 rewrites
    the files after a deliberate change (review the diff)."""
    o, a = _write(tmp_path, "o.json", RICH_ORACLE), _write(tmp_path, "a.json", RICH_ARMLOAD)
    args = ["agree", "verdicts", a, "--oracle", o, "--min", "52.9"] + (["--json"] if fmt == "json" else [])
    assert main(args) == 0
    out = capsys.readouterr().out
    path = os.path.join(GOLDEN, f"agree_verdicts.{fmt}")
    if os.environ.get("ARMLOAD_UPDATE_GOLDEN"):
        open(path, "w").write(out)
    assert out == open(path).read()
    assert main(args[:-2 if fmt == "txt" else -3] + ["--min", "53"] + (["--json"] if fmt == "json" else [])) == 1


def test_each_verdict_says_what_it_rests_on():
    """The detail of every verdict armload_verdict makes, exactly (the report lists it for a disagreement)."""
    recs = {r["module"]: r for r in RICH_ARMLOAD["modules"]}
    assert armload_verdict(recs["n.ko"]) == Verdict("dependency", None, "-ENODEV: z.ko")    # the dependency's own errno
    assert armload_verdict(recs["f.ko"]) == Verdict("dependency", None, "oops: y.ko")       # its init's status
    assert armload_verdict(recs["i.ko"]) == Verdict("dependency", None, "fault: x.ko")      # no init run: its class
    assert armload_verdict(_a("x.ko", "dependency-failed", None, dependency={"name": "w"})) == \
        Verdict("dependency", None, "failed: w")
    assert armload_verdict(_a("x.ko", "dependency-failed", None)) == Verdict("dependency", None, "failed: ?")
    assert armload_verdict(_a("x.ko", "dependency-failed", {"status": "not-run", "dependency_init_failures": [
        {"name": "z", "status": "returned", "retval": -12}]}, dependency={"module": "z.ko"})) == \
        Verdict("dependency", None, "-ENOMEM: z.ko")
    assert armload_verdict(recs["l.ko"]) == Verdict("returned", -2, "load: l: Unknown symbol nope (err -2)")
    assert armload_verdict(_a("x.ko", "load", None, error={"errno": 0})) == Verdict("undecided", None, "load: ")
    assert armload_verdict(recs["o.ko"]) == Verdict("undecided", None, "verify: a branch does not reach its target")
    assert armload_verdict(_a("x.ko", "ok", None)) == Verdict("undecided", None, "not-run: init was not run (--no-emulate?)")
    # the run's end itself
    assert armload_verdict(recs["c.ko"]) == Verdict("oops", None, "f+0x4/0x8 [c]")
    assert armload_verdict(_a("x.ko", "panic", {"status": "panic"})) == Verdict("oops", None, "panic")
    assert armload_verdict(recs["p.ko"]) == Verdict("hang", None, "soft-lockup: spin [p]")
    assert armload_verdict(_a("x.ko", "budget", {"status": "budget"})) == Verdict("hang", None, "budget: ")
    assert armload_verdict(recs["m.ko"]) == Verdict("returned", -22, "load_module returned -22 (-EINVAL)")
    assert armload_verdict(_a("x.ko", "ok", {"status": "returned"})) == Verdict("returned", 0, "returned")
    assert armload_verdict(_a("x.ko", "timeout", {"status": "timeout", "reason": "the wall clock"})) == \
        Verdict("undecided", None, "timeout: ")                   # the record's own reason (none here) speaks
    assert armload_verdicts({"modules": [{"module": "x", "path": "/t/x.ko", "status": "stopped", "ret": None,
                                          "stopped": "the wall clock"}]})["/t/x.ko"] == \
        Verdict("undecided", None, "stopped: the wall clock")
    assert armload_verdicts({"modules": [{"module": "x", "path": "/t/x.ko", "status": "hang", "ret": None,
                                          "stopped": "a spin"}]})["/t/x.ko"] == Verdict("hang", None, "hang: ")


def test_labels_and_errno_names():
    assert [Verdict("returned", r).label() for r in (0, -19, -4095, -4096, 1)] == \
        ["0", "-ENODEV", "-4095", "0xfffff000", "0x1"]
    assert Verdict("dependency", None, "oops: y.ko").label() == "dependency (oops)"
    assert Verdict("hang", None, "budget: loop").label() == "budget" and Verdict("hang").label() == "hang"
    assert Verdict("undecided", None, "timeout: x").label() == "timeout" and Verdict("oops", None, "f").label() == "oops"
    assert Verdict("missing").label() == "missing"


def test_oracle_records_become_verdicts():
    kv = oracle_verdicts(RICH_ORACLE)
    assert kv["a.ko"] == Verdict("returned", 0, "") and kv["b.ko"] == Verdict("returned", -19, "ENODEV")
    assert kv["c.ko"] == Verdict("oops", None, "oops") and kv["k.ko"] == Verdict("oops", None, "panic")
    assert kv["d.ko"] == Verdict("hang")
    assert kv["i.ko"] == Verdict("dependency", None, "oops: x.ko") and kv["n.ko"] == Verdict("dependency", None, "ENODEV: z.ko")
    killed = oracle_verdicts({"modules": [_k("a.ko", "dependency-failed", dep_failed={"killed": True})]})
    assert killed["a.ko"] == Verdict("dependency", None, "oops: ?")
    assert oracle_verdicts({"modules": [_k("a.ko", "dependency-failed")]})["a.ko"] == Verdict("dependency", None, "?: ?")


def test_the_remaining_edges():
    import errno as E
    from armload.agree.verdicts import load_json
    from armload.errors import ArmloadError
    assert armload_verdict(_a("x.ko", "internal", None, reason="a bug")) == Verdict("undecided", None, "internal: a bug")
    assert armload_verdict(_a("x.ko", "x", {"status": "no-such-status"})) == Verdict("undecided", None, "no-such-status: ")
    assert armload_verdict(_a("x.ko", "x", {"status": "refused-dead", "reason": "pid 1 died"})) == \
        Verdict("undecided", None, "refused-dead: pid 1 died")
    assert oracle_verdicts({"modules": [_k("a.ko", "dependency-failed", dep_failed={"oops": True})]})["a.ko"] == \
        Verdict("dependency", None, "oops: ?")
    with pytest.raises(ArmloadError) as e:
        load_json("/nonexistent/x.json", "oracle results")
    assert e.value.errno == -E.ENOENT and "oracle results /nonexistent/x.json: No such file or directory" in str(e.value)
    with pytest.raises(ArmloadError, match="module 'a.ko' has unknown verdict 'maybe'"):
        oracle_verdicts({"modules": [_k("a.ko", "maybe")]})


def test_the_threshold_is_inclusive_and_the_files_are_named(tmp_path, capsys):
    o, a = _write(tmp_path, "o.json", ORACLE), _write(tmp_path, "a.json", ARMLOAD)
    assert main(["agree", "verdicts", a, "--oracle", o, "--min", "50"]) == 0          # 5 of 10: exactly 50%
    assert main(["agree", "verdicts", a, "--oracle", o, "--min", "100"]) == 1         # 100 is a percentage
    out = capsys.readouterr()
    assert "below the minimum 100%" in out.out and "percentage" not in out.err
    bad = str(tmp_path / "bad.json")
    open(bad, "w").write("[]")
    assert main(["agree", "verdicts", bad, "--oracle", o]) == 1
    assert f"armload {bad}: no \"modules\" list (expected armload JSON)" in capsys.readouterr().err
    assert main(["agree", "verdicts", a, "--oracle", bad]) == 1
    assert f"oracle results {bad}: no \"modules\" list (expected oracle results JSON)" in capsys.readouterr().err
    assert main(["agree", "verdicts", a, "--oracle", o]) == 0                          # text, not JSON, by default
    assert capsys.readouterr().out.startswith("real kernel: Linux version 6.1.0-50-armmp under QEMU\n")
