"""PltRouter (which PLT section a far branch's place uses, get_module_plt per generation) and
has_overlaps (when a REL table must be applied entry by entry), public API only."""
import numpy as np
import pytest

from armload.kernel.config import KernelConfig
from armload.loader.plt import PltSection
from armload.loader.relocate import PltRouter, has_overlaps

CFG = KernelConfig(l1_cache_bytes=32, dynamic_ftrace=False)    # 8 entries per 64-byte group
CORE, INIT = 0xBF001000, 0xBF101000


def router(alg, core_size=64, init_size=64, init=True):
    return PltRouter(core=PltSection("core", CORE, core_size, CFG, ()),
                     init=PltSection("init", INIT, init_size, CFG, ()) if init else None,
                     within_init=lambda p: p >= 0xBF100000, algorithm=alg)


PLACES = np.array([0xBF000000, 0xBF100000, 0xBF000004, 0xBF100004], np.int64)
VALS = np.array([0xC0000000, 0xC0000010, 0xC0000020, 0xC0000010], np.uint32)


@pytest.mark.parametrize("alg", ["v6", "legacy"])
def test_places_in_init_use_the_init_plt(alg):
    slots, bad = router(alg).route(PLACES, VALS)
    assert bad == -1 and slots.dtype == np.int64
    assert slots.tolist() == [CORE, INIT, CORE + 4, INIT]     # the repeated init value reuses its entry


def test_sorted_has_one_plt_for_every_place():
    slots, bad = router("sorted", init=False).route(PLACES, VALS)
    assert bad == -1 and slots.tolist() == [CORE, CORE + 4, CORE + 8, CORE + 12]


@pytest.mark.parametrize("alg", ["v6", "legacy"])
def test_no_init_plt_fails_at_the_first_init_place(alg):
    slots, bad = router(alg, init=False).route(PLACES, VALS)
    assert bad == 1 and slots[0] == CORE


def test_a_zero_size_plt_fails_at_its_first_place():
    slots, bad = router("v6", core_size=0).route(PLACES, VALS)
    assert bad == 0
    slots, bad = router("legacy", init_size=0).route(PLACES, VALS)
    assert bad == 1 and slots[0] == CORE


def _far(n, init):
    base = 0xBF100000 if init else 0xBF000000
    return np.arange(base, base + 4 * n, 4, dtype=np.int64), np.arange(0xC0000000, 0xC0000000 + 16 * n, 16,
                                                                       dtype=np.int64).astype(np.uint32)


@pytest.mark.parametrize("core_first", [True, False])
def test_the_earliest_overflow_of_either_plt_is_reported(core_first):
    """Nine values into each 8-entry PLT: each overflows at its ninth; the table position reported is
    the smaller of the two, whichever PLT it belongs to."""
    pc, vc = _far(9, False)
    pi, vi = _far(9, True)
    vi = vi + np.uint32(0x1000)
    if core_first:      # core's ninth comes first in the table
        places, vals = np.concatenate([pc, pi]), np.concatenate([vc, vi])
        want = 8
    else:
        places, vals = np.concatenate([pi, pc]), np.concatenate([vi, vc])
        want = 8
    slots, bad = router("v6").route(places, vals)
    assert bad == want
    assert slots[:8].tolist() == [(CORE if core_first else INIT) + 4 * i for i in range(8)]
    # interleaved: init overflows at table position 17, core at 16 -> 16; core at 0 of a 0-size PLT -> 0
    places = np.empty(18, np.int64)
    vals = np.empty(18, np.uint32)
    places[0::2], places[1::2] = pc, pi
    vals[0::2], vals[1::2] = vc, vi
    assert router("v6").route(places, vals)[1] == 16
    assert router("v6", core_size=0).route(places, vals)[1] == 0
    assert router("v6", init_size=0).route(places, vals)[1] == 1


def test_has_overlaps():
    ABS, NONE = 2, 0
    info = lambda *types: np.array(types, np.uint32)          # noqa: E731
    off = lambda *o: np.array(o, np.uint32)                    # noqa: E731
    assert not has_overlaps(off(), info())
    assert not has_overlaps(off(0), info(ABS))
    assert not has_overlaps(off(0, 4, 8), info(ABS, ABS, ABS))
    assert has_overlaps(off(0, 3), info(ABS, ABS))            # 4-byte places 3 bytes apart
    assert has_overlaps(off(8, 0, 5), info(ABS, ABS, ABS))    # unsorted
    assert has_overlaps(off(4, 4), info(ABS, ABS))
    assert not has_overlaps(off(4, 4), info(ABS, NONE))       # R_ARM_NONE writes nothing
    assert not has_overlaps(off(4, 4, 4), info(NONE, NONE, ABS))
    assert has_overlaps(off(4, 4), info((7 << 8) | ABS, (9 << 8) | ABS))   # symbols do not matter
