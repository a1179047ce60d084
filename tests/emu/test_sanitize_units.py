"""The sanitizers' pure parts without a kernel (armload/emu/sanitize: heap.py's shadow, locks.py's
lock words and dependency paths, access.py's decoder and conditions, stack.py's DWARF helpers,
leak.py's scan): each rule at its bounds, so that a changed comparison or constant turns a test
red (`make mutants` on the detectors)."""
import struct

import numpy as np
import pytest

from armload.emu.booted.machine import GuestFault
from armload.emu.sanitize import heap as H
from armload.emu.sanitize import locks as L
from armload.emu.sanitize.access import _UC, cond_passes, decode


def _obj(start, size, extent, kind="kmalloc", cache=None):
    return H.Obj(start, size, extent, kind, extent if cache is None else cache, "m", None)


# --- heap.py ----------------------------------------------------------------------------------------
def test_the_shadow_keeps_objects_sorted_and_its_bounds():
    h = H.HeapShadow()
    assert len(h) == 0 and (h.lo, h.hi) == (0xFFFFFFFF, 0)
    b, a = _obj(0x3000, 8, 16), _obj(0x1000, 8, 16)
    h.add(b)
    h.add(a)
    assert h.objs == [a, b] and h.starts == [0x1000, 0x3000] and len(h) == 2
    assert (h.lo, h.hi) == (0x1000, 0x3010)
    assert h.find(0x1000) is a and h.find(0x100F) is a and h.find(0x1010) is None
    assert h.find(0x0FFF) is None and h.find(0x3010) is None and h.find(0x2000) is None
    assert h.live() == [a, b]
    h.remove(a)
    assert h.objs == [b] and h.starts == [0x3000]


def test_memory_handed_out_again_drops_what_was_tracked_there():
    h = H.HeapShadow()
    a, b, c = _obj(0x1000, 8, 16), _obj(0x1010, 8, 16), _obj(0x1020, 8, 16)
    for o in (a, b, c):
        h.add(o)
    h.freed(b, None)
    assert h.freed_by_cache == {("slab", 16): [b]}
    n = _obj(0x100C, 16, 20)                            # [0x100C, 0x1020): a's end, all of b, not c
    h.add(n)
    assert h.objs == [n, c] and h.freed_by_cache == {("slab", 16): []}
    h.add(_obj(0x1030, 4, 4))                           # from c's end on: c stays
    assert h.objs[1:] == [c, h.objs[2]]


def test_an_object_starting_at_the_new_ones_last_byte_is_dropped():
    h = H.HeapShadow()
    old = _obj(0x101F, 1, 8)
    h.add(old)
    h.add(_obj(0x1000, 32, 32))
    assert old not in h.objs and len(h) == 1


def test_overlapping_after_the_last_object_went():
    h = H.HeapShadow()
    a, b = _obj(0x1000, 8, 16), _obj(0x1020, 8, 16)
    h.add(a)
    h.add(b)
    h.remove(b)                                        # the bounds stay: the walk must stop at the end
    assert h.overlapping(0x1020, 0x1025) is None and h.check(0x1020, 4) is None
    c = _obj(0x1040, 8, 16)
    h.add(b)
    h.add(c)
    assert h.overlapping(0x1034, 0x1044) is c and h.overlapping(0x1034, 0x1038) is None


def test_overlapping_finds_the_first_object_meeting_a_range():
    h = H.HeapShadow()
    a, b = _obj(0x1000, 8, 16), _obj(0x1020, 8, 16)
    h.add(a)
    h.add(b)
    assert h.overlapping(0x0FF0, 0x1000) is None and h.overlapping(0x0FF0, 0x1001) is a
    assert h.overlapping(0x1010, 0x1020) is None and h.overlapping(0x1010, 0x1021) is b
    assert h.overlapping(0x100F, 0x1030) is a and h.overlapping(0x1030, 0x1040) is None
    assert h.overlapping(0x1018, 0x1019) is None


def test_check_kinds_and_the_first_bad_byte():
    h = H.HeapShadow()
    h.add(_obj(0x1000, 40, 64))
    h.add(_obj(0x2000, 5000, 8192, "kmalloc_large"))
    h.add(_obj(0x8000, 10, 8192, "kmem_cache"))
    assert h.check(0x1000, 40) is None and h.check(0x1000, 41)[2] == 0x1000 + 40
    assert h.check(0x2000 + 5000, 1)[0] == "out-of-bounds" and h.check(0x2000 + 4999, 1) is None
    assert h.check(0x8000 + 10, 2)[:1] == ("slab-out-of-bounds",) and h.check(0x8000 + 10, 2)[2] == 0x800A
    assert h.check(0x0FFC, 8) is None                   # from below: the bytes before it are not its
    o = h.find(0x1000)
    h.freed(o, "stack")
    assert o.freed == "stack"
    kind, obj, bad = h.check(0x0FFC, 8)                 # a freed one is met from below too
    assert (kind, obj, bad) == ("use-after-free", o, 0x1000)
    assert h.check(0x1004, 4)[2] == 0x1004


def test_a_kernel_allocation_makes_freed_memory_unknown_by_its_slot_or_any():
    h = H.HeapShadow()
    a, v, c = _obj(0x1000, 8, 64), _obj(0xE0000000, 8, 8192, "vmalloc"), _obj(0x3000, 8, 128)
    for o in (a, v, c):
        h.add(o)
        h.freed(o, None)
    assert H.HeapShadow._reuse_key(v) == "any" and H.HeapShadow._reuse_key(a) == ("slab", 64)
    assert H.HeapShadow._reuse_key(_obj(0, 1, 1, "kmalloc_large")) == "any"
    assert h.kernel_allocates(("slab", 64)) == 2 and a.reused and v.reused and not c.reused
    assert h.kernel_allocates(("slab", 64)) == 0
    assert h.kernel_allocates("any") == 1 and c.reused
    assert h.check(0x1000, 1) is None and h.check(0x3000, 1) is None


def test_kmalloc_classes_from_a_roundup_with_every_class():
    real = [8, 16, 32, 64, 96, 128, 192, 256, 512, 1024, 2048, 4096, 8192]

    class BK:
        def call(self, name, n):
            return next(c for c in real if c >= n)
    assert H.kmalloc_classes(BK()) == real


def test_kmalloc_classes_from_the_kernels_roundup():
    class BK:
        def call(self, name, n):
            assert name == "kmalloc_size_roundup"
            return max(n, 64) if n <= 8192 else 16384
    assert H.kmalloc_classes(BK()) == [64, 96, 128, 192, 256, 512, 1024, 2048, 4096, 8192]
    assert H.class_of([64, 128], 0) == 64 and H.class_of([64, 128], 129) == 0
    assert H.KMALLOC_MAX_CACHE_SIZE == 8192 and H.GFP_DIRECT_RECLAIM == 0x400


def test_an_objects_end_is_its_extent():
    assert _obj(0x1000, 1, 64).end == 0x1040


# --- locks.py --------------------------------------------------------------------------------------
def test_lock_words():
    assert L.lock_word_locked("spin", 0) is False and L.lock_word_locked("spin", 0x00050005) is False
    assert L.lock_word_locked("spin", 0x00060005) is True and L.lock_word_locked("spin", 0x00050006) is True
    assert L.lock_word_locked("spin", 0x00010000) is True        # owner 0, next 1
    assert L.lock_word_locked("mutex", 1) is True and L.lock_word_locked("rwlock", 0) is None


def test_dependency_paths_follow_edges_only_forwards():
    s = L.LockState()
    assert s.path(1, 1) == [1] and s.path(1, 2) is None
    s.edges = {1: {2: None, 4: None}, 2: {3: None}, 3: {1: None}}
    assert s.path(1, 3) == [1, 2, 3] and s.path(3, 2) == [3, 1, 2] and s.path(4, 1) is None
    h = s.holding(7)
    assert h == [] and s.holding(7) is h and s.held == {7: []}


def test_inlined_unlocks_by_their_store():
    assert L.inline_unlock("spin", 2) and L.inline_unlock("rwlock", 4)
    assert not L.inline_unlock("spin", 4) and not L.inline_unlock("rwlock", 2)
    assert not L.inline_unlock("mutex", 4) and not L.inline_unlock("mutex", 2) and not L.inline_unlock("spin", 1)


def test_a_path_search_ends_in_a_cycle():
    s = L.LockState()
    s.edges = {1: {2: None}, 2: {3: None}, 3: {1: None}}
    assert s.path(1, 5) is None and s.path(2, 1) == [2, 3, 1]
    s.edges = {1: {2: None}, 2: {3: None}, 3: {2: None}}               # a cycle away from the start
    assert s.path(1, 5) is None and s.path(1, 3) == [1, 2, 3]


def test_the_lock_tables():
    assert L.LOCK_FUNCS["mutex_lock_interruptible"] == ("mutex", "acquire_ret0")
    assert L.LOCK_FUNCS["_raw_spin_trylock"] == ("spin", "try")
    assert L.ATOMIC_KINDS == ("spin", "rwlock") and "mutex" not in L.ATOMIC_KINDS
    assert (L.HARDIRQ_MASK, L.SOFTIRQ_MASK, L.NMI_MASK, L.CPSR_I) == (0xF0000, 0xFF00, 0xF00000, 0x80)


# --- access.py -------------------------------------------------------------------------------------
def _d(word):
    return decode(struct.pack("<I", word), 0x1000)


@pytest.mark.parametrize("word,size,write,disp,index,post", [
    (0xE5912008, 4, False, 8, 0, False),        # ldr r2, [r1, #8]
    (0xE5112008, 4, False, -8, 0, False),       # ldr r2, [r1, #-8]
    (0xE5C12003, 1, True, 3, 0, False),         # strb r2, [r1, #3]
    (0xE1D120B2, 2, False, 2, 0, False),        # ldrh r2, [r1, #2]
    (0xE1C120B2, 2, True, 2, 0, False),         # strh r2, [r1, #2]
    (0xE1D120D1, 1, False, 1, 0, False),        # ldrsb r2, [r1, #1]
    (0xE1D120F2, 2, False, 2, 0, False),        # ldrsh r2, [r1, #2]
    (0xE1C120D8, 8, False, 8, 0, False),        # ldrd r2, r3, [r1, #8]
    (0xE1C120F8, 8, True, 8, 0, False),         # strd r2, r3, [r1, #8]
    (0xE4912004, 4, False, 0, 0, True),         # ldr r2, [r1], #4
    (0xE7912103, 4, False, 0, "r3", False),     # ldr r2, [r1, r3, lsl #2]
    (0xE1912F9F, 4, False, 0, 0, False),        # ldrex r2, [r1]
])
def test_decode_sizes_directions_and_addresses(word, size, write, disp, index, post):
    d = _d(word)
    assert (d.size, d.write, d.disp, d.post) == (size, write, disp, post)
    assert d.index == (_UC[index] if index else 0) and d.base == _UC["r1"]


def test_decode_index_shift_and_sign():
    d = _d(0xE7912103)                                   # ldr r2, [r1, r3, lsl #2]
    assert (d.shift, d.negative) == (2, False)
    d = _d(0xE7112003)                                   # ldr r2, [r1, -r3]
    assert (d.shift, d.negative, d.index) == (0, True, _UC["r3"])
    assert _d(0xE7912123) is None                        # ldr r2, [r1, r3, lsr #2]: not followed


def test_decode_conditions_and_the_instructions_not_followed():
    assert _d(0x15912008).cond == 1 and _d(0xE5912008).cond == 14   # ldrne / ldr
    assert _d(0xF5D1F000) is None                                    # pld [r1]
    assert _d(0xE59F2008) is None and _d(0xE8BD4010) is None        # literal; pop
    assert _d(0xE92D4010) is None                                    # push
    assert _d(0xE1A00000) is None                                    # mov (nop)


@pytest.mark.parametrize("word,size,write,disp", [
    (0xE8910006, 8, False, 0),                  # ldm r1, {r1, r2}
    (0xE9910006, 8, False, 4),                  # ldmib r1, {r1, r2}
    (0xE9110006, 8, False, -8),                 # ldmdb r1, {r1, r2}
    (0xE8110006, 8, False, -4),                 # ldmda r1, {r1, r2}
    (0xE881000E, 12, True, 0),                  # stm r1, {r1, r2, r3}
])
def test_decode_multiple_transfers(word, size, write, disp):
    d = _d(word)
    assert (d.size, d.write, d.disp, d.base) == (size, write, disp, _UC["r1"])


class _Regs:
    def __init__(self, **r):
        self.r = {_UC[k]: v for k, v in r.items()}

    def reg_read(self, reg):
        return self.r[reg]


def test_the_access_address_from_the_registers():
    assert _d(0xE5912008).address(_Regs(r1=0x100)) == 0x108
    assert _d(0xE5112008).address(_Regs(r1=0x4)) == 0xFFFFFFFC                 # wraps at 32 bits
    assert _d(0xE7912103).address(_Regs(r1=0x100, r3=3)) == 0x10C
    assert _d(0xE7112003).address(_Regs(r1=0x100, r3=3)) == 0xFD
    assert _d(0xE7912003).address(_Regs(r1=0xFFFFFFFF, r3=2)) == 1
    assert _d(0xE4912004).address(_Regs(r1=0x100)) == 0x100                     # post-indexed: the base


N, Z, C, V = 1 << 31, 1 << 30, 1 << 29, 1 << 28


@pytest.mark.parametrize("cond,yes,no", [
    (0, Z, 0), (2, C, 0), (4, N, 0), (6, V, 0), (8, C, C | Z), (10, N | V, N), (10, 0, V),
    (12, 0, Z), (12, N | V, N), (12, V | N, Z | N | V),
])
def test_conditions_and_their_inverses(cond, yes, no):
    assert cond_passes(cond, yes) and not cond_passes(cond, no)
    assert not cond_passes(cond + 1, yes) and cond_passes(cond + 1, no)


def test_always_and_the_unconditional_space_pass():
    assert cond_passes(14, 0) and cond_passes(15, 0) and cond_passes(14, N | Z | C | V)


# --- stack.py --------------------------------------------------------------------------------------
def test_sleb128():
    from armload.emu.sanitize.stack import _sleb
    assert _sleb(bytes([0x02])) == 2 and _sleb(bytes([0x7E])) == -2 and _sleb(bytes([0x40])) == -64
    assert _sleb(bytes([0x80, 0x01])) == 128 and _sleb(bytes([0x80, 0x7F])) == -128
    assert _sleb(bytes([0x3F, 0x7F])) == 63                            # stops at the first byte
    assert _sleb(bytes([0xE5, 0x8E, 0x26])) == 624485 and _sleb(bytes([0xC0, 0xBB, 0x78])) == -123456


class _Attr:
    def __init__(self, value, form=""):
        self.value, self.form = value, form


class _Die:
    def __init__(self, tag, attrs=None, children=(), type_die=None):
        self.tag, self.attributes, self._children, self._type = tag, {k: _Attr(v) for k, v in (attrs or {}).items()}, \
            list(children), type_die
        if type_die is not None:
            self.attributes["DW_AT_type"] = _Attr(0)

    def iter_children(self):
        return iter(self._children)

    def get_DIE_from_attribute(self, name):
        if name not in self.attributes:
            raise KeyError(name)
        return self._type


def test_type_sizes_through_typedefs_arrays_and_bounds():
    from armload.emu.sanitize.stack import _type_size
    u32 = _Die("DW_TAG_base_type", {"DW_AT_byte_size": 4})
    td = _Die("DW_TAG_typedef", type_die=u32)
    assert _type_size(u32) == (False, 4) and _type_size(td) == (False, 4) and _type_size(None) == (False, 0)
    arr = _Die("DW_TAG_array_type", children=[_Die("DW_TAG_subrange_type", {"DW_AT_upper_bound": 9})], type_die=td)
    assert _type_size(arr) == (True, 40)
    arr2 = _Die("DW_TAG_array_type", children=[_Die("DW_TAG_subrange_type", {"DW_AT_count": 3}),
                                               _Die("DW_TAG_subrange_type", {"DW_AT_upper_bound": 1})], type_die=u32)
    assert _type_size(arr2) == (True, 24)
    arr3 = _Die("DW_TAG_array_type", children=[_Die("DW_TAG_subrange_type", {"DW_AT_upper_bound": 1}),
                                               _Die("DW_TAG_subrange_type", {"DW_AT_count": 3})], type_die=u32)
    assert _type_size(arr3) == (True, 24)
    assert _type_size(_Die("DW_TAG_array_type", {"DW_AT_byte_size": 16})) == (True, 16)
    flex = _Die("DW_TAG_array_type", children=[_Die("DW_TAG_subrange_type")], type_die=u32)
    assert _type_size(flex) == (False, 0)
    const = _Die("DW_TAG_const_type", type_die=arr)
    assert _type_size(const) == (True, 40)
    assert _type_size(_Die("DW_TAG_pointer_type")) == (False, 0)
    deep = u32
    for _ in range(8):
        deep = _Die("DW_TAG_typedef", type_die=deep)
    assert _type_size(deep) == (False, 4)                 # 8 levels: the base type found
    assert _type_size(_Die("DW_TAG_typedef", type_die=deep)) == (False, 0)     # 9: given up
    el = u32
    for _ in range(7):
        el = _Die("DW_TAG_typedef", type_die=el)
    sub = [_Die("DW_TAG_subrange_type", {"DW_AT_count": 2})]
    assert _type_size(_Die("DW_TAG_array_type", children=sub, type_die=el)) == (True, 8)
    assert _type_size(_Die("DW_TAG_array_type", children=sub, type_die=_Die("DW_TAG_typedef", type_die=el))) \
        == (True, 0)


def test_a_span_from_an_arrays_first_byte_past_its_end():
    from armload.emu.sanitize.stack import out_of_bounds
    assert out_of_bounds(0x1000, 0x1010, 0x1000, 0x1000, 0x20) == 0x1010
    assert out_of_bounds(0x1000, 0x1010, 0x1000, 0x1000, 0x10) is None


def test_func_at_is_exact_at_a_functions_bounds():
    from armload.emu.sanitize.stack import FrameInfo, StackFrames
    s = StackFrames()
    assert not s and s.func_at(0x100) is None and s._table(0x100) is None and s.arrays([0] * 16, None) == []
    s.funcs = [FrameInfo("a", 0x100, 0x140, []), FrameInfo("b", 0x200, 0x210, [])]
    s.lows = [0x100, 0x200]
    assert bool(s)
    assert s.func_at(0x100).name == "a" and s.func_at(0x13F).name == "a" and s.func_at(0x140) is None
    assert s.func_at(0xFF) is None and s.func_at(0x20F).name == "b" and s.func_at(0x210) is None
    s.tables = [(0x100, 0x200, "t1"), (0x200, 0x300, "t2")]
    assert s._table(0x100) == "t1" and s._table(0x1FF) == "t1" and s._table(0x200) == "t2"
    assert s._table(0x300) is None and s._table(0xFF) is None


# --- leak.py ---------------------------------------------------------------------------------------
def test_a_scan_of_nothing_finds_nothing_and_excluded_ranges_are_no_roots():
    from armload.emu.sanitize.leak import RAM_BASE, scan
    assert scan(bytearray(64), [], None, [], [], None) == []
    ram = bytearray(1 << 14)
    a = _obj(0xC0001000, 16, 32)
    pieces = lambda o: [(o.start - 0xC0000000 + RAM_BASE, o.start, o.size)]   # noqa: E731
    w = np.frombuffer(ram, dtype="<u4")
    w[0x100 // 4] = a.start + 15                         # the last byte asked for: a reference
    assert scan(ram, [a], pieces, [], [], None) == []
    assert scan(ram, [a], pieces, [(RAM_BASE + 0x100, RAM_BASE + 0x104)], [], None) == [a]
    assert scan(ram, [a], pieces, [(RAM_BASE + 0x104, RAM_BASE + 0x108)], [], None) == []
    assert scan(ram, [a], pieces, [(RAM_BASE + 0xFC, RAM_BASE + 0x100)], [], None) == []
    assert scan(ram, [a], pieces, [], [], (RAM_BASE + 0x100, RAM_BASE + 0x101)) == [a]
    w[0x100 // 4] = a.start - 1                          # one byte before: none
    assert scan(ram, [a], pieces, [], [a.start + 15], None) == []
    assert scan(ram, [a], pieces, [], [a.start + 16, a.start - 1], None) == [a]


def test_a_one_byte_object_and_a_word_just_past_an_object():
    from armload.emu.sanitize.leak import RAM_BASE, scan
    ram = bytearray(1 << 14)
    pieces = lambda o: [(o.start - 0xC0000000 + RAM_BASE, o.start, o.size)]   # noqa: E731
    w = np.frombuffer(ram, dtype="<u4")
    one = _obj(0xC0001000, 1, 8)
    w[0x100 // 4] = one.start + 1                       # past its one byte: no reference
    assert scan(ram, [one], pieces, [], [], None) == [one]
    a, b = _obj(0xC0002000, 8, 16), _obj(0xC0003000, 8, 16)
    w[(0x2000 + 8) // 4] = b.start                      # the word right after a's 8 bytes is a root
    assert scan(ram, [a, b], pieces, [], [], None) == [a]


def test_a_chain_of_objects_is_reached_from_one_root():
    from armload.emu.sanitize.leak import RAM_BASE, scan
    ram = bytearray(1 << 16)
    objs = [_obj(0xC0001000 + 0x100 * i, 16, 32) for i in range(5)]
    pieces = lambda o: [(o.start - 0xC0000000 + RAM_BASE, o.start, o.size)]   # noqa: E731
    w = np.frombuffer(ram, dtype="<u4")
    for i in range(4):                                   # 4 -> 3 -> 2 -> 1 -> 0 (stored in reverse order)
        w[(0x1000 + 0x100 * (i + 1)) // 4] = objs[i].start
    assert scan(ram, objs, pieces, [], [], None) == objs  # nothing outside points in: all lost
    w[0x10 // 4] = objs[4].start
    assert scan(ram, objs, pieces, [], [], None) == []
    ram0 = bytearray(ram)
    assert scan(ram0, list(reversed(objs)), pieces, [], [], None) == []


# --- strings the hooks measure (kstrdup's size, strcpy's length) -------------------------------------
def _mem(data: bytes, base: int):
    """read(va, n) over `data` at `base`, mapped in whole pages (zeros after it); anything else
    faults, as an unmapped page does."""
    data = data + bytes(-(base + len(data)) % 4096)

    def read(va, n):
        if va < base or va + n > base + len(data):
            raise GuestFault(f"virtual {va:#x} is not mapped")
        return data[va - base: va - base + n]
    return read


def test_strnlen_reads_no_further_than_the_nul():
    base = 0xBF057000                                   # a string ending just before an unmapped page
    data = bytes(4096 - 6) + b"nvmet\0"
    read = _mem(data, base)
    assert H.strnlen(read, base + 4096 - 6, 1 << 16) == 5
    assert H.strnlen(read, base + 4096 - 6, 3) == 3      # the limit first
    assert H.strnlen(read, base + 4096 - 6, 5) == 5 and H.strnlen(read, base + 4096 - 6, 6) == 5
    assert H.strnlen(read, base + 4090 - 4096, 8) is None                     # before the mapping
    assert H.strnlen(_mem(b"ab", base + 4094), base + 4094, 16) is None       # no NUL before the hole
    assert H.strnlen(_mem(b"ab", base + 4094), base + 4094, 2) == 2
    long = b"x" * 5000 + b"\0"                          # across a page boundary
    assert H.strnlen(_mem(long, base), base, 1 << 16) == 5000
    assert H.strnlen(_mem("é\0".encode(), base), base, 16) == 2                # bytes, not characters
    assert H.strnlen(read, base, 0) == 0
    assert H.strnlen(_mem(b"\0x\0", base), base, 16) == 0 and H.strnlen(_mem(b"\0x\0", base), base + 1, 16) == 1
    assert H.strnlen(_mem(long, base), base, 4200) == 4200                    # the limit on the second page
    assert H.strnlen(_mem(b"x" * 9000 + b"\0", base + 3), base + 3, 1 << 16) == 9000   # three pages
    assert H.strnlen(_mem(b"\0", base + 4095), base + 4095, 16) == 0          # the page's last byte, then a hole
    edge = b"x" * (4096 + 6 - 1) + b"\0"                                      # the NUL on a page's last byte
    assert H.strnlen(_mem(edge, base + 4090), base + 4090, 1 << 16) == 4096 + 5



def test_c_strings_end_at_the_nul_not_at_the_limit():
    """Machine.cstr's walk (booted/machine.c_bytes): the string before an unmapped page reads, where
    one read of `limit` bytes faulted; a missing byte before the NUL still faults."""
    from armload.emu.booted.machine import c_bytes
    base = 0xBF057000
    read = _mem(bytes(4096 - 6) + b"nvmet\0", base)
    assert c_bytes(read, base + 4096 - 6, 256) == b"nvmet" and c_bytes(read, base + 4096 - 6, 3) == b"nvm"
    with pytest.raises(GuestFault):
        c_bytes(_mem(b"ab", base + 4094), base + 4094, 16)
    assert c_bytes(_mem("é\0".encode(), base), base, 16).decode() == "é"


# the decoder's whole result, and the same access under every condition
ACCESSES = {
    0xE5912008: ("r1", 0, 0, 8, False, 4, False, False),        # ldr r2, [r1, #8]
    0xE5C12003: ("r1", 0, 0, 3, False, 1, True, False),         # strb r2, [r1, #3]
    0xE1D120B2: ("r1", 0, 0, 2, False, 2, False, False),        # ldrh r2, [r1, #2]
    0xE1D120D1: ("r1", 0, 0, 1, False, 1, False, False),        # ldrsb r2, [r1, #1]
    0xE1D120F2: ("r1", 0, 0, 2, False, 2, False, False),        # ldrsh r2, [r1, #2]
    0xE1C120F8: ("r1", 0, 0, 8, False, 8, True, False),         # strd r2, r3, [r1, #8]
    0xE7112103: ("r1", "r3", 2, 0, True, 4, False, False),      # ldr r2, [r1, -r3, lsl #2]
    0xE4912004: ("r1", 0, 0, 0, False, 4, False, True),         # ldr r2, [r1], #4
    0xE1912F9F: ("r1", 0, 0, 0, False, 4, False, False),        # ldrex r2, [r1]
    0xE1812F93: ("r1", 0, 0, 0, False, 4, True, False),         # strex r2, r3, [r1]
    0xE8910006: ("r1", 0, 0, 0, False, 8, False, False),        # ldm r1, {r1, r2}
    0xE9110006: ("r1", 0, 0, -8, False, 8, False, False),       # ldmdb r1, {r1, r2}
    0xE881000E: ("r1", 0, 0, 0, False, 12, True, False),        # stm r1, {r1, r2, r3}
}


@pytest.mark.parametrize("word", sorted(ACCESSES))
@pytest.mark.parametrize("cond", range(15))
def test_every_field_under_every_condition(word, cond):
    base, index, shift, disp, neg, size, write, post = ACCESSES[word]
    d = _d((word & 0x0FFFFFFF) | cond << 28)
    assert (d.cond, d.base, d.index, d.shift, d.disp, d.negative, d.size, d.write, d.post) == \
        (cond, _UC[base], _UC[index] if index else 0, shift, disp, neg, size, write, post)
    assert d.mnemonic.startswith(("ldr", "str", "ldm", "stm")) and d.mnemonic == d.mnemonic.lower()


@pytest.mark.parametrize("word,size,disp", [
    (0xE5512001, 1, -1),                        # ldrb r2, [r1, #-1]
    (0xE15120B2, 2, -2),                        # ldrh r2, [r1, #-2]
    (0xE14120D8, 8, -8),                        # ldrd r2, r3, [r1, #-8]
    (0xE1D12F9F, 1, 0),                         # ldrexb r2, [r1]
    (0xE1F12F9F, 2, 0),                         # ldrexh r2, [r1]
    (0xE8110016, 12, -8),                       # ldmda r1, {r1, r2, r4}
])
def test_negative_offsets_and_exclusive_sizes(word, size, disp):
    d = _d(word)
    assert (d.size, d.disp, d.base) == (size, disp, _UC["r1"])


def test_a_multiple_transfer_on_sp_or_pc_is_not_followed():
    assert _d(0xE89D0006) is None and _d(0xE88D0006) is None          # ldm sp / stm sp without writeback
    assert _d(0xE89F0006) is None                                      # ldm pc
    assert _d(0xE8910006).mnemonic == "ldm"


# --- stack.py on a real module's DWARF (armload's loader, no kernel run) -----------------------------
@pytest.fixture(scope="module")
def sanbugs():
    import os
    from testinputs import CACHE, require_input, sample
    from armload.kernel.config import DEBIAN_ARMMP
    from armload.kernel.provider import Kernel
    from armload.loader.session import Session
    symvers = require_input(os.path.join(CACHE, "linux-headers-6.1.0-50-armmp", "usr", "src",
                                         "linux-headers-6.1.0-50-armmp", "Module.symvers"), "make test-inputs")
    s = Session(Kernel.from_files([symvers], DEBIAN_ARMMP), DEBIAN_ARMMP)
    return s.load(sample("sanitize/sanbugs-arm-debug.ko"))


def test_the_frames_of_a_module_from_its_dwarf(sanbugs):
    from armload.emu.sanitize.stack import FrameInfo, StackVar, frames_of
    (f,) = frames_of(sanbugs)                           # stack_overrun's char buf[16]; fill has no array
    assert f == FrameInfo("stack_overrun", f.low, f.low + 0x68, [StackVar("buf", -28, 16)])
    assert sanbugs.symbolize(f.low) == "stack_overrun+0x0/0x68 [sanbugs]"


def test_a_module_without_dwarf_adds_no_frames():
    import os
    from testinputs import CACHE, require_input, sample
    from armload.emu.sanitize.stack import StackFrames
    from armload.kernel.config import DEBIAN_ARMMP
    from armload.kernel.provider import Kernel
    from armload.loader.session import Session
    symvers = require_input(os.path.join(CACHE, "linux-headers-6.1.0-50-armmp", "usr", "src",
                                         "linux-headers-6.1.0-50-armmp", "Module.symvers"), "make test-inputs")
    hello = Session(Kernel.from_files([symvers], DEBIAN_ARMMP), DEBIAN_ARMMP).load(sample("hello-arm.ko"))
    s = StackFrames()
    assert s.add_module(hello, 0, 0) == 0 and not s and s.tables == []


def test_functions_of_several_modules_stay_sorted(sanbugs):
    from armload.emu.sanitize.stack import FrameInfo, StackFrames
    s = StackFrames()
    s.funcs, s.lows = [FrameInfo("z", 0xFFFF0000, 0xFFFF0010, [])], [0xFFFF0000]
    s.add_module(sanbugs, 0, 0)
    assert [f.name for f in s.funcs] == ["stack_overrun", "z"] and s.lows == sorted(s.lows)
    assert s.func_at(0xFFFF0004).name == "z"


def test_the_arrays_of_the_live_frames_at_a_functions_entry(sanbugs):
    from armload.emu.sanitize.stack import StackFrames, frames_of
    (f,) = frames_of(sanbugs)
    s = StackFrames()
    base, end = min(r.base for r in sanbugs.regions), max(r.end for r in sanbugs.regions)
    assert s.add_module(sanbugs, base, end) == 1 and s.func_at(f.low).name == "stack_overrun"
    regs = [0] * 16
    regs[13], regs[14], regs[15] = 0xC1F01E00, 0xC0100000, f.low   # at its entry: the CFA is sp
    assert s.arrays(regs, lambda a: 0) == [("stack_overrun", "buf", 0xC1F01E00 - 28, 0xC1F01E00 - 12)]
    reads = []
    regs[13], regs[15] = 0xC1F01DE0, f.low + 0x14        # after push {r4, lr}; sub sp, sp, #24: CFA = sp + 32
    assert s.arrays(regs, lambda a: reads.append(a) or 0) == [("stack_overrun", "buf", 0xC1F01DE4, 0xC1F01DF4)]
    assert 0xC1F01DE0 + 28 in reads                     # the saved lr, read through read32
    regs[13], regs[14], regs[15] = 0xC1F01E00, f.low, f.low    # pc == lr at an entry: the unwinder gives up
    assert s.arrays(regs, lambda a: 0) == []
    regs[15] = f.low - 4 if s.func_at(f.low - 4) is None else f.high                 # not a frame with arrays
    assert s.arrays(regs, lambda a: 0) == [] and s.arrays(regs, lambda a: 0, max_frames=0) == []
