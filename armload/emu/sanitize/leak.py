"""kmemleak's rule: an object the module allocated is leaked when no pointer into it is found in
kernel memory or the registers, except from objects that are leaked themselves.

The scan reads the whole RAM as 32-bit words (numpy, the guest's physical memory), as kmemleak
scans the data sections, the stacks and every allocated object. Left out as roots: the words of
the tracked objects themselves (they count only once the object holding them is reached, as
kmemleak's gray list does), the running task's stack below sp (dead frames: kmemleak scans whole
stacks and so would miss a leak whose pointer is still in a dead frame), and memory the caller
says is going away (a module's own allocations after its exit or a failed init). Objects are
reachable through any pointer inside them (kmemleak's alias rule).
"""
from __future__ import annotations

import numpy as np

RAM_BASE = 0x40000000


def scan(ram, objs, pa_ranges_of, excluded_pa: list[tuple[int, int]], regs: list[int],
         stack_dead: tuple[int, int] | None) -> list:
    """The objects of `objs` not reachable. pa_ranges_of(obj) -> [(pa, va, n)] pieces of the object
    in RAM; excluded_pa / stack_dead: physical ranges that are not roots."""
    if not objs:
        return []
    objs = sorted(objs, key=lambda o: o.start)
    starts = np.array([o.start for o in objs], dtype=np.int64)
    ends = np.array([o.start + max(o.size, 1) for o in objs], dtype=np.int64)
    w = np.frombuffer(ram, dtype="<u4")
    lo, hi = int(starts.min()), int(ends.max())
    idx = np.flatnonzero((w >= lo) & (w < hi))
    vals = w[idx].astype(np.int64)
    k = np.searchsorted(starts, vals, side="right") - 1
    ok = (k >= 0) & (vals < ends[np.maximum(k, 0)])
    idx, target = idx[ok], k[ok]
    pa = RAM_BASE + 4 * idx.astype(np.int64)
    # which object (if any) each referencing word lies in, and the words that are not roots
    holder = np.full(len(pa), -1, dtype=np.int64)
    for i, o in enumerate(objs):
        for p, _va, n in pa_ranges_of(o):
            holder[(pa >= p) & (pa < p + n)] = i
    root = holder < 0
    for a, b in excluded_pa + ([stack_dead] if stack_dead else []):
        root &= ~((pa >= a) & (pa < b))
    reached = np.zeros(len(objs), dtype=bool)
    reached[np.unique(target[root])] = True
    for r in regs:
        j = int(np.searchsorted(starts, r, side="right")) - 1
        if j >= 0 and r < ends[j]:
            reached[j] = True
    # gray propagation: objects referenced from reached objects
    edges_from = holder[~root & (holder >= 0)]
    edges_to = target[~root & (holder >= 0)]
    changed = True
    while changed:
        new = reached[edges_from] & ~reached[edges_to]
        changed = bool(new.any())
        reached[edges_to[new]] = True
    return [o for o, r in zip(objs, reached) if not r]
