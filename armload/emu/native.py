"""Small C helpers of the emulator (block hooks), compiled once per source version.

A helper is built with the host C compiler into the one on-disk cache (kernel/cache.py's
cache_dir("native"), ARMLOAD_NATIVE_CACHE overriding it), keyed by the SHA-256 of its source and
of the local headers it includes (arm_cond.h), and loaded with ctypes; an unwritable cache falls
back to a per-user temporary directory.
Without a compiler (or with ARMLOAD_NO_NATIVE set) the caller uses its Python twin, which must
behave identically, or refuses in words when it has none (helper's `need`).
"""
from __future__ import annotations

import ctypes
import os
import re
import subprocess
import tempfile

from ..kernel.cache import cache_dir, source_hash


def build_dirs() -> list[str]:
    """Where a helper is built, in order: the cache, then /tmp/armload-<uid>."""
    d = cache_dir("native", "ARMLOAD_NATIVE_CACHE")
    return ([d] if d else []) + [os.path.join(tempfile.gettempdir(), f"armload-{os.getuid()}")]


def sources(src: str) -> list[str]:
    """The helper's source and the local headers it includes (#include "..."), relative to its
    directory: what its build key hashes, so a changed header builds again."""
    here, out, work = os.path.dirname(src), [], [os.path.basename(src)]
    while work:
        n = work.pop(0)
        if n in out:
            continue
        out.append(n)
        with open(os.path.join(here, n)) as f:
            d = os.path.dirname(n)
            work += [os.path.normpath(os.path.join(d, i)) for i in re.findall(r'^#include "([^"]+)"', f.read(), re.M)]
    return out


def build(src: str, stem: str, check=None):
    """ctypes.CDLL of `src` compiled as a shared object, or None. `check(lib)` may reject a
    library (e.g. a struct size mismatch), which then counts as unavailable."""
    if os.environ.get("ARMLOAD_NO_NATIVE"):
        return None
    tag = source_hash(os.path.dirname(src), sources(src))
    for d in build_dirs():
        so = os.path.join(d, f"{stem}-{tag}.so")
        try:
            if not os.path.exists(so):
                os.makedirs(d, exist_ok=True)
                tmp = f"{so}.{os.getpid()}.tmp"
                subprocess.run([os.environ.get("CC", "cc"), "-O2", "-shared", "-fPIC", "-o", tmp, src],
                               check=True, capture_output=True, timeout=60)
                os.replace(tmp, so)
            lib = ctypes.CDLL(so)
            if check is not None and not check(lib):
                continue
            return lib
        except (OSError, subprocess.SubprocessError):
            continue
    return None


_LIBS: dict = {}


def helper(src: str, stem: str, struct, need: str | None = None, also=None):
    """The helper `stem` (built from `src` once per process), checked by its
    armload_<stem>_size() against ctypes.sizeof(struct) unless struct is None (and by `also(lib)`, e.g.
    a second struct). Without a compiler: None, or, when `need` says what needs it, a RuntimeError saying so."""
    if stem not in _LIBS:
        _LIBS[stem] = build(src, stem, lambda lib: (struct is None or
                                                    getattr(lib, f"armload_{stem}_size")() == ctypes.sizeof(struct))
                            and (also is None or also(lib)))
    if _LIBS[stem] is None and need:
        raise RuntimeError(f"the booted kernel needs a host C compiler (cc) for {need}; install gcc (make toolchain)")
    return _LIBS[stem]
