"""On-disk cache of what every process derives from the kernel files before it can run anything:
the decompressed Image with its kallsyms names and __ksymtab (image.load_image), and the Kernel
built from Module.symvers + vmlinuz (provider.Kernel.from_files). Each entry is a pickle in
.cache/setup (beside .cache/boot, the boot snapshots), keyed by the SHA-256 of every input
file's bytes and of the source of the code that derives it, so a changed file or a changed
parser is a miss, never a stale answer. ARMLOAD_SETUP_CACHE= (empty) turns it off; a damaged
entry is a miss and is rewritten."""
from __future__ import annotations

import hashlib
import os
import pickle

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


def code_hash() -> str:
    """The source of the kernel floor (provider, image, config, kallsyms/): what shapes an entry."""
    here = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha256()
    for d, _, files in sorted(os.walk(here)):
        for n in sorted(files):
            if n.endswith(".py"):
                with open(os.path.join(d, n), "rb") as f:
                    h.update(n.encode() + b"\0" + f.read())
    return h.hexdigest()[:16]


def cache_dir() -> str | None:
    env = os.environ.get("ARMLOAD_SETUP_CACHE")
    if env is not None:
        return env or None
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    base = os.environ.get("CACHE", os.path.join(root, ".cache"))
    if os.path.isdir(base):
        return os.path.join(base, "setup")
    return os.path.join(os.path.expanduser("~"), ".cache", "armload", "setup")


def cached(kind: str, files: list[str], extra: str, build):
    """build() once per (kind, the files' bytes, extra, the code); later calls unpickle it."""
    d = cache_dir()
    if not d:
        return build()
    try:
        h = hashlib.sha256(f"{kind}\0{extra}\0{code_hash()}".encode())
        for p in files:
            h.update(file_hash(p).encode())
    except OSError:
        return build()                       # unreadable: the builder reports it
    path = os.path.join(d, f"{kind}-{h.hexdigest()[:24]}.pkl")
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except FileNotFoundError:
        pass
    except Exception:                        # damaged or foreign: built again below
        pass
    obj = build()
    try:
        os.makedirs(d, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except OSError:
        pass                                 # a read-only cache: the next process builds it again
    return obj
