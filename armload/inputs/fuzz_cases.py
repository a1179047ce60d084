"""The fuzzer's cases (fuzz.py): the seeds (the sample modules and plain objects), the mutation
classes, and case number N of a campaign, deterministic in (seed value, N)."""
from __future__ import annotations

import glob
import os
import random
import struct
from dataclasses import dataclass

from ..constants import SHF_ALLOC, SHT_NOBITS, SHT_REL
from ..kernel.config import KernelConfig
from ..loader.elf import ObjectFile, read_object
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
