"""`armload check` as a CI gate, on small trees of the bundled sample modules (no corpus needed):
outcome classes and --fail-on, dependency-failed, the per-module baseline diff, JUnit XML,
determinism of the JSON, the text summary, and the refusals (no --kernel, --jobs 0)."""
from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from testinputs import BOOT_VMLINUZ, SAMPLES, SYMVERS

from armload.cli import main
from armload.ci.outcomes import DEFAULT_FAIL_ON, OUTCOMES, init_class, parse_fail_on

MOV_R0_0, MVN_R0_18, BX_LR = 0xE3A00000, 0xE3E00012, 0xE12FFF1E     # mov r0,#0 / mvn r0,#18 (-19) / bx lr


BOOTED = ["--kernel", BOOT_VMLINUZ, "--budget", "3000000"]     # init inside the booted kernel

def make_tree(tmp_path, *names, sub="") -> str:
    root = tmp_path / "tree"
    (root / sub).mkdir(parents=True, exist_ok=True)
    for n in names:
        shutil.copy(os.path.join(SAMPLES, f"{n}-arm.ko"), root / sub)
    return str(root)


def check(tree, *extra, name="check"):
    """Run `armload check` in-process; (exit status, doc, {module path: record})."""
    out = os.path.join(os.path.dirname(tree), f"{name}.json")
    rc = main(["check", tree, "--kernel", SYMVERS, "-q", "--jobs", "1", "--json", out, *extra])
    with open(out) as f:
        doc = json.load(f)
    return rc, doc, {r["module"]: r for r in doc["modules"]}


def _sha16(path) -> str:
    import hashlib
    return hashlib.sha256(open(path, "rb").read()).hexdigest()[:16]


def _build_id(path) -> str:
    """The build-id as binutils reads it (an oracle independent of armload's note parser)."""
    out = subprocess.run(["arm-linux-gnueabihf-readelf", "-n", path], capture_output=True, text=True).stdout
    return next(x.split()[-1] for x in out.splitlines() if "Build ID:" in x)


def patch_init(path, *words) -> None:
    """Overwrite the first instructions of init_module (no relocation touches them in the
    samples: the first is at +8, the mcount call)."""
    from elftools.elf.elffile import ELFFile
    with open(path, "rb") as f:
        elf = ELFFile(f)
        sym = next(s for s in elf.get_section_by_name(".symtab").iter_symbols() if s.name == "init_module")
        sec = elf.get_section(sym["st_shndx"])
        rel = elf.get_section_by_name(".rel" + sec.name)
        assert min(r["r_offset"] for r in rel.iter_relocations()) >= sym["st_value"] + 4 * len(words)
        off = sec["sh_offset"] + sym["st_value"]
    data = bytearray(open(path, "rb").read())
    for i, w in enumerate(words):
        struct.pack_into("<I", data, off + 4 * i, w)
    open(path, "wb").write(bytes(data))


def bad_reloc(path) -> None:
    """Point the first relocation of .rel.init.text past the end of the symbol table."""
    from elftools.elf.elffile import ELFFile
    with open(path, "rb") as f:
        elf = ELFFile(f)
        off = elf.get_section_by_name(".rel.init.text")["sh_offset"]
        nsyms = elf.get_section_by_name(".symtab").num_symbols()
    data = bytearray(open(path, "rb").read())
    struct.pack_into("<I", data, off + 4, ((nsyms + 5) << 8) | (data[off + 4] & 0xFF))
    open(path, "wb").write(bytes(data))


# --------------------------------------------------------------------------------------------
# Outcome classes
# --------------------------------------------------------------------------------------------
def test_init_status_table():
    assert init_class({"status": "returned", "retval": 0}) == "ok"
    assert init_class({"status": "returned", "retval": -19}) == "error"
    assert init_class({"status": "returned", "retval": 1}) == "ok"          # the kernel only warns
    assert init_class({"status": "refused", "retval": -22}) == "error"      # load_module: parse_args, ...
    assert init_class({"status": "oops"}) == "fault"
    for st in ("budget", "timeout"):
        assert init_class({"status": st}) == st
    assert init_class({"status": "not-run"}) == "internal"
    assert init_class({"status": "something-new"}) == "internal"             # never a silent success
    assert init_class(None) is None
    assert all(OUTCOMES[c][0] == "harness" for c in ("timeout", "internal"))


def test_a_booted_result_is_classified():
    """check's one reader of the booted kernel's Result turns it into plain data; the tables do the rest."""
    from armload.ci.baseline import outcome_key
    from armload.ci.booted import init_data
    from armload.emu.booted.result import LoaderCheck, Result
    oops = "Unable to handle kernel NULL pointer dereference at virtual address 00000000\nPC is at foo_init+0x10/0x40 [foo]"
    d = init_data(Result("foo", "/t/foo.ko", None, "oops", ["x"], oops, 1234, loader=LoaderCheck()))
    assert init_class(d) == "fault" and d["where"] == "foo_init+0x10/0x40 [foo]"
    assert d["reason"] == "Unable to handle kernel NULL pointer dereference at virtual address 00000000"
    assert outcome_key({"outcome": "fault", "init": d}) == "fault oops in foo_init [foo]"
    d = init_data(Result("foo", "/t/foo.ko", -22, "refused", [], "", 10, loader=LoaderCheck()))
    assert init_class(d) == "error" and d["reason"] == "load_module returned -22 (-EINVAL)"
    assert outcome_key({"outcome": "error", "init": d}) == "error -EINVAL"
    d = init_data(Result("foo", "/t/foo.ko", None, "stopped", ["x"], "", 99, loader=LoaderCheck(),
                            stopped="the wall-clock safety net of 1 s stopped it"))
    assert init_class(d) == "timeout" and set(d) == {"status", "retval", "reason"}
    assert init_class(init_data(Result("foo", "/t/foo.ko", None, "refused-dead", [], "", 0,
                                          loader=LoaderCheck(), stopped="pid 1 died"))) == "internal"


def test_parse_fail_on():
    assert parse_fail_on("fault,load") == ("load", "fault")                 # table order
    assert parse_fail_on("none") == ()
    assert set(parse_fail_on("all")) == set(OUTCOMES) - {"ok"}
    assert parse_fail_on("budget,dependency-failed") == ("dependency-failed", "budget")
    for bad in ("faults", "ok", "", "load,bogus"):
        with pytest.raises(ValueError, match="unknown outcome class"):
            parse_fail_on(bad)
    assert DEFAULT_FAIL_ON == parse_fail_on(",".join(DEFAULT_FAIL_ON)) and "fault" in DEFAULT_FAIL_ON


def test_outcomes_and_exit_status_follow_fail_on(tmp_path, booted_dir):
    tree = make_tree(tmp_path, "nullderef", "spin", "enodev", "hello")
    rc, doc, recs = check(tree, *BOOTED)
    assert {m: r["outcome"] for m, r in recs.items()} == {
        "nullderef-arm.ko": "fault", "spin-arm.ko": "budget", "enodev-arm.ko": "error", "hello-arm.ko": "ok"}
    assert rc == 1 and doc["ok"] is False and doc["failed"] == {"fault": 1}
    r = recs["nullderef-arm.ko"]
    assert r["stage"] == "init" and r["reason"].startswith("Unable to handle kernel NULL pointer dereference")
    assert r["where"].startswith("nullderef_init+0x") and "[nullderef]" in r["where"]
    assert recs["spin-arm.ko"]["reason"].startswith("no return within 3,0")
    assert recs["enodev-arm.ko"]["reason"] == "init returned -19 (-ENODEV)"
    s = doc["summary"]
    assert s["outcomes"] == {**{c: 0 for c in OUTCOMES}, "ok": 1, "fault": 1, "budget": 1, "error": 1}
    assert s["success"] == {"ok": 1, "decided": 4, "ratio": 0.25}
    for fail_on, want in (("budget", 1), ("error", 1), ("load,verify", 0), ("none", 0), ("all", 1),
                          ("fault,budget,error", 1), ("timeout,dependency-failed", 0)):
        rc, doc, _ = check(tree, "--fail-on", fail_on, "--no-timing", *BOOTED)
        assert rc == want, fail_on
        assert doc["ok"] is (want == 0)
        assert doc["options"]["fail_on"] == list(parse_fail_on(fail_on))
    rc, doc, _ = check(tree, "--fail-on", "fault,budget,error", *BOOTED)
    assert doc["failed"] == {"fault": 1, "budget": 1, "error": 1}


def test_bad_fail_on_is_one_clear_error(tmp_path, capsys):
    tree = make_tree(tmp_path, "hello")
    assert main(["check", tree, "--kernel", SYMVERS, "-q", "--fail-on", "faults"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--fail-on: unknown outcome class faults" in err


def test_wall_clock_timeout_is_a_harness_outcome(tmp_path, booted_dir):
    tree = make_tree(tmp_path, "spin")
    slow = ["--kernel", BOOT_VMLINUZ, "--budget", "100000000000", "--timeout", "0.3"]
    rc, doc, recs = check(tree, "--fail-on", "none", *slow)
    r = recs["spin-arm.ko"]
    assert r["outcome"] == "timeout" and rc == 0
    assert r["reason"] == ("the wall-clock safety net of 0.3 s stopped it (a harness failure, "
                           "not module behaviour)")
    assert set(r["init"]) == {"status", "retval", "reason"}          # nothing that depends on the load
    assert doc["summary"]["success"] == {"ok": 0, "decided": 0, "ratio": None}
    rc, doc, _ = check(tree, *slow)
    assert rc == 1 and doc["failed"] == {"timeout": 1}              # in the default --fail-on
    xml = str(tmp_path / "junit.xml")
    check(tree, "--junit", xml, *slow)
    e = [c.find("error") for c in ET.parse(xml).getroot().iter("testcase") if c.get("name") == "init"][0]
    assert e is not None and e.get("type") == "timeout" and "safety net" in e.get("message")


# --------------------------------------------------------------------------------------------
# dependency-failed
# --------------------------------------------------------------------------------------------
def test_dependency_init_failure_makes_dependents_dependency_failed(tmp_path, booted_dir):
    tree = make_tree(tmp_path, "exporter", "importer", "hello")
    rc, doc, recs = check(tree, *BOOTED)
    assert rc == 0 and recs["importer-arm.ko"]["outcome"] == "ok"
    patch_init(os.path.join(tree, "exporter-arm.ko"), MVN_R0_18, BX_LR)
    rc, doc, recs = check(tree, "--fail-on", "dependency-failed", *BOOTED)
    assert recs["exporter-arm.ko"]["outcome"] == "error"
    imp = recs["importer-arm.ko"]
    assert imp["outcome"] == "dependency-failed" and imp["stage"] == "dependency"
    assert imp["reason"] == "dependency exporter (exporter-arm.ko) init error: init returned -19 (-ENODEV)"
    assert imp["dependency"] == {"name": "exporter", "module": "exporter-arm.ko", "outcome": "error"}
    assert imp["init"]["status"] == "not-run"           # the kernel never loads it: its dependency failed there
    assert imp["init"]["dependency_init_failures"][0]["name"] == "exporter"
    assert recs["hello-arm.ko"]["outcome"] == "ok"
    assert rc == 1 and doc["failed"] == {"dependency-failed": 1}
    assert doc["summary"]["outcomes"]["dependency-failed"] == 1
    assert check(tree, "--fail-on", "fault", *BOOTED)[0] == 0
    # Checked alone, the dependency's init (run before the module's own) is the evidence.
    rc, doc, recs = check(tree, "--module", "importer-arm.ko", "--fail-on", "dependency-failed", *BOOTED)
    assert list(recs) == ["importer-arm.ko"] and rc == 1
    assert recs["importer-arm.ko"]["reason"].startswith("dependency exporter (exporter-arm.ko) init error when "
                                                        "run before this module's own: ")


def test_dependency_load_failure(tmp_path):
    tree = make_tree(tmp_path, "exporter", "importer")
    bad_reloc(os.path.join(tree, "exporter-arm.ko"))            # .modinfo intact: still named exporter
    rc, doc, recs = check(tree, "--fail-on", "load")
    assert recs["exporter-arm.ko"]["outcome"] == "load" and rc == 1
    imp = recs["importer-arm.ko"]
    assert imp["outcome"] == "dependency-failed" and "relocations" not in imp
    assert imp["reason"].startswith("dependency exporter (exporter-arm.ko) failed to load: ")
    assert check(tree, "--fail-on", "dependency-failed")[0] == 1


def test_missing_dependency_is_a_load_failure(tmp_path):
    tree = make_tree(tmp_path, "importer")
    rc, doc, recs = check(tree)
    r = recs["importer-arm.ko"]
    assert r["outcome"] == "load" and r["stage"] == "order" and rc == 1
    assert r["reason"] == "depends on exporter, not found in the tree"


# --------------------------------------------------------------------------------------------
# Baselines
# --------------------------------------------------------------------------------------------
def test_baseline_diff_names_what_changed(tmp_path, booted_dir, capsys):
    tree = make_tree(tmp_path, "hello", "nullderef", "enodev", "exporter", "importer")
    rc, base, _ = check(tree, "--fail-on", "none", name="base", *BOOTED)
    compact = str(tmp_path / "baseline.json")
    assert check(tree, "--fail-on", "none", "--baseline", compact, "--update-baseline", *BOOTED)[0] == 0
    text = open(compact).read()
    lines = [x.rstrip(",") for x in text.splitlines()]
    assert json.loads(text)["format"] == "armload-check-baseline/2"
    assert sum(1 for x in lines if x.startswith('"') and '.ko":[' in x) == 5       # one line each
    bid = _build_id(os.path.join(tree, "nullderef-arm.ko"))
    assert any(x.startswith('"nullderef-arm.ko":["fault oops in nullderef_init [nullderef]",2,4,0,0,32768,'
                            f'"{_sha16(os.path.join(tree, "nullderef-arm.ko"))}","{bid}","') for x in lines)
    assert any(x.startswith('"enodev-arm.ko":["error -ENODEV",2,4,0,0,32768,"') for x in lines)
    capsys.readouterr()
    # Same tree: no difference against either form of the baseline.
    for b in (str(tmp_path / "base.json"), compact):
        rc, doc, _ = check(tree, "--fail-on", "none", "--baseline", b, *BOOTED)
        assert rc == 0 and doc["baseline"]["differences"] == 0 and doc["baseline"]["modules_compared"] == 5
    # Corrupt hello, fix nullderef, put another module where enodev was.
    open(os.path.join(tree, "hello-arm.ko"), "r+b").truncate(3000)
    patch_init(os.path.join(tree, "nullderef-arm.ko"), MOV_R0_0, BX_LR)
    shutil.copy(os.path.join(SAMPLES, "kalloc-arm.ko"), os.path.join(tree, "enodev-arm.ko"))
    capsys.readouterr()
    for b in (str(tmp_path / "base.json"), compact):
        rc, doc, _ = check(tree, "--fail-on", "none", "--baseline", b, "--top", "0", *BOOTED)
        out = capsys.readouterr().out
        d = doc["baseline"]
        assert rc == 1 and doc["ok"] is False
        kinds = {c["module"]: c["kinds"] for c in d["changes"]}
        assert kinds["hello-arm.ko"] == ["newly failing", "file changed"]      # the build-id note cut off
        assert kinds["nullderef-arm.ko"] == ["newly passing", "file changed, same build-id", "loaded image changed"]
        assert kinds["enodev-arm.ko"] == ["newly passing", "changed PLT counts",       # kalloc now
                                          "rebuilt (new build-id)", "loaded image changed"]
        assert set(kinds) == {"hello-arm.ko", "nullderef-arm.ko", "enodev-arm.ko"}
        assert d["counts"] == {"newly failing": 1, "newly passing": 2, "changed PLT counts": 1, "file changed": 1,
                               "file changed, same build-id": 1, "rebuilt (new build-id)": 1,
                               "loaded image changed": 2}
        hello = next(c for c in d["changes"] if c["module"] == "hello-arm.ko")
        assert hello["baseline"]["outcome"] == "ok" and hello["now"]["outcome"] == "load format ENOEXEC"
        assert hello["now"]["image_bytes"] is None and hello["now"]["build_id"] is None
        assert "ElfFormatError" not in out
        assert "Invalid ELF" in hello["reason"]
        assert "3 module(s) differ, 2 option/total difference(s)" in out
        assert d["option_differences"] == ["total relocations: 102 in the baseline, 97 now",
                                           "total branches: 16 in the baseline, 20 now"]
        row = next(x for x in out.splitlines() if x.startswith("nullderef-arm.ko ") and "newly" in x)
        assert "newly passing" in row and "fault oops in nullderef_init [nullderef]" in row and row.endswith("ok")
        assert "check: FAILED: baseline: 3 module(s) differ, 2 option/total difference(s)" in out
    # --update-baseline accepts the new state (exit 0), after which there is no difference.
    assert check(tree, "--fail-on", "none", "--baseline", compact, "--update-baseline", *BOOTED)[0] == 0
    assert check(tree, "--fail-on", "none", "--baseline", compact, *BOOTED)[1]["baseline"]["differences"] == 0


def test_baseline_change_kinds():
    from armload.ci.baseline import _kind, changed_text
    ok = ["ok", 2, 4, 0, 0, 24576]
    assert _kind(ok, ok) == []
    assert _kind(ok, ["ok", 2, 4, 0, 0, 28672]) == ["changed image size"]
    assert _kind(ok, ["ok", 2, 5, 0, 0, 24576]) == ["changed PLT counts"]
    assert _kind(ok, ["ok", 2, 4, 1, 0, 24576]) == ["changed PLT counts"]             # emitted entries
    assert _kind(ok, ["fault null-deref in f [m]", 2, 4, 0, 0, 28672]) == ["newly failing", "changed image size"]
    assert _kind(["error -ENODEV", 2, 4, 0, 0, 24576], ["error -EBUSY", 2, 4, 0, 0, 24576]) == ["changed outcome"]
    assert _kind(["load format ENOEXEC"], ok) == ["newly passing"]
    assert _kind(None, ok) == ["new module"] and _kind(ok, None) == ["module gone"]
    ch = {"baseline": dict(zip(("outcome", "plt_core", "plt_init", "plt_used_core", "plt_used_init",
                                "image_bytes"), ok)),
          "now": dict(zip(("outcome", "plt_core", "plt_init", "plt_used_core", "plt_used_init",
                           "image_bytes"), ["ok", 3, 4, 0, 0, 28672]))}
    assert changed_text(ch) == ("PLT reserved 2+4; 24,576 bytes", "PLT reserved 3+4; 28,672 bytes")


def test_baseline_passes_and_options(tmp_path, booted_dir):
    tree = make_tree(tmp_path, "hello", "nullderef")
    compact = str(tmp_path / "b.json")
    check(tree, "--fail-on", "none", "--baseline", compact, "--update-baseline", *BOOTED)
    check(tree, "--fail-on", "none", "--baseline", compact, "--update-baseline", "--placement", "vmalloc",
          "--no-emulate", *BOOTED)
    assert set(json.load(open(compact))["passes"]) == {"window+init", "vmalloc"}
    rc, doc, _ = check(tree, "--fail-on", "none", "--baseline", compact, "--placement", "vmalloc", "--no-emulate", *BOOTED)
    assert rc == 0 and doc["baseline"]["pass"] == "vmalloc"
    vm = json.load(open(compact))["passes"]["vmalloc"]["modules"]["hello-arm.ko"]
    assert vm[3] > 0                                     # in vmalloc space kernel calls go through PLTs
    rc, doc, _ = check(tree, "--fail-on", "none", "--baseline", compact, *BOOTED, "--budget", "1000")
    assert rc == 1 and doc["baseline"]["option_differences"] == [
        "option budget: 3000000 in the baseline, 1000 now"]
    assert main(["check", tree, "--kernel", SYMVERS, "-q", "--baseline", compact, "--placement", "vmalloc"]) == 1


def test_baseline_errors(tmp_path, capsys):
    tree = make_tree(tmp_path, "hello")
    bad = tmp_path / "bad.json"
    bad.write_text('{"modules": 3}')
    assert main(["check", tree, "--kernel", SYMVERS, "-q", "--baseline", str(bad)]) == 1
    assert "neither a `check --json` output nor an armload baseline" in capsys.readouterr().err
    assert main(["check", tree, "--kernel", SYMVERS, "-q", "--update-baseline"]) == 1
    assert "--update-baseline needs --baseline FILE" in capsys.readouterr().err
    rc, doc, _ = check(tree, name="full")
    assert main(["check", tree, "--kernel", SYMVERS, "-q", "--baseline", str(tmp_path / "full.json"),
                 "--update-baseline"]) == 1
    assert "writes the compact baseline format" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------
# JUnit XML (read back with the standard library, not with the writer's library)
# --------------------------------------------------------------------------------------------
def test_junit_report(tmp_path, booted_dir):
    tree = make_tree(tmp_path, "nullderef", "spin", "enodev", "hello", "exporter", "importer")
    patch_init(os.path.join(tree, "exporter-arm.ko"), MVN_R0_18, BX_LR)
    xml = str(tmp_path / "junit.xml")
    rc, doc, recs = check(tree, "--junit", xml, "--fail-on", "fault,dependency-failed,timeout", *BOOTED)
    assert rc == 1
    root = ET.parse(xml).getroot()
    suites = root.findall("testsuite") if root.tag == "testsuites" else [root]
    assert len(suites) == 1
    suite = suites[0]
    cases = suite.findall("testcase")
    assert len(cases) == 3 * 6 and int(suite.get("tests")) == 18
    assert {(c.get("classname"), c.get("name")) for c in cases} == {
        (m[:-len(".ko")], s) for m in recs for s in ("load", "verify", "init")}
    assert int(suite.get("failures")) == 2 and int(suite.get("errors")) == 0 and int(suite.get("skipped")) == 0
    by = {(c.get("classname"), c.get("name")): c for c in cases}
    f = by[("nullderef-arm", "init")].find("failure")
    assert f.get("type") == "fault"
    assert f.get("message").startswith("fault: Unable to handle kernel NULL pointer dereference")
    assert "(at nullderef_init+0x" in f.get("message") and "console: " in f.text and "---[ end trace" in f.text
    f = by[("importer-arm", "init")].find("failure")
    assert f.get("type") == "dependency-failed" and "dependency exporter (exporter-arm.ko)" in f.get("message")
    for m in ("nullderef-arm", "importer-arm"):
        assert by[(m, "load")].find("failure") is None and by[(m, "verify")].find("failure") is None
    # Not in --fail-on: the case passes and says what happened.
    spin = by[("spin-arm", "init")]
    assert spin.find("failure") is None and "budget" in spin.find("system-out").text
    assert "not in --fail-on" in by[("enodev-arm", "init")].find("system-out").text
    assert by[("hello-arm", "init")].find("system-out") is None
    assert all(float(c.get("time")) >= 0 for c in cases)
    # Stages that did not run are skipped; a harness failure is an <error>.
    rc, doc, recs = check(tree, "--junit", xml, "--no-emulate", "--no-verify", *BOOTED)
    cases = ET.parse(xml).getroot().iter("testcase")
    skipped = {(c.get("classname"), c.get("name")): c.find("skipped") for c in cases}
    assert all((s is not None) == (stage != "load") for (m, stage), s in skipped.items())
    assert skipped[("hello-arm", "init")].get("message") == "not run (--no-emulate)"


# --------------------------------------------------------------------------------------------
def test_junit_classname_is_not_split_inside_a_module_name():
    from armload.ci.junit import classname
    # Viewers split at the last dot: package "net.hamradio", class "6pack" (not "ko").
    assert classname("drivers/net/hamradio/6pack.ko") == "drivers.net.hamradio.6pack"
    assert classname("hello-arm.ko") == "hello-arm"
    assert classname("fs/nls/nls_cp437.ko") == "fs.nls.nls_cp437"
    assert classname("x/a.b.ko") == "x.a_b"                  # a dot in the file name is not a split point


# --------------------------------------------------------------------------------------------
# Determinism, names, text
# --------------------------------------------------------------------------------------------
def test_json_is_deterministic_apart_from_timing(tmp_path, booted_dir):
    tree = make_tree(tmp_path, "nullderef", "spin", "enodev", "hello", "exporter", "importer", sub="a/b")
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert main(["check", tree, "--kernel", SYMVERS, *BOOTED, "-q", "--jobs", "1", "--json", str(a), "--no-timing"]) == 1
    assert main(["check", tree, "--kernel", SYMVERS, *BOOTED, "-q", "--jobs", "2", "--json", str(b), "--no-timing"]) == 1
    assert a.read_bytes() == b.read_bytes()
    doc = json.loads(a.read_text())
    assert "timing" not in doc
    assert [r["module"] for r in doc["modules"]][:2] == ["a/b/enodev-arm.ko", "a/b/exporter-arm.ko"]
    assert not any("elapsed" in json.dumps(r) or "time" in r for r in doc["modules"])
    rc, timed, _ = check(tree, "--jobs", "2", *BOOTED)
    t = timed.pop("timing")
    assert set(t) == {"jobs", "wall_seconds", "check_seconds", "setup_seconds", "modules"}
    assert set(t["modules"]) == {r["module"] for r in doc["modules"]}
    assert t["modules"]["a/b/spin-arm.ko"]["init"] > 0
    assert timed == doc


def test_text_lists_every_module_that_did_not_succeed():
    from armload.commands.check import format_report
    from armload.ci.outcomes import summarize
    from armload.ci.worker import CheckOptions
    from armload.kernel.modtree import plan_order
    recs = [{"module": f"drivers/x/m{i:02d}.ko", "name": f"m{i:02d}", "outcome": "fault", "stage": "init",
             "reason": "Unable to handle kernel paging request", "where": f"m{i:02d}_init+0x10/0x40 [m{i:02d}]",
             "init": {"status": "fault"}} for i in range(30)]
    recs += [{"module": "drivers/y/e.ko", "name": "e", "outcome": "error", "stage": "init",
              "reason": "init returned -19 (-ENODEV)", "where": None, "init": {"status": "returned", "retval": -19}}]
    text = format_report(recs, summarize(recs), plan_order([]), CheckOptions(), "k", fail_on=("fault",), rc=1)
    assert "modules that did not succeed (31), by outcome:" in text
    assert "fault (30, in --fail-on):" in text and "error (1):" in text
    for i in range(30):
        assert (f"  drivers/x/m{i:02d}.ko: Unable to handle kernel paging request; at m{i:02d}_init+0x10/0x40 "
                f"[m{i:02d}]") in text
    assert "  drivers/y/e.ko: init returned -19 (-ENODEV)\n" in text
    assert "success: 0 of 31 modules (0.00%)" in text
    assert "check: FAILED: 30 module(s) in fault 30 (--fail-on fault)" in text


def test_success_ratio_is_the_same_in_text_and_json(tmp_path, booted_dir, capsys):
    tree = make_tree(tmp_path, "nullderef", "spin", "enodev", "hello", "exporter", "importer")
    rc, doc, _ = check(tree, *BOOTED)
    out = capsys.readouterr().out
    s = doc["summary"]["success"]
    assert s == {"ok": 3, "decided": 6, "ratio": 0.5}
    assert f"success: 3 of 6 modules ({s['ratio']:.2%})" in out
    assert "init_ok_share" not in json.dumps(doc) and "of runs" not in out


def test_refusals(tmp_path):
    tree = make_tree(tmp_path, "hello")
    p = subprocess.run([sys.executable, "-m", "armload", "check", tree, "-q"], capture_output=True, text=True)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert "no --kernel given" in p.stderr and "--builtin-kernel" in p.stderr and p.stdout == ""
    # the built-in kernel resolves nothing (no model names): the kernel's own refusal, as with no exports
    p = subprocess.run([sys.executable, "-m", "armload", "check", tree, "-q", "--builtin-kernel", "--no-emulate"],
                       capture_output=True, text=True)
    assert p.returncode == 1 and "built-in" in p.stdout and "Unknown symbol __aeabi_unwind_cpp_pr0 (err -2)" in p.stdout
    for jobs in ("0", "-1"):
        p = subprocess.run([sys.executable, "-m", "armload", "check", tree, "-q", "--kernel", SYMVERS,
                            "--jobs", jobs, "--json", "-"], capture_output=True, text=True)
        assert p.returncode == 1 and f"--jobs {jobs}: at least one worker is needed" in p.stderr
        assert json.loads(p.stdout)["ok"] is False


def test_reloc_error_names_the_readelf_row(tmp_path):
    """The kernel sorts each exec REL table before applying it, so its "reloc N" counts the
    sorted table; the message also gives the row readelf shows."""
    from elftools.elf.elffile import ELFFile
    from armload.kernel.config import KernelConfig
    from armload.errors import RelocationError
    from armload.kernel.provider import Kernel
    from armload.loader.session import load_module
    src = os.path.join(SAMPLES, "hello-arm.ko")
    with open(src, "rb") as f:
        elf = ELFFile(f)
        rs = elf.get_section_by_name(".rel.init.text")
        rows = [(r["r_info_type"], r["r_info_sym"]) for r in rs.iter_relocations()]
        nsyms = elf.get_section_by_name(".symtab").num_symbols()
        off = rs["sh_offset"]
    assert [t for t, _ in rows] == [28, 43, 44, 43, 44, 28]      # row 5 (a call) sorts to index 1
    data = bytearray(open(src, "rb").read())
    struct.pack_into("<I", data, off + 5 * 8 + 4, ((nsyms + 5) << 8) | 28)
    bad = tmp_path / "hello.ko"
    bad.write_bytes(bytes(data))
    kernel = Kernel.from_files([SYMVERS], KernelConfig())
    with pytest.raises(RelocationError, match=r"hello: section \d+ reloc 1 \(row 5 of \.rel\.init\.text as "
                                              r"readelf shows it; the kernel sorted the table\): bad relocation"):
        load_module(str(bad), kernel=kernel)
    with pytest.raises(RelocationError) as e:
        load_module(str(bad), kernel=kernel)
    assert e.value.to_dict()["reloc"] == 1 and e.value.to_dict()["row"] == 5
    # The legacy (v4.0) loader does not sort: one index, no note.
    with pytest.raises(RelocationError, match=r"section \d+ reloc 5: bad relocation") as e:
        load_module(str(bad), kernel=Kernel.from_files([SYMVERS], KernelConfig(plt_algorithm="legacy")),
                    config=KernelConfig(plt_algorithm="legacy"))
    assert "row" not in str(e.value)
