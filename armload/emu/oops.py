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
    if rep.kind not in NOT_AN_OOPS:
        try:
            rep.kernel = kernel_facts(machine, rep)
        except Exception as e:                 # pragma: no cover - a report must still be made
            rep.kernel = {}
            rep.backtrace_end += f"; kernel facts failed: {type(e).__name__}: {e}"


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


# --- the oops as 6.1 prints it --------------------------------------------------------------
# arch/arm/kernel/traps.c __die(): "Internal error: %s: %x [#%d]" S_PREEMPT S_SMP S_ISA (Debian
# armmp: SMP, no CONFIG_PREEMPT, ARM), print_modules(), __show_regs() (which starts with
# dump_stack_print_info's "CPU: ..." and "Hardware name: ..." lines), "Process %.*s (pid: %d, stack
# limit = 0x%p)", dump_mem("Stack: ", sp, top of the thread stack), dump_backtrace() (the EHABI
# unwinder prints its entries with no header line in 6.1: "Call trace:" was added in 6.8 by
# "ARM: unwind: Add missing "Call trace:" line"), dump_instr() ("Code: ").
# The err of die("Oops", regs, fsr) is the fault status: short-descriptor FS (5 section /
# 7 page translation, 0xf page permission) | FSR_WRITE (1 << 11) | FSR_LNX_PF (1 << 31, a
# prefetch abort) -- arch/arm/mm/fault.c __do_kernel_fault, arch/arm/mm/fault.h.
FSR_WRITE, FSR_LNX_PF = 1 << 11, 1 << 31
DIE_STR = {"undefined-instruction": "Oops - undefined instruction", "bug": "Oops - BUG"}
NOT_AN_OOPS = ("unmodelled", "budget", "timeout")      # the run stopped; nothing faulted
HARDWARE = "Generic DT based system"                   # arch/arm/kernel/devtree.c: the armmp DT machine
# include/linux/panic.h / kernel/panic.c taint_flags[] (6.1: 18 flags), 'G' for an untainted P
TAINT_CHARS = "PFSRMBUDAWCIOELKXT"
TAINT_OOT, TAINT_UNSIGNED = 12, 13


def die_err(rep) -> tuple[str, int]:
    """(str, err) of the kernel's die() for this fault."""
    if rep.kind in DIE_STR:
        return DIE_STR[rep.kind], 0
    fs = 0xF if rep.kind in ("write-protect", "read-protect", "exec-protect") else \
        5 if (rep.access_addr or 0) < 0x100000 else 7
    if rep.access_type == "fetch" or rep.kind in ("jump-unmapped", "exec-protect"):
        return "Oops", fs | FSR_LNX_PF
    return "Oops", fs | (FSR_WRITE if rep.access_type == "write" else 0)


def module_taints(m) -> str:
    """module_flags()'s taint letters: O without modinfo intree=Y, E without a signature."""
    out = ""
    if "Y" not in (m.modinfo.get("intree") or []):
        out += "O"
    if not _has_signature(m.path):
        out += "E"
    return out


def _has_signature(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            f.seek(-28, 2)
            return f.read() == b"~Module signature appended~\n"
    except OSError:
        return False


def kernel_facts(machine, rep) -> dict:
    """What __die prints besides the registers, from the machine at the fault."""
    mods = list(machine.modules)
    taints = {}
    for m in mods:
        taints[m.name] = module_taints(m)
    # print_modules(): newest first (list_add_rcu at the head of `modules`), " name(flags)", '+' while
    # MODULE_STATE_COMING (its init has not returned)
    done = getattr(machine, "_init_freed", set())
    linked = []
    for m in reversed(mods):
        flags = taints[m.name] + ("+" if id(m) not in done and m.init_addr is not None else "")
        linked.append(f"{m.name}({flags})" if flags else m.name)
    mask = set()
    for t in taints.values():
        if "O" in t:
            mask.add(TAINT_OOT)
        if "E" in t:
            mask.add(TAINT_UNSIGNED)
    tainted = "Not tainted" if not mask else "Tainted: " + "".join(
        (c if i in mask else ("G" if i == 0 else " ")) for i, c in enumerate(TAINT_CHARS))
    release, build = _uts(machine)
    bottom, top = machine.stack_range
    sp = rep.registers["sp"]
    return {"modules": linked, "tainted": tainted, "release": release, "build": build,
            "die_suffix": _die_suffix(machine),
            "stack": dump_mem(machine, "Stack: ", sp, top) if bottom <= sp <= top else
            [f"Stack: sp {sp:08x} is outside the thread stack"]}


def _die_suffix(machine) -> str:
    """S_PREEMPT S_SMP S_ISA as the Image's own __die format string has them (" SMP ARM" for armmp)."""
    img = machine.image
    if img is None:
        return " SMP " + ("THUMB2" if machine.config.thumb2 else "ARM")    # the built-in kernel's config
    i = img.data.find(b"Internal error: %s: %x [#%d]")
    if i < 0:
        return ""
    i += len(b"Internal error: %s: %x [#%d]")
    return img.data[i:img.data.index(b"\n", i)].decode("ascii", "replace")


def _uts(machine) -> tuple[str, str]:
    """(release, the version's first word + Debian's package version) from the Image's linux_banner."""
    img = machine.image
    if img is None:
        return "6.1.0-50-armmp", "#1 (built-in kernel: no image)"
    i = img.data.find(b"Linux version ")
    if i < 0:
        return "?", "?"
    banner = img.data[i:img.data.index(b"\0", i)].decode("ascii", "replace")
    release = banner.split()[2]
    j = banner.rfind(") #")                 # init_utsname()->version starts at its '#'
    version = banner[j + 2:] if j >= 0 else "#?"
    first = version.split(" ", 1)[0]        # "%.*s", strcspn(version, " ")
    deb = version.split(" Debian ", 1)[1].split()[0] if " Debian " in version else ""
    return release, first + (f" Debian {deb}" if deb else "")   # Debian's version.patch adds its package version


def dump_mem(machine, label: str, bottom: int, top: int) -> list[str]:
    """traps.c dump_mem(): a header, then 8 words a line from bottom & ~31, blank before bottom."""
    out = [f"{label}(0x{bottom:08x} to 0x{top:08x})"]
    first = bottom & ~31
    while first < top:
        words = []
        p = first
        for _ in range(8):
            if p >= top:
                break
            if p < bottom:
                words.append(" " * 9)
            else:
                try:
                    words.append(" %08x" % struct.unpack("<I", bytes(machine.uc.mem_read(p, 4)))[0])
                except Exception:
                    words.append(" ????????")
            p += 4
        out.append(f"{first & 0xffff:04x}:" + "".join(words))
        first += 32
    return out


def _flags_line(cpsr: int) -> str:
    """__show_regs(): condition flags (upper case set), IRQ/FIQ state, mode, ISA, Segment."""
    nzcv = "".join(c.upper() if cpsr & (1 << b) else c for c, b in zip("nzcv", (31, 30, 29, 28)))
    modes = {0x10: "USER_32", 0x11: "FIQ_32", 0x12: "IRQ_32", 0x13: "SVC_32", 0x17: "ABT_32",
             0x1B: "UND_32", 0x1F: "SYSTEM_32"}
    return (f"Flags: {nzcv}  IRQs {'off' if cpsr & 0x80 else 'on'}  FIQs {'off' if cpsr & 0x40 else 'on'}  "
            f"Mode {modes.get(cpsr & 0x1F, 'UK%d_32' % (cpsr & 0x1F))}  ISA {'Thumb' if cpsr & 0x20 else 'ARM'}  "
            f"Segment none")


# arch/arm/mm/fault.c die_kernel_fault(): the line before die("Oops", regs, fsr), for the faults
# the MMU raises; armload's own kinds (heap guard pages, use-after-free) keep armload's message.
MMU_KINDS = ("null-deref", "paging", "jump-unmapped", "write-protect", "read-protect", "exec-protect")


def unable_line(rep) -> str:
    if rep.kind not in MMU_KINDS or rep.access_addr is None:
        return rep.message
    a = rep.access_addr
    what = "NULL pointer dereference" if a < 0x1000 else "paging request"
    when = "execute" if rep.access_type == "fetch" else "write" if rep.access_type == "write" else "read"
    return f"Unable to handle kernel {what} at virtual address {a:08x} when {when}"


def format_oops(rep) -> str:
    """The report of a fault, line for line as 6.1 prints it, then armload's additions."""
    r = rep.registers
    k = rep.kernel or {}
    s, err = die_err(rep)
    lines = ["8<--- cut here ---", unable_line(rep), f"Internal error: {s}: {err:x} [#1]{k.get('die_suffix', '')}"]
    if k:
        lines.append("Modules linked in: " + " ".join(k["modules"]))
        lines.append(f"CPU: 0 PID: 1 Comm: insmod {k['tainted']} {k['release']} {k['build']}")
        lines.append(f"Hardware name: {HARDWARE}")
    lines.append(f"PC is at {rep.pc_sym}")
    lines.append(f"LR is at {rep.lr_sym}")
    lines.append(f"pc : [<{r['pc']:08x}>]    lr : [<{r['lr']:08x}>]    psr: {r['cpsr']:08x}")
    lines.append(f"sp : {r['sp']:08x}  ip : {r['r12']:08x}  fp : {r['r11']:08x}")
    lines.append(f"r10: {r['r10']:08x}  r9 : {r['r9']:08x}  r8 : {r['r8']:08x}")
    lines.append(f"r7 : {r['r7']:08x}  r6 : {r['r6']:08x}  r5 : {r['r5']:08x}  r4 : {r['r4']:08x}")
    lines.append(f"r3 : {r['r3']:08x}  r2 : {r['r2']:08x}  r1 : {r['r1']:08x}  r0 : {r['r0']:08x}")
    lines.append(_flags_line(r["cpsr"]))
    if k:
        lines.append(f"Process insmod (pid: 1, stack limit = 0x(ptrval))")
        lines.extend(k["stack"])
    lines.extend(format_frame(f) for f in rep.backtrace)
    if rep.code:
        lines.append(rep.code)
    lines.append("---[ end trace 0000000000000000 ]---")
    lines.extend(_additions(rep))
    return "\n".join(lines)


def _additions(rep) -> list[str]:
    """armload's notes after the kernel's lines (a real board prints none of them)."""
    out = []
    if rep.backtrace_end:
        out.append(f"armload: backtrace ends: {rep.backtrace_end}")
    if rep.insn:
        out.append(f"armload: faulting instruction: {rep.insn}")
    if rep.kernel:
        out.append("armload: PID 1/insmod name the process a board would run init in; the simulated "
                   "current is a zeroed task_struct, one CPU; Control/Table/DAC and show_pte lines are not modelled")
    if rep.locks:
        out.append(f"armload: {len(rep.locks)} lock{'s' if len(rep.locks) > 1 else ''} held (lock tracking):")
        out.extend(f" #{i}: {x}" for i, x in enumerate(rep.locks))
    if rep.last_calls:
        out.append("armload: last kernel calls:")
        out.extend("  " + c.format() for c in rep.last_calls)
    return out


def format_stop(rep) -> str:
    """A run that stopped without a fault (an unmodelled call, the budget): what it is and where."""
    what = {"unmodelled": "stopped at a call armload does not simulate (not an oops: nothing faulted)",
            "budget": "stopped: the instruction budget ran out (not an oops: a real kernel would still be running)",
            "timeout": "stopped: the wall-clock safety net (not an oops)"}[rep.kind]
    lines = [f"armload: {what}", f"  {rep.message}", f"  at {rep.pc_sym}"]
    if rep.backtrace:
        lines.append("  backtrace:")
        lines.extend("  " + format_frame(f) for f in rep.backtrace)
    if rep.kind == "unmodelled":
        lines.append("  choices: --unmodelled real (run the kernel's own code from the image), --unmodelled zero "
                     "(return 0, marked), or a model in armload/emu/models/")
    elif rep.kind == "budget":
        lines.append("  choices: --budget N (a larger budget), or look for a loop that waits on hardware")
    if rep.last_calls:
        lines.append("  last kernel calls:")
        lines.extend("    " + c.format() for c in rep.last_calls)
    return "\n".join(lines)


def format_report(rep) -> str:
    return format_stop(rep) if rep.kind in NOT_AN_OOPS else format_oops(rep)
