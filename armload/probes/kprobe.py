"""kprobes on module code as arch/arm/probes/kprobes does them.

register_kprobe: an address kallsyms places in no symbol is -ENOENT; otherwise it must be
module (or kernel) text, not in the kprobe blacklist, not an ftrace site (ARM has no
KPROBES_ON_FTRACE) and not a jump label site of the Image or of a module (all -EINVAL);
arch_prepare_kprobe decodes the instruction (insn.py, the kernel's decode tables) and refuses
what the kernel refuses (decode_errno). armload's own refusals (-EOPNOTSUPP) come after the
kernel's. The booted kernel's register_kprobe checks these verdicts (probes/kagree.py). Arming
writes the breakpoint (arch_arm_kprobe); disarming writes the original instruction back.

A hit (the machine's breakpoint dispatch) looks the probe up in the kprobe table (get_kprobe,
table.py), runs the pre-handler, then the instruction: simulated here if the decoder says the
kernel simulates it (branches, literal loads, adr, mrs, hints, ldm/stm naming pc), emulated
with rewritten registers if it reads pc (as decode_regs + emulate_* do), otherwise executed out
of line from an instruction slot `insn; ldr pc, =next` (with a post-handler: `insn; trap`, the trap
runs the post-handler and resumes after the probe). The kernel's exception entry and
kprobe_handler are Python here: they retire no emulated instructions. Several kprobes on one
address share one breakpoint and slot, as register_aggr_kprobe does (pre-handlers in order).
"""
from __future__ import annotations

import struct

from unicorn import arm_const as A

from . import insn as I
from .base import EILSEQ, EINVAL, ENOENT, EOPNOTSUPP, ProbeError, cond_passed, refuse


# What register_kprobe returns for the decoder's outcome: arch_prepare_kprobe's -EINVAL for
# INSN_REJECTED (the decode tables, the stack checker), armload's own -EOPNOTSUPP for what the
# kernel emulates and armload cannot run (UNSUPPORTED); 0 otherwise (the probe is prepared).
DECODE_ERRNO = {I.REJECT: -EINVAL, I.UNSUPPORTED: -EOPNOTSUPP}


def decode_errno(d: I.Decoded) -> int:
    return DECODE_ERRNO.get(d.outcome, 0)


class Kprobe:
    kind = "kprobe"

    def __init__(self, probes, target, offset: int = 0, pre=None, post=None, *, addr: int | None = None):
        self.p = probes
        self.pre, self.post = pre, post
        self.offset = offset
        if addr is not None:
            f = probes.function_at(addr)
            self.func = f
            self.addr = addr
            self.offset = addr - f.start if f else 0
        else:
            self.func = probes.function(target) if isinstance(target, str) else target
            self.addr = self.func.start + offset
        self.name = f"{self.func.name}+{self.offset:#x}" if self.func else f"{self.addr:#010x}"
        self.thumb = bool(self.func.thumb) if self.func else bool(probes.m.config.thumb2)
        self.enabled = False
        self.registered = False
        self.slot = 0
        self.leader = None               # the kprobe holding the breakpoint at this address
        self.members = [self]            # on a leader: every kprobe at its address (aggr_kprobe)
        self.armed = False
        self.optimized = False           # CONFIG_OPTPROBES: `b detour` instead of the breakpoint
        self.armed_ns = 0
        self.detour = 0
        self.nhit = 0                    # hits that ran the handlers (kprobe_events' hit count)
        self.nmissed = 0                 # kprobes_inc_nmissed_count: hits while another probe ran

    # --- register_kprobe --------------------------------------------------------------------
    def register(self) -> None:
        p, a = self.p, self.addr
        what = "register_kprobe"
        f = self.func
        if f is not None and not (f.start <= a < f.start + max(f.size, 1)):
            # _kprobe_addr folds FUNC+OFF into the symbol kallsyms finds at the address: an offset
            # past FUNC's end probes what follows it (the booted kernel's register_kprobe says so)
            f = self.func = p.function_at(a)
            if f is not None:
                self.offset, self.thumb = a - f.start, bool(f.thumb)
                self.name = f"{f.name}+{self.offset:#x}"
        if f is None:
            if not p.kallsyms_places(a):         # _kprobe_addr: kallsyms_lookup_size_offset fails
                raise refuse(what, ENOENT, f"{a:#010x} is in no symbol kallsyms knows (kernel text, init text, "
                             f"the vectors page or a module)")
            raise refuse(what, EINVAL, f"{a:#010x} is not in kernel or module text")
        sec = f.module.section_at(a)
        if sec is None or not (sec.flags & 0x4) or p.owner(a) is None:
            raise refuse(what, EINVAL, f"{self.name}: {a:#010x} is not in kernel or module text")
        if f.module is p.ktext:                      # check_kprobe_address_safe on core kernel text
            why = p.ktext.blacklisted(a)
            if why is not None:
                raise refuse(what, EINVAL, f"{self.name}: {a:#010x} is within the kprobe blacklist ({why})")
            if p.ktext.is_mcount_site(a):
                raise refuse(what, EINVAL, f"{self.name}: {a:#010x} is an ftrace location "
                             f"(ARM has no CONFIG_KPROBES_ON_FTRACE)")
        if p.ftrace.is_site(a):
            raise refuse(what, EINVAL, f"{self.name}: {a:#010x} is an ftrace location "
                         f"(ARM has no CONFIG_KPROBES_ON_FTRACE)")
        if p.jump_label_site(f.module, a):
            raise refuse(what, EINVAL, f"{self.name}: {a:#010x} is a jump label site "
                         f"(jump_label_text_reserved)")
        old = p.table.walk(a)[0]
        if old is not None:              # register_aggr_kprobe: share the breakpoint and the slot
            if self.post is not None and old.decoded.outcome == I.OUT_OF_LINE and not old.post_slot:
                raise refuse("armload kprobe", EOPNOTSUPP, f"{self.name}: a post-handler joining a kprobe "
                             f"registered without one (armload's slot has no post trap)")
            if self.post is not None and old.decoded.outcome == I.OUT_OF_LINE and old._writes_pc():
                raise refuse("armload kprobe", EOPNOTSUPP, f"{self.name}: a post-handler on an instruction "
                             f"that writes pc")
            for k in ("opcode", "size", "decoded", "orig", "slot"):
                setattr(self, k, getattr(old, k))
            self.leader = old
            old.members.append(self)
            self.registered = True
            return
        # a function the model runs in Python has traps over its first instructions: its words are
        # the Image's, decoded for the kernel's verdict; armload itself cannot probe it (below)
        trapped = f.module is p.ktext and any(k in p.m._entries for k in range(f.start, f.start + 12, 2))
        if self.thumb:
            if trapped:
                raise self._trapped()
            boundary, in_it = self._on_boundary()
            if not boundary:
                raise refuse(what, EILSEQ, f"{self.name}: probe point is not an instruction boundary")
            if in_it:
                raise refuse("armload kprobe", EOPNOTSUPP, f"{self.name}: the instruction is inside an IT "
                             f"block (the kernel checks ITSTATE; armload does not simulate IT blocks)")
            self.opcode, self.size = I.thumb_opcode(p.read(a, 4))
            d = I.decode_thumb(self.opcode, self.size)
        else:
            if a & 3:
                raise refuse(what, EINVAL, f"{self.name}: ARM address not word aligned")
            self.opcode, self.size = (p.ktext.image.word(a) if trapped else I.arm_word(p.read(a, 4))), 4
            d = I.decode_arm(self.opcode)
        self.decoded = d
        err = decode_errno(d)
        if err == -EINVAL:
            raise refuse(what, EINVAL, f"{self.name}: instruction {self.opcode:0{2 * self.size}x} ({d.what}) "
                         f"is rejected by the {'Thumb' if self.thumb else 'ARM'} kprobes decoder")
        if err:
            raise refuse("armload kprobe", -err, f"{self.name}: instruction {self.opcode:0{2 * self.size}x} "
                         f"({d.what}): the kernel emulates it, armload cannot run it out of line")
        if trapped:
            raise self._trapped()
        self.orig = p.read(a, self.size)
        if d.outcome == I.OUT_OF_LINE and self.post is not None and self._writes_pc():
            raise refuse("armload kprobe", EOPNOTSUPP, f"{self.name}: a post-handler on an instruction that "
                         f"writes pc (the kernel emulates it and then calls the post-handler; armload's "
                         f"out-of-line slot never returns to the probe)")
        if d.outcome == I.OUT_OF_LINE:
            self._make_slot()
        elif d.outcome == I.EMULATE:
            self._make_emulation_slot()
        p.table.add(self)
        self.registered = True

    def _trapped(self) -> ProbeError:
        return refuse("armload kprobe", EOPNOTSUPP, f"{self.name}: armload traps calls to {self.func.name} (a "
                      f"model, or a stop at an unmodelled call), so its instructions never run")

    def _writes_pc(self) -> bool:
        op = self.opcode
        if not self.thumb:
            if (op & 0x0E100000) == 0x08100000:
                return bool(op & 0x8000)                     # ldm with pc in the list
            return (op >> 12) & 0xF == 15
        if self.size == 2:
            return (op & 0xFF00) == 0xBD00 or ((op & 0xFF00) in (0x4400, 0x4600) and (op & 0x87) == 0x87)
        h1, h2 = op >> 16, op & 0xFFFF
        if (h1 & 0xFE50) == 0xE810:
            return bool(h2 & 0x8000)                         # ldm.w with pc
        return (h1 & 0xFE10) == 0xF810 and (h2 >> 12) == 15  # ldr.w pc

    def _on_boundary(self) -> tuple[bool, bool]:
        """(addr starts an instruction, that instruction is inside an IT block), walking from the
        function start."""
        f = self.func
        at, it_left = f.start, 0
        while at < self.addr:
            op, n = I.thumb_opcode(self.p.read_original(at, 4))
            if it_left:
                it_left -= 1
            elif n == 2 and op & 0xFF00 == 0xBF00 and op & 0xF:
                mask = op & 0xF
                it_left = 4 - (mask & -mask).bit_length() + 1      # 1..4 instructions follow
            at += n
        return at == self.addr, it_left > 0

    def _make_slot(self) -> None:
        p = self.p
        slot = p.alloc_text(16)
        nxt = self.addr + self.size
        if self.thumb:
            code = self.orig
            if self.post is not None:
                code += struct.pack("<H", 0xDE18)
            else:
                ldr = slot + len(code)
                lit = (ldr + 4 + 3) & ~3
                code += struct.pack("<HH", 0xF8DF, 0xF000 | (lit - ((ldr + 4) & ~3)))
                code += b"\x00" * (lit - (slot + len(code))) + struct.pack("<I", nxt | 1)
        else:
            code = self.orig + (struct.pack("<I", 0xE7F001F8) if self.post is not None
                                else struct.pack("<II", 0xE51FF004, nxt))
        p.write_code(slot, code)
        if self.post is not None:
            p.m.breakpoints[slot + self.size] = self._on_post
        self.slot = slot

    def _make_emulation_slot(self) -> None:
        """The kernel's emulate_* for an instruction reading pc: decode_regs rewrote the register
        nibbles to stand-ins loaded with pc + 8 (str_pc_offset on ARMv7); here two registers the
        instruction does not name stand in, saved before and restored after (the trap after the
        rewritten instruction); a pc destination becomes the second stand-in, then a BX-style
        jump (load_write_pc / alu_write_pc interwork on ARMv7)."""
        reads, dest = self.decoded.pc_fields
        op, self.rs, self.rd = I.arm_rewrite(self.opcode, list(reads), dest)
        slot = self.p.alloc_text(8)
        self.p.write_code(slot, struct.pack("<II", op, 0xE7F001F8))
        self.p.m.breakpoints[slot + 4] = self._on_emulated
        self.slot = slot
        self.rewritten = op

    def _emulate(self) -> None:
        self._saved = [(r, self._reg(r, 0)) for r in (self.rs, self.rd) if r is not None]
        self._set(self.rs, self.addr + 8)
        if self.rd is not None:
            self._set(self.rd, self.addr + 4)        # the condition failing leaves pc at the next insn
        self.p.set_pc(self.slot)

    def _on_emulated(self, machine, at) -> None:
        target = self._reg(self.rd, 0) if self.rd is not None else self.addr + 4
        for r, v in self._saved:
            self._set(r, v)
        self._posts()
        self.p.set_pc(target)

    @property
    def post_slot(self) -> bool:
        """The slot ends in a post-handler trap (built so when the first kprobe had one)."""
        return self.post is not None

    def unregister(self) -> None:
        self.disable()
        if not self.registered:
            return
        self.registered = False
        lead = self.leader or self
        if lead is not self:
            lead.members.remove(self)
            self.leader = None
        if not any(m.registered for m in lead.members):  # the last one: the aggregate goes
            self.p.table.remove(lead)
            if lead.slot and lead.post is not None:
                self.p.m.breakpoints.pop(lead.slot + lead.size, None)

    # --- arming -----------------------------------------------------------------------------
    def enable(self):
        if not self.registered:
            self.register()
        self.enabled = True
        (self.leader or self)._rearm()
        return self

    def disable(self):
        if self.enabled:
            self.enabled = False
            (self.leader or self)._rearm()
        return self

    def _rearm(self) -> None:
        """arm_kprobe / disarm_kprobe: the breakpoint is there while any member is enabled."""
        want = any(m.enabled for m in self.members)
        if self.optimized and (not want or not self._optimizable()):
            self._unoptimize()
        if want and not self.armed:
            if self.thumb:
                bp = (I.thumb_bytes(I.KPROBE_THUMB32_BREAKPOINT_INSTRUCTION, 4) if self.size == 4
                      else struct.pack("<H", I.KPROBE_THUMB16_BREAKPOINT_INSTRUCTION))
            else:
                bp = struct.pack("<I", I.arm_kprobe_breakpoint(self.opcode))
            self.p.write_code(self.addr, bp)
            self.p.m.breakpoints[self.addr] = self.p._kprobe_trap
            self.armed = True
            self.armed_ns = self.p.m.clock.ns()
        elif not want and self.armed:
            if self.p.owner(self.addr) is not None:      # init text may be freed already
                self.p.write_code(self.addr, self.orig)
            self.p.m.breakpoints.pop(self.addr, None)
            self.armed = False

    # --- OPTPROBES (arch/arm/probes/kprobes/opt-arm.c, kernel/kprobes.c) ---------------------------
    OPTIMIZE_DELAY = 5                   # jiffies: kprobe_optimizer runs this long after arming

    def _optimizable(self) -> bool:
        """kprobe_optready (no post_handler on any aggregated kprobe) and can_optimize (the stack
        checker found no unknown or too large stack use). armload optimizes only instructions it
        runs unchanged out of line; the kernel's optimized_callback also single-steps the
        simulated ones (those stay traps here)."""
        return (self.p.optprobes and not self.thumb and self.decoded.outcome == I.OUT_OF_LINE
                and all(m.post is None for m in self.members if m.registered))

    def maybe_optimize(self) -> None:
        if self.optimized or not self.armed or not self._optimizable():
            return
        clock = self.p.m.clock
        if clock.ns() - self.armed_ns >= self.OPTIMIZE_DELAY * 1_000_000_000 // clock.hz:
            self.try_optimize()

    def try_optimize(self) -> bool:
        """arch_prepare_optimized_kprobe + arch_optimize_kprobes: a detour buffer within a branch
        (-ERANGE otherwise: the kprobe stays a trap), then `b detour` over the breakpoint."""
        if self.optimized or not self.armed or not self._optimizable():
            return False
        p = self.p
        if not self.detour:
            try:
                d = p.alloc_kernel_near(32) if self.func.module is p.ktext else p.alloc_near(self.func.module, 32)
            except Exception:
                return False
            if I.arm_bl(d + 20, self.addr + 4) is None or I.arm_bl(self.addr, d) is None:
                return False                           # -ERANGE
            back = I.arm_bl(d + 20, self.addr + 4) & ~0x01000000              # b, not bl
            p.write_code(d, struct.pack("<4I", 0xE92D500F, 0xE1A0000D, 0xEB000003, 0xE8BD500F)
                         + self.orig + struct.pack("<I", back))
            p.trap(d + 28, False, self._opt_callback)
            p.name_code(d, 32, f"optprobe[{self.name}]")
            self.detour = d
        p.write_code(self.addr, struct.pack("<I", I.arm_bl(self.addr, self.detour) & ~0x01000000))
        p.m.breakpoints.pop(self.addr, None)
        self.optimized = True
        return True

    def _unoptimize(self) -> None:
        """arch_unoptimize_kprobes: the breakpoint again (or the original, when disarming)."""
        self.optimized = False
        if self.armed:
            self.armed = False
            self.p.write_code(self.addr, self.orig)
            self.p.m.breakpoints.pop(self.addr, None)

    def _opt_callback(self, machine, at) -> None:
        """optimized_callback(op, regs): the detour pushed {r0-r3, r12, lr}; the handlers see
        the registers as at the probe and may change them (they are written back to the frame)."""
        p, uc = self.p, self.p.uc
        sp = uc.reg_read(A.UC_ARM_REG_SP)
        frame = list(struct.unpack("<6I", p.read(sp, 24)))
        p.charge("optprobe")
        if p._active is not None:                   # kprobes_inc_nmissed_count
            for k in self.members:
                if k.enabled:
                    k.nmissed += 1
            p.set_pc(self.detour + 12)
            return
        ids = [A.UC_ARM_REG_R0, A.UC_ARM_REG_R1, A.UC_ARM_REG_R2, A.UC_ARM_REG_R3, A.UC_ARM_REG_R12,
               A.UC_ARM_REG_LR]
        for r, v in zip(ids, frame):
            uc.reg_write(r, v)
        uc.reg_write(A.UC_ARM_REG_SP, sp + 24)
        p._active = self
        try:
            for k in self.members:                  # opt_pre_handler: every enabled member's pre
                if k.enabled:
                    k.nhit += 1
                    if k.pre is not None:
                        k.pre(p.hit(k.kind, k.name, k.addr))
        finally:
            p._active = None
        out = [uc.reg_read(r) for r in ids]
        uc.reg_write(A.UC_ARM_REG_SP, sp)
        p.uc.mem_write(sp, struct.pack("<6I", *out))
        p.set_pc(self.detour + 12)

    def sites(self) -> list[dict]:
        if self.optimized:
            return [{"addr": self.addr, "size": 4, "thumb": False, "module": self.func.module.name,
                     "what": f"optimized kprobe: b detour (was {self.orig.hex()})"}]
        if not self.armed:
            return []
        return [{"addr": self.addr, "size": self.size, "thumb": self.thumb, "module": self.func.module.name,
                 "what": f"kprobe breakpoint (was {self.orig.hex()})"}]

    # --- a hit --------------------------------------------------------------------------------
    def missed(self) -> None:
        """reenter_kprobe while a handler runs: kprobes_inc_nmissed_count, the instruction is
        single-stepped without handlers."""
        for k in self.members:
            if k.enabled:
                k.nmissed += 1
        self.handle(handlers=False)

    def handle(self, handlers: bool = True) -> None:
        p = self.p
        if self.thumb and self.decoded.sim in ("t16-bcond",) and not self._cc(((self.opcode >> 8) & 0xF)):
            p.set_pc((self.addr + self.size) | 1)      # condition failed: skipped, no handlers
            return
        self._handlers = handlers
        for k in self.members:           # aggr_pre_handler: every enabled member, in order
            if k.enabled and handlers:
                k.nhit += 1
            if k.enabled and k.pre is not None and handlers:
                k.pre(p.hit(k.kind, k.name, k.addr))
        if self.decoded.outcome == I.OUT_OF_LINE:
            p.set_pc(self.slot | (1 if self.thumb else 0))
            return
        if self.decoded.outcome == I.EMULATE:
            self._emulate()
            return
        self._simulate()
        self._posts()

    def _posts(self) -> None:
        if not getattr(self, "_handlers", True):
            return
        for k in self.members:
            if k.enabled and k.post is not None:
                k.post(self.p.hit("kprobe-post", k.name, k.addr))

    def _on_post(self, machine, at) -> None:
        self._posts()
        self.p.set_pc((self.addr + self.size) | (1 if self.thumb else 0))

    def _cc(self, cond: int) -> bool:
        return cond_passed(cond, self.p.uc.reg_read(A.UC_ARM_REG_CPSR))

    def _reg(self, n: int, pcval: int) -> int:
        if n == 15:
            return pcval
        return self.p.uc.reg_read(getattr(A, f"UC_ARM_REG_R{n}") if n < 13 else
                                  (A.UC_ARM_REG_SP, A.UC_ARM_REG_LR)[n - 13])

    def _set(self, n: int, v: int) -> None:
        self.p.uc.reg_write(getattr(A, f"UC_ARM_REG_R{n}") if n < 13 else
                            (A.UC_ARM_REG_SP, A.UC_ARM_REG_LR)[n - 13], v & 0xFFFFFFFF)

    def _load(self, ea: int, size: int) -> int:
        return int.from_bytes(self.p.m.read(ea, size), "little")

    def _ldmstm(self) -> None:
        """simulate_ldm1stm1 / simulate_stm1_pc / simulate_ldm1pc (actions-common.c): LDM/STM
        naming pc, one register at a time; a stored pc is the probe address + 8 (str_pc_offset)."""
        op, a, m = self.opcode, self.addr, self.p.m
        rn, regs = (op >> 16) & 0xF, [i for i in range(16) if op >> i & 1]
        base = self._reg(rn, a + 8)
        n = 4 * len(regs)
        lo = (base + (4 if op & (1 << 24) else 0)) if op & (1 << 23) else (base - n + (0 if op & (1 << 24) else 4))
        newpc = a + 4
        for k, r in enumerate(regs):
            ea = (lo + 4 * k) & 0xFFFFFFFF
            if op & (1 << 20):
                v = self._load(ea, 4)
                if r == 15:
                    newpc = v
                else:
                    self._set(r, v)
            else:
                m.write(ea, struct.pack("<I", self._reg(r, a + 8)))
        if op & (1 << 21) and rn != 15:
            self._set(rn, base + n if op & (1 << 23) else base - n)
        self.p.set_pc(newpc)

    def _simulate(self) -> None:
        """The kernel's simulate_* for the instruction at the probe (INSN_GOOD_NO_SLOT)."""
        p, op, a, sim = self.p, self.opcode, self.addr, self.decoded.sim
        t = 1 if self.thumb else 0
        nxt = (a + self.size) | t
        uc = p.uc
        if sim in ("nop", "preload"):
            p.set_pc(nxt)
        elif sim == "branch":                                   # ARM B/BL
            if op & (1 << 24):
                self._set(14, a + 4)
            p.set_pc(I.branch_target(op, a, False))
        elif sim == "blx-imm":
            self._set(14, a + 4)
            p.set_pc(I.branch_target(op, a, False))
        elif sim in ("bx", "blx-reg"):
            v = self._reg(op & 0xF, a + 8)
            if sim == "blx-reg":
                self._set(14, a + 4)
            p.set_pc(v)
        elif sim == "mrs":
            self._set((op >> 12) & 0xF, uc.reg_read(A.UC_ARM_REG_CPSR) & 0xF8FF03DF)
            p.set_pc(nxt)
        elif sim == "t32-mrs":
            self._set((op >> 8) & 0xF, uc.reg_read(A.UC_ARM_REG_CPSR) & 0xF8FF03DF)
            p.set_pc(nxt)
        elif sim == "ldmstm":
            self._ldmstm()
        elif sim == "mov-ip-sp":
            self._set(12, uc.reg_read(A.UC_ARM_REG_SP))
            p.set_pc(nxt)
        elif sim == "ldr-literal":
            imm = op & 0xFFF
            ea = a + 8 + (imm if op & (1 << 23) else -imm)
            v = self._load(ea, 1 if op & (1 << 22) else 4)
            rd = (op >> 12) & 0xF
            if rd == 15:
                p.set_pc(v)
            else:
                self._set(rd, v)
                p.set_pc(nxt)
        elif sim == "adr":
            rot = ((op >> 8) & 0xF) * 2
            imm = ((op & 0xFF) >> rot | (op & 0xFF) << (32 - rot)) & 0xFFFFFFFF if rot else op & 0xFF
            base = a + 8
            self._set((op >> 12) & 0xF, base + imm if (op & 0x01E00000) == 0x00800000 else base - imm)
            p.set_pc(nxt)
        elif sim == "t16-bcond":
            p.set_pc((a + 4 + I._sext((op & 0xFF) << 1, 9)) | 1)
        elif sim == "t16-b":
            p.set_pc((a + 4 + I._sext((op & 0x7FF) << 1, 12)) | 1)
        elif sim == "t16-cbz":
            v = self._reg(op & 7, 0)
            off = ((op >> 9) & 1) << 6 | ((op >> 3) & 0x1F) << 1
            taken = (v != 0) if op & 0x800 else (v == 0)
            p.set_pc(((a + 4 + off) | 1) if taken else nxt)
        elif sim == "t16-bx":
            v = self._reg((op >> 3) & 0xF, a + 4)
            if op & 0x80:
                self._set(14, (a + 2) | 1)
            p.set_pc(v)
        elif sim == "t16-ldr-literal":
            self._set((op >> 8) & 7, self._load(((a + 4) & ~3) + ((op & 0xFF) << 2), 4))
            p.set_pc(nxt)
        elif sim == "t16-adr":
            self._set((op >> 8) & 7, ((a + 4) & ~3) + ((op & 0xFF) << 2))
            p.set_pc(nxt)
        elif sim == "t32-branch":
            h1, h2 = op >> 16, op & 0xFFFF
            if (h2 & 0x5000) == 0 and not self._cc((h1 >> 6) & 0xF):
                p.set_pc(nxt)
                return
            if h2 & 0x4000:
                self._set(14, (a + 4) | 1)
            p.set_pc(I.branch_target(op, a, True))
        elif sim == "t32-ldr-literal":
            h1, h2 = op >> 16, op & 0xFFFF
            imm = h2 & 0xFFF
            ea = ((a + 4) & ~3) + (imm if h1 & 0x80 else -imm)
            v = self._load(ea, 4)
            rt = h2 >> 12
            if rt == 15:
                p.set_pc(v)
            else:
                self._set(rt, v)
                p.set_pc(nxt)
        elif sim == "t32-adr":
            h1, h2 = op >> 16, op & 0xFFFF
            imm = ((h1 >> 10) & 1) << 11 | ((h2 >> 12) & 7) << 8 | (h2 & 0xFF)
            base = (a + 4) & ~3
            self._set((h2 >> 8) & 0xF, base - imm if h1 & 0x00A0 else base + imm)
            p.set_pc(nxt)
        else:                                                   # pragma: no cover - decoder/simulator mismatch
            raise RuntimeError(f"armload: no simulation for {sim}")
