"""The kallsyms decode cache (.cache/kallsyms): decoded tables keyed on the image's bytes and on
the SHA-256 of the decoder's source, so a cached decode never outlives the code that made it."""
from __future__ import annotations

import hashlib
import os
import pickle

# The modules whose output the cache holds: the payload (zimage.py), parse_tables() and the rebuild
# check (lookup.py, build.py). A change to any gives a new key, so a cached decode never outlives the code that made it.
_CODE_FILES = ("build.py", "parse.py", "lookup.py", "../zimage.py")


def code_version() -> str:
    """SHA-256 (first 16 hex digits) of the decoder's source files."""
    h = hashlib.sha256()
    here = os.path.dirname(os.path.abspath(__file__))
    for name in _CODE_FILES:
        with open(os.path.join(here, name), "rb") as f:
            h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()[:16]


def cache_dir() -> str | None:
    """ARMLOAD_KALLSYMS_CACHE (empty: no cache), else .cache/kallsyms of the checkout, else ~/.cache."""
    env = os.environ.get("ARMLOAD_KALLSYMS_CACHE")
    if env is not None:
        return env or None
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    if os.path.isdir(os.path.join(root, ".cache")):
        return os.path.join(root, ".cache", "kallsyms")
    return os.path.join(os.path.expanduser("~"), ".cache", "armload", "kallsyms")


def cache_key(path: str):
    """(key, cache file or None); (None, None) when the image cannot be read."""
    d = cache_dir()
    try:
        st = os.stat(path)
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError:
        return None, None
    code = code_version()
    key = f"v2-{code}-{st.st_size}-{h.hexdigest()}"
    if not d:
        return key, None
    return key, os.path.join(d, f"{os.path.basename(path)}-{st.st_size}-{h.hexdigest()[:16]}-{code}.pkl")


def cache_load(path: str):
    """(key, cache file, cached entry or None) for an image."""
    key, cpath = cache_key(path)
    if cpath and os.path.exists(cpath):
        try:
            with open(cpath, "rb") as f:
                d = pickle.load(f)
            if d.get("key") == key:
                return key, cpath, d
        except Exception:      # a damaged or foreign pickle is a miss, decoded again
            pass
    return key, cpath, None


def cache_store(cpath: str, key: str, parsed: dict, decode_seconds: float) -> None:
    _cache_write(cpath, {"key": key, "parsed": parsed, "decode_seconds": decode_seconds})


def cache_store_extra(cpath: str, **extra) -> None:
    """Add derived data (e.g. the recovered pair table) to an existing decode-cache entry."""
    try:
        with open(cpath, "rb") as f:
            d = pickle.load(f)
        d["parsed"].update(extra)
    except (OSError, pickle.PickleError, EOFError, KeyError, TypeError):
        return
    _cache_write(cpath, d)


def _cache_write(cpath: str, d: dict) -> None:
    try:
        os.makedirs(os.path.dirname(cpath), exist_ok=True)
        tmp = cpath + f".{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            pickle.dump(d, f, protocol=4)
        os.replace(tmp, cpath)
    except OSError:
        pass
