"""Module paths that moved when the package was split into folders, kept importable only where the
README, the lecture or the pytest plugin promised them. The old name is the same module object as
the new one."""
from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util

MOVED = {
    "armload.config": "armload.kernel.config",                   # README: from armload.config import KernelConfig
    "armload.testing": "armload.devkit.testing",                 # README: from armload.testing import ModuleOops
    "armload.explain": "armload.inspect.explain",                # docs/lecture.md: explain_module
    "armload.synth": "armload.inputs.synth",                     # README: python -m armload.synth
    "armload.pytest_plugin": "armload.devkit.pytest_plugin",     # the plugin's entry point before the move
}


class _Alias:
    """Loader that answers an old name with the new module (and its code, for `python -m`)."""

    def __init__(self, new: str):
        self.new = new

    def create_module(self, spec):
        return importlib.import_module(self.new)

    def exec_module(self, module) -> None:
        pass                                              # already executed under its new name

    def get_code(self, name: str):
        spec = importlib.util.find_spec(self.new)
        return spec.loader.get_code(self.new)


class MovedFinder:
    """On sys.meta_path: finds only the names in MOVED."""

    @staticmethod
    def find_spec(name: str, path=None, target=None):
        new = MOVED.get(name)
        return importlib.machinery.ModuleSpec(name, _Alias(new)) if new else None
