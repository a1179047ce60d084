"""The kallsyms decode cache (.cache/kallsyms, ARMLOAD_KALLSYMS_CACHE): decoded tables keyed on the
image's bytes and on the SHA-256 of the decoder's source, so a cached decode never outlives the
code that made it. The pattern (directory, hashes, atomic pickles) is kernel/cache.py's."""
from __future__ import annotations

import os

from .. import cache as C

# The modules whose output the cache holds: the payload (zimage.py), parse_tables() and the rebuild
# check (lookup.py, build.py). A change to any gives a new key, so a cached decode never outlives the code that made it.
_CODE_FILES = ("build.py", "parse.py", "lookup.py", "../zimage.py")


def code_version() -> str:
    """SHA-256 (first 16 hex digits) of the decoder's source files."""
    return C.source_hash(os.path.dirname(os.path.abspath(__file__)), _CODE_FILES)


def cache_dir() -> str | None:
    """ARMLOAD_KALLSYMS_CACHE (empty: no cache), else .cache/kallsyms, else ~/.cache/armload/kallsyms."""
    return C.cache_dir("kallsyms", "ARMLOAD_KALLSYMS_CACHE")


def cache_key(path: str):
    """(key, cache file or None); (None, None) when the image cannot be read."""
    d = cache_dir()
    try:
        size, digest = os.stat(path).st_size, C.file_hash(path)
    except OSError:
        return None, None
    code = code_version()
    key = f"v2-{code}-{size}-{digest}"
    if not d:
        return key, None
    return key, os.path.join(d, f"{os.path.basename(path)}-{size}-{digest[:16]}-{code}.pkl")


def cache_load(path: str):
    """(key, cache file, cached entry or None) for an image."""
    key, cpath = cache_key(path)
    d = C.read_pickle(cpath) if cpath else None
    if isinstance(d, dict) and d.get("key") == key:
        return key, cpath, d
    return key, cpath, None


def cache_store(cpath: str, key: str, parsed: dict, decode_seconds: float) -> None:
    C.write_pickle(cpath, {"key": key, "parsed": parsed, "decode_seconds": decode_seconds})


def cache_store_extra(cpath: str, **extra) -> None:
    """Add derived data (e.g. the recovered pair table) to an existing decode-cache entry."""
    d = C.read_pickle(cpath)
    if isinstance(d, dict) and isinstance(d.get("parsed"), dict):
        d["parsed"].update(extra)
        C.write_pickle(cpath, d)
