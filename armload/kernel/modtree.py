"""A tree of kernel modules as modprobe sees it: each file's .modinfo (name=, depends=,
vermagic=; read without a full ELF parse), the name -> file index, and the dependency order
(dependencies first, as depmod's modules.dep and modprobe load them). The one home of these
facts: `check` plans a whole tree with plan_order, a single module's dependencies come from
load_order (the same plan, on that module's closure)."""
from __future__ import annotations

import fnmatch
import heapq
import os
import struct
from dataclasses import dataclass, field

from .kofile import is_module_file, modinfo_strings, module_stem, read_module


def parse_modinfo(data: bytes) -> tuple[dict[str, list[str]], str | None]:
    """(.modinfo key -> values, error) from the section header table and .modinfo only."""
    try:
        if data[:4] != b"\x7fELF" or len(data) < 52:
            return {}, "not an ELF file"
        e_shoff, = struct.unpack_from("<I", data, 0x20)
        e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", data, 0x2E)
        if e_shentsize != 40 or e_shstrndx >= e_shnum or e_shoff + e_shnum * 40 > len(data):
            return {}, "section header table out of bounds"
        shdrs = [struct.unpack_from("<10I", data, e_shoff + 40 * i) for i in range(e_shnum)]
        stroff = shdrs[e_shstrndx][4]
        for sh in shdrs:
            end = data.find(b"\0", stroff + sh[0])
            if data[stroff + sh[0]:end] != b".modinfo":
                continue
            off, size = sh[4], sh[5]
            if off + size > len(data):
                return {}, ".modinfo out of bounds"
            return modinfo_strings(data[off:off + size]), None
        return {}, "no .modinfo section"
    except (struct.error, IndexError) as e:
        return {}, f"malformed ELF: {e}"


def read_modinfo(path: str) -> tuple[dict[str, list[str]], str | None]:
    """(.modinfo key -> values, error) of a module file (.ko or .ko.xz/.zst/.gz)."""
    from ..errors import ArmloadError
    try:
        data = read_module(path)
    except ArmloadError as e:
        return {}, str(e).removeprefix(f"{path}: ")
    return parse_modinfo(data)


@dataclass
class ModuleInfo:
    """One module of a tree as its .modinfo describes it (name, depends, vermagic)."""

    path: str
    name: str
    depends: list[str]
    vermagic: str | None
    size: int
    scan_error: str | None = None    # .modinfo could not be read (the loader will say why)
    rel: str = ""                    # path relative to the tree: how reports name the module

    def __post_init__(self):
        self.rel = self.rel or os.path.basename(self.path)


def module_info(path: str, root: str | None = None) -> ModuleInfo:
    """One module file's name (modinfo name=, else the file's stem), depends= (dashes as
    underscores) and vermagic=; named relative to `root` when given."""
    info, err = read_modinfo(path)
    name = (info.get("name") or [None])[0] or module_stem(path)
    deps = [d.replace("-", "_") for d in ",".join(info.get("depends", [])).split(",") if d]
    rel = os.path.basename(path) if root is None or path == root else os.path.relpath(path, root).replace(os.sep, "/")
    return ModuleInfo(path, name, deps, (info.get("vermagic") or [None])[0], os.path.getsize(path), err, rel)


def scan_tree(root: str) -> list[ModuleInfo]:
    """Every *.ko and *.ko.{xz,zst,gz} under root (or the file itself), sorted by path."""
    if os.path.isfile(root):
        paths = [root]
    else:
        paths = []
        for d, dirs, files in os.walk(root):
            dirs.sort()
            paths.extend(os.path.join(d, f) for f in files if is_module_file(f))
        paths.sort()
    return [module_info(p, root) for p in paths]


def tree_index(root: str) -> dict[str, str]:
    """module name (dashes as underscores) -> path of its .ko (or .ko.xz, .ko.zst, .ko.gz) under
    `root`."""
    out = {}
    for d, _, files in os.walk(root):
        for f in sorted(files):
            if is_module_file(f):
                out.setdefault(module_stem(f), os.path.join(d, f))
    return out


WILDCARDS = "*?["                             # fnmatch's (kmod matches modules.alias with fnmatch(3))


@dataclass
class Aliases:
    """modules.alias as depmod writes it from every module's `alias=`, for modprobe's lookup: a
    pattern without wildcards is looked up by its text, one with them by the literal text before
    its first wildcard (a prefix of every name it can match) and then fnmatch'ed."""

    exact: dict[str, list[str]] = field(default_factory=dict)                # pattern -> paths
    wild: dict[str, list[tuple[str, str]]] = field(default_factory=dict)     # literal head -> (pattern, path)

    def lookup(self, want: str) -> list[str]:
        """The paths of every module one of whose patterns matches `want`, sorted."""
        found = set(self.exact.get(want, ()))
        for k in range(len(want) + 1):
            found.update(p for pat, p in self.wild.get(want[:k], ()) if fnmatch.fnmatchcase(want, pat))
        return sorted(found)


def alias_index(index: dict[str, str]) -> Aliases:
    """The aliases of every module of a name index (tree_index), in name order."""
    out = Aliases()
    for _, path in sorted(index.items()):
        for pat in read_modinfo(path)[0].get("alias", []):
            cut = min((i for i in (pat.find(c) for c in WILDCARDS) if i >= 0), default=-1)
            if cut < 0:
                out.exact.setdefault(pat, []).append(path)
            else:
                out.wild.setdefault(pat[:cut], []).append((pat, path))
    return out


@dataclass
class Plan:
    """A tree's load plan: the order, each module's dependency closure, and what cannot load."""

    order: list[str]                          # every runnable module, dependencies first
    modules: dict[str, ModuleInfo]
    closure: dict[str, list[str]]             # name -> dependencies (transitive), in load order
    blocked: dict[str, str] = field(default_factory=dict)   # name -> why it cannot be loaded at all
    duplicates: list[tuple[str, str]] = field(default_factory=list)   # (name, ignored path)

    def dependents(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for n, m in self.modules.items():
            for d in m.depends:
                out.setdefault(d, set()).add(n)
        return out


def plan_order(mods: list[ModuleInfo]) -> Plan:
    """Topological order (Kahn, ties by name) with missing dependencies and cycles reported."""
    by_name: dict[str, ModuleInfo] = {}
    dups = []
    for m in mods:
        if m.name in by_name:
            dups.append((m.name, m.path))
            continue
        by_name[m.name] = m
    blocked: dict[str, str] = {}
    for n, m in by_name.items():
        missing = [d for d in m.depends if d not in by_name]
        if missing:
            blocked[n] = f"depends on {', '.join(missing)}, not found in the tree"
    indeg = {n: 0 for n in by_name}
    users: dict[str, list[str]] = {n: [] for n in by_name}
    for n, m in by_name.items():
        for d in set(m.depends):
            if d in by_name:
                indeg[n] += 1
                users[d].append(n)
    ready = [n for n, k in indeg.items() if k == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        n = heapq.heappop(ready)
        order.append(n)
        for u in users[n]:
            indeg[u] -= 1
            if indeg[u] == 0:
                heapq.heappush(ready, u)
    if len(order) < len(by_name):
        left = {n for n in by_name if indeg[n] > 0}
        for n in sorted(left):
            cyc = _find_cycle(n, by_name, left)
            if cyc and n in cyc:
                blocked[n] = "dependency cycle: " + " -> ".join(cyc + [cyc[0]])
            else:
                blocked.setdefault(n, "depends on a module in a dependency cycle")
        order += sorted(left)      # still listed, so that the report covers them
    pos = {n: i for i, n in enumerate(order)}
    closure: dict[str, list[str]] = {}
    for n in order:
        seen: set[str] = set()
        stack = [d for d in by_name[n].depends if d in by_name]
        while stack:
            d = stack.pop()
            if d in seen or d == n:
                continue
            seen.add(d)
            stack.extend(x for x in by_name[d].depends if x in by_name)
        closure[n] = sorted(seen, key=pos.__getitem__)
    # Transitive blocking: anything needing a blocked module is skipped because of it.
    for n in order:
        if n in blocked:
            continue
        bad = next((d for d in closure[n] if d in blocked), None)
        if bad is not None:
            blocked[n] = f"skipped: dependency {bad} cannot be loaded ({blocked[bad]})"
    return Plan(order, by_name, closure, blocked, dups)


def _find_cycle(start: str, by_name: dict[str, ModuleInfo], within: set[str]) -> list[str] | None:
    path, onpath = [], set()

    def dfs(n):
        path.append(n)
        onpath.add(n)
        for d in by_name[n].depends:
            if d not in within:
                continue
            if d == start:
                return list(path)
            if d not in onpath:
                r = dfs(d)
                if r:
                    return r
        path.pop()
        onpath.discard(n)
        return None
    return dfs(start)



def load_order(path: str, index: dict[str, str]) -> list[str]:
    """`path`'s dependencies (from .modinfo depends=, recursively, found in `index`), in
    plan_order's order, then `path` itself. FileNotFoundError names a dependency not in the
    tree or a cycle."""
    mods, todo, seen = [], [path], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        m = module_info(p)
        mods.append(m)
        for d in m.depends:
            if d not in index:
                raise FileNotFoundError(f"{os.path.basename(p)} depends on {d}, which is not in the tree")
            todo.append(index[d])
    plan = plan_order(mods)
    me = mods[0].name
    if me in plan.blocked:
        raise FileNotFoundError(f"{os.path.basename(path)}: {plan.blocked[me]}")
    return [plan.modules[d].path for d in plan.closure[me]] + [path]
