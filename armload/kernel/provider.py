"""The simulated kernel: export tables, real or simulated addresses, and loaded modules' exports.

Sources: Module.symvers (name, CRC, owner, export type; no addresses), System.map or
/proc/kallsyms text (real addresses and nm types), a kernel image through `armload.kernel.kallsyms`,
or nothing at all (the built-in default kernel, which gives every symbol a simulated address).
"""
from __future__ import annotations

import bisect
import os
import re
from dataclasses import dataclass, field

from .config import KernelConfig
from ..errors import KernelFileError

# Where simulated addresses go: functions in kernel text (in BL range of the module window),
# data objects in a separate region with room for large structs.
SIM_TEXT_BASE_OFFSET = 0x00100000     # from PAGE_OFFSET: 0xC0100000
SIM_TEXT_SLOT = 16
SIM_DATA_BASE_OFFSET = 0x08000000     # 0xC8000000
SIM_DATA_SLOT = 0x10000               # 64 KiB per data object

_SYMVERS_RE = re.compile(r"^(0x[0-9a-fA-F]+)\t(\S+)\t(\S+)\t(EXPORT_\S+)(?:\t(\S*))?\s*$")
_MAP_RE = re.compile(r"^([0-9a-fA-F]{8,16})\s+([A-Za-z?])\s+(\S+)(?:\s+\[(\S+)\])?\s*$")

# Kernel files smaller than this in all are parsed, not looked up in the setup cache: a 64 KiB
# Module.symvers or System.map parses in ~3 ms, less than keying an entry costs (hashlib loads
# OpenSSL; the kernel floor's sources are read and hashed). Images and Debian's symvers are far above.
CACHE_FROM_BYTES = 64 << 10

TEXT_TYPES = set("TtWw")
DATA_TYPES = set("DdBbRrGgSsVv")


@dataclass
class Export:
    """One exported symbol, as a kernel or module offers it to importers."""
    name: str
    addr: int | None            # None: no real address known (Module.symvers only)
    crc: int | None = None
    owner: str = "vmlinux"      # "vmlinux" or the exporting module's name
    gpl: bool = False           # EXPORT_SYMBOL_GPL
    kind: str = "unknown"       # "func", "data" or "unknown"
    namespace: str = ""


@dataclass
class KernelSymbol:
    """One symbol of the kernel image (System.map, /proc/kallsyms or the vmlinuz's kallsyms)."""

    name: str
    addr: int
    type: str      # nm type char


@dataclass
class Kernel:
    """Everything a module can link against, plus the memory map it lives in."""
    config: KernelConfig
    exports: dict[str, Export] = field(default_factory=dict)
    symbols: dict[str, KernelSymbol] = field(default_factory=dict)   # all known, exported or not
    sources: list[str] = field(default_factory=list)
    default: bool = False          # True: no kernel file was given
    simulated: dict[str, int] = field(default_factory=dict)          # name -> simulated address
    _next_text: int = 0
    _next_data: int = 0
    _sorted: tuple | None = None
    kallsyms: object | None = None     # KallsymsTable when the kernel came from an image
    vermagic: str | None = None        # VERMAGIC_STRING; None: not checked
    image_path: str | None = None      # the kernel image whose code the emulator runs
    vmlinux_debug: str | None = None   # a vmlinux ELF with DWARF (Debian's -dbg): file:line of kernel code
    simulate_all: bool = False         # built-in kernel: invent an address for any undefined symbol
    symvers_vmlinux: dict = field(default_factory=dict, repr=False)   # Module.symvers path -> its vmlinux exports
    image_exports: set = field(default_factory=set, repr=False)       # the image's __ksymtab names

    # --- construction --------------------------------------------------------
    @classmethod
    def from_files(cls, paths: list[str], config: KernelConfig, *, simulate_all: bool = False) -> "Kernel":
        if not paths:
            return cls.builtin(config, simulate_all=simulate_all)
        try:
            small = sum(os.path.getsize(p) for p in paths) < CACHE_FROM_BYTES
        except OSError:
            small = True                     # unreadable: the parser reports it
        if small:
            return cls._from_files(paths, config)
        from .cache import cached
        return cached("kernel", list(paths), repr((list(paths), list(map(os.path.abspath, paths)), config)),
                      lambda: cls._from_files(paths, config))

    @classmethod
    def _from_files(cls, paths: list[str], config: KernelConfig) -> "Kernel":
        k = cls(config=config)
        for p in paths:
            k.add_file(p)
        if k.image_path:
            from .identity import check_symvers_belongs
            for sv, names in k.symvers_vmlinux.items():
                check_symvers_belongs(sv, names, k.image_path, k.image_exports)
        return k

    @classmethod
    def builtin(cls, config: KernelConfig, *, simulate_all: bool = True) -> "Kernel":
        """No kernel file, asked for explicitly: every undefined symbol gets an invented address
        (`simulate_all=False`: none does, every undefined symbol is an Unknown symbol, as the CLI
        does without --kernel unless --simulate-symbols is given)."""
        what = ("every undefined symbol gets an invented address (--simulate-symbols)" if simulate_all else
                "no symbol resolves: give --kernel Module.symvers/vmlinuz")
        return cls(config=config, default=True, simulate_all=simulate_all,
                   sources=[f"built-in kernel: NO REAL KERNEL, {what}"])

    def add_file(self, path: str) -> None:
        try:
            with open(path, "rb") as f:
                head = f.read(64)
        except OSError as e:
            raise KernelFileError(f"{path}: cannot read kernel file: {e.strerror}", file=path) from None
        if _looks_like_image(head):
            from . import kallsyms  # only needed for kernel images
            table = kallsyms.table_from_image(path)
            for addr, typ, name in table:
                self._add_symbol(name, addr, typ)
            self.kallsyms = table           # symbolize() uses the kernel's own rules through it
            n = 0
            if head[:4] == b"\x7fELF" and _has_debug_line(path):
                self.vmlinux_debug = path
            if head[:4] != b"\x7fELF":      # the Image's __ksymtab: every export, data included
                from .image import load_image
                img = load_image(path)
                self.image_exports = set(img.exports)
                for name, addr in img.exports.items():
                    e = self.exports.get(name)
                    if e is None:
                        self.exports[name] = Export(name=name, addr=addr, kind=_kind_of(self.symbols[name].type)
                                                    if name in self.symbols else "data")
                    elif e.addr is None:
                        e.addr = addr
                        e.kind = e.kind if e.kind != "unknown" else ("func" if name in self.symbols else "data")
                    n += 1
                self.image_path = path
            self.sources.append(f"{path} (kallsyms" + (f", {n} exports from __ksymtab" if n else "")
                                + (", DWARF: file:line of kernel code)" if self.vmlinux_debug == path else ")"))
            return
        try:
            text = open(path, encoding="utf-8", errors="replace").read()
        except OSError as e:
            raise KernelFileError(f"{path}: cannot read kernel file: {e.strerror}", file=path) from None
        first = next((ln for ln in text.splitlines() if ln.strip()), "")
        if "real System.map is in" in first:
            raise KernelFileError(f"{path}: this System.map is Debian's placeholder ({first.split(' ', 2)[2]!r}); "
                                  f"use the kernel image (vmlinuz) or Module.symvers instead", file=path)
        if _SYMVERS_RE.match(first):
            self._parse_symvers(path, text)
        elif _MAP_RE.match(first):
            self._parse_map(path, text)
        else:
            raise KernelFileError(
                f"{path}: not a Module.symvers, System.map, /proc/kallsyms or kernel image "
                f"(first line: {first[:60]!r})", file=path)

    def _parse_symvers(self, path: str, text: str) -> None:
        n = 0
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            m = _SYMVERS_RE.match(line)
            if not m:
                raise KernelFileError(f"{path}:{lineno}: malformed Module.symvers line: {line[:80]!r}", file=path)
            crc, name, owner, etype, ns = m.groups()
            owner = "vmlinux" if owner.endswith("vmlinux") else os.path.basename(owner)
            if owner == "vmlinux":
                self.symvers_vmlinux.setdefault(path, set()).add(name)
            ks = self.symbols.get(name)
            prev = self.exports.get(name)       # an image read first: its __ksymtab address stays
            addr = ks.addr if ks else (prev.addr if prev else None)
            kind = _kind_of(ks.type) if ks else (prev.kind if prev else "unknown")
            self.exports[name] = Export(name=name, addr=addr, crc=int(crc, 16),
                                        owner=owner, gpl=etype.endswith("_GPL"),
                                        kind=kind, namespace=ns or "")
            n += 1
        self.sources.append(f"{path} (Module.symvers, {n} exports)")

    def _parse_map(self, path: str, text: str) -> None:
        n = 0
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            m = _MAP_RE.match(line)
            if not m:
                raise KernelFileError(f"{path}:{lineno}: malformed System.map line: {line[:80]!r}", file=path)
            addr, typ, name, mod = m.groups()
            if mod:      # a module's symbol in /proc/kallsyms
                continue
            self._add_symbol(name, int(addr, 16), typ)
            n += 1
        self.sources.append(f"{path} (symbol map, {n} symbols)")

    def _add_symbol(self, name: str, addr: int, typ: str) -> None:
        if name in self.symbols:     # keep the first (lowest-address entries come first)
            return
        self.symbols[name] = KernelSymbol(name, addr, typ)
        self._sorted = None
        e = self.exports.get(name)
        if e is not None and e.addr is None:
            e.addr = addr
            e.kind = _kind_of(typ)
        if name.startswith("__ksymtab_"):
            # System.map carries __ksymtab_<name> for every export: note the export if unknown.
            real = name[len("__ksymtab_"):]
            if real not in self.exports:
                ks = self.symbols.get(real)
                self.exports[real] = Export(name=real, addr=ks.addr if ks else None,
                                            kind=_kind_of(ks.type) if ks else "unknown")
        elif ("__ksymtab_" + name) in self.symbols and name not in self.exports:
            self.exports[name] = Export(name=name, addr=addr, kind=_kind_of(typ))

    # --- lookups ------------------------------------------------------------------
    def find_export(self, name: str) -> Export | None:
        """The export a module may link against, or None (kernel has no such export)."""
        e = self.exports.get(name)
        if e is not None:
            # Module.symvers also lists modules' exports: those exist only once that module is loaded.
            return e if e.owner == "vmlinux" else None
        if self.default and self.simulate_all:
            return Export(name=name, addr=None, owner="vmlinux")
        if not self.exports and name in self.symbols:
            # A bare System.map without __ksymtab_ entries: treat every symbol as exported.
            ks = self.symbols[name]
            return Export(name=name, addr=ks.addr, kind=_kind_of(ks.type))
        return None

    def exporting_module(self, name: str) -> str | None:
        """The module that Module.symvers says exports `name` (for error hints)."""
        e = self.exports.get(name)
        return e.owner if e is not None and e.owner != "vmlinux" else None

    def address_of(self, export: Export, kind_hint: str) -> tuple[int, str]:
        """The export's address and where it came from ("vmlinux" or "simulated")."""
        if export.addr is not None:
            return export.addr, "vmlinux"
        if export.name in self.simulated:
            return self.simulated[export.name], "simulated"
        kind = export.kind if export.kind != "unknown" else kind_hint
        if kind == "data":
            addr = self.config.page_offset + SIM_DATA_BASE_OFFSET + self._next_data * SIM_DATA_SLOT
            self._next_data += 1
        else:
            addr = self.config.page_offset + SIM_TEXT_BASE_OFFSET + self._next_text * SIM_TEXT_SLOT
            self._next_text += 1
            if self.config.thumb2:
                addr |= 1           # a Thumb-2 kernel's functions are Thumb: bit 0 set
        self.simulated[export.name] = addr
        self._sorted = None
        return addr, "simulated"

    def lookup_address(self, name: str) -> int | None:
        if name in self.symbols:
            return self.symbols[name].addr
        if name in self.simulated:
            return self.simulated[name]
        e = self.exports.get(name)
        return e.addr if e else None

    def symbolize(self, addr: int) -> str | None:
        """`name+0xoff/0xsize` for a kernel address (like %pS), or None."""
        if self._sorted is None:             # (addresses, names, simulated addresses), built once
            pairs = {a: n for n, a in self.simulated.items()}
            for ks in self.symbols.values():
                if ks.type in TEXT_TYPES or ks.type in DATA_TYPES:
                    pairs.setdefault(ks.addr, ks.name)
            items = sorted(pairs.items())
            self._sorted = ([a for a, _ in items], [n for _, n in items], set(self.simulated.values()))
        keys, names, sim_addrs = self._sorted
        if self.kallsyms is not None and addr not in sim_addrs:
            hit = self.kallsyms.addr_to_name(addr)
            if hit:
                return hit
        i = bisect.bisect_right(keys, addr) - 1
        if i < 0:
            return None
        start, name = keys[i], names[i]
        end = keys[i + 1] if i + 1 < len(keys) else start + 4
        if name in self.simulated:
            end = min(end, start + (SIM_DATA_SLOT if start >= self.config.page_offset + SIM_DATA_BASE_OFFSET
                                    else SIM_TEXT_SLOT))
        if addr >= end:
            return None
        return f"{name}+{addr - start:#x}/{end - start:#x}"

    def describe(self) -> str:
        return "; ".join(self.sources) if self.sources else "empty kernel"


def _kind_of(typ: str) -> str:
    if typ in TEXT_TYPES:
        return "func"
    if typ in DATA_TYPES:
        return "data"
    return "unknown"


def _has_debug_line(path: str) -> bool:
    """An ELF with a .debug_line section (a vmlinux from Debian's linux-image-*-dbg)."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    try:
        with open(path, "rb") as f:
            return ELFFile(f).get_section_by_name(".debug_line") is not None
    except (OSError, ELFError):
        return False


def _looks_like_image(head: bytes) -> bool:
    if head[:4] == b"\x7fELF":
        return True
    # ARM zImage: magic 0x016f2818 at offset 0x24
    return len(head) >= 0x28 and head[0x24:0x28] == b"\x18\x28\x6f\x01"
