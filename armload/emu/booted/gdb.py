"""`--gdb PORT` inside the booted kernel: udbserver serves the machine's CPU when the module's
init is about to run; gdb loads the .ko at the kernel's addresses with the printed
`add-symbol-file` line (what the kernel's scripts/gdb lx-symbols does from /sys/module/*/sections).

Three things udbserver cannot know about this machine, done here:
* where the module is: at do_init_module's entry (the module formed, init not run) armload's
  loader lays the .ko out in a scratch session with the module_alloc answers the kernel just
  got, so every section address is the kernel's (run's image check compares the two after);
* memory: udbserver reads with uc_mem_read, which takes PHYSICAL addresses, while gdb asks for
  virtual ones. The kernel's linear map (PAGE_OFFSET..+RAM) is aliased at its virtual address
  onto the same host memory, and so are the module's pages and pid 1's kernel stack (vmalloc'd,
  VMAP_STACK) as the page tables map them when gdb attaches; other vmalloc memory is not visible
  to gdb ("Cannot access memory"). Nothing the CPU uses lives at those physical addresses (RAM is
  at RAM_BASE), so the kernel runs as without gdb;
* translated blocks: udbserver puts a breakpoint as a code hook, which Unicorn only puts into
  blocks translated afterwards; kernel code ran before, so the translation cache is flushed when
  gdb resumes from the first stop (breakpoints set at a later stop reach only code not yet
  translated since: said in the banner).
"""
from __future__ import annotations

import os

from unicorn import UC_PROT_ALL
from unicorn import arm_const as A

from ...errors import ArmloadError
from .machine import PAGE_OFFSET, RAM_BASE, RAM_SIZE, GuestFault

THREAD_SIZE = 0x2000
PAGE = 0x1000


def symbol_file_line(mod, path: str | None = None, *, init: bool = True) -> str:
    """gdb's `add-symbol-file M.ko 0xTEXT -s .init.text 0x... -s .data 0x...` for every allocated
    section of the loaded module, at its load address (init=False: not the init sections, which
    the kernel freed after init)."""
    from ...constants import SHF_ALLOC
    secs = [s for s in mod.sections if s.flags & SHF_ALLOC and s.size and s.name
            and (init or not s.mem.startswith("init"))]
    text = next((s for s in secs if s.name == ".text"), None)
    parts = [f"add-symbol-file {path or mod.path}"]
    if text is not None:
        parts.append(f"{text.addr & ~1:#x}")
    parts += [f"-s {s.name} {s.addr:#x}" for s in secs if s is not text]
    return " ".join(parts)


def scratch_layout(run, path: str, allocs: list):
    """armload's LoadedModule for `path` at the addresses the kernel's module_alloc returned
    (`allocs`: Alloc(size, base) in order), outside run's session."""
    from ...loader.session import Session
    from .modrun import _Replay
    s = Session(run.session.kernel, run.session.config)
    rp = _Replay(run.session.config)
    rp.queue = list(allocs)
    s.allocator = rp
    s.kernel_word = run.bk.u32
    s.modules = list(run.session.modules)          # modules loaded before: their exports resolve
    s.export_tables = list(run.session.export_tables)
    return s.load(path)


class GdbServer:
    def __init__(self, run, port: int, allocs, say, vmlinux: str | None = None, image: str | None = None):
        if not 0 < port < 65536:
            raise ArmloadError(f"--gdb: bad port {port}")
        try:
            from udbserver import udbserver
        except ImportError:
            raise ArmloadError("--gdb needs the udbserver package (pip install udbserver)") from None
        self.udbserver = udbserver
        self.run, self.port, self.allocs, self.say, self.vmlinux = run, port, allocs, say, vmlinux
        self.image = image                       # where to write the loaded module's debug image
        self.target: str | None = None           # the module whose init gdb stops at
        self.path: str | None = None
        self.mod = None
        self.served = False
        self._hook = None
        self.aliased: list[tuple[int, int]] = []
        run.on_coming(self._coming)

    def expect(self, path: str, name: str) -> None:
        """The next module to load; gdb stops at its init."""
        self.path, self.target = path, name.replace("-", "_")

    def _coming(self, name: str) -> None:
        if self.served or self.target is None or name.replace("-", "_") != self.target:
            return
        mine = self.allocs.of_load(self.allocs.load)
        try:
            self.mod = scratch_layout(self.run, self.path, mine)
        except (ArmloadError, ValueError) as e:
            self.say(f"armload: gdb: armload's loader cannot lay {name} out as the kernel did ({e}); no symbols")
            return
        if self.mod.init_addr is None:
            self.say(f"armload: gdb: {name} has no init function: nothing to stop at")
            return
        init = self.mod.init_addr & ~1
        hint = (f"gdb-multiarch {self.vmlinux}" if self.vmlinux else "gdb-multiarch -ex 'set architecture arm'")
        self.say(f"armload: gdb server on port {self.port}: stops at {name}'s init ({init:#x}) inside the booted "
                 f"kernel; connect with {hint} -ex 'target remote :{self.port}', then:")
        for m in self.run.session.modules:         # modules loaded before: init freed
            self.say(symbol_file_line(m, init=False))
        self.say(symbol_file_line(self.mod, self.path))
        if not self.image:
            import tempfile
            fd, self.image = tempfile.mkstemp(prefix=f"armload-{name}-", suffix=".elf")
            os.close(fd)
        from ...loader.debug_image import write_debug_image
        try:
            write_debug_image(self.mod, self.image)
        except OSError as e:
            raise ArmloadError(f"--gdb: cannot write {self.image}: {e.strerror}") from None
        self.say(f"armload: gdb: or, exact for data and every section (gdb 13 puts a .ko's DWARF at .text's offset: "
                 f"globals and .exit.text land wrong), the module as loaded with its DWARF relocated: "
                 f"add-symbol-file {self.image}")
        self.say("armload: gdb: breakpoints in module and kernel code set at this first stop work; memory "
                 "visible to gdb: the linear map, the module, pid 1's stack")
        self._hook = self.run.bk.hook_code(init, self._start)

    def _start(self, uc, addr, size, _):
        if self.served:
            return
        self.served = True
        self._alias(uc)
        try:
            self.udbserver(uc, self.port, 0)        # blocks until gdb resumes the CPU
        except RuntimeError as e:
            self.run.bk.m.stop_reason = f"--gdb: {e}"
            uc.emu_stop()
            return
        uc.ctl_flush_tb()                           # breakpoints reach code translated before

    def _alias(self, uc) -> None:
        """Virtual -> the same host memory, for uc_mem_read (see the module doc)."""
        m = self.run.bk.m
        taken = [(b, e) for b, e, _perms in uc.mem_regions()]      # end inclusive

        def free(lo, hi):
            return all(hi < b or lo > e for b, e in taken)
        if free(PAGE_OFFSET, PAGE_OFFSET + RAM_SIZE - 1):
            uc.mem_map_ptr(PAGE_OFFSET, RAM_SIZE, UC_PROT_ALL, m._ram_ptr)
            taken.append((PAGE_OFFSET, PAGE_OFFSET + RAM_SIZE - 1))
            self.aliased.append((PAGE_OFFSET, RAM_SIZE))
        sp = uc.reg_read(A.UC_ARM_REG_SP) & ~(THREAD_SIZE - 1)
        ranges = [(r.base, r.end) for r in self.mod.regions] + [(sp, sp + THREAD_SIZE)]
        for lo, hi in ranges:
            for va in range(lo & ~(PAGE - 1), hi, PAGE):
                if not free(va, va + PAGE - 1):
                    continue
                try:
                    pa = m.translate(va)
                except GuestFault:
                    continue
                if not RAM_BASE <= pa < RAM_BASE + RAM_SIZE:
                    continue
                uc.mem_map_ptr(va, PAGE, UC_PROT_ALL, m._ram_ptr + (pa & ~(PAGE - 1)) - RAM_BASE)
                taken.append((va, va + PAGE - 1))
                self.aliased.append((va, PAGE))
