"""emu/native.helper: the one loader of the emulator's C helpers (hw/_tick.c, hw/_c14.c,
sanitize/_shadow.c): built once per process, checked by its struct size, and refused in words
when the booted kernel needs it and there is no compiler."""
from __future__ import annotations

import ctypes

import pytest

from armload.emu import native
from armload.emu.hw import tick


def test_a_needed_helper_without_a_compiler_is_refused_in_words(monkeypatch):
    monkeypatch.setattr(native, "_LIBS", {})
    monkeypatch.setattr(native, "build", lambda *a, **k: None)
    with pytest.raises(RuntimeError, match=r"needs a host C compiler \(cc\) for its block hook .*make toolchain"):
        tick._lib()
    assert native.helper(tick._SRC, "tick", tick.Tick) is None          # not needed: None, no error


def test_built_once_and_checked_by_its_struct_size(monkeypatch):
    calls = []

    def build(src, stem, check=None):
        calls.append(stem)
        return native.__dict__["_real_build"](src, stem, check)
    monkeypatch.setattr(native, "_LIBS", {})
    monkeypatch.setitem(native.__dict__, "_real_build", native.build)
    monkeypatch.setattr(native, "build", build)
    a = native.helper(tick._SRC, "tick", tick.Tick)
    b = native.helper(tick._SRC, "tick", tick.Tick)
    assert a is b and a is not None and calls == ["tick"]
    assert a.armload_tick_size() == ctypes.sizeof(tick.Tick)

    class Wrong(ctypes.Structure):                   # a struct unlike the C one: the library is rejected
        _fields_ = [("x", ctypes.c_uint8)]
    monkeypatch.setattr(native, "_LIBS", {})
    assert native.helper(tick._SRC, "tick", Wrong) is None
