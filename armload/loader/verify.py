"""Branch-reach verification: execute every relocated branch site in isolation.

For each row of `LoadedModule.branches` (CALL, JUMP24, PC24, THM_CALL, THM_JUMP24) the one
branch instruction is executed from the loaded image, with the condition flags set so that a
conditional branch is taken. A direct branch must arrive exactly at its target (S + A with the
PC bias removed) in the target's instruction set. A branch routed through a PLT must arrive at
its slot, and the slot's `ldr pc` executed next must arrive at the target. Every emitted PLT
entry is executed on its own and must land on its literal, in the state bit 0 of the literal
selects. Nothing here trusts the loader's bookkeeping beyond "this site should reach that
symbol": the image bytes decide where the CPU actually goes.
"""
from __future__ import annotations

import gc
import weakref

import bisect
import struct
import time
from dataclasses import dataclass, field

from unicorn import (UC_ARCH_ARM, UC_HOOK_MEM_INVALID, UC_MODE_ARM, UC_PROT_EXEC, UC_PROT_READ,
                     UC_PROT_WRITE, Uc, UcError)
from unicorn import arm_const as A

from ..errors import EmulationError
from .model import LoadedModule

PAGE = 0x1000
R_ARM_PC24, R_ARM_CALL, R_ARM_JUMP24, R_ARM_THM_CALL, R_ARM_THM_JUMP24 = 1, 28, 29, 10, 30
RTYPE_NAMES = {R_ARM_PC24: "R_ARM_PC24", R_ARM_CALL: "R_ARM_CALL", R_ARM_JUMP24: "R_ARM_JUMP24",
               R_ARM_THM_CALL: "R_ARM_THM_CALL", R_ARM_THM_JUMP24: "R_ARM_THM_JUMP24"}
THUMB_TYPES = (R_ARM_THM_CALL, R_ARM_THM_JUMP24)

# NZCV values that make each ARM condition code pass (bits 31..28 of CPSR)
_N, _Z, _C, _V = 8, 4, 2, 1
_COND_FLAGS = {0x0: _Z, 0x1: 0, 0x2: _C, 0x3: 0, 0x4: _N, 0x5: 0, 0x6: _V, 0x7: 0, 0x8: _C, 0x9: 0,
               0xA: 0, 0xB: _N, 0xC: 0, 0xD: _Z, 0xE: 0, 0xF: 0}


VERIFY_TCG_BUFFER = 32 << 20
VERIFY_GC_EVERY = 32                 # at most this many dropped verification Ucs (35 MiB of address space each)
_closed = 0


def _invalid(uc, access, address, size, value, ref):
    m = ref()
    if m is not None and m.fetch is None:
        m.fetch = address
    return False


@dataclass
class BranchFailure:
    site: int
    site_sym: str
    rtype: str
    symbol: str
    expected: int                 # address (bit 0 = Thumb)
    actual: int | None            # where the CPU went (bit 0 = Thumb), None if it never branched
    via_plt: int = 0
    reason: str = ""
    actual_sym: str = ""

    def format(self) -> str:
        exp = f"{self.expected & ~1:#010x} ({'Thumb' if self.expected & 1 else 'ARM'})"
        act = "nowhere" if self.actual is None else \
            f"{self.actual & ~1:#010x} ({'Thumb' if self.actual & 1 else 'ARM'})"
        if self.actual_sym:
            act += f" <{self.actual_sym}>"
        via = f" via PLT {self.via_plt:#010x}" if self.via_plt else ""
        return (f"{self.site:#010x} {self.site_sym}: {self.rtype} {self.symbol}{via}: expected {exp}, "
                f"actual {act}" + (f" — {self.reason}" if self.reason else ""))

    def to_dict(self) -> dict:
        return {"site": self.site, "site_sym": self.site_sym, "rtype": self.rtype, "symbol": self.symbol,
                "expected": self.expected, "actual": self.actual, "via_plt": self.via_plt,
                "reason": self.reason, "actual_sym": self.actual_sym}


@dataclass
class PltFailure:
    slot: int
    symbol: str | None
    expected: int
    actual: int | None
    reason: str = ""

    def format(self) -> str:
        act = "nowhere" if self.actual is None else \
            f"{self.actual & ~1:#010x} ({'Thumb' if self.actual & 1 else 'ARM'})"
        return (f"PLT slot {self.slot:#010x} ({self.symbol or '?'}): expected {self.expected & ~1:#010x} "
                f"({'Thumb' if self.expected & 1 else 'ARM'}), actual {act}"
                + (f" — {self.reason}" if self.reason else ""))

    def to_dict(self) -> dict:
        return {"slot": self.slot, "symbol": self.symbol, "expected": self.expected, "actual": self.actual,
                "reason": self.reason}


@dataclass
class VerifyResult:
    module: str
    branches_total: int
    branches_ok: int
    plt_total: int
    plt_ok: int
    branch_failures: list[BranchFailure] = field(default_factory=list)
    plt_failures: list[PltFailure] = field(default_factory=list)
    elapsed: float = 0.0
    via_plt: int = 0

    @property
    def ok(self) -> bool:
        return not self.branch_failures and not self.plt_failures

    def summary(self) -> str:
        return (f"branches verified: {self.branches_ok}/{self.branches_total}, "
                f"PLT entries verified: {self.plt_ok}/{self.plt_total}")

    def format(self) -> str:
        lines = [f"{self.module}: {self.summary()}"
                 + (f" ({self.via_plt} branches through PLT veneers)" if self.via_plt else "")]
        for f in self.branch_failures:
            lines.append("  FAIL " + f.format())
        for f in self.plt_failures:
            lines.append("  FAIL " + f.format())
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"module": self.module, "ok": self.ok, "branches_total": self.branches_total,
                "branches_verified": self.branches_ok, "plt_total": self.plt_total,
                "plt_verified": self.plt_ok, "branches_via_plt": self.via_plt,
                "branch_failures": [f.to_dict() for f in self.branch_failures],
                "plt_failures": [f.to_dict() for f in self.plt_failures], "elapsed": self.elapsed}


class _Stepper:
    """A Unicorn instance holding only the module image; executes single instructions."""

    def __init__(self, module: LoadedModule):
        self.uc = Uc(UC_ARCH_ARM, UC_MODE_ARM)
        # it runs one branch at a time: 32 MiB of translation buffer, not Unicorn's 1 GiB of address
        # space per instance (check's workers run under RLIMIT_AS, ci/workers.py)
        self.uc.ctl_set_tcg_buffer_size(VERIFY_TCG_BUFFER)
        self.uc.ctl_set_cpu_model(A.UC_CPU_ARM_CORTEX_A15)
        mapped: set[int] = set()
        for r in module.regions:
            base = r.base & ~(PAGE - 1)
            end = (r.end + PAGE - 1) & ~(PAGE - 1)
            pages = [p for p in range(base, end, PAGE) if p not in mapped]
            # map run by run (regions never overlap, but be safe)
            start = None
            for p in pages + [None]:
                if p is not None and start is not None and p == prev + PAGE:
                    prev = p
                    continue
                if start is not None:
                    self.uc.mem_map(start, prev + PAGE - start, UC_PROT_READ | UC_PROT_WRITE | UC_PROT_EXEC)
                start = prev = p
            mapped.update(pages)
            self.uc.mem_write(r.base, bytes(r.data))
        self.fetch: int | None = None
        # the hook holds the machine weakly: no cycle through the Uc, which is freed with the machine
        self._hook = self.uc.hook_add(UC_HOOK_MEM_INVALID, _invalid, weakref.ref(self))

    def close(self) -> None:
        """unicorn's Python binding keeps a closure over the Uc for every hook ever added (a cycle
        hook_del does not break), so a dropped Uc holds its address space until the cycle
        collector runs: a check worker verifies thousands of modules under RLIMIT_AS
        (ci/workers.py). Every VERIFY_GC_EVERY-th close asks the collector (about 30 ms)."""
        global _closed
        self.uc.hook_del(self._hook)
        _closed += 1
        if _closed % VERIFY_GC_EVERY == 0:
            gc.collect()

    def step(self, addr: int, thumb: bool, flags: int = 0) -> tuple[int | None, str]:
        """Execute one instruction at addr; return (arrival | thumb bit, error text)."""
        uc = self.uc
        uc.reg_write(A.UC_ARM_REG_CPSR, (flags << 28) | 0x13)
        self.fetch = None
        try:
            uc.emu_start(addr | (1 if thumb else 0), 0, count=1)
        except UcError as e:
            cpsr = uc.reg_read(A.UC_ARM_REG_CPSR)
            if self.fetch is not None and uc.reg_read(A.UC_ARM_REG_PC) == self.fetch:
                # arrived outside the image (kernel text): that is the arrival address
                return self.fetch | (1 if cpsr & 0x20 else 0), ""
            return None, str(e)
        pc = uc.reg_read(A.UC_ARM_REG_PC)
        cpsr = uc.reg_read(A.UC_ARM_REG_CPSR)
        return pc | (1 if cpsr & 0x20 else 0), ""


    def through(self, place: int, thumb: bool, plt: int, flags: int = 0) -> tuple[int | None, str, bool]:
        """The branch at place, then the `ldr pc` of the PLT slot it must reach when it names one:
        (arrival | thumb bit, error text, whether it missed that slot)."""
        arrive, err = self.step(place, thumb, flags)
        if not plt:
            return arrive, err, False
        if arrive is None or (arrive & ~1) != plt or bool(arrive & 1) != thumb:
            return arrive, err or "did not reach its PLT slot", True
        arrive, err = self.step(plt, thumb)
        return arrive, err, False


class _IsaMap:
    """Instruction set at an address: bit 0, the module's mapping symbols, or the kernel's ISA."""

    def __init__(self, module: LoadedModule, kernel_thumb: bool):
        self.m = module
        self.kernel_thumb = kernel_thumb
        marks = []
        for s in module.symbols:
            if s.stype == "notype" and s.name[:2] in ("$a", "$t", "$d"):
                marks.append((s.addr & ~1, s.name.startswith("$t")))
        marks.sort()
        self.addrs = [a for a, _ in marks]
        self.thumb = [t for _, t in marks]

    def is_thumb(self, target: int) -> bool:
        if target & 1:
            return True
        if self.m.region_of(target) is None:
            return self.kernel_thumb
        i = bisect.bisect_right(self.addrs, target) - 1
        if i < 0:
            return False
        sec = self.m.section_at(self.addrs[i])
        if sec is None or not (sec.addr <= target < sec.addr + sec.size):
            return False
        return self.thumb[i]


def _stepper(module: LoadedModule) -> _Stepper:
    try:
        return _Stepper(module)
    except UcError as e:
        raise EmulationError(f"{module.name}: cannot map the module for verification: {e}") from None


def verify_module(module: LoadedModule, kernel=None) -> VerifyResult:
    t0 = time.perf_counter()
    st = _stepper(module)
    try:
        thumb_kernel = bool(module.config.thumb2)
        isa = _IsaMap(module, thumb_kernel)

        def sym(addr: int) -> str:
            s = module.symbolize(addr & ~1)
            if s:
                return s
            for name, rs in module.resolved.items():
                if (rs.addr & ~1) == (addr & ~1):
                    return name
            if kernel is not None:
                try:
                    k = kernel.symbolize(addr & ~1)
                    if k:
                        return k
                except Exception:
                    pass
            for e in module.plt_entries:
                if e.addr == addr & ~1:
                    return f"plt: {e.symbol or hex(e.target)}"
            sec = module.section_at(addr & ~1)
            return f"{sec.name}+{(addr & ~1) - sec.addr:#x}" if sec else ""

        br = module.branches
        failures: list[BranchFailure] = []
        # ftrace_module_init NOPed the mcount calls: the relocation is checked on the call it replaced,
        # and the site must now hold the kernel's NOP.
        fin = getattr(module, "finalized", None)
        old = fin.ftrace_old if fin is not None else {}
        nop = struct.pack("<HH", 0xF10D, 0x0D04) if thumb_kernel else struct.pack("<I", 0xE28DD004)
        for place, word in old.items():
            st.uc.mem_write(place, word)
        n = len(br)
        via = 0
        names = module.sym_names
        for i in range(n):
            row = br[i]
            place = int(row["place"])
            rtype = int(row["rtype"])
            target = int(row["target"])
            plt = int(row["plt"])
            symname = names[int(row["sym"])] if int(row["sym"]) < len(names) else f"#{int(row['sym'])}"
            thumb = rtype in THUMB_TYPES
            rname = RTYPE_NAMES[rtype]            # the loader records branch types only
            flags = 0
            if not thumb:
                try:
                    word = int.from_bytes(module.read(place, 4), "little")
                except ValueError:
                    failures.append(BranchFailure(place, "", rname, symname, target, None, plt,
                                                  "site outside the module image"))
                    continue
                flags = _COND_FLAGS[word >> 28]
            exp_thumb = isa.is_thumb(target)
            expected = (target & ~1) | (1 if exp_thumb else 0)
            if place in old:
                try:
                    word = int.from_bytes(old[place], "little")
                    flags = 0 if thumb else _COND_FLAGS[word >> 28]
                    if module.read(place, 4) != nop:
                        failures.append(BranchFailure(place, sym(place), rname, symname, target, None, plt,
                                                      "ftrace site does not hold the ftrace NOP"))
                        continue
                except ValueError:
                    pass
            arrive, err, missed = st.through(place, thumb, plt, flags)
            via += bool(plt)
            if missed:
                failures.append(BranchFailure(place, sym(place), rname, symname, expected, arrive, plt, err,
                                              sym(arrive) if arrive is not None else ""))
                continue
            if arrive != expected:
                reason = err
                if not reason and arrive is not None and (arrive & ~1) == (expected & ~1):
                    reason = "right address, wrong instruction set"
                failures.append(BranchFailure(place, sym(place), rname, symname, expected, arrive, plt, reason,
                                              sym(arrive) if arrive is not None else ""))

        plt_fail: list[PltFailure] = []
        for e in module.plt_entries:
            arrive, err = st.step(e.addr, thumb_kernel)
            if arrive != e.target:
                plt_fail.append(PltFailure(e.addr, e.symbol, e.target, arrive, err))
        return VerifyResult(module.name, n, n - len(failures), len(module.plt_entries),
                            len(module.plt_entries) - len(plt_fail), failures, plt_fail,
                            time.perf_counter() - t0, via)
    finally:
        st.close()


def verify_patched_sites(module: LoadedModule, sites, read) -> VerifyResult:
    """Execute call sites patched at run time (ftrace_make_call, direct trampolines) from the
    bytes now in memory (`read(addr, n)`), the PLT sections they go through included: each must
    arrive at its target, through its PLT slot when it names one. `sites`: dicts with place, thumb,
    target (bit 0 = Thumb), plt (0: direct) and symbol."""
    t0 = time.perf_counter()
    st = _stepper(module)
    try:
        failures: list[BranchFailure] = []
        via = 0
        copied: set[int] = set()
        for s in sites:
            place, thumb, target, plt = s["place"], s["thumb"], s["target"], s["plt"]
            st.uc.mem_write(place, read(place, 4))
            rname = "patched bl (Thumb)" if thumb else "patched bl"
            expected = target if thumb else target & ~1
            if plt:
                via += 1
                for x in module.sections:     # its PLT section as it is now in memory, not as loaded
                    if x.addr <= plt < x.addr + x.size and x.index not in copied:
                        st.uc.mem_write(x.addr, read(x.addr, x.size))
                        copied.add(x.index)
            arrive, err, missed = st.through(place, thumb, plt)
            if missed or arrive != expected:
                failures.append(BranchFailure(place, module.symbolize(place) or "", rname, s["symbol"], expected,
                                              arrive, plt, err))
        n = len(sites)
        return VerifyResult(module.name, n, n - len(failures), 0, 0, failures, [], time.perf_counter() - t0, via)
    finally:
        st.close()
