"""What a run produces: kernel calls made, fault reports, and the result of one call."""
from __future__ import annotations

from dataclasses import dataclass, field

from .errno import errno_name, s32

# How a kernel function that module code called was simulated (the call-class table's answer).
REAL = "real"                 # the kernel's own code ran, from the Image
MODEL = "model"               # a Python model at the function's entry
FALLBACK = "fallback"         # no kernel image: a Python version of a function whose real code would run
UNMODELLED = "unmodelled"     # nothing simulates it (policy: fail, real or zero)
ZEROED = "unmodelled-zero"    # --unmodelled zero: returned 0 without simulating anything


@dataclass
class CallRecord:
    """One call into the kernel made by module code (or by a model on its behalf)."""
    name: str
    addr: int
    args: list[int]
    ret: int | None
    caller: int                   # return address (lr) at the call
    caller_sym: str = ""
    note: str | None = None
    ret_hi: int | None = None     # r1 for 64-bit results
    cls: str = MODEL
    time_ns: int = 0
    void: bool = False            # a model of a void function (no return value)

    def format(self) -> str:
        a = ", ".join(f"{x:#x}" if x > 9 else str(x) for x in self.args)
        if self.void:
            r = "void"
        elif self.ret is None:
            r = "(not run)" if self.cls == UNMODELLED else "(not observed: real code)"
        else:
            r = fmt_ret(self.ret)
        s = f"[{self.cls}] {self.name}({a}) = {r}"
        if self.note:
            s += f"  [{self.note}]"
        if self.caller_sym:
            s += f"  <- {self.caller_sym}"
        return s

    def to_dict(self) -> dict:
        return {"name": self.name, "class": self.cls, "addr": self.addr, "args": self.args, "ret": self.ret,
                "ret_signed": s32(self.ret) if self.ret is not None else None,
                "caller": self.caller, "caller_sym": self.caller_sym, "note": self.note, "time_ns": self.time_ns}


def fmt_ret(v: int) -> str:
    s = s32(v)
    if -4095 <= s < 0:
        return f"{s} (-{errno_name(s)})"
    return f"{v:#x}" if v > 9 else str(v)


@dataclass
class FaultReport:
    kind: str                     # null-deref, paging, write-protect, exec-protect, jump-unmapped,
                                  # undefined-instruction, bug, budget, timeout, stack-overflow,
                                  # heap-out-of-bounds, use-after-free, unmodelled, panic, ...
    message: str
    pc: int
    pc_sym: str
    thumb: bool
    registers: dict[str, int]
    lr_sym: str = ""
    access_addr: int | None = None
    access_type: str | None = None   # read / write / fetch
    access_size: int | None = None
    access_sym: str | None = None
    last_calls: list[CallRecord] = field(default_factory=list)
    in_kernel: bool = False          # the faulting PC is in the kernel's own code
    unmodelled: str | None = None    # the function name, for kind == "unmodelled"
    backtrace: list[dict] = field(default_factory=list)   # oops.py: pc, sym, from, from_sym, file, line
    backtrace_end: str = ""          # why the backtrace ends where it does
    code: str | None = None          # the kernel's `Code:` line
    insn: str | None = None          # the instruction at the PC, disassembled (armload's addition)
    locks: list[str] = field(default_factory=list)        # locks held at the fault
    kernel: dict = field(default_factory=dict)            # oops.kernel_facts: modules, taint, Stack: dump

    def format(self) -> str:
        """The oops as 6.1 prints it (emu/oops.py), or, for a run that stopped without a fault
        (unmodelled call, budget), a report that says so."""
        from .oops import format_report
        return format_report(self)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "message": self.message, "pc": self.pc, "pc_sym": self.pc_sym,
                "thumb": self.thumb, "lr_sym": self.lr_sym, "registers": self.registers,
                "access_addr": self.access_addr, "access_type": self.access_type,
                "access_size": self.access_size, "access_sym": self.access_sym,
                "in_kernel": self.in_kernel, "unmodelled": self.unmodelled,
                "backtrace": self.backtrace, "backtrace_end": self.backtrace_end, "code": self.code, "insn": self.insn,
                "locks": self.locks, "kernel": self.kernel,
                "last_calls": [c.to_dict() for c in self.last_calls]}


# Run statuses: returned | fault | unmodelled | budget | timeout (wall-clock safety net) | no-function
@dataclass
class RunResult:
    module: str
    function: str                 # "init_module", "cleanup_module" or the called name
    entry: int
    status: str
    retval: int | None            # signed r0 when returned
    fault: FaultReport | None
    calls: list[CallRecord]
    log: list[str]
    elapsed: float                # host seconds (timing only; never part of a result)
    instructions: int = 0         # retired by this call, kernel code included (deterministic)
    sim_ns: int = 0               # simulated time this call took, sleeps included
    registrations: list[dict] = field(default_factory=list)
    deferred: list[dict] = field(default_factory=list)   # timers/work that ran after the call

    @property
    def ok(self) -> bool:
        return self.status in ("returned", "no-function") and (self.retval or 0) == 0

    def class_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for c in self.calls:
            out[c.cls] = out.get(c.cls, 0) + 1
        return out

    def summary(self) -> str:
        if self.status == "no-function":
            return f"{self.module}: no {self.function} function"
        if self.status == "returned":
            r = self.retval
            s = f"{self.module}: {self.function} returned {r}"
            if r is not None and r < 0:
                s += f" (-{errno_name(r)})"
            if r is not None and r > 0 and self.function == "init_module":
                s += " (suspicious: init should follow the 0/-E convention)"
            return s
        if self.status == "unmodelled" and self.fault is not None:
            return f"{self.module}: {self.function} stopped: {self.fault.message}"
        return f"{self.module}: {self.function} did not return: {self.fault.message if self.fault else self.status}"

    def to_dict(self) -> dict:
        return {"module": self.module, "function": self.function, "entry": self.entry,
                "status": self.status, "retval": self.retval,
                "errno_name": (errno_name(self.retval) if self.retval is not None and self.retval < 0 else None),
                "ok": self.ok, "elapsed": self.elapsed, "instructions": self.instructions,
                "sim_ns": self.sim_ns, "classes": self.class_counts(),
                "fault": self.fault.to_dict() if self.fault else None,
                "calls": [c.to_dict() for c in self.calls], "log": self.log,
                "registrations": self.registrations, "deferred": self.deferred}
