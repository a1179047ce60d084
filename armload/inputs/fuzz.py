"""A deterministic mutation fuzzer for the loader (issue 14).

Each case takes one sample module, applies one mutation of one class (byte flips, truncation,
ELF header / section header / symbol / relocation fields set to boundary values, oversized
NOBITS sections, duplicated section headers, corrupted .modinfo, __versions, __ksymtab and
.gnu.linkonce.this_module; since issue 21 also the classes of mutators.py: two fields of one
header changed together, renamed (per-cpu) and duplicated key sections, broken string tables,
non-ELF inputs; the seeds include the plain .o files, loaded with object=True), loads it, and
classifies the result:

* accepted  - loaded; the image must then verify (armload.loader.verify), except at branch sites whose
              relocated word is no longer a B/BL of the relocation's kind (the input broke it);
* refused   - an ArmloadError: the kernel-style refusal;
* internal  - any other exception: a bug in armload.

Cost is measured per case, deterministically where possible: Python function calls (builtins
included, via sys.setprofile) as the operation count, tracemalloc's peak as memory. Both must
stay below a budget proportional to the file and to what the simulated kernel allocated.

    python -m armload.inputs.fuzz --cases 20000 [--seed 1] [--big] [--json]
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import random
import signal
import struct
import threading
import sys
import time
import tracemalloc
from dataclasses import dataclass, field

import numpy as np

from ..kernel.config import KernelConfig
from ..constants import SHF_ALLOC, SHT_NOBITS, SHT_REL
from ..loader.elf import ObjectFile, read_object
from ..errors import ArmloadError
from . import mutators

CLASSES = ("byteflip", "truncate", "ehdr", "shdr", "sym", "rel", "nobits", "dup", "modinfo", "versions",
           "ksymtab", "this_module") + tuple(sorted(mutators.CLASSES)) + ("non_elf",)
KO_ONLY = ("modinfo", "versions", "ksymtab", "this_module")     # need a section a plain .o does not have
BOUNDARY = (0, 1, 2, 3, 4, 7, 8, 0x7F, 0x80, 0xFF, 0x100, 0xFFF, 0x1000, 0xFFFF, 0x10000, 0x7FFFFFFF,
            0x80000000, 0xFFFFFFFF, 0xFFFFFFFE, 0xFFFFFFC0, 0x7FFFFFC0, 0x40000000)
# Oversized NOBITS sizes: all beyond what the simulated kernel can allocate (vmalloc: 248 MiB),
# plus two it can; --big adds 128 MiB (allocatable in vmalloc space, ~0.3 s and that much memory).
NOBITS_SIZES = (0xFFFFFFC0, 0x7FFFFFC0, 0x40000000, 0x10000000, 0x01000000, 0x00100000)
NOBITS_BIG = (0x08000000,)
EHDR_FIELDS = {"e_ident_class": (4, 1), "e_ident_data": (5, 1), "e_type": (16, 2), "e_machine": (18, 2),
               "e_version": (20, 4), "e_entry": (24, 4), "e_phoff": (28, 4), "e_shoff": (32, 4),
               "e_flags": (36, 4), "e_ehsize": (40, 2), "e_shentsize": (46, 2), "e_shnum": (48, 2),
               "e_shstrndx": (50, 2)}
SYM_FIELDS = {"st_name": (0, 4), "st_value": (4, 4), "st_size": (8, 4), "st_info": (12, 1),
              "st_other": (13, 1), "st_shndx": (14, 2)}
PLACEMENTS = ("window", "vmalloc", 0xE0000000)
# Budgets per case (deterministic counts; the wall clock is only a safety net).
OPS_BASE = 300_000              # function calls; load + verify of the largest sample takes ~35k
OPS_PER_BYTE = 20
RUN_BUDGET = 300_000_000        # instructions per load_module (--run): the booted kernel loads and inits
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VMLINUZ = os.path.join(ROOT, ".cache", "linux-image-6.1.0-50-armmp", "boot", "vmlinuz-6.1.0-50-armmp")
RUN_MAX_MEMORY = 1 << 20        # --run skips modules with more module memory (the case's cost stays bounded)
MEM_BASE = 24 << 20             # tracemalloc peak: interpreter churn, numpy, unicorn wrappers
MEM_PER_BYTE = 64               # per byte of file
MEM_PER_ALLOC = 4               # per byte of simulated module memory handed out
WALL_SAFETY = 20.0              # seconds; far above any budgeted case


@dataclass
class Seed:
    path: str
    data: bytes
    obj: ObjectFile
    config: KernelConfig
    shoff: int
    shnum: int
    object: bool = False        # a plain .o: loaded with object=True


@dataclass
class Case:
    index: int
    cls: str
    seed: str
    what: str
    data: bytes
    placement: object


@dataclass
class Outcome:
    case: Case
    kind: str                    # accepted | refused | internal
    detail: str = ""
    ops: int = 0
    mem_peak: int = 0
    allocated: int = 0
    wall: float = 0.0
    verify_unexplained: list = field(default_factory=list)
    over_budget: str = ""


def default_seeds(root: str | None = None) -> list[Seed]:
    root = root or os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "sample_modules")
    out = []
    for p in sorted(glob.glob(os.path.join(root, "*.ko"))):
        if p.endswith("-debug.ko"):
            continue
        data = open(p, "rb").read()
        cfg = KernelConfig(thumb2="thumb2" in os.path.basename(p))
        shoff, = struct.unpack_from("<I", data, 32)
        shnum, = struct.unpack_from("<H", data, 48)
        out.append(Seed(p, data, read_object(p, data), cfg, shoff, shnum))
    for p in sorted(glob.glob(os.path.join(root, "obj", "*.o"))):      # plain objects (issue 21)
        data = open(p, "rb").read()
        cfg = KernelConfig(thumb2="thumb2" in os.path.basename(p))
        shoff, = struct.unpack_from("<I", data, 32)
        shnum, = struct.unpack_from("<H", data, 48)
        out.append(Seed(p, data, read_object(p, data, object=True), cfg, shoff, shnum, object=True))
    return out


# --- mutations ---------------------------------------------------------------------------------
def _boundary(rng: random.Random, seed: Seed, extra=()) -> int:
    ctx = (len(seed.data), len(seed.data) - 1, len(seed.data) + 1, seed.shnum, seed.shnum - 1, seed.shnum + 1,
           seed.obj.symcount, seed.obj.symcount + 1) + tuple(extra)
    return rng.choice(BOUNDARY + ctx)


def _put(b: bytearray, off: int, size: int, value: int) -> None:
    value &= (1 << (8 * size)) - 1
    b[off:off + size] = value.to_bytes(size, "little")


def _shdr(seed: Seed, idx: int, field_no: int) -> int:
    return seed.shoff + 40 * idx + 4 * field_no


def _named(seed: Seed, name: str):
    return seed.obj.section_by_name(name)


def _dup_section(b: bytearray, seed: Seed, idx: int) -> None:
    """Append a copy of section header idx: the table moves to the end of the file, e_shnum + 1."""
    table = bytes(b[seed.shoff:seed.shoff + 40 * seed.shnum]) + bytes(b[seed.shoff + 40 * idx:seed.shoff + 40 * idx + 40])
    pad = (-len(b)) % 4
    b += bytes(pad)
    new_off = len(b)
    b += table
    _put(b, 32, 4, new_off)
    _put(b, 48, 2, seed.shnum + 1)


def mutate(seed: Seed, cls: str, rng: random.Random, big: bool = False) -> tuple[bytes, str]:
    if cls in mutators.CLASSES:          # stacked fields, renamed / duplicated key sections, strings
        return mutators.CLASSES[cls](mutators.Elf(seed.data), rng)
    if cls == "non_elf":
        return mutators.non_elf(seed.data, rng)
    b = bytearray(seed.data)
    o = seed.obj
    n = len(b)
    if cls == "byteflip":
        k = rng.choice((1, 2, 4, 8, 16))
        pos = sorted(rng.randrange(n) for _ in range(k))
        for p in pos:
            b[p] ^= 1 << rng.randrange(8) if rng.random() < 0.7 else rng.randrange(1, 256)
        return bytes(b), f"flip {k} byte(s) at {pos[:4]}"
    if cls == "truncate":
        cut = rng.choice((rng.randrange(n), rng.randrange(64), seed.shoff + rng.randrange(40 * seed.shnum), n - 1))
        return bytes(b[:cut]), f"truncate to {cut}"
    if cls == "ehdr":
        name = rng.choice(sorted(EHDR_FIELDS))
        off, size = EHDR_FIELDS[name]
        v = _boundary(rng, seed)
        _put(b, off, size, v)
        return bytes(b), f"{name} = {v:#x}"
    if cls == "shdr":
        idx = rng.randrange(seed.shnum)
        f = rng.randrange(10)
        v = _boundary(rng, seed)
        _put(b, _shdr(seed, idx, f), 4, v)
        names = ("sh_name", "sh_type", "sh_flags", "sh_addr", "sh_offset", "sh_size", "sh_link", "sh_info",
                 "sh_addralign", "sh_entsize")
        return bytes(b), f"section {idx} ({o.sections[idx].name}) {names[f]} = {v:#x}"
    if cls == "sym":
        st = o.sections[o.symtab_index]
        i = rng.randrange(max(o.symcount, 1))
        name = rng.choice(sorted(SYM_FIELDS))
        off, size = SYM_FIELDS[name]
        v = _boundary(rng, seed, (0xFF00, 0xFFF1, 0xFFF2, 0xFF20))
        _put(b, st.sh_offset + 16 * i + off, size, v)
        return bytes(b), f"symbol {i} {name} = {v:#x}"
    if cls == "rel":
        rels = [s for s in o.sections if s.sh_type == SHT_REL and s.sh_size >= 8]
        s = rng.choice(rels)
        k = rng.randrange(s.sh_size // 8)
        at = s.sh_offset + 8 * k
        what = rng.choice(("r_offset", "type", "sym"))
        info, = struct.unpack_from("<I", b, at + 4)
        if what == "r_offset":
            v = _boundary(rng, seed, (o.sections[s.sh_info].sh_size - 4, o.sections[s.sh_info].sh_size - 3)
                          if s.sh_info < len(o.sections) else ())
            _put(b, at, 4, v)
        elif what == "type":
            v = rng.choice((0, 1, 2, 3, 10, 27, 28, 29, 30, 38, 40, 42, 43, 44, 45, 46, 47, 48, 255,
                            rng.randrange(256)))
            _put(b, at + 4, 4, (info & ~0xFF) | v)
        else:
            v = _boundary(rng, seed) & 0xFFFFFF
            _put(b, at + 4, 4, (v << 8) | (info & 0xFF))
        return bytes(b), f"{s.name}[{k}] {what} = {v:#x}"
    if cls == "nobits":
        cands = [s for s in o.sections[1:] if s.sh_flags & SHF_ALLOC] + \
            [x for x in (_named(seed, n_) for n_ in ("__versions", "__ksymtab", ".modinfo", ".bss")) if x]
        s = rng.choice(cands)
        v = rng.choice(NOBITS_SIZES + (NOBITS_BIG if big else ()))
        _put(b, _shdr(seed, s.index, 1), 4, SHT_NOBITS)
        _put(b, _shdr(seed, s.index, 5), 4, v)
        return bytes(b), f"section {s.index} ({s.name}) NOBITS size {v:#x}"
    if cls == "dup":
        pref = [x for x in (_named(seed, n_) for n_ in (".plt", ".init.plt", ".modinfo", ".gnu.linkonce.this_module",
                                                       "__versions", ".symtab", ".data..percpu")) if x]
        s = rng.choice(pref + [rng.choice(o.sections[1:])])
        _dup_section(b, seed, s.index)
        return bytes(b), f"duplicate section header {s.index} ({s.name})"
    if cls == "modinfo":
        s = _named(seed, ".modinfo")
        body = bytes(b[s.sh_offset:s.sh_offset + s.sh_size])
        how = rng.choice(("no-nul", "no-name", "vermagic", "size", "nobits", "flip"))
        if how == "no-nul":
            b[s.sh_offset:s.sh_offset + s.sh_size] = body.replace(b"\0", b"A")
        elif how == "no-name":
            i = body.find(b"name=")
            if i >= 0:
                b[s.sh_offset + i:s.sh_offset + i + 5] = b"nXme="
        elif how == "vermagic":
            i = body.find(b"vermagic=")
            if i >= 0:
                b[s.sh_offset + i + 9] ^= 0x20
        elif how == "size":
            _put(b, _shdr(seed, s.index, 5), 4, _boundary(rng, seed))
        elif how == "nobits":
            _put(b, _shdr(seed, s.index, 1), 4, SHT_NOBITS)
        else:
            p = s.sh_offset + rng.randrange(max(s.sh_size, 1))
            b[p] = rng.randrange(256)
        return bytes(b), f".modinfo {how}"
    if cls == "versions":
        s = _named(seed, "__versions")
        how = rng.choice(("crc", "name", "size", "nobits", "flags"))
        k = rng.randrange(max(s.sh_size // 64, 1))
        if how == "crc":
            b[s.sh_offset + 64 * k] ^= 1 << rng.randrange(8)
        elif how == "name":
            b[s.sh_offset + 64 * k + 4:s.sh_offset + 64 * k + 64] = bytes([0x41]) * 60
        elif how == "size":
            _put(b, _shdr(seed, s.index, 5), 4, rng.choice((0, 1, 63, 65, s.sh_size - 1, s.sh_size + 64,
                                                           0xFFFFFFC0, 0x7FFFFFC0)))
        elif how == "nobits":
            _put(b, _shdr(seed, s.index, 1), 4, SHT_NOBITS)
            _put(b, _shdr(seed, s.index, 5), 4, rng.choice((s.sh_size, 0xFFFFFFC0, 0x7FFFFFC0)))
        else:
            _put(b, _shdr(seed, s.index, 2), 4, 0)
        return bytes(b), f"__versions {how} (entry {k})"
    if cls == "ksymtab":
        s = _named(seed, "__ksymtab") or _named(seed, "__ksymtab_gpl")
        if s is None:           # only the exporter has one: pick __versions as the table to mangle
            s = _named(seed, "__versions")
        how = rng.choice(("size", "nobits", "entry", "rel", "flags"))
        if how == "size":
            _put(b, _shdr(seed, s.index, 5), 4, rng.choice((0, 1, 11, 13, 24, s.sh_size + 12, 0x8000000 if big
                                                           else 0x10000000, 0xFFFFFFF4)))
        elif how == "nobits":
            _put(b, _shdr(seed, s.index, 1), 4, SHT_NOBITS)
            _put(b, _shdr(seed, s.index, 5), 4, rng.choice((s.sh_size, 0x1000000) + ((0x8000000,) if big else ())))
        elif how == "entry":
            p = s.sh_offset + rng.randrange(max(s.sh_size, 1))
            b[p] = rng.randrange(256)
        elif how == "rel":
            r = next((x for x in o.sections if x.sh_type == SHT_REL and x.sh_info == s.index and x.sh_size), None)
            if r is not None:
                k = rng.randrange(r.sh_size // 8)
                _put(b, r.sh_offset + 8 * k, 4, rng.choice((0, 4, 8, s.sh_size, 0xFFFFFFFF)))
        else:
            _put(b, _shdr(seed, s.index, 2), 4, 0)
        return bytes(b), f"{s.name} {how}"
    if cls == "this_module":
        s = _named(seed, ".gnu.linkonce.this_module")
        how = rng.choice(("size", "flags", "nobits", "name", "init-reloc", "rename"))
        if how == "size":
            _put(b, _shdr(seed, s.index, 5), 4, rng.choice((0, 4, 0xCC, 0x23C, 0x240, 0x244, 0x10000, 0xFFFFFFFF)))
        elif how == "flags":
            _put(b, _shdr(seed, s.index, 2), 4, rng.choice((0, 2, 6, 7, 0xFFFFFFFF)))
        elif how == "nobits":
            _put(b, _shdr(seed, s.index, 1), 4, SHT_NOBITS)
        elif how == "name":
            b[s.sh_offset + 12:s.sh_offset + 72] = bytes([0x41]) * 60
        elif how == "init-reloc":
            r = next((x for x in o.sections if x.sh_type == SHT_REL and x.sh_info == s.index), None)
            if r is not None:
                k = rng.randrange(r.sh_size // 8)
                _put(b, r.sh_offset + 8 * k, 4, rng.choice((0xC8, 0xD0, 0x230, 0x23C, 0x240, 0xCC)))
        else:
            sh = o.sections[struct.unpack_from("<H", b, 50)[0]]
            at = bytes(b[sh.sh_offset:sh.sh_offset + sh.sh_size]).find(b".gnu.linkonce.this_module\0")
            b[sh.sh_offset + at + 24] = ord("X")
        return bytes(b), f"this_module {how}"
    raise ValueError(f"unknown mutation class {cls!r}")


def make_case(seeds: list[Seed], index: int, seed_value: int = 1, big: bool = False) -> tuple[Case, Seed]:
    rng = random.Random(f"{seed_value}:{index}")
    cls = CLASSES[index % len(CLASSES)]
    pool = [s for s in seeds if not s.object] if cls in KO_ONLY else seeds
    if cls == "ksymtab":
        pool = [s for s in seeds if s.obj.section_by_name("__ksymtab")] or seeds
    sd = pool[(index // len(CLASSES)) % len(pool)]
    data, what = mutate(sd, cls, rng, big)
    placement = PLACEMENTS[(index // (len(CLASSES) * len(pool))) % len(PLACEMENTS)] if rng.random() < 0.5 \
        else rng.choice(PLACEMENTS)
    return Case(index, cls, os.path.basename(sd.path), what, data, placement), sd


# --- running one case --------------------------------------------------------------------------
class _SafetyNet(BaseException):
    """Raised by the wall-clock alarm; not an Exception, so nothing inside armload swallows it."""


def _alarm(signum, frame):
    raise _SafetyNet()


class _OpCounter:
    def __init__(self):
        self.n = 0

    def __call__(self, frame, event, arg):
        if event == "call" or event == "c_call":
            self.n += 1


def _relocated_words(mod, data: bytes | None) -> np.ndarray:
    """Sorted final addresses of every relocated word of the input (all types, all sections)."""
    if data is None:
        return np.unique(mod.branches["place"].astype(np.int64))
    obj = read_object(mod.path, data, object=True)
    addr = {s.index: s.addr for s in mod.sections}
    parts = [np.asarray(rel["r_offset"], dtype=np.int64) + addr[obj.sections[i].sh_info]
             for i, rel in obj.rels.items() if obj.sections[i].sh_info in addr]
    return np.sort(np.concatenate(parts)) if parts else np.zeros(0, np.int64)


def _unexplained(mod, res, data: bytes | None = None) -> list[str]:
    """Branch failures at sites that still hold an unconditional-kind B/BL (or B.W/BL) after
    relocation: those are armload's fault. Any other word at a branch site came from the input,
    and so does a site that a second relocation of the input overlaps (it reads or overwrites
    the first one's result, as in the kernel)."""
    out = []
    words = _relocated_words(mod, data)
    stype = {s.name: s.stype for s in mod.symbols}
    if data is not None:
        # by symbol index, not name: names may be empty or shared (section symbols, mutated names)
        st_type = read_object(mod.path, data, object=True).symtab["st_info"] & 0xF
        br = mod.branches
        place_func = {}
        for place, sym in zip(br["place"].tolist(), br["sym"].tolist()):
            is_func = sym < len(st_type) and int(st_type[sym]) == 2
            place_func[place] = place_func.get(place, False) or is_func
    for f in res.branch_failures:
        lo, hi = np.searchsorted(words, [f.site - 3, f.site + 4])
        if hi - lo > 1:
            continue          # overlapping relocations in the input
        if f.expected & ~1 == 0:
            continue          # a NULL target (weak undefined): the kernel's branch goes to 0 either way
        func = place_func.get(f.site, False) if data is not None else stype.get(f.symbol) == "func"
        if f.actual is not None and (f.actual & ~1) == (f.expected & ~1) and not func:
            continue          # not a function: 6.1 branches without interworking, by design
        try:
            w, = struct.unpack("<I", mod.read(f.site, 4))
        except ValueError:
            out.append(f.format())
            continue
        if f.rtype.startswith("R_ARM_THM"):
            upper, lower = w & 0xFFFF, w >> 16
            branch = (upper & 0xF800) == 0xF000 and (lower & 0xD000) in (0xD000, 0x9000)
        else:
            branch = ((w >> 25) & 7) == 5 and (w >> 28) != 0xF
        if branch:
            out.append(f.format())
    out.extend(p.format() for p in res.plt_failures)
    return out


def booted_init(loads: list[tuple[str, bytes]], thumb2: bool = False) -> str:
    """'init: ...' for the files `loads` [(name, bytes)] loaded in order, each in the booted Debian
    kernel with its own load_module (init included) in one fresh restore, stopping at the first
    that does not return 0. Module code runs only there: without the image, or for a Thumb-2
    module (the Debian kernel is an ARM kernel), it is not run, and the result says so. The
    kernel's instructions are not Python operations: the profile counter is off meanwhile."""
    if thumb2:
        return "init: not run (Thumb-2: the Debian kernel is an ARM kernel, no CONFIG_THUMB2_KERNEL)"
    if not os.path.exists(VMLINUZ):
        return "init: not run (no kernel image: module code runs only inside the booted kernel; make test-inputs)"
    from ..emu.booted.kernel import BootedKernel
    from ..emu.booted.machine import GuestFault
    from ..emu.booted.modload import kernel_load
    from ..emu.errno import errno_name
    prof = sys.getprofile()
    sys.setprofile(None)
    try:
        k = BootedKernel.get(VMLINUZ)
        for name, data in loads:
            r = kernel_load(k, data, name=name, budget=RUN_BUDGET)
            if r.ret != 0 or r.oops_text or r.stopped:
                break
    except GuestFault as e:
        return f"init: the booted machine stopped: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
    finally:
        sys.setprofile(prof)
    if r.oops_text:
        return "init: oops"
    if r.stopped:
        return f"init: stopped ({r.stopped})"
    return "init: returned 0" if r.ret == 0 else f"init: load_module returned {r.ret} ({errno_name(r.ret)})"


def run_case(case: Case, seed: Seed, kernels: dict, verify: bool = True, measure: bool = True,
             run: bool = False) -> Outcome:
    from ..loader.session import Session
    from ..loader.verify import verify_module
    cfg = seed.config
    kernel = kernels[cfg]
    session = Session(kernel, cfg, case.placement)
    if os.path.basename(seed.path).startswith("importer-"):
        # its imports come from the (unmutated) exporter of the same build
        session.load(seed.path.replace("importer-", "exporter-"))
    peak_alloc = [0]
    orig_alloc = session.allocator.alloc

    def alloc(size):
        a = orig_alloc(size)
        peak_alloc[0] += size
        return a
    session.allocator.alloc = alloc
    counter = _OpCounter()
    out = Outcome(case, "accepted")
    t0 = time.perf_counter()
    armed = threading.current_thread() is threading.main_thread()
    if armed:
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, WALL_SAFETY)
    if measure:
        tracemalloc.reset_peak()
        base_mem = tracemalloc.get_traced_memory()[0]
        sys.setprofile(counter)
    try:
        mod = session.load(f"fuzz-{case.index}-{case.seed}", case.data, object=seed.object)
        if verify:
            res = verify_module(mod, kernel)
            if not res.ok:
                out.verify_unexplained = _unexplained(mod, res, case.data)
        if run and sum(r.size for r in mod.regions) > RUN_MAX_MEMORY:
            out.detail = "init: not run (module memory above RUN_MAX_MEMORY)"
        elif run:
            loads = [(os.path.basename(m.path), open(m.path, "rb").read()) for m in session.modules[:-1]]
            out.detail = booted_init(loads + [(mod.name, case.data)], cfg.thumb2)
    except ArmloadError as e:
        out.kind, out.detail = "refused", f"{type(e).__name__}: {str(e).splitlines()[0]}"
    except Exception as e:           # noqa: BLE001 - this is what the fuzzer looks for
        out.kind, out.detail = "internal", f"{type(e).__name__}: {e}"
    except _SafetyNet:
        out.kind, out.detail = "internal", f"no result after the {WALL_SAFETY} s wall-clock safety net"
        out.over_budget = out.detail
    finally:
        if armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        if measure:
            sys.setprofile(None)
            out.mem_peak = tracemalloc.get_traced_memory()[1] - base_mem
    out.wall = time.perf_counter() - t0
    out.ops = counter.n
    out.allocated = peak_alloc[0]
    if measure:
        ops_budget = OPS_BASE + OPS_PER_BYTE * len(case.data)
        mem_budget = MEM_BASE + MEM_PER_BYTE * len(case.data) + MEM_PER_ALLOC * out.allocated
        if out.over_budget:
            pass
        elif out.ops > ops_budget:
            out.over_budget = f"{out.ops} operations > budget {ops_budget}"
        elif out.mem_peak > mem_budget:
            out.over_budget = f"memory peak {out.mem_peak} > budget {mem_budget}"
        elif out.wall > WALL_SAFETY:
            out.over_budget = f"wall clock {out.wall:.1f} s > safety net {WALL_SAFETY} s"
    return out


@dataclass
class Stats:
    cases: int = 0
    by_class: dict = field(default_factory=dict)          # class -> {accepted, refused, internal}
    internal: list = field(default_factory=list)
    unverified: list = field(default_factory=list)
    over_budget: list = field(default_factory=list)
    max_ops: int = 0
    max_mem: int = 0
    max_wall: float = 0.0
    refusals: dict = field(default_factory=dict)          # first words of the message -> count
    runs: dict = field(default_factory=dict)              # accepted cases: the booted kernel's load -> count

    def add(self, o: Outcome) -> None:
        self.cases += 1
        c = self.by_class.setdefault(o.case.cls, {"accepted": 0, "refused": 0, "internal": 0})
        c[o.kind] += 1
        if o.kind == "internal":
            self.internal.append(f"case {o.case.index} [{o.case.cls}] {o.case.seed} {o.case.what} "
                                 f"@{o.case.placement}: {o.detail}")
        if o.verify_unexplained:
            self.unverified.append(f"case {o.case.index} [{o.case.cls}] {o.case.seed} {o.case.what}: "
                                   f"{o.verify_unexplained[0]}")
        if o.over_budget:
            self.over_budget.append(f"case {o.case.index} [{o.case.cls}] {o.case.seed} {o.case.what}: "
                                    f"{o.over_budget}")
        if o.kind == "accepted" and o.detail.startswith("init: "):
            k = " ".join(o.detail[6:].split()[:2]).rstrip(":")
            self.runs[k] = self.runs.get(k, 0) + 1
        if o.kind == "refused":
            key = o.detail.split(": ", 1)[0] + ": " + " ".join(o.detail.split(": ", 2)[-1].split()[:4])
            self.refusals[key] = self.refusals.get(key, 0) + 1
        self.max_ops = max(self.max_ops, o.ops)
        self.max_mem = max(self.max_mem, o.mem_peak)
        self.max_wall = max(self.max_wall, o.wall)

    def to_dict(self) -> dict:
        return {"cases": self.cases, "by_class": self.by_class, "internal_errors": len(self.internal),
                "internal": self.internal[:50], "unverified": self.unverified[:50],
                "over_budget": self.over_budget[:50], "init_runs": self.runs, "max_ops": self.max_ops, "max_mem_peak": self.max_mem,
                "max_wall_s": round(self.max_wall, 3)}

    def format(self) -> str:
        lines = [f"cases: {self.cases}", f"{'class':<12} {'accepted':>9} {'refused':>9} {'internal':>9}"]
        tot = {"accepted": 0, "refused": 0, "internal": 0}
        for cls in CLASSES:
            c = self.by_class.get(cls)
            if not c:
                continue
            lines.append(f"{cls:<12} {c['accepted']:>9} {c['refused']:>9} {c['internal']:>9}")
            for k in tot:
                tot[k] += c[k]
        lines.append(f"{'total':<12} {tot['accepted']:>9} {tot['refused']:>9} {tot['internal']:>9}")
        lines.append(f"internal errors: {len(self.internal)}; accepted but not verifying: {len(self.unverified)}; "
                     f"over budget: {len(self.over_budget)}")
        lines.append(f"max per case: {self.max_ops} operations, {self.max_mem / 2**20:.1f} MiB traced peak, "
                     f"{self.max_wall:.2f} s wall")
        for title, items in (("internal", self.internal), ("unverified", self.unverified),
                             ("over budget", self.over_budget)):
            for x in items[:20]:
                lines.append(f"  {title}: {x}")
        if self.runs:
            lines.append("accepted cases loaded and inited by the booted kernel: " +
                         ", ".join(f"{k} {n}" for k, n in sorted(self.runs.items(), key=lambda kv: -kv[1])))
        top = sorted(self.refusals.items(), key=lambda kv: -kv[1])[:12]
        if top:
            lines.append("most frequent refusals:")
            lines.extend(f"  {n:>6}  {k}" for k, n in top)
        return "\n".join(lines)


def campaign(n_cases: int, seed_value: int = 1, *, big: bool = False, verify: bool = True,
             measure: bool = True, run: bool = False, seeds: list[Seed] | None = None, progress=None) -> Stats:
    from ..kernel.provider import Kernel
    seeds = seeds or default_seeds()
    symvers = os.path.join(os.path.dirname(seeds[0].path), "Module.symvers")
    kernels = {}
    for s in seeds:
        if s.config not in kernels:
            kernels[s.config] = Kernel.from_files([symvers], s.config)
    warm = next((s for s in seeds if not s.object and not s.config.thumb2), None)
    if run and warm is not None:
        # the booted path's one-time setup (imports, caches) is not case 0's cost: one unmutated load
        # first (case 0 went 55 MB over its memory budget without it)
        booted_init([(os.path.basename(warm.path), warm.data)])
    stats = Stats()
    started = not measure or tracemalloc.is_tracing()
    if not started:
        tracemalloc.start()
    try:
        for i in range(n_cases):
            case, sd = make_case(seeds, i, seed_value, big)
            stats.add(run_case(case, sd, kernels, verify=verify, measure=measure, run=run))
            if progress and (i + 1) % 250 == 0:
                progress(i + 1, stats)
    finally:
        if not started:
            tracemalloc.stop()
    return stats


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m armload.inputs.fuzz", description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=int, default=2000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--big", action="store_true", help="also 128 MiB NOBITS sections (allocatable; slower)")
    p.add_argument("--no-verify", action="store_true")
    p.add_argument("--run", action="store_true", help=f"also load each accepted module with the booted Debian "
                                                      f"kernel's own load_module, init included ({RUN_BUDGET:,} "
                                                      f"instructions)")
    p.add_argument("--no-measure", action="store_true", help="skip the operation/memory accounting (faster)")
    p.add_argument("--json", metavar="FILE", help="also write the numbers as JSON")
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    stats = campaign(a.cases, a.seed, big=a.big, verify=not a.no_verify, measure=not a.no_measure, run=a.run,
                     progress=lambda n, s: print(f"... {n} cases, {len(s.internal)} internal errors, "
                                                 f"max {s.max_wall:.2f} s/case", file=sys.stderr, flush=True))
    print(stats.format())
    print(f"wall: {time.perf_counter() - t0:.1f} s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(stats.to_dict(), f, indent=2)
    return 1 if stats.internal or stats.unverified or stats.over_budget else 0


if __name__ == "__main__":
    sys.exit(main())
