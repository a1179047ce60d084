"""Long-descriptor (LPAE) page tables in armload's walks (armload/emu/hw/cpu.py walk_long, fsr),
on synthetic tables and in the booted 6.1.0-50-armmp-lpae kernel."""
import os
import struct

import pytest

from testinputs import CACHE
from armload.emu.hw import cpu

EAE = cpu.TTBCR_EAE
T1SZ_2 = 2 << 16                       # Linux, PAGE_OFFSET 0xc0000000: T0SZ 0, T1SZ 2 (proc-v7-3level.S)
AF, RO, EL0, XN, TABLE, BLOCK, PAGE = 1 << 10, 1 << 7, 1 << 6, 1 << 54, 3, 1, 3


class Mem(dict):
    def put(self, pa, d):
        self[pa], self[pa + 4] = d & 0xFFFFFFFF, d >> 32

    def read32(self, pa):
        return self.get(pa, 0)


def tables():
    """TTBR1 (top GiB) -> level-2 table at 0x41000000; TTBR0 -> level 1 at 0x42000000."""
    m = Mem()
    l2 = 0x41000000
    m.put(l2 + 8 * ((0xC0000000 >> 21) & 0x1FF), 0x40000000 | AF | BLOCK)            # 2 MiB block
    m.put(l2 + 8 * ((0xD0900000 >> 21) & 0x1FF), 0x41100000 | TABLE)                 # -> level 3
    m.put(0x41100000 + 8 * ((0xD096F000 >> 12) & 0x1FF), 0x4ABCD000 | AF | PAGE)      # 4 KiB page
    m.put(0x41100000 + 8 * ((0xD0970000 >> 12) & 0x1FF), 0x4ABCE000 | PAGE)           # AF clear
    m.put(0x41100000 + 8 * ((0xD0971000 >> 12) & 0x1FF), 0x4ABCF000 | AF | RO | XN | PAGE)
    l1 = 0x42000000
    m.put(l1 + 8 * 2, 0x43000000 | TABLE)                                             # 0x80000000-0xbfffffff
    m.put(0x43000000 + 8 * ((0xBF000000 >> 21) & 0x1FF), 0x44000000 | TABLE)
    m.put(0x44000000 + 8 * 3, 0x45000000 | AF | EL0 | PAGE)                            # 0xbf003000
    return m, l1, l2


def walk(va, **kw):
    m, l1, l2 = tables()
    return cpu.walk(m.read32, l1, EAE | T1SZ_2, l2, 0, va, **kw)


def test_levels_blocks_pages_and_the_ttbr_split():
    w = walk(0xC0123456)
    assert (w.pa, w.level, w.long, w.fs) == (0x40123456, 2, True, 0)
    assert walk(0xD096F123).pa == 0x4ABCD123 and walk(0xD096F123).level == 3
    w = walk(0xBF003010)                                   # below PAGE_OFFSET: TTBR0, three levels
    assert (w.pa, w.level) == (0x45000010, 3)


@pytest.mark.parametrize("va,kw,fs", [
    (0xD0A00000, {}, 0x06),                                # no level-2 entry: translation, level 2
    (0xD0972000, {}, 0x07),                                # no level-3 entry: translation, level 3
    (0x10000000, {}, 0x05),                                # no level-1 entry in TTBR0: level 1
    (0xD0970000, {}, 0x0B),                                # AF clear: access flag fault, level 3
    (0xD0971000, {"write": True}, 0x0F),                   # AP[2] read-only
    (0xD0971000, {"execute": True}, 0x0F),                 # XN
    (0xD096F000, {"user": True}, 0x0F),                    # AP[1] clear: no EL0 access
])
def test_faults_in_the_long_format(va, kw, fs):
    w = walk(va, **kw)
    assert w.pa is None and w.fs == fs and w.translation_fault == (fs & 0x3C == 4)
    write = kw.get("write", False)
    assert cpu.fsr(w, write) == fs | 0x200 | (0x800 if write else 0)      # LPAE bit 9, WnR bit 11
    assert walk(0xD0971000).pa == 0x4ABCF000 and walk(0xBF003000, user=True).pa == 0x45000000


def test_other_faults_and_the_short_format_unchanged():
    assert walk(0xC0000000).other_fault(True) == 0x21 and walk(0xC0000000).other_fault(False) == 0x10
    short = cpu.Walk(None, 0x5, 3, 1)
    assert short.translation_fault and short.other_fault(True) == 0x1 and cpu.fsr(short, True) == 0x835


LPAE = "6.1.0-50-armmp-lpae"
IMAGE = os.path.join(CACHE, f"linux-image-{LPAE}", "boot", f"vmlinuz-{LPAE}")


@pytest.mark.inputs(IMAGE, how=f"make test-inputs KERNEL={LPAE}")
def test_a_module_runs_in_the_booted_lpae_kernel_with_the_kernels_image():
    from armload.emu.booted.modrun import BootedRun
    from armload.kernel.config import DEBIAN_ARMMP
    from armload.kernel.provider import Kernel
    from armload.loader.for_kernel import follow_kernel
    sv = os.path.join(CACHE, f"linux-headers-{LPAE}", "usr", "src", f"linux-headers-{LPAE}", "Module.symvers")
    cfg = follow_kernel(DEBIAN_ARMMP, IMAGE)
    run = BootedRun(IMAGE, Kernel.from_files([sv, IMAGE], cfg), cfg)
    ttbr0, ttbcr, ttbr1, _ = cpu.mmu_state(run.bk.m.uc)
    assert ttbcr & EAE and (ttbcr >> 16) & 7 == 2             # the kernel's long-descriptor split
    buf = run.bk.vmalloc(0x3000)                               # vmalloc space: TTBR1, level-3 pages
    assert buf >= 0xD0000000
    run.bk.write(buf + 0x1FFE, b"lpae")
    assert run.bk.read(buf + 0x1FFE, 4) == b"lpae"
    tree = os.path.join(CACHE, f"linux-image-{LPAE}", "lib", "modules", LPAE, "kernel")
    r = run.load(os.path.join(tree, "fs", "nls", "nls_cp437.ko"))
    assert r.ok and r.loader.identical and r.loader.compared > 0, r.to_dict()
