"""Which modules a check covers: a tree with the dependencies taken from a full tree, a
selection by name, path or glob, a shard; and each module's fingerprint (file hash, build-id)."""
from __future__ import annotations

import os
import struct

from ..kernel.modtree import ModuleInfo, Plan, scan_tree


def file_sha256(data: bytes) -> str:
    import hashlib
    return hashlib.sha256(data).hexdigest()[:16]


NT_GNU_BUILD_ID = 3


def build_id(data: bytes) -> str | None:
    """The GNU build-id note (`ld --build-id`, in .note.gnu.build-id), as readelf -n prints it."""
    try:
        e_shoff, = struct.unpack_from("<I", data, 0x20)
        e_shentsize, e_shnum = struct.unpack_from("<HH", data, 0x2E)
        if e_shentsize != 40:
            return None
        shdrs = [struct.unpack_from("<10I", data, e_shoff + 40 * i) for i in range(e_shnum)]
        for sh in shdrs:
            if sh[1] != 7:                       # SHT_NOTE
                continue
            off, end = sh[4], min(sh[4] + sh[5], len(data))
            while off + 12 <= end:               # Elf32_Nhdr: namesz, descsz, type; padded to 4
                namesz, descsz, typ = struct.unpack_from("<3I", data, off)
                name = data[off + 12:off + 12 + namesz]
                desc_at = off + 12 + (namesz + 3) // 4 * 4
                if typ == NT_GNU_BUILD_ID and name == b"GNU\0" and desc_at + descsz <= end:
                    return data[desc_at:desc_at + descsz].hex()
                off = desc_at + (descsz + 3) // 4 * 4
        return None
    except (struct.error, IndexError):
        return None


def fingerprint(info: ModuleInfo) -> tuple[str | None, str | None]:
    """(file SHA-256, build-id) of a module, read when its record is made (in the worker that
    checks it), so that a subset of a large tree hashes only its own modules."""
    from ..errors import ArmloadError
    from ..kernel.kofile import decompress, read_raw
    try:
        data = read_raw(info.path)
    except ArmloadError:
        return None, None
    try:
        return file_sha256(data), build_id(decompress(data, info.path))     # the file's hash, the ELF's id
    except ArmloadError:
        return file_sha256(data), None


def scan_with_deps(tree: str, deps_from: str, *, rename: bool = True) -> tuple[list[ModuleInfo], list[str]]:
    """The modules of `tree` to check, with the dependencies they need taken from the full tree
    `deps_from`: (every module, the names of the ones to check). A module of `tree` replaces the
    full tree's module of the same name; one that lies inside `deps_from`, or replaces a module
    of it, is named by that module's path there (unless not `rename`), so its records match a
    baseline of the full tree."""
    full = scan_tree(deps_from)
    mine = scan_tree(tree)
    top = os.path.realpath(deps_from)
    in_full = {m.name: m.rel for m in full}
    for m in mine if rename else ():
        real = os.path.realpath(m.path)
        if os.path.isdir(top) and real.startswith(top + os.sep):
            m.rel = os.path.relpath(real, top).replace(os.sep, "/")
        elif m.name in in_full:              # a rebuilt or patched copy of a module of the tree
            m.rel = in_full[m.name]
    names = {m.name for m in mine}
    return [m for m in full if m.name not in names] + mine, sorted(names)


def select(plan: Plan, patterns: list[str]) -> list[str]:
    """The modules (in plan order) that any pattern names: a module name (- and _ alike), a path
    relative to the tree, a directory of the tree (every module under it) or a glob over either
    (`drivers/net/can/*`, `*wifi*`). ValueError names the patterns that match nothing."""
    import fnmatch
    hit: set[str] = set()
    none = []
    for pat in patterns:
        p = pat.strip().rstrip("/")
        key = p.replace("-", "_")
        got = {n for n, m in plan.modules.items()
               if n == key or m.rel == p or m.rel.startswith(p + "/")
               or fnmatch.fnmatchcase(m.rel, p) or fnmatch.fnmatchcase(n, key)}
        if not got:
            none.append(pat)
        hit |= got
    if none:
        raise ValueError(", ".join(none))
    return [n for n in plan.order if n in hit]


def parse_shard(text: str) -> tuple[int, int]:
    """'K/N' -> (K, N) with 1 <= K <= N. ValueError otherwise."""
    try:
        k, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ValueError(f"{text!r} is not K/N (e.g. 1/4)") from None
    if not 1 <= k <= n:
        raise ValueError(f"{text!r}: need 1 <= K <= N")
    return k, n


def shard(names: list[str], k: int, n: int) -> list[str]:
    """Shard K of N: every N-th module of the selection, starting at the K-th."""
    return names[k - 1::n]


