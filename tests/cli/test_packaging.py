"""armload as a pip package: the wheel holds every file of the armload tree that git tracks (the
C sources emu/native.py compiles at run time included: without them an installed armload could
not run the booted kernel), a licence as an SPDX expression, and the console script."""
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile

from testinputs import ROOT


def test_the_wheel_holds_the_whole_package(tmp_path):
    tracked = subprocess.run(["git", "ls-files", "armload"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    assert any(f.endswith(".c") for f in tracked)
    src = tmp_path / "src"                   # a clean copy: setuptools reuses a checkout's build/lib
    for f in tracked + ["pyproject.toml", "setup.py", "README.md"]:
        os.makedirs(src / os.path.dirname(f), exist_ok=True)
        shutil.copy(os.path.join(ROOT, f), src / f)
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                        "-w", str(tmp_path), str(src)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "Deprecat" not in p.stderr and "deprecat" not in p.stderr              # no banner of our making
    (whl,) = [f for f in os.listdir(tmp_path) if f.endswith(".whl")]
    names = set(zipfile.ZipFile(tmp_path / whl).namelist())
    assert sorted(set(tracked) - names) == []
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(tmp_path / whl).read(meta).decode()
    assert "License-Expression: MIT" in text
    entry = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    ep = zipfile.ZipFile(tmp_path / whl).read(entry).decode()
    assert "armload = armload.cli:main" in ep and "armload = armload.devkit.pytest_plugin" in ep


def test_the_licence_is_an_spdx_string():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        assert tomllib.load(f)["project"]["license"] == "MIT"
