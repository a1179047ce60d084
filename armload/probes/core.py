"""Probes on a running Machine: patched instructions in the loaded image, traps for handlers.

`Probes(machine)` is the probe subsystem of one machine: on attach it does what
ftrace_module_init does for every module (each `bl __gnu_mcount_nc` site becomes the NOP),
then offers kprobes, kretprobes, ftrace and direct (fentry/fexit) trampolines on module
functions. Handlers are Python callables `fn(hit)`; a `ProbeHit` carries the function, the
arguments r0-r3, the caller, the return value (return probes) and the simulated time.

Executable memory for instruction slots, the ftrace_caller body and trampolines comes from a
probe text area (like the kernel's insn pages); a trampoline a `bl` must reach is allocated
next to the module (module_alloc). A handler is entered through a trap: an undefined
instruction the machine's breakpoint table dispatches (Machine.breakpoints).
"""
from __future__ import annotations

import bisect
import contextlib
import struct
from dataclasses import dataclass, field

from unicorn import UC_PROT_EXEC, UC_PROT_READ, UC_PROT_WRITE
from unicorn import arm_const as A

from ..emu.cpu import REG_IDS, SENTINEL
from .base import EINVAL, ENOENT, ENOMEM, Function, refuse
from .table import KprobeTable

JUMP_ENTRY_INIT = 2                                  # jump_entry.key bit 1: jump_entry_is_init

PAGE = 0x1000
PROBE_TEXT, PROBE_TEXT_SIZE = 0xDF300000, 0x00400000
ARM_TRAP = struct.pack("<I", 0xE7F001F8)           # armload's handler traps: UDF in each state
THUMB_TRAP = struct.pack("<H", 0xDE18)


@dataclass
class ProbeHit:
    kind: str                    # kprobe, kprobe-post, kretprobe, ftrace, fentry, fexit
    function: str
    addr: int
    args: list[int]
    caller: int
    time_ns: int
    insns: int
    ret: int | None = None
    machine: object = field(default=None, repr=False)
    probes: object = field(default=None, repr=False)

    @property
    def caller_sym(self) -> str:
        """The caller as %pS prints it (computed on demand: hits are hot)."""
        return self.probes._caller_sym(self.caller) if self.probes is not None else f"{self.caller:#x}"

    def set_reg(self, name: str, value: int) -> None:
        """Change a register before the probed code continues (pre-handlers)."""
        self.machine.uc.reg_write(REG_IDS[name], value & 0xFFFFFFFF)

    def format(self) -> str:
        a = ", ".join(f"{x:#x}" for x in self.args)
        s = f"[{self.kind}] {self.function} @ {self.addr:#010x}"
        if self.kind in ("kretprobe", "fexit", "graph-return"):
            r = self.ret if self.ret is not None else 0
            sv = r - (1 << 32) if r & 0x80000000 else r
            s += f" returned {sv} ({r:#x})"
        else:
            s += f" ({a})"
        return s + f" <- {self.caller_sym}  t={self.time_ns} ns"

    def to_dict(self) -> dict:
        return {"kind": self.kind, "function": self.function, "addr": self.addr, "args": self.args,
                "ret": self.ret, "caller": self.caller, "caller_sym": self.caller_sym,
                "time_ns": self.time_ns, "insns": self.insns}



class Probes:
    """The probe subsystem of one machine."""

    def __init__(self, machine, *, cache: bool = False, record: bool = True, on_hit=None, optprobes: bool = True):
        from . import cost
        from .ftrace import Ftrace
        self.m = machine
        self.uc = machine.uc
        self.table = KprobeTable(cache=cache)
        self.record = record
        self.on_hit = on_hit
        self.hits: list[ProbeHit] = []
        self._text = PROBE_TEXT
        self._text_end = PROBE_TEXT
        self._near: dict[int, int] = {}             # module id -> next free address near it
        self._kretprobe_tramp = None
        self._kret_tasks: dict[int, list] = {}       # task -> its kretprobe instances, innermost last
        machine.unwind_fixup = self._unwind_fixup
        self.probes: list = []
        self.code_names: list[tuple[int, int, str]] = []    # (start, end, name) of probe code
        self._batch, self._dirty = 0, False
        self._unprotected: dict[tuple[int, int], int] = {}
        self._regions = None
        self._func_index: dict[int, tuple] = {}
        self._names_index: dict[int, dict] = {}
        self._jump_sites: dict[int, set] = {}        # module id -> its jump label sites
        self._owner_key, self._owner_idx = None, None
        self._active = None                          # the kprobe whose handlers are running (kprobe_running)
        self.optprobes = optprobes and not machine.config.thumb2     # CONFIG_OPTPROBES: ARM kernels only
        self.cost = cost.model(machine.image)        # modelled instructions of the kernel's C steps
        self.model_insns = 0
        self.model_counts: dict[str, int] = {}
        from .ktext import KernelText
        self.ktext = KernelText(machine.image) if machine.image is not None else None
        for mod in machine._all_modules:
            machine.map_module(mod)
        self.ftrace = Ftrace(self)
        with self.batch():
            for mod in machine.modules:
                self.ftrace.module_init(mod)

    # --- memory ---------------------------------------------------------------------------
    def alloc_text(self, n: int, align: int = 4) -> int:
        """Executable memory for slots and code (insn pages)."""
        a = (self._text + align - 1) & ~(align - 1)
        end = a + n
        if end > PROBE_TEXT + PROBE_TEXT_SIZE:
            raise refuse("get_insn_slot", ENOMEM, "probe instruction pages exhausted")
        while self._text_end < end:
            self.m._map_pages({self._text_end: UC_PROT_READ | UC_PROT_EXEC})
            self._text_end += PAGE
            self._regions = None
        self._text = end
        return a

    def alloc_near(self, mod, n: int) -> int:
        """Code a `bl` in `mod` must reach: pages right after the module (module_alloc)."""
        key = id(mod)
        a = self._near.get(key)
        if a is None:
            top = max(r.end for r in mod.regions if r.size)
            a = ((top + PAGE - 1) & ~(PAGE - 1)) + PAGE
        a = (a + 15) & ~15
        pages = {p: UC_PROT_READ | UC_PROT_EXEC for p in range(a & ~(PAGE - 1), (a + n + PAGE - 1) & ~(PAGE - 1), PAGE)
                 if p not in self.m._perm}
        for p in range(a & ~(PAGE - 1), (a + n + PAGE - 1) & ~(PAGE - 1), PAGE):
            if p in self.m._perm and p not in pages and self.m._perm[p] != UC_PROT_READ | UC_PROT_EXEC:
                raise refuse("module_alloc", ENOMEM, f"no free memory next to {mod.name} for a trampoline")
            if self.m._in_module(p) is not None:
                raise refuse("module_alloc", ENOMEM, f"no free memory next to {mod.name} for a trampoline")
        if pages:
            self.m._map_pages(pages)
            self._regions = None
        self._near[key] = a + n
        return a

    def read(self, addr: int, n: int) -> bytes:
        return bytes(self.uc.mem_read(addr, n))

    def read_original(self, addr: int, n: int) -> bytes:
        """Memory as the code is without armed kprobe breakpoints (for decoding prologues)."""
        out = bytearray(self.read(addr, n))
        for p in self.probes:
            kp = getattr(p, "kp", p)
            if getattr(kp, "enabled", False) and hasattr(kp, "orig") and addr < kp.addr + kp.size and kp.addr < addr + n:
                for i, b in enumerate(kp.orig):
                    if 0 <= kp.addr + i - addr < n:
                        out[kp.addr + i - addr] = b
        return bytes(out)

    def write_code(self, addr: int, data: bytes) -> None:
        """Patch text as __patch_text does, and drop every cached translation of it."""
        if self._batch:
            # Unicorn writes read-only memory by marking its region writable and back (a memory
            # map rebuild each time): in a batch each region is made writable once, as a whole
            # (no split), and restored at the end
            self._writable(addr)
        self.uc.mem_write(addr, data)
        self.uc.ctl_remove_cache(addr & ~3, (addr + len(data) + 3) & ~3)
        if self._batch:
            self._dirty = True
        else:
            self.m.clock.clear_cache()

    def _writable(self, addr: int) -> None:
        if self._regions is None:
            regs = sorted(self.uc.mem_regions())
            self._regions = ([r[0] for r in regs], regs)
        starts, regs = self._regions
        i = bisect.bisect_right(starts, addr) - 1
        if i < 0 or addr > regs[i][1]:
            return
        begin, end, prot = regs[i]
        key = (begin, end - begin + 1)
        if not prot & UC_PROT_WRITE and key not in self._unprotected:
            self.uc.mem_protect(begin, key[1], prot | UC_PROT_WRITE)
            self._unprotected[key] = prot

    @contextlib.contextmanager
    def batch(self):
        """Many patches at once: the clock's block cache is cleared once at the end."""
        self._batch += 1
        try:
            yield
        finally:
            self._batch -= 1
            if not self._batch:
                for (begin, size), prot in self._unprotected.items():
                    self.uc.mem_protect(begin, size, prot)
                self._unprotected.clear()
                self._regions = None
                if self._dirty:
                    self._dirty = False
                    self.m.clock.clear_cache()

    def trap(self, addr: int, thumb: bool, fn) -> None:
        """An undefined instruction at addr whose hit runs fn(machine, addr)."""
        self.write_code(addr, THUMB_TRAP if thumb else ARM_TRAP)
        self.m.breakpoints[addr] = fn

    def stub(self, thumb: bool, fn, addr: int | None = None) -> int:
        """A function whose body is a trap: fn(regs) runs, then it returns to lr."""
        a = addr if addr is not None else self.alloc_text(4)

        def on_stub(machine, at, _fn=fn):
            _fn(machine)
            lr = self.uc.reg_read(A.UC_ARM_REG_LR)
            self.set_pc(lr)
        self.trap(a, thumb, on_stub)
        return a | (1 if thumb else 0)

    def set_pc(self, target: int) -> None:
        """Continue at target; bit 0 selects the instruction set (BX semantics). Unicorn's PC
        write takes the Thumb bit from bit 0 of the value."""
        self.uc.reg_write(A.UC_ARM_REG_PC, target & 0xFFFFFFFF)

    # --- functions ---------------------------------------------------------------------------
    def function(self, name: str) -> Function:
        """A function by name: `FUNC` (modules first, newest first, then the kernel image) or
        `MODULE:FUNC` (`vmlinux:FUNC` for the image)."""
        modname = None
        if ":" in name:
            modname, name = name.split(":", 1)
        if modname != "vmlinux":
            for mod in reversed(self.m.modules):
                if modname is not None and mod.name != modname:
                    continue
                for s in mod.symbols:
                    if s.name == name and s.stype == "func" and s.section and mod.region_of(s.addr & ~1):
                        return Function(mod, name, s.addr & ~1, s.size, bool(s.addr & 1))
        if self.ktext is not None and modname in (None, "vmlinux"):
            f = self.ktext.function(name)
            if f is not None:
                return f
        where = ", ".join(m.name for m in self.m.modules) + (" and the kernel image" if self.ktext else "")
        if modname is not None and modname != "vmlinux" and not any(m.name == modname for m in self.m.modules):
            raise refuse("register_kprobe", ENOENT, f"no module {modname!r} loaded ({where})")
        raise refuse("register_kprobe", ENOENT, f"no function {name!r} in "
                     f"{modname if modname else where}")

    def resolve(self, spec: str) -> tuple[Function | None, int]:
        """A probe point as kprobe_events writes it: `FUNC`, `FUNC+OFF`, `MODULE:FUNC[+OFF]` or an
        address (`0xc05d4c44`): (function or None, address)."""
        spec = spec.strip()
        try:
            if spec.lower().startswith("0x"):
                a = int(spec, 16)
                return self.function_at(a), a
            name, _, off = spec.partition("+")
            o = int(off, 0) if off else 0
        except ValueError:
            raise refuse("register_kprobe", EINVAL, f"{spec!r}: expected FUNC[+OFF], MODULE:FUNC[+OFF] or 0xADDR")
        f = self.function(name)
        return f, f.start + o

    def function_names(self, mod, start: int) -> list[str]:
        idx = self._names_index.get(id(mod))
        if idx is None:
            idx = self._names_index[id(mod)] = {}
            for s in mod.symbols:
                if s.stype == "func" and s.section:
                    idx.setdefault(s.addr & ~1, []).append(s.name)
        return idx.get(start, [])

    def owner(self, addr: int):
        """Machine._in_module through a sorted index of live regions (rebuilt when they change);
        the KernelText for the image's text."""
        mod = self._module_owner(addr)
        if mod is None and self.ktext is not None and self.ktext.contains(addr):
            return self.ktext
        return mod

    def _module_owner(self, addr: int):
        key = (len(self.m.modules), len(self.m._init_freed))
        if self._owner_key != key:
            regs = sorted((r.base, r.end, mod) for mod in self.m.modules for r in self.m._live_regions(mod) if r.size)
            self._owner_idx = ([r[0] for r in regs], regs)
            self._owner_key = key
        starts, regs = self._owner_idx
        i = bisect.bisect_right(starts, addr) - 1
        return regs[i][2] if i >= 0 and addr < regs[i][1] else None

    def kallsyms_places(self, addr: int) -> bool:
        """kallsyms_lookup_size_offset finds a symbol for addr: the Image's text, init text or the
        vectors page (is_ksym_addr without CONFIG_KALLSYMS_ALL), or a live module allocation
        (module_address_lookup); register_kprobe elsewhere is -ENOENT."""
        if self._module_owner(addr) is not None:
            return True
        return self.ktext is not None and self.ktext.kallsyms_places(addr)

    def jump_label_site(self, mod, addr: int) -> bool:
        """jump_label_text_reserved(addr, addr) for module text: a live module's __jump_table entry
        (not an init one: __jump_label_mod_text_reserved counts those only while the module is
        COMING) whose code covers addr. The table is the one the loader sorted (Finalized)."""
        if mod is self.ktext:
            return self.ktext.is_jump_label_site(addr)
        sites = self._jump_sites.get(id(mod))
        if sites is None:
            fin = getattr(mod, "finalized", None)
            lo, hi = fin.jump_table if fin is not None else (0, 0)
            words = struct.unpack(f"<{(hi - lo) // 4}I", self.read(lo, hi - lo)) if hi > lo else ()
            sites = self._jump_sites[id(mod)] = {words[i] for i in range(0, len(words) - 2, 3)
                                                 if not words[i + 2] & JUMP_ENTRY_INIT}
        return (addr & ~3) in sites

    def function_at(self, addr: int) -> Function | None:
        """The function containing addr (the latest-starting one), from a per-module index."""
        mod = self.owner(addr)
        if mod is None:
            return None
        if mod is self.ktext:
            return mod.function_at(addr)
        idx = self._func_index.get(id(mod))
        if idx is None:
            funcs = sorted(((s.addr & ~1), -i, s) for i, s in enumerate(mod.symbols)
                           if s.stype == "func" and s.section and mod.region_of(s.addr & ~1))
            idx = self._func_index[id(mod)] = ([f[0] for f in funcs], [f[2] for f in funcs])
        starts, syms = idx
        i = bisect.bisect_right(starts, addr) - 1
        while i >= 0 and addr - starts[i] < 0x100000:
            s = syms[i]
            if addr < starts[i] + max(s.size, 1):
                return Function(mod, s.name, starts[i], s.size, bool(s.addr & 1))
            i -= 1
        return None

    def hit(self, kind: str, func: str, addr: int, ret: int | None = None, args=None, caller=None) -> ProbeHit:
        uc = self.uc
        if args is None:
            args = list(uc.reg_read_batch([A.UC_ARM_REG_R0, A.UC_ARM_REG_R1, A.UC_ARM_REG_R2, A.UC_ARM_REG_R3]))
        if caller is None:
            caller = uc.reg_read(A.UC_ARM_REG_LR)
        h = ProbeHit(kind, func, addr, args, caller, self.m.clock.ns(), self.m.clock.insns, ret, self.m, self)
        if self.record:
            self.hits.append(h)
        if self.on_hit is not None:
            self.on_hit(h)
        return h

    def charge(self, step: str) -> None:
        """A kernel step armload runs in Python: its modelled instructions (cost.py)."""
        self.model_insns += self.cost[step]
        self.model_counts[step] = self.model_counts.get(step, 0) + 1

    def alloc_kernel_near(self, n: int) -> int:
        """get_optinsn_slot for kernel text: module_alloc memory, within a branch of the Image
        (the top of the module area, growing down)."""
        a = getattr(self, "_kernel_near", None)
        if a is None:
            a = self.m.config.page_offset - 0x100000
        a = (a + 15) & ~15
        pages = {pg: UC_PROT_READ | UC_PROT_EXEC for pg in range(a & ~(PAGE - 1), (a + n + PAGE - 1) & ~(PAGE - 1), PAGE)
                 if pg not in self.m._perm}
        for pg in range(a & ~(PAGE - 1), (a + n + PAGE - 1) & ~(PAGE - 1), PAGE):
            if pg not in pages and self.m._perm.get(pg) != UC_PROT_READ | UC_PROT_EXEC:
                raise refuse("get_optinsn_slot", ENOMEM, "no free memory near the kernel text")
        if pages:
            self.m._map_pages(pages)
            self._regions = None
        self._kernel_near = a + n
        return a

    def run_optimizer(self) -> int:
        """kprobe_optimizer, as if OPTIMIZE_DELAY had passed: every ready kprobe becomes a branch
        to its detour buffer. Returns how many were optimized."""
        from .kprobe import Kprobe
        n = 0
        with self.batch():
            for p in self.table.all():
                if isinstance(p, Kprobe) and p.try_optimize():
                    n += 1
        return n

    def name_code(self, start: int, size: int, name: str) -> None:
        self.code_names.append((start & ~1, (start & ~1) + size, name))

    def symbolize(self, addr: int) -> str:
        for a, e, name in self.code_names:
            if a <= addr < e:
                return f"{name}+{addr - a:#x}"
        return self.m.symbolize(addr)

    def _caller_sym(self, lr: int) -> str:
        if lr == SENTINEL:
            return "ret_from_initcall (sentinel)"
        a = lr & ~1
        for s, e, name in self.code_names:
            if s <= a < e:
                return f"{name}+{a - s:#x}"
        return self.m.symbolize(a - (2 if lr & 1 else 4)) if a else "?"

    def _kprobe_trap(self, machine, addr: int) -> None:
        """kprobe_handler: get_kprobe through the hash table (and the per-cpu cache), then the probe."""
        kp = self.table.get(addr)
        if kp is None:
            from ..emu.faults import ModelFault
            raise ModelFault(f"kprobe: breakpoint at {addr:#010x} with no kprobe registered", "bug")
        self.charge("kprobe")
        if self._active is not None:          # reenter_kprobe: a probe hit inside a handler
            kp.missed()
            return
        kp.maybe_optimize()                   # the optimizer ran if OPTIMIZE_DELAY passed since arming
        self._active = kp
        try:
            kp.handle()
        finally:
            self._active = None

    def kretprobe_trampoline(self) -> int:
        """__kretprobe_trampoline. With the Image mapped it is the Image's own code, run as
        ordinary instructions (sub sp; push {r0-r11}; mov r0, sp; bl trampoline_handler; mov lr,
        r0; pop {r0-r11}; add sp; mov pc, lr), and only trampoline_handler (the C of
        kretprobe_trampoline_handler) is Python, a trap at its address. Without the Image, a
        trap at a probe-text address stands for the whole trampoline."""
        if self._kretprobe_tramp is None:
            th = bool(self.m.config.thumb2)
            img = self.m.image
            a = self.m.kernel_function("__kretprobe_trampoline") if img is not None else None
            h = img.symbols.get("trampoline_handler") if img is not None else None
            if a is not None and h is not None and not th:
                def on_handler(machine, at):               # r0 = the saved registers (r0-r11)
                    uc = self.uc
                    regs = uc.reg_read(A.UC_ARM_REG_R0)
                    r0 = struct.unpack("<I", self.read(regs, 4))[0]
                    uc.reg_write(A.UC_ARM_REG_R0, self._kretprobe_return(r0))
                    self.set_pc(uc.reg_read(A.UC_ARM_REG_LR))
                self.trap(h & ~1, False, on_handler)
                self._kretprobe_tramp = a & ~1
                return self._kretprobe_tramp
            a = self.alloc_text(4)

            def on_return(machine, at):
                self.set_pc(self._kretprobe_return(self.uc.reg_read(A.UC_ARM_REG_R0)))
            self.trap(a, th, on_return)
            self.name_code(a, 4, "__kretprobe_trampoline")
            self._kretprobe_tramp = a | (1 if th else 0)
        return self._kretprobe_tramp

    def kret_instances(self, task: int | None = None) -> list:
        """The task's kretprobe instances, innermost last (current->kretprobe_instances)."""
        return self._kret_tasks.setdefault(self.m.current if task is None else task, [])

    def _kretprobe_return(self, r0: int) -> int:
        """kretprobe_trampoline_handler: the current task's innermost instance, its handler with
        the return value, the real return address (the instance goes back to its pool)."""
        inst = self.kret_instances()
        if not inst:
            from ..emu.faults import ModelFault
            raise ModelFault("kretprobe trampoline reached with no instance for this task", "bug")
        rp, ret, args = inst.pop()
        self.charge("kretprobe-return")
        return rp.returned(ret, args, r0)

    def _unwind_fixup(self):
        """For the oops unwinder (Machine.unwind_fixup): a frame returning to the trampoline
        returns to its instance's real address, innermost first (kretprobe_find_ret_addr, as
        arch/arm/kernel/stacktrace.c's unwind_frame does)."""
        inst = list(self.kret_instances())
        tramp = (self._kretprobe_tramp or 0) & ~1

        def fix(frame):
            if tramp and (frame.pc & ~1) == tramp and inst:
                frame.regs[15] = inst.pop()[1]
            return frame
        return fix

    # --- probe kinds ---------------------------------------------------------------------------
    def _handler(self, h):
        """A handler: a Python callable, or the address of emulated ARM/Thumb code called with the
        hit's r0-r3 (m.invoke), as a JIT-ed BPF program would be."""
        if h is None or callable(h):
            return h
        if isinstance(h, int):
            return lambda hit, _code=h: self.m.invoke(_code, hit.args)
        raise TypeError(f"a probe handler is a callable or a code address, not {type(h).__name__}")

    def kprobe(self, target, offset: int = 0, pre=None, post=None, enable: bool = True, addr: int | None = None):
        """register_kprobe on FUNC+offset (target a name, a `resolve` spec or a Function), or on a raw
        `addr`."""
        from .kprobe import Kprobe
        if isinstance(target, str) and addr is None:
            f, a = self.resolve(target)
            if f is None:
                addr = a
            else:
                target, offset = f, a - f.start + offset
        p = Kprobe(self, target, offset, self._handler(pre), self._handler(post), addr=addr)
        p.register()
        if enable:
            p.enable()
        self.probes.append(p)
        return p

    def kretprobe(self, target, handler=None, entry_handler=None, enable: bool = True, maxactive: int = 0):
        from .kretprobe import Kretprobe
        if isinstance(target, str):
            target = self.function(target)
        p = Kretprobe(self, target, self._handler(handler), entry_handler, maxactive)
        p.register()
        if enable:
            p.enable()
        self.probes.append(p)
        return p

    def ftrace_function(self, target, handler=None, enable: bool = True):
        p = self.ftrace.ops(target, self._handler(handler))
        if enable:
            p.enable()
        self.probes.append(p)
        return p

    def bpf_trampoline(self, target, kind: str = "fentry"):
        """fentry/fexit as 32-bit ARM 6.1 has them: refused with -ENOTSUPP (direct.bpf_trampoline)."""
        from .direct import bpf_trampoline
        return bpf_trampoline(self, target, kind)

    def direct(self, target, entry=None, exit=None, enable: bool = True, entry_code: int | None = None):
        """armload's own fentry/fexit-style trampoline: an extension (direct.EXTENSION)."""
        from .direct import DirectTrampoline
        p = DirectTrampoline(self, target, entry, exit, entry_code=entry_code)
        if enable:
            p.enable()
        self.probes.append(p)
        return p

    def patched_sites(self) -> list[dict]:
        """Every site whose bytes differ from the module as loaded (for disasm and verify)."""
        out = self.ftrace.patched_sites()
        for p in self.probes:
            out.extend(p.sites())
        return out

    def verify(self):
        """Branch-verify every patched ftrace site of every module (armload/loader/verify.py)."""
        from ..loader.verify import verify_patched_sites
        res = []
        for mod in self.m.modules:
            sites = [s for s in self.ftrace.call_sites() if s["module"] is mod]
            res.append(verify_patched_sites(mod, sites, self.read))
        return res
