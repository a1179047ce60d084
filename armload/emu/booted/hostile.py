"""What a hostile module does to the booted kernel, and how a call into it ends (issue 33).

Every BootedKernel.call runs through `Watch.run`: the instructions in chunks, and between chunks
the checks below; everything else is the kernel's own code and its own detectors.

- restart, halt, power-off: the entries of machine_restart / machine_halt / machine_power_off
  (arch/arm/kernel/reboot.c, reached from kernel_restart/kernel_halt/kernel_power_off after they
  printed "reboot: Restarting system" etc.) end the call at once: the machine is gone.
- panic: panic() runs to its end (its message, the backtrace, "---[ end Kernel panic - not
  syncing: ... ]---"); its final loop's first touch_softlockup_watchdog() ends the call (with
  CONFIG_PANIC_TIMEOUT=0 the CPU would loop there for ever).
- a spin: at a chunk's end the CPU's state is probed. From the current PC, two passes of the
  loop are run with a hook on every memory read: when both passes start with the same registers
  and read the same values at the same addresses (no exception, interrupt, timer-register access
  or WFI on the way), the second pass changed nothing the first had not, so the loop repeats
  exactly until something outside it changes memory: an interrupt, that is time. Then
  - interrupts on: simulated time advances to the next timer event, as the WFI idle path does
    (no state but the instruction count differs from running the identical iterations); the
    kernel's own watchdog hrtimer and its stopper thread then see what they would see: past
    2 * watchdog_thresh (20 s) at the hrtimer's next 4 s tick, counted from the stopper's last
    touch, `BUG: soft lockup - CPU#0 stuck for 26s!` after the boot's settle. The call ends at the report's add_taint(
    TAINT_SOFTLOCKUP): the CPU would go on spinning and the report repeat.
  - interrupts off: nothing can end it. The Debian armmp config has no hard-lockup detector
    (CONFIG_HARDLOCKUP_DETECTOR is not set: 32-bit ARM has no perf NMI), so the kernel would hang
    silently; armload stops the call and says it is its own stop.
  A loop that changes memory it reads (a counter) is not proven and runs to the budget.
- budgets: instructions (the call's), and simulated time (TIME_BUDGET_NS per call): a task
  asleep for ever lets the idle path skip time until the hung-task detector reports it
  (`INFO: task init:1 blocked for more than 120 seconds`), then the call ends at the time budget.

A stop is a GuestFault whose text starts with its class (STOPS); status_of() maps a load's
result to one status word.
"""
from __future__ import annotations

import bisect

from unicorn import UC_HOOK_BLOCK, UC_HOOK_MEM_READ
from unicorn.unicorn_const import UC_CTL_IO_WRITE, UC_CTL_TLB_FLUSH
from unicorn import arm_const as A

from ..hw.cpu import RegBatch
from .machine import RAM_BASE, RAM_SIZE, GuestFault, _scan

CHUNK = 20_000_000               # instructions between checks
MIN_CHUNK = 50_000               # the first chunk (doubling to CHUNK while busy), and the least when idle
PROBE_LIMIT = 20_000             # instructions one probe may take (two passes of a loop)
TIME_BUDGET_NS = 300_000_000_000  # simulated time per call: 300 s (the hung-task detector: 120 s, checked every 120 s)
TAINT_SOFTLOCKUP = 14            # include/linux/panic.h
CPSR_I = 0x80
END_OF_PANIC = "---[ end Kernel panic"
ENDS = {"machine_restart": ("restart", "the machine restarts (machine_restart): the run ends here"),
        "machine_halt": ("halt", "the machine halts (machine_halt): the run ends here"),
        "machine_power_off": ("power-off", "the machine powers off (machine_power_off): the run ends here")}
# stop classes (the text of the GuestFault starts with "CLASS: ")
STOPS = ("restart", "halt", "power-off", "panic", "soft-lockup", "hang", "time-budget")
_REGS = [getattr(A, f"UC_ARM_REG_R{i}") for i in range(13)] + [A.UC_ARM_REG_SP, A.UC_ARM_REG_LR, A.UC_ARM_REG_PC,
                                                                 A.UC_ARM_REG_CPSR] + \
        [getattr(A, f"UC_ARM_REG_D{i}") for i in range(32)]


class Watch:
    def __init__(self, k):
        self.k = k
        self.time_budget_ns = None       # None: TIME_BUDGET_NS as it is at each call
        self.panicking = False
        self.skipped_ns = 0              # simulated time skipped over proven spins (all calls)
        self.skips = 0
        self.spin_at = 0                 # the PC of the last proven spin
        self.proof = None                # (pc, registers, reads of one pass) of the last proven spin
        self._pass = None
        sym = k.image.symbols
        for name, (cls, text) in ENDS.items():
            if name in sym:
                k.hook_code(sym[name], self._ender(cls, text))
        if "panic" in sym:
            k.hook_code(sym["panic"], self._panic)
        if "touch_softlockup_watchdog" in sym:
            k.hook_code(sym["touch_softlockup_watchdog"], self._panic_loop)
        if "add_taint" in sym:
            k.hook_code(sym["add_taint"], self._taint)

    modules = staticmethod(lambda: [])   # armload's LoadedModules at the kernel's addresses (BootedRun sets it)
    _kernel_index = None

    def where(self, addr: int) -> str:
        """`name+0xoff [module]` (armload's image of a loaded module) or `name+0xoff` (the Image)."""
        for mod in self.modules():
            s = mod.symbolize(addr)
            if s:
                return f"{s} ({addr:#x})"
        img = self.k.image
        if img.contains(addr):
            if Watch._kernel_index is None or Watch._kernel_index[0] is not img:
                named = sorted((a & ~1, n) for n, a in img.symbols.items())
                Watch._kernel_index = (img, [a for a, _ in named], named)
            _, starts, named = Watch._kernel_index
            i = bisect.bisect_right(starts, addr) - 1
            if i >= 0:
                return f"{named[i][1]}+{addr - named[i][0]:#x} ({addr:#x})"
        return f"{addr:#x}"

    def named(self, stopped: str) -> str:
        """A stop's text with the spin's address as `symbol+off [module]` (once armload has the module)."""
        if self.spin_at and f"{self.spin_at:#x}" in stopped and not f"({self.spin_at:#x})" in stopped:
            return stopped.replace(f"{self.spin_at:#x}", self.where(self.spin_at), 1)
        return stopped

    # --- the kernel's own ends ----------------------------------------------------------------
    def _stop(self, uc, text: str) -> None:
        self.k.m.stop_reason = self.k.m.stop_reason or text
        uc.emu_stop()

    def _ender(self, cls, text):
        return lambda uc, addr, size, _: self._stop(uc, f"{cls}: {text}")

    def _panic(self, uc, addr, size, _):
        self.panicking = True

    def _panic_loop(self, uc, addr, size, _):
        if self.panicking and any(END_OF_PANIC in ln for ln in self.k.console[-4:]):
            self._stop(uc, "panic: the kernel panicked (its final loop: the CPU would stay there)")

    def _taint(self, uc, addr, size, _):
        if uc.reg_read(A.UC_ARM_REG_R0) == TAINT_SOFTLOCKUP:
            where = f" (the spin at {self.where(self.spin_at)})" if self.spin_at else ""
            self._stop(uc, f"soft-lockup: the kernel's watchdog reported a soft lockup{where}; the CPU "
                           f"would go on spinning and the report repeat: the run ends here")

    # --- running ------------------------------------------------------------------------------
    def run(self, until: int, budget: int) -> str:
        """Machine.run(until, budget) in chunks, with the checks of this module between them."""
        m = self.k.m
        tb = self.time_budget_ns or TIME_BUDGET_NS
        t_end = m.now_ns() + tb
        left, back, chunk = budget, None, MIN_CHUNK
        while True:
            i0, n0 = m.t.insns, m.now_ns()
            how = m.run(until, max(1, min(left, chunk)))
            left -= m.t.insns - i0
            # idle time passes without instructions: size the next chunk so that it does not
            # overshoot the time budget by much (instructions per simulated ns of this one)
            ran, passed = m.t.insns - i0, m.now_ns() - n0
            chunk = (min(CHUNK, 2 * chunk) if passed <= 2 * ran else
                     max(MIN_CHUNK, min(CHUNK, ran * max(0, t_end - m.now_ns()) // passed)))
            verdict = None
            if back is not None:
                self.k.unhook(back)
                back = None
                if how == "service" and isinstance(m.service, dict) and "back" in m.service:
                    verdict, m.service, how = m.service["back"], None, "budget"
            if how != "budget" or left <= 0 or m.t.insns == i0 and verdict is None:   # (no block fits what is left)
                return how
            if m.now_ns() >= t_end:
                raise GuestFault(f"time-budget: no return within {tb / 1e9:.0f} s of simulated "
                                 f"time (armload's budget; {budget - left:,} instructions)")
            if verdict == "same":           # one more pass of the proven loop, with the proven inputs
                spin = self.proof[0]
            elif verdict is None and budget - left < CHUNK:
                continue                    # probe only a call that has run CHUNK instructions
            else:
                i0 = m.t.insns
                how, spin = self._probe(until, min(left, PROBE_LIMIT))
                left -= m.t.insns - i0
                if how not in ("budget", "probe"):
                    return how
            if spin is not None:
                self._spun(spin)
                self._pass = None
                back = self.k.hook_code(spin, self._back)    # the loop's next pass after the interrupt

    def _same(self) -> bool:
        """The CPU at the proven loop's PC with the proof's registers, and memory holding the values
        the proof's pass read: the pass about to run is the proven one."""
        p, regs, reads = self.proof
        m = self.k.m
        return (self._regs(m.uc) == regs
                and all(m.pread(a, n) == v for a, n, v in reads))

    def _regs(self, uc) -> bytes:
        """The registers a pass depends on (_REGS), as bytes (one uc_reg_read_batch call)."""
        if self._batch is None or self._batch[0] is not uc:
            self._batch = (uc, RegBatch(uc, _REGS))
        return self._batch[1]()

    _batch = None

    def _back(self, uc, addr, size, _):
        """At the loop's PC again after the interrupt: a pass with the proven inputs and nothing
        between (no exception, no interrupt), then the same at its end, keeps the proof; anything
        else is probed afresh."""
        m = self.k.m
        if m.service is not None:
            return
        events = (sum(m.exception_counts.values()), m.hw.irqs_taken, m.hw.wfi_count)
        if self._pass is None and self._same():
            self._pass = events
            return
        m.service = {"back": "same" if self._pass == events and self._same() else "changed"}
        uc.emu_stop()

    def _spun(self, pc: int) -> None:
        """A proven spin at `pc`: advance to the next timer event, or stop when none can come."""
        m = self.k.m
        self.spin_at = pc
        where = self.where(pc)
        if m.reg("cpsr") & CPSR_I:
            raise GuestFault(f"hang: a loop at {where} spins with interrupts off: nothing can end it, and the "
                             f"Debian armmp kernel has no hard-lockup detector (CONFIG_HARDLOCKUP_DETECTOR is not "
                             f"set), so it would hang here silently; armload's own stop")
        ev = m._next_event_ns()
        if ev is None:
            raise GuestFault(f"hang: a loop at {where} spins with interrupts on and no timer armed: nothing can "
                             f"end it; armload's own stop")
        now = m.now_ns()
        if ev > now:
            m.hw.idle_ns += ev - now
            self.skipped_ns += ev - now
            self.skips += 1
        m._sync()

    def _time_sites(self) -> list[int]:
        """Every generic-timer access (cp15 c14: its reads are native, hw/c14.py) and WFI of the Image."""
        if self._sites is None:
            c14_sites, wfi = _scan(self.k.image, True)
            self._sites = [a for a, _ in c14_sites] + list(wfi)
        return self._sites

    _sites = None

    def _probe(self, until: int, limit: int) -> tuple[str, int | None]:
        """Two passes of the loop the CPU is in, from its PC: (how the run ended, the PC when proven)."""
        m, uc = self.k.m, self.k.m.uc
        p = m.reg("pc")
        hits: list[tuple] = []
        reads: list[tuple] = []
        blocks: list[tuple[int, int]] = []
        bad = []

        def on_read(uc_, access, addr, size, value, _):
            # with the guest MMU (UC_TLB_CPU) a memory hook sees the physical address
            if RAM_BASE <= addr <= RAM_BASE + RAM_SIZE - size:
                reads.append((addr, size, m.pread(addr, size)))
            else:                                   # a device register: an input, not provable
                bad.append(addr)

        def on_block(uc_, addr, size, _):
            blocks.append((addr, size))

        def on_p(uc_, addr, size, _):
            hits.append((self._regs(uc), tuple(reads)))
            reads.clear()
            if len(hits) == 3:
                m.service = {"probe": p}
                uc.emu_stop()

        before = (sum(m.exception_counts.values()), m.hw.irqs_taken, m.hw.wfi_count)
        hp = self.k.hook_code(p, on_p)
        hr = uc.hook_add(UC_HOOK_MEM_READ, on_read)
        # Unicorn puts memory and block hooks into a block as it translates it, and a TLB entry
        # filled before takes the fast path: blocks translated before the hooks would call neither
        uc.ctl_flush_tb()
        uc.ctl(UC_CTL_TLB_FLUSH, UC_CTL_IO_WRITE)
        hb = uc.hook_add(UC_HOOK_BLOCK, on_block)
        try:
            how = m.run(until, limit)
        finally:
            self.k.unhook(hp)
            for h in (hr, hb):
                uc.hook_del(h)
        if how == "service" and m.service == {"probe": p}:
            m.service = None
            how = "probe"
        if how != "probe" or bad or len(hits) < 3:
            return how, None
        if (sum(m.exception_counts.values()), m.hw.irqs_taken, m.hw.wfi_count) != before:
            return how, None
        (r0, _), (r1, reads1), (r2, reads2) = hits
        if not (r0 == r1 == r2 and reads1 == reads2):
            return how, None
        sites = self._time_sites()
        if any(a <= s < a + n for a, n in blocks for s in sites):
            return how, None                     # the loop reads the timer or idles: time is its input
        self.proof = (p, r1, reads1)
        return how, p


def stop_class(stopped: str) -> str | None:
    """The class of a stop text ("restart: ...") or None."""
    head = stopped.split(":", 1)[0].strip()
    if head in STOPS:
        return head
    if "did not return within" in stopped:
        return "budget"
    return None


def status_of(ret, core_bytes: bytes, oops_text: str, stopped: str, console: list[str]) -> str:
    """One word for how a load_module ended: returned | refused | oops | panic | soft-lockup |
    hung-task | restart | halt | power-off | hang | budget | time-budget."""
    cls = stop_class(stopped or "")
    if "Kernel panic" in oops_text or cls == "panic":
        return "panic"
    if cls in ("restart", "halt", "power-off", "soft-lockup", "hang"):
        return cls
    if oops_text and ret is None and "BUG: soft lockup" not in oops_text:
        return "oops"
    if ret is None:
        if any("blocked for more than" in ln for ln in console):
            return "hung-task"
        return "time-budget" if cls == "time-budget" else "budget"
    return "returned" if core_bytes else "refused"


SENTENCES = {
    "soft-lockup": "spun until the kernel's soft-lockup watchdog reported it (its report above)",
    "hung-task": "slept until the kernel's hung-task detector reported it (its report above)",
    "restart": "restarted the machine",
    "halt": "halted the machine",
    "power-off": "powered the machine off",
    "hang": "hangs",
    "time-budget": "did not return",
    "budget": "did not return",
}


def sentence(name: str, function: str, status: str, stopped: str) -> str:
    """One line for a hostile end: `m: init restarted the machine: restart: ...`."""
    return f"{name}: {function} {SENTENCES.get(status, status)}: {stopped}"


def settle_line(settled: dict) -> str:
    """The settle summary; when the system did not go idle, what that means."""
    line = (f"armload: deferred work ran for {settled['ns'] / 1e6:.1f} ms simulated "
            f"({settled['insns']:,} instructions)")
    if settled["idle"]:
        return line + "; the system is idle"
    busy = 100 * settled["insns"] / max(1, settled["ns"])
    return (line + f"; the system never went idle ({busy:.0f}% busy to the end of the settle time): deferred work "
                   f"keeps running (a work item or timer that re-arms itself)")


KERNEL_LINES = {"panic": "Kernel panic - not syncing", "soft-lockup": "BUG: soft lockup",
                "hung-task": "blocked for more than", "restart": "reboot: ", "halt": "reboot: ",
                "power-off": "reboot: "}


def reason(status: str, console: list[str], stopped: str) -> tuple[str, str | None]:
    """(reason, where) for check's record: the kernel's own line where it printed one, else the
    stop's text; where: the report's `PC is at` when there is one."""
    key = KERNEL_LINES.get(status)
    line = next((ln.split("] ", 1)[-1] for ln in console if key and key in ln), None)
    where = next((ln.split("PC is at ", 1)[1] for ln in console if "PC is at " in ln), None)
    return (line or stopped.split("\n", 1)[0]), where
