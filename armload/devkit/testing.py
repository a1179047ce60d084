"""Unit-testing kernel modules like ordinary Python code, inside the booted Debian kernel (the
library behind the pytest plugin).

    from armload.devkit.testing import load_module
    dk = load_module("devkit-arm-debug.ko", params={"count": 2})
    assert dk.init() == 0                         # the kernel's load_module: init ran in the kernel
    assert dk.call("devkit_sum", 3) == 3          # from pid 1's kernel context (emu/booted/call.py)
    buf = dk.buffer(32)
    dk.call("devkit_describe", buf, 32)
    assert buf.text == "devkit/t0:2"

A `ModuleHandle` owns one copy of the booted kernel (emu/booted/modrun.BootedRun) into which its
dependencies and then the module are loaded by the kernel's own load_module. `init()`/`call()`
return the int result (r0, signed) and raise `ModuleOops` (the kernel's own oops report) when the
kernel oopsed or panicked, `ModuleStopped` (its base class) when it only stopped: the instruction
budget or the wall-clock safety net; `run()` returns the Result instead. Arguments: int, str (a
C string), bytes, `buffer(n)`, copied into the kernel's __kmalloc'ed memory.
Fault injection goes through the kernel: `fail_kmalloc(nth)` makes the nth kmalloc-family
allocation the module makes return NULL (as failslab would: emu/booted/failslab.py), `replace`/
`returns` answer a kernel function for calls from the module, at its entry.

The sanitizers (emu/sanitize) watch the module by default (`sanitize="all"`, or a list of
classes, or None to opt out): a KASAN-, kmemleak- or lockdep-class report made by init(), call(),
exit(), run_pending() or scan_leaks() fails the test there with `SanitizerReport`, whose message is
the report in the kernel's format, each frame at file:line; `.reports` keeps them all.
"""
from __future__ import annotations

import os
import re
import struct as _struct

from ..errors import ArmloadError
from ..kernel.debian import VMLINUZ, image_under
from .files import FileMethods

MODULES_VADDR, MODULES_END = 0xBF000000, 0xC0000000      # arch/arm: the module area below PAGE_OFFSET
PAGE_SIZE = 4096
KP_NAME, KP_MOD, KP_OPS, KP_SIZE, OPS_GET = 0, 4, 8, 20, 8    # struct kernel_param / kernel_param_ops (32-bit)


class ModuleStopped(AssertionError):
    """The run stopped without an oops: the instruction or simulated-time budget, the wall-clock
    safety net, or a hostile end (a soft lockup, a hung task, a restart/halt, a spin nothing ends:
    `.result.status` says which, emu/booted/hostile.py)."""

    def __init__(self, result):
        self.result = result
        super().__init__(f"{result.summary()}\n{result.oops or result.stopped}")


class ModuleOops(ModuleStopped):
    """The kernel oopsed (or panicked) in the module's code: the message is the kernel's own report,
    then its frames that decode to a source line, as scripts/decode_stacktrace.sh prints them
    (`.result.decoded` has the whole decoded report)."""

    def __init__(self, result):
        super().__init__(result)
        located = [ln for ln in result.decoded if LOCATED.search(ln)]
        if located:
            self.args = (f"{self.args[0]}\nthe frames with a source line (scripts/decode_stacktrace.sh):\n"
                         + "\n".join(located),)


LOCATED = re.compile(r"\([^()]*:\d+[ )]")     # decode_stacktrace.sh's `name (FILE:LINE ...)`


class SanitizerReport(AssertionError):
    """A sanitizer reported a bug of the module (emu/sanitize): the message is the reports in the
    kernel's formats (KASAN, kmemleak, lockdep), `.reports` the Report objects."""

    def __init__(self, reports):
        self.reports = list(reports)
        text = "\n".join(ln for r in self.reports for ln in r.lines)
        super().__init__(f"{len(self.reports)} sanitizer report(s):\n{text}")


REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOW_TO_GET = (f"fetch Debian's image once with `make test-inputs` in {REPO_ROOT} (it lands in "
              f"{os.path.dirname(image_under(os.path.join(REPO_ROOT, '.cache')))}), then pass "
              f"--armload-kernel PATH, set $ARMLOAD_KERNEL, or put `armload_kernel = PATH` in pytest.ini "
              f"([pytest]); module code runs only inside the booted kernel")


def cache_image(root: str | None) -> str | None:
    """The Debian image under <root>/.cache, if it is there."""
    if not root:
        return None
    p = image_under(os.path.join(root, ".cache"))
    return p if os.path.exists(p) else None


def find_kernel(option: str | None = None, ini: str | None = None, root: str | None = None) -> tuple[str, str]:
    """(path, where it came from): an explicit option, the ini value, $ARMLOAD_KERNEL, the test
    tree's .cache, $CACHE or else armload's own checkout's .cache (where `make test-inputs` puts it);
    ArmloadError with the fix when there is nothing."""
    for value, where in ((option, "--armload-kernel"), (ini, "armload_kernel (ini)"),
                         (os.environ.get("ARMLOAD_KERNEL"), "$ARMLOAD_KERNEL")):
        if value:
            if not os.path.exists(value):
                raise ArmloadError(f"{where}: no such kernel file {value!r}; {HOW_TO_GET}")
            return value, where
    p = cache_image(root)
    if p:
        return p, f"{root}/.cache"
    if os.path.exists(VMLINUZ):
        return VMLINUZ, "$CACHE" if os.environ.get("CACHE") else f"{REPO_ROOT}/.cache"
    raise ArmloadError(f"no kernel image for the armload fixtures: {HOW_TO_GET}")


def default_kernel_path(root: str | None = None) -> str | None:
    try:
        return find_kernel(root=root or os.getcwd())[0]
    except ArmloadError:
        return None


# --- the per-process states the pytest plugin forks from (see pytest_plugin.py) -----------------
_BASE: dict = {}          # vmlinuz -> a BootedRun with nothing loaded (taken once per process)
_WARM: dict = {}          # (vmlinuz, path, params, deps) -> (BootedRun, [Results]) after init (taken once)
USED: list = []           # the warmable keys this process ran init on (the plugin warms them in the parent)


def new_run(vmlinuz: str, tree: str | None = None):
    from ..emu.booted.modrun import BootedRun
    from ..kernel.config import DEBIAN_ARMMP
    from ..kernel.provider import Kernel
    return BootedRun(vmlinuz, Kernel.from_files([vmlinuz], DEBIAN_ARMMP), DEBIAN_ARMMP, tree=tree)


def base(vmlinuz: str):
    """A restored booted kernel to fork from (the plugin makes it in the parent before each fork)."""
    if vmlinuz not in _BASE:
        _BASE[vmlinuz] = new_run(vmlinuz)
    return _BASE[vmlinuz]


def warm(key) -> None:
    """Load the module of `key` with its dependencies into a booted kernel of this process, once:
    later tests fork with it loaded (init already run)."""
    if key in _WARM:
        return
    vmlinuz, path, params, deps, classes = key
    run = new_run(vmlinuz)
    san = _sanitizer(run, classes)
    results = []
    for p, ps in [(d, "") for d in deps] + [(path, params)]:
        results.append((san or run).load(p, ps))
        if not results[-1].ok:
            break
    _WARM[key] = (run, results, san)


def _sanitizer(run, classes):
    """A Sanitizer, or None for no classes. On a kernel the sanitizers cannot watch (support.py), all of
    them (the default) is a warning and no sanitizer, as `armload run` says it; a list is an error."""
    if not classes:
        return None
    from ..emu.sanitize import CLASSES, Sanitizer, SanitizerUnsupported
    try:
        return Sanitizer(run, classes)
    except SanitizerUnsupported as e:
        if tuple(classes) != tuple(CLASSES):
            raise
        import warnings
        warnings.warn(f"armload: not sanitized: {e}", stacklevel=3)
        return None


def sanitize_classes(sanitize) -> tuple[str, ...]:
    """load_module(sanitize=...): "all" (the default), a comma-separated list or a sequence of
    classes, or None/False/"none" (off)."""
    from ..emu.sanitize import parse_classes
    if not sanitize:
        return ()
    return parse_classes(sanitize if isinstance(sanitize, str) else ",".join(sanitize))


def _param_words(params) -> str:
    from ..emu.booted.modrun import insmod_args
    if params is None:
        return ""
    if isinstance(params, str):
        return params
    return insmod_args([k if v is True else f"{k}={_param_text(v)}" for k, v in params.items() if v is not False])


def _param_text(v) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, (list, tuple)):
        return ",".join(str(x) for x in v)
    return str(v)


class ModuleHandle(FileMethods):
    """A module in its own copy of the booted kernel; its files (open/cat/echo/sysfs) through real
    system calls of pid 1 (devkit/files.py)."""

    def __init__(self, path: str, *, kernel: str | None = None, params=None, deps=(), budget: int | None = None,
                 thumb2: bool | None = None, coverage: bool = False, trace: bool = False, sanitize="all"):
        from ..kernel.isa import refuse_thumb2_modules
        from ..loader.elf import read_object
        self.vmlinuz = kernel or default_kernel_path()
        if not self.vmlinuz:
            raise ArmloadError(f"no kernel image: {HOW_TO_GET}")
        if thumb2:
            from ..kernel.isa import refuse_thumb2_on_arm
            refuse_thumb2_on_arm(self.vmlinuz, True)
        obj = read_object(path)
        refuse_thumb2_modules([obj], self.vmlinuz)
        self.path, self.name = os.path.abspath(path), obj.name
        self.deps = [os.path.abspath(d) for d in deps]
        self.params = _param_words(params)
        self.budget = budget
        self.run_ = None
        self.result = None                  # init's Result
        self.last = None                    # the last Result
        self._fail = None                   # emu/booted/failslab.FailSlab once fail_kmalloc was asked
        self.classes = sanitize_classes(sanitize)
        self.san = None                     # the Sanitizer on this handle's kernel
        self._told = 0                      # the sanitizer reports raised so far
        self._replaced: dict[str, object] = {}
        self._mark = 0
        self._observe = (coverage, trace)   # emu/booted/observe.py, set on the kernel before the loads
        self._obs = None

    # --- the kernel this handle runs in ----------------------------------------------------
    @property
    def key(self):
        return (self.vmlinuz, self.path, self.params, tuple(self.deps), self.classes)

    @property
    def kernel(self):
        """The BootedRun (created at the first use: a warm state, the base state or a new restore)."""
        if self.run_ is None:
            self.run_ = _BASE.pop(self.vmlinuz, None) or new_run(self.vmlinuz)
            self._mark = len(self.run_.bk.console)
            self.san = _sanitizer(self.run_, self.classes)
        return self.run_

    def _hooked(self) -> bool:
        return self._fail is not None or bool(self._replaced) or any(self._observe)

    # --- coverage and the call trace (load_module(path, coverage=True, trace=True)) ---------------
    def _observation(self):
        if self._obs is None and any(self._observe):
            from ..emu.booted.observe import Observation
            self._obs = Observation(self.kernel, coverage=self._observe[0], trace=self._observe[1])
        return self._obs

    def coverage(self, lcov: str | None = None):
        """The module's coverage so far inside the booted kernel (ModuleCoverage: .summary(),
        ran/instructions, lines, functions); `lcov` also writes the tracefile."""
        if not self._observe[0] or self._obs is None:
            raise ArmloadError("coverage was not recorded: load_module(path, coverage=True), then init()")
        from ..emu.coverage import write_lcov
        reps = [rep for name, rep in self._obs.coverage(self.name) if rep is not None]
        if not reps:
            raise ArmloadError(f"{self.name}: armload's loader did not load it: no coverage")
        if lcov:
            write_lcov(reps[-1:], lcov)
        return reps[-1]

    @property
    def calls(self) -> list:
        """The kernel calls the module made so far (emu/booted/observe.py Call: name, args, ret,
        where, text), in order."""
        if not self._observe[1] or self._obs is None:
            raise ArmloadError("calls were not traced: load_module(path, trace=True), then init()")
        return self._obs.calls

    def called(self, name: str) -> list:
        return [c for c in self.calls if c.name == name]

    # --- running ---------------------------------------------------------------------------
    def init(self) -> int:
        """insmod of the dependencies, then of the module with its parameters (the kernel's own
        load_module and do_init_module); init's return value, or load_module's error."""
        if self.result is not None:
            raise ArmloadError(f"{self.name}: init already ran (insmod twice: -EEXIST)")
        warm_state = None if self._hooked() or self.run_ is not None else _WARM.pop(self.key, None)
        if warm_state is not None:
            self.run_, results, self.san = warm_state
            self._mark = 0
        else:
            run = self.kernel
            obs = self._observation()
            results = []
            for p, ps in [(d, "") for d in self.deps] + [(self.path, self.params)]:
                kw = {"budget": self.budget} if self.budget else {}
                results.append(obs.load(p, ps, **kw) if obs is not None else (self.san or run).load(p, ps, **kw))
                if not results[-1].ok:
                    break
            if not self._hooked():
                USED.append(self.key)
        self.result = results[-1]
        for r in results[:-1]:
            if not r.ok:
                self.last = r
                self._raise(r)
                raise ArmloadError(f"dependency {r.name} failed in the kernel: {r.summary()}")
        return self._check(self.result)

    def exit(self) -> int:
        """rmmod: delete_module (the module's exit runs); its return value."""
        ret, lines = self.kernel.unload(self.name)
        if self.san is not None:
            from ..emu.sanitize.lifecycle import after_exit
            after_exit(self.san, self.name)
        if ret is None:                     # an exit that never returns (emu/booted/hostile.py's stops)
            from ..emu.booted.hostile import stop_class
            from ..emu.booted.result import Result
            why = self.kernel.exit_stopped
            self.last = Result(self.name, self.path, None, stop_class(why) or "budget", lines, "", 0, stopped=why,
                               function="exit")
            raise ModuleStopped(self.last)
        self._sanitized()
        return ret

    def run(self, name: str, *args):
        """Call `name(*args)`; the Result whatever happened."""
        self.last = self.kernel.call(name, *args, **({"budget": self.budget} if self.budget else {}))
        if self.san is not None:
            from ..emu.sanitize.lifecycle import after_call
            after_call(self.san, self.name)
        return self.last

    def call(self, name: str, *args) -> int:
        """Call a function of the module (or a dependency); its int return value (r0, signed)."""
        return self._check(self.run(name, *args))

    def run_pending(self, ms: int = 1000) -> dict:
        """Let the kernel run its deferred work (timers, workqueues, kthreads) for up to `ms` of
        simulated time, until idle."""
        out = self.kernel.settle(ms * 1_000_000)
        self._sanitized()
        return out

    @staticmethod
    def _raise(res) -> None:
        if res.status in ("oops", "panic"):
            raise ModuleOops(res)
        if res.status not in ("returned", "refused"):   # budget, stopped, refused-dead, hostile.py's ends
            raise ModuleStopped(res)

    def _check(self, res) -> int:
        self.last = res
        try:
            self._raise(res)
        except ModuleStopped as e:          # the kernel's report first, the sanitizers' after it
            try:
                self._sanitized()
            except SanitizerReport as s:
                e.reports = s.reports
                e.args = (f"{e.args[0]}\n{s.args[0]}",)
            raise
        self._sanitized()
        return res.ret

    # --- the sanitizers ----------------------------------------------------------------------
    @property
    def reports(self) -> list:
        """Every sanitizer report so far (emu/sanitize/report.Report: .cls, .kind, .where, .lines)."""
        return self.san.formatted() if self.san is not None else []

    def _sanitized(self) -> None:
        """New reports fail the test here (once each)."""
        reps = self.reports
        if len(reps) > self._told:
            new, self._told = reps[self._told:], len(reps)
            raise SanitizerReport(new)

    def scan_leaks(self) -> None:
        """kmemleak's scan now (echo scan > /sys/kernel/debug/kmemleak): an object the module
        allocated that nothing references fails the test (SanitizerReport)."""
        if self.san is None or "leak" not in self.san.classes:
            raise ArmloadError(f"{self.name}: the leak sanitizer is off (load_module(path, sanitize=...) without leak)")
        from ..emu.sanitize.lifecycle import scan_leaks
        scan_leaks(self.san, self.name)
        self._sanitized()

    # --- memory ----------------------------------------------------------------------------
    def symbol(self, name: str) -> int:
        """Address of a symbol of the module (or a dependency), where the kernel loaded it, or of the kernel."""
        for m in reversed(self.kernel.session.modules):
            for s in m.symbols:
                if s.name == name and s.section:
                    return s.addr
        a = self.kernel.bk.image.address(name)
        if a is None:
            raise KeyError(f"no symbol {name!r} in {self.name} or the kernel")
        return a

    def _addr(self, where) -> int:
        return self.symbol(where) & ~1 if isinstance(where, str) else where

    def read(self, where, n: int) -> bytes:
        return self.kernel.bk.read(self._addr(where), n)

    def write(self, where, data: bytes) -> None:
        self.kernel.bk.write(self._addr(where), bytes(data))

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
        return self.kernel.bk.cstr(self._addr(where), 4096)

    def buffer(self, size: int = 0, data: bytes | None = None):
        from ..emu.booted.call import Buffer
        return Buffer(size, data)

    def param(self, name: str) -> str:
        """A parameter's value as the kernel shows it in /sys/module/NAME/parameters/ (its
        kernel_param_ops->get, as param_attr_show calls it), without the newline."""
        bk = self.kernel.bk
        mod = next((m for m in self.kernel.session.modules if m.name == self.name), None)
        sec = next((s for s in mod.sections if s.name == "__param"), None) if mod else None
        for kp in range(sec.addr, sec.addr + sec.size, KP_SIZE) if sec else ():
            if bk.cstr(bk.u32(kp + KP_NAME), 64) == name:
                buf = bk.kmalloc(PAGE_SIZE)
                owner = bk.u32(kp + KP_MOD)
                bk.call("kernel_param_lock", owner)          # as param_attr_show takes it (arrays check it)
                try:
                    n = bk.call(bk.u32(bk.u32(kp + KP_OPS) + OPS_GET), buf, kp)
                finally:
                    bk.call("kernel_param_unlock", owner)
                text = bk.read(buf, n).decode("utf-8", "replace") if 0 < n <= PAGE_SIZE else ""
                bk.kfree(buf)
                return text.rstrip("\n")
        raise KeyError(f"{self.name} has no parameter {name!r}")

    # --- what happened ---------------------------------------------------------------------
    @property
    def log(self) -> list[str]:
        """The kernel's console lines since this handle's kernel started, printk's text without the timestamp."""
        return [ln.split("] ", 1)[1] if ln.startswith("[") and "] " in ln else ln
                for ln in self.kernel.bk.console[self._mark:]]

    # --- fault injection, through the kernel ----------------------------------------------
    def _from_module(self, lr: int) -> bool:
        """A return address in the module under test (the module area, outside its dependencies)."""
        lr &= ~1
        if not MODULES_VADDR <= lr < MODULES_END:
            return False
        deps = {os.path.basename(d).removesuffix(".ko").replace("-", "_") for d in self.deps}
        for m in self.kernel.session.modules:
            if m.name in deps and any(r.base <= lr < r.base + r.size for r in m.regions):
                return False
        return True

    def _return(self, uc, value: int) -> None:
        from unicorn import arm_const as A
        lr = uc.reg_read(A.UC_ARM_REG_LR)
        uc.reg_write(A.UC_ARM_REG_R0, value & 0xFFFFFFFF)
        uc.reg_write(A.UC_ARM_REG_PC, lr & ~1)

    def fail_kmalloc(self, nth: int = 1, *, count: int = 1) -> None:
        """The nth kmalloc-family allocation the module makes from now on (and count-1 after it)
        returns NULL, as failslab would (emu/booted/failslab.py): for calls whose return address is
        in the module."""
        if self._fail is None:
            from ..emu.booted.failslab import FailSlab
            self._fail = FailSlab(self.kernel.bk, self._from_module)
        self._fail.arm(nth, count)

    def replace(self, name: str, fn) -> None:
        """Kernel function `name` becomes fn(call) -> int|None for calls from the module (call.arg(i),
        call.read, call.write, call.string); None lets the kernel's own code run."""
        from unicorn import arm_const as A
        bk = self.kernel.bk
        addr = bk.image.address(name)
        if addr is None:
            raise KeyError(f"the kernel has no function {name!r}")
        first = name not in self._replaced
        self._replaced[name] = fn
        if not first:
            return

        def hook(uc, a, size, _):
            if not self._from_module(uc.reg_read(A.UC_ARM_REG_LR)):
                return
            v = self._replaced[name](KernelCall(bk, uc))
            if v is not None:
                self._return(uc, v)
        bk.hook_code(addr, hook)

    def returns(self, name: str, value: int) -> None:
        """Kernel function `name` returns `value` (e.g. -errno.ENOMEM, or 0 for NULL) to the module from now on."""
        self.replace(name, lambda call, _v=value: _v)


class KernelCall:
    """A call stopped at a kernel function's entry: its arguments (AAPCS) and memory."""

    def __init__(self, bk, uc):
        self.bk, self.uc = bk, uc

    def arg(self, i: int) -> int:
        from unicorn import arm_const as A
        if i < 4:
            return self.uc.reg_read(getattr(A, f"UC_ARM_REG_R{i}"))
        return self.bk.u32(self.uc.reg_read(A.UC_ARM_REG_SP) + 4 * (i - 4))

    def read(self, addr: int, n: int) -> bytes:
        return self.bk.read(addr, n)

    def write(self, addr: int, data: bytes) -> None:
        self.bk.write(addr, data)

    def string(self, addr: int) -> str:
        return self.bk.cstr(addr, 4096)


def load_module(path: str, **kw) -> ModuleHandle:
    return ModuleHandle(path, **kw)
