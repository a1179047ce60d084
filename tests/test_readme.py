"""Every ```python block of README.md and docs/*.md runs as written from the repository root."""
import glob
import os
import re

import pytest

from conftest import ROOT

DOCS = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
BLOCKS = [(os.path.relpath(p, ROOT), i, code) for p in DOCS
          for i, code in enumerate(re.findall(r"```python\n(.*?)```", open(p).read(), re.S))]


def test_docs_have_python_snippets():
    assert any(p == "README.md" for p, _, _ in BLOCKS)


@pytest.mark.parametrize("doc,i,code", BLOCKS, ids=[f"{p}#{i}" for p, i, _ in BLOCKS])
def test_snippet_runs_from_repo_root(doc, i, code, monkeypatch):
    monkeypatch.chdir(ROOT)
    exec(compile(code, f"{doc} block {i}", "exec"), {"__name__": "__readme__"})
