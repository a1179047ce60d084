"""The one result of running module code in the booted kernel: a module's load and init
(load_module + do_init_module), a call into a module function, an exit (delete_module).

Every command that runs module code (run, check, matrix, agree, the pytest plugin, the
benchmarks) consumes this type; `ci/booted.py` turns it into check's record.

status:
  returned   the code returned: `ret` is r0 (signed), for a load load_module's return (init's result)
  refused    load_module returned -errno before init ran (`ret` is it)
  oops       the kernel oopsed (its own report in `oops`): pid 1 is dead, nothing more runs in it
  panic      the kernel panicked (its report in `oops`)
  budget     the instruction budget ended before it returned
  stopped    the machine could not go on (`stopped` says why: the wall-clock safety net, a guest fault)
  refused-dead  not run: pid 1 died in an earlier oops (`stopped` names it)
  the ends a hostile module makes (emu/booted/hostile.py; `stopped` says which and why):
  soft-lockup  the kernel's watchdog reported `BUG: soft lockup` (a proven spin, time advanced)
  hung-task    the kernel's hung-task detector reported it (`INFO: task ... blocked`), then the time budget
  restart / halt / power-off   machine_restart / machine_halt / machine_power_off was entered
  hang         a proven spin nothing can end (interrupts off): armload's own stop, the kernel is silent
  time-budget  the simulated-time budget ended before it returned
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errno import errno_name

DECOMPRESSED_BY = {"kernel": "the kernel (finit_module, MODULE_INIT_COMPRESSED_FILE: module_decompress)",
                   "kmod": "kmod in user space (init_module with the inflated image)"}
STATUSES = ("returned", "refused", "oops", "panic", "budget", "stopped", "refused-dead",
            "soft-lockup", "hung-task", "restart", "halt", "power-off", "hang", "time-budget")


@dataclass
class LoaderCheck:
    """armload's image against the kernel's, at the same addresses."""
    compared: int = 0                  # bytes compared
    identical: bool = True
    differences: int = 0               # differing 32-bit words
    listed: list[dict] = field(default_factory=list)    # the first MAX_LISTED: addr, section, armload, kernel
    by_section: dict[str, int] = field(default_factory=dict)
    refusal: str = ""                  # armload's refusal, when it refused
    agrees: bool = True                # refused/accepted and the errno as the kernel
    runtime_words: int = 0             # words the kernel's notifiers/parse_args wrote before init (not compared)

    def to_dict(self) -> dict:
        return {"compared_bytes": self.compared, "identical": self.identical, "differences": self.differences,
                "by_section": self.by_section, "listed": self.listed, "refusal": self.refusal,
                "agrees": self.agrees, "written_by_the_running_kernel": self.runtime_words}


@dataclass
class Result:
    name: str                          # the module
    path: str
    ret: int | None                    # r0 (signed); for a load, load_module's return
    status: str                        # one of STATUSES
    console: list[str]                 # the kernel's console lines while it ran
    oops: str                          # the kernel's own oops/panic report ("" when none)
    instructions: int                  # everything that ran meanwhile (kernel, other tasks, interrupts)
    core_base: int = 0
    init_base: int = 0
    loader: LoaderCheck | None = None  # a load: armload's image against the kernel's
    stopped: str = ""
    function: str = "init"             # what ran: init, a function name, exit
    reports: list[dict] = field(default_factory=list)    # sanitizer reports (KASAN, kmemleak, lockdep ...)
    decoded: list[str] = field(default_factory=list)     # the oops's frames decoded to file:line
    args: list[dict] = field(default_factory=list)       # a call's arguments as placed (kernel addresses)
    decompressed_by: str = ""          # a compressed .ko: "kernel" (finit_module's module_decompress) or "kmod"

    def __post_init__(self):
        assert self.status in STATUSES, self.status

    @property
    def ok(self) -> bool:
        return self.status == "returned" and (self.ret == 0 or self.function != "init")

    @property
    def returned(self) -> bool:
        return self.status == "returned"

    def summary(self) -> str:
        what = f"{self.name}: {self.function}"
        if self.status == "returned":
            v = self.ret
            return f"{what} returned {v}" + (f" (-{errno_name(v)})" if v is not None and -4095 <= v < 0 else "")
        if self.status == "refused":
            return f"{self.name}: load_module refused it: {self.ret}"
        if self.status in ("oops", "panic"):
            first = next((ln.split("] ", 1)[-1] for ln in self.oops.splitlines() if ln.strip()), "")
            return f"{what}: {self.status} in the kernel: {first}"
        return f"{what}: {self.status}: {self.stopped}"

    def to_dict(self) -> dict:
        return {"module": self.name, "path": self.path, "function": self.function, "status": self.status,
                "ret": self.ret, "errno": errno_name(self.ret) if self.ret and self.ret < 0 else None,
                "console": self.console, "oops": self.oops or None, "instructions": self.instructions,
                "core_base": self.core_base, "init_base": self.init_base, "stopped": self.stopped or None,
                "reports": self.reports, "decoded": self.decoded, "args": self.args,
                "loader_vs_kernel": self.loader.to_dict() if self.loader is not None else None,
                **({"decompressed_by": DECOMPRESSED_BY[self.decompressed_by]} if self.decompressed_by else {})}
