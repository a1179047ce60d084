"""Boot-time kernel state: what a booted kernel's data holds when a module is loaded.

The Image carries its static initial values; this adds what boot code would have set: the
clock's jiffies, elf_hwcap for the emulated Cortex-A15 (VFPv4 + NEON), one possible/online CPU,
loops_per_jiffy calibrated to the simulated clock, SYSTEM_RUNNING, the system workqueues.
Without an image the same values go into the simulated data a module imports.
"""
from __future__ import annotations

import struct

from .bootdata import CPU_MASKS, CTYPE, DELAY_LOOP_INSNS, ELF_HWCAP, RAM_PAGES, SYSTEM_RUNNING


def _words(machine) -> dict[str, bytes]:
    lpj = machine.clock.insns_per_tick // DELAY_LOOP_INSNS
    out = {"elf_hwcap": struct.pack("<I", ELF_HWCAP), "elf_hwcap2": struct.pack("<I", 0),
           "nr_cpu_ids": struct.pack("<I", 1), "system_state": struct.pack("<I", SYSTEM_RUNNING),
           "loops_per_jiffy": struct.pack("<I", lpj),
           "hrtimer_resolution": struct.pack("<I", 1),          # high-resolution mode: 1 ns
           "_totalram_pages": struct.pack("<I", RAM_PAGES)}
    for m in CPU_MASKS:
        out[m] = struct.pack("<I", 1)
    return out


def setup(machine) -> None:
    """Write boot-time values into the mapped Image (nothing to do without one)."""
    img = machine.image
    if img is None:
        return
    for name, value in _words(machine).items():
        a = img.exports.get(name)
        if a is not None:
            machine.uc.mem_write(a, value)
    j = img.exports.get("jiffies_64") or img.exports.get("jiffies")
    if j is not None:
        machine.clock.bind_jiffies(j)
    from .models.sched import create_system_workqueues
    wqs = getattr(img, "_system_wqs", None)
    if wqs is None:
        wqs = img._system_wqs = {n: a for n, a in img.exports.items() if n.startswith("system_") and n.endswith("wq")}
    create_system_workqueues(machine, wqs)


def init_sim_data(machine, name: str, addr: int) -> bool:
    """Boot value of a simulated kernel data symbol; False when armload has none for it."""
    words = _words(machine)
    words["_ctype"] = CTYPE
    if name in words:
        machine.uc.mem_write(addr, words[name])
        return True
    if name in ("jiffies", "jiffies_64"):
        machine.clock.bind_jiffies(addr)
        return True
    if name.startswith("system_") and name.endswith("wq"):
        from .models.sched import create_system_workqueues
        create_system_workqueues(machine, {name: addr})
        return True
    return False


# Boot-time initialisation of one piece of the kernel, run from the Image itself when a module
# imports something that depends on it (initcall -> the symbols that need it).
BOOT_INITCALLS = {
    "net_ns_init": ("register_pernet_subsys", "register_pernet_device", "unregister_pernet_subsys",
                    "unregister_pernet_device", "init_net", "rtnl_register_module"),
}
NEEDS = {sym: call for call, syms in BOOT_INITCALLS.items() for sym in syms}


def run_initcall(machine, name: str) -> str | None:
    """Run one boot initcall from the Image; None on success, else why it failed."""
    addr = machine.image.symbols.get(name) if machine.image is not None else None
    if addr is None:
        return f"{name} is not in the kernel image"
    machine.heap.booting = True
    try:
        r = machine.call(addr, [], name=name, module=False)
    finally:
        machine.heap.booting = False
    if r.status != "returned" or r.retval:
        return f"{name}: {r.status} {r.retval if r.fault is None else r.fault.message}"
    return None
