"""Every ```python block of README.md and docs/*.md runs as written from the repository root."""
import glob
import os
import re

import pytest

from testinputs import ROOT

DOCS = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
BLOCKS = [(os.path.relpath(p, ROOT), i, code) for p in DOCS
          for i, code in enumerate(re.findall(r"```python\n(.*?)```", open(p).read(), re.S))]


def test_docs_have_python_snippets():
    assert any(p == "README.md" for p, _, _ in BLOCKS)


@pytest.mark.parametrize("doc,i,code", BLOCKS, ids=[f"{p}#{i}" for p, i, _ in BLOCKS])
def test_snippet_runs_from_repo_root(doc, i, code, monkeypatch):
    monkeypatch.chdir(ROOT)
    exec(compile(code, f"{doc} block {i}", "exec"), {"__name__": "__readme__"})


# --- every command line (issue 33) --------------------------------------------------------------------
# The commands come from the parsers themselves (armload.cli's subparsers, `bench`'s choices): a new
# command or bench entry without a line in COMMAND_LINES turns this red, and so does a command line
# in the docs naming an option its parser does not have. Each line runs in-process on a sample and
# is checked for its exit status and the shape of its output; an internal error (exit 2) is a crash.
import argparse
import json

from testinputs import SYMVERS, require_input, sample
from armload.kernel import debian

VMLINUZ = debian.VMLINUZ


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    from armload.cli import build_parser
    p = build_parser()
    return next(a for a in p._actions if isinstance(a, argparse._SubParsersAction)).choices


def _commands() -> dict[str, argparse.ArgumentParser]:
    """Every command and every subcommand of one ("agree verdicts"), by its words."""
    out = {}
    for name, p in _subparsers().items():
        out[name] = p
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                out.update({f"{name} {s}": sp for s, sp in a.choices.items()})
    return out


def _options(parser) -> set[str]:
    return {o for a in parser._actions for o in a.option_strings}


def _bench_choices() -> tuple[str, ...]:
    return next(a for a in _subparsers()["bench"]._actions if a.dest == "what").choices


def _json(out: str) -> dict:
    return json.loads(out)


def _file(path: str) -> dict:
    return json.load(open(path))


# name -> (argv with {H} hello-arm.ko, {S} Module.symvers, {K} the vmlinuz, {T} a tmp dir holding
# tree/hello-arm.ko; exit status; check(stdout, tmp) -> truthy). check writes what
# check-merge and agree verdicts read (NEEDS below: each runs its writer when the file is not there).
COMMAND_LINES = {
    "load": (["load", "{H}", "--kernel", "{S}", "--json"], 0,
             lambda o, t: _json(o)["ok"] and _json(o)["modules"][0]["module"] == "hello"),
    "load text": (["load", "{H}", "--kernel", "{S}"], 0, lambda o, t: "hello" in o),
    "run": (["run", "{H}", "--kernel", "{K}", "--kernel", "{S}", "--json"], 0,
            lambda o, t: _json(o)["ok"] and _json(o)["modules"][0]["status"] == "returned"),
    "run text": (["run", "{H}", "--kernel", "{K}", "--kernel", "{S}", "--exit"], 0,
                 lambda o, t: "hello: init returned 0" in o and "delete_module returned 0" in o),
    "verify": (["verify", "{H}", "--kernel", "{S}"], 0, lambda o, t: "branches verified: " in o),
    "verify --json": (["verify", "{H}", "--kernel", "{S}", "--json"], 0,
                      lambda o, t: _json(o)["ok"] and _json(o)["modules"][0]["module"] == "hello"),
    "verify --against-kernel": (["verify", "{H}", "--kernel", "{S}", "--kernel", "{K}", "--against-kernel", "--json"],
                                0, lambda o, t: _json(o)["modules"][0]["loader_vs_kernel"]["identical"]),
    "disasm": (["disasm", "{H}", "--kernel", "{S}", "--json"], 0, lambda o, t: _json(o)["blocks"]),
    "disasm text": (["disasm", "{H}", "--kernel", "{S}", "--plt", "--patched"], 0, lambda o, t: "section" in o),
    "explain": (["explain", "{H}", "--kernel", "{S}", "--symbol", "_printk", "--json"], 0,
                lambda o, t: _json(o)["explanations"]),
    "report": (["report", "{H}", "--kernel", "{S}", "--html", "{T}/html", "--json"], 0,
               lambda o, t: all(os.path.exists(f) for f in _json(o)["files"])),
    "check": (["check", "{T}/tree", "--kernel", "{S}", "--kernel", "{K}", "-q", "--json", "{T}/check.json",
               "--junit", "{T}/check.xml"], 0,
              lambda o, t: _file(f"{t}/check.json")["modules"] and os.path.getsize(f"{t}/check.xml")),
    "check --shard": (["check", "{T}/tree", "--kernel", "{S}", "-q", "--shard", "1/1", "--json", "{T}/shard.json"], 0,
                      lambda o, t: _file(f"{t}/shard.json")["modules"]),
    "check-merge": (["check-merge", "{T}/shard.json", "--json", "{T}/merged.json"], 0,
                    lambda o, t: [m["name"] for m in _file(f"{t}/merged.json")["modules"]] ==
                    [m["name"] for m in _file(f"{t}/shard.json")["modules"]]),
    "matrix": (["matrix", "--cell", "6.1.0-50-armmp", "--modules", "{T}/tree", "-q", "--json", "{T}/matrix.json"], 0,
               lambda o, t: _file(f"{t}/matrix.json")),
    "agree verdicts": (["agree", "verdicts", "{T}/check.json", "--json"], 0, lambda o, t: "percent" in _json(o)),
    "agree kprobes": (["agree", "kprobes", "--json", "{T}/kprobes.json"], 0,
                      lambda o, t: "probes-agree" in o and _file(f"{t}/kprobes.json")["blacklist"]["same_order"]),
    "agree loader": (["agree", "loader", "--cases", "2", "--json", "{T}/loader.json"], 0,
                     lambda o, t: "decided alike" in o and sum(_file(f"{t}/loader.json")["rows"].values()) == 2),
    "kallsyms": (["kallsyms", "{K}", "--lookup", "_printk", "--json"], 0,
                 lambda o, t: _json(o)["address"].startswith("0xc")),
    "kallsyms text": (["kallsyms", "{K}", "--grep", "^_printk$"], 0, lambda o, t: "_printk" in o),
    # bench: `all` is loader, kallsyms, kallsyms-arm, emulate and devio (text: each prints its table);
    # the others one by one with their smallest arguments
    "bench all": (["bench", "all"], 0, lambda o, t: all(w in o for w in ("kallsyms", "instructions"))),
    "bench kallsyms-arm": (["bench", "kallsyms-arm", "--json"], 0, lambda o, t: _json(o)["kallsyms-arm"]["rows"]),
    "bench plt": (["bench", "plt", "--sizes", "200", "--json"], 0, lambda o, t: _json(o)["plt"]["rows"]),
    "bench probes": (["bench", "probes", "--json"], 0, lambda o, t: _json(o)["probes"]["lists_equal_model"]),
    "bench task-rename": (["bench", "task-rename", "--json"], 0,
                          lambda o, t: _json(o)["task-rename"]["verdict"]["reproduced"]),
    "bench sanitize": (["bench", "sanitize", "--limit", "2", "--json"], 0,
                       lambda o, t: _json(o)["sanitize"]["modules"] == 2 and _json(o)["sanitize"]["ratio"]),
    "bench call": (["bench", "call", "--json"], 0,
                   lambda o, t: _json(o)["call"]["calls"]
                   and 1 <= _json(o)["call"]["ratio_instructions"] <= _json(o)["call"]["target"]),
    "bench cli": (["bench", "cli", "--json"], 0,
                  lambda o, t: [r["command"] for r in _json(o)["cli"]["rows"]][-1] == "armload load hello-arm.ko"
                  and _json(o)["cli"]["ld_found"] and _json(o)["cli"]["load_median"] > 0),
    "bench speed": (["bench", "speed", "--limit", "2", "--json"], 0,
                    lambda o, t: _json(o)["speed"]["check"]["modules"] == 2 and _json(o)["speed"]["fork"]["forks"]),
}
BENCH_IN_ALL = ("loader", "kallsyms", "kallsyms-arm", "emulate", "coverage", "devio")


def test_every_command_has_a_line():
    """Every subcommand of the parser (and of `agree`), every `bench` entry and every --json has a line
    to run."""
    lines = [v[0] for v in COMMAND_LINES.values()]
    for name, parser in _commands().items():
        mine = [a for a in lines if a[:len(name.split())] == name.split()]
        assert mine, f"armload {name} has no line in COMMAND_LINES"
        if "--json" in _options(parser):
            assert any("--json" in a for a in mine), f"armload {name} --json is never run"
    run_bench = {a[1] for a in lines if a[0] == "bench"}
    for w in _bench_choices():
        assert w in run_bench or ("all" in run_bench and w in BENCH_IN_ALL), f"armload bench {w} is never run"


def _doc_command_lines() -> list[tuple[str, str]]:
    """(doc, line) for every `armload CMD ...` code span and every indented or prompted code line."""
    out = []
    for p in DOCS:
        text = open(p).read()
        doc = os.path.relpath(p, ROOT)
        out += [(doc, s.replace("\n", " ")) for s in re.findall(r"`(armload [a-z][^`]*)`", text)]
        out += [(doc, re.sub(r"^\s*(\w*\$)?\s*", "", ln)) for ln in text.split("\n")
                if re.match(r"^    +(\w*\$\s+)?armload [a-z]", ln)]
    return out


def test_documented_command_lines_are_the_parsers():
    """Each command line in the docs names a real command and only options its parser has; the
    README's command list names every command and every bench entry."""
    subs = _subparsers()
    opts = {n: _options(s) for n, s in _commands().items()}
    lines = _doc_command_lines()
    assert len(lines) > 30
    for doc, s in lines:
        cmd, rest = re.match(r"armload\s+([a-z][a-z-]*)(.*)", s).groups()
        assert cmd in subs, f"{doc}: `armload {cmd}` is not a command ({s})"
        word = re.match(r"\s+([a-z][a-z-]*)", rest)
        if word and f"{cmd} {word.group(1)}" in opts:          # a subcommand: `agree verdicts ...`
            cmd, rest = f"{cmd} {word.group(1)}", rest[word.end():]
        for o in re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)", rest):
            assert o in opts[cmd], f"{doc}: armload {cmd} has no option {o} ({s})"
    readme = open(os.path.join(ROOT, "README.md")).read()
    block = readme[readme.index("## Commands"):]
    block = block[:block.index("\n\n", block.index("    armload"))]
    listed = set(re.findall(r"^    armload (\S+)", block, re.M))
    assert listed == set(subs), f"README ## Commands lists {sorted(listed ^ set(subs))} differently"
    bench = re.search(r"armload bench\s+\[([a-z|-]+)\]", block).group(1).split("|")
    assert sorted(bench) == sorted(_bench_choices())


@pytest.mark.parametrize("name", [None, *_commands()])
def test_help(name, capsys):
    from armload.cli import main
    with pytest.raises(SystemExit) as e:
        main([*name.split(), "--help"] if name else ["--help"])
    assert e.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: armload {name or ''}".rstrip())


@pytest.fixture(scope="module")
def cli_tmp(tmp_path_factory):
    t = tmp_path_factory.mktemp("cli")
    (t / "tree").mkdir()
    (t / "tree" / "hello-arm.ko").write_bytes(open(sample("hello-arm.ko"), "rb").read())
    return str(t)


# A line that reads what another writes: the writer runs first in this worker's tmp dir when its file
# is not there yet (pytest-xdist may give the two lines to different workers, each with its own dir).
NEEDS = {"check-merge": ("check --shard", "shard.json"), "agree verdicts": ("check", "check.json")}


def _argv(name, tmp):
    return [a.format(H=sample("hello-arm.ko"), S=SYMVERS, K=VMLINUZ, T=tmp) for a in COMMAND_LINES[name][0]]


@pytest.mark.parametrize("name", list(COMMAND_LINES))
def test_command_line(name, cli_tmp, capsys, monkeypatch):
    from armload.cli import main
    require_input(VMLINUZ, "make test-inputs")
    monkeypatch.chdir(ROOT)
    argv, want, check = COMMAND_LINES[name]
    if name in NEEDS and not os.path.exists(os.path.join(cli_tmp, NEEDS[name][1])):
        assert main(_argv(NEEDS[name][0], cli_tmp)) == 0
        capsys.readouterr()
    argv = _argv(name, cli_tmp)
    rc = main(argv)
    out, err = capsys.readouterr()
    assert "internal error" not in err and "Traceback" not in err, err
    assert rc == want, (rc, err[-2000:])
    assert check(out, cli_tmp), out[-2000:]
