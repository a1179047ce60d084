"""emu/native.helper: the one loader of the emulator's C helpers (hw/_tick.c, hw/_c14.c,
sanitize/_shadow.c): built once per process, checked by its struct size, and refused in words
when the booted kernel needs it and there is no compiler."""
from __future__ import annotations

import ctypes
import os
import tempfile

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


def test_helpers_are_built_in_the_one_cache_keyed_by_their_source(monkeypatch, tmp_path):
    src = tmp_path / "h.c"
    src.write_text("int armload_h_size(void) { return 4; }\n")
    cache = tmp_path / "native"
    monkeypatch.setenv("ARMLOAD_NATIVE_CACHE", str(cache))
    monkeypatch.delenv("ARMLOAD_NO_NATIVE", raising=False)
    assert native.build_dirs()[0] == str(cache)
    lib = native.build(str(src), "h")
    assert lib.armload_h_size() == 4
    built = sorted(os.listdir(cache))
    assert len(built) == 1 and built[0].startswith("h-") and built[0].endswith(".so")
    src.write_text("int armload_h_size(void) { return 8; }\n")                # a new source: a new entry
    assert native.build(str(src), "h").armload_h_size() == 8 and len(os.listdir(cache)) == 2
    monkeypatch.setenv("ARMLOAD_NATIVE_CACHE", "")                            # no cache: the temporary directory
    assert native.build_dirs() == [os.path.join(tempfile.gettempdir(), f"armload-{os.getuid()}")]
    monkeypatch.setenv("ARMLOAD_NO_NATIVE", "1")
    assert native.build(str(src), "h") is None
    monkeypatch.delenv("ARMLOAD_NO_NATIVE")
    monkeypatch.setenv("ARMLOAD_NATIVE_CACHE", str(cache))
    src.write_text("this is not C\n")
    monkeypatch.setattr(native, "build_dirs", lambda: [str(cache)])
    assert native.build(str(src), "h") is None                                # a compile error: unavailable


def test_a_helpers_key_covers_the_headers_it_includes(tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    (tmp_path / "common.h").write_text("static inline int two(void) { return 2; }\n")
    src = tmp_path / "sub" / "h.c"
    src.write_text('#include <stdint.h>\n#include "../common.h"\nint armload_h_size(void) { return two(); }\n')
    assert native.sources(str(src)) == ["h.c", "../common.h"]
    monkeypatch.setenv("ARMLOAD_NATIVE_CACHE", str(tmp_path / "native"))
    monkeypatch.delenv("ARMLOAD_NO_NATIVE", raising=False)
    assert native.build(str(src), "h").armload_h_size() == 2
    (tmp_path / "common.h").write_text("static inline int two(void) { return 3; }\n")
    assert native.build(str(src), "h").armload_h_size() == 3                     # the header changed: rebuilt
    here = os.path.dirname(native.__file__)
    assert native.sources(os.path.join(here, "hw", "_c14.c")) == ["_c14.c", "../arm_cond.h"]
    assert native.sources(os.path.join(here, "sanitize", "_shadow.c")) == ["_shadow.c", "../arm_cond.h"]
