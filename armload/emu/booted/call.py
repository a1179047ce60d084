"""Calls into a loaded module's functions from pid 1's kernel context of the booted kernel.

    run = BootedRun(vmlinuz, kernel, config); run.load("devkit.ko")
    buf = Buffer(32)
    r = run.call("devkit_describe", buf, 32)        # a Result: status, ret (signed r0), console, oops
    buf.bytes                                        # what the function wrote, read from kernel memory

Arguments: int (a register or stack word, as AAPCS passes it), str (a NUL-terminated copy), bytes
and Buffer (a copy; a Buffer is read back from kernel memory afterwards). The copies come from the
kernel's own allocator (__kmalloc(size, GFP_KERNEL)) and stay allocated (the function may keep the
pointer). The function's address is where the kernel's module_alloc put it: armload's image of the
module is the kernel's, byte for byte (modrun.py compares them), so its symbol table at those
addresses is the kernel's kallsyms view of the module.

An oops inside the call is the kernel's: its die() prints the report and make_task_dead (pid 1
exits) ends the run there, as an oops in init ends load_module (modload.py). pid 1 is then dead:
every later call or load in the same BootedRun is refused (status "refused-dead").
"""
from __future__ import annotations

import os
import threading

from ...errors import ArmloadError
from .kernel import CALL_BUDGET, CallError
from .machine import GuestFault
from .modload import _oops, _signed
from .decode import decode_result
from .hostile import stop_class
from .result import Result

INIT_SECTIONS = (".init.text", ".init.data", ".init.rodata", ".exit.text")   # .exit.text: kept in 6.1 (MODULE_UNLOAD)


class Buffer:
    """Kernel memory passed as a pointer; after a call `.bytes`/`.text` read what it holds now."""

    def __init__(self, size: int = 0, data: bytes | None = None):
        self.data = bytes(data) if data is not None else bytes(size)
        self.addr = 0
        self._bk = None

    @property
    def bytes(self) -> bytes:
        return self._bk.read(self.addr, len(self.data)) if self._bk is not None else self.data

    @property
    def text(self) -> str:
        return self.bytes.split(b"\0", 1)[0].decode("utf-8", "replace")

    def __len__(self) -> int:
        return len(self.data)


MAX_BUF = 1 << 20


def parse_arg(spec):
    """One argument from its command-line form: 42, -1, 0x10 (an int); s:TEXT (a C string); b:HEX
    (these bytes, an in/out buffer); buf:N (N zero bytes, an out buffer)."""
    s = str(spec)
    if s.startswith("s:"):
        return s[2:]
    if s.startswith("b:"):
        try:
            return Buffer(data=bytes.fromhex(s[2:]))
        except ValueError:
            raise ArmloadError(f"bad buffer argument {s!r}: b: takes hex digits, e.g. b:00ff10") from None
    if s.startswith("buf:"):
        try:
            n = int(s[4:], 0)
        except ValueError:
            raise ArmloadError(f"bad buffer argument {s!r}: buf:N takes a size, e.g. buf:64") from None
        if not 0 < n <= MAX_BUF:
            raise ArmloadError(f"bad buffer argument {s!r}: the size must be 1..{MAX_BUF}")
        return Buffer(n)
    try:
        return int(s, 0)
    except ValueError:
        raise ArmloadError(f"bad argument {s!r}: an integer, s:TEXT, b:HEX or buf:N") from None


def find_function(session, name: str):
    """(module, symbol) of a function `name` of a loaded module, the last loaded first; an
    ArmloadError naming the functions there are when none has it."""
    for m in reversed(session.modules):
        for s in m.symbols:
            if s.name == name and s.section and s.stype in ("func", "notype"):
                return m, s
    have = sorted({s.name for m in session.modules for s in m.symbols
                   if s.section and s.stype == "func" and not s.name.startswith(("__", "$"))})
    mods = ", ".join(m.name for m in session.modules) or "no module"
    raise ArmloadError(f"call {name}: no function {name!r} in {mods} "
                       f"(functions: {', '.join(have[:20])}{', ...' if len(have) > 20 else ''})")


def place(bk, args) -> tuple[list[int], list[dict]]:
    """Argument words for the call; strings, bytes and buffers copied into __kmalloc'ed memory."""
    words, recs = [], []
    for a in args:
        if isinstance(a, bool):
            a = int(a)
        if isinstance(a, int):
            if not -(1 << 31) <= a < (1 << 32):
                raise ArmloadError(f"argument {a}: does not fit a 32-bit register")
            words.append(a & 0xFFFFFFFF)
            recs.append({"kind": "int", "value": a})
            continue
        if isinstance(a, str):
            data, kind = a.encode() + b"\0", "str"
        elif isinstance(a, (bytes, bytearray)):
            data, kind = bytes(a), "bytes"
        elif isinstance(a, Buffer):
            data, kind = a.data, "buffer"
        else:
            raise ArmloadError(f"cannot pass {type(a).__name__} to a kernel function (int, str, bytes or Buffer)")
        p = bk.kmalloc(max(len(data), 1))
        if not p:
            raise ArmloadError(f"__kmalloc({len(data)}) for an argument returned NULL in the booted kernel")
        bk.write(p, data)
        if isinstance(a, Buffer):
            a.addr, a._bk = p, bk
        words.append(p)
        recs.append({"kind": kind, "addr": p, "size": len(data)})
    return words, recs


class Watchdog:
    """The wall-clock safety net: after `seconds`, the run is stopped (never part of a result's
    meaning: its status is "stopped" and says so)."""

    def __init__(self, m, seconds: float | None):
        self.m, self.seconds, self.fired = m, seconds, False
        self.timer = None

    def _fire(self):
        self.fired = True
        self.m.stop_reason = self.m.wall_stop = f"the wall-clock safety net of {self.seconds:g} s stopped it"
        self.m.uc.emu_stop()

    def __enter__(self):
        if self.seconds:
            self.timer = threading.Timer(self.seconds, self._fire)
            self.timer.daemon = True
            self.timer.start()
        return self

    def __exit__(self, *exc):
        if self.timer is not None:
            self.timer.cancel()
        self.m.wall_stop = None


def end_of(stopped: str, lines: list[str]) -> str:
    """The status of code that did not return, from its stop: an oops (make_task_dead), one of the
    watch's ends (hostile.py: panic, restart, halt, power-off, soft-lockup, hang, time-budget; a
    time budget after the hung-task report is hung-task), or "stopped" (any other guest fault)."""
    if stopped == "oops":
        return "oops"
    cls = stop_class(stopped)
    if cls == "time-budget" and any("blocked for more than" in ln for ln in lines):
        return "hung-task"
    return cls or "stopped"


def run_code(bk, fn, words, *, name: str, path: str, function: str, budget: int = CALL_BUDGET,
             timeout: float | None = None) -> Result:
    """bk.call(fn, *words) with the oops caught at make_task_dead, as a Result."""
    mark, i0 = len(bk.console), bk.insns
    hook = None
    dead = bk.image.symbols.get("make_task_dead")
    if dead:
        def _dead(uc, addr, size, _):
            bk.m.stop_reason = "oops"
            uc.emu_stop()
        hook = bk.hook_code(dead, _dead)
    ret, status, stopped = None, "returned", ""
    try:
        with Watchdog(bk.m, timeout) as wd:
            ret = _signed(bk.call(fn, *words, budget=budget))
    except CallError as e:
        status, stopped = "budget", str(e)
    except GuestFault as e:
        stopped = bk.watch.named(str(e))        # a spin's address with the module's symbol
        status = "stopped" if wd.fired else end_of(stopped, bk.console[mark:])
    finally:
        if hook is not None:
            bk.unhook(hook)
    lines = bk.console[mark:]
    oops = _oops(lines) if status in ("oops", "panic") else ""
    return Result(name, path, ret, status, lines, oops, bk.insns - i0, stopped=stopped, function=function)


def call(run, name: str, *args, budget: int = CALL_BUDGET, timeout: float | None = None) -> Result:
    """`name(*args)` of a loaded module (or a dependency), from pid 1's kernel context (see above)."""
    mod, sym = find_function(run.session, name)
    if run.dead is not None:
        return Result(mod.name, mod.path, None, "refused-dead", [], "", 0, function=name,
                      stopped=f"pid 1 died in an oops in {run.dead}: no further call runs in this kernel")
    if sym.section in INIT_SECTIONS[:3] and mod.name in run.live():
        raise ArmloadError(f"call {name}: it is in {mod.name}'s {sym.section}, which the kernel freed after init")
    words, recs = place(run.bk, args)
    r = run_code(run.bk, sym.addr, words, name=mod.name, path=os.path.abspath(mod.path), function=name,
                 budget=budget, timeout=timeout)
    for rec, a in zip(recs, args):
        if isinstance(a, Buffer) and r.status == "returned":
            rec["hex"] = a.bytes.hex()          # what the function left there
    r.args = recs
    if r.status not in ("returned", "budget", "stopped"):   # an oops, a panic, a hostile end: the machine is done
        run.dead = f"{mod.name}: {name}"
        decode_result(r, run.session.modules, run.session.kernel.vmlinux_debug)
    return r
