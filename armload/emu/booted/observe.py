"""What a module did inside the booted kernel: which of its instructions ran (--coverage) and
which kernel functions it called, with arguments and return values (--trace).

Both hook only the module's own memory and the entries of the functions it imports, never the
kernel's code at large:
* modmem.ModuleMemory, the one watcher of module memory: every allocation the kernel's
  load_module makes (6.1: core, then init; 6.4+: one per memory type) is known before any
  module code runs in it.
* `BootedCoverage` puts a block counter (emu/coverage.py's BlockCounter: _coverage.c's C hook)
  on each allocation as it is made, and drops its translated blocks (a freed init region may
  have held another module's code). After a load, counting stops on its init allocation (the
  kernel frees it: do_free_init), and the counts stay: init's coverage is recorded before.
  Lines and functions come from the module's DWARF at the kernel's addresses (armload's
  loader places the module where the kernel did).
* `CallTrace` hooks the entry of each kernel function a module imports (its undefined symbols,
  resolved by the kernel's symbol table or an already loaded module's exports) and records a
  call only when LR lies in one of the module's allocations (a call FROM the module); a one-shot
  code hook at that LR, removed when it fires, reads r0 as the return value.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from unicorn import UC_HOOK_CODE
from unicorn import arm_const as A

from ...loader.elf import read_object
from ..coverage import BlockCounter, module_report
from .modmem import Alloc, ModuleMemory

# printk-like functions: the argument index of a format string shown as text
STRING_ARGS = {"_printk": 0, "printk": 0, "__warn_printk": 0, "_dev_info": 1, "_dev_err": 1, "_dev_warn": 1,
               "_dev_notice": 1, "dev_printk": 2, "__dynamic_pr_debug": 1, "panic": 0}


def _init_bases(mod) -> set[int]:
    return {r.base for r in mod.regions if r.init}


class BootedCoverage:
    def __init__(self, bk, allocs: ModuleMemory, *, native: bool | None = None):
        self.bk = bk
        self.allocs = allocs
        self.counter = BlockCounter(bk.m.uc, native=native)
        self.native = self.counter.native
        self.slot: dict[int, int] = {}        # id(Alloc) -> counter slot
        allocs.on_alloc.append(self._hook)

    def _hook(self, a: Alloc) -> None:
        self.slot[id(a)] = self.counter.add(a.base, a.base + a.size)
        self.bk.m.drop_blocks(a.base, a.size)

    def loaded(self, load: int, modules) -> None:
        """After a top-level load: stop counting in the init allocations it made (the kernel frees
        them; a later module may get the same addresses)."""
        init = set().union(*(_init_bases(m) for m in modules)) if modules else set()
        for a in self.allocs.of_load(load):
            if a.base in init and id(a) in self.slot:
                self.counter.stop(self.slot[id(a)])

    def report(self, mod, load: int):
        """ModuleCoverage of `mod`, counted in the allocations of the load that placed it."""
        bases = {r.base for r in mod.regions}
        slots = [self.slot[id(a)] for a in self.allocs.of_load(load) if a.base in bases and id(a) in self.slot]
        counts, sizes = self.counter.blocks(slots)
        return module_report(mod, counts, sizes)


@dataclass
class Call:
    name: str
    args: list[int]
    caller: int                        # LR: the module address the call returns to
    console: int                       # console lines printed before the call
    text: str | None = None            # a format string argument, printk-like functions
    ret: int | None = None             # None: it has not returned (yet)
    depth: int = 0                     # calls from the module pending when it was made
    module: str = ""

    where: str = ""                    # the caller symbolized: `devkit_add+0x28/0x9c [devkit]`

    def to_dict(self) -> dict:
        return {"function": self.name, "args": self.args, "caller": self.caller, "where": self.where,
                "module": self.module, "text": self.text, "ret": self.ret, "console_line": self.console}


@dataclass
class CallTrace:
    bk: object
    allocs: ModuleMemory
    calls: list[Call] = field(default_factory=list)
    hooked: dict[int, str] = field(default_factory=dict)      # entry -> function name
    hooks: list[int] = field(default_factory=list)
    _open: list[Call] = field(default_factory=list)
    traced: set[int] = field(default_factory=set)              # Alloc ids whose calls are recorded
    names: dict[int, str] = field(default_factory=dict)        # Alloc id -> module name (after its load)

    def __post_init__(self):
        self.allocs.on_alloc.append(lambda a: self.traced.add(id(a)))

    def prepare(self, path: str, exports: dict[str, int] | None = None) -> list[str]:
        """Hook the entries of the kernel functions the .ko at `path` imports (before it loads).
        `exports`: already loaded modules' exports (name -> address). Returns the names without
        an address (the kernel will refuse them, or they are data)."""
        obj = read_object(path)
        syms = self.bk.image.symbols
        missing = []
        undef = (obj.symtab["st_shndx"] == 0).nonzero()[0].tolist()
        for name in sorted({obj.sym_names[i] for i in undef if i and obj.sym_names[i]}):
            addr = syms.get(name)
            if addr is None and exports:
                addr = exports.get(name)
            if addr is None:
                missing.append(name)
                continue
            if addr in self.hooked or not self._is_code(addr):
                continue
            self.hooked[addr] = name
            self.hooks.append(self.bk.hook_code(addr, self._entry))
        return missing

    def _is_code(self, addr: int) -> bool:
        img = self.bk.image
        lo, hi = img.base, img.symbols.get("_etext", img.end)
        return lo <= (addr & ~1) < hi or (addr & ~1) >= 0xBF000000

    def _entry(self, uc, addr, size, _):
        lr = uc.reg_read(A.UC_ARM_REG_LR)
        a = self.allocs.owner(lr & ~1)
        if a is None or id(a) not in self.traced:
            return
        name = self.hooked.get(addr)
        if name is None:
            return
        args = [uc.reg_read(r) for r in (A.UC_ARM_REG_R0, A.UC_ARM_REG_R1, A.UC_ARM_REG_R2, A.UC_ARM_REG_R3)]
        c = Call(name, args, lr & ~1, len(self.bk.console), depth=len(self._open))
        i = STRING_ARGS.get(name)
        if i is not None and args[i]:
            try:
                c.text = self.bk.cstr(args[i], 200)
            except Exception:
                c.text = None
        self.calls.append(c)
        self._open.append(c)
        c._a = a
        sp = uc.reg_read(A.UC_ARM_REG_SP)

        def ret(uc2, addr2, size2, _u, c=c, sp=sp):
            if uc2.reg_read(A.UC_ARM_REG_SP) != sp:      # the same address reached from a deeper call
                return
            c.ret = uc2.reg_read(A.UC_ARM_REG_R0)
            if c in self._open:
                self._open.remove(c)
            self.bk.unhook(c._h)
        c._h = self.bk.hook_code(lr & ~1, ret)

    def finish(self, modules) -> None:
        """Name each call's module (armload's modules, at the kernel's addresses)."""
        for c in self.calls:
            if not c.module:
                m = next((m for m in modules if m.region_of(c.caller) is not None), None)
                c.module = m.name if m is not None else ""
                c.where = (m.symbolize(c.caller) if m is not None else None) or f"{c.caller:#x}"

    def lines(self, modules=()) -> list[tuple[int, str]]:
        """(console position, line) of each call: `name(r0, r1, r2, r3) -> r0=VALUE  [from caller]` (r0 as the
        function left it: the return value, or what a void function left there)."""
        out = []
        self.finish(modules)
        for c in self.calls:
            where = c.where
            args = ", ".join(f"{v:#x}" for v in c.args)
            text = f" {c.text!r}" if c.text is not None else ""
            ret = "did not return" if c.ret is None else f"-> r0={_ret(c.ret)}"
            out.append((c.console, f"armload: trace: {'  ' * c.depth}{c.name}({args}){text} {ret}  [from {where}]"))
        return out

    def remove(self) -> None:
        for h in self.hooks:
            self.bk.unhook(h)
        self.hooks = []


def _ret(v: int) -> str:
    s = v - (1 << 32) if v & 0x80000000 else v
    return f"{s}" if -4096 < s < 4096 else f"{v:#x}"


class Observation:
    """Coverage and/or the call trace of the modules a BootedRun loads: create it before the
    first load, load through `load()` (or call `before(path)` / `after(result)` around
    `run.load`). The pytest ModuleHandle and `armload run` use it."""

    def __init__(self, run, *, coverage: bool = False, trace: bool = False, native: bool | None = None):
        self.run = run
        self.allocs = ModuleMemory.of(run.bk)
        self.cov = BootedCoverage(run.bk, self.allocs, native=native) if coverage else None
        self.trace = CallTrace(run.bk, self.allocs) if trace else None
        self.loads: list[tuple[str, int, object]] = []   # (module name, load serial, armload's LoadedModule)
        self.unhooked: dict[str, list[str]] = {}     # path -> imports without a code address

    def before(self, path: str) -> None:
        if self.trace is not None:
            exports = {s.name: s.addr for m in self.run.session.modules for s in m.symbols
                       if s.bind != "local" and s.stype == "func"}
            self.unhooked[path] = self.trace.prepare(path, exports)

    def after(self, r) -> None:
        load = self.allocs.load
        self.allocs.load += 1
        mod = next((m for m in reversed(self.run.session.modules) if m.name == r.name), None)
        self.loads.append((r.name, load, mod))       # kept: an unload takes it out of the session
        if self.cov is not None:
            self.cov.loaded(load, self.run.session.modules)
        if self.trace is not None:
            self.trace.finish(self.run.session.modules)

    @property
    def modules(self) -> list:
        """armload's modules of every load (an unloaded one too), then the session's others."""
        mine = [m for _, _, m in self.loads if m is not None]
        return mine + [m for m in self.run.session.modules if all(m is not x for x in mine)]

    def load(self, path: str, params: str = "", **kw):
        self.before(path)
        r = self.run.load(path, params, **kw)
        self.after(r)
        return r

    def coverage(self, name: str | None = None):
        """ModuleCoverage of a loaded module (default: every module loaded, in order, as a list
        when name is None). Counts so far: init, calls, exit, deferred work."""
        if self.cov is None:
            raise ValueError("coverage was not recorded (Observation(run, coverage=True))")
        out = []
        for n, load, mod in self.loads:
            if name is not None and n.replace("-", "_") != name.replace("-", "_"):
                continue
            out.append((n, self.cov.report(mod, load) if mod is not None else None))
        return out

    @property
    def calls(self) -> list[Call]:
        if self.trace is None:
            raise ValueError("calls were not traced (Observation(run, trace=True))")
        self.trace.finish(self.modules)
        return self.trace.calls

    def called(self, name: str) -> list[Call]:
        return [c for c in self.calls if c.name == name]
