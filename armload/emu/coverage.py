"""Which module instructions ran: a UC_HOOK_BLOCK restricted to each module's executable sections.

Unicorn calls the hook once per executed translation block whose start lies in [begin, end];
every instruction of a block counts as run (a fault mid-block over-counts the rest of that one
block). Kernel code is not hooked, so kernel-heavy runs pay nothing. Instructions are the
capstone-decoded ones of the module's text (ARM or Thumb), so totals are exact instruction
counts, not bytes.

The lcov tracefile (geninfo's format: SF/FN/FNDA/FNF/FNH/DA/LF/LH) needs DWARF: lines come from
the module's .debug_line (a line is hit when one of its statement addresses ran; its count is the
largest), functions from its DW_TAG_subprogram ranges (hit count = runs of the entry).
"""
from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass, field

from unicorn import UC_HOOK_BLOCK

SHF_EXECINSTR = 0x4
_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_coverage.c")
class _Cov(ctypes.Structure):
    _fields_ = [("base", ctypes.c_uint64), ("n", ctypes.c_uint64),
                ("count", ctypes.POINTER(ctypes.c_uint32)), ("size", ctypes.POINTER(ctypes.c_uint32))]


def _native_lib():
    """The compiled block hook (emu/native.helper), or None."""
    from .native import helper
    return helper(_SRC, "coverage", None)


@dataclass
class ModuleCoverage:
    name: str
    path: str
    instructions: int = 0            # decoded instructions in the module's text
    ran: int = 0                     # of them, executed at least once
    lines_found: int = 0
    lines_hit: int = 0
    functions_found: int = 0
    functions_hit: int = 0
    has_dwarf: bool = False
    records: list[str] = field(default_factory=list)     # lcov lines

    def summary(self) -> str:
        s = (f"coverage: {self.name}: {self.ran}/{self.instructions} instructions "
             f"({_pct(self.ran, self.instructions)})")
        if self.has_dwarf:
            s += (f", {self.lines_hit}/{self.lines_found} lines ({_pct(self.lines_hit, self.lines_found)}), "
                  f"{self.functions_hit}/{self.functions_found} functions")
        else:
            s += " (no DWARF: no line or function coverage; use the unstripped .ko)"
        return s

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "records"}


def _pct(a, b) -> str:
    return f"{100.0 * a / b:.1f}%" if b else "-"


class BlockCounter:
    """Counts executed translation blocks over address ranges ("slots"): the C hook of
    _coverage.c when it builds, else the same hook in Python. Counts stay after a slot's hook
    is removed (init text: counted while it runs, kept after the kernel frees it)."""

    def __init__(self, uc, *, native: bool | None = None):
        self.uc = uc
        lib = _native_lib() if native in (None, True) else None
        self.lib = lib
        self.native = lib is not None
        self.slots: list[dict] = []             # base, end, hook, and counts (Python) or arrays (C)

    def add(self, begin: int, end: int) -> int:
        """Count blocks starting in [begin, end); returns the slot."""
        slot = {"base": begin, "end": end}
        if self.lib is None:
            counts, sizes = {}, {}

            def on_block(uc, address, size, _user):
                c = counts.get(address)
                counts[address] = 1 if c is None else c + 1
                sizes[address] = size
            slot.update(counts=counts, sizes=sizes, cb=on_block)
            slot["hook"] = self.uc.hook_add(UC_HOOK_BLOCK, on_block, begin=begin, end=end - 1)
        else:
            n = (end - begin + 1) // 2
            cnt, sz = (ctypes.c_uint32 * n)(), (ctypes.c_uint32 * n)()
            c = _Cov(begin, n, ctypes.cast(cnt, ctypes.POINTER(ctypes.c_uint32)),
                     ctypes.cast(sz, ctypes.POINTER(ctypes.c_uint32)))
            slot.update(cov=c, cnt=cnt, sz=sz)
            slot["hook"] = _add_native_hook(self.uc, self.lib, c, begin, end - 1)
        self.slots.append(slot)
        return len(self.slots) - 1

    def stop(self, i: int) -> None:
        """No more counting in slot i (its counts stay)."""
        slot = self.slots[i]
        if slot.get("hook") is not None:
            _hook_del(self.uc, slot["hook"], "cov" in slot)
            slot["hook"] = None

    def detach(self) -> None:
        for i in range(len(self.slots)):
            self.stop(i)

    def blocks(self, slots=None) -> tuple[dict[int, int], dict[int, int]]:
        """(block start -> times run, block start -> size) over the given slots (default all)."""
        counts: dict[int, int] = {}
        sizes: dict[int, int] = {}
        for i in range(len(self.slots)) if slots is None else slots:
            slot = self.slots[i]
            if "cov" in slot:
                base = slot["base"]
                for j, v in enumerate(slot["cnt"]):
                    if v:
                        counts[base + 2 * j] = counts.get(base + 2 * j, 0) + v
                        sizes[base + 2 * j] = slot["sz"][j]
            else:
                for a, v in slot["counts"].items():
                    counts[a] = counts.get(a, 0) + v
                sizes.update(slot["sizes"])
        return counts, sizes


def insn_counts(m, counts: dict[int, int], sizes: dict[int, int]) -> tuple[dict[int, int], list[int]]:
    """instruction address -> times run; and every instruction address of the module's text
    (capstone over the loaded text; a block's instructions all count as run)."""
    import bisect
    import capstone
    mode = capstone.CS_MODE_THUMB if m.thumb or m.config.thumb2 else capstone.CS_MODE_ARM
    cs = capstone.Cs(capstone.CS_ARCH_ARM, mode)
    cs.skipdata = True
    insns: list[int] = []
    for s in m.sections:
        if s.flags & SHF_EXECINSTR and s.size and m.region_of(s.addr) is not None:
            insns.extend(a for a, _size, mn, _ops in cs.disasm_lite(m.read(s.addr, s.size), s.addr)
                         if mn != ".byte" and mn != ".short" and mn != ".long")
    insns.sort()
    ran: dict[int, int] = {}
    for start, n in counts.items():
        end = start + sizes[start]
        i = bisect.bisect_left(insns, start)
        while i < len(insns) and insns[i] < end:
            a = insns[i]
            ran[a] = ran.get(a, 0) + n
            i += 1
    return ran, insns


def module_report(m, counts: dict[int, int], sizes: dict[int, int]) -> ModuleCoverage:
    """A module's coverage from block counts at its load addresses: instructions, and lcov
    lines/functions from its DWARF."""
    from .debuginfo import line_table
    ran, insns = insn_counts(m, counts, sizes)
    mc = ModuleCoverage(m.name, m.path, len(insns), len(ran))
    lt = line_table(m)
    if lt:
        mc.has_dwarf = True
        _lcov(mc, lt, ran)
    return mc


def _lcov(mc: ModuleCoverage, lt, ran: dict[int, int]) -> None:
    by_file: dict[str, dict[int, int]] = {}
    for (f, line), addrs in lt.statements().items():
        by_file.setdefault(f, {})[line] = max(ran.get(a, 0) for a in addrs)
    funcs: dict[str, list] = {}
    for fn in lt.functions:
        funcs.setdefault(fn.file, []).append(fn)
    recs = []
    for f in sorted(set(by_file) | set(funcs)):
        recs += ["TN:", f"SF:{f}"]
        fns = sorted(funcs.get(f, []), key=lambda x: (x.line, x.name))
        for fn in fns:
            recs.append(f"FN:{fn.line},{fn.name}")
        hit_fns = 0
        for fn in fns:
            n = ran.get(fn.low & ~1, 0)
            hit_fns += n > 0
            recs.append(f"FNDA:{n},{fn.name}")
        recs += [f"FNF:{len(fns)}", f"FNH:{hit_fns}"]
        lines = by_file.get(f, {})
        for line in sorted(lines):
            recs.append(f"DA:{line},{lines[line]}")
        hit = sum(1 for v in lines.values() if v)
        recs += [f"LF:{len(lines)}", f"LH:{hit}", "end_of_record"]
        mc.lines_found += len(lines)
        mc.lines_hit += hit
        mc.functions_found += len(fns)
        mc.functions_hit += hit_fns
    mc.records = recs


def _add_native_hook(uc, lib, cov, begin: int, end: int) -> int:
    from unicorn.unicorn_py3.unicorn import uc_hook_h, uclib
    h = uc_hook_h()
    cb = ctypes.cast(lib.armload_cov_block, ctypes.c_void_p)
    err = uclib.uc_hook_add(uc._uch, ctypes.byref(h), UC_HOOK_BLOCK, cb,
                            ctypes.cast(ctypes.addressof(cov), ctypes.c_void_p),
                            ctypes.c_uint64(begin), ctypes.c_uint64(end))
    if err:
        raise RuntimeError(f"uc_hook_add failed ({err})")
    return h.value


def _hook_del(uc, h, native: bool) -> None:
    if not native:
        uc.hook_del(h)
        return
    from unicorn.unicorn_py3.unicorn import uc_hook_h, uclib
    uclib.uc_hook_del(uc._uch, uc_hook_h(h))


def write_lcov(reports: list[ModuleCoverage], path: str) -> None:
    with open(path, "w") as f:
        for r in reports:
            if r.records:
                f.write("\n".join(r.records) + "\n")

