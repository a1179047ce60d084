"""What an oops shows beyond the registers: the backtrace, the Code: line, the held locks.

* backtrace: EHABI-unwound (`unwind.py`) through module frames (their .ARM.exidx) and kernel
  frames (the Image's index), printed as the 6.1 kernel's dump_backtrace_entry without
  CONFIG_BACKTRACE_VERBOSE (` %ps from %pS`), each module frame with file:line from DWARF when
  the module has .debug_line (as scripts/decode_stacktrace.sh adds it). It ends at armload's
  top-level call (the kernel's do_one_initcall and load_module are not simulated) or where
  the unwinder cannot go on, and says which.
* Code: arch/arm/kernel/traps.c dump_instr: ARM, the 4 words before the PC and the PC word in
  parentheses; Thumb, 4 halfwords before, the PC halfword in parentheses and one after.
* held locks: the locking models' state (`locking.held`), each checked against its lock word
  (an inlined spin_unlock releases a lock without a model seeing it).
"""
from __future__ import annotations

import struct

from .cpu import REG_NAMES, SENTINEL
from .unwind import Frame, UnwindError, kernel_table, module_table, unwind_frame

MAX_FRAMES = 32


def annotate(machine, rep) -> None:
    """Fill rep.backtrace, rep.code and rep.locks (never raises: an oops must print)."""
    try:
        rep.backtrace, rep.backtrace_end = backtrace(machine, rep.registers)
    except Exception as e:                     # pragma: no cover - a report must still be made
        rep.backtrace, rep.backtrace_end = [], f"backtrace failed: {type(e).__name__}: {e}"
    bare = sorted({f["module"] for f in rep.backtrace if f["module"] and f["file"] is None})
    if bare:
        rep.backtrace_end += (f"; no file:line for {', '.join(bare)}: no .debug_line (a --strip-debug'ged "
                              f"build; use the unstripped .ko)")
    try:
        rep.code = code_line(machine, rep.registers["pc"], rep.thumb)
        rep.insn = faulting_instruction(machine, rep.registers["pc"], rep.thumb)
    except Exception:
        rep.code = None
    try:
        rep.locks = held_locks(machine)
    except Exception:
        rep.locks = []


def _read32(machine):
    def read32(a: int) -> int:
        try:
            return struct.unpack("<I", bytes(machine.uc.mem_read(a, 4)))[0]
        except Exception:
            raise UnwindError(f"cannot read the stack at {a:#010x}") from None
    return read32


def _short(sym: str) -> str:
    """%ps: the symbol without +off/size (the module name kept)."""
    name, _, rest = sym.partition("+")
    mod = rest[rest.index(" ["):] if " [" in rest else ""
    return name + mod


def backtrace(machine, regs: dict) -> tuple[list[dict], str]:
    read32 = _read32(machine)
    frame = Frame([regs[n] for n in REG_NAMES[:16]])
    frames: list[dict] = []
    end = ""
    tables: dict[int, object] = {}
    first = True
    outer = list(getattr(machine, "invoke_frames", []))     # models that called into this code
    fixup = getattr(machine, "unwind_fixup", None)          # probes: a kretprobe'd frame's real return
    fixup = fixup() if fixup is not None else None
    for _ in range(MAX_FRAMES):
        pc = frame.pc & ~1
        if pc == SENTINEL and outer:
            # a callback returns to the model that invoked it: go on in that model's caller
            frame = Frame(list(outer.pop())[:16])
            continue
        if pc == SENTINEL:
            end = "armload's top-level call (the kernel's do_one_initcall/load_module are not simulated)"
            break
        entry = _trap_entry(machine, pc)
        owner = machine._in_module(pc)
        try:
            if entry is not None:
                # a model's trap (svc; bx lr at the function's entry): nothing pushed yet
                nxt = list(frame.regs)
                nxt[15] = nxt[14]
                new = Frame(nxt, set(frame.known))
                where = entry
            else:
                if owner is not None:
                    key = id(owner)
                    if key not in tables:
                        tables[key] = module_table(machine, owner)
                    table = tables[key]
                elif machine.image is not None and machine.image.stext <= pc < machine.image.etext:
                    table = kernel_table(machine.image)
                else:
                    end = f"{pc:#010x} is outside module and kernel code"
                    break
                if table is None:
                    end = f"no unwind table for {machine.symbolize(pc)}"
                    break
                new = unwind_frame(frame, table, read32, at_entry_ok=True)
                where = pc
        except UnwindError as e:
            frames.append(_frame(machine, pc, None, first))
            end = f"unwinding stopped at {_short(machine.symbolize(pc))}: {e}"
            break
        if fixup is not None:
            new = fixup(new)
        nxt = new.pc & ~1
        if nxt == SENTINEL and outer:
            # the model that invoke()d this code: its trap pc names it
            o = outer[-1]
            nxt = _trap_entry(machine, o[15] & ~1) or (o[15] & ~1)
        frames.append(_frame(machine, where, nxt, first))
        first = False
        if new.pc == frame.pc and new.sp == frame.sp:
            end = "loop"
            break
        frame = new
    else:
        end = f"stopped after {MAX_FRAMES} frames"
    return frames, end


def _trap_entry(machine, pc: int) -> int | None:
    entries = machine._entries
    if pc in entries:                       # pc after the svc: ARM (+4) or Thumb (+2)
        for d in (4, 2):
            a = pc - d
            if machine._names_at.get(a) == entries[pc][0]:
                return a
        return pc - 4
    return None


def _frame(machine, where: int, frm: int | None, first: bool) -> dict:
    from .debuginfo import line_table
    d = {"pc": where, "sym": machine.symbolize(where), "from": frm,
         "from_sym": (machine.symbolize(frm) if frm not in (None, SENTINEL)
                      else "armload's top-level call" if frm == SENTINEL else None),
         "module": None, "file": None, "line": None}
    owner = machine._in_module(where)
    if owner is not None:
        d["module"] = owner.name
        lt = line_table(owner)
        if lt:
            # a return address points after its call: look up the call instruction's line
            hit = lt.lookup(where if first else where - 1)
            if hit is not None:
                d["file"], d["line"] = hit
    return d


def format_frame(f: dict) -> str:
    s = f" {_short(f['sym'])}"
    if f["from_sym"] is not None:
        s += f" from {f['from_sym']}"
    if f["file"]:
        s += f"  ({f['file']}:{f['line']})"
    return s


def faulting_instruction(machine, pc: int, thumb: bool) -> str | None:
    """The instruction at the PC, disassembled (capstone): armload's addition to the oops."""
    import capstone
    try:
        code = bytes(machine.uc.mem_read(pc, 4))
    except Exception:
        return None
    cs = capstone.Cs(capstone.CS_ARCH_ARM, capstone.CS_MODE_THUMB if thumb else capstone.CS_MODE_ARM)
    for insn in cs.disasm(code, pc, 1):
        return f"{insn.mnemonic} {insn.op_str}".strip()
    return None


def code_line(machine, pc: int, thumb: bool) -> str:
    parts = []
    rng = range(-4, 2) if thumb else range(-4, 1)
    width, size = (4, 2) if thumb else (8, 4)
    for i in rng:
        try:
            b = bytes(machine.uc.mem_read(pc + i * size, size))
        except Exception:
            parts.append("bad PC value")
            break
        v = int.from_bytes(b, "little")
        parts.append(f"({v:0{width}x})" if i == 0 else f"{v:0{width}x}")
    return "Code: " + " ".join(parts) + " "


def held_locks(machine) -> list[str]:
    held = machine.model_state.get("locking.held") or {}
    out = []
    for addr, (kind, at) in held.items():
        try:
            w = struct.unpack("<I", bytes(machine.uc.mem_read(addr, 4)))[0]
        except Exception:
            continue
        if kind == "spinlock" and (w & 0xFFFF) == (w >> 16):
            continue                      # released by an inlined unlock
        if kind == "mutex" and w == 0:
            continue
        out.append(f"{addr:08x} ({_short(machine.symbolize(addr))}) {kind}, taken at {at}")
    return out
