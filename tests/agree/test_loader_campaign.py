"""The loader's oracle campaign (armload/agree/loader.py, `armload agree loader`, make fuzz-kernel):
the first cases of seed 1 through the booted kernel's own load_module and armload's loader."""
import json

from testinputs import BOOT_VMLINUZ, SYMVERS

from armload.agree import loader
from armload.inputs.fuzz_cases import CLASSES


def test_campaign_counts_every_case_once(booted_dir):
    rep = loader.campaign(BOOT_VMLINUZ, SYMVERS, 3, seed=1)
    assert (rep["cases"], rep["seed"], sum(rep["rows"].values())) == (3, 1, 3)
    assert sum(sum(c.values()) for c in rep["by_class"].values()) == 3
    assert rep["agreement"] == round(100 * (rep["rows"].get("both-accept", 0) + rep["rows"].get("both-refuse", 0)) / 3, 1)
    assert all(ex.startswith("case ") for exs in rep["examples"].values() for ex in exs)


def test_report_writes_the_json_and_fails_on_a_finding(booted_dir, tmp_path, capsys, monkeypatch):
    out = tmp_path / "kdiff.json"
    assert loader.report(BOOT_VMLINUZ, SYMVERS, 2, 1, str(out)) == 0     # seed 1's first cases decide alike
    assert "2 mutated samples through the kernel's load_module and armload (seed 1)" in capsys.readouterr().out
    assert json.loads(out.read_text())["cases"] == 2
    monkeypatch.setattr(loader, "classify", lambda res: ("armload-only", "kernel -22"))
    assert loader.report(BOOT_VMLINUZ, SYMVERS, 1, 1) == 1
    assert "armload-only" in capsys.readouterr().out
    assert loader.DEFAULT_CASES == 20 * len(CLASSES)
