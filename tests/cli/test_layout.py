"""The package's layout: each folder one concern, arrows pointing one way (down the floors of
armload/__init__.py), no import circle, and a command that imports only what it uses; and the tests'
own: each file in the folder of the wing it tests, each name once, each fixture defined once.

Imports are read from the source (ast), function-level ones included, so a lazy import that
points up a floor or closes a circle is caught as well as a module-level one."""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys

import pytest

from testinputs import ROOT, sample

PKG = os.path.join(ROOT, "armload")

# A module may import from its own wing or from a strictly lower floor (armload/__init__.py).
FLOORS = {
    "errors": 0, "constants": 0, "_lazy": 0,
    "kernel": 1,
    "loader": 2,
    "emu": 3, "inspect": 3,
    "probes": 4, "ci": 4, "devkit": 4, "inputs": 4,
    "agree": 5, "bench": 5,
    "commands": 6,
    "cli": 7,
    "__main__": 8,
}
TOP_FILES = {"__init__.py", "__main__.py", "cli.py", "errors.py", "constants.py", "_lazy.py"}


def _modules() -> dict[str, str]:
    out = {}
    for d, _, files in os.walk(PKG):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(d, f)
                name = os.path.relpath(path[:-3], ROOT).replace(os.sep, ".")
                out[name.removesuffix(".__init__")] = path
    return out


MODULES = _modules()


def _imports(name: str, path: str) -> set[str]:
    """The armload modules `name` imports, at any depth of its code."""
    is_pkg = path.endswith("__init__.py")
    out = set()
    for node in ast.walk(ast.parse(open(path).read(), path)):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module
            out.update(f"{mod}.{a.name}" if f"{mod}.{a.name}" in MODULES else mod for a in node.names)
    return {m for m in out if m in MODULES}


GRAPH = {m: _imports(m, p) for m, p in MODULES.items()}


def wing(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _sccs(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = n
        n += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = n
                    n += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_every_wing_has_a_floor():
    assert {wing(m) for m in MODULES} - {"__init__"} <= set(FLOORS), "a new folder or top file needs a floor"


def test_the_root_package_imports_only_floor_zero():
    """Every import of a submodule imports `armload` first, so any module may name the root (for
    `__version__`); the root itself takes only the lazy-export helper."""
    assert GRAPH["armload"] == {"armload._lazy"}


def test_the_top_folder_holds_only_shared_pieces():
    assert {f for f in os.listdir(PKG) if f.endswith(".py")} == TOP_FILES


def test_imports_point_down():
    assert _upward(GRAPH) == []


def _upward(graph) -> list[tuple[str, str]]:
    return sorted((m, t) for m, ts in graph.items() if m != "armload" for t in ts
                  if t != "armload" and wing(m) != wing(t) and FLOORS[wing(t)] >= FLOORS[wing(m)])


def test_no_import_circle():
    assert _sccs(GRAPH) == []


def test_the_checks_catch_what_they_guard():
    """Both checks fail on a graph with an upward arrow or a circle (their other side)."""
    g = {k: set(v) for k, v in GRAPH.items()}
    g["armload.loader.model"].add("armload.emu.booted.modrun")    # up a floor, and into a circle
    assert _upward(g) == [("armload.loader.model", "armload.emu.booted.modrun")]
    assert [c for c in _sccs(g) if {"armload.loader.model", "armload.emu.booted.modrun"} <= set(c)]
    g = {k: set(v) for k, v in GRAPH.items()}
    g["armload.emu.booted.machine"].add("armload.inspect.report")  # sideways on one floor is up too
    assert _upward(g) == [("armload.emu.booted.machine", "armload.inspect.report")]
    assert _sccs({"a": {"b"}, "b": set()}) == [] and _sccs({"a": {"b"}, "b": {"a"}}) == [["a", "b"]]


def _run_imports(*argv: str) -> tuple[int, list[str]]:
    """Run `armload ARGV` in a fresh interpreter; its exit code and every module it imported."""
    code = ("import contextlib, io, sys\n"
            "from armload.cli import main\n"
            "out = io.StringIO()\n"
            "with contextlib.redirect_stdout(out):\n"
            "    try:\n"
            f"        rc = main({list(argv)!r})\n"
            "    except SystemExit as e:\n"
            "        rc = e.code\n"
            "mods = sorted(sys.modules)\n"
            "import json\n"                                  # after the count: json is a module a command may import
            "print(json.dumps([rc, mods]))\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    rc, mods = json.loads(p.stdout.splitlines()[-1])
    return rc, mods


HEAVY = ("unicorn", "capstone", "keystone", "matplotlib", "elftools", "junitparser")


def test_load_imports_the_loader_and_nothing_else():
    """`armload load` counts (names) every armload module it imports: the loader, the report, no
    emulator, probes, CI, benchmarks or other commands, and none of the heavy libraries."""
    rc, mods = _run_imports("load", sample("hello-arm.ko"), "--kernel", sample("Module.symvers"))
    assert rc == 0
    ours = sorted(m for m in mods if m == "armload" or m.startswith("armload."))
    assert ours == [
        "armload", "armload._lazy", "armload.cli", "armload.commands", "armload.commands.load",
        "armload.constants", "armload.errors", "armload.inspect", "armload.inspect.report",
        "armload.kernel", "armload.kernel.choices", "armload.kernel.config", "armload.kernel.identity",
        "armload.kernel.kofile", "armload.kernel.provider",
        "armload.loader", "armload.loader.elf", "armload.loader.finalize", "armload.loader.for_kernel",
        "armload.loader.layout", "armload.loader.model", "armload.loader.plt", "armload.loader.relocate",
        "armload.loader.session", "armload.loader.symbols", "armload.loader.this_module",
        "armload.loader.validity"], f"{len(ours)} armload modules"
    assert [m for m in mods if m.split(".")[0] in HEAVY] == []
    assert "numpy.ma" not in mods                  # numpy 2's plain np.unique imports it: loader.model.distinct
    # what a plain load does not use is imported where it is used: hashlib (OpenSSL) by plt.native_sort()
    # and the setup cache, json for --json, gzip for an IKCONFIG, modtree (and its heapq) for a tree
    assert [m for m in ("hashlib", "json", "gzip", "heapq") if m in mods] == []


def test_help_imports_no_library_code():
    rc, mods = _run_imports("--help")
    assert rc == 0
    ours = {m for m in mods if m.startswith("armload.")}
    assert {f"armload.commands.{c}" for c in ("load", "run", "check", "bench")} <= ours
    assert not {m for m in ours if wing(m) in ("loader", "emu", "inspect", "probes", "bench", "devkit", "inputs")
                and m not in ("armload.emu", "armload.emu.limits")}
    assert [m for m in mods if m.split(".")[0] in HEAVY + ("numpy",)] == []
    # no dataclass is built: dataclasses imports inspect (ast, dis, tokenize); the parsers take their
    # choices from kernel/choices.py and emu/limits.py, not from the modules that use them
    assert [m for m in ("dataclasses", "inspect", "armload.kernel.config", "armload.ci.worker") if m in mods] == []


def test_help_lists_every_command_and_an_unknown_one_is_refused():
    from armload.cli import COMMANDS, command_in
    p = subprocess.run([sys.executable, "-m", "armload", "--help"], capture_output=True, text=True)
    assert p.returncode == 0 and all(c in p.stdout for c in COMMANDS)
    assert command_in(["--json", "load", "x.ko"]) == "load" and command_in(["lod", "x.ko"]) is None
    p = subprocess.run([sys.executable, "-m", "armload", "lod", "x.ko"], capture_output=True, text=True)
    assert p.returncode == 2 and "invalid choice: 'lod'" in p.stderr and "load" in p.stderr


def test_public_names_and_no_old_paths():
    """The names `armload` exports; the pre-layout paths (and the old aliases) are gone."""
    import importlib

    import armload
    for name in armload.__all__:
        assert getattr(armload, name) is not None, name
    from armload import Kernel, KernelConfig, Session
    from armload.kernel import Kernel as K2
    from armload.loader import Session as S2
    assert (K2, S2) == (Kernel, Session) and KernelConfig().plt_algorithm == "v6"
    for gone in ("armload.plt", "armload.verify", "armload.corpus", "armload.emu.image", "armload.config",
                 "armload.testing", "armload.explain", "armload.synth", "armload.pytest_plugin", "armload._moved",
                 "armload.loader.kofile", "armload.kernel.kallsyms.tables"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(gone)
    with pytest.raises(AttributeError):
        armload.no_such_name
    p = subprocess.run([sys.executable, "-m", "armload.inputs.synth", "--help"], capture_output=True, text=True)
    assert p.returncode == 0 and "--relocs" in p.stdout


# --- the tests' own layout -------------------------------------------------------------------------
# Each test file sits in the folder of the wing it tests: one per folder of armload/, with `cli` for
# cli.py and the commands/ behind it. pytest imports the files by their names (each wing folder goes on
# sys.path, there is no __init__.py), so a name is used once in the whole tree.
TESTS = os.path.join(ROOT, "tests")
TEST_WINGS = {d for d in os.listdir(PKG) if os.path.isfile(os.path.join(PKG, d, "__init__.py"))} - {"commands"} | {"cli"}
TEST_DATA = {"oracles", "fuzz_crashes", "fuzz_seeds", "golden"}   # folders of tests/ that hold no tests
TESTS_TOP = {"conftest.py", "testinputs.py", "asm_module.py", "hostile_samples.py",
             "corpus_baseline.json", "boot_selftests.json"}
PLUGIN = os.path.join(PKG, "devkit", "pytest_plugin.py")      # its fixtures are every test's too


def _test_files() -> list[str]:
    """Every test_*.py under tests/, relative to it."""
    return sorted(os.path.relpath(os.path.join(d, f), TESTS) for d, _, files in os.walk(TESTS)
                  for f in files if f.startswith("test_") and f.endswith(".py"))


def _misplaced(files: list[str]) -> list[str]:
    """The test files not directly in a wing folder, and every second file of one name."""
    seen, out = set(), []
    for f in files:
        parts = f.split(os.sep)
        if len(parts) != 2 or parts[0] not in TEST_WINGS or parts[1] in seen:
            out.append(f)
        seen.add(parts[-1])
    return out


def _is_fixture(decorator) -> bool:
    f = decorator.func if isinstance(decorator, ast.Call) else decorator
    return getattr(f, "attr", getattr(f, "id", None)) == "fixture"


def _fixtures(paths: list[str]) -> dict[str, list[str]]:
    """fixture name -> the files that define one of that name (@pytest.fixture, called or not)."""
    out: dict[str, list[str]] = {}
    for p in paths:
        for node in ast.walk(ast.parse(open(p).read(), p)):
            if isinstance(node, ast.FunctionDef) and any(_is_fixture(d) for d in node.decorator_list):
                out.setdefault(node.name, []).append(os.path.relpath(p, ROOT))
    return out


def test_every_test_file_is_in_its_wings_folder():
    files = _test_files()
    assert len(files) > 70 and _misplaced(files) == []
    assert _misplaced(["test_x.py", "commands/test_y.py", "loader/sub/test_z.py", "loader/test_a.py",
                       "emu/test_a.py", "kernel/test_b.py"]) == [
        "test_x.py", "commands/test_y.py", "loader/sub/test_z.py", "emu/test_a.py"]


def test_the_tests_folder_holds_the_wings_and_the_shared_pieces():
    top = os.listdir(TESTS)
    assert {f for f in top if os.path.isfile(os.path.join(TESTS, f))} == TESTS_TOP
    assert {d for d in top if os.path.isdir(os.path.join(TESTS, d))} - {"__pycache__"} == TEST_WINGS | TEST_DATA
    for w in TEST_WINGS:
        assert set(os.listdir(os.path.join(TESTS, w))) - {"__pycache__", "conftest.py"} == \
            {f for f in os.listdir(os.path.join(TESTS, w)) if f.startswith("test_") and f.endswith(".py")}, w


def test_no_fixture_is_defined_twice():
    paths = [os.path.join(d, f) for d, _, files in os.walk(TESTS) if os.path.relpath(d, TESTS).split(os.sep)[0]
             not in TEST_DATA for f in files if f.endswith(".py")] + [PLUGIN]
    defs = _fixtures(paths)
    assert {"booted_dir", "run", "load_module", "kernel"} <= set(defs)   # tests/, a wing's, the plugin's
    assert {n: fs for n, fs in defs.items() if len(fs) > 1} == {}
    assert len(_fixtures([PLUGIN, PLUGIN])["kernel"]) == 2                 # a second definition is seen


def test_the_readme_names_every_test_wing():
    readme = open(os.path.join(ROOT, "README.md")).read()
    layout = readme[readme.index("## Layout"):readme.index("## Commands")]
    named = set(re.findall(r"`tests/([a-z_]+)/`", layout))
    assert TEST_WINGS <= named and named - TEST_WINGS <= TEST_DATA
    assert re.search(r"`\.venv/bin/python -m pytest tests/([a-z]+)`", layout).group(1) in TEST_WINGS
