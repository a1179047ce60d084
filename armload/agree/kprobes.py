"""The booted Debian kernel as the oracle of armload's kprobes verdicts (issue 24).

Comparisons at the level of register_kprobe's return value (0 or -errno):

* ARM encodings. One restored BootedKernel loads a module (lib/lz4/lz4_compress.ko by default)
  with its own load_module; a word of the module's core text, checked once to be a probe-able
  address (not an ftrace site, jump label or BUG site: a `mov r0, r0` there is accepted), is
  overwritten from the host (a physical write: the text is read-only to the kernel) with each
  encoding (and put back after it), and the kernel's register_kprobe registers a DISABLED
  kprobe there, unregistered at once (KernelProbes,
  probes/booted.py): prepare_kprobe -> arch_prepare_kprobe runs the Image's own decode tables
  (arch/arm/probes/decode-arm.c) and stack checker, no breakpoint is written. The verdict is
  compared with armload's decode_arm (probes/insn.py) mapped to an errno by its
  decode_errno. The kernel's struct kprobe tells more: p->opcode (the word it decoded: proof
  that it read ours), p->ainsn.insn (an instruction slot, or NULL for INSN_GOOD_NO_SLOT),
  p->ainsn.insn_handler (the simulate_*/emulate_* function it chose) and p->ainsn.stack_space
  (a refusal with stack_space < 0 or > MAX_STACK_SIZE is the stack checker's, otherwise the
  decode tables'): the reason of a refusal is compared too.
  The encodings: the 1,447 of tests/probes/test_kprobe_decode.py (arm_sample: the issue's named cases,
  Debian module text, seeded random words) and one word per decode-table entry (table_sample).
  The armmp kernel is an ARM kernel (no CONFIG_THUMB2_KERNEL): its arch_prepare_kprobe decodes
  ARM only, so Thumb encodings cannot be checked against it (they stay checked against the port
  of the tables in tests/oracles/kprobes_decode.py).

* The kernel's own tables, read in the booted kernel: its kprobe_blacklist list (walked from
  the head kprobe_blacklist_seq_next loads) against armload's populate_blacklist (probes/ktext.py),
  entry for entry, and the core-text sites of its sorted __jump_table against armload's
  jump_sites (found in the Image by content).

Removed with armload's model runtime (its Probes on a model Machine were the armload side):
the registration of Image addresses and of MOD:FUNC+OFF points of modules in both. The kernel's
own register_kprobe is what `armload run --probe` uses now (probes/booted.py).

    armload agree kprobes [--json OUT]     # make probes-agree
"""
from __future__ import annotations

import os
import random
import struct
import time
from dataclasses import asdict, dataclass, field

from ..probes import insn as I
from ..probes.base import ProbeError

KERNEL_MAX_STACK_SIZE = 64                 # arch/arm/probes/kprobes/core.c (the kernel's, not probes/insn.py's)
ORACLE_MODULE = os.path.join("lib", "lz4", "lz4_compress.ko")
SAMPLE_MODULES = ("crypto/xor.ko", "crypto/aes_ti.ko", "crypto/adiantum.ko")
SAMPLE_WORDS, SAMPLE_RANDOM, SAMPLE_SEED = 400, 600, 24
PROBE_OK = 0xE1A00000                      # mov r0, r0: accepted anywhere a kprobe may go
MOV_R0_0_BX_LR = struct.pack("<II", 0xE3A00000, 0xE12FFF1E)
# struct kprobe (include/linux/kprobes.h, 6.1, 32-bit): addr 20, opcode 40, ainsn 44 = struct
# arch_probes_insn {insn, insn_handler, insn_check_cc, insn_singlestep, insn_fn, stack_space, ...}
KP_ADDR, KP_OPCODE, KP_SLOT, KP_HANDLER, KP_STACK_SPACE = 20, 40, 44, 48, 64

# The named cases: (source, the word GNU as/keystone assemble it to, the kernel's verdict as
# the issue reads it: 0 or -EINVAL)
NAMED = [("str r0, [r1, sp]", 0xE781000D, -22), ("strh r0, [r1, sp]", 0xE18100BD, -22),
         ("str r0, [sp], #-128", 0xE40D0080, 0), ("str r0, [sp, #-64]", 0xE50D0040, 0),
         ("str r0, [sp, #-68]", 0xE50D0044, -22), ("strd r0, r1, [sp, #-72]", 0xE14D04F8, -22),
         ("strd r0, r1, [sp], #-72", 0xE04D04F8, 0), ("stmdb sp!, {r0-r12, lr}", 0xE92D5FFF, 0),
         ("stmda sp, {r0-r12, lr, pc}", 0xE80DDFFF, 0), ("stmdb sp, {r0-r12, lr, pc}", 0xE90DDFFF, 0),
         ("str r0, [sp, r1]", 0xE78D0001, -22), ("ldr r0, [sp, r1]", 0xE79D0001, 0),
         ("add r0, pc, r1", 0xE08F0001, 0), ("mov r2, pc", 0xE1A0200F, 0), ("ldr r3, [pc, r1]", 0xE79F3001, 0),
         ("str pc, [sp, #-8]", 0xE50DF008, 0), ("add pc, pc, r2, lsl #2", 0xE08FF102, 0),
         ("ldr pc, [pc, r0, lsl #2]", 0xE79FF100, 0), ("stmdb sp!, {r0, pc}", 0xE92D8001, 0),
         ("ssat r0, #8, r13", 0xE6A7001D, 0), ("uxtab r0, sp, r1", 0xE6ED0071, 0),
         ("ldr r0, [pc, #-4]", 0xE51F0004, 0), ("mrc p15, 0, r0, c13, c0, 3", 0xEE1D0F70, -22),
         ("ldr r0, [pc, #-4]!", 0xE53F0004, -22), ("svc #0", 0xEF000000, -22)]


def arm_sample(module_dir: str, n_random: int = SAMPLE_RANDOM, seed: int = SAMPLE_SEED) -> list[int]:
    """The ARM sample of tests/probes/test_kprobe_decode.py (1,447 words): the named encodings, the
    first 400 words of .text of three Debian crypto modules, and seeded random words (two thirds
    with cond = AL) with sp and pc forced into register fields."""
    from elftools.elf.elffile import ELFFile
    ops = [w for _, w, _ in NAMED]
    for rel in SAMPLE_MODULES:
        path = os.path.join(module_dir, rel)
        with open(path, "rb") as fh:
            data = ELFFile(fh).get_section_by_name(".text").data()
        ops += list(struct.unpack(f"<{len(data) // 4}I", data[:len(data) // 4 * 4]))[:SAMPLE_WORDS]
    rng = random.Random(seed)
    for _ in range(n_random):
        w = rng.getrandbits(32)
        if rng.random() < 0.67:
            w = (w & 0x0FFFFFFF) | 0xE0000000
        for shift in (16, 12, 0):
            r = rng.random()
            if r < 0.15:
                w = (w & ~(0xF << shift)) | (13 << shift)
            elif r < 0.25:
                w = (w & ~(0xF << shift)) | (15 << shift)
        ops.append(w)
    return ops


def table_sample() -> list[int]:
    """One word per entry of the ARM decode tables (armload's copy of decode-arm.c's, probes/insn.py) with
    cond = AL where the entry leaves it free, plus variants with pc, then sp, in each register
    field the entry leaves free: every entry and register check is reached at least once (the
    random sample misses exact-match entries such as `mov ip, sp`). The kernel judges them all."""
    out: list[int] = []

    def walk(table):
        for mask, value, kind, payload, _ in table:
            if kind == I.T:
                walk(payload)
                continue
            base = value | (0 if mask & 0xF0000000 else 0xE0000000)
            out.append(base)
            for shift in (16, 12, 8, 0):
                if not (mask >> shift) & 0xF:
                    out.extend((base | (0xF << shift), base | (0xD << shift)))
    walk(I._ARM_TOP)
    return list(dict.fromkeys(out))


def _s32(v: int) -> int:
    return v - (1 << 32) if v & 0x80000000 else v


# --- verdicts -----------------------------------------------------------------------------------
@dataclass
class Verdict:
    errno: int                     # register_kprobe's return: 0 or -errno
    reason: str = ""               # refusals: "stack" (the stack checker), "decoder" (the tables), "address"
    kind: str = ""                 # accepted: "slot" / "no-slot" (kernel), out-of-line/simulate/emulate (armload)
    handler: str = ""              # the kernel's ainsn.insn_handler (accepted) / armload's instruction class
    insns: int = 0                 # kernel: instructions of the registration (kmalloc of the struct + register_kprobe)
    unregister_insns: int = 0      # kernel: unregister_kprobe of an accepted probe


def armload_arm_verdict(op: int) -> Verdict:
    """armload's register_kprobe return for ARM word `op` at a probe-able address."""
    d = I.decode_arm(op)
    err = I.decode_errno(d)
    reason = ("stack" if "store to the stack" in d.what else "decoder") if err else ""
    return Verdict(err, reason, "" if err else d.outcome, d.what)


def _name(image, addr: int) -> str:
    """The Image's kallsyms name of `addr` (`name` or `name+0xoff`), or the bare address."""
    table = image.kallsyms
    pos = table.symbol_pos(addr) if table is not None and addr else None
    if pos is None:
        return f"{addr:#x}"
    i, _size, off = pos
    return table.symbol(i)[2] + (f"+{off:#x}" if off else "")


class KernelDecodeOracle:
    """One booted kernel, one loaded module, one probe-able word of its text: verdict(op)."""

    def __init__(self, k, module_ko: bytes, module_name: str = "oracle"):
        from ..emu.booted.modload import kernel_load
        self.k = k
        r = kernel_load(k, module_ko, name=module_name)
        if r.ret != 0 or not r.core_base:
            raise ProbeError(f"the oracle module {module_name} did not load in the booted kernel: "
                             f"{r.ret} {r.stopped or r.oops_text}")
        self.load = r
        from ..probes.booted import KernelProbes
        self.kp = KernelProbes(k)
        self.pre = self.kp.handler(MOV_R0_0_BX_LR, "kprobe", [], count=False)
        self.addr = self._probe_able(r.core_base, len(r.core_bytes))

    def _probe_able(self, base: int, size: int) -> int:
        """The first word past the module's first instruction where `mov r0, r0` is accepted."""
        for a in range(base + 4, base + min(size, 0x1000), 4):
            if self.verdict(PROBE_OK, a).errno == 0:
                return a
        raise ProbeError("no probe-able word in the oracle module's text")

    def _word(self, addr: int) -> int:
        try:
            return self.k.u32(addr & ~3) if addr else 0
        except Exception:                            # not mapped
            return 0

    def _put(self, addr: int, data: bytes) -> None:
        self.k.write(addr, data)                     # physical: past the text's read-only mapping
        self.k.m.uc.ctl_remove_cache(addr, addr + 4)

    def verdict(self, op: int, addr: int | None = None) -> Verdict:
        """The kernel's verdict on word `op` at the probe word (put back afterwards)."""
        a = self.addr if addr is None else addr
        orig = self.k.read(a, 4)
        self._put(a, struct.pack("<I", op))
        try:
            return self.register(a, expect_opcode=op)
        finally:
            self._put(a, orig)

    def register(self, target, expect_opcode: int | None = None) -> Verdict:
        """A disabled kprobe on `target` (address or FUNC+OFF), unregistered again at once."""
        k, kp = self.k, self.kp
        i0 = k.insns
        try:
            p = kp.kprobe(target, pre=self.pre, disabled=True, count=False)
            err, s = 0, p.struct
        except ProbeError as e:
            p, err, s = None, e.errno, e.struct           # the refused struct kprobe, as the kernel left it
        opcode, slot, handler = k.u32(s + KP_OPCODE), k.u32(s + KP_SLOT), k.u32(s + KP_HANDLER)
        if expect_opcode is None:                    # FUNC+OFF: the word at the address the kernel resolved
            expect_opcode = self._word(k.u32(s + KP_ADDR) if err != -2 else 0)
        space = _s32(k.u32(s + KP_STACK_SPACE))
        v = Verdict(err, insns=k.insns - i0)
        if p is not None:
            i0 = k.insns
            p.unregister()
            v.unregister_insns = k.insns - i0
        # p->opcode is set just before the decode: untouched (0, kzalloc) when an address check refused
        decoded = opcode == expect_opcode and expect_opcode != 0
        if err == 0:
            v.kind, v.handler = ("slot" if slot else "no-slot"), _name(self.k.image, handler)
        elif not decoded:
            v.reason = "address"                     # refused before arch_prepare_kprobe read the word
        else:
            v.reason = "stack" if space < 0 or space > KERNEL_MAX_STACK_SIZE else "decoder"
        return v


@dataclass
class ArmRow:
    op: int
    kernel: Verdict
    armload: Verdict
    named: str = ""

    @property
    def agree(self) -> bool:
        return self.kernel.errno == self.armload.errno and self.kernel.reason == self.armload.reason

    def to_dict(self) -> dict:
        return {"op": f"{self.op:08x}", "named": self.named, "agree": self.agree,
                "kernel": asdict(self.kernel), "armload": asdict(self.armload)}


def compare_arm(oracle: KernelDecodeOracle, ops, names: dict[int, str] | None = None) -> list[ArmRow]:
    names = names or {}
    return [ArmRow(op, oracle.verdict(op), armload_arm_verdict(op), names.get(op, "")) for op in ops]


def arm_summary(rows: list[ArmRow]) -> dict:
    n = len(rows)
    bad = [r for r in rows if not r.agree]
    acc = sum(r.kernel.errno == 0 for r in rows)
    cross: dict[str, int] = {}
    for r in rows:
        if r.kernel.errno == 0:
            key = f"kernel {r.kernel.kind} / armload {r.armload.kind or r.armload.errno}"
            cross[key] = cross.get(key, 0) + 1
    return {"encodings": n, "agree": n - len(bad), "accepted": acc, "refused": n - acc,
            "refused_stack": sum(r.kernel.reason == "stack" for r in rows),
            "named": len([r for r in rows if r.named]),
            "disagreements": [r.to_dict() for r in bad], "accepted_classes": dict(sorted(cross.items())),
            **insn_stats([r.kernel for r in rows])}


def insn_stats(vs: list[Verdict]) -> dict:
    """Instructions per verdict: the registration (refused or accepted), and unregister_kprobe."""
    def mean(xs):
        return round(sum(xs) / max(len(xs), 1))
    reg = [v.insns for v in vs]
    acc = [v.unregister_insns for v in vs if v.errno == 0]
    return {"insns_per_verdict": round((sum(reg) + sum(acc)) / max(len(vs), 1)),
            "register_insns_mean": mean(reg), "register_insns_max": max(reg, default=0),
            "register_insns_accepted_mean": mean([v.insns for v in vs if v.errno == 0]),
            "register_insns_refused_mean": mean([v.insns for v in vs if v.errno]),
            "unregister_insns_mean": mean(acc)}


# --- kernel text ----------------------------------------------------------------------------------
def kernel_blacklist(k) -> list[tuple[int, int]]:
    """The booted kernel's kprobe_blacklist list (kernel/kprobes.c, struct kprobe_blacklist_entry
    {list, start_addr, end_addr}), in order: the head is the literal kprobe_blacklist_seq_next
    loads (seq_list_next(v, &kprobe_blacklist, pos): kallsyms does not name data)."""
    from capstone import CS_ARCH_ARM, CS_MODE_ARM, Cs
    img = k.image
    fn = img.symbols["kprobe_blacklist_seq_next"]
    head = None
    for i in Cs(CS_ARCH_ARM, CS_MODE_ARM).disasm(img.data[fn - img.base:fn - img.base + 32], fn):
        if i.mnemonic == "ldr" and i.op_str.split(", ", 1)[1].startswith("[pc"):
            disp = int(i.op_str.split("#")[1].rstrip("]"), 0) if "#" in i.op_str else 0
            head = img.word(i.address + 8 + disp)
            break
    if head is None:
        raise ProbeError("kprobe_blacklist_seq_next loads no literal: cannot find kprobe_blacklist")
    out, p = [], k.u32(head)
    while p != head:
        out.append((k.u32(p + 8), k.u32(p + 12)))
        p = k.u32(p)
        if len(out) > 100_000:
            raise ProbeError(f"kprobe_blacklist at {head:#x} does not close")
    return out


def kernel_jump_sites(k) -> list[int]:
    """The code addresses of the booted kernel's core __jump_table entries (sorted by the kernel at
    boot; init entries, flagged in bit 1 of the key, left out): __start___jump_table and
    __stop___jump_table are the movw/movt constants jump_label_text_reserved compares."""
    from capstone import CS_ARCH_ARM, CS_MODE_ARM, Cs
    img = k.image
    fn = img.symbols["jump_label_text_reserved"]
    lo: dict[str, int] = {}
    consts = []
    for i in Cs(CS_ARCH_ARM, CS_MODE_ARM).disasm(img.data[fn - img.base:fn - img.base + 64], fn):
        reg, _, imm = i.op_str.partition(", #")
        if i.mnemonic == "movw":
            lo[reg] = int(imm, 0)
        elif i.mnemonic == "movt" and reg in lo:
            consts.append(lo.pop(reg) | int(imm, 0) << 16)
    pairs = [(a, b) for a in consts for b in consts
             if img.etext <= a < b <= img.end and (b - a) % 12 == 0]
    if not pairs:
        raise ProbeError("jump_label_text_reserved: no __start/__stop___jump_table constants found")
    start, stop = pairs[0]
    words = struct.unpack(f"<{(stop - start) // 4}I", k.read(start, stop - start))
    return sorted({words[i] for i in range(0, len(words), 3)
                   if not words[i + 2] & 2 and img.stext <= words[i] < img.etext})


def compare_jump_sites(k, image) -> dict:
    """The kernel's jump label sites in core text against armload's (probes/ktext.py, found by content)."""
    from ..probes.ktext import KernelText
    kernel, mine = set(kernel_jump_sites(k)), KernelText(image).jump_sites
    return {"kernel_sites": len(kernel), "armload_sites": len(mine), "agree": len(kernel & mine),
            "kernel_only": [f"{a:#x}" for a in sorted(kernel - mine)][:50],
            "armload_only": [f"{a:#x}" for a in sorted(mine - kernel)][:50]}


def compare_blacklist(k, image) -> dict:
    """The kernel's kprobe_blacklist against armload's populate_blacklist (probes/ktext.py), entry by entry."""
    from ..probes.ktext import KernelText
    kernel = kernel_blacklist(k)
    mine = [(s, e) for s, e, _ in KernelText(image).populate_blacklist()]
    from collections import Counter
    ks, ms = set(kernel), set(mine)
    both = sum((Counter(kernel) & Counter(mine)).values())          # an entry may be listed twice
    return {"kernel_entries": len(kernel), "armload_entries": len(mine), "same_order": kernel == mine,
            "agree": both, "kernel_only": [[f"{s:#x}", f"{e:#x}"] for s, e in kernel if (s, e) not in ms],
            "armload_only": [[f"{s:#x}", f"{e:#x}"] for s, e in mine if (s, e) not in ks]}


# --- the whole comparison (make probes-agree) -------------------------------------------------------
THUMB_NOTE = ("not checked against the booted kernel: the Debian armmp Image is an ARM kernel (no "
              "CONFIG_THUMB2_KERNEL), its arch_prepare_kprobe decodes ARM only and it has no Thumb "
              "decode tables; decode_thumb stays checked against the port of the tables "
              "(tests/probes/test_kprobe_decode.py, tests/oracles/kprobes_decode.py)")
THUMB_DECODERS = ("thumb16_probes_decode_insn", "thumb32_probes_decode_insn")


@dataclass
class Inputs:
    vmlinuz: str
    module_dir: str                      # lib/modules/<version>/kernel of the same package

    @classmethod
    def default(cls) -> Inputs:
        from ..kernel.debian import MODULES, VMLINUZ
        return cls(VMLINUZ, MODULES)


@dataclass
class OracleBoot:
    """The booted kernel with the oracle module loaded by its own load_module."""
    inputs: Inputs
    oracle: KernelDecodeOracle
    seconds: dict = field(default_factory=dict)

    @classmethod
    def open(cls, inputs: Inputs) -> OracleBoot:
        from ..emu.booted.kernel import BootedKernel
        t0 = time.monotonic()
        k = BootedKernel.get(inputs.vmlinuz)
        t1 = time.monotonic()
        with open(os.path.join(inputs.module_dir, ORACLE_MODULE), "rb") as fh:
            oracle = KernelDecodeOracle(k, fh.read(), os.path.basename(ORACLE_MODULE)[:-3])
        return cls(inputs, oracle, {"restore": round(t1 - t0, 2), "oracle_module": round(time.monotonic() - t1, 2)})


def run(inputs: Inputs | None = None, ops=None) -> dict:
    """Every comparison on the full samples (or the given encodings): the probes-agree result."""
    inputs = inputs or Inputs.default()
    s = OracleBoot.open(inputs)
    k, o = s.oracle.k, s.oracle
    sample = {"named": len(NAMED), "module_text": list(SAMPLE_MODULES), "words_each": SAMPLE_WORDS,
              "random": SAMPLE_RANDOM, "seed": SAMPLE_SEED} if ops is None else "given"
    ops = arm_sample(inputs.module_dir) if ops is None else ops
    names = {w: src for src, w, _ in NAMED}
    t0 = time.monotonic()
    arm_rows = compare_arm(o, ops, names)
    table_rows = compare_arm(o, table_sample())
    t1 = time.monotonic()
    blacklist = compare_blacklist(k, k.image)
    jumps = compare_jump_sites(k, k.image)
    s.seconds.update(arm=round(t1 - t0, 2), tables=round(time.monotonic() - t1, 2))
    return {
        "kernel": os.path.basename(inputs.vmlinuz),
        "oracle": {"module": ORACLE_MODULE, "core_base": f"{o.load.core_base:#x}", "probe_address": f"{o.addr:#x}",
                   "load_insns": o.load.instructions},
        "arm": {**arm_summary(arm_rows), "sample": sample, "named_verdicts": [
            {"src": src, "op": f"{w:08x}", "issue": want, "kernel": r.kernel.errno, "armload": r.armload.errno}
            for (src, w, want), r in zip(NAMED, arm_rows[:len(NAMED)]) if r.op == w],
            "rows": _arm_rows(arm_rows),
            "row_columns": ARM_COLUMNS},
        "arm_tables": {**arm_summary(table_rows), "sample": "table_sample(): one word per decode-table entry, "
                       "with pc and sp in each free register field", "rows": _arm_rows(table_rows),
                       "row_columns": ARM_COLUMNS},
        "blacklist": blacklist,
        "jump_sites": jumps,
        "thumb": {"checked": False, "why": THUMB_NOTE,
                  "thumb_decoder_in_image": any(n in k.image.symbols for n in THUMB_DECODERS)},
        "seconds": s.seconds,
    }


ARM_COLUMNS = ["op", "kernel errno", "kernel reason/class", "kernel insn_handler", "armload errno",
               "armload reason/outcome", "agree"]


def _arm_rows(rows: list[ArmRow]) -> list[list]:
    return [[f"{r.op:08x}", r.kernel.errno, r.kernel.reason or r.kernel.kind, r.kernel.handler,
             r.armload.errno, r.armload.reason or r.armload.kind, r.agree] for r in rows]


def print_summary(res: dict) -> None:
    a, tb = res["arm"], res["arm_tables"]
    print(f"probes-agree: armload's kprobes verdicts against the booted kernel's own register_kprobe "
          f"({res['kernel']}; oracle module {res['oracle']['module']}, probe word {res['oracle']['probe_address']})")
    print(f"  ARM encodings   {a['agree']:>5}/{a['encodings']:<5} agree   ({a['accepted']} accepted, {a['refused']} "
          f"refused, {a['refused_stack']} of them by the stack checker; {a['named']} named cases)")
    print(f"  table entries   {tb['agree']:>5}/{tb['encodings']:<5} agree   (one word per ARM decode-table entry, "
          f"pc/sp in free register fields; {tb['accepted']} accepted, {tb['refused']} refused)")
    bl = res["blacklist"]
    print(f"  kprobe_blacklist{bl['agree']:>5}/{bl['kernel_entries']:<5} agree   (the kernel's list, walked in "
          f"the booted kernel, against armload's populate_blacklist: {bl['armload_entries']} entries, "
          f"{'same order' if bl['same_order'] else 'ORDER DIFFERS'})")
    js = res["jump_sites"]
    print(f"  jump label sites{js['agree']:>5}/{js['kernel_sites']:<5} agree   (the kernel's sorted __jump_table, "
          f"core text, against armload's found by content: {js['armload_sites']} sites)")
    print(f"  Thumb           {'':>11} not checked: the armmp Image is an ARM kernel (no CONFIG_THUMB2_KERNEL, "
          f"no Thumb decode tables in it); checked against the port only")
    print(f"  instructions per verdict: ARM {a['insns_per_verdict']:,} (register_kprobe {a['register_insns_mean']:,}: "
          f"{a['register_insns_accepted_mean']:,} accepted, {a['register_insns_refused_mean']:,} refused; "
          f"unregister_kprobe {a['unregister_insns_mean']:,})")
    print("\n  accepted ARM encodings by class (kernel / armload): "
          + ", ".join(f"{k.replace('kernel ', '')}: {n}" for k, n in a["accepted_classes"].items()))
    for d in a["disagreements"] + tb["disagreements"]:
        print(f"  DISAGREE {d}")
    sec = res["seconds"]
    print(f"\n  {sum(sec.values()):.1f} s: " + ", ".join(f"{k} {v} s" for k, v in sec.items()))


def dumps(res: dict) -> str:
    """JSON with every innermost list (a row) on one line."""
    import json
    import re
    text = json.dumps(res, indent=1)
    return re.sub(r"\[\s*([^\[\]{}]*?)\s*\]", lambda m: "[" + re.sub(r",\s+", ", ", m.group(1)) + "]", text) + "\n"


def report(json_out: str | None = None) -> int:
    """The whole comparison (make probes-agree): the summary printed, the full result written to
    `json_out`; 0 when every verdict, blacklist entry and jump label site agrees, else 1."""
    res = run()
    if json_out:
        with open(json_out, "w") as fh:
            fh.write(dumps(res))
    print_summary(res)
    bl = res["blacklist"]
    js = res["jump_sites"]
    ok = bl["agree"] == bl["kernel_entries"] == bl["armload_entries"] \
        and js["agree"] == js["kernel_sites"] == js["armload_sites"] \
        and all(res[g]["agree"] == res[g]["encodings"] for g in ("arm", "arm_tables"))
    return 0 if ok else 1
