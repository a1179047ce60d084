"""Run a loaded module on an emulated ARM CPU (Unicorn), with a simulated kernel around it.

Memory map of the machine:

* every region of every module given, at its load address, page by page with the permissions
  of the sections in it (text RX, rodata R, data/bss/ro_after_init RW, PLTs RX);
* the kernel: each external function a module uses is real code at its kernel address (`bx lr`
  in ARM or Thumb, `__gnu_mcount_nc` its real pop-lr return); the rest of those pages hold the
  kernel's BUG instruction, so a jump into the middle of kernel text stops with a report. External
  data symbols are zero-filled RW memory. One UC_HOOK_CODE over the stub range calls the Python
  handlers of `armload.stubs` (module code runs without per-instruction hooks);
* a kernel stack (THREAD_SIZE, with an unmapped guard page below), a fake `current` task_struct
  reachable through TPIDRURO, a heap whose every allocation is followed by an unmapped guard
  page (out-of-bounds and use-after-free accesses fault), and a sentinel return address that ends
  a run when the called function returns.

`Machine.run_init()` / `run_exit()` / `call()` return a `RunResult`; a fault, an exhausted
instruction budget or the wall-clock limit give a `FaultReport` with the PC symbolized like the
kernel's `%pS` (`function+0xoff/0xsize [module]`), the access address, registers and the last
kernel calls made.
"""
from __future__ import annotations

import struct
import time
from dataclasses import dataclass, field

from unicorn import (UC_ARCH_ARM, UC_HOOK_CODE, UC_HOOK_INTR, UC_HOOK_MEM_INVALID, UC_MODE_ARM,
                     UC_PROT_EXEC, UC_PROT_READ, UC_PROT_WRITE, Uc, UcError)
from unicorn import arm_const as A
from unicorn import unicorn_const as UCC

from .errors import EmulationError
from .model import LoadedModule
from .stubs import (ARM_BX_LR, ARM_UDF, THUMB_BX_LR, THUMB_UDF, StubCall, StubFault, StubLibrary,
                    default_library, describe_args, errno_name)

PAGE = 0x1000
SHF_WRITE = 0x1
SHF_ALLOC = 0x2
SHF_EXECINSTR = 0x4

THREAD_SIZE = 0x2000
SENTINEL = 0xFFFF0F00             # return address of every run: in the (unmapped-for-code) vectors page
SENTINEL_PAGE = 0xFFFF0000
HEAP_BASE = 0xD0000000
HEAP_LIMIT = 0xDE000000
STACK_BASE = 0xDF000000           # guard page at STACK_BASE, stack above it
TASK_BASE = 0xDF100000            # fake task_struct (current)
TASK_SIZE = 0x2000
ZERO_SIZE_PTR = 0x10
DEFAULT_BUDGET = 50_000_000       # instructions
DEFAULT_TIMEOUT = 10.0            # seconds

REG_NAMES = ["r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9", "r10", "r11", "r12",
             "sp", "lr", "pc", "cpsr"]
_REG_IDS = {"r0": A.UC_ARM_REG_R0, "r1": A.UC_ARM_REG_R1, "r2": A.UC_ARM_REG_R2, "r3": A.UC_ARM_REG_R3,
            "r4": A.UC_ARM_REG_R4, "r5": A.UC_ARM_REG_R5, "r6": A.UC_ARM_REG_R6, "r7": A.UC_ARM_REG_R7,
            "r8": A.UC_ARM_REG_R8, "r9": A.UC_ARM_REG_R9, "r10": A.UC_ARM_REG_R10,
            "r11": A.UC_ARM_REG_R11, "r12": A.UC_ARM_REG_R12, "sp": A.UC_ARM_REG_SP,
            "lr": A.UC_ARM_REG_LR, "pc": A.UC_ARM_REG_PC, "cpsr": A.UC_ARM_REG_CPSR,
            "ip": A.UC_ARM_REG_R12, "fp": A.UC_ARM_REG_R11}

_ACCESS = {UCC.UC_MEM_READ_UNMAPPED: ("read", "unmapped"), UCC.UC_MEM_WRITE_UNMAPPED: ("write", "unmapped"),
           UCC.UC_MEM_FETCH_UNMAPPED: ("fetch", "unmapped"), UCC.UC_MEM_READ_PROT: ("read", "prot"),
           UCC.UC_MEM_WRITE_PROT: ("write", "prot"), UCC.UC_MEM_FETCH_PROT: ("fetch", "prot")}


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------
@dataclass
class CallRecord:
    """One call into the kernel made by module code."""
    name: str
    addr: int
    args: list[int]
    ret: int | None
    caller: int                   # return address (lr) at the call
    caller_sym: str = ""
    note: str | None = None
    ret_hi: int | None = None     # r1 for 64-bit results

    def format(self) -> str:
        a = ", ".join(f"{x:#x}" if x > 9 else str(x) for x in self.args)
        r = "?" if self.ret is None else _fmt_ret(self.ret)
        s = f"{self.name}({a}) = {r}"
        if self.note:
            s += f"  [{self.note}]"
        if self.caller_sym:
            s += f"  <- {self.caller_sym}"
        return s

    def to_dict(self) -> dict:
        return {"name": self.name, "addr": self.addr, "args": self.args, "ret": self.ret,
                "ret_signed": _s32(self.ret) if self.ret is not None else None,
                "caller": self.caller, "caller_sym": self.caller_sym, "note": self.note}


def _s32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


def _fmt_ret(v: int) -> str:
    s = _s32(v)
    if -4095 <= s < 0:
        return f"{s} (-{errno_name(s)})"
    return f"{v:#x}" if v > 9 else str(v)


@dataclass
class FaultReport:
    kind: str                     # null-deref, paging, write-protect, exec-protect, jump-unmapped,
                                  # undefined-instruction, bug, budget, timeout, stack-overflow,
                                  # heap-out-of-bounds, use-after-free, stub, panic, ...
    message: str
    pc: int
    pc_sym: str
    thumb: bool
    registers: dict[str, int]
    lr_sym: str = ""
    access_addr: int | None = None
    access_type: str | None = None   # read / write / fetch
    access_size: int | None = None
    access_sym: str | None = None
    last_calls: list[CallRecord] = field(default_factory=list)

    def format(self, module_name: str = "") -> str:
        r = self.registers
        lines = ["8<--- cut here ---", self.message]
        lines.append(f"PC is at {self.pc_sym}")
        lines.append(f"LR is at {self.lr_sym}")
        lines.append(f"pc : [<{r['pc']:08x}>]    lr : [<{r['lr']:08x}>]    psr: {r['cpsr']:08x}"
                     f"  ({'Thumb' if self.thumb else 'ARM'})")
        lines.append(f"sp : {r['sp']:08x}  ip : {r['r12']:08x}  fp : {r['r11']:08x}")
        lines.append(f"r10: {r['r10']:08x}  r9 : {r['r9']:08x}  r8 : {r['r8']:08x}")
        lines.append(f"r7 : {r['r7']:08x}  r6 : {r['r6']:08x}  r5 : {r['r5']:08x}  r4 : {r['r4']:08x}")
        lines.append(f"r3 : {r['r3']:08x}  r2 : {r['r2']:08x}  r1 : {r['r1']:08x}  r0 : {r['r0']:08x}")
        if self.last_calls:
            lines.append("Last kernel calls:")
            for c in self.last_calls:
                lines.append("  " + c.format())
        lines.append("---[ end trace ]---")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "message": self.message, "pc": self.pc, "pc_sym": self.pc_sym,
                "thumb": self.thumb, "lr_sym": self.lr_sym, "registers": self.registers,
                "access_addr": self.access_addr, "access_type": self.access_type,
                "access_size": self.access_size, "access_sym": self.access_sym,
                "last_calls": [c.to_dict() for c in self.last_calls]}


@dataclass
class RunResult:
    module: str
    function: str                 # "init_module", "cleanup_module" or the --call name
    entry: int
    status: str                   # returned | fault | budget | timeout | no-function
    retval: int | None            # signed r0 when returned
    fault: FaultReport | None
    calls: list[CallRecord]
    log: list[str]
    elapsed: float
    instructions: int | None = None   # known exactly only when the budget ran out
    registrations: list[dict] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status in ("returned", "no-function") and (self.retval or 0) == 0

    def summary(self) -> str:
        if self.status == "no-function":
            return f"{self.module}: no {self.function} function"
        if self.status == "returned":
            r = self.retval
            s = f"{self.module}: {self.function} returned {r}"
            if r is not None and r < 0:
                s += f" (-{errno_name(r)})"
            if r is not None and r > 0 and self.function == "init_module":
                s += " (suspicious: init should follow the 0/-E convention)"
            return s
        return f"{self.module}: {self.function} did not return: {self.fault.message if self.fault else self.status}"

    def to_dict(self) -> dict:
        return {"module": self.module, "function": self.function, "entry": self.entry,
                "status": self.status, "retval": self.retval,
                "errno_name": (errno_name(self.retval) if self.retval is not None and self.retval < 0 else None),
                "ok": self.ok, "elapsed": self.elapsed, "instructions": self.instructions,
                "fault": self.fault.to_dict() if self.fault else None,
                "calls": [c.to_dict() for c in self.calls], "log": self.log,
                "registrations": self.registrations}


# --------------------------------------------------------------------------------------------
# Kernel log
# --------------------------------------------------------------------------------------------
class KernelLog:
    """printk records, printed as the kernel console would (`[    0.000000] text`)."""

    def __init__(self, console=None):
        self.lines: list[str] = []
        self.levels: list[int | None] = []
        self._pending: str | None = None
        self._pending_level: int | None = None
        self.console = console

    def printk(self, text: str, level: int | None = None, cont: bool = False) -> None:
        if self._pending is not None and not cont:
            self._flush()
        if self._pending is None:
            self._pending, self._pending_level = "", level
        self._pending += text
        while self._pending is not None and "\n" in self._pending:
            line, rest = self._pending.split("\n", 1)
            self._emit(line, self._pending_level)
            self._pending = rest if rest else None

    def _flush(self) -> None:
        if self._pending is not None:
            self._emit(self._pending, self._pending_level)
            self._pending = None

    def _emit(self, line: str, level) -> None:
        self.lines.append(line)
        self.levels.append(level)
        if self.console is not None:
            self.console(format_log_line(line))

    def finish(self) -> None:
        self._flush()


def format_log_line(line: str) -> str:
    return f"[    0.000000] {line}"


# --------------------------------------------------------------------------------------------
# Heap
# --------------------------------------------------------------------------------------------
@dataclass
class Allocation:
    addr: int
    size: int
    kind: str
    caller: int
    page_base: int
    page_end: int


class Heap:
    """Every allocation gets its own pages, the object ends at the page end (8-byte aligned),
    and an unmapped guard page follows: overruns and use-after-free are faults."""

    def __init__(self, machine: "Machine", base: int = HEAP_BASE, limit: int = HEAP_LIMIT):
        self.m = machine
        self.base = base
        self.limit = limit
        self.cur = base
        self.live: dict[int, Allocation] = {}
        self.freed: dict[int, Allocation] = {}
        self.caches: dict[int, tuple[str, int]] = {}
        self.fail_after: int | None = None      # fail every allocation after this many
        self.count = 0

    def alloc(self, size: int, zero: bool = False, kind: str = "kmalloc", caller: int = 0) -> int:
        self.count += 1
        if self.fail_after is not None and self.count > self.fail_after:
            return 0
        if size == 0:
            return ZERO_SIZE_PTR
        if size > 64 << 20:
            return 0
        rounded = (size + 7) & ~7
        npages = (rounded + PAGE - 1) // PAGE
        if self.cur + (npages + 1) * PAGE > self.limit:
            return 0
        pb = self.cur
        pe = pb + npages * PAGE
        self.m.uc.mem_map(pb, pe - pb, UC_PROT_READ | UC_PROT_WRITE)
        addr = pe - rounded
        if not zero:
            # slub_debug poisoning of uninitialised objects (POISON_INUSE)
            self.m.uc.mem_write(addr, b"\x5a" * rounded)
        self.cur = pe + PAGE              # guard page
        self.live[addr] = Allocation(addr, size, kind, caller, pb, pe)
        return addr

    def free(self, addr: int, caller: int = 0) -> None:
        if addr == 0 or addr == ZERO_SIZE_PTR:
            return
        a = self.live.pop(addr, None)
        if a is None:
            if addr in self.freed:
                raise StubFault(f"double free of {addr:#010x} (allocated by "
                                f"{self.m.symbolize(self.freed[addr].caller)})", "double-free")
            raise StubFault(f"free of invalid pointer {addr:#010x}", "invalid-free")
        self.m.uc.mem_unmap(a.page_base, a.page_end - a.page_base)
        self.freed[addr] = a

    def describe(self, addr: int) -> str | None:
        for table, state in ((self.live, "object"), (self.freed, "freed object")):
            for a in table.values():
                if a.page_base <= addr < a.page_end + PAGE:
                    off = addr - a.addr
                    where = f"+{off:#x}" if off >= 0 else f"-{-off:#x}"
                    return (f"{a.kind} {state} {a.addr:#010x}{where} (size {a.size}, "
                            f"allocated by {self.m.symbolize(a.caller)})")
        return None

    def classify(self, addr: int) -> str | None:
        for a in self.freed.values():
            if a.page_base <= addr < a.page_end:
                return "use-after-free"
        for a in list(self.live.values()) + list(self.freed.values()):
            if a.page_end <= addr < a.page_end + PAGE:
                return "heap-out-of-bounds"
        return None


# --------------------------------------------------------------------------------------------
# The machine
# --------------------------------------------------------------------------------------------
class Machine:
    """An emulated ARM CPU holding one or more loaded modules and a simulated kernel."""

    def __init__(self, modules, kernel=None, *, stubs: StubLibrary | None = None,
                 budget: int = DEFAULT_BUDGET, timeout: float = DEFAULT_TIMEOUT,
                 trace=None, console=None, free_init: bool = True):
        if isinstance(modules, LoadedModule):
            modules = [modules]
        if not modules:
            raise EmulationError("nothing to run: no module loaded")
        self._all_modules: list[LoadedModule] = list(modules)
        self.modules: list[LoadedModule] = []          # mapped (strictly in load order, when run)
        self._module_pages_all: set[int] = set()
        self._init_freed: set[int] = set()             # id() of modules whose init memory is freed
        self._stub_hook = None                         # the one UC_HOOK_CODE over the stub range
        self._stub_range: tuple[int, int] | None = None
        self._caller_syms: dict[int, str] = {}         # lr -> symbolized call site (per mapping)
        self.kernel = kernel
        self.config = self._all_modules[0].config
        self.stubs = stubs if stubs is not None else default_library()
        self.budget = budget
        self.timeout = timeout
        self.trace = trace                 # callable(CallRecord) for live tracing, or None
        self.free_init = free_init
        self.log = KernelLog(console)
        self.calls: list[CallRecord] = []
        self.registrations: list[dict] = []
        self._misc_minor = 0
        self._chrdev_major = 255
        self._stub_at: dict[int, tuple[str, object]] = {}     # addr -> (name, Stub | None)
        self._names_at: dict[int, str] = {}                   # kernel addr -> name (symbolize)
        self._data_at: list[tuple[int, int, str]] = []
        self._pending_fault: tuple[str, str] | None = None
        self._invalid: tuple | None = None
        self._perm: dict[int, int] = {}                       # page -> prot
        self.instructions_total = 0

        try:
            self.uc = Uc(UC_ARCH_ARM, UC_MODE_ARM)
            try:
                self.uc.ctl_set_cpu_model(A.UC_CPU_ARM_CORTEX_A15)
            except Exception:
                pass
            self.heap = Heap(self)
            self._build()
        except UcError as e:
            raise EmulationError(f"cannot build the emulated machine: {e}") from None

    # --- memory map -------------------------------------------------------------------
    def _module_pages(self, m: LoadedModule) -> dict[int, int]:
        pages: dict[int, int] = {}
        for r in m.regions:
            for p in range(r.base & ~(PAGE - 1), (r.end + PAGE - 1) & ~(PAGE - 1), PAGE):
                pages[p] = 0
        for s in m.sections:
            if s.size == 0 or not (s.flags & SHF_ALLOC) or m.region_of(s.addr) is None:
                continue
            prot = UC_PROT_READ
            if s.flags & SHF_EXECINSTR:
                prot |= UC_PROT_EXEC
            if s.flags & SHF_WRITE or s.mem in ("ro_after_init", "data", "init_data"):
                prot |= UC_PROT_WRITE
            for p in range(s.addr & ~(PAGE - 1), (s.addr + s.size + PAGE - 1) & ~(PAGE - 1), PAGE):
                pages[p] = pages.get(p, 0) | prot
        for p, prot in pages.items():
            if prot == 0:               # symtab/strtab copies and padding: plain data
                pages[p] = UC_PROT_READ | UC_PROT_WRITE
        return pages

    def _build(self) -> None:
        # stack (with a guard page below), current task, sentinel page
        fixed: dict[int, int] = {}
        for p in range(STACK_BASE + PAGE, STACK_BASE + PAGE + THREAD_SIZE, PAGE):
            fixed[p] = UC_PROT_READ | UC_PROT_WRITE
        for p in range(TASK_BASE, TASK_BASE + TASK_SIZE, PAGE):
            fixed[p] = UC_PROT_READ | UC_PROT_WRITE
        fixed[SENTINEL_PAGE] = UC_PROT_READ | UC_PROT_EXEC
        self._map_pages(fixed)
        self.uc.mem_write(SENTINEL_PAGE, ARM_UDF * (PAGE // 4))
        self.uc.hook_add(UC_HOOK_MEM_INVALID, self._on_invalid)
        self.uc.hook_add(UC_HOOK_INTR, self._on_intr)
        # Modules are mapped lazily, strictly in load order (map_module): a module may reuse the
        # init memory of an earlier one, which exists until that module's init has finished.

    def _map_pages(self, pages: dict[int, int]) -> None:
        """Map new pages (runs of equal permissions); widen permissions of mapped ones."""
        new = {}
        for p, prot in pages.items():
            old = self._perm.get(p)
            if old is None:
                new[p] = prot
            elif old | prot != old:
                self._perm[p] = old | prot
                self.uc.mem_protect(p, PAGE, old | prot)
        run_start = prev = run_prot = None
        for p in sorted(new) + [None]:
            prot = new.get(p)
            if p is not None and run_start is not None and p == prev + PAGE and prot == run_prot:
                prev = p
                continue
            if run_start is not None:
                self.uc.mem_map(run_start, prev + PAGE - run_start, run_prot)
            run_start, prev, run_prot = p, p, prot
        self._perm.update(new)

    @property
    def pending(self) -> list[LoadedModule]:
        """Modules of this machine not mapped yet (they are mapped, in load order, when run)."""
        return [m for m in self._all_modules if m not in self.modules]

    def is_mapped(self, m: LoadedModule) -> bool:
        return any(x is m for x in self.modules)

    def init_freed(self, m: LoadedModule) -> bool:
        return id(m) in self._init_freed

    def map_module(self, m: LoadedModule) -> LoadedModule:
        """Map `m` (and, first, every module loaded before it that is not mapped yet) with the
        kernel functions and data it uses. Modules are mapped strictly in load order, so a module
        placed in an earlier module's init memory is mapped only after that init memory has been
        freed; otherwise this raises EmulationError."""
        if not any(x is m for x in self._all_modules):
            raise EmulationError(f"module {m.name} is not part of this machine")
        for x in self._all_modules:
            if not self.is_mapped(x):
                try:
                    self._map_one(x)
                except UcError as e:
                    raise EmulationError(f"{x.name}: cannot map module memory: {e}") from None
            if x is m:
                break
        return m

    def _live_regions(self, m: LoadedModule):
        freed = id(m) in self._init_freed
        return [r for r in m.regions if not (freed and r.init)]

    def _map_one(self, m: LoadedModule) -> None:
        """Map one module and the kernel symbols it uses (every earlier module is mapped)."""
        for r in m.regions:
            if r.size == 0:
                continue
            for o in self.modules:
                for q in self._live_regions(o):
                    if q.size and r.base < q.end and q.base < r.end:
                        if q.init:
                            raise EmulationError(
                                f"{m.name}: its memory at {max(r.base, q.base):#010x} is the init memory "
                                f"of {o.name}, which is freed only when {o.name}'s init has run "
                                f"(run_init({o.name!r}) or free_init_memory() first)")
                        raise EmulationError(f"{m.name}: module memory at {max(r.base, q.base):#010x} "
                                             f"overlaps module {o.name}; choose another --placement")
        mp = self._module_pages(m)
        for p in mp:
            if p in self._perm and p not in self._module_pages_all:
                raise EmulationError(f"{m.name}: module memory at {p:#010x} overlaps the emulator's own "
                                     f"memory; choose another --placement")
        self._map_pages(mp)
        for r in m.regions:
            self.uc.mem_write(r.base, bytes(r.data))
        self.modules.append(m)
        self._module_pages_all.update(mp)
        self._caller_syms.clear()

        funcs: dict[int, tuple[str, bool]] = {}
        datas: dict[int, str] = {}
        for rs in m.resolved.values():
            if rs.addr == 0 or rs.source.startswith("module:"):
                continue              # another module's symbol: that module's own code and data
            a = rs.addr & ~1
            if (a & ~(PAGE - 1)) in self._module_pages_all or self._owner_any(a) is not None:
                continue
            self._names_at.setdefault(a, rs.name)
            if rs.kind == "data":
                if all(d[0] != a for d in self._data_at):
                    datas[a] = rs.name
            elif a not in self._stub_at:
                funcs[a] = (rs.name, bool(rs.addr & 1) or self.config.thumb2)
        pages: dict[int, int] = {}
        sim_data = self._sim_data_range()
        data_pages = set()
        for a, name in datas.items():
            size = 0x10000 if sim_data[0] <= a < sim_data[1] else 0x4000
            self._data_at.append((a, size, name))
            for p in range(a & ~(PAGE - 1), (a + size + PAGE - 1) & ~(PAGE - 1), PAGE):
                if p not in self._module_pages_all:
                    pages[p] = UC_PROT_READ | UC_PROT_WRITE
                    data_pages.add(p)
        text_pages = set()
        for a in funcs:
            for p in range(a & ~(PAGE - 1), (a + 16 + PAGE - 1) & ~(PAGE - 1), PAGE):
                if p not in self._module_pages_all:
                    pages[p] = pages.get(p, 0) | UC_PROT_READ | UC_PROT_EXEC
                    text_pages.add(p)
        fresh = {p for p in pages if p not in self._perm}
        self._map_pages(pages)
        fill = (THUMB_UDF * 2 if self.config.thumb2 else ARM_UDF) * (PAGE // 4)
        for p in fresh:
            if p in text_pages and p not in data_pages:
                self.uc.mem_write(p, fill)
        for a, name in datas.items():
            init = self.stubs.data(name) if hasattr(self.stubs, "data") else None
            if init:
                self.uc.mem_write(a, init)      # a kernel variable's boot-time value
        known = sorted(set(self._stub_at) | set(funcs))
        for a in sorted(funcs):
            name, thumb = funcs[a]
            stub = self.stubs.get(name)
            code = THUMB_BX_LR if thumb else ARM_BX_LR
            if stub is not None and stub.code is not None:
                special = stub.code[1] if thumb else stub.code[0]
                i = known.index(a)
                nxt = known[i + 1] if i + 1 < len(known) else None
                if nxt is None or a + len(special) <= nxt:
                    code = special
            self.uc.mem_write(a, code)
            self._stub_at[a] = (name, stub)
        if funcs:
            self._cover_stubs(min(funcs), max(funcs) + 15)

    def _cover_stubs(self, lo: int, hi: int) -> None:
        """Keep exactly one UC_HOOK_CODE, over every stub: widen its range when stubs are added
        (one hook per module would run a shared kernel function's handler once per module)."""
        if self._stub_range is not None:
            olo, ohi = self._stub_range
            if olo <= lo and hi <= ohi:
                return
            lo, hi = min(lo, olo), max(hi, ohi)
            self.uc.hook_del(self._stub_hook)
        self._stub_hook = self.uc.hook_add(UC_HOOK_CODE, self._on_stub, begin=lo, end=hi)
        self._stub_range = (lo, hi)

    def _owner_any(self, addr: int) -> LoadedModule | None:
        """The module of this machine (mapped or not) whose live memory holds addr."""
        for m in reversed(self._all_modules):
            for r in self._live_regions(m):
                if r.base <= addr < r.end:
                    return m
        return None

    def _sim_data_range(self) -> tuple[int, int]:
        try:
            from .kernel import SIM_DATA_BASE_OFFSET
            base = self.config.page_offset + SIM_DATA_BASE_OFFSET
            return base, base + 0x08000000
        except Exception:
            return 0, 0

    def _in_module(self, addr: int) -> LoadedModule | None:
        for m in reversed(self.modules):      # newest first: it may reuse freed init memory
            for r in self._live_regions(m):
                if r.base <= addr < r.end:
                    return m
        return None

    # --- hooks ---------------------------------------------------------------------------
    def _on_stub(self, uc, address, size, user_data):
        ent = self._stub_at.get(address)
        if ent is None:
            return
        name, stub = ent
        regs = uc.reg_read_batch([A.UC_ARM_REG_R0, A.UC_ARM_REG_R1, A.UC_ARM_REG_R2, A.UC_ARM_REG_R3,
                                  A.UC_ARM_REG_LR, A.UC_ARM_REG_SP]) if hasattr(uc, "reg_read_batch") else \
            [uc.reg_read(r) for r in (A.UC_ARM_REG_R0, A.UC_ARM_REG_R1, A.UC_ARM_REG_R2,
                                      A.UC_ARM_REG_R3, A.UC_ARM_REG_LR, A.UC_ARM_REG_SP)]
        lr, sp = regs[4], regs[5]
        call = StubCall(self, name, address, list(regs[:4]), lr, sp, stub)
        rec = CallRecord(name, address, [], None, lr, "")
        try:
            rec.args = describe_args(stub, call)
        except Exception:
            rec.args = list(regs[:4])
        csym = self._caller_syms.get(lr)
        if csym is None:
            csym = ("tail call (returns straight to the caller of the entry function)"
                    if lr == SENTINEL else self.symbolize((lr & ~1) - 4 if lr else 0))
            self._caller_syms[lr] = csym
        rec.caller_sym = csym
        ret = 0
        hi = None
        try:
            if stub is not None and stub.fn is not None:
                out = stub.fn(call)
                if isinstance(out, tuple):
                    ret, hi = out[0], out[1]
                elif out is not None:
                    ret = out
        except StubFault as f:
            rec.note = "fault"
            self._record_call(rec)
            self._pending_fault = (f.kind, f"{name}: {f}" if not str(f).startswith(name) else str(f))
            uc.emu_stop()
            return
        except UcError as e:
            rec.note = "fault"
            self._record_call(rec)
            self._pending_fault = ("stub", f"{name}: memory access failed inside the kernel function ({e})")
            uc.emu_stop()
            return
        except Exception as e:     # a bug in a handler must not crash armload
            rec.note = "handler error"
            self._record_call(rec)
            self._pending_fault = ("stub", f"stub handler for {name} raised {type(e).__name__}: {e}")
            uc.emu_stop()
            return
        ret &= 0xFFFFFFFF
        uc.reg_write(A.UC_ARM_REG_R0, ret)
        if hi is not None:
            uc.reg_write(A.UC_ARM_REG_R1, hi & 0xFFFFFFFF)
        for r, v in call.extra_regs.items():
            uc.reg_write(_REG_IDS[r], v)
        rec.ret = ret
        rec.ret_hi = hi
        rec.note = call.note
        self._record_call(rec)

    def _record_call(self, rec: CallRecord) -> None:
        self.calls.append(rec)
        if self.trace is not None:
            self.trace(rec)

    def _on_invalid(self, uc, access, address, size, value, user_data):
        self._invalid = (access, address, size)
        return False

    def _on_intr(self, uc, intno, user_data):
        self._pending_fault = ("exception", f"unexpected CPU exception {intno}")
        uc.emu_stop()

    # --- services for stubs ------------------------------------------------------------------
    def read(self, addr: int, n: int) -> bytes:
        try:
            return bytes(self.uc.mem_read(addr, n))
        except UcError:
            raise StubFault(f"unable to handle kernel paging request at virtual address {addr:08x} "
                            f"when read", "paging") from None

    def write(self, addr: int, data: bytes) -> None:
        for p in range(addr & ~(PAGE - 1), (addr + len(data) + PAGE - 1) & ~(PAGE - 1), PAGE):
            prot = self._page_prot(p)
            if prot is None:
                kind = "null-deref" if addr < PAGE else "paging"
                raise StubFault(f"unable to handle kernel paging request at virtual address "
                                f"{max(addr, p):08x} when written", kind)
            if not prot & UC_PROT_WRITE:
                raise StubFault(f"write to read-only memory at {max(addr, p):08x} "
                                f"({self.symbolize(max(addr, p))})", "write-protect")
        try:
            self.uc.mem_write(addr, data)
        except UcError:
            raise StubFault(f"unable to handle kernel paging request at virtual address {addr:08x} "
                            f"when written", "paging") from None

    def _page_prot(self, page: int) -> int | None:
        prot = self._perm.get(page)
        if prot is not None:
            return prot
        for a in self.heap.live.values():
            if a.page_base <= page < a.page_end:
                return UC_PROT_READ | UC_PROT_WRITE
        return None

    def read_cstring(self, addr: int, limit: int = 4096) -> bytes:
        out = bytearray()
        while len(out) < limit:
            chunk = min(limit - len(out), PAGE - ((addr + len(out)) & (PAGE - 1)))
            data = self.read(addr + len(out), chunk)
            z = data.find(b"\0")
            if z >= 0:
                out += data[:z]
                return bytes(out)
            out += data
        return bytes(out)

    def reg(self, name: str) -> int:
        return self.uc.reg_read(_REG_IDS[name])

    def record(self, what: str, **info) -> None:
        d = {"call": what}
        d.update({k: v for k, v in info.items() if v is not None})
        self.registrations.append(d)

    def next_misc_minor(self) -> int:
        # drivers/char/misc.c hands out dynamic minors from the top of the bitmap down
        self._misc_minor += 1
        return 64 - self._misc_minor

    def next_chrdev_major(self) -> int:
        self._chrdev_major -= 1
        return self._chrdev_major

    def symbolize(self, addr: int) -> str:
        """`name+0xoff/0xsize [module]`, a kernel symbol, a heap object, or the bare address."""
        if addr == SENTINEL:
            return "ret_from_initcall (sentinel)"
        owner = self._in_module(addr)
        if owner is not None:
            s = owner.symbolize(addr)
            if s:
                return s
        for m in reversed(self.modules):
            s = m.symbolize(addr)
            if s:
                return s
        for m in reversed(self.modules):
            if m.region_of(addr) is not None:
                sec = m.section_at(addr)
                if sec is not None:
                    return f"{sec.name}+{addr - sec.addr:#x} [{m.name}]"
                return f"{addr:#010x} [{m.name}]"
        if addr in self._names_at:
            return f"{self._names_at[addr]}+0x0"
        if self.kernel is not None:
            try:
                s = self.kernel.symbolize(addr)
            except Exception:
                s = None
            if s:
                return s
        best = None
        for a, name in self._names_at.items():
            if a <= addr < a + 16 and (best is None or a > best[0]):
                best = (a, name)
        if best:
            return f"{best[1]}+{addr - best[0]:#x}"
        for a, size, name in self._data_at:
            if a <= addr < a + size:
                return f"{name}+{addr - a:#x}"
        if STACK_BASE <= addr < STACK_BASE + PAGE + THREAD_SIZE:
            return f"kernel stack+{addr - STACK_BASE - PAGE:#x}" if addr >= STACK_BASE + PAGE else \
                "stack guard page"
        if TASK_BASE <= addr < TASK_BASE + TASK_SIZE:
            return f"current task_struct+{addr - TASK_BASE:#x}"
        h = self.heap.describe(addr) if hasattr(self, "heap") else None
        if h:
            return h
        return f"{addr:#010x}"

    # --- running ------------------------------------------------------------------------
    def _find_module(self, module) -> LoadedModule:
        """The module named (a LoadedModule, a name, or None for the last one), mapped."""
        if module is None:
            return self.map_module(self._all_modules[-1])
        if isinstance(module, LoadedModule):
            return self.map_module(module)
        for m in self._all_modules:
            if m.name == module:
                return self.map_module(m)
        raise EmulationError(f"no module named {module!r} in this machine")

    def run_init(self, module=None, *, budget: int | None = None, timeout: float | None = None) -> RunResult:
        m = self._find_module(module)
        if m.init_addr is None:
            return self._no_function(m, "init_module")
        if id(m) in self._init_freed and any(r.init and r.base <= (m.init_addr & ~1) < r.end for r in m.regions):
            raise EmulationError(f"{m.name}: init_module is in init memory, which has been freed")
        res = self.call(m.init_addr, name="init_module", module=m, budget=budget, timeout=timeout)
        if res.status == "returned" and res.retval == 0 and self.free_init:
            self.free_init_memory(m)
        return res

    def run_exit(self, module=None, *, budget: int | None = None, timeout: float | None = None) -> RunResult:
        m = self._find_module(module)
        if m.exit_addr is None:
            return self._no_function(m, "cleanup_module")
        return self.call(m.exit_addr, name="cleanup_module", module=m, budget=budget, timeout=timeout)

    def function_address(self, name: str, module=None) -> int:
        mods = [self._find_module(module)] if module is not None else list(reversed(self._all_modules))
        for m in mods:
            for s in m.symbols:
                if s.name == name and s.section and s.stype in ("func", "notype") and m.region_of(s.addr & ~1):
                    self.map_module(m)
                    return s.addr
        raise EmulationError(f"no function {name!r} defined in "
                             f"{', '.join(m.name for m in mods)}")

    def _no_function(self, m, fname) -> RunResult:
        return RunResult(m.name, fname, 0, "no-function", 0, None, [], [], 0.0)

    def free_init_memory(self, m: LoadedModule) -> None:
        """What do_init_module does after a successful init: free the module's init memory
        (.init.text, .init.data, the init PLTs). Maps the module first if it is not mapped yet
        (it is then loaded with its init never run, as when a dependency's init failed).
        Freeing twice is harmless. Later modules may then be mapped in those addresses."""
        self.map_module(m)
        if id(m) in self._init_freed:
            return
        self._init_freed.add(id(m))
        keep: set[int] = set()            # pages still holding live memory of some module
        for o in self.modules:
            for r in self._live_regions(o):
                if r.size:
                    keep.update(range(r.base & ~(PAGE - 1), (r.end + PAGE - 1) & ~(PAGE - 1), PAGE))
        for r in m.regions:
            if not r.init or not r.size:
                continue
            for p in range(r.base & ~(PAGE - 1), (r.end + PAGE - 1) & ~(PAGE - 1), PAGE):
                if p in keep or p not in self._module_pages_all:
                    continue
                try:
                    self.uc.mem_unmap(p, PAGE)
                except UcError:
                    continue
                self._perm.pop(p, None)
                self._module_pages_all.discard(p)
        self._caller_syms.clear()

    def call(self, entry, args=(), *, name: str | None = None, module=None,
             budget: int | None = None, timeout: float | None = None) -> RunResult:
        """Call the function at `entry` (an address, bit 0 = Thumb, or a symbol name)."""
        if isinstance(entry, str):
            name = name or entry
            entry = self.function_address(entry, module)
        if module is not None:
            m = self._find_module(module)
        else:
            m = self._in_module(entry & ~1) or self._owner_any(entry & ~1)
            m = self.map_module(m) if m is not None else (self.modules[-1] if self.modules else
                                                           self.map_module(self._all_modules[-1]))
        fname = name or self.symbolize(entry & ~1)
        budget = self.budget if budget is None else budget
        timeout = self.timeout if timeout is None else timeout
        uc = self.uc
        first_call = len(self.calls)
        first_log = len(self.log.lines)
        first_reg = len(self.registrations)
        for i in range(13):
            uc.reg_write(_REG_IDS[f"r{i}"], 0)
        for i, a in enumerate(list(args)[:4]):
            uc.reg_write(_REG_IDS[f"r{i}"], a & 0xFFFFFFFF)
        sp = STACK_BASE + PAGE + THREAD_SIZE - 8
        extra = list(args)[4:]
        if extra:
            sp -= 4 * len(extra) + (4 * len(extra)) % 8
            for k, a in enumerate(extra):
                uc.mem_write(sp + 4 * k, struct.pack("<I", a & 0xFFFFFFFF))
        uc.reg_write(A.UC_ARM_REG_SP, sp)
        uc.reg_write(A.UC_ARM_REG_LR, SENTINEL)
        uc.reg_write(A.UC_ARM_REG_CPSR, 0x00000013)      # SVC mode, IRQs enabled, ARM state
        try:
            uc.reg_write(A.UC_ARM_REG_C13_C0_3, TASK_BASE)  # TPIDRURO: current
        except Exception:
            pass
        self._pending_fault = None
        self._invalid = None
        t0 = time.perf_counter()
        err = None
        try:
            uc.emu_start(entry, SENTINEL, timeout=int(timeout * 1_000_000) if timeout else 0,
                         count=budget or 0)
        except UcError as e:
            err = e
        elapsed = time.perf_counter() - t0
        self.log.finish()
        pc = uc.reg_read(A.UC_ARM_REG_PC)
        calls = self.calls[first_call:]
        status, retval, fault, n_insn = "returned", None, None, None
        if err is None and self._pending_fault is None and pc == SENTINEL:
            retval = _s32(uc.reg_read(A.UC_ARM_REG_R0))
        elif err is None and self._pending_fault is None:
            if timeout and elapsed >= timeout * 0.98:
                status = "timeout"
                fault = self._fault("timeout", f"wall-clock limit of {timeout:g} s reached "
                                    f"(init still running after {elapsed:.2f} s)", calls)
            else:
                status = "budget"
                n_insn = budget
                fault = self._fault("budget", f"instruction budget of {budget:,} instructions exhausted "
                                    f"(endless loop?)", calls)
        else:
            status = "fault"
            fault = self._classify(err, calls)
        return RunResult(m.name, fname, entry, status, retval, fault, calls,
                         self.log.lines[first_log:], elapsed, n_insn,
                         self.registrations[first_reg:])

    # --- fault reports -------------------------------------------------------------------
    def _regs(self) -> dict[str, int]:
        return {n: self.uc.reg_read(_REG_IDS[n]) for n in REG_NAMES}

    def _fault(self, kind: str, message: str, calls: list[CallRecord], *, pc: int | None = None,
               access=None) -> FaultReport:
        regs = self._regs()
        if pc is not None:
            regs["pc"] = pc
        pc = regs["pc"]
        thumb = bool(regs["cpsr"] & 0x20)
        lr = regs["lr"]
        rep = FaultReport(kind, message, pc, self.symbolize(pc), thumb, regs,
                          lr_sym=self.symbolize(lr & ~1) if lr != SENTINEL else "ret_from_initcall (sentinel)",
                          last_calls=calls[-8:])
        if access is not None:
            rep.access_type, rep.access_addr, rep.access_size = access
            rep.access_sym = self.symbolize(rep.access_addr)
        return rep

    def _classify(self, err, calls) -> FaultReport:
        if self._pending_fault is not None:
            kind, msg = self._pending_fault
            return self._fault(kind, msg, calls)
        inv = self._invalid
        regs_pc = self.uc.reg_read(A.UC_ARM_REG_PC)
        if inv is not None:
            access, addr, size = inv
            op, why = _ACCESS.get(access, ("access", "unmapped"))
            when = {"read": "read", "write": "written", "fetch": "executed"}[op]
            acc = (op, addr, size)
            if op == "fetch":
                if why == "prot":
                    return self._fault("exec-protect", f"Unable to execute non-executable memory at "
                                       f"virtual address {addr:08x} ({self.symbolize(addr)})", calls,
                                       pc=addr, access=acc)
                what = "NULL pointer" if addr < PAGE else "unmapped address"
                return self._fault("jump-unmapped", f"Unable to handle kernel paging request: jump to "
                                   f"{what} {addr:08x}", calls, pc=addr, access=acc)
            if why == "prot":
                return self._fault("write-protect" if op == "write" else "read-protect",
                                   f"Unable to handle kernel paging request at virtual address {addr:08x} "
                                   f"when {when}: {'read-only' if op == 'write' else 'protected'} memory "
                                   f"({self.symbolize(addr)})", calls, access=acc)
            if addr < PAGE:
                return self._fault("null-deref", f"Unable to handle kernel NULL pointer dereference at "
                                   f"virtual address {addr:08x} when {when}", calls, access=acc)
            if STACK_BASE <= addr < STACK_BASE + PAGE or (addr < STACK_BASE + PAGE and
                                                           self.uc.reg_read(A.UC_ARM_REG_SP) < STACK_BASE + PAGE):
                return self._fault("stack-overflow", f"kernel stack overflow: access to {addr:08x} "
                                   f"below the {THREAD_SIZE // 1024} KiB stack when {when}", calls, access=acc)
            hk = self.heap.classify(addr)
            if hk is not None:
                return self._fault(hk, f"{'use-after-free' if hk == 'use-after-free' else 'heap out-of-bounds'} "
                                   f"access at virtual address {addr:08x} when {when}: "
                                   f"{self.heap.describe(addr)}", calls, access=acc)
            return self._fault("paging", f"Unable to handle kernel paging request at virtual address "
                               f"{addr:08x} when {when}", calls, access=acc)
        code = getattr(err, "errno", None)
        if code == UCC.UC_ERR_INSN_INVALID or code == UCC.UC_ERR_EXCEPTION:
            thumb = bool(self.uc.reg_read(A.UC_ARM_REG_CPSR) & 0x20)
            try:
                word = bytes(self.uc.mem_read(regs_pc, 2 if thumb else 4))
            except UcError:
                word = b""
            if word in (ARM_UDF, THUMB_UDF) or (not thumb and word[2:] == b"\xf0\xe7"):
                if self._stub_region(regs_pc):
                    return self._fault("jump-kernel", f"jump into the middle of kernel text at "
                                       f"{regs_pc:08x} ({self.symbolize(regs_pc)})", calls)
                return self._fault("bug", f"kernel BUG at {self.symbolize(regs_pc)}!", calls)
            return self._fault("undefined-instruction", f"Internal error: Oops - undefined instruction "
                               f"{word.hex()} at {regs_pc:08x}", calls)
        return self._fault("cpu", f"CPU error: {err}", calls)

    def _stub_region(self, addr: int) -> bool:
        return self._in_module(addr) is None and addr != SENTINEL and (addr & ~(PAGE - 1)) != SENTINEL_PAGE
