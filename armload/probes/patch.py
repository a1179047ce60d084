"""The words the 32-bit ARM 6.1 kernel writes into a loaded module's text when a probe is armed,
for `armload disasm --patched --probe`: nothing runs, the loaded image is patched as the kernel
would patch it.

* ftrace:FUNC / graph:FUNC: ftrace_make_call turns FUNC's mcount site (the NOP ftrace_module_init
  left, loader/finalize.py) into `bl ftrace_caller`, through the module's fixed FTRACE_ADDR PLT
  entry when ftrace_caller is out of `bl` range (arch/arm/kernel/ftrace.c ftrace_call_replace,
  get_module_plt). function_graph goes through the same site (ftrace_graph_call is patched in
  ftrace_caller itself, in kernel text).
* kprobe:FUNC[+OFF] / kretprobe:FUNC: arm_kprobe writes KPROBE_ARM_BREAKPOINT_INSTRUCTION with the
  probed instruction's condition (Thumb: the 16- or 32-bit breakpoint), after the checks
  register_kprobe makes on module text: an ftrace location is -EINVAL (ARM has no
  KPROBES_ON_FTRACE), so is a jump label site (jump_label_text_reserved) and an instruction the
  decode tables reject (probes/insn.py, checked against the kernel's own register_kprobe by
  `make probes-agree`). A kretprobe is a kprobe on the function's entry.

What the booted kernel does at run time is `armload run --probe` (probes/booted.py).
"""
from __future__ import annotations

import dataclasses
import struct

from . import insn as I
from .base import EINVAL, ENOENT, EILSEQ, ProbeError, refuse

KINDS = ("kprobe", "kretprobe", "ftrace", "graph")
JUMP_ENTRY_INIT = 2                    # include/linux/jump_label.h: bit 1 of the key word
NOT_ON_ARM32 = ("--probe {kind}:{func}: 32-bit ARM 6.1 has no BPF trampoline (the Image's weak "
                "arch_prepare_bpf_trampoline returns -ENOTSUPP, 524)")


def _functions(m):
    """(start, symbol) of every function of the module, by start (the symbol table's order within one)."""
    return sorted((((s.addr & ~1), s) for s in m.symbols
                   if s.stype == "func" and s.section and m.region_of(s.addr & ~1)), key=lambda t: t[0])


def function(m, name: str):
    """(start, symbol) of module function `name` (MODULE:FUNC accepted for this module)."""
    mod, sep, fn = name.rpartition(":")
    if sep and mod != m.name:
        raise refuse("register_kprobe", ENOENT, f"no module {mod!r} shown (disasm shows {m.name})")
    for start, s in _functions(m):
        if s.name == fn:
            return start, s
    raise refuse("register_kprobe", ENOENT, f"no function {fn!r} in {m.name}")


def mcount_sites(m) -> set[int]:
    fin = getattr(m, "finalized", None)
    return set(fin.ftrace_nops) if fin is not None else set()


def jump_sites(m) -> set[int]:
    fin = getattr(m, "finalized", None)
    lo, hi = fin.jump_table if fin is not None else (0, 0)
    words = struct.unpack(f"<{(hi - lo) // 4}I", m.read(lo, hi - lo)) if hi > lo else ()
    return {words[i] & ~3 for i in range(0, len(words) - 2, 3) if not words[i + 2] & JUMP_ENTRY_INIT}


def _ftrace_call(m, site: int, thumb: bool, ftrace_addr: int) -> tuple[bytes, str]:
    init = bool((r := m.region_of(site)) and r.init)
    plt = next((e.addr for e in m.plt_entries if e.fixed and e.target == ftrace_addr
                and e.plt == ("init" if init else "core")), None)
    for dest, via in ((ftrace_addr, ""), (plt, " via PLT")):
        if dest is None:
            continue
        op = I.thumb_bl(site, dest) if thumb else I.arm_bl(site, dest & ~1)
        if op is not None:
            return (I.thumb_bytes(op, 4) if thumb else struct.pack("<I", op)), f"ftrace call -> ftrace_caller{via}"
    raise refuse("ftrace_make_call", EINVAL, f"{m.name}: {ftrace_addr:#010x} is out of bl range of {site:#x} "
                 f"and the module has no PLT entry for it")


def _breakpoint(m, kind: str, target: str) -> tuple[int, bytes, str]:
    name, _, off = target.partition("+")
    if name.lower().startswith("0x"):
        a0 = int(name, 16)
        hit = [(st, sym) for st, sym in _functions(m) if st <= a0 < st + max(sym.size, 1)]
        if not hit:
            raise refuse("register_kprobe", ENOENT, f"{a0:#010x} is in no function of {m.name}")
        start, s = hit[-1]
        off = f"{a0 - start + (int(off, 0) if off else 0):#x}"
    else:
        start, s = function(m, name)
    thumb = bool(s.addr & 1)
    a = start + (int(off, 0) if off else 0)
    label = f"{s.name}+{a - start:#x}"
    if not start <= a < start + max(s.size, 1):
        raise refuse("register_kprobe", EINVAL, f"{label}: past the end of {s.name} (disasm patches one function)")
    if a in mcount_sites(m):
        raise refuse("register_kprobe", EINVAL, f"{label}: {a:#010x} is an ftrace location "
                     f"(ARM has no CONFIG_KPROBES_ON_FTRACE)")
    if (a & ~3) in jump_sites(m):
        raise refuse("register_kprobe", EINVAL, f"{label}: {a:#010x} is a jump label site (jump_label_text_reserved)")
    if thumb:
        at = start
        while at < a:
            at += I.thumb_opcode(m.read(at, 4))[1]
        if at != a:
            raise refuse("register_kprobe", EILSEQ, f"{label}: probe point is not an instruction boundary")
        op, size = I.thumb_opcode(m.read(a, 4))
        d = I.decode_thumb(op, size)
        bp = I.thumb_bytes(I.KPROBE_THUMB16_BREAKPOINT_INSTRUCTION, 2) if size == 2 else \
            I.thumb_bytes(I.KPROBE_THUMB32_BREAKPOINT_INSTRUCTION, 4)
    else:
        if a & 3:
            raise refuse("register_kprobe", EINVAL, f"{label}: ARM address not word aligned")
        op, size = I.arm_word(m.read(a, 4)), 4
        d = I.decode_arm(op)
        bp = struct.pack("<I", I.arm_kprobe_breakpoint(op))
    if d.outcome == I.REJECT:
        raise refuse("register_kprobe", EINVAL, f"{label}: instruction {op:0{2 * size}x} ({d.what}) is rejected "
                     f"by the {'Thumb' if thumb else 'ARM'} kprobes decoder")
    return a, bp, f"{kind} breakpoint (was {m.read(a, size).hex()})"


def patched_view(m, kernel, specs):
    """(the module with every probe of `specs` armed, {addr: what was patched}). Without specs:
    the module as loaded, each ftrace NOP marked."""
    parsed = [parse_spec(s) for s in specs]
    regions = [dataclasses.replace(r, data=bytearray(r.data)) for r in m.regions]
    view = dataclasses.replace(m, regions=regions)
    marks = {a: "ftrace nop (add sp, sp, #4)" for a in mcount_sites(m)}
    ftrace_addr = None
    for kind, target in parsed:
        if kind in ("ftrace", "graph"):
            start, s = function(m, target)
            site = next((a for a in sorted(mcount_sites(m)) if start <= a < start + max(s.size, 1)), None)
            if site is None:
                raise refuse("ftrace_set_filter", EINVAL, f"{s.name} has no mcount site (notrace, or built without -pg)")
            if ftrace_addr is None:
                ftrace_addr = _kernel_addr(m, kernel, "ftrace_caller")
            data, what = _ftrace_call(m, site, bool(s.addr & 1), ftrace_addr)
        else:
            site, data, what = _breakpoint(m, kind, target if kind == "kprobe" else target.partition("+")[0])
        _write(view, site, data)
        marks[site] = what if site not in marks or "nop" in marks[site] else marks[site] + "; " + what
    return view, marks


def _kernel_addr(m, kernel, name: str) -> int:
    for e in m.plt_entries:
        if e.fixed and e.symbol == name:
            return e.target
    from ..kernel.provider import Export
    a = kernel.address_of(kernel.find_export(name) or Export(name=name, addr=None), "func")[0] if kernel else None
    if a is None:
        raise ProbeError(f"{name}: no address in the given kernel files (give --kernel vmlinuz)", errno=-ENOENT)
    return a


def _write(view, addr: int, data: bytes) -> None:
    r = view.region_of(addr)
    r.data[addr - r.base:addr - r.base + len(data)] = data


def parse_spec(spec: str) -> tuple[str, str]:
    kind, sep, rest = spec.partition(":")
    if kind in ("fentry", "fexit") and rest:
        raise ProbeError(NOT_ON_ARM32.format(kind=kind, func=rest), errno=-524)
    if not sep or kind not in KINDS or not rest:
        raise ProbeError(f"--probe {spec!r}: expected KIND:FUNC[+OFF] (or KIND:MODULE:FUNC, kprobe:0xADDR) with "
                         f"KIND one of {', '.join(KINDS)}", errno=-22)
    if kind != "kprobe" and ("+" in rest or rest.lower().startswith("0x")):
        raise ProbeError(f"--probe {spec!r}: only a kprobe takes an offset or an address", errno=-22)
    _, plus, off = rest.partition("+")
    if plus:
        try:
            int(off, 0)
        except ValueError:
            raise ProbeError(f"--probe {spec!r}: bad offset {off!r}", errno=-22) from None
    return kind, rest
