"""Boot the unmodified Debian kernel on the booted machine (machine.py), from its first
instruction to run_init_process("/init") called by kernel_init: by then every initcall ran,
init memory is freed, mark_readonly ran and system_state is SYSTEM_RUNNING; current is pid 1.
Then the kernel's own run_init_process -> kernel_execve("/init") runs, and the machine stops
where it returns 0 into kernel_init: pid 1 now has /init's user mm, its registers for user
space are in pt_regs, and it never returns there (see initramfs.py).

The boot protocol (Documentation/arm/booting.rst): the Image at RAM + TEXT_OFFSET, MMU off,
SVC mode with IRQ/FIQ masked, r0 = 0, r1 = ~0 (machine type: use the DT), r2 = the DTB's
physical address. The DTB describes only RAM, the CPU, the GIC, the timer, the PL011 and its
clock, /chosen (bootargs, the initramfs range).

Then the system settles before the snapshot (`settle`, as a shell waits before its first insmod):
pid 1 sleeps until the kernel's deferred work is done. 6.1 is idle at once (about 0.2 M
instructions); 6.12 still runs its crypto self-tests in cryptomgr kthreads (ecdsa's vli_*, rsa's
mpihelp_*: about 1.4 G instructions), which every module load would otherwise pay again.
"""
from __future__ import annotations

import mmap

from unicorn import arm_const as A

from ..hw import dtb, timer as tmod
from . import initramfs
from .machine import GICC, GICD, PAGE_OFFSET, RAM_BASE, RAM_SIZE, UART, GuestFault, Machine

DTB_PA = RAM_BASE + 0x08000000
INITRD_PA = DTB_PA + 0x00100000
# init_on_free=1 (mm/page_alloc.c, init_on_free; slab_want_init_on_free() in mm/slab.h): the stock
# kernel clears memory when it is freed, so a stale pointer left in a freed slab object or page is
# not taken for a reference by the leak scan, which reads all RAM where kmemleak reads only live
# objects (6.12's kmalloc-64 kept one to sanbugs' leaked object in a freed neighbour).
DEFAULT_CMDLINE = "console=ttyAMA0 init_on_free=1"
SETTLE_NS = 10_000_000_000            # simulated time the boot's deferred work may take before the snapshot
BOOT_BUDGET = 4_000_000_000          # instructions; the full crypto self-tests need about 1.3 G


def device_tree(cmdline: str, initrd: tuple[int, int]) -> bytes:
    irq_ppi = 0xF04                       # PPI, all CPUs, level-high
    root = ("", {"#address-cells": 1, "#size-cells": 1, "compatible": "linux,dummy-virt",
                 "model": "armload booted machine", "interrupt-parent": 1}, [
        ("chosen", {"bootargs": cmdline, "stdout-path": f"/pl011@{UART:x}",
                    "linux,initrd-start": initrd[0], "linux,initrd-end": initrd[1]}, []),
        (f"memory@{RAM_BASE:x}", {"device_type": "memory", "reg": [RAM_BASE, RAM_SIZE]}, []),
        ("cpus", {"#address-cells": 1, "#size-cells": 0}, [
            ("cpu@0", {"device_type": "cpu", "compatible": "arm,cortex-a15", "reg": 0}, [])]),
        (f"intc@{GICD:x}", {"compatible": "arm,cortex-a15-gic", "interrupt-controller": b"",
                            "#interrupt-cells": 3, "#address-cells": 0,
                            "reg": [GICD, 0x1000, GICC, 0x2000], "phandle": 1}, []),
        ("timer", {"compatible": "arm,armv7-timer", "clock-frequency": tmod.FREQ, "always-on": b"",
                   "interrupts": [1, 13, irq_ppi, 1, 14, irq_ppi, 1, 11, irq_ppi, 1, 10, irq_ppi]}, []),
        ("apb-pclk", {"compatible": "fixed-clock", "#clock-cells": 0, "clock-frequency": 24_000_000,
                      "clock-output-names": "clk24mhz", "phandle": 2}, []),
        (f"pl011@{UART:x}", {"compatible": ["arm,pl011", "arm,primecell"], "reg": [UART, 0x1000],
                             "interrupts": [0, 1, 4], "clocks": [2, 2],
                             "clock-names": ["uartclk", "apb_pclk"]}, []),
    ])
    return dtb.build(root)


def boot_machine(image, cmdline: str = DEFAULT_CMDLINE, budget: int = BOOT_BUDGET) -> Machine:
    """A Machine booted to the entry of run_init_process (raises GuestFault otherwise)."""
    ram = mmap.mmap(-1, RAM_SIZE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    load_pa = image.base - PAGE_OFFSET + RAM_BASE
    ram[load_pa - RAM_BASE: load_pa - RAM_BASE + len(image.data)] = image.data
    cpio = initramfs.build()
    ram[INITRD_PA - RAM_BASE: INITRD_PA - RAM_BASE + len(cpio)] = cpio
    blob = device_tree(cmdline, (INITRD_PA, INITRD_PA + len(cpio)))
    ram[DTB_PA - RAM_BASE: DTB_PA - RAM_BASE + len(blob)] = blob
    m = Machine(image, ram)
    m.dtb, m.cmdline = blob, cmdline
    uc = m.uc
    uc.reg_write(A.UC_ARM_REG_CPSR, 0x1D3)
    uc.reg_write(A.UC_ARM_REG_R0, 0)
    uc.reg_write(A.UC_ARM_REG_R1, 0xFFFFFFFF)
    uc.reg_write(A.UC_ARM_REG_R2, DTB_PA)
    uc.reg_write(A.UC_ARM_REG_PC, load_pa)
    target = image.symbols["run_init_process"]
    how = m.run(target, budget)
    if how != "until":
        raise GuestFault(f"the kernel did not reach run_init_process within {budget} instructions; "
                         f"console tail:\n" + "\n".join(m.hw.uart.lines[-8:]))
    m.boot_insns = m.t.insns
    back = uc.reg_read(A.UC_ARM_REG_LR)                  # in kernel_init, after `bl run_init_process`
    if m.run(back, 200_000_000) != "until" or uc.reg_read(A.UC_ARM_REG_R0) != 0:
        raise GuestFault(f"kernel_execve(\"/init\") failed (r0 = {uc.reg_read(A.UC_ARM_REG_R0):#x}); "
                         f"console tail:\n" + "\n".join(m.hw.uart.lines[-8:]))
    # run_init_process is the calls' return trap (kernel.py); its block, translated while the boot ran
    # through it, has no stop there (Unicorn's stop at `until` is part of the translation)
    uc.ctl_remove_cache(target, target + 4)
    return m


def run_until_idle(bk, budget_ns: int, step_ms: int, quiet_ns: int, insn_budget: int) -> dict:
    """Let pid 1 sleep in steps of `step_ms` (msleep: the kernel's own timer wakes it) so kthreads,
    workqueues, timers, softirqs and RCU callbacks run, until `quiet_ns` of simulated time passed
    in steps each busy for under 1% of their time (idle), or `budget_ns` of simulated time is
    spent. Deterministic: time is simulated. `bk`: a BootedKernel (its run_until_idle has the defaults)."""
    t0, i0 = bk.now_ns(), bk.insns
    steps, quiet_since = 0, t0
    while bk.now_ns() - t0 < budget_ns:
        a_ns, a_i = bk.now_ns(), bk.insns
        bk.call("msleep", step_ms, budget=insn_budget)
        steps += 1
        if (bk.insns - a_i) * 100 >= bk.now_ns() - a_ns:
            quiet_since = bk.now_ns()
        elif bk.now_ns() - quiet_since >= quiet_ns:
            return {"idle": True, "ns": bk.now_ns() - t0, "insns": bk.insns - i0, "steps": steps}
    return {"idle": False, "ns": bk.now_ns() - t0, "insns": bk.insns - i0, "steps": steps}
