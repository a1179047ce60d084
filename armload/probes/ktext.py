"""Kernel image text as a probe target: its functions (kallsyms), and the kprobe blacklist.

register_kprobe's check_kprobe_address_safe (kernel/kprobes.c) accepts core kernel text
(`_stext`..`_etext`) and module text, and refuses with -EINVAL an address within the
blacklist (within_kprobe_blacklist):
  * arch_within_kprobe_blacklist (arch/arm/probes/kprobes/core.c): `__irqentry_text`,
    the entry text (`__entry_text_start`..`__entry_text_end`), the idmap text, and
    `.kprobes.text` (`__kprobes_text_start`..`__kprobes_text_end`: every `__kprobes` function);
  * populate_kprobe_blacklist: every function listed in the `_kprobe_blacklist` section
    (NOKPROBE_SYMBOL; the whole function, by its kallsyms size) and the `noinstr` text.
The `_kprobe_blacklist` section lives in init data, which kallsyms does not name (Debian has no
CONFIG_KALLSYMS_ALL): it is found by content, as the run of words that are all function start
addresses and that holds `do_undefinstr` (NOKPROBE_SYMBOL in arch/arm/kernel/traps.c).

check_kprobe_address_safe also refuses (-EINVAL) a jump label site (jump_label_text_reserved):
the Image's `__jump_table` is data kallsyms does not name either; it is found by content, as the
longest run of `struct jump_entry {code, target, key}` (absolute words on 32-bit ARM) whose code
and target are text and whose key lies past it (find_jump_sites).

An address kallsyms cannot place (kallsyms_lookup_size_offset: neither the Image's text, its
init text nor the vectors page, nor a module) is -ENOENT, before any of these checks.

A kernel function is a `Function` whose module is the `KernelText` object (name "vmlinux").
"""
from __future__ import annotations

import bisect
import struct

from ..kernel.livetext import find_jump_sites, mcount_sites
from .base import Function

AREAS = (("__irqentry_text_start", "__irqentry_text_end", "irqentry text"),
         ("__entry_text_start", "__entry_text_end", "entry text"),
         ("__idmap_text_start", "__idmap_text_end", "idmap text"),
         ("__kprobes_text_start", "__kprobes_text_end", ".kprobes.text (__kprobes)"),
         ("__noinstr_text_start", "__noinstr_text_end", "noinstr text"))
ANCHOR = "do_undefinstr"
GATE_AREA = (0xFFFF0000, 0xFFFF1000)                 # the vectors page: in_gate_area_no_mm, is_kernel_text


class _TextSection:
    name, flags = ".text", 0x6                       # SHF_ALLOC | SHF_EXECINSTR


class KernelText:
    """The Image's text, looked at as kprobes look at it."""

    name = "vmlinux"
    plt_entries = ()                                 # the Image reaches ftrace_caller with a plain bl

    def __init__(self, image):
        self.image = image
        self.stext, self.etext = image.stext, image.etext
        # every kallsyms entry: image.symbols keeps one address per name, and static functions share
        # names (the two process_fetch_insn of trace_kprobe.c and trace_uprobe.c, both NOKPROBE_SYMBOL)
        self.starts, self.names = _functions(image)
        self.areas = [(image.symbols[s], image.symbols[e], what) for s, e, what in AREAS
                      if s in image.symbols and e in image.symbols]
        self.blacklist_table, self.blacklist_at = self._find_blacklist()
        self.nokprobe = set(self.blacklist_table)
        self.inittext = (image.symbols.get("_sinittext", 0), image.symbols.get("_einittext", 0))
        self._jump_sites: set[int] | None = None

    def contains(self, addr: int) -> bool:
        return self.stext <= addr < self.etext

    def section_at(self, addr: int):
        return _TextSection if self.contains(addr) else None

    def region_of(self, addr: int):
        return self if self.contains(addr) else None

    def size_of(self, start: int) -> int:
        i = bisect.bisect_right(self.starts, start)
        return (self.starts[i] if i < len(self.starts) else self.etext) - start

    def function(self, name: str) -> Function | None:
        a = self.image.symbols.get(name)
        if a is None or not self.contains(a & ~1):
            return None
        return Function(self, name, a & ~1, self.size_of(a & ~1), False)

    def function_at(self, addr: int) -> Function | None:
        if not self.contains(addr):
            return None
        i = bisect.bisect_right(self.starts, addr) - 1
        if i < 0:
            return None
        start = self.starts[i]
        return Function(self, self.names[start][0], start, self.size_of(start), False)

    def _find_blacklist(self) -> tuple[list[int], int | None]:
        img = self.image
        anchor = img.symbols.get(ANCHOR)
        if anchor is None:
            return [], None
        starts, data, key = set(self.starts), img.data, struct.pack("<I", anchor)
        best, i = None, data.find(key)
        while i != -1:
            if i % 4 == 0:
                lo, hi = i, i
                while lo >= 4 and struct.unpack_from("<I", data, lo - 4)[0] in starts:
                    lo -= 4
                while hi + 4 <= len(data) and struct.unpack_from("<I", data, hi)[0] in starts:
                    hi += 4
                if best is None or hi - lo > best[1] - best[0]:
                    best = (lo, hi)
            i = data.find(key, i + 1)
        if best is None or best[1] - best[0] < 16:
            return [], None
        lo, hi = best
        return list(struct.unpack_from(f"<{(hi - lo) // 4}I", data, lo)), img.base + lo

    def populate_blacklist(self) -> list[tuple[int, int, str]]:
        """The kprobe_blacklist list populate_kprobe_blacklist builds at boot, as (start, end, why):
        each _kprobe_blacklist function (kprobe_add_ksym_blacklist: start to start + its kallsyms
        size), then every symbol of .kprobes.text and of the noinstr text
        (kprobe_add_area_blacklist). arch_within_kprobe_blacklist's areas are checked apart."""
        def size(entry):                              # kallsyms_lookup_size_offset's size (0: none)
            f = self.function_at(entry)
            return f.size if f is not None else 0
        out = [(f, f + size(f), "_kprobe_blacklist") for f in self.blacklist_table if size(f)]
        for s_name, e_name, what in (("__kprobes_text_start", "__kprobes_text_end", ".kprobes.text"),
                                     ("__noinstr_text_start", "__noinstr_text_end", "noinstr text")):
            entry, end = self.image.symbols.get(s_name), self.image.symbols.get(e_name)
            while entry is not None and end is not None and entry < end:
                n = size(entry)
                if n:
                    out.append((entry, entry + n, what))
                entry += n or 1
        return out

    def kallsyms_places(self, addr: int) -> bool:
        """is_ksym_addr without CONFIG_KALLSYMS_ALL: text, init text, the vectors page."""
        return (self.contains(addr) or self.inittext[0] <= addr < self.inittext[1]
                or GATE_AREA[0] <= addr < GATE_AREA[1])

    @property
    def jump_sites(self) -> set[int]:
        """Code addresses of the Image's __jump_table entries in core text (found by content)."""
        if self._jump_sites is None:
            self._jump_sites = _cached(self.image, "jump_sites", lambda: frozenset(find_jump_sites(self.image)))
        return self._jump_sites

    def is_jump_label_site(self, addr: int) -> bool:
        """jump_label_text_reserved(addr, addr): a jump entry's code (the NOP or `b`) covers addr."""
        return (addr & ~3) in self.jump_sites

    def is_mcount_site(self, addr: int) -> bool:
        """ftrace_location(addr) == addr: the `bl __gnu_mcount_nc` of a -pg function (the Image's
        __mcount_loc is init data kallsyms does not name; the call itself is unambiguous)."""
        return self.contains(addr) and addr in mcount_sites(self.image)

    def blacklisted(self, addr: int) -> str | None:
        """Why within_kprobe_blacklist(addr) is true, or None."""
        for s, e, what in self.areas:
            if s <= addr < e:
                return what
        f = self.function_at(addr)
        if f is not None and f.start in self.nokprobe:
            return f"NOKPROBE_SYMBOL({f.name}) in _kprobe_blacklist"
        if f is not None and "." in f.name:           # foo.constprop.0: the blacklist checks foo
            base = self.function(f.name.split(".")[0])
            if base is not None and base.start in self.nokprobe:
                return f"NOKPROBE_SYMBOL({base.name}) in _kprobe_blacklist ({f.name})"
        return None


def _cached(image, key: str, make):
    """Per-Image results (an Image is analysed once per process: kernel/image.py load_image)."""
    cache = image.__dict__.setdefault("_ktext_cache", {})
    if key not in cache:
        cache[key] = make()
    return cache[key]


def _functions(image) -> tuple[list[int], dict[int, list[str]]]:
    """(sorted function starts in text, names at each address) from every kallsyms entry."""
    def make():
        entries = (list(image.kallsyms) if getattr(image, "kallsyms", None) is not None
                   else [(a, "", n) for n, a in image.symbols.items()])
        starts = sorted({a & ~1 for a, _, n in entries if image.stext <= (a & ~1) < image.etext})
        names: dict[int, list[str]] = {}
        for a, _, n in entries:
            names.setdefault(a & ~1, []).append(n)
        return starts, names
    return _cached(image, "functions" if getattr(image, "kallsyms", None) is not None else "functions-by-name", make)
