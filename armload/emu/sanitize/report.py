"""Reports in the kernel's own formats (KASAN, kmemleak, lockdep), and the stacks they carry.

A stack is captured raw inside the hook (the 16 registers and the thread's stack above sp) and
unwound only when a report is printed, with the EHABI tables (emu/unwind.py): the kernel's, found
in the Image, and each module's, from armload's own image of it (its init sections stay readable
there after the kernel freed them). Module frames are decoded to file:line from the module's
DWARF (emu/debuginfo.py) when it has one (Debian's modules are --strip-debug'ged: no line).
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field

from unicorn import arm_const as A

from .. import unwind

THREAD_SIZE = 8192            # arch/arm/include/asm/thread_info.h (THREAD_SIZE_ORDER 1)
MAX_FRAMES = 16
_REGS = [getattr(A, f"UC_ARM_REG_R{i}") for i in range(13)] + [A.UC_ARM_REG_SP, A.UC_ARM_REG_LR,
                                                                 A.UC_ARM_REG_PC]
RULE = "=" * 66

# report classes (`--sanitize` names) -> the detector that makes them
CLASSES = ("heap", "stack", "leak", "locks")


@dataclass
class Stack:
    regs: list[int]
    base: int                     # address of stack[0] (sp)
    stack: bytes
    task: str
    ret0: bool = False            # the first pc is a return address (captured at a callee's entry)
    callee: int = 0               # the function entered, printed first (not unwound: its entry is
                                  # not always where its unwind entry starts, e.g. kfree's)

    def read32(self, live):
        def r(a: int) -> int:
            o = a - self.base
            if 0 <= o <= len(self.stack) - 4:
                return struct.unpack_from("<I", self.stack, o)[0]
            return live(a)
        return r


def capture(uc, read, task: str, pc: int | None = None, lr_as_pc: bool = False, entry: bool = False) -> Stack:
    """The registers and the stack from sp to the top of its THREAD_SIZE block. `lr_as_pc`: at a
    function's entry, the frame to start from is the caller's (pc = lr). `read(va, n)`: the
    guest's virtual memory (Machine.read)."""
    regs = [uc.reg_read(r) for r in _REGS]
    callee = 0
    if entry:                     # at a function's entry: unwind from its caller, print it first
        callee, lr_as_pc = regs[15], True
    if pc is not None:
        regs[15] = pc
    if lr_as_pc:
        regs[15] = regs[14]
    sp = regs[13]
    top = (sp | (THREAD_SIZE - 1)) + 1
    try:
        data = read(sp, min(top - sp, THREAD_SIZE))
    except Exception:                   # an unmapped stack page: the unwinder reads live memory
        data = b""
    return Stack(regs, sp, data, task, lr_as_pc, callee)


class Symbolizer:
    """Addresses -> `name+0xoff/0xsize [mod]` and, where DWARF says, (file, line)."""

    def __init__(self, bk, modules_fn):
        self.bk = bk
        self.modules_fn = modules_fn     # () -> armload's LoadedModules (their images and symbols)
        self._tables: dict[str, object] = {}

    def module_of(self, addr: int):
        for m in reversed(self.modules_fn()):     # the latest: an earlier module's freed init may be reused
            if m.region_of(addr) is not None:
                return m
        return None

    def name(self, addr: int) -> str:
        m = self.module_of(addr)
        if m is not None:
            return m.symbolize(addr) or f"{addr:#x} [{m.name}]"
        t = self.bk.image.kallsyms
        s = t.addr_to_name(addr) if t is not None else None
        return s or f"{addr:#x}"

    def line(self, addr: int) -> str:
        m = self.module_of(addr)
        if m is None:
            return ""
        from ..debuginfo import line_table
        hit = line_table(m).lookup(addr)
        return f"{hit[0]}:{hit[1]}" if hit else ""

    def _table(self, addr: int):
        m = self.module_of(addr)
        if m is None:
            return unwind.kernel_table(self.bk.image)
        if m.name not in self._tables:
            self._tables[m.name] = unwind.module_table(_ModuleMemory(m), m)
        return self._tables[m.name]

    def frames(self, st: Stack) -> list[int]:
        """Return addresses, innermost first (the first is the pc itself)."""
        read32 = st.read32(self.bk.u32)
        frame = unwind.Frame(list(st.regs), set(range(16)))
        out = [frame.pc & ~1]
        for _ in range(MAX_FRAMES):
            table = self._table(frame.pc & ~1)
            if table is None:
                break
            try:
                frame = unwind.unwind_frame(frame, table, read32, at_entry_ok=len(out) == 1)
            except (unwind.UnwindError, Exception):
                break
            pc = frame.pc & ~1
            if pc < 0xBF000000 or pc == self.bk.trap:
                break
            out.append(pc)
        return out

    def trace(self, st: Stack) -> list[str]:
        out = [f" {self.name(st.callee)}"] if st.callee else []
        for i, pc in enumerate(self.frames(st)):
            where = self.line(pc - 4 if i or st.ret0 else pc)
            out.append(f" {self.name(pc)}" + (f" ({where})" if where else ""))
        return out


class _ModuleMemory:
    """emu/unwind.module_table reads `machine.read`: armload's image of the module."""

    def __init__(self, m):
        self.m = m

    def read(self, addr: int, n: int) -> bytes:
        return self.m.read(addr, n)


_LATE = re.compile(r"\{(sym|lock):([0-9a-f]+)\}")


def sym_at(addr: int) -> str:
    """`addr` named when the report is printed: a module under load is known to the symbolizer
    only once armload's image of it is made (after init), its locks and call sites too."""
    return f"{{sym:{addr:x}}}"


def lock_at(addr: int) -> str:
    """A lock named when the report is printed: its symbol when it starts one, else its address."""
    return f"{{lock:{addr:x}}}"


def named(text: str, sym) -> str:
    """`text` with its sym_at/lock_at placeholders resolved by the Symbolizer `sym`."""
    def one(m):
        a = int(m.group(2), 16)
        s = sym.name(a)
        if m.group(1) == "lock":
            return s.split("+")[0] if "+0x0/" in s else f"{a:#x}"
        return s
    return _LATE.sub(one, text)


@dataclass
class Report:
    cls: str                      # heap | stack | leak | locks
    kind: str                     # slab-out-of-bounds, use-after-free, double-free, leak, sleep, ...
    module: str
    title: str                    # the kernel's first line
    body: list[str] = field(default_factory=list)     # lines after the title, before the stacks
    stacks: list[tuple[str, Stack]] = field(default_factory=list)   # (heading, stack)
    tail: list[str] = field(default_factory=list)
    site: int = 0                 # the module address the report is about (its first module frame)
    where: str = ""               # file:line of `site`, filled when formatted
    function: str = ""
    lines: list[str] = field(default_factory=list)    # the formatted report
    title_at: int = 0             # the address `{at}` in the title names (symbolized when printed)
    site_from: int = 0            # the stack whose first module frame is the report's site
    _ret: bool = False            # `site` is a return address (its line is the call's: site - 4)

    def format(self, sym: Symbolizer) -> list[str]:
        if self.lines:
            return self.lines
        kmemleak = self.cls == "leak"
        out = [] if kmemleak else [RULE]
        if "{at}" in self.title:
            self.title = self.title.replace("{at}", sym.name(self.title_at))
        self.title = named(self.title, sym)
        out.append(self.title)
        out += [named(b, sym) for b in self.body]
        for k, (heading, st) in enumerate(self.stacks):
            heading = named(heading, sym)
            tr = sym.trace(st)
            if not self.site and k >= self.site_from:
                for i, pc in enumerate(sym.frames(st)):
                    if sym.module_of(pc) is not None:
                        self.site, self._ret = pc, i > 0 or st.ret0
                        break
            if heading:
                out += ["", heading] if not kmemleak else [heading]
            out += tr if not kmemleak else ["    " + t.strip() for t in tr]
        out += self.tail
        if not kmemleak:
            out.append(RULE)
        if self.site:
            self.function = sym.name(self.site)
            self.where = sym.line(self.site - 4 if self._ret else self.site)
        self.lines = out
        return out

    def to_dict(self) -> dict:
        return {"class": self.cls, "kind": self.kind, "module": self.module, "title": self.title,
                "function": self.function, "line": self.where, "report": self.lines}
