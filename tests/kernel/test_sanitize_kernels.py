"""The sanitizers on each Debian armhf kernel line (issues 31 and 32): sanbugs built against each
kernel's own headers (`make samples-kernels`) reports its bug classes in that booted kernel, as
on 6.1 armmp (tests/emu/test_sanitize.py). 6.12 hooks execmem's module memory (one allocation
per mod_mem type, told apart by the kernel's own struct module), the *_noprof allocators with
CONFIG_SLAB_BUCKETS' argument, and arm_copy_*_user under the inlined copy_*_user."""
import os

import pytest

from testinputs import ROOT
from test_samples_kernels import LPAE, RT, V612, V612_LPAE, V612_RT, booted, build


def line_of(text: str) -> int:
    with open(os.path.join(ROOT, "sample_modules", "src", "sanbugs", "sanbugs.c")) as f:
        return next(i for i, ln in enumerate(f, 1) if text in ln)

# bug -> (class, kind, function, a line the report must have)
BUGS = {
    1: ("heap", "slab-out-of-bounds", "fill+", "Write of size 1 at addr"),
    2: ("heap", "use-after-free", "sanbugs_init+", "Read of size 1 at addr"),
    3: ("leak", "leak", "sanbugs_init+", "  backtrace:"),
    4: ("heap", "double-free", "sanbugs_init+", "Freed by task 1:"),
    5: ("locks", "sleep-in-atomic", "sanbugs_init+", "BUG: sleeping function called from invalid context at msleep"),
    6: ("locks", "lock-held-on-return", "sanbugs_init+", " #0: (san_mutex), at: sanbugs_init+"),
    7: ("stack", "stack-out-of-bounds", "fill+", " [0, 16) 'buf'"),
    8: ("locks", "circular-locking", "sanbugs_init+", "WARNING: possible circular locking dependency detected"),
}
# 6.12: every class (its leak was hidden by a stale copy of the pointer in a freed kmalloc-64 object
# until the booted kernel ran with init_on_free=1: emu/booted/boot.py). LPAE and RT: the classes
# their kernels differ in (page tables; spinlock_t and mutex are rt_mutexes on RT), on both lines.
# Not 6.12 LPAE's leak: kmemleak's own false negative (README, "Sanitizers"): the leaked object
# reuses the vm_struct of load_module's copy of the file, which free_copy() vfree'd just before init;
# its vmap_area waits in the lazy purge list with ->vm still pointing there, a live word.
CASES = ([(V612, b) for b in range(1, 9)] + [(LPAE, 3), (LPAE, 5), (RT, 3), (RT, 5), (RT, 6)]
         + [(V612_LPAE, 1), (V612_LPAE, 5), (V612_RT, 3), (V612_RT, 5), (V612_RT, 6)])


@pytest.mark.parametrize("rel,bug", CASES)
def test_each_bug_class_is_reported_in_each_kernel(rel, bug):
    from armload.emu.sanitize import CLASSES, Sanitizer
    cls, kind, fn, must = BUGS[bug]
    run = booted(rel)
    san = Sanitizer(run, CLASSES)
    san.load(build(rel, "sanbugs"), f"bug={bug}")
    reps = san.formatted()
    assert [(x.cls, x.kind) for x in reps] == [(cls, kind)], [x.lines for x in reps]
    assert reps[0].function.startswith(fn) and reps[0].function.endswith("[sanbugs]")
    # a leak's place is its allocation's: sanbugs.c's kmalloc line, or, where the build's DWARF gives
    # the inlined kmalloc its own line, that line in slab.h (both seen, from two builds of one source)
    where, line = reps[0].where.rsplit(":", 1)
    ok = where.endswith("sanbugs/sanbugs.c") or (cls == "leak" and where.endswith("include/linux/slab.h"))
    assert ok and line.isdigit(), reps[0].where
    if cls == "leak" and where.endswith("sanbugs.c"):
        assert int(line) == line_of("case 3:") + 1, reps[0].where
    assert any(must in ln for ln in reps[0].lines), reps[0].lines
    assert san.notes() == []
    if (rel, bug) in ((RT, 5), (V612_RT, 5)):                      # PREEMPT_RT's spinlock_t: an rt_mutex inside rcu_read_lock()
        assert "RCU nest depth: 1, expected: 0" in reps[0].lines and " #0: (san_lock), at: sanbugs_init+" in \
            "\n".join(reps[0].lines), reps[0].lines


def test_612s_module_memory_is_told_apart_by_type():
    """hello on 6.12: MOD_TEXT, MOD_DATA, MOD_RODATA, then the three init types (freed after init)."""
    from armload.emu.sanitize import CLASSES, Sanitizer
    run = booted(V612)
    san = Sanitizer(run, CLASSES)
    r = san.load(build(V612, "hello"), "")
    assert r.ok and san.formatted() == [] and san.notes() == []
    regions = san.mods[0]["regions"]
    assert [(g.init, g.text) for g in regions] == [(False, True), (False, False), (False, False),
                                                    (True, True), (True, False), (True, False)]
    assert [g.dropped for g in regions] == [False, False, False, True, True, True]
    assert [(lo, hi) for lo, hi, _ in san._ranges] == [(regions[0].base, regions[0].base + regions[0].size)]


def test_the_memory_types_come_from_struct_modules_own_array():
    from armload.emu.booted.modmem import mem_array, regions_64
    mod, s = 0xBF00_0100, 9                        # the array at word 10, 9 words an entry, base 2 before mod
    words = [0] * 80
    words[3] = 0xBF00_4000                         # mod->init: the init text's address, before the array
    for k in range(7):
        words[10 + k * s] = mod
    allocs = [(0xBF00_0000, 0x1000), (0xBF00_1000, 0x1000), (0xBF00_4000, 0x1000)]
    for k, (b, n) in zip((0, 1, 4), allocs):
        words[8 + k * s], words[9 + k * s] = b, n
    assert mem_array(words, mod) == (10, s)
    got = regions_64(words, mod, allocs)
    assert [(g.base, g.init, g.text) for g in got] == [(0xBF00_0000, False, True), (0xBF00_1000, False, False),
                                                        (0xBF00_4000, True, True)]
    words[10 + 6 * s] = 0                          # six entries only: no array
    assert mem_array(words, mod) is None and regions_64(words, mod, allocs) is None
    words[10 + 6 * s] = mod
    assert regions_64(words, mod, allocs + [(0xBF00_9000, 0x1000)]) is None     # an allocation not in it
