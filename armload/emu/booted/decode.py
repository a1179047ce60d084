"""The kernel's oops decoded as scripts/decode_stacktrace.sh (Linux 6.1) decodes it.

decode_stacktrace.sh reads the oops line by line. A line with an address (`[<c0123456>]`) or a
symbol (`name+0xoff/0xsize`) goes through handle_line: the `[<...>]` words are dropped, the
timestamp is re-padded (`[%13s`), and the LAST symbol of the line (the one before a `[module]`
word, else the last word) becomes `name (FILE:LINE ...)`, where FILE:LINE are the lines
`addr2line -i` prints for the symbol's address (one per inlined level, joined by spaces, the
kernel's build directory stripped), and the module name follows without brackets. Any other
line is printed as it is. A symbol addr2line knows nothing about keeps its offset/size.

Two differences, both so the output says what it did not decode:
* the address is looked up in the module AS THE KERNEL LOADED IT (armload's loader at the
  kernel's own addresses, debug sections relocated: loader/debug_image.py), where the script
  runs nm/addr2line on the .ko file, whose .text and .init.text both start at 0;
* a frame without debug info (no -dbg vmlinux given, a module without .debug_line, a name
  the symbol table does not have) keeps its symbol and says so: `(no file:line: WHY)`, where
  the script prints the symbol unchanged (and "WARNING! Modules path isn't set" on stderr).
The Code: line goes to scripts/decodecode's steps, with the cross binutils as the script runs
them (ARCH=arm CROSS_COMPILE=arm-linux-gnueabihf-: `.4byte` words assembled, stripped of mapping
symbols, `objdump -S`): "All code" with the trapping instruction marked, then "Code starting
with the faulting instruction"; without those tools the line stays and says so.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile

from ..debuginfo import Addr2Line, module_addr2line

ADDRESS = re.compile(r"\[<([^]]+)>\]")
SYMBOL = re.compile(r"[^+ ]+\+0x[0-9a-f]+/0x[0-9a-f]+")
FRAME = re.compile(r"^[^+ ]+\+0x[0-9a-f]+/0x[0-9a-f]+$")
TEXT = (".text", ".init.text", ".exit.text", ".ref.text", ".sched.text")
SHF_EXECINSTR = 0x4
NO_VMLINUX = "no -dbg vmlinux given"


def decode(oops_text: str, modules=(), vmlinux: str | None = None) -> list[str]:
    """decode_stacktrace.sh's output for `oops_text`. `modules`: the loaded modules (LoadedModule:
    name, .ko path, sections and symbols at the kernel's addresses); `vmlinux`: an ELF with
    DWARF (Debian's linux-image-*-dbg), for the kernel's own frames."""
    d = _Decoder({m.name: m for m in modules}, vmlinux)
    return [x for ln in oops_text.splitlines() for x in d.line(ln).split("\n")]


CROSS = os.environ.get("CROSS_COMPILE", "arm-linux-gnueabihf-")


def decodecode(line: str) -> list[str]:
    """scripts/decodecode on one `Code: w w w (w)` line (ARM words, or Thumb halfwords)."""
    tools = [shutil.which(CROSS + t) for t in ("as", "strip", "objdump")]
    if not all(tools):
        return [line + f"  (not disassembled: scripts/decodecode needs {CROSS}as/strip/objdump)"]
    echoed = " ".join(line.split())                     # `echo $code`: whitespace collapsed
    code = echoed.split("Code: ", 1)[1]
    width = (code.find(" ") + 1 - 1) // 2 if " " in code else len(code) // 2
    typ = {1: "byte", 2: "2byte", 4: "4byte"}.get(width)
    if typ is None:
        return [line + "  (not disassembled: the Code: words are neither bytes, halfwords nor words)"]
    flags = ["-M", "force-thumb"] if width == 2 else []

    def disas(words: str) -> list[str]:
        with tempfile.TemporaryDirectory() as t:
            src, obj = os.path.join(t, "c.s"), os.path.join(t, "c.o")
            with open(src, "w") as f:
                f.write(f"\t.{typ} 0x" + words.replace(" ", ",0x") + "\n")
            for cmd in ([tools[0], "-o", obj, src], [tools[1], obj]):
                if subprocess.run(cmd, capture_output=True).returncode:
                    return []
            out = subprocess.run([tools[2], *flags, "-S", obj], capture_output=True, text=True).stdout
        return [ln for ln in out.splitlines()
                if ln and not any(x in ln for x in ("/tmp", t, "Disassembly", ".text"))]
    marker = code.find("<") + 1 or code.find("(") + 1
    allc = []
    if marker:
        allc = ["All code", "========"] + disas(re.sub(r"[<>()]", "", code))
        code = code[marker:]
    code = re.sub(r"[>)]$", "", re.sub(r"[>)] ", " ", re.sub(r" [<(]", " ", code, count=1), count=1))
    aa = ["Code starting with the faulting instruction", "==========================================="] + disas(code)
    n = len(allc) - len(aa) + 3                          # 1-based line of the trapping instruction
    if allc and 1 <= n <= len(allc):
        allc[n - 1] = re.sub(r"^([^:]*:)(.*)$", "\\1*\\2\t\t<-- trapping instruction", allc[n - 1])
    return [echoed] + allc + [""] + aa


def decode_result(res, modules, vmlinux: str | None = None) -> None:
    """Fill a Result's `decoded` from its oops (nothing without one)."""
    if res.oops:
        res.decoded = decode(res.oops, modules, vmlinux)


def where(sym: str, modules=(), vmlinux: str | None = None) -> str:
    """`name+0xoff/0xsize [mod]` (what follows "PC is at ") with ` (FILE:LINE ...)` appended, or
    ` (no file:line: WHY)`: check's "where"."""
    parts = sym.split()
    module = parts[1].strip("[]") if len(parts) > 1 and parts[1].startswith("[") else ""
    found = _Decoder({m.name: m for m in modules}, vmlinux)._lookup(module, parts[0] if parts else "")
    if isinstance(found, str) or not found:
        return f"{sym} (no file:line: {found or 'the DWARF has no line for it'})"
    return f"{sym} ({' '.join(found)})"


class _Decoder:
    def __init__(self, modules: dict, vmlinux: str | None):
        self.modules = modules
        self.vmlinux = vmlinux
        self.basepath = "auto"
        if vmlinux:                    # handle_line: basepath from kernel_init's file, ".../init/main.c"
            loc = self._lookup("", "kernel_init+0x0/0x0")
            if isinstance(loc, list) and loc:
                self.basepath = re.sub(r"/init/main\.c:.*$", "", loc[0])

    def line(self, line: str) -> str:
        line = line.strip()
        if ADDRESS.search(line) or SYMBOL.search(line):
            return self._handle(line)
        if "Code:" in line:
            return "\n".join(decodecode(line))
        return line

    def _handle(self, line: str) -> str:
        words: list[str | None] = list(line.split())
        last = len(words) - 1
        for i in range(len(words)):
            w = words[i]
            if w is not None and ADDRESS.search(w):
                words[i] = None
            if w == "[" and i + 1 < len(words) and words[i + 1] is not None and words[i + 1].endswith("]"):
                words[i] = None
                words[i + 1] = "[%13s" % words[i + 1]
        if last > 0 and words[last] and re.match(r"^[0-9a-f]+\]", words[last]):     # "[mod buildid]"
            words[last - 1] = f"{words[last - 1]} {words[last]}"
            words[last] = None
            last -= 1
        module = ""
        if words[last] and re.search(r"\[([^]]+)\]", words[last]):
            module = words[last].removeprefix("[").removesuffix("]").split(" ")[0]
            symbol, words[last - 1] = words[last - 1] or "", None
        else:
            symbol = words[last] or ""
        words[last] = None
        symbol = self._symbol(module, symbol)
        return " ".join([w for w in words if w is not None] + [f"{symbol} {module}"])

    def _symbol(self, module: str, symbol: str) -> str:
        symbol = symbol.removeprefix("(").removesuffix(")")
        segment = ""
        if ":" in symbol:
            segment, symbol = symbol.split(":", 1)
            segment += ":"
        found = self._lookup(module, symbol)
        if isinstance(found, str):                   # why not: only a frame-shaped symbol says it
            return segment + symbol + (f" (no file:line: {found})" if FRAME.match(symbol) else "")
        if not found:                                # addr2line's "??:0": the symbol as it was
            return segment + symbol + (" (no file:line: the DWARF has no line for it)" if FRAME.match(symbol) else "")
        code = " ".join(ln.removeprefix(self.basepath + "/") for ln in found)
        return f"{segment}{symbol.rsplit('+', 1)[0]} ({code})"

    def _lookup(self, module: str, symbol: str) -> list[str] | str:
        """addr2line -i of `symbol` (name+0xoff[/0xsize]): its lines, or why there are none."""
        name = symbol.rsplit("+", 1)[0] if "+" in symbol else symbol
        expr = symbol.rsplit("/", 1)[0]
        try:
            off = int(expr.rsplit("+", 1)[1], 16) if "+" in expr else 0
        except ValueError:
            return "not a symbol+offset"
        if module:
            mod = self.modules.get(module)
            if mod is None:
                return f"{module} is not a module armload loaded"
            a2l = module_addr2line(mod)
            if a2l is None:
                return f"{module}: {mod.path} has no .debug_line (a --strip-debug'ged build)"
            base = next((s.addr & ~1 for s in mod.symbols if s.name == name and _code(s.stype, s.name)
                         and (s.section or "").startswith(TEXT)), None)
        else:
            if not self.vmlinux:
                return NO_VMLINUX
            a2l, syms = _vmlinux(self.vmlinux)
            if not a2l:
                return f"{self.vmlinux} has no .debug_line"
            base = syms.get(name)
        if base is None:
            return f"{name} is not a function of {module or 'vmlinux'}"
        return [str(loc) for loc in a2l.lookup(base + off)]


@functools.lru_cache(maxsize=2)
def _vmlinux(path: str) -> tuple[Addr2Line, dict[str, int]]:
    """The vmlinux's DWARF and its functions (nm's t/T: the first of a name wins)."""
    f = open(path, "rb")                   # kept open: pyelftools reads the DWARF from it on demand
    a2l = Addr2Line(f)
    syms: dict[str, int] = {}
    tab = a2l.elf.get_section_by_name(".symtab")
    code = {i for i, sec in enumerate(a2l.elf.iter_sections()) if sec["sh_flags"] & SHF_EXECINSTR}
    for s in tab.iter_symbols() if tab is not None else ():
        if s["st_shndx"] in code and _code(s["st_info"]["type"].removeprefix("STT_").lower(), s.name):
            syms.setdefault(s.name, s["st_value"] & ~1)
    return a2l, syms


def _code(stype: str, name: str) -> bool:
    """nm's t/T: a function or an assembly label in code (not an ARM mapping symbol $a/$d/$t)."""
    return stype in ("func", "notype") and not name.startswith("$")
