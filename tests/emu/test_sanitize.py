"""The sanitizers inside the booted kernel (armload/emu/sanitize): each bug class of the sample
sanbugs (bug=N) reported once, with its class, kind, function and source line, in the kernel's
format; the clean path and clean samples give none; `armload run` fails on a report; and the
detectors' pure parts on both sides of their bounds."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from testinputs import BOOT_VMLINUZ, CACHE, ROOT, sample
from armload.kernel.config import DEBIAN_ARMMP
from armload.kernel.provider import Kernel

FULL_SYMVERS = os.path.join(CACHE, "linux-headers-6.1.0-50-armmp", "usr", "src", "linux-headers-6.1.0-50-armmp",
                            "Module.symvers")
SRC = os.path.join(ROOT, "sample_modules", "src", "sanbugs", "sanbugs.c")
KO = "sanitize/sanbugs-arm-debug.ko"


def line_of(text: str) -> int:
    with open(SRC) as f:
        for i, ln in enumerate(f, 1):
            if text in ln:
                return i
    raise AssertionError(f"sanbugs.c has no line containing {text!r}")


def where(text: str) -> str:
    return f"sample_modules/src/sanbugs/sanbugs.c:{line_of(text)}"


def _run(bug: int, classes=None, unload: bool = False):
    from armload.emu.booted.modrun import BootedRun
    from armload.emu.sanitize import CLASSES, Sanitizer
    run = BootedRun(BOOT_VMLINUZ, Kernel.from_files([FULL_SYMVERS, BOOT_VMLINUZ], DEBIAN_ARMMP), DEBIAN_ARMMP)
    san = Sanitizer(run, classes or CLASSES)
    r = san.load(sample(KO), f"bug={bug}")
    if unload and r.ok:
        assert run.unload("sanbugs")[0] == 0
        san.module_gone("sanbugs")
        san.returned_to_user(san.uc, "sanbugs", "exit")
        san.leak_scan(when="after exit", excluded=san.module_pages("sanbugs"), module="sanbugs")
    return r, san.formatted(), san


# bug -> (class, kind, function, the source line's marker, a line the report must have)
BUGS = {
    1: ("heap", "slab-out-of-bounds", "fill+", "p[i] = 'a' + i % 26;", "Write of size 1 at addr"),
    2: ("heap", "use-after-free", "sanbugs_init+", "read after kfree", "Read of size 1 at addr"),
    4: ("heap", "double-free", "sanbugs_init+", "freed twice", "Freed by task 1:"),
    5: ("locks", "sleep-in-atomic", "sanbugs_init+", "sleeps with a spinlock held",
        "BUG: sleeping function called from invalid context at msleep"),
    6: ("locks", "lock-held-on-return", "sanbugs_init+", "never unlocked", " #0: (san_mutex), at: sanbugs_init+"),
    7: ("stack", "stack-out-of-bounds", "fill+", "p[i] = 'a' + i % 26;", " [0, 16) 'buf'"),
    8: ("locks", "circular-locking", "sanbugs_init+", "the other order",
        "WARNING: possible circular locking dependency detected"),
}


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_each_bug_class_is_reported_once_with_its_line(booted_dir, bug):
    cls, kind, fn, marker, must = BUGS[bug]
    r, reps, san = _run(bug)
    assert [(x.cls, x.kind) for x in reps] == [(cls, kind)], [x.lines for x in reps]
    rep = reps[0]
    assert rep.function.startswith(fn) and rep.function.endswith("[sanbugs]")
    assert rep.where == where(marker), rep.lines
    assert any(must in ln for ln in rep.lines), rep.lines
    assert san.notes() == []


def test_the_heap_overrun_report_is_kasans(booted_dir):
    _, (rep,), _ = _run(1)
    text = "\n".join(rep.lines)
    assert rep.lines[1].startswith("BUG: KASAN: slab-out-of-bounds in fill+0x")
    assert "Allocated by task 1:" in text and " kmalloc_trace+0x0/" in text
    assert f"(sample_modules/src/sanbugs/sanbugs.c:{line_of('fill(p, 41);')})" in text       # the caller's line
    assert "which belongs to the cache kmalloc-64 of size 64" in text
    assert "The buggy address is located 0 bytes to the right of\n allocated 40-byte region" in text
    assert "by task init/1" in text


def test_a_use_after_free_names_the_free(booted_dir):
    _, (rep,), _ = _run(2)
    text = "\n".join(rep.lines)
    assert "Freed by task 1:\n kfree+0x0/" in text
    assert f"sanbugs.c:{line_of('read after kfree') - 1})" in text          # the kfree(p) line
    assert "is located 8 bytes inside of\n freed 40-byte region" in text


def test_the_leak_is_kmemleaks_and_the_clean_path_is_not(booted_dir):
    _, reps, _ = _run(3)
    assert [x.kind for x in reps] == ["leak"]
    assert reps[0].title.startswith("unreferenced object 0x") and reps[0].title.endswith("(size 40):")
    assert reps[0].where == f"sample_modules/src/sanbugs/sanbugs.c:{line_of('case 3:') + 1}"
    assert "  backtrace:" in reps[0].lines
    # bug=0 keeps its 40-byte object in `kept` (module data) and frees it in exit: no leak either time
    r, reps, san = _run(0, unload=True)
    assert r.ok and reps == []
    assert san.counts["allocs"] == 1 and len(san.heap.live()) == 0


def test_the_double_free_does_not_reach_slub(booted_dir):
    """KASAN does not let the allocator see a bad free: without the sanitizer SLUB oopses."""
    r, reps, _ = _run(4)
    assert (r.status, r.ret) == ("returned", 0) and not r.oops
    r, reps, _ = _run(4, classes=("leak",))              # tracking, no heap reports: the free goes through
    assert reps == [] and r.status in ("oops", "returned")


def test_classes_select_detectors(booted_dir):
    assert _run(1, classes=("locks",))[1] == []
    assert _run(5, classes=("heap", "leak"))[1] == []
    assert [x.kind for x in _run(5, classes=("locks",))[1]] == ["sleep-in-atomic"]


def test_locks_are_named_when_printed_without_the_stack_detector(booted_dir):
    """Without the stack class (and for Debian's modules, which have no DWARF) armload's image of a
    module is made after its init: a lock report's names are resolved when it is printed, not
    inside the hook (bluetooth.ko's rwlock read '(0xbf0f7384), at: 0xbf06b8f4 [rfkill]')."""
    _, (rep,), _ = _run(6, classes=("locks",))
    text = "\n".join(rep.lines)
    assert "\n #0: (san_mutex), at: sanbugs_init+0x" in text and "{" not in text, text


def _cli(*extra):
    return subprocess.run([sys.executable, "-m", "armload", "run", sample(KO), *extra, "--kernel", BOOT_VMLINUZ,
                           "--kernel", FULL_SYMVERS, "--settle-ms", "0"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def test_run_fails_on_a_report_and_passes_without(booted_dir):
    p = _cli("bug=1")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "BUG: KASAN: slab-out-of-bounds in fill+" in p.stdout
    assert "armload: sanitizers (heap, leak, locks, stack): 1 report(s): slab-out-of-bounds 1" in p.stdout
    p = _cli("bug=1", "--sanitize", "none")
    assert p.returncode == 0 and "KASAN" not in p.stdout, p.stdout + p.stderr
    p = _cli("bug=0", "--exit", "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    d = json.loads(p.stdout)
    assert d["ok"] and d["sanitize"]["reports"] == [] and d["sanitize"]["classes"] == ["heap", "leak", "locks", "stack"]
    p = _cli("bug=6", "--sanitize", "locks", "--json")
    d = json.loads(p.stdout)
    assert p.returncode == 1 and [x["kind"] for x in d["sanitize"]["reports"]] == ["lock-held-on-return"]
    assert d["sanitize"]["reports"][0]["line"] == where("never unlocked")
    p = _cli("bug=0", "--sanitize", "heap,bogus")
    assert p.returncode != 0 and "--sanitize: unknown class bogus" in p.stderr and "Traceback" not in p.stderr


# spin-arm.ko is not clean (init never returns): the hostile tests own it; under the sanitizers it
# would only spend the 8 G-instruction load budget.
@pytest.mark.parametrize("ko", ["kalloc-arm.ko", "hello-arm.ko", "deferred-arm.ko", "regdev-arm.ko"])
def test_clean_samples_give_no_report(booted_dir, ko):
    from armload.emu.booted.modrun import BootedRun
    from armload.emu.sanitize import Sanitizer
    run = BootedRun(BOOT_VMLINUZ, Kernel.from_files([FULL_SYMVERS, BOOT_VMLINUZ], DEBIAN_ARMMP), DEBIAN_ARMMP)
    san = Sanitizer(run)
    r = san.load(sample(ko))
    assert r.ok
    name = r.name
    run.settle(50_000_000)
    assert run.unload(name)[0] == 0
    san.module_gone(name)
    san.returned_to_user(san.uc, name, "exit")
    san.leak_scan(when="after exit", excluded=san.module_pages(name), module=name)
    assert san.formatted() == []
    assert san.notes() == []


# --- the detectors' pure parts ------------------------------------------------------------------
def _obj(start, size, extent, kind="kmalloc"):
    from armload.emu.sanitize.heap import Obj
    return Obj(start, size, extent, kind, extent, "m", None)


def test_heap_bounds_are_byte_precise_on_both_sides():
    from armload.emu.sanitize.heap import HeapShadow
    h = HeapShadow()
    h.add(_obj(0x1000, 40, 64))
    assert h.check(0x1000 + 39, 1) is None                        # the last byte asked for
    assert h.check(0x1000 + 36, 4) is None
    assert h.check(0x1000 + 40, 1)[0] == "slab-out-of-bounds"      # the first byte past it
    assert h.check(0x1000 + 37, 4)[2] == 0x1000 + 40               # straddling: the first bad byte
    assert h.check(0x1000 + 63, 1)[0] == "slab-out-of-bounds"      # the extent's last byte
    assert h.check(0x1000 + 64, 1) is None                         # past the extent: not this object's
    assert h.check(0x1000 - 1, 1) is None
    o = h.find(0x1000)
    h.freed(o, None)
    assert h.check(0x1000, 1)[0] == "use-after-free"
    assert h.kernel_allocates(("slab", 128)) == 0 and h.check(0x1000, 1)
    assert h.kernel_allocates(("slab", 64)) == 1 and h.check(0x1000, 1) is None    # may be reused now
    h.add(_obj(0x3000, 100, 4096 + 4096, "vmalloc"))
    assert h.check(0x3000 + 100, 1)[0] == "vmalloc-out-of-bounds" and h.check(0x3000 + 99, 1) is None


def test_kmalloc_classes_round_up():
    from armload.emu.sanitize.heap import class_of
    cl = [64, 128, 192, 256, 512]
    assert [class_of(cl, n) for n in (1, 64, 65, 128, 129, 192, 193, 512, 513)] == [64, 64, 128, 128, 192, 192,
                                                                                    256, 512, 0]


def test_leak_scan_follows_kmemleaks_rule():
    from armload.emu.sanitize.leak import RAM_BASE, scan
    ram = bytearray(1 << 16)
    va = lambda pa: pa - RAM_BASE + 0xC0000000                   # noqa: E731  (the linear map)
    a, b, c, d = (_obj(va(RAM_BASE + o), 32, 64) for o in (0x1000, 0x2000, 0x3000, 0x4000))
    pieces = lambda o: [(o.start - 0xC0000000 + RAM_BASE, o.start, o.size)]   # noqa: E731
    w = np.frombuffer(ram, dtype="<u4")
    w[0x100 // 4] = a.start + 8                    # a root points inside a (an alias counts)
    w[(0x1000 + 4) // 4] = b.start                 # a -> b: b reached through a
    w[(0x3000 + 4) // 4] = c.start                 # c points only to itself
    w[0x800 // 4] = d.start                        # d only from a dead stack range
    lost = scan(ram, [a, b, c, d], pieces, [], [], (RAM_BASE + 0x800, RAM_BASE + 0x804))
    assert lost == [c, d]
    assert scan(ram, [a, b, c, d], pieces, [], [c.start], (RAM_BASE + 0x800, RAM_BASE + 0x804)) == [d]   # a register
    w[0x100 // 4] = a.start + 32                   # one past the asked size: not a reference
    assert a in scan(ram, [a, b], pieces, [], [], None) and b in scan(ram, [a, b], pieces, [], [], None)


def test_lock_state_and_dependency_paths():
    from armload.emu.sanitize.locks import LockState, lock_word_locked
    assert lock_word_locked("spin", 0x00010001) is False and lock_word_locked("spin", 0x00020001) is True
    assert lock_word_locked("mutex", 0) is False and lock_word_locked("mutex", 0xC1000000) is True
    s = LockState()
    s.edges = {1: {2: None}, 2: {3: None}}
    assert s.path(1, 3) == [1, 2, 3] and s.path(3, 1) is None


def test_access_decoding():
    import struct
    from armload.emu.sanitize.access import cond_passes, decode
    d = decode(struct.pack("<I", 0xE7C61004), 0)               # strb r1, [r6, r4]
    assert (d.size, d.write, d.index != 0, d.post) == (1, True, True, False)
    assert decode(struct.pack("<I", 0xE5132004), 0).disp == -4  # ldr r2, [r3, #-4]
    assert decode(struct.pack("<I", 0xE4C31001), 0).post        # strb r1, [r3], #1
    assert decode(struct.pack("<I", 0xE8BD8070), 0) is None     # pop: the stack's own
    assert decode(struct.pack("<I", 0xE59F0010), 0) is None     # a literal from pc
    assert decode(struct.pack("<I", 0xE0811002), 0) is None     # add
    assert cond_passes(0, 1 << 30) and not cond_passes(1, 1 << 30) and cond_passes(14, 0)


def test_sanitize_classes_parse():
    from armload.emu.sanitize import parse_classes
    from armload.errors import ArmloadError
    assert parse_classes(None) == parse_classes("all") == ("heap", "stack", "leak", "locks")
    assert parse_classes("none") == () and parse_classes("locks,heap") == ("heap", "locks")
    with pytest.raises(ArmloadError, match="unknown class"):
        parse_classes("kasan")


class _Every:
    def __contains__(self, addr):
        return True


def _firmware(monkeypatch, hook_all: bool):
    from testinputs import require_input
    from armload.bench.inputs import DEBIAN
    from armload.emu.booted.modrun import BootedRun
    from armload.emu.sanitize import Sanitizer
    from armload.emu.sanitize import native as N
    if hook_all:                        # every entry point hooked: the mechanism the call table replaces
        monkeypatch.setattr(N, "tail_called", lambda image: _Every())
    ko = require_input(os.path.join(DEBIAN, "lib", "test_firmware.ko"), "make test-inputs")
    run = BootedRun(BOOT_VMLINUZ, Kernel.from_files([FULL_SYMVERS, BOOT_VMLINUZ], DEBIAN_ARMMP), DEBIAN_ARMMP)
    san = Sanitizer(run)
    r = san.load(ko, "")
    objs = [(o.start, o.size, o.module, o.freed is not None) for o in san.heap.objs]
    return (r.status, r.ret, [x.to_dict() for x in san.formatted()], dict(san.counts), objs,
            san.entries.f.calls), san.entries


def test_the_call_table_sees_what_hooks_on_every_entry_see(monkeypatch):
    """The module text hook's call recognition (native.EntryHooks' table) against a hook on every
    entry point: the same handler calls, objects and reports, with fewer hooks."""
    table, e1 = _firmware(monkeypatch, False)
    every, e2 = _firmware(monkeypatch, True)
    assert e1.f.recognised >= 1 and e2.f.recognised == 0
    assert len(e1.hooks) + len(e1._disp) < len(e2.hooks) + len(e2._disp)      # code hooks and dispatched rows
    assert table == every
    assert table[3]["allocs"] == 2


@pytest.mark.parametrize("ea,n,bad", [
    (0x1000, 16, None), (0x100F, 1, None), (0x100C, 4, None),      # the whole array, its last byte, its last word
    (0x1010, 1, 0x1010), (0x100D, 4, 0x1010), (0x100F, 2, 0x1010),  # one byte past: the first byte outside
    (0x0FFF, 1, 0x0FFF), (0x0FFF, 2, 0x0FFF), (0x0FF0, 0x30, 0x0FF0),  # one byte before; a span over both ends
])
def test_the_stack_bound_is_exact_on_both_sides(ea, n, bad):
    from armload.emu.sanitize.stack import out_of_bounds
    assert out_of_bounds(0x1000, 0x1010, 0x1008, ea, n) == bad


def test_an_access_through_a_pointer_into_another_object_is_not_this_arrays():
    from armload.emu.sanitize.stack import out_of_bounds
    assert out_of_bounds(0x1000, 0x1010, 0x1010, 0x1010, 4) is None       # the pointer is one past: not ours
    assert out_of_bounds(0x1000, 0x1010, 0x0FFF, 0x1000, 4) is None
    assert out_of_bounds(0x1000, 0x1010, 0x1000, 0x1010, 4) == 0x1010     # from its first byte: ours
    assert out_of_bounds(0x1000, 0x1010, 0x100F, 0x1010, 1) == 0x1010     # from its last byte: ours


def test_an_init_return_is_its_own_modules_inside_request_module():
    """crc-t10dif's init holds its mutex across crypto_alloc_shash, whose request_module loads
    crct10dif-arm-ce (init fails: -ENODEV) and crct10dif-generic inside it; crct10dif_common has no
    init. Each initcall's return is matched to its do_init_module frame (not the last module
    formed), so the nested inits' returns are not crc-t10dif's, and no lock is held at its return
    (a false positive on Debian's crc-t10dif). crct10dif_generic's struct module is where the failed
    crct10dif_arm_ce's was: it is still seen coming (on_coming)."""
    from testinputs import require_input
    from armload.bench.inputs import DEBIAN
    from armload.emu.booted.modrun import BootedRun
    from armload.emu.sanitize import Sanitizer
    run = BootedRun(BOOT_VMLINUZ, Kernel.from_files([FULL_SYMVERS, BOOT_VMLINUZ], DEBIAN_ARMMP), DEBIAN_ARMMP,
                    tree=DEBIAN)
    came = []
    run.on_coming(came.append)
    san = Sanitizer(run)
    for rel in ("crypto/crct10dif_common.ko", "lib/crc-t10dif.ko"):
        r = san.load(require_input(os.path.join(DEBIAN, rel), "make test-inputs"), "")
        assert (r.status, r.ret) == ("returned", 0)
    assert came == ["crct10dif_common", "crc_t10dif", "crct10dif_arm_ce", "crct10dif_generic"]
    assert {m["name"]: bool(m.get("init_done")) for m in san.mods} == {
        "crct10dif_common": False, "crc_t10dif": True, "crct10dif_arm_ce": True, "crct10dif_generic": True}
    assert san.formatted() == [] and san.notes() == []


def test_an_initcall_return_belongs_to_the_do_init_module_frame_at_its_sp():
    """init_frame: the not yet returned module whose do_init_module entry SP is 0..INIT_FRAME above
    the return's SP, the latest of equal ones; a module with no init (never returns) or a nested
    load's frame is not taken for an outer one."""
    from types import SimpleNamespace
    from armload.emu.sanitize.engine import INIT_FRAME, Sanitizer
    mods = [{"name": "noinit", "sp": 0x1FA0}, {"name": "outer", "sp": 0x1FA0},
            {"name": "nested_noinit", "sp": 0x1E20}, {"name": "done", "sp": 0x1F00, "init_done": True}]
    frame = lambda sp: (Sanitizer.init_frame(SimpleNamespace(mods=mods), sp) or {}).get("name")
    assert frame(0x1FA0 - 0x18) == "outer" and frame(0x1FA0) == "outer" and frame(0x1FA0 - INIT_FRAME) == "outer"
    assert frame(0x1FA0 + 4) is None and frame(0x1E20 - 0x18) == "nested_noinit"
    assert frame(0x1FA0 - INIT_FRAME - 4) is None
    assert frame(0x1F00 - 0x18) == "outer"                 # a returned module's frame is not taken again
