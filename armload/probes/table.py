"""The kprobe table as kernel/kprobes.c (6.1) keeps it, a per-cpu cache in front of it, and a
cache-line model of what get_kprobe touches.

`kprobe_table[KPROBE_TABLE_SIZE]` is an array of hlists indexed by hash_ptr(addr,
KPROBE_HASH_BITS); register_kprobe adds at the head of its list (hlist_add_head_rcu); every
registered probe stays in its list while disabled; get_kprobe walks one list comparing
addresses. hash_ptr on a 32-bit kernel is hash_32: (val * GOLDEN_RATIO_32) >> (32 - bits).
Mainline has KPROBE_HASH_BITS 6 (64 lists); `bits` selects another size (the kprobe-cache seed
ran with 4,096 lists, bits 12).

The cache (switchable) remembers recently hit addresses per CPU in a small direct-mapped array;
a hit skips the list walk, a miss walks it and fills the slot. Both count list nodes visited.

The cache-line model (`LineModel`): every lookup touches the line holding its bucket head
(kprobe_table, 4-byte heads), then one line per list node visited (struct kprobe: hlist_node
and addr share its first line), and with the cache the line holding its slot (8-byte slots:
addr, kprobe *). Lines are kept in a set-associative LRU data cache (default 32 KiB, 4 ways, 64-byte
lines: a Cortex-A15 L1D); a line not present is a miss. Nothing else runs between lookups
unless the caller touches other lines (`LineModel.other`), so the misses are those of
get_kprobe alone, not a share of a workload's misses as the seed measured.
"""
from __future__ import annotations

KPROBE_HASH_BITS = 6
KPROBE_TABLE_SIZE = 1 << KPROBE_HASH_BITS
GOLDEN_RATIO_32 = 0x61C88647
CACHE_SLOTS = 64                          # per CPU
TABLE_BASE = 0xC1000000                   # model addresses: kprobe_table[], the probes, the per-cpu cache
PROBES_BASE = 0xD0000000
PCPU_BASE = 0xC2000000
KPROBE_SIZE = 128                         # sizeof(struct kprobe) is 80 on 32-bit ARM 6.1: kmalloc-128 (ksize in the booted kernel)


def hash_32(val: int, bits: int) -> int:
    return ((val * GOLDEN_RATIO_32) & 0xFFFFFFFF) >> (32 - bits)


def hash_ptr(addr: int, bits: int = KPROBE_HASH_BITS) -> int:
    return hash_32(addr & 0xFFFFFFFF, bits)


class LineModel:
    """A set-associative LRU data cache counting misses of the lines it is shown."""

    def __init__(self, size: int = 32 * 1024, ways: int = 4, line: int = 64):
        self.line, self.ways = line, ways
        self.nsets = size // (line * ways)
        self.sets: list[list[int]] = [[] for _ in range(self.nsets)]
        self.accesses = self.misses = 0

    def touch(self, addr: int) -> None:
        tag = addr // self.line
        s = self.sets[tag % self.nsets]
        self.accesses += 1
        if tag in s:
            s.remove(tag)
        else:
            self.misses += 1
            if len(s) >= self.ways:
                s.pop(0)
        s.append(tag)

    def other(self, addrs) -> None:
        """Lines the rest of the system touches between lookups (not counted)."""
        a, m = self.accesses, self.misses
        for x in addrs:
            self.touch(x)
        self.accesses, self.misses = a, m

    def reset_counts(self) -> None:
        self.accesses = self.misses = 0


class KprobeTable:
    """Registered probes by address; `get` is get_kprobe and counts the nodes it visits.

    Each hlist is kept as two parallel Python lists (addresses, probes) in list order, head
    first; a walk that stops at position i has visited i + 1 nodes (list.index does the walk)."""

    def __init__(self, cache: bool = False, cache_slots: int = CACHE_SLOTS, ncpus: int = 1,
                 bits: int = KPROBE_HASH_BITS, lines: LineModel | None = None):
        self.bits = bits
        self.size = 1 << bits
        self.addrs: list[list[int]] = [[] for _ in range(self.size)]
        self.heads: list[list] = [[] for _ in range(self.size)]
        self.cache_on = cache
        self.cache_slots = cache_slots
        self.caches = [[None] * cache_slots for _ in range(ncpus)]
        self.lines = lines
        self._where: dict[int, int] = {}           # id(probe) -> its model address
        self.lookups = 0
        self.nodes = 0
        self.cache_hits = 0

    def __len__(self) -> int:
        return sum(len(h) for h in self.heads)

    def all(self) -> list:
        return [p for h in self.heads for p in h]

    def add(self, probe) -> None:
        h = hash_ptr(probe.addr, self.bits)
        self.addrs[h].insert(0, probe.addr)                   # hlist_add_head_rcu
        self.heads[h].insert(0, probe)
        self._where.setdefault(id(probe), PROBES_BASE + KPROBE_SIZE * len(self._where))

    def remove(self, probe) -> None:
        h = hash_ptr(probe.addr, self.bits)
        i = self.heads[h].index(probe)
        del self.heads[h][i], self.addrs[h][i]
        for c in self.caches:
            j = (probe.addr >> 2) % self.cache_slots
            if c[j] is not None and c[j].addr == probe.addr:
                c[j] = None

    def walk(self, addr: int):
        """get_kprobe without the cache: (probe or None, nodes visited)."""
        h = hash_ptr(addr, self.bits)
        try:
            i = self.addrs[h].index(addr)
        except ValueError:
            return None, len(self.addrs[h])
        return self.heads[h][i], i + 1

    def _touch_walk(self, addr: int, n: int) -> None:
        h = hash_ptr(addr, self.bits)
        self.lines.touch(TABLE_BASE + 4 * h)
        heads = self.heads[h]
        for k in range(n):
            self.lines.touch(self._where[id(heads[k])])

    def get(self, addr: int, cpu: int = 0):
        self.lookups += 1
        if self.cache_on:
            c = self.caches[cpu]
            j = (addr >> 2) % self.cache_slots
            if self.lines is not None:
                self.lines.touch(PCPU_BASE + 0x1000 * cpu + 8 * j)
            p = c[j]
            if p is not None and p.addr == addr:
                self.cache_hits += 1
                if self.lines is not None:
                    self.lines.touch(self._where[id(p)])
                return p
            p, n = self.walk(addr)
            self.nodes += n
            if self.lines is not None:
                self._touch_walk(addr, n)
            if p is not None:
                c[j] = p
            return p
        p, n = self.walk(addr)
        self.nodes += n
        if self.lines is not None:
            self._touch_walk(addr, n)
        return p

    def reset_counts(self) -> None:
        self.lookups = self.nodes = self.cache_hits = 0
        if self.lines is not None:
            self.lines.reset_counts()
