"""The kprobe table's size parameter and the cache-line model behind `bench probes --many`."""
from armload.probes.table import KPROBE_TABLE_SIZE, KprobeTable, LineModel, hash_ptr


class P:
    def __init__(self, addr):
        self.addr = addr


def test_bucket_count_follows_bits_and_lists_shrink():
    probes = [P(0xBF000000 + 4 * i) for i in range(4096)]
    small, big = KprobeTable(), KprobeTable(bits=12)
    assert small.size == KPROBE_TABLE_SIZE == 64 and big.size == 4096
    for p in probes:
        small.add(p)
        big.add(p)
    assert max(len(h) for h in small.heads) >= 4096 // 64
    assert max(len(h) for h in big.heads) < 4096 // 64
    for t in (small, big):
        for p in probes[::97]:
            assert t.get(p.addr) is p
    assert big.nodes * 10 < small.nodes                 # ~1 node per lookup against ~32
    assert hash_ptr(probes[5].addr, 12) < 4096 and hash_ptr(probes[5].addr, 6) < 64


def test_line_model_counts_lru_misses():
    lm = LineModel(size=4 * 64 * 2, ways=2, line=64)     # 4 sets of 2 ways
    lm.touch(0x1000)
    lm.touch(0x1008)                                     # same line: a hit
    assert (lm.accesses, lm.misses) == (2, 1)
    stride = 4 * 64                                      # same set, other lines
    lm.touch(0x1000 + stride)
    lm.touch(0x1000)                                     # 2 ways: still there
    assert lm.misses == 2
    lm.touch(0x1000 + 2 * stride)                        # evicts the least recently used (0x1000 + stride)
    lm.touch(0x1000)
    assert lm.misses == 3
    lm.touch(0x1000 + stride)
    assert lm.misses == 4
    before = (lm.accesses, lm.misses)
    lm.other([0x9000, 0xA000])                           # other traffic evicts but is not counted
    assert (lm.accesses, lm.misses) == before


def test_table_feeds_the_line_model_one_line_per_node():
    lm = LineModel()
    t = KprobeTable(lines=lm)
    same = [0xBF000000 + 4 * i for i in range(200000) if hash_ptr(0xBF000000 + 4 * i) == 0][:5]
    ps = [P(a) for a in same]
    for p in ps:
        t.add(p)
    t.reset_counts()
    t.get(same[0])                                       # the oldest: at the tail, 5 nodes
    assert (t.nodes, lm.accesses, lm.misses) == (5, 6, 6)
    t.get(same[0])                                       # again: every line cached
    assert (lm.accesses, lm.misses) == (12, 6)
    c = KprobeTable(cache=True, lines=LineModel())
    for p in ps:
        c.add(p)
    c.get(same[0])
    c.reset_counts()
    c.get(same[0])                                       # per-cpu cache hit: slot line + the probe's line
    assert (c.cache_hits, c.nodes, c.lines.accesses) == (1, 0, 2)


def test_kprobe_table_is_the_kernels_hash_of_hlists():
    from armload.probes.table import KPROBE_TABLE_SIZE, KprobeTable, hash_ptr

    class P:
        def __init__(self, addr):
            self.addr = addr
    # hash_32 of a 32-bit kernel: the top 6 bits of addr * GOLDEN_RATIO_32 (mod 2^32)
    for a in (0, 1, 0xBF000000, 0xFFFFFFFF, 0xC0008000):
        assert hash_ptr(a) == ((a * 0x61C88647) % (1 << 32)) // (1 << 26)
    assert KPROBE_TABLE_SIZE == 64
    same = [a for a in range(0xBF000000, 0xBF100000, 4) if hash_ptr(a) == hash_ptr(0xBF000000)][:10]
    for cache in (False, True):
        t = KprobeTable(cache=cache)
        probes = [P(a) for a in same]
        for p in probes:
            t.add(p)
        assert t.walk(same[-1]) == (probes[-1], 1)           # hlist_add_head: the newest first
        assert t.walk(same[0]) == (probes[0], 10)
        assert t.walk(same[-1] + 0x100000) == (None, len(t.heads[hash_ptr(same[-1] + 0x100000)]))
        t.reset_counts()
        for _ in range(3):
            assert t.get(same[0]) is probes[0]
        assert t.nodes == (10 if cache else 30)              # the cache saves the second and third walk
        assert t.cache_hits == (2 if cache else 0)
        t.remove(probes[0])
        assert t.get(same[0]) is None

