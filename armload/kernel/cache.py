"""armload's one on-disk cache pattern, for everything a process derives from the kernel files
before it can run anything: the decompressed Image with its kallsyms names and __ksymtab
(image.load_image), the Kernel built from Module.symvers + vmlinuz (provider.Kernel.from_files),
the kallsyms decode (kallsyms/cache.py), the boot snapshots (emu/booted/snapshot.py) and the
emulator's C helpers built by the host compiler (emu/native.py).

An entry is keyed by the SHA-256 of its input files' bytes and of the source of the code that
derives it, so a changed file or a changed parser is a miss, never a stale answer. Entries live in
<cache>/<kind>: the directory named by the kind's environment variable (empty: no cache), else
the checkout's .cache (or $CACHE), else ~/.cache/armload. A damaged entry is a miss and is
rewritten; a read-only cache is rebuilt in every process."""
from __future__ import annotations

import hashlib
import os
import pickle

from .debian import CACHE

_HASHES: dict = {}


def file_hash(path: str) -> str:
    """SHA-256 of a file's bytes, memoised per (path, size, mtime) in this process."""
    st = os.stat(path)
    k = (os.path.abspath(path), st.st_size, st.st_mtime_ns)
    if k not in _HASHES:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        _HASHES[k] = h.hexdigest()
    return _HASHES[k]


def source_hash(here: str, names) -> str:
    """SHA-256 (16 hex digits) of the named source files (relative to the directory `here`),
    each with its name: the version of the code that shapes an entry. Content, not path."""
    h = hashlib.sha256()
    for n in names:
        with open(os.path.join(here, n), "rb") as f:
            h.update(n.encode() + b"\0" + f.read())
    return h.hexdigest()[:16]


def tree_sources(here: str) -> list[str]:
    """Every .py file under the directory `here`, relative and sorted (for source_hash)."""
    out = []
    for d, _, files in sorted(os.walk(here)):
        out += sorted(os.path.relpath(os.path.join(d, n), here) for n in files if n.endswith(".py"))
    return out


def cache_dir(kind: str, env: str | None = None) -> str | None:
    """Where entries of `kind` live: $env if set (empty: None, no cache), else <.cache>/kind when the
    checkout's .cache (or $CACHE) exists, else ~/.cache/armload/kind."""
    if env is not None and env in os.environ:
        return os.environ[env] or None
    base = os.environ.get("CACHE", CACHE)
    if os.path.isdir(base):
        return os.path.join(base, kind)
    return os.path.join(os.path.expanduser("~"), ".cache", "armload", kind)


def read_pickle(path: str):
    """The entry at `path`, or None when it is missing, damaged or foreign."""
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except Exception:                        # missing, damaged or foreign: a miss
        return None


def write_pickle(path: str, obj) -> None:
    """Write an entry atomically (a temporary file renamed); a read-only cache is left as it is."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except OSError:
        pass


def cached(kind: str, files: list[str], extra: str, build):
    """build() once per (kind, the files' bytes, extra, the kernel floor's code); later calls
    unpickle it (the setup cache, ARMLOAD_SETUP_CACHE, beside .cache/boot)."""
    d = cache_dir("setup", "ARMLOAD_SETUP_CACHE")
    if not d:
        return build()
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        h = hashlib.sha256(f"{kind}\0{extra}\0{source_hash(here, tree_sources(here))}".encode())
        for p in files:
            h.update(file_hash(p).encode())
    except OSError:
        return build()                       # unreadable: the builder reports it
    path = os.path.join(d, f"{kind}-{h.hexdigest()[:24]}.pkl")
    obj = read_pickle(path)
    if obj is None:
        obj = build()
        write_pickle(path, obj)
    return obj
