"""`check` and `run` give the same verdict for the same module (issue 29): both run it inside the
booted kernel, and `armload agree verdicts` reads either's JSON (armload/agree/verdicts.py). Each
sample below is checked as part of a tree and run on its own (with its dependency before it, as
modprobe would load it); the two verdicts, and the finit_module result behind them, must be equal."""
from __future__ import annotations

import json
import os

import pytest

from testinputs import BOOT_VMLINUZ, SYMVERS
from test_check import check, make_tree

from armload.agree.verdicts import Verdict, armload_verdict, armload_verdicts
from armload.cli import main

# sample -> the verdict the kernel gives it (hello 0, enodev's init -ENODEV, nullderef an oops,
# importer after exporter 0)
EXPECTED = {"hello-arm.ko": Verdict("returned", 0), "enodev-arm.ko": Verdict("returned", -19),
            "nullderef-arm.ko": Verdict("oops"), "exporter-arm.ko": Verdict("returned", 0),
            "importer-arm.ko": Verdict("returned", 0)}
DEPS = {"importer-arm.ko": ["exporter-arm.ko"]}


@pytest.fixture(scope="module")
def checked(tmp_path_factory, booted_dir):
    tree = make_tree(tmp_path_factory.mktemp("cvr"), "hello", "enodev", "nullderef", "exporter", "importer")
    rc, doc, recs = check(tree, "--kernel", BOOT_VMLINUZ, "--fail-on", "none")
    assert rc == 0
    return tree, recs


@pytest.mark.parametrize("module", sorted(EXPECTED))
def test_check_and_run_agree(checked, module, capsys):
    tree, recs = checked
    mine = armload_verdict(recs[module])
    paths = [os.path.join(tree, m) for m in DEPS.get(module, []) + [module]]
    capsys.readouterr()
    main(["run", *paths, "--kernel", BOOT_VMLINUZ, "--kernel", SYMVERS, "--json", "--sanitize", "none"])
    doc = json.loads(capsys.readouterr().out)
    ran = armload_verdicts(doc)[os.path.join(tree, module)]
    assert (ran.kind, ran.ret) == (mine.kind, mine.ret) == (EXPECTED[module].kind, EXPECTED[module].ret)
    assert ran.agrees(EXPECTED[module]) and mine.agrees(EXPECTED[module]) and ran.agrees(mine)
