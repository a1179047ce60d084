"""Unit-testing kernel modules like ordinary Python code (the library behind the pytest plugin).

    from armload.devkit.testing import load_module
    dk = load_module("devkit-arm-debug.ko", params={"count": 2})
    assert dk.init() == 0
    assert dk.call("devkit_sum", 3) == 3
    buf = dk.buffer(32)
    dk.call("devkit_describe", buf, 32)
    assert buf.text == "devkit/t0:2"

A `ModuleHandle` owns one emulated machine (the Debian kernel image when given, else the built-in
kernel) with the module and its dependencies loaded. `init()`/`call()` return the function's
int result and raise `ModuleOops` (the oops as the kernel prints it) when it faults, and
`ModuleStopped` (its base class) when it only stopped: an unmodelled call or the budget; `run()` returns the raw RunResult instead.
Arguments: int, str (copied into kernel memory as a C string), bytes (a buffer), `buffer(n)`.
Kernel functions can be replaced for this handle only (`replace`, `returns`), the n-th
kmalloc made to fail (`fail_kmalloc`), timers and work run (`run_pending`).
"""
from __future__ import annotations

import os
import struct as _struct

from ..errors import ArmloadError

DEBIAN_KREL = "6.1.0-50-armmp"
KMALLOC_KINDS = ("kmalloc", "kvmalloc", "kmem_cache_alloc", "devm_kmalloc")


class ModuleStopped(AssertionError):
    """The run stopped without a fault: a call armload does not simulate (`.unmodelled` names
    it) or the instruction budget. Not an oops: nothing faulted."""

    def __init__(self, result):
        self.result = result
        f = result.fault
        self.unmodelled = f.unmodelled if f is not None else None
        text = f.format() if f is not None else result.summary()
        super().__init__(f"{result.summary()}\n{text}")


class ModuleOops(ModuleStopped):
    """The module's code faulted: the message is the oops as the kernel prints it."""


REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILTIN = "builtin"             # --armload-kernel builtin: armload's built-in kernel, asked for by name
HOW_TO_GET = (f"fetch Debian's image once with `make test-inputs` in {REPO_ROOT} (it lands in "
              f"{os.path.join(REPO_ROOT, '.cache', f'linux-image-{DEBIAN_KREL}', 'boot')}), then pass "
              f"--armload-kernel PATH, set $ARMLOAD_KERNEL, or put `armload_kernel = PATH` in pytest.ini "
              f"([pytest]); `--armload-kernel builtin` runs on armload's built-in kernel (Python models only)")


def cache_image(root: str | None) -> str | None:
    """The Debian image under <root>/.cache, if it is there."""
    if not root:
        return None
    p = os.path.join(root, ".cache", f"linux-image-{DEBIAN_KREL}", "boot", f"vmlinuz-{DEBIAN_KREL}")
    return p if os.path.exists(p) else None


def find_kernel(option: str | None = None, ini: str | None = None, root: str | None = None) -> tuple[str | None, str]:
    """(path, where it came from): an explicit option, the ini value, $ARMLOAD_KERNEL, the test
    tree's .cache, armload's own checkout's .cache (where `make test-inputs` puts it). path is
    None for `builtin`; ArmloadError with the fix when there is nothing."""
    for value, where in ((option, "--armload-kernel"), (ini, "armload_kernel (ini)"),
                         (os.environ.get("ARMLOAD_KERNEL"), "$ARMLOAD_KERNEL")):
        if value:
            if value == BUILTIN:
                return None, where
            if not os.path.exists(value):
                raise ArmloadError(f"{where}: no such kernel file {value!r}; {HOW_TO_GET}")
            return value, where
    for r in (root, REPO_ROOT):
        p = cache_image(r)
        if p:
            return p, f"{r}/.cache"
    raise ArmloadError(f"no kernel image for the armload fixtures: {HOW_TO_GET}")


def default_kernel_path(root: str | None = None) -> str | None:
    """$ARMLOAD_KERNEL, else the Debian image under <root>/.cache or armload's checkout (None when absent)."""
    try:
        return find_kernel(root=root or os.getcwd())[0]
    except ArmloadError:
        return None


def make_kernel(path: str | None = None, *, thumb2: bool = False):
    """A Kernel from the image (or symbol files) at `path`; the built-in kernel when None."""
    from ..kernel.config import DEBIAN_ARMMP
    from ..kernel.provider import Kernel
    import dataclasses
    config = dataclasses.replace(DEBIAN_ARMMP, thumb2=thumb2)
    if path:
        return Kernel.from_files([path], config)
    return Kernel.from_files([], config, simulate_all=True)


class Buffer:
    """Kernel memory passed as a pointer; after a call, `.bytes`/`.text` show what it holds."""

    def __init__(self, size: int = 0, data: bytes | None = None):
        self.data = bytes(data) if data is not None else bytes(size)
        self.addr = 0
        self._handle = None

    @property
    def bytes(self) -> bytes:
        return self._handle.read(self.addr, len(self.data)) if self._handle else self.data

    @property
    def text(self) -> str:
        b = self.bytes
        return b.split(b"\0", 1)[0].decode("utf-8", "replace")

    def __len__(self) -> int:
        return len(self.data)


class ModuleHandle:
    def __init__(self, path: str, *, kernel=None, params=None, deps=(), thumb2: bool | None = None,
                 budget: int | None = None, unmodelled: str = "fail", console=None, coverage: bool = False):
        from ..emu import Machine
        from ..emu.models import default_library
        from ..loader.session import Session
        import dataclasses
        kernel = kernel if kernel is not None else make_kernel(default_kernel_path())
        if thumb2 is None:
            thumb2 = "thumb2" in os.path.basename(path)
        from ..kernel.isa import refuse_thumb2_on_arm
        refuse_thumb2_on_arm(getattr(kernel, "image_path", None), thumb2)
        config = dataclasses.replace(kernel.config, thumb2=thumb2)
        self.session = Session(kernel, config)
        self.deps = [self.session.load(d) for d in deps]
        self.module = self.session.load(path)
        self.name = self.module.name
        self.models = default_library()
        kw = {"budget": budget} if budget else {}
        self.machine = Machine(self.deps + [self.module], kernel, models=self.models, unmodelled=unmodelled,
                               console=console, **kw)
        self.last = None
        self._params = params
        self._fail = None
        self.machine.heap.fail = self._should_fail
        self._kmallocs = 0
        self._coverage = None
        if coverage:
            from ..emu.coverage import Coverage
            self._coverage = Coverage(self.machine, [self.module])

    def coverage(self, lcov: str | None = None):
        """The module's coverage so far (ModuleCoverage: .summary(), ran/instructions, lines,
        functions); `lcov` also writes the tracefile. Needs load_module(..., coverage=True)."""
        if self._coverage is None:
            raise ArmloadError("coverage was not recorded: load_module(path, coverage=True)")
        from ..emu.coverage import write_lcov
        reps = self._coverage.report()
        if lcov:
            write_lcov(reps, lcov)
        return reps[0]

    # --- running ----------------------------------------------------------------------
    def set_params(self, params) -> None:
        """insmod parameters: {"count": 3, "verbose": True} or "count=3 verbose"."""
        from ..emu.params import apply_params
        words = params
        if isinstance(params, dict):
            words = [k if v is True else f"{k}={_param_text(v)}" for k, v in params.items() if v is not False]
        out = apply_params(self.machine, self.module, words)
        if not out.ok:
            raise ArmloadError(f"{out.summary()}: " + "; ".join(out.log))
        return out

    def init(self, *, deps: bool = True) -> int:
        """insmod: the dependencies' inits, the parameters, then init_module; its return value."""
        if deps:
            for d in self.deps:
                self._check(self.machine.run_init(d))
        if self._params:
            self.set_params(self._params)
            self._params = None
        return self._check(self.machine.run_init(self.module))

    def exit(self) -> None:
        """rmmod: cleanup_module."""
        self._check(self.machine.run_exit(self.module))

    def run(self, name: str, *args):
        """Call `name(*args)`; the RunResult whatever happened."""
        from ..emu import callargs
        specs = []
        for a in args:
            if isinstance(a, Buffer):
                if not a.addr:
                    a.addr = self.machine.heap.alloc(max(len(a.data), 1), kind="test buffer")
                    self.machine.write(a.addr, a.data)
                    a._handle = self
                specs.append(callargs.Arg("buffer", "int", a.addr))
            elif isinstance(a, bool):
                specs.append(callargs.parse(int(a)))
            elif isinstance(a, int):
                specs.append(callargs.parse(a))
            elif isinstance(a, str):
                specs.append(callargs.parse("s:" + a))
            elif isinstance(a, (bytes, bytearray)):
                specs.append(callargs.parse(bytes(a)))
            else:
                raise TypeError(f"cannot pass {type(a).__name__} to a kernel function")
        words = callargs.place(self.machine, specs)
        self.last = self.machine.call(name, words, module=self._owner_of(name))
        return self.last

    def call(self, name: str, *args) -> int:
        """Call a function of the module (or a dependency); its int return value (r0, signed)."""
        return self._check(self.run(name, *args))

    def open(self, path: str):
        """A file-like object on a device the module registered (`/dev/NAME`): read, write,
        ioctl, poll, close; through the module's file_operations directly, not the kernel's
        VFS (armload.devkit.devio), with user buffers in a user mapping."""
        from .devio import DeviceFile
        return DeviceFile(self.machine, path, module=self.module, check=self._check)

    def run_pending(self) -> list[dict]:
        """Run the timers, work items and tasklets that are due, in simulated-time order."""
        return self.machine.run_deferred()

    def _owner_of(self, name):
        for m in [self.module] + self.deps[::-1]:
            if any(s.name == name for s in m.symbols):
                return m
        return None

    def _check(self, res) -> int:
        self.last = res
        if res.status not in ("returned", "no-function"):
            from ..emu.oops import NOT_AN_OOPS
            stopped = res.fault is None or res.fault.kind in NOT_AN_OOPS
            raise (ModuleStopped if stopped else ModuleOops)(res)
        return res.retval if res.retval is not None else 0

    # --- memory -----------------------------------------------------------------------
    def symbol(self, name: str) -> int:
        """Address of a symbol of the module (function: bit 0 set for Thumb) or of the kernel."""
        for m in [self.module] + self.deps[::-1]:
            for s in m.symbols:
                if s.name == name and s.section:
                    self.machine.map_module(m)
                    return s.addr
        a = self.machine.kernel_symbol(name)
        if a is None:
            raise KeyError(f"no symbol {name!r} in {self.name} or the kernel")
        return a

    def _addr(self, where) -> int:
        return self.symbol(where) & ~1 if isinstance(where, str) else where

    def read(self, where, n: int) -> bytes:
        return self.machine.read(self._addr(where), n)

    def write(self, where, data: bytes) -> None:
        self.machine.write(self._addr(where), bytes(data))

    def u32(self, where) -> int:
        return _struct.unpack("<I", self.read(where, 4))[0]

    def s32(self, where) -> int:
        return _struct.unpack("<i", self.read(where, 4))[0]

    def struct(self, where, fmt: str) -> tuple:
        """struct.unpack(fmt) of memory at an address or symbol ('<' is implied)."""
        if fmt[0] not in "<>!=@":
            fmt = "<" + fmt
        return _struct.unpack(fmt, self.read(where, _struct.calcsize(fmt)))

    def put_struct(self, where, fmt: str, *values) -> None:
        if fmt[0] not in "<>!=@":
            fmt = "<" + fmt
        self.write(where, _struct.pack(fmt, *values))

    def string(self, where) -> str:
        return self.machine.read_cstring(self._addr(where)).decode("utf-8", "replace")

    def buffer(self, size: int = 0, data: bytes | None = None) -> Buffer:
        return Buffer(size, data)

    def param(self, name: str):
        from ..emu.params import read_param
        return read_param(self.machine, self.module, name)

    # --- what happened ----------------------------------------------------------------
    @property
    def log(self) -> list[str]:
        """Every printk line so far."""
        return self.machine.log.lines

    @property
    def calls(self) -> list:
        """Every kernel call the module made so far (CallRecord: name, args, ret, caller_sym, cls)."""
        return self.machine.calls

    def called(self, name: str) -> list:
        return [c for c in self.machine.calls if c.name == name]

    def leaks(self) -> list:
        return self.machine.leaks()

    # --- test doubles -----------------------------------------------------------------
    def replace(self, name: str, fn) -> None:
        """Kernel function `name` becomes fn(call) -> int|None for this handle (armload.emu.Call:
        call.arg(i), call.read, call.write, call.string, ...)."""
        self.machine.override(name, fn, subsystem="test")

    def returns(self, name: str, value: int) -> None:
        """Kernel function `name` returns `value` (e.g. -errno.ENOMEM) from now on."""
        self.machine.override(name, lambda call, _v=value: _v, subsystem="test")

    def fail_kmalloc(self, nth: int = 1, *, count: int = 1) -> None:
        """The nth kmalloc-family allocation from now on (and count-1 after it) returns NULL."""
        self._kmallocs = 0
        self._fail = (nth, nth + count - 1)

    def _should_fail(self, n, size, kind) -> bool:
        if self._fail is None or not kind.startswith(KMALLOC_KINDS):
            return False
        self._kmallocs += 1
        lo, hi = self._fail
        return lo <= self._kmallocs <= hi


def _param_text(v) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, (list, tuple)):
        return ",".join(str(x) for x in v)
    return str(v)


def load_module(path: str, **kw) -> ModuleHandle:
    return ModuleHandle(path, **kw)
