"""The kernel's own load_module, run in a booted kernel: the loader's oracle.

kernel/module/main.c (6.1) `load_module(struct load_info *info, const char __user *uargs, int
flags)`: the .ko is copied into a buffer from the kernel's vmalloc (load_module vfree()s it),
`struct load_info` (kernel/module/internal.h) gets {name = NULL, mod = NULL, hdr, len} and zeros
elsewhere. Everything after that is the kernel's: signature check (Debian does not enforce;
an unsigned module taints), ELF checks, layout, module_alloc, relocation, ftrace_module_init
(every `bl __gnu_mcount_nc` becomes `add sp, sp, #4`), RO/NX, sysfs, parameters, do_init_module.

`uargs` is a real user pointer, as insmod's: pid 1 has /init's mm (boot.py), the kernel's own
vm_mmap gives it an anonymous page and its _copy_to_user writes the parameter string there (the
page fault on first touch is the kernel's, through the machine's data-abort entry).

Captured on the way: every module memory allocation (size, and the base returned:
modmem.ModuleMemory, the one watcher of module memory), and at the entry of do_init_module
(before init runs) the final bytes of the core and init allocations. The kernel's oops text
is what it prints on the PL011; an oops in init stops the run at make_task_dead (pid 1 would
otherwise be killed and the kernel panic).
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field

from unicorn import arm_const as A

from ...kernel.kofile import compression_of, decompress
from ...kernel.modtree import load_order, tree_index
from .kernel import GFP_KERNEL, BootedKernel, CallError
from .machine import GuestFault
from .modmem import Alloc, ModuleMemory, bl_sites

LOAD_INFO_SIZE = 128
PAGE_SIZE = 4096
MODULE_INIT_COMPRESSED_FILE = 4        # include/uapi/linux/module.h
ELF32_EHDR_SIZE = 52                   # copy_module_from_user: len < sizeof(Elf_Ehdr) is -ENOEXEC
MODULE_STATE_COMING = 1                # enum module_state { LIVE, COMING, GOING, UNFORMED }
LOAD_BUDGET = 8_000_000_000           # instructions; lib/test_bpf.ko needs 5.1 G
OOPS_MARKERS = ("Internal error:", "Unable to handle kernel", "kernel BUG at", "BUG:", "WARNING:",
                "Kernel panic")


@dataclass
class KernelLoadResult:
    name: str
    ret: int | None                    # load_module's return (init's result, or the load error)
    core_base: int = 0
    core_bytes: bytes = b""
    init_base: int = 0
    init_bytes: bytes = b""
    module: int = 0                    # struct module * (at do_init_module)
    console_lines: list[str] = field(default_factory=list)
    oops_text: str = ""
    instructions: int = 0
    allocs: list[Alloc] = field(default_factory=list)
    snaps: list[tuple[int, bytes]] = field(default_factory=list)
    #   every module allocation at do_init_module (6.1: core, init; 6.4+: one per mod_mem type)
    decompressed_by: str = ""          # a compressed file: "kernel" (finit_module) or "kmod" (init_module)
    stopped: str = ""                  # why the run ended early ("" when load_module returned)
    hdr: int = 0                       # info->hdr: the kernel's copy of the file
    percpu: Alloc | None = None        # __alloc_reserved_percpu(size, align) for .data..percpu
    formed: list[tuple[int, bytes]] = field(default_factory=list)
    #   the allocations as prepare_coming_module starts (ftrace_module_enable; else at jump_label_module_notify):
    #   after relocation, kallsyms, module_finalize, ftrace_module_init and complete_formation, before
    #   any notifier or parse_args wrote into module data

    @property
    def errno(self) -> int | None:
        return -self.ret if self.ret is not None and self.ret < 0 else None


def _signed(v: int) -> int:
    return v - (1 << 32) if v & 0x80000000 else v


class _Capture:
    def __init__(self, k: BootedKernel, uargs_va: int, run_init: bool = True):
        self.k, self.uargs_va, self.run_init = k, uargs_va, run_init
        self.level = k.servicing             # hooks see only this load, not one a request_module nests
        self.allocs: list[Alloc] = []
        self.mod = 0
        self.snap: list[tuple[int, bytes]] = []
        self.hooks = []
        img = k.image
        self.mm = ModuleMemory.of(k)
        self.mm.on_alloc.append(self._alloc)
        self._add(img.symbols["do_init_module"], self._init_entry)
        self.kernel_uargs = 0
        self._add(img.address("strndup_user"), self._strndup_user)
        self.kstrndup = img.address("kstrndup")
        self.percpu: Alloc | None = None
        self.formed: list[tuple[int, bytes]] = []
        # __alloc_reserved_percpu(size, align); 6.10+: pcpu_alloc_noprof(size, align, reserved=true, gfp)
        pa = img.symbols.get("__alloc_reserved_percpu") or img.symbols.get("pcpu_alloc_noprof")
        self.percpu_reserved_only = "__alloc_reserved_percpu" not in img.symbols
        if pa:
            self._add(pa, self._percpu_entry)
            for site in bl_sites(img, pa):
                self._add(site + 4, self._percpu_return)
        # formed: at prepare_coming_module's first call, ftrace_module_enable(mod), before any module
        # notifier runs (rt-armmp has no CONFIG_JUMP_LABEL, so no jump_label_module_notify, and its
        # trace notifiers rewrite print_fmt strings in module data)
        fe = img.symbols.get("ftrace_module_enable")
        jl = img.symbols.get("jump_label_module_notify")
        if fe:
            self._add(fe, self._enable)
        elif jl:
            self._add(jl, self._coming)
        dead = img.symbols.get("make_task_dead")      # a panic ends every call already (BootedKernel)
        if dead:
            self._add(dead, self._dead)

    def _add(self, addr, fn):
        self.hooks.append(self.k.hook_code(addr, fn))

    def remove(self):
        for h in self.hooks:
            self.k.unhook(h)
        self.mm.on_alloc.remove(self._alloc)

    def _alloc(self, a: Alloc) -> None:
        if a.level == self.level:
            self.allocs.append(a)

    def _percpu_entry(self, uc, addr, size, _):
        if self.k.servicing != self.level:
            return
        if self.percpu_reserved_only and not uc.reg_read(A.UC_ARM_REG_R2):
            return                                   # pcpu_alloc_noprof for another per-cpu object
        if self.allocs and self.percpu is None:      # the module's, not a later kernel allocation
            self.percpu = Alloc(uc.reg_read(A.UC_ARM_REG_R0))

    def _percpu_return(self, uc, addr, size, _):
        if self.k.servicing != self.level:
            return
        if self.percpu is not None and not self.percpu.base:
            self.percpu.base = uc.reg_read(A.UC_ARM_REG_R0)

    def _enable(self, uc, addr, size, _):
        if self.k.servicing != self.level:
            return
        if not self.formed and self.allocs:
            self.formed = [(a.base, self.k.read(a.base, a.size)) for a in self.allocs if a.base]

    def _coming(self, uc, addr, size, _):
        if self.k.servicing != self.level:
            return
        if uc.reg_read(A.UC_ARM_REG_R1) == MODULE_STATE_COMING and not self.formed:
            self.formed = [(a.base, self.k.read(a.base, a.size)) for a in self.allocs if a.base]

    def _strndup_user(self, uc, addr, size, _):
        if self.kernel_uargs and self.k.servicing == self.level and uc.reg_read(A.UC_ARM_REG_R0) == self.kernel_uargs:
            uc.reg_write(A.UC_ARM_REG_R2, GFP_KERNEL)
            uc.reg_write(A.UC_ARM_REG_PC, self.kstrndup)

    def _init_entry(self, uc, addr, size, _):
        if self.k.servicing != self.level or self.mod:     # once: a service stop resumes at this entry
            return
        self.mod = uc.reg_read(A.UC_ARM_REG_R0)
        self.snap = [(a.base, self.k.read(a.base, a.size)) for a in self.allocs if a.base]
        if not self.run_init:
            self.k.m.stop_reason = "before init"
            uc.emu_stop()

    def _dead(self, uc, addr, size, _):
        self.k.m.stop_reason = "oops"
        uc.emu_stop()


def kernel_compression(k: BootedKernel) -> str | None:
    """What /sys/module/compression says (kernel/module/decompress.c compression_show, called in
    the kernel on a page, as sysfs would): the format the kernel's finit_module inflates itself;
    None when the kernel has no CONFIG_MODULE_DECOMPRESS."""
    syms = k.image.symbols
    if "module_decompress" not in syms or "compression_show" not in syms:
        return None
    page = k.kmalloc(PAGE_SIZE)                   # a kmalloc-4k object is page aligned (sysfs_emit needs it)
    try:
        n = _signed(k.call("compression_show", 0, 0, page))
        return k.cstr(page, 16).strip() if n > 0 else None
    finally:
        k.kfree(page)


def kernel_load(k: BootedKernel, ko: bytes, params: str = "", name: str = "", budget: int = LOAD_BUDGET,
                run_init: bool = True, settle_ns: int = 0) -> KernelLoadResult:
    """Load `ko` with the booted kernel's load_module (in `k`, which it changes: use a fresh
    restore or fork per independent load). run_init=False stops at do_init_module's entry
    (the final memory and the module_alloc addresses, init not run; the kernel is then unusable:
    `stopped` is "before init"). settle_ns > 0 then lets deferred work run (run_until_idle) and
    keeps its console lines.

    A compressed file goes where kmod would send it: to the kernel's own module_decompress when
    /sys/module/compression names its format (finit_module with MODULE_INIT_COMPRESSED_FILE),
    else decompressed here as kmod does and given to init_module; `decompressed_by` says which."""
    how = ""
    kind = compression_of(ko)
    if kind is not None:
        if kind == kernel_compression(k):
            how = "kernel"
        else:
            how, ko = "kmod", decompress(ko, name)
    if len(ko) < ELF32_EHDR_SIZE:
        # init_module's copy_module_from_user refuses it before load_module runs (-ENOEXEC)
        return KernelLoadResult(name, -8, stopped="", console_lines=[])
    mark = len(k.console)
    i0 = k.insns
    cap = _Capture(k, 0, run_init)           # hooks first: no translated block predates them
    buf = k.vmalloc(len(ko))
    if not buf:
        raise GuestFault(f"vmalloc({len(ko)}) failed in the booted kernel")
    k.write(buf, ko)
    info = k.kmalloc(LOAD_INFO_SIZE)
    flags = 0
    if how == "kernel":
        # init_module_from_file: module_decompress(&info, buf, len) fills info->hdr/len with the
        # inflated pages' mapping, the compressed buffer is vfree()d, then load_module
        k.write(info, bytes(LOAD_INFO_SIZE))
        err = _signed(k.call("module_decompress", info, buf, len(ko), budget=budget))
        k.vfree(buf)
        if err:
            k.kfree(info)
            del cap.allocs[:]
            cap.remove()
            return KernelLoadResult(name, err, console_lines=k.console[mark:], decompressed_by=how)
        buf = k.u32(info + 8)                    # struct load_info {name, mod, hdr, len, ...}
        flags = MODULE_INIT_COMPRESSED_FILE
    else:
        k.write(info, struct.pack("<4I", 0, 0, buf, len(ko)) + bytes(LOAD_INFO_SIZE - 16))
    if k.servicing:
        # a load modprobe makes for request_module may run in a kernel thread (cryptomgr_test), which has
        # no user mm: its parameter string is a kernel copy, and strndup_user on it is kstrndup (stand-in)
        uargs = k.kmalloc(len(params) + 1)
        k.write(uargs, params.encode() + b"\0")
        cap.kernel_uargs = uargs
    else:
        uargs = user_string(k, params)
    del cap.allocs[:]
    ret, stopped = None, ""
    try:
        ret = _signed(k.call("load_module", info, uargs, flags, budget=budget))
    except (CallError, GuestFault) as e:
        stopped = str(e)
    finally:
        cap.remove()
    if ret is not None and settle_ns > 0:
        try:
            k.run_until_idle(settle_ns)
        except (CallError, GuestFault) as e:
            stopped = f"after load_module: {e}"
    lines = k.console[mark:]
    oops = _oops(lines)
    res = KernelLoadResult(name, ret, console_lines=lines, oops_text=oops, instructions=k.insns - i0,
                           allocs=cap.allocs, module=cap.mod, stopped=stopped, hdr=buf, percpu=cap.percpu,
                           formed=cap.formed, decompressed_by=how)
    res.snaps = cap.snap
    if cap.snap:
        res.core_base, res.core_bytes = cap.snap[0]
        if len(cap.snap) > 1:
            res.init_base, res.init_bytes = cap.snap[1]
    if ret is not None and not stopped:       # load_info is ours to free
        k.kfree(info)
    return res


def kernel_alloc_addresses(k: BootedKernel, ko: bytes, params: str = "") -> list[Alloc]:
    """The module_alloc calls (size, returned base) the kernel's load_module makes for `ko`, in
    order (core, then init), stopping before init runs: the addresses armload's loader must use
    for a byte-for-byte comparison with KernelLoadResult.core_bytes/init_bytes. Consumes `k`."""
    r = kernel_load(k, ko, params, run_init=False)
    if r.stopped != "before init":
        raise GuestFault(f"load_module did not reach do_init_module (ret {r.ret}, {r.stopped or 'returned'})")
    return r.allocs


PROT_RW, MAP_PRIVATE_ANON = 3, 0x22


def user_string(k: BootedKernel, text: str) -> int:
    """A NUL-terminated copy of `text` in pid 1's user memory (vm_mmap + _copy_to_user)."""
    data = text.encode() + b"\0"
    size = (len(data) + 0xFFF) & ~0xFFF
    ua = k.call("vm_mmap", 0, 0, size, PROT_RW, MAP_PRIVATE_ANON, 0)
    if ua > 0xFFFFF000:                       # IS_ERR_VALUE: -4095..-1
        raise GuestFault(f"vm_mmap({size}) in pid 1 failed ({_signed(ua)})")
    kb = k.kmalloc(len(data))
    k.write(kb, data)
    left = k.copy_to_user(ua, kb, len(data))
    k.kfree(kb)
    if left:
        raise GuestFault(f"_copy_to_user left {left} bytes uncopied at {ua:#x}")
    return ua


def _oops(lines: list[str]) -> str:
    for i, ln in enumerate(lines):
        if any(m in ln for m in OOPS_MARKERS):
            return "\n".join(lines[i:])
    return ""


def kernel_load_path(k: BootedKernel, path: str, params: str = "", tree: str | None = None) -> list[KernelLoadResult]:
    """Load `path` after its dependencies (found in `tree`), in order, stopping at a failure."""
    order = load_order(path, tree_index(tree)) if tree else [path]
    out = []
    for p in order:
        with open(p, "rb") as f:
            r = kernel_load(k, f.read(), params if p == path else "", name=os.path.basename(p))
        out.append(r)
        if r.ret != 0:
            break
    return out
