"""Seed 003 on the booted Debian kernel: every instruction on the path is the kernel's own.

The event: the seed's, prctl(PR_SET_NAME, name) made from user mode. pid 1 (/init, with its mm)
runs a 7-instruction loop in its own user memory: `svc #0` with r7 = __NR_prctl enters the
kernel's vector_swi, sys_call_table sends it to sys_prctl, which copies the name
(strncpy_from_user) and calls __set_task_comm (task_rename tracepoint, perf_event_comm), and
ret_fast_syscall returns to the loop. The loop is entered as the kernel enters /init (pt_regs at
the top of pid 1's kernel stack, ret_to_user) and stopped at its last instruction; pid 1's
kernel context is then put back as it was.

The program: the seed's trigger_bench `__sync_add_and_fetch(&hits, 1); return 0;` as BPF
(ld_imm64 of the .bss-like array map's value, atomic add, r0 = 0, exit), loaded with the real
bpf(BPF_PROG_LOAD) from user memory (license "GPL"; the kernel's verifier runs). Debian's
/proc/sys/net/core/bpf_jit_enable is 0 (CONFIG_BPF_JIT=y, neither _ALWAYS_ON nor a default-on
arch): the kernel runs it in its interpreter (__bpf_prog_run32 -> ___bpf_prog_run), read back
from BPF_OBJ_GET_INFO_BY_FD (jited_prog_len 0) and counted at ___bpf_prog_run's entry.

The attachments, as libbpf makes them:
  kprobe      perf_event_open on the `kprobe` PMU (type from /sys/bus/event_source/devices/kprobe/
              type, config1 = "__set_task_comm") + PERF_EVENT_IOC_SET_BPF + _ENABLE; with
              /proc/sys/debug/kprobes-optimization 0 the probe stays a breakpoint (UNDEF entry,
              kprobe_handler, single-step, kprobe_dispatcher, kprobe_perf_func, trace_call_bpf)
  kprobe-opt  the same with optimization 1, after the kernel's kprobe_optimizer has run
              (OPTIMIZE_DELAY): `b` to the detour, optimized_callback (Debian: CONFIG_OPTPROBES=y)
  kretprobe   the same PMU with the retprobe bit (format/retprobe "config:0"): the entry probe
              (pre_handler_kretprobe) traps, the return goes through __kretprobe_trampoline
  kretprobe-opt  the same, its entry probe optimized by the kernel
  raw_tp      bpf(BPF_RAW_TRACEPOINT_OPEN, "task_rename"): the static key, __traceiter_task_rename,
              __bpf_trace_task_rename, bpf_trace_run2
  fentry/fexit  BPF_PROG_LOAD(BPF_PROG_TYPE_TRACING, BPF_TRACE_FENTRY/FEXIT) is refused by the
              kernel (no vmlinux BTF: CONFIG_DEBUG_INFO_BTF is off), and 32-bit ARM 6.1 has no
              trampoline: arch_prepare_bpf_trampoline is the weak stub returning -ENOTSUPP (called)
Detaching is close(), whose last fput runs in the task work of the return to user mode. The
setup's system calls (mount, open/read/write of /proc and /sys files, bpf, perf_event_open, ioctl,
close) are real system calls too, each made by pid 1's user mode with user-memory arguments
(armload/emu/booted/user.py).

Costs are instructions per event: everything the CPU executed, user and kernel, from the loop's
first event to its last (the loop's own 7 user instructions per event included, the same in every
row; Machine's instruction clock). Each run starts right after a timer tick (the kernel's
msleep(1)) and is repeated if an interrupt still fell inside it, so no tick is in a count. The
verdict on the seed's ordering is decided from these deterministic counts only; host time is
shown beside, never deciding.
"""
from __future__ import annotations

import struct
import time

from ..emu.booted.user import O_RDONLY, O_WRONLY, Filesystem, UserMemory
from ..emu.booted.user import Syscalls as _Syscalls
from ..probes.base import ProbeError, errno_name
from .inputs import VMLINUZ, X86

PR_SET_NAME = 15
NAME = "bench-rename"
TARGET = "__set_task_comm"
# bpf(2) commands, map/program/attach types (include/uapi/linux/bpf.h, 6.1)
MAP_CREATE, MAP_LOOKUP_ELEM, MAP_UPDATE_ELEM, PROG_LOAD, OBJ_GET_INFO_BY_FD = 0, 1, 2, 5, 15
RAW_TRACEPOINT_OPEN, BTF_LOAD = 17, 18
BTF_FUNC_ID = 4                             # _btf_one_function's FUNC
MAP_TYPE_ARRAY = 2
PROG_TYPE = {"kprobe": 2, "raw_tp": 17, "tracing": 26}
TRACE_ATTACH = {"fentry": 24, "fexit": 25}     # BPF_TRACE_FENTRY, BPF_TRACE_FEXIT
PROG_LOAD_SIZE = 144                        # union bpf_attr's BPF_PROG_LOAD part up to core_relo_rec_size
# perf_event_open(2): struct perf_event_attr (PERF_ATTR_SIZE_VER5), ioctls on ARM
PERF_ATTR_SIZE = 112
PERF_EVENT_IOC_ENABLE, PERF_EVENT_IOC_SET_BPF = 0x2400, 0x40042408
PERF_FLAG_FD_CLOEXEC = 8
ENOTSUPP = 524
MODES = ("base", "kprobe", "kprobe-opt", "kretprobe", "kretprobe-opt", "raw_tp")
X86_ROW = {"base": "base", "kprobe": "kprobe", "kprobe-opt": "kprobe", "kretprobe": "kretprobe",
           "kretprobe-opt": "kretprobe", "raw_tp": "raw_tp"}
NR_PRCTL = 172                              # arch/arm/tools/syscall.tbl (EABI)
LOOP_INSNS = 7                              # the user loop's own instructions per event (svc included)
MAX_TRIES = 3
OPT_WAIT_MS = 100                           # OPTIMIZE_DELAY is 5 jiffies (20 ms at HZ=250)

# pid 1's user code: r4 = events, r5 = 0, r7 = __NR_prctl (set through pt_regs)
_LOOP = """
    b loop
loop:
    mov r0, #PRNAME
    movw r1, #ULO
    movt r1, #UHI
    svc #0
    orr r5, r5, r0
    subs r4, r4, #1
    bne loop
done:
    b done
"""


def assemble(src: str, addr: int, thumb: bool, **syms: int) -> bytes:
    """keystone's encoding of `src` at `addr`, each NAME in `syms` replaced by its value."""
    from keystone import KS_ARCH_ARM, KS_MODE_ARM, KS_MODE_THUMB, Ks
    for k, v in syms.items():
        src = src.replace(k, f"{v:#x}")
    enc, _ = Ks(KS_ARCH_ARM, KS_MODE_THUMB if thumb else KS_MODE_ARM).asm(src, addr)
    return bytes(enc)


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, dst | src << 4, off, imm)


def counting_program(map_fd: int) -> bytes:
    """trigger_bench's body: __sync_add_and_fetch(&hits, 1); return 0 (hits: the map's value)."""
    return (_insn(0x18, 1, 2, 0, map_fd) + _insn(0)          # r1 = &map[0] (ld_imm64, BPF_PSEUDO_MAP_VALUE)
            + _insn(0xB7, 2, imm=1)                          # r2 = 1
            + _insn(0xDB, 1, 2)                              # lock *(u64 *)(r1 + 0) += r2
            + _insn(0xB7, 0, imm=0) + _insn(0x95))           # r0 = 0; exit


class Syscalls(_Syscalls):
    """The benchmark's system calls (emu/booted/user.py: made by pid 1's user mode through svc)."""

    def bpf(self, cmd: int, attr: bytes) -> int:
        return self.call("bpf", cmd, self.mem.put(attr), len(attr))

    def close(self, fd: int) -> None:
        if super().close(fd):
            raise ProbeError(f"close({fd}) failed")

    def read_file(self, path: str) -> str:
        fd = self.openat(path, O_RDONLY)
        if fd < 0:
            raise ProbeError(f"open {path}: {errno_name(fd)}", errno=fd)
        n, data = self.read(fd, 64)
        self.close(fd)
        return data.decode()

    def write_file(self, path: str, text: str) -> None:
        fd = self.openat(path, O_WRONLY)
        if fd < 0:
            raise ProbeError(f"open {path}: {errno_name(fd)}", errno=fd)
        n = self.write(fd, text.encode())
        self.close(fd)
        if n != len(text):
            raise ProbeError(f"write {path}: {n}")


class BootedTaskRename:
    """The booted kernel (pid 1 with /proc and /sys mounted), the map, the programs, the user loop."""

    def __init__(self, vmlinuz: str = VMLINUZ, events: int = 1000):
        from ..emu.booted.kernel import BootedKernel
        self.k = k = BootedKernel.get(vmlinuz)
        self.mem = UserMemory(k)
        self.sys = s = Syscalls(k, self.mem)
        Filesystem(k, s).mount_all()
        self.jit_enable = int(s.read_file("/proc/sys/net/core/bpf_jit_enable"))
        self.kprobe_type = int(s.read_file("/sys/bus/event_source/devices/kprobe/type"))
        fmt = s.read_file("/sys/bus/event_source/devices/kprobe/format/retprobe").strip()
        self.retprobe_bit = int(fmt.split(":")[1])                      # "config:0"
        self.name = self.mem.string(NAME)
        self.map_fd = s.bpf(MAP_CREATE, struct.pack("<6I", MAP_TYPE_ARRAY, 4, 8, 1, 0, 0).ljust(72, b"\0"))
        if self.map_fd < 0:
            raise ProbeError(f"BPF_MAP_CREATE: {errno_name(self.map_fd)}", errno=self.map_fd)
        self.key, self.value = self.mem.put(bytes(4)), self.mem.put(bytes(8))
        self.log = self.mem.put(bytes(1024))
        self.progs = {t: self.load(PROG_TYPE[t]) for t in ("kprobe", "raw_tp")}
        for t, fd in self.progs.items():
            if fd < 0:
                raise ProbeError(f"BPF_PROG_LOAD ({t}): {errno_name(fd)}: {self.verifier_log()}", errno=fd)
        self.jited = {t: self.prog_info(fd)["jited_prog_len"] for t, fd in self.progs.items()}
        # the loop, in pid 1's user memory (PROT_READ|WRITE|EXEC); its stack is the Syscalls stub's
        self.code = k.call("vm_mmap", 0, 0, 0x1000, 7, 0x22, 0)
        if self.code >= 0xFFFFF000:
            raise ProbeError("vm_mmap of the user loop failed")
        self.events = events
        self.mem.write(self.code, assemble(_LOOP, self.code, False, PRNAME=PR_SET_NAME,
                                               ULO=self.name & 0xFFFF, UHI=self.name >> 16))
        self._done = self.code + 4 * 8
        self.interp_runs = 0

    # --- bpf -------------------------------------------------------------------------------------
    def load(self, prog_type: int, insns: bytes | None = None, *, attach_type: int = 0, btf_id: int = 0,
             btf_fd: int = 0, func_info: bytes = b"", attach_prog_fd: int = 0) -> int:
        """bpf(BPF_PROG_LOAD): the fd, or -errno (the verifier's log in verifier_log())."""
        insns = counting_program(self.map_fd) if insns is None else insns
        self.mem.write(self.log, bytes(1024))
        fi = self.mem.put(func_info) if func_info else 0
        attr = struct.pack("<IIQQIIQII16sIIIIQIIQIII", prog_type, len(insns) // 8, self.mem.put(insns),
                           self.mem.string("GPL"), 1, 1024, self.log, 0, 0, b"bench_trigger", 0, attach_type,
                           btf_fd, 8 if fi else 0, fi, len(func_info) // 8, 0, 0, 0, btf_id, attach_prog_fd)
        return self.sys.bpf(PROG_LOAD, attr.ljust(PROG_LOAD_SIZE, b"\0"))

    def verifier_log(self) -> str:
        return self.mem.read(self.log, 1024).split(b"\0", 1)[0].decode(errors="replace").strip()

    def prog_info(self, fd: int) -> dict:
        info = self.mem.put(bytes(24))
        r = self.sys.bpf(OBJ_GET_INFO_BY_FD, struct.pack("<IIQ", fd, 24, info))
        if r:
            raise ProbeError(f"BPF_OBJ_GET_INFO_BY_FD: {errno_name(r)}", errno=r)
        typ, pid, _tag, jited, xlated = struct.unpack("<II8sII", self.mem.read(info, 24))
        return {"type": typ, "id": pid, "jited_prog_len": jited, "xlated_prog_len": xlated}

    def counter(self) -> int:
        r = self.sys.bpf(MAP_LOOKUP_ELEM, struct.pack("<IIQQQ", self.map_fd, 0, self.key, self.value, 0))
        if r:
            raise ProbeError(f"BPF_MAP_LOOKUP_ELEM: {errno_name(r)}", errno=r)
        return struct.unpack("<Q", self.mem.read(self.value, 8))[0]

    def reset_counter(self) -> None:
        zero = self.mem.put(bytes(8))
        r = self.sys.bpf(MAP_UPDATE_ELEM, struct.pack("<IIQQQ", self.map_fd, 0, self.key, zero, 0))
        if r:
            raise ProbeError(f"BPF_MAP_UPDATE_ELEM: {errno_name(r)}", errno=r)

    # --- attaching -------------------------------------------------------------------------------
    def set_optimization(self, on: bool) -> None:
        self.sys.write_file("/proc/sys/debug/kprobes-optimization", "1\n" if on else "0\n")

    def perf_kprobe(self, retprobe: bool) -> int:
        """perf_event_open on the kprobe PMU (pid -1, cpu 0), the program set and enabled."""
        attr = struct.pack("<IIQ", self.kprobe_type, PERF_ATTR_SIZE, (1 << self.retprobe_bit) if retprobe else 0)
        attr = attr.ljust(56, b"\0") + struct.pack("<QQ", self.mem.string(TARGET), 0)   # config1, config2
        fd = self.sys.call("perf_event_open", self.mem.put(attr.ljust(PERF_ATTR_SIZE, b"\0")), -1, 0, -1,
                           PERF_FLAG_FD_CLOEXEC)
        if fd < 0:
            raise ProbeError(f"perf_event_open(kprobe {TARGET}): {errno_name(fd)}", errno=fd)
        for cmd, arg in ((PERF_EVENT_IOC_SET_BPF, self.progs["kprobe"]), (PERF_EVENT_IOC_ENABLE, 0)):
            r = self.sys.call("ioctl", fd, cmd, arg)
            if r:
                raise ProbeError(f"ioctl({cmd:#x}) on the kprobe event: {errno_name(r)}", errno=r)
        return fd

    def raw_tp(self) -> int:
        fd = self.sys.bpf(RAW_TRACEPOINT_OPEN, struct.pack("<QI", self.mem.string("task_rename"),
                                                           self.progs["raw_tp"]).ljust(16, b"\0"))
        if fd < 0:
            raise ProbeError(f"BPF_RAW_TRACEPOINT_OPEN(task_rename): {errno_name(fd)}", errno=fd)
        return fd

    def probe_text(self) -> str:
        """What the kernel's text holds at __set_task_comm: breakpoint, `b` (optimized) or the original."""
        w = self.k.u32(TARGET)
        if w & 0x0FFFFFFF == 0x07F001F8:
            return "breakpoint"
        return "optimized" if w & 0x0F000000 == 0x0A000000 else "original"

    # --- measuring -------------------------------------------------------------------------------
    def run(self, events: int | None = None) -> dict:
        """The user loop, `events` prctl calls, started right after a timer tick (the kernel's
        msleep(1)); run again (up to MAX_TRIES) if an interrupt still fell inside it."""
        for tries in range(1, MAX_TRIES + 1):
            self.k.call("msleep", 1)
            r = self._run_user(events or self.events)
            if r["irqs_in_loop"] == 0:
                break
        r["tries"] = tries
        return r

    def _run_user(self, events: int) -> dict:
        """The loop in pid 1's user mode (Syscalls.run_user: entered through ret_to_user as the
        kernel returns to /init), run to `done`; pid 1's kernel context is put back after."""
        k, m, uc = self.k, self.k.m, self.k.m.uc
        start: list[int] = []
        self.interp_runs = 0
        hooks = [k.hook_code(self.code, lambda *_: start.append(k.insns)),
                 k.hook_code(k.addr("___bpf_prog_run"), self._interp)]
        irqs0 = m.hw.irqs_taken
        try:
            t0 = time.perf_counter()
            out = self.sys.run_user(self.code, [0] * 4 + [events, 0, 0, NR_PRCTL], self._done, "bench task-rename",
                                    budget=4_000_000_000)
            host = time.perf_counter() - t0
            end, err, left = k.insns, out[5], out[4]
        finally:
            for h in hooks:
                k.unhook(h)
        if err or left or len(start) != 1:
            raise ProbeError(f"bench task-rename: the user loop stopped ({left} events left, "
                             f"prctl error bits {err:#x})")
        # the start mark is taken after its one-instruction block (`b loop`) was counted
        return {"insns": end - start[0], "host_s": host, "interp_runs": self.interp_runs,
                "irqs_in_loop": m.hw.irqs_taken - irqs0}

    def _interp(self, *_):
        self.interp_runs += 1


def _row(b: BootedTaskRename, mode: str) -> dict:
    s = b.sys
    fd = None
    if mode in ("kprobe", "kretprobe"):
        b.set_optimization(False)
        fd = b.perf_kprobe(mode == "kretprobe")
    elif mode in ("kprobe-opt", "kretprobe-opt"):
        b.set_optimization(True)
        fd = b.perf_kprobe(mode == "kretprobe-opt")
        b.k.call("msleep", OPT_WAIT_MS)                     # the kernel's kprobe_optimizer runs
    elif mode == "raw_tp":
        fd = b.raw_tp()
    text = b.probe_text()
    b.run(16)                                               # first events (allocations, caches)
    b.reset_counter()
    r = b.run()
    count = b.counter()
    comm = s.read_file("/proc/self/comm").strip()           # the rename happened
    if fd is not None:
        s.close(fd)
    n = b.events
    want = 0 if mode == "base" else n
    if count != want or r["interp_runs"] != want or comm != NAME:
        raise ProbeError(f"bench task-rename (booted): {mode}: the program ran {r['interp_runs']} times and counted "
                         f"{count} for {n} events (want {want}); comm {comm!r}")
    return {"mode": mode, "events": n, "insns_per_event": r["insns"] / n, "insns": r["insns"],
            "counter": count, "comm": comm, "interp_runs": r["interp_runs"], "probe_text": text,
            "irqs_in_loop": r["irqs_in_loop"], "tries": r["tries"],
            "host_events_per_s": n / r["host_s"] if r["host_s"] else 0.0,
            "x86_k_per_s": X86[X86_ROW[mode]][0]}


def _btf_one_function() -> bytes:
    """BTF for `int bench_target(void *ctx)`: [1] int, [2] void *, [3] its proto, [4] the FUNC."""
    strs = b"\0int\0ctx\0bench_target\0"
    types = (struct.pack("<4I", 1, 1 << 24, 4, 1 << 24 | 32) + struct.pack("<3I", 0, 2 << 24, 0)
             + struct.pack("<5I", 0, 13 << 24 | 1, 1, 5, 2) + struct.pack("<3I", 9, 12 << 24 | 1, 3))
    return struct.pack("<HBBIIIII", 0xEB9F, 1, 0, 24, 0, len(types), len(types), len(strs)) + types + strs


def unsupported(b: BootedTaskRename) -> dict:
    """fentry/fexit, asked of the kernel two ways. On a kernel function: BPF_PROG_LOAD of a
    BPF_PROG_TYPE_TRACING program needs vmlinux BTF, which Debian's 6.1 armmp lacks. On a BPF
    program (the one target with BTF here: a JIT-ed raw_tp program carrying its own BTF, loaded
    with bpf_jit_enable 1, then 0 again): the program loads and the attach
    (BPF_RAW_TRACEPOINT_OPEN with no name) reaches bpf_trampoline_update, whose
    arch_prepare_bpf_trampoline is 32-bit ARM's weak stub: -ENOTSUPP."""
    k, s = b.k, b.sys
    blob = _btf_one_function()
    btf_fd = s.bpf(BTF_LOAD, struct.pack("<QQIII", b.mem.put(blob), 0, len(blob), 0, 0).ljust(32, b"\0"))
    if btf_fd < 0:
        raise ProbeError(f"BPF_BTF_LOAD: {errno_name(btf_fd)}", errno=btf_fd)
    s.write_file("/proc/sys/net/core/bpf_jit_enable", "1\n")
    target = b.load(PROG_TYPE["raw_tp"], _insn(0xB7, 0, imm=0) + _insn(0x95), btf_fd=btf_fd,
                    func_info=struct.pack("<II", 0, BTF_FUNC_ID))
    s.write_file("/proc/sys/net/core/bpf_jit_enable", "0\n")
    if target < 0:
        raise ProbeError(f"BPF_PROG_LOAD (fentry target): {errno_name(target)}: {b.verifier_log()}", errno=target)
    target_jited = b.prog_info(target)["jited_prog_len"]
    calls = [0]
    stub = k.addr("arch_prepare_bpf_trampoline")
    hook = k.hook_code(stub, lambda *_: calls.__setitem__(0, calls[0] + 1))
    out = {}
    vmlinux_btf = k.call("bpf_get_btf_vmlinux")             # NULL: what BPF_PROG_LOAD falls back to
    try:
        for kind, attach in TRACE_ATTACH.items():
            on_vmlinux = b.load(PROG_TYPE["tracing"], attach_type=attach, btf_id=1)
            fd = b.load(PROG_TYPE["tracing"], attach_type=attach, btf_id=BTF_FUNC_ID, attach_prog_fd=target)
            if fd < 0:
                raise ProbeError(f"BPF_PROG_LOAD ({kind} on a BPF program): {errno_name(fd)}: {b.verifier_log()}",
                                 errno=fd)
            calls[0] = 0
            link = s.bpf(RAW_TRACEPOINT_OPEN, struct.pack("<QI", 0, fd).ljust(16, b"\0"))
            out[kind] = {"load_on_kernel_function": on_vmlinux, "vmlinux_btf": vmlinux_btf,
                         "attach_to_bpf_program": link,
                         "arch_prepare_bpf_trampoline_calls": calls[0], "target_jited_len": target_jited,
                         "x86_k_per_s": X86[kind][0]}
            for f in (link, fd, on_vmlinux):
                if f >= 0:
                    s.close(f)
    finally:
        k.unhook(hook)
    s.close(target)
    s.close(btf_fd)
    return out


def run_task_rename(events: int = 2000, vmlinuz: str = VMLINUZ) -> dict:
    b = BootedTaskRename(vmlinuz, events)
    rows = [_row(b, mode) for mode in MODES]
    after = b.run()                                         # everything detached: the base path again
    after = {"insns_per_event": after["insns"] / events, "interp_runs": after["interp_runs"],
             "probe_text": b.probe_text()}
    by = {r["mode"]: r["insns_per_event"] for r in rows}
    base = by["base"]
    for r in rows:
        r["extra_insns"] = r["insns_per_event"] - base
        r["rate_vs_base"] = base / r["insns_per_event"]
        r["x86_vs_base"] = r["x86_k_per_s"] / X86["base"][0]
    verdict = {"base > raw_tp": by["base"] < by["raw_tp"], "raw_tp > kprobe": by["raw_tp"] < by["kprobe"],
               "kprobe > kretprobe": by["kprobe"] < by["kretprobe"],
               "raw_tp > kprobe-opt": by["raw_tp"] < by["kprobe-opt"],
               "kprobe-opt > kretprobe-opt": by["kprobe-opt"] < by["kretprobe-opt"]}
    verdict["reproduced"] = verdict["base > raw_tp"] and verdict["raw_tp > kprobe"] and verdict["kprobe > kretprobe"]
    return {"events": events, "rows": rows, "verdict": verdict, "unsupported": unsupported(b),
            "bpf_jit_enable": b.jit_enable, "jited_prog_len": b.jited, "kprobe_pmu_type": b.kprobe_type,
            "loop_insns_per_event": LOOP_INSNS, "detached": after}


def print_task_rename(res: dict) -> None:
    """The booted kernel's table, the seed's x86 beside."""
    n = res["events"]
    print(f"\nseed 003 on the booted Debian 6.1 armmp kernel: prctl(PR_SET_NAME) x {n:,} from pid 1's user mode (svc, "
          f"vector_swi, sys_prctl, ret_fast_syscall; the loop's {res['loop_insns_per_event']} user instructions per "
          "event included)")
    print(f"every instruction is the kernel's: perf_event_open(kprobe PMU type {res['kprobe_pmu_type']}) + SET_BPF, "
          "BPF_RAW_TRACEPOINT_OPEN, the trap or detour, and the")
    print(f"program loaded by BPF_PROG_LOAD (verifier) and run by the interpreter (bpf_jit_enable "
          f"{res['bpf_jit_enable']}, jited_prog_len {max(res['jited_prog_len'].values())}). No interrupt in any count.")
    print(f"\n  {'attach':<14}{'booted':>9}{'+insns':>8}{'vs base':>9}{'x86 K/s':>9}"
          f"{'x86 vs base':>12}{'prog runs':>11}{'text at probe':>15}{'host ev/s':>11}")
    for r in res["rows"]:
        print(f"  {r['mode']:<14}{r['insns_per_event']:>9.1f}{r['extra_insns']:>8.1f}{r['rate_vs_base']:>9.3f}"
              f"{r['x86_k_per_s']:>9,}{r['x86_vs_base']:>12.3f}"
              f"{r['counter']:>6}/{r['events']:<4}{r['probe_text']:>15}{r['host_events_per_s']:>11,.0f}")
    for kind, u in res["unsupported"].items():
        print(f"  {kind:<14}{'unsupported':>17}{u['x86_k_per_s']:>9,}   BPF_PROG_LOAD on a kernel "
              f"function: {errno_name(u['load_on_kernel_function'])} (no vmlinux BTF); on a BPF program it loads and "
              f"the attach is {errno_name(u['attach_to_bpf_program'])}")
    print("                   (arch_prepare_bpf_trampoline, the weak stub of 32-bit ARM 6.1, returns -ENOTSUPP)")
    noisy = [r["mode"] for r in res["rows"] if r["irqs_in_loop"]]
    if noisy:
        print(f"  an interrupt fell inside the loop in {', '.join(noisy)} (too many events for one tick period)")
    v = res["verdict"]
    print(f"\n  the seed's ordering base > raw_tp > kprobe > kretprobe is "
          f"{'reproduced' if v['reproduced'] else 'NOT reproduced'} from instruction counts (base > raw_tp: "
          f"{v['base > raw_tp']}, raw_tp > kprobe: {v['raw_tp > kprobe']}, kprobe > kretprobe: "
          f"{v['kprobe > kretprobe']}); optimized, the kprobe is "
          f"{'still dearer' if v['raw_tp > kprobe-opt'] else 'cheaper'} than raw_tp.")
    print("  booted = instructions per event on the booted kernel (deterministic; the program ran once per event: "
          "prog runs = the map's counter).")
    print("  vs base = base instructions per event over the row's; x86 = the seed's figures (K events/s on x86), "
          "beside only; host ev/s is this host, beside only.")
