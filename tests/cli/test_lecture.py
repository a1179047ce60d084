"""docs/lecture.md stays true: every command in it runs, and the numbers it quotes are printed."""
import os
import re
import shlex

import pytest

from armload.cli import main

from testinputs import ROOT

TEXT = open(os.path.join(ROOT, "docs", "lecture.md")).read()
COMMANDS = re.findall(r"^    armload (.+)$", TEXT, re.M)
QUOTED = ["value = -0x2ff05018", "OUT OF RANGE", "decision: veneer", "bl #0xf0005048", "decision: direct",
          "bl #0xc0100010", "value = 0x2000010", "value = 0x1ffaf54", "ldr\tpc, [pc, #0x38]",
          "00000020  0000241c  R_ARM_CALL", "branch sites: 3 (3 direct, 0 through PLT veneers)",
          "hello.c:12: \tpr_info(\"hello: loaded", "R_ARM_MOVW_ABS_NC\t.LC0", "R_ARM_PREL31",
          "core 1 (.plt 128 bytes), init 2 (.init.plt", "core 3 (.plt", "core 1 (.plt 128 bytes), init 1", "_printk has 2 entries in .plt",
          "-0x2000000 < value < 0x2000000"]


def test_lecture_commands_run_and_print_what_it_quotes(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert len(COMMANDS) >= 10
    out = []
    for cmd in COMMANDS:
        argv = shlex.split(cmd)
        if argv[:2] == ["bench", "plt"]:
            argv = ["bench", "plt", "--sizes", "200,400", "--svg", str(tmp_path / "b.svg")]   # the shape, quickly
        if "--html" in argv:
            argv[argv.index("--html") + 1] = str(tmp_path / "lecture")
        assert main(argv) == 0, cmd
        out.append(capsys.readouterr().out)
    text = "\n".join(out)
    missing = [q for q in QUOTED if q not in text]
    assert not missing
    assert (tmp_path / "b.svg").exists() and (tmp_path / "lecture" / "importer.html").exists()


@pytest.mark.parametrize("pic", sorted(set(re.findall(r"\(pictures/([\w.-]+)\)", TEXT))))
def test_lecture_pictures_are_committed_and_small(pic):
    p = os.path.join(ROOT, "docs", "pictures", pic)
    assert os.path.exists(p), f"{pic}: run make docs-pictures"
    assert os.path.getsize(p) < 100_000
    assert open(p).read().lstrip().startswith("<?xml")
