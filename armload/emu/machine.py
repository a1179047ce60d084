"""The emulated machine: one ARM CPU (Unicorn), the real kernel image, loaded modules, models.

Memory map:
* the kernel Image at its load address (text RX, the rest RW) and its .bss, a private copy per
  machine; kernel data keeps the Image's initial values plus the boot-time values of
  `boot.py` (jiffies, elf_hwcap, CPU masks, system workqueues, ...);
* every module region, page by page with its sections' permissions;
* a kernel stack (THREAD_SIZE, unmapped guard page below), `current` (TPIDRURO), a model heap
  with guard pages, and a sentinel return address that ends a call.

Kernel functions are entered three ways, decided by the call-class table (`calls.py`): real code
runs untouched; a modelled (or, with policy fail/zero, unmodelled) function's entry is replaced
by `svc #0; bx lr` and the SVC trap runs the Python model, whose result goes to r0/r1 before
`bx lr` returns to the caller. Nothing hooks ordinary instructions: the instruction count (the
simulated clock and the budget) comes from one block hook (`clock.py`).
"""
from __future__ import annotations

import ctypes
import struct
import time

from unicorn import (UC_ARCH_ARM, UC_HOOK_CODE, UC_HOOK_INTR, UC_HOOK_MEM_INVALID, UC_MODE_ARM,
                     UC_PROT_EXEC, UC_PROT_READ, UC_PROT_WRITE, Uc, UcError)
from unicorn import arm_const as A
from unicorn import unicorn_const as UCC

from ..errors import EmulationError
from ..loader.model import LoadedModule
from . import boot
from .calls import CallTable
from .clock import Clock
from .limits import DEFAULT_BUDGET, DEFAULT_DEFERRED_BUDGET, DEFAULT_TIMEOUT
from .cpu import ALL_REG_IDS, REG_IDS, REG_NAMES, SENTINEL, SENTINEL_PAGE
from .errno import s32
from .faults import ModelFault, Unmodelled
from .heap import Heap
from .log import KernelLog
from .results import FALLBACK, MODEL, REAL, UNMODELLED, ZEROED, CallRecord, FaultReport, RunResult

PAGE = 0x1000
SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR = 0x1, 0x2, 0x4
THREAD_SIZE = 0x2000
STACK_BASE = 0xDF000000           # guard page at STACK_BASE, stack above it
TASK_BASE = 0xDF100000            # the init task's task_struct (current)
TASK_SIZE = 0x2000
SCRATCH_BASE, SCRATCH_SIZE = 0xDF200000, 0x40000   # models' temporary buffers (not kmalloc)
USER_BASE, USER_SIZE = 0x00400000, 0x100000     # a user process's buffers (below TASK_SIZE 0xbf000000)
DEFAULT_HZ = 250                  # Debian armmp CONFIG_HZ, used only when the image gives none
REAL_RECORD_LIMIT = 256           # without --trace, calls to one real function are recorded up to this

ARM_SVC = struct.pack("<I", 0xEF00A4C0)        # svc #0xa4c0: armload's model trap
ARM_BX_LR = struct.pack("<I", 0xE12FFF1E)
THUMB_SVC = struct.pack("<H", 0xDFA4)
THUMB_BX_LR = struct.pack("<H", 0x4770)
ARM_UDF = struct.pack("<I", 0xE7F001F2)        # the kernel's BUG() instruction
THUMB_UDF = struct.pack("<H", 0xDE02)
# __gnu_mcount_nc without an image: its real calling convention, `push {lr}; bl __gnu_mcount_nc`
# returns to the caller with the original lr popped (mov ip, lr; pop {lr}; bx ip)
ARM_MCOUNT = struct.pack("<III", 0xE1A0C00E, 0xE49DE004, 0xE12FFF1C)
THUMB_MCOUNT = struct.pack("<HHHH", 0x46F4, 0xF85D, 0xEB04, 0x4760)
EXCP_UDEF, EXCP_SWI = 1, 2

_ACCESS = {UCC.UC_MEM_READ_UNMAPPED: ("read", "unmapped"), UCC.UC_MEM_WRITE_UNMAPPED: ("write", "unmapped"),
           UCC.UC_MEM_FETCH_UNMAPPED: ("fetch", "unmapped"), UCC.UC_MEM_READ_PROT: ("read", "prot"),
           UCC.UC_MEM_WRITE_PROT: ("write", "prot"), UCC.UC_MEM_FETCH_PROT: ("fetch", "prot")}


class _Stop(Exception):
    """Unwinds nested calls after the innermost one ended the run (report already taken)."""


class Machine:
    """An emulated ARM CPU holding one or more loaded modules and the kernel around them."""

    def __init__(self, modules, kernel=None, *, models=None, budget: int = DEFAULT_BUDGET,
                 timeout: float = DEFAULT_TIMEOUT, trace=None, console=None, free_init: bool = True,
                 unmodelled: str = "fail", image=None, deferred_budget: int = DEFAULT_DEFERRED_BUDGET,
                 record_real: bool = True):
        from .models import default_library
        if isinstance(modules, LoadedModule):
            modules = [modules]
        if not modules:
            raise EmulationError("nothing to run: no module loaded")
        self._all_modules: list[LoadedModule] = list(modules)
        self.modules: list[LoadedModule] = []          # mapped, strictly in load order
        self.kernel = kernel
        self.config = self._all_modules[0].config
        self.models = models if models is not None else default_library()
        self.image = image if image is not None else _image_of(kernel)
        self.table = CallTable(self.models, has_image=self.image is not None, policy=unmodelled)
        self.budget, self.timeout = budget, timeout
        self.deferred_budget = deferred_budget
        self.trace = trace
        self.free_init = free_init
        self.record_real = record_real or trace is not None
        self.calls: list[CallRecord] = []
        self.registrations: list[dict] = []
        self.model_state: dict[str, object] = {}
        self.notes: list[str] = []                     # where this machine does not simulate
        self._perm: dict[int, int] = {}                # page -> prot
        self._module_pages_all: set[int] = set()
        self._init_freed: set[int] = set()
        self._entries: dict[int, tuple[str, object]] = {}   # trap entry -> (name, Decision)
        self._real_hooks: dict[int, str] = {}               # real function entry -> name (recorded)
        self._names_at: dict[int, str] = {}
        self._sim_data: list[tuple[int, int, str]] = []
        self._caller_syms: dict[int, str] = {}
        self._report: FaultReport | None = None
        self._status: str | None = None
        self._invalid = None
        self._depth = 0
        self._current = TASK_BASE
        self.booted: dict[str, str | None] = {}     # boot initcall -> None (ran) or why it failed
        self._real_handles: dict[int, int] = {}
        self._real_seen: dict[int, int] = {}
        self.real_record_limit = None if trace is not None else REAL_RECORD_LIMIT
        self.on_free_init: list = []                  # fn(module) before its init memory is freed (coverage)
        self.invoke_frames: list[list[int]] = []      # registers of each model that invoke()d code (backtraces)
        self._scratch = SCRATCH_BASE
        self._timer_base = None
        try:
            self.uc = Uc(UC_ARCH_ARM, UC_MODE_ARM)
            self.uc.ctl_set_cpu_model(A.UC_CPU_ARM_CORTEX_A15)
            hz = (self.image.hz if self.image is not None else None) or DEFAULT_HZ
            self.clock = Clock(self.uc, hz)
            self.heap = Heap(self.uc, self.symbolize)
            self.log = KernelLog(self.clock, console)
            self._build()
        except UcError as e:
            raise EmulationError(f"cannot build the emulated machine: {e}") from None

    # --- memory map ------------------------------------------------------------------
    def _build(self) -> None:
        fixed: dict[int, int] = {}
        for p in range(STACK_BASE + PAGE, STACK_BASE + PAGE + THREAD_SIZE, PAGE):
            fixed[p] = UC_PROT_READ | UC_PROT_WRITE
        for p in range(TASK_BASE, TASK_BASE + TASK_SIZE, PAGE):
            fixed[p] = UC_PROT_READ | UC_PROT_WRITE
        for p in range(SCRATCH_BASE, SCRATCH_BASE + SCRATCH_SIZE, PAGE):
            fixed[p] = UC_PROT_READ | UC_PROT_WRITE
        fixed[SENTINEL_PAGE] = UC_PROT_READ | UC_PROT_EXEC
        self._map_pages(fixed)
        self.uc.mem_write(SENTINEL_PAGE, ARM_UDF * (PAGE // 4))
        self.uc.hook_add(UC_HOOK_MEM_INVALID, self._on_invalid)
        self.uc.hook_add(UC_HOOK_INTR, self._on_intr)
        # VFP/NEON on, as the kernel's vfp_init leaves them for kernel_neon_begin users
        self.uc.reg_write(A.UC_ARM_REG_C1_C0_2, 0x00F00000)
        self.uc.reg_write(A.UC_ARM_REG_FPEXC, 0x40000000)
        if self.image is not None:
            self._map_image()
        boot.setup(self)
        self.notes.append("current is a zeroed task_struct (pid 0, no comm, no credentials); one CPU")

    def _map_image(self) -> None:
        """Map a private copy of the prepared Image (models' traps already in place)."""
        img = self.image
        tpl, entries = _image_template(img, self.models, self.table)
        self._image_mem = bytearray(tpl)                 # private copy: kernel data is written
        self._image_buf = (ctypes.c_char * len(tpl)).from_buffer(self._image_mem)
        text_end = img.etext
        ptr = ctypes.addressof(self._image_buf)
        self.uc.mem_map_ptr(img.base, text_end - img.base, UC_PROT_READ | UC_PROT_EXEC, ptr)
        self.uc.mem_map_ptr(text_end, len(tpl) - (text_end - img.base), UC_PROT_READ | UC_PROT_WRITE | UC_PROT_EXEC,
                            ptr + (text_end - img.base))
        for p in range(img.base, img.base + len(tpl), PAGE):
            self._perm[p] = UC_PROT_READ | UC_PROT_EXEC | (UC_PROT_WRITE if p >= text_end else 0)
        for pc, (name, d) in entries.items():
            self._entries[pc] = (name, d)
            self._names_at.setdefault(pc - 4, name)

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
            if prot == 0:
                pages[p] = UC_PROT_READ | UC_PROT_WRITE
        return pages

    @property
    def pending(self) -> list[LoadedModule]:
        return [m for m in self._all_modules if not self.is_mapped(m)]

    def is_mapped(self, m: LoadedModule) -> bool:
        return any(x is m for x in self.modules)

    def init_freed(self, m: LoadedModule) -> bool:
        return id(m) in self._init_freed

    def map_module(self, m: LoadedModule) -> LoadedModule:
        """Map `m` and, first, every module loaded before it (strictly in load order)."""
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
        self._boot_for(m)
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
        self.clock.clear_cache()
        for rs in m.resolved.values():
            if rs.addr == 0 or rs.source.startswith("module:"):
                continue              # another module's symbol: its own code and data
            self._bind_kernel_symbol(rs.name, rs.addr, rs.kind)

    def _boot_for(self, m: LoadedModule) -> None:
        """Run the boot initcalls the module's imports depend on (once per machine)."""
        if self.image is None:
            return
        for name in m.resolved:
            call = boot.NEEDS.get(name)
            if call is None or call in self.booted:
                continue
            why = boot.run_initcall(self, call)
            self.booted[call] = why
            if why is not None:
                self.notes.append(f"boot: {why}; what depends on it is unmodelled")
                for sym in boot.BOOT_INITCALLS[call]:
                    self.table.force_unmodelled(sym)

    # --- kernel symbols ---------------------------------------------------------------
    def _bind_kernel_symbol(self, name: str, addr: int, kind: str) -> None:
        """Make the kernel symbol a module uses behave as the call-class table says."""
        a = addr & ~1
        self._names_at.setdefault(a, name)
        in_image = self.image is not None and self.image.contains(a)
        if kind == "data":
            if not in_image and all(d[0] != a for d in self._sim_data):
                self._map_sim_data(a, name)
            return
        if a in self._entries or a in self._real_hooks:
            return
        d = self.table.decide(name)
        thumb = bool(addr & 1) or (not in_image and self.config.thumb2)
        if not in_image:
            self._map_sim_text(a, thumb)
            if name == "__gnu_mcount_nc":
                self.uc.mem_write(a, THUMB_MCOUNT if thumb else ARM_MCOUNT)
                self._real_hooks[a] = name
                return
        if d.cls == REAL and in_image:
            if self.record_real:
                self._hook_real(a, name)
            return
        if d.cls == UNMODELLED and self.table.policy == "real" and in_image:
            self._hook_real(a, name)
            return
        self._install_trap(a, thumb, name, d)

    def _hook_real(self, a: int, name: str) -> None:
        self._real_hooks[a] = name
        self._real_handles[a] = self.uc.hook_add(UC_HOOK_CODE, self._on_real, begin=a, end=a)

    def _install_trap(self, a: int, thumb: bool, name: str, decision) -> None:
        code = (THUMB_SVC + THUMB_BX_LR) if thumb else (ARM_SVC + ARM_BX_LR)
        self.uc.mem_write(a, code)
        self._entries[a + len(code) // 2] = (name, decision)    # the pc after the svc
        self.clock.clear_cache()

    def _map_sim_text(self, a: int, thumb: bool) -> None:
        p = a & ~(PAGE - 1)
        if p not in self._perm:
            self._map_pages({p: UC_PROT_READ | UC_PROT_EXEC})
            self.uc.mem_write(p, (THUMB_UDF * 2 if thumb else ARM_UDF) * (PAGE // 4))

    def _map_sim_data(self, a: int, name: str) -> None:
        from ..kernel.provider import SIM_DATA_SLOT
        size = SIM_DATA_SLOT
        self._sim_data.append((a, size, name))
        pages = {p: UC_PROT_READ | UC_PROT_WRITE for p in range(a & ~(PAGE - 1), (a + size + PAGE - 1) & ~(PAGE - 1), PAGE)
                 if p not in self._perm}
        self._map_pages(pages)
        if not boot.init_sim_data(self, name, a):
            self.notes.append(f"kernel data {name} is zero-filled simulated memory (no kernel image)")

    def override(self, name: str, fn, *, subsystem: str = "user") -> None:
        """From now on, kernel function `name` is the Python model `fn(call)` on this machine,
        wherever it is called from (a test's stand-in, fault injection)."""
        from .calls import Decision
        from .models.base import Model
        self.models.set(name, fn, subsystem=subsystem)
        d = Decision(name, MODEL, subsystem, Model(name, fn, subsystem))
        self.table._memo[name] = d
        for e, (n, _) in list(self._entries.items()):
            if n == name:
                self._entries[e] = (name, d)
        trapped = {n_a for n_a, (n, _) in self._entries.items() if n == name}
        addrs = {a for a, n in self._names_at.items() if n == name}
        if self.image is not None and self.image.symbols.get(name) is not None:
            addrs.add(self.image.symbols[name] & ~1)     # the kernel's own callers reach it too
        for a in sorted(addrs):
            if any(t in (a + 2, a + 4) for t in trapped):
                continue
            self._names_at.setdefault(a, name)
            self._real_hooks.pop(a, None)
            in_image = self.image is not None and self.image.contains(a)
            self._install_trap(a, not in_image and self.config.thumb2, name, d)

    def kernel_function(self, name: str) -> int | None:
        """The address of the kernel's own code for `name` (None without an image)."""
        if self.image is None:
            return None
        return self.image.address(name)

    def kernel_symbol(self, name: str) -> int | None:
        """A kernel symbol's address: the image's, or the one modules were given."""
        if self.image is not None:
            a = self.image.address(name)
            if a is not None:
                return a
        if self.kernel is not None:
            return self.kernel.lookup_address(name)
        return None

    # --- hooks ----------------------------------------------------------------------
    def _on_intr(self, uc, intno, _user):
        pc = uc.reg_read(A.UC_ARM_REG_PC)
        if intno == EXCP_SWI and pc in self._entries:
            self._on_trap(pc)
            return
        if intno == EXCP_UDEF:
            self._stop_with(self._classify_udf(), "fault")
        else:
            self._stop_with(self._fault("exception", f"unexpected CPU exception {intno} at {pc:08x} "
                                        f"({self.symbolize(pc)})"), "fault")
        uc.emu_stop()

    def _on_trap(self, pc: int) -> None:
        uc = self.uc
        name, d = self._entries[pc]
        r0, r1, r2, r3, lr, sp = uc.reg_read_batch([A.UC_ARM_REG_R0, A.UC_ARM_REG_R1, A.UC_ARM_REG_R2,
                                                    A.UC_ARM_REG_R3, A.UC_ARM_REG_LR, A.UC_ARM_REG_SP])
        cls = d.cls if d.cls != UNMODELLED or self.table.policy != "zero" else ZEROED
        rec = CallRecord(name, pc, [r0, r1, r2, r3], None, lr, self._caller_sym(lr), cls=cls,
                         time_ns=self.clock.ns())
        if cls == UNMODELLED:
            where = self._caller_sym(lr)
            msg = f"unmodelled: {name} called from {where}"
            if self.image is None and d.subsystem:
                msg += f" (its real code runs only with the kernel image: --kernel vmlinuz)"
            rec.note = "unmodelled"
            self._record(rec)
            rep = self._fault("unmodelled", msg)
            rep.unmodelled = name
            self._stop_with(rep, "unmodelled")
            uc.emu_stop()
            return
        if cls == ZEROED:
            rec.ret, rec.note = 0, "unmodelled: returned 0 by --unmodelled zero"
            self._record(rec)
            uc.reg_write(A.UC_ARM_REG_R0, 0)
            return
        from .models.base import Call
        call = Call(self, name, pc, [r0, r1, r2, r3], lr, sp, d.model)
        self.calls.append(rec)
        mark = self._scratch
        try:
            out = d.model.fn(call)
        except _Stop:
            rec.note = "run ended inside"
            self._traced(rec)
            uc.emu_stop()
            return
        except ModelFault as f:
            rec.note = "fault"
            self._traced(rec)
            self._stop_with(self._fault(f.kind, str(f) if str(f).startswith(name) else f"{name}: {f}"), "fault")
            uc.emu_stop()
            return
        except Unmodelled as u:
            rec.note = "unmodelled"
            self._traced(rec)
            rep = self._fault("unmodelled", str(u))
            rep.unmodelled = u.name
            self._stop_with(rep, "unmodelled")
            uc.emu_stop()
            return
        except UcError as e:
            rec.note = "fault"
            self._traced(rec)
            self._stop_with(self._fault("paging", f"{name}: memory access failed inside the kernel function ({e})"),
                            "fault")
            uc.emu_stop()
            return
        except Exception as e:           # a bug in a model ends the run with a report, never a crash
            rec.note = "model error"
            self._traced(rec)
            self._stop_with(self._fault("model-error", f"armload's model of {name} raised "
                                        f"{type(e).__name__}: {e}"), "fault")
            uc.emu_stop()
            return
        self._scratch = mark
        ret, hi = (out if isinstance(out, tuple) else (out, None))
        if ret is not None:              # None: a void function (r0 is left as it was)
            uc.reg_write(A.UC_ARM_REG_R0, ret & 0xFFFFFFFF)
            ret &= 0xFFFFFFFF
        if hi is not None:
            uc.reg_write(A.UC_ARM_REG_R1, hi & 0xFFFFFFFF)
        for r, v in call.extra_regs.items():
            uc.reg_write(REG_IDS[r], v)
        rec.ret, rec.ret_hi = ret, hi
        rec.void = ret is None
        rec.note = rec.note or call.note
        self._traced(rec)

    def _on_real(self, uc, address, size, _user):
        lr = uc.reg_read(A.UC_ARM_REG_LR)
        if self._in_module(lr & ~1) is None:
            return                       # the kernel calling itself: not a module's call
        name = self._real_hooks.get(address)
        if name is None:
            return
        n = self._real_seen[address] = self._real_seen.get(address, 0) + 1
        if self.real_record_limit is not None and n >= self.real_record_limit and address in self._real_handles:
            uc.hook_del(self._real_handles.pop(address))      # enough recorded: stop paying for the hook
            self.notes.append(f"calls to {name} (real code) recorded up to {n}; later ones ran unrecorded")
        d = self.table.decide(name)
        regs = uc.reg_read_batch([A.UC_ARM_REG_R0, A.UC_ARM_REG_R1, A.UC_ARM_REG_R2, A.UC_ARM_REG_R3])
        cls = REAL if d.cls == REAL else UNMODELLED
        rec = CallRecord(name, address, list(regs), None, lr, self._caller_sym(lr), cls=cls,
                         note=None if cls == REAL else "unmodelled: ran the kernel's own code (--unmodelled real)",
                         time_ns=self.clock.ns())
        self._record(rec)

    def _caller_sym(self, lr: int) -> str:
        s = self._caller_syms.get(lr)
        if s is None:
            s = ("tail call (returns straight to the caller of the entry function)" if lr == SENTINEL
                 else self.symbolize((lr & ~1) - (2 if lr & 1 else 4)))
            self._caller_syms[lr] = s
        return s

    def _record(self, rec: CallRecord) -> None:
        self.calls.append(rec)
        self._traced(rec)

    def _traced(self, rec: CallRecord) -> None:
        if self.trace is not None:
            self.trace(rec)

    def _on_invalid(self, uc, access, address, size, value, _user):
        self._invalid = (access, address, size)
        return False

    def _stop_with(self, report: FaultReport, status: str) -> None:
        if self._report is None:
            self._report, self._status = report, status

    # --- memory services for models ------------------------------------------------
    def read(self, addr: int, n: int) -> bytes:
        try:
            return bytes(self.uc.mem_read(addr, n))
        except UcError:
            bad = addr                   # the first byte that is not mapped
            for p in range(addr & ~(PAGE - 1), addr + n, PAGE):
                try:
                    self.uc.mem_read(max(p, addr), 1)
                except UcError:
                    bad = max(p, addr)
                    break
            raise self._model_fault(bad, "read") from None

    def _model_fault(self, addr: int, when: str) -> ModelFault:
        """A model's access to unmapped memory, classified as the CPU's faults are."""
        if addr < PAGE:
            return ModelFault(f"unable to handle kernel NULL pointer dereference at virtual address "
                              f"{addr:08x} when {when}", "null-deref")
        hk = self.heap.classify(addr)
        if hk is not None:
            return ModelFault(f"{'use-after-free' if hk == 'use-after-free' else 'heap out-of-bounds'} access "
                              f"at virtual address {addr:08x} when {when}: {self.heap.describe(addr)}", hk)
        return ModelFault(f"unable to handle kernel paging request at virtual address {addr:08x} "
                          f"when {when}", "paging")

    def write(self, addr: int, data: bytes) -> None:
        for p in range(addr & ~(PAGE - 1), (addr + len(data) + PAGE - 1) & ~(PAGE - 1), PAGE):
            prot = self._page_prot(p)
            if prot is None:
                raise self._model_fault(max(addr, p), "written")
            if not prot & UC_PROT_WRITE:
                raise ModelFault(f"write to read-only memory at {max(addr, p):08x} "
                                 f"({self.symbolize(max(addr, p))})", "write-protect")
        self.uc.mem_write(addr, data)

    def _page_prot(self, page: int) -> int | None:
        prot = self._perm.get(page)
        if prot is not None:
            return prot
        return UC_PROT_READ | UC_PROT_WRITE if self.heap.owns_page(page) else None

    def read_cstring(self, addr: int, limit: int = 4096) -> bytes:
        out = bytearray()
        while len(out) < limit:
            chunk = min(limit - len(out), PAGE - ((addr + len(out)) & (PAGE - 1)))
            data = self.read(addr + len(out), chunk)
            z = data.find(b"\0")
            if z >= 0:
                return bytes(out + data[:z])
            out += data
        return bytes(out)

    def reg(self, name: str) -> int:
        return self.uc.reg_read(REG_IDS[name])

    def record(self, what: str, **info) -> None:
        d = {"call": what}
        d.update({k: v for k, v in info.items() if v is not None})
        self.registrations.append(d)

    def scratch(self, n: int) -> int:
        """Temporary kernel memory for a model (released when the top-level call ends)."""
        a = self._scratch
        self._scratch = a + ((n + 15) & ~15)
        if self._scratch > SCRATCH_BASE + SCRATCH_SIZE:
            raise ModelFault("armload: model scratch memory exhausted (nested too deep)", "bug")
        return a

    def leaks(self) -> list:
        """Live allocations that module code (or a model on its behalf) made: boot objects excluded."""
        return [a for a in self.heap.live.values() if a.caller and not a.boot]

    def timer_base(self) -> int:
        """A stand-in timer-wheel bucket: pending timers' entry.pprev points here (non-NULL)."""
        if self._timer_base is None:
            self._timer_base = self.heap.alloc(16, zero=True, kind="timer wheel bucket")
        return self._timer_base

    @property
    def current(self) -> int:
        """The task_struct of the running task (TPIDRURO)."""
        return self._current

    # --- symbols ----------------------------------------------------------------------
    def symbolize(self, addr: int) -> str:
        """`name+0xoff/0xsize [module]`, a kernel symbol, a heap object, or the bare address."""
        if addr == SENTINEL:
            return "ret_from_initcall (sentinel)"
        owner = self._in_module(addr)
        if owner is not None:
            s = owner.symbolize(addr)
            if s:
                return s
            sec = owner.section_at(addr)
            if sec is not None:
                return f"{sec.name}+{addr - sec.addr:#x} [{owner.name}]"
            return f"{addr:#010x} [{owner.name}]"
        if self.image is not None and self.image.base <= addr < self.image.etext and self.image.kallsyms:
            s = self.image.kallsyms.addr_to_name(addr)
            if s:
                return s
        if addr in self._names_at:
            return f"{self._names_at[addr]}+0x0"
        if self.kernel is not None:
            try:
                s = self.kernel.symbolize(addr)
            except Exception:
                s = None
            if s:
                return s
        for a, size, name in self._sim_data:
            if a <= addr < a + size:
                return f"{name}+{addr - a:#x}"
        if STACK_BASE <= addr < STACK_BASE + PAGE + THREAD_SIZE:
            return f"kernel stack+{addr - STACK_BASE - PAGE:#x}" if addr >= STACK_BASE + PAGE else "stack guard page"
        if TASK_BASE <= addr < TASK_BASE + TASK_SIZE:
            return f"current task_struct+{addr - TASK_BASE:#x}"
        h = self.heap.describe(addr)
        return h if h else f"{addr:#010x}"

    def _in_module(self, addr: int) -> LoadedModule | None:
        for m in reversed(self.modules):
            for r in self._live_regions(m):
                if r.base <= addr < r.end:
                    return m
        return None

    def _owner_any(self, addr: int) -> LoadedModule | None:
        for m in reversed(self._all_modules):
            for r in self._live_regions(m):
                if r.base <= addr < r.end:
                    return m
        return None

    # --- running ----------------------------------------------------------------------
    def _find_module(self, module) -> LoadedModule:
        if module is None:
            return self.map_module(self._all_modules[-1])
        if isinstance(module, LoadedModule):
            return self.map_module(module)
        for m in self._all_modules:
            if m.name == module:
                return self.map_module(m)
        raise EmulationError(f"no module named {module!r} in this machine")

    def run_init(self, module=None, *, budget: int | None = None, timeout: float | None = None,
                 deferred: bool = True) -> RunResult:
        """do_init_module: init, then (init returned 0) the timers/work it left, then free init memory."""
        m = self._find_module(module)
        if m.init_addr is None:
            # do_init_module without mod->init: nothing to call, the module goes LIVE and its init
            # memory is freed all the same (kernel/module/main.c)
            if self.free_init:
                self.free_init_memory(m)
            return self._no_function(m, "init_module")
        if id(m) in self._init_freed and any(r.init and r.base <= (m.init_addr & ~1) < r.end for r in m.regions):
            raise EmulationError(f"{m.name}: init_module is in init memory, which has been freed")
        res = self.call(m.init_addr, name="init_module", module=m, budget=budget, timeout=timeout)
        if res.status == "returned" and res.retval == 0:
            if deferred:
                self.run_deferred(res)
            if self.free_init and res.status == "returned":
                self.free_init_memory(m)
        return res

    def run_exit(self, module=None, *, budget: int | None = None, timeout: float | None = None) -> RunResult:
        m = self._find_module(module)
        if m.exit_addr is None:
            return self._no_function(m, "cleanup_module")
        return self.call(m.exit_addr, name="cleanup_module", module=m, budget=budget, timeout=timeout)

    def run_deferred(self, res: RunResult | None = None, *, budget: int | None = None) -> list[dict]:
        """Run due timers, work items, tasklets and kthreads in simulated-time order until idle
        or the budget ends; their outcomes are appended to `res.deferred` (a fault ends `res`)."""
        from .models.sched import run_pending
        done = run_pending(self, self.deferred_budget if budget is None else budget)
        if res is not None:
            res.deferred.extend(done)
            for d in done:
                if d["status"] != "returned" and res.status == "returned":
                    res.status, res.fault = d["status"], d["fault_report"]
                    break
        for d in done:
            d.pop("fault_report", None)
        return done

    def function_address(self, name: str, module=None) -> int:
        mods = [self._find_module(module)] if module is not None else list(reversed(self._all_modules))
        for m in mods:
            for s in m.symbols:
                if s.name == name and s.section and s.stype in ("func", "notype") and m.region_of(s.addr & ~1):
                    self.map_module(m)
                    return s.addr
        raise EmulationError(f"no function {name!r} defined in {', '.join(m.name for m in mods)}")

    def _no_function(self, m, fname) -> RunResult:
        return RunResult(m.name, fname, 0, "no-function", 0, None, [], [], 0.0)

    def free_init_memory(self, m: LoadedModule) -> None:
        """What do_init_module does after a successful init: free .init.* and the init PLTs."""
        self.map_module(m)
        if id(m) in self._init_freed:
            return
        for fn in self.on_free_init:
            fn(m)
        self._init_freed.add(id(m))
        keep: set[int] = set()
        for o in self.modules:
            for r in self._live_regions(o):
                if r.size:
                    keep.update(range(r.base & ~(PAGE - 1), (r.end + PAGE - 1) & ~(PAGE - 1), PAGE))
        doomed = []
        for r in m.regions:
            if r.init and r.size:
                doomed += [p for p in range(r.base & ~(PAGE - 1), (r.end + PAGE - 1) & ~(PAGE - 1), PAGE)
                           if p not in keep and p in self._module_pages_all]
        for start, n in _runs(sorted(set(doomed))):           # unmap whole runs, not page by page
            try:
                self.uc.mem_unmap(start, n * PAGE)
            except UcError:
                continue
            for p in range(start, start + n * PAGE, PAGE):
                self._perm.pop(p, None)
                self._module_pages_all.discard(p)
        self._caller_syms.clear()
        self.clock.clear_cache()

    def call(self, entry, args=(), *, name: str | None = None, module=None,
             budget: int | None = None, timeout: float | None = None, task: int | None = None) -> RunResult:
        """Call the function at `entry` (an address, bit 0 = Thumb, or a symbol name) as a
        top-level kernel entry (an initcall, a work item, a timer)."""
        if self._depth:
            raise EmulationError("Machine.call() from inside a model: use invoke()")
        if isinstance(entry, str):
            name = name or entry
            entry = self.function_address(entry, module)
        if module is False:
            m = None                                      # the kernel's own code (boot initcalls)
        elif module is not None:
            m = self._find_module(module)
        else:
            m = self._owner_any(entry & ~1)
            m = self.map_module(m) if m is not None else (self.modules[-1] if self.modules else
                                                           self.map_module(self._all_modules[-1]))
        fname = name or self.symbolize(entry & ~1)
        budget = self.budget if budget is None else budget
        timeout = self.timeout if timeout is None else timeout
        uc = self.uc
        first_call, first_log, first_reg = len(self.calls), len(self.log.records), len(self.registrations)
        for i in range(13):
            uc.reg_write(REG_IDS[f"r{i}"], 0)
        sp = self._push_args(STACK_BASE + PAGE + THREAD_SIZE - 8, args)
        uc.reg_write(A.UC_ARM_REG_SP, sp)
        uc.reg_write(A.UC_ARM_REG_LR, SENTINEL)
        uc.reg_write(A.UC_ARM_REG_CPSR, 0x00000013)      # SVC mode, IRQs enabled, ARM state
        self._set_current(task if task is not None else TASK_BASE)
        self._report, self._status, self._invalid = None, None, None
        self._scratch = SCRATCH_BASE
        insn0, ns0 = self.clock.insns, self.clock.ns()
        self.clock.arm_budget(budget)
        t0 = time.perf_counter()
        err = None
        self._depth = 1
        try:
            uc.emu_start(entry, SENTINEL, timeout=int(timeout * 1_000_000) if timeout else 0)
        except UcError as e:
            err = e
        finally:
            self._depth = 0
        elapsed = time.perf_counter() - t0
        self.log.finish()
        self._set_current(TASK_BASE)
        pc = uc.reg_read(A.UC_ARM_REG_PC)
        calls = self.calls[first_call:]
        status, retval, fault = "returned", None, None
        if self._report is not None:
            status, fault = self._status, self._report
        elif err is not None:
            status, fault = "fault", self._classify(err)
        elif pc == SENTINEL:
            retval = s32(uc.reg_read(A.UC_ARM_REG_R0))
        elif self.clock.budget_hit:
            status = "budget"
            fault = self._fault("budget", f"instruction budget of {budget:,} instructions exhausted "
                                f"(simulated {(self.clock.ns() - ns0) / 1e9:.3f} s; endless loop?)")
        else:
            status = "timeout"
            fault = self._fault("timeout", f"wall-clock safety net of {timeout:g} s reached after "
                                f"{self.clock.insns - insn0:,} instructions (not a result: raise --timeout)")
        if fault is not None:
            fault.last_calls = calls[-8:]
        return RunResult(m.name if m is not None else "vmlinux", fname, entry, status, retval, fault, calls,
                         [r.text for r in self.log.records[first_log:]], elapsed,
                         self.clock.insns - insn0, self.clock.ns() - ns0, self.registrations[first_reg:])

    def _push_args(self, sp: int, args) -> int:
        args = [a & 0xFFFFFFFF for a in args]
        for i, a in enumerate(args[:4]):
            self.uc.reg_write(REG_IDS[f"r{i}"], a)
        extra = args[4:]
        if extra:
            sp -= (4 * len(extra) + 7) & ~7
            self.uc.mem_write(sp, struct.pack(f"<{len(extra)}I", *extra))
        return sp

    def _set_current(self, task: int) -> None:
        self._current = task
        self.uc.reg_write(A.UC_ARM_REG_C13_C0_3, task)
        # TPIDRPRW: this CPU's per-cpu offset. One CPU whose areas are the Image's per-cpu
        # template itself, so the offset is 0 (this_cpu_ptr(&x) == &x).
        self.uc.reg_write(A.UC_ARM_REG_CP_REG, (15, 0, 0, 13, 0, 0, 4, 0))

    def user_alloc(self, data: bytes) -> int:
        """Copy `data` into a user mapping (mapped on first use, below TASK_SIZE, so access_ok,
        __check_object_size and copy_{to,from}_user treat it as user memory); its address."""
        if not hasattr(self, "_user_next"):
            self._map_pages({p: UC_PROT_READ | UC_PROT_WRITE for p in range(USER_BASE, USER_BASE + USER_SIZE, PAGE)})
            self._user_next = USER_BASE
        n = max(len(data), 1)
        addr = self._user_next
        if addr + n > USER_BASE + USER_SIZE:
            raise EmulationError(f"user mapping full ({USER_SIZE // 1024} KiB)")
        self.uc.mem_write(addr, bytes(data))
        self._user_next = (addr + n + 63) & ~63
        return addr

    @property
    def stack_range(self) -> tuple[int, int]:
        """[bottom, top) of the thread stack (above its guard page): the oops's Stack: dump ends at top."""
        return STACK_BASE + PAGE, STACK_BASE + PAGE + THREAD_SIZE

    def invoke(self, entry: int, args=()) -> int:
        """Call emulated code from inside a model (a callback, or the kernel's own code):
        registers are saved and restored; a fault inside ends the whole run."""
        uc = self.uc
        saved = uc.reg_read_batch(ALL_REG_IDS)
        sp = (saved[13] - 64) & ~7
        for i in range(4, 13):
            uc.reg_write(REG_IDS[f"r{i}"], 0)
        sp = self._push_args(sp, args)
        uc.reg_write(A.UC_ARM_REG_SP, sp)
        uc.reg_write(A.UC_ARM_REG_LR, SENTINEL)
        uc.reg_write(A.UC_ARM_REG_CPSR, saved[16] & ~0x20)
        self._depth += 1
        self.invoke_frames.append(saved)
        err = None
        try:
            uc.emu_start(entry, SENTINEL)
        except UcError as e:
            err = e
        finally:
            self._depth -= 1
        try:
            self._invoke_done(err, entry)
        finally:
            self.invoke_frames.pop()
        if self._report is not None:
            raise _Stop()
        r0 = uc.reg_read(A.UC_ARM_REG_R0)
        uc.reg_write_batch(list(zip(ALL_REG_IDS, saved)))
        return r0

    def _invoke_done(self, err, entry) -> None:
        uc = self.uc
        if self._report is None:
            if err is not None:
                self._stop_with(self._classify(err), "fault")
            elif uc.reg_read(A.UC_ARM_REG_PC) != SENTINEL:
                if self.clock.budget_hit:
                    self._stop_with(self._fault("budget", "instruction budget exhausted inside a "
                                                f"callback ({self.symbolize(entry & ~1)})"), "budget")
                else:
                    self._stop_with(self._fault("timeout", "wall-clock safety net reached"), "timeout")

    # --- fault reports -----------------------------------------------------------------
    def _regs(self) -> dict[str, int]:
        return dict(zip(REG_NAMES, self.uc.reg_read_batch(ALL_REG_IDS)))

    def _fault(self, kind: str, message: str, *, pc: int | None = None, access=None) -> FaultReport:
        regs = self._regs()
        if pc is not None:
            regs["pc"] = pc
        pc = regs["pc"]
        lr = regs["lr"]
        rep = FaultReport(kind, message, pc, self.symbolize(pc), bool(regs["cpsr"] & 0x20), regs,
                          lr_sym=self.symbolize(lr & ~1) if lr != SENTINEL else "ret_from_initcall (sentinel)",
                          last_calls=self.calls[-8:])
        rep.in_kernel = self.image is not None and self.image.base <= pc < self.image.bss_end
        if access is not None:
            rep.access_type, rep.access_addr, rep.access_size = access
            rep.access_sym = self.symbolize(rep.access_addr)
        from .oops import annotate
        annotate(self, rep)              # backtrace, Code: line, held locks
        return rep

    def _classify_udf(self) -> FaultReport:
        pc = self.uc.reg_read(A.UC_ARM_REG_PC)
        thumb = bool(self.uc.reg_read(A.UC_ARM_REG_CPSR) & 0x20)
        try:
            word = bytes(self.uc.mem_read(pc, 2 if thumb else 4))
        except UcError:
            word = b""
        if word in (ARM_UDF, THUMB_UDF) or (not thumb and word[2:] == b"\xf0\xe7"):
            if self._in_module(pc) is None and (self.image is None or not self.image.contains(pc)) \
                    and (pc & ~(PAGE - 1)) != SENTINEL_PAGE:
                return self._fault("jump-kernel", f"jump into the middle of kernel text at {pc:08x} "
                                   f"({self.symbolize(pc)})")
            return self._fault("bug", f"kernel BUG at {self.symbolize(pc)}!")
        return self._fault("undefined-instruction", f"Internal error: Oops - undefined instruction "
                           f"{word.hex()} at {pc:08x}")

    def _classify(self, err) -> FaultReport:
        inv = self._invalid
        if inv is not None:
            access, addr, size = inv
            op, why = _ACCESS.get(access, ("access", "unmapped"))
            when = {"read": "read", "write": "written", "fetch": "executed"}[op]
            acc = (op, addr, size)
            if op == "fetch":
                if why == "prot":
                    return self._fault("exec-protect", f"Unable to execute non-executable memory at "
                                       f"virtual address {addr:08x} ({self.symbolize(addr)})", pc=addr, access=acc)
                what = "NULL pointer" if addr < PAGE else "unmapped address"
                return self._fault("jump-unmapped", f"Unable to handle kernel paging request: jump to "
                                   f"{what} {addr:08x}", pc=addr, access=acc)
            if why == "prot":
                return self._fault("write-protect" if op == "write" else "read-protect",
                                   f"Unable to handle kernel paging request at virtual address {addr:08x} "
                                   f"when {when}: {'read-only' if op == 'write' else 'protected'} memory "
                                   f"({self.symbolize(addr)})", access=acc)
            if addr < PAGE:
                return self._fault("null-deref", f"Unable to handle kernel NULL pointer dereference at "
                                   f"virtual address {addr:08x} when {when}", access=acc)
            if STACK_BASE <= addr < STACK_BASE + PAGE:
                return self._fault("stack-overflow", f"kernel stack overflow: access to {addr:08x} "
                                   f"below the {THREAD_SIZE // 1024} KiB stack when {when}", access=acc)
            hk = self.heap.classify(addr)
            if hk is not None:
                return self._fault(hk, f"{'use-after-free' if hk == 'use-after-free' else 'heap out-of-bounds'} "
                                   f"access at virtual address {addr:08x} when {when}: "
                                   f"{self.heap.describe(addr)}", access=acc)
            return self._fault("paging", f"Unable to handle kernel paging request at virtual address "
                               f"{addr:08x} when {when}", access=acc)
        code = getattr(err, "errno", None)
        if code in (UCC.UC_ERR_INSN_INVALID, UCC.UC_ERR_EXCEPTION):
            return self._classify_udf()
        return self._fault("cpu", f"CPU error: {err}")


def _runs(pages: list[int]):
    """(first page, count) of each run of consecutive pages in a sorted list."""
    start = prev = None
    for p in pages + [None]:
        if p is not None and prev is not None and p == prev + PAGE:
            prev = p
            continue
        if start is not None:
            yield start, (prev - start) // PAGE + 1
        start = prev = p


_TEMPLATES: dict[tuple, tuple[bytes, dict]] = {}


def _image_template(img, models, table) -> tuple[bytes, dict]:
    """The Image + zeroed .bss with every model's trap at its function's entry, built once per
    process for each set of models: a model stands in for its function everywhere, calls from
    the kernel's own code included."""
    patched = tuple(sorted((n, id(m.fn)) for n, m in models.items()
                           if not m.fallback and n in img.symbols))
    key = (id(img), patched)
    hit = _TEMPLATES.get(key)
    if hit is not None:
        return hit
    size = ((img.bss_end + PAGE - 1) & ~(PAGE - 1)) - img.base
    buf = bytearray(size)
    buf[:len(img.data)] = img.data
    entries = {}
    for name, _ in patched:
        a = img.symbols[name]
        if a & 3 or not img.base <= a < img.etext:
            continue
        buf[a - img.base:a - img.base + 8] = ARM_SVC + ARM_BX_LR
        entries[a + 4] = (name, table.decide(name))
    hit = _TEMPLATES[key] = (bytes(buf), entries)
    if len(_TEMPLATES) > 4:
        _TEMPLATES.pop(next(iter(_TEMPLATES)))
    return hit


def _image_of(kernel):
    """The KernelImage behind a Kernel built from a vmlinuz (None for symbol files only)."""
    path = getattr(kernel, "image_path", None) if kernel is not None else None
    if not path:
        return None
    from ..kernel.image import load_image
    return load_image(path)
