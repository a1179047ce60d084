"""The kprobe table as kernel/kprobes.c (6.1) keeps it, and a per-cpu cache in front of it.

`kprobe_table[KPROBE_TABLE_SIZE]` is an array of hlists indexed by hash_ptr(addr,
KPROBE_HASH_BITS); register_kprobe adds at the head of its list (hlist_add_head_rcu); every
registered probe stays in its list while disabled; get_kprobe walks one list comparing
addresses. hash_ptr on a 32-bit kernel is hash_32: (val * GOLDEN_RATIO_32) >> (32 - bits).

The cache (switchable) remembers recently hit addresses per CPU in a small direct-mapped array;
a hit skips the list walk, a miss walks it and fills the slot. Both count list nodes visited.
"""
from __future__ import annotations

KPROBE_HASH_BITS = 6
KPROBE_TABLE_SIZE = 1 << KPROBE_HASH_BITS
GOLDEN_RATIO_32 = 0x61C88647
CACHE_SLOTS = 64                          # per CPU


def hash_32(val: int, bits: int) -> int:
    return ((val * GOLDEN_RATIO_32) & 0xFFFFFFFF) >> (32 - bits)


def hash_ptr(addr: int, bits: int = KPROBE_HASH_BITS) -> int:
    return hash_32(addr & 0xFFFFFFFF, bits)


class KprobeTable:
    """Registered probes by address; `get` is get_kprobe and counts the nodes it visits.

    Each hlist is kept as two parallel Python lists (addresses, probes) in list order, head
    first; a walk that stops at position i has visited i + 1 nodes (list.index does the walk)."""

    def __init__(self, cache: bool = False, cache_slots: int = CACHE_SLOTS, ncpus: int = 1):
        self.addrs: list[list[int]] = [[] for _ in range(KPROBE_TABLE_SIZE)]
        self.heads: list[list] = [[] for _ in range(KPROBE_TABLE_SIZE)]
        self.cache_on = cache
        self.cache_slots = cache_slots
        self.caches = [[None] * cache_slots for _ in range(ncpus)]
        self.lookups = 0
        self.nodes = 0
        self.cache_hits = 0

    def __len__(self) -> int:
        return sum(len(h) for h in self.heads)

    def add(self, probe) -> None:
        h = hash_ptr(probe.addr)
        self.addrs[h].insert(0, probe.addr)                   # hlist_add_head_rcu
        self.heads[h].insert(0, probe)

    def remove(self, probe) -> None:
        h = hash_ptr(probe.addr)
        i = self.heads[h].index(probe)
        del self.heads[h][i], self.addrs[h][i]
        for c in self.caches:
            j = (probe.addr >> 2) % self.cache_slots
            if c[j] is not None and c[j].addr == probe.addr:
                c[j] = None

    def walk(self, addr: int):
        """get_kprobe without the cache: (probe or None, nodes visited)."""
        h = hash_ptr(addr)
        try:
            i = self.addrs[h].index(addr)
        except ValueError:
            return None, len(self.addrs[h])
        return self.heads[h][i], i + 1

    def get(self, addr: int, cpu: int = 0):
        self.lookups += 1
        if self.cache_on:
            c = self.caches[cpu]
            j = (addr >> 2) % self.cache_slots
            p = c[j]
            if p is not None and p.addr == addr:
                self.cache_hits += 1
                return p
            p, n = self.walk(addr)
            self.nodes += n
            if p is not None:
                c[j] = p
            return p
        p, n = self.walk(addr)
        self.nodes += n
        return p

    def reset_counts(self) -> None:
        self.lookups = self.nodes = self.cache_hits = 0
