"""`armload check --sanitize`: a module with a sanitizer report ends in the outcome class
`sanitizer` (ci/sanitized.py), in the text table, the JSON, the JUnit XML and the baseline, and
--fail-on selects it; without --sanitize the same module is `ok` (init returns 0: the real
armmp kernel notices nothing)."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from testinputs import BOOT_VMLINUZ, CACHE, SAMPLES

from armload.cli import main

FULL_SYMVERS = os.path.join(CACHE, "linux-headers-6.1.0-50-armmp", "usr", "src", "linux-headers-6.1.0-50-armmp",
                            "Module.symvers")
KO = os.path.join(SAMPLES, "sanitize", "sanbugs-arm-debug.ko")


def test_the_class_is_registered_and_fails_by_default():
    from armload.ci.outcomes import DEFAULT_FAIL_ON, OUTCOMES, init_class, parse_fail_on
    assert OUTCOMES["sanitizer"][0] == "module" and "sanitizer" in DEFAULT_FAIL_ON
    assert parse_fail_on("sanitizer") == ("sanitizer",)
    rep = {"class": "heap", "kind": "slab-out-of-bounds", "title": "BUG: KASAN: slab-out-of-bounds in f+0x4/0x8 [m]",
           "function": "f+0x4/0x8 [m]", "line": "m.c:3"}
    ok = {"status": "returned", "retval": 0}
    assert init_class(ok) == "ok" and init_class({**ok, "sanitizer": {"reports": []}}) == "ok"
    assert init_class({**ok, "sanitizer": {"reports": [rep]}}) == "sanitizer"
    assert init_class({"status": "returned", "retval": -12, "sanitizer": {"reports": [rep]}}) == "sanitizer"
    assert init_class({"status": "timeout", "sanitizer": {"reports": [rep]}}) == "timeout"     # a harness class stays
    readme = open(os.path.join(os.path.dirname(SAMPLES), "README.md")).read()
    assert "`sanitizer`" in readme


def _check(tmp_path, bug: int, *extra) -> tuple[int, dict, str]:
    tree = tmp_path / "tree"
    tree.mkdir(exist_ok=True)
    shutil.copy(KO, tree)
    params = tmp_path / "params"
    params.write_text(f"sanbugs bug={bug}\n")
    out = tmp_path / f"c{bug}.json"
    rc = main(["check", str(tree), "--kernel", FULL_SYMVERS, "--kernel", BOOT_VMLINUZ, "-q", "--jobs", "1",
               "--params", str(params), "--no-timing", "--json", str(out), *extra])
    return rc, json.load(open(out))["modules"][0], str(out)


def test_check_gives_a_report_its_class_everywhere(tmp_path, capsys, booted_dir):
    rc, rec, _ = _check(tmp_path, 1, "--sanitize", "all", "--junit", str(tmp_path / "c.xml"),
                        "--baseline", str(tmp_path / "base.json"), "--update-baseline")
    text = capsys.readouterr().out
    assert rc == 0                                        # --update-baseline: written
    assert rec["outcome"] == "sanitizer", rec.get("reason")
    assert rec["reason"].startswith("BUG: KASAN: slab-out-of-bounds in fill+0x")
    assert rec["where"].startswith("sample_modules/src/sanbugs/sanbugs.c:")
    reps = rec["init"]["sanitizer"]["reports"]
    assert [(r["class"], r["kind"]) for r in reps] == [("heap", "slab-out-of-bounds")]
    assert rec["init"]["status"] == "returned" and rec["init"]["retval"] == 0      # what the kernel saw
    assert any(ln.split() == ["sanitizer", "1", "*"] or ln.split()[:2] == ["sanitizer", "1"] for ln in
               text.splitlines()), text
    xml = (tmp_path / "c.xml").read_text()
    assert 'type="sanitizer"' in xml and "BUG: KASAN: slab-out-of-bounds" in xml
    base = (tmp_path / "base.json").read_text()
    assert "sanitizer slab-out-of-bounds in fill [sanbugs]" in base
    # the same module without the sanitizers: ok, which differs from the baseline
    rc, rec, _ = _check(tmp_path, 1, "--baseline", str(tmp_path / "base.json"))
    assert rec["outcome"] == "ok" and "sanitizer" not in rec["init"] and rc == 1
    assert "sanitizer slab-out-of-bounds" in capsys.readouterr().out


@pytest.mark.parametrize("fail_on,rc", [("sanitizer", 1), ("fault", 0)])
def test_fail_on_selects_the_class(tmp_path, capsys, booted_dir, fail_on, rc):
    got, rec, _ = _check(tmp_path, 6, "--sanitize", "locks", "--fail-on", fail_on)
    assert rec["outcome"] == "sanitizer" and got == rc
    assert [r["kind"] for r in rec["init"]["sanitizer"]["reports"]] == ["lock-held-on-return"]


def test_a_clean_init_stays_ok_with_the_sanitizers(tmp_path, booted_dir):
    rc, rec, _ = _check(tmp_path, 0, "--sanitize", "all")
    assert rc == 0 and rec["outcome"] == "ok"
    assert rec["init"]["sanitizer"]["reports"] == [] and rec["init"]["sanitizer"]["notes"] == []
