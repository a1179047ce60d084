"""Dynamic ftrace on module code, as arch/arm/kernel/ftrace.c does it (6.1).

At module load ftrace_module_init visits every __mcount_loc entry (each `bl __gnu_mcount_nc`
the compiler emitted after `push {lr}`) and ftrace_make_nop replaces the call by the NOP
(`add sp, sp, #4`, or `add.w sp, sp, #4` in a Thumb-2 kernel), after checking that the site holds exactly
the call it expects: `bl MCOUNT_ADDR` directly, or through the module's fixed PLT entry when the
kernel is out of `bl` range (get_module_plt). Enabling a function (ftrace_make_call) writes
`bl ftrace_caller`, through the fixed FTRACE_ADDR PLT entry when out of range; disabling
writes the NOP back. A wrong instruction at a site is the kernel's ftrace bug (-EINVAL).

ftrace_caller is armload's own code with the semantics of arch/arm/kernel/entry-ftrace.S:
its entry (FTRACE_ADDR: the kernel image's ftrace_caller, or the simulated address modules
were given) jumps to a body that saves r0-r3/lr, passes (ip, parent_ip) to ftrace_call's
target, the ops list function (a trap running the Python handlers), and returns with the
caller's lr restored (mcount_exit). A direct trampoline takes the same site (direct.py).
"""
from __future__ import annotations

import struct

from keystone import KS_ARCH_ARM, KS_MODE_ARM, KS_MODE_THUMB, Ks

from . import insn as I
from .base import EBUSY, EINVAL, ProbeError, refuse

ENODEV = 19

MCOUNT = "__gnu_mcount_nc"

_CALLER_ARM = """
    stmdb sp!, {r0-r3, lr}
    ldr r1, [sp, #20]
    sub r0, lr, #4
    bl LIST
    ldmia sp!, {r0-r3}
    ldr lr, [sp, #4]
    ldr pc, [sp], #8
"""
# Thumb-2, encoded by hand (keystone rejects some of these forms):
# push {r0-r3, lr}; ldr r1, [sp, #20]; sub.w r0, lr, #5; bl LIST; pop {r0-r3};
# ldr.w lr, [sp, #4]; ldr.w pc, [sp], #8
def thumb_frame_code(addr: int, call: int, head: bytes) -> bytes:
    """`push {r0-r3, lr}; <head>; bl call; pop {r0-r3}; ldr.w lr, [sp, #4]; ldr.w pc, [sp], #8`."""
    code = struct.pack("<H", 0xB50F) + head
    code += I.thumb_bytes(I.thumb_bl(addr + len(code), call), 4)
    return code + struct.pack("<HHHHH", 0xBC0F, 0xF8DD, 0xE004, 0xF85D, 0xFB08)


def assemble(src: str, addr: int, thumb: bool, **syms: int) -> bytes:
    for k, v in syms.items():
        src = src.replace(k, f"{v:#x}")
    enc, _ = Ks(KS_ARCH_ARM, KS_MODE_THUMB if thumb else KS_MODE_ARM).asm(src, addr)
    return bytes(enc)


class Site:
    """One mcount call site (rec->ip) of a module function."""

    __slots__ = ("module", "addr", "thumb", "function", "init", "state", "target", "via_plt", "owner")

    def __init__(self, module, addr, thumb, function, init):
        self.module, self.addr, self.thumb, self.function, self.init = module, addr, thumb, function, init
        self.state = "mcount"        # mcount (as loaded) | nop | call
        self.target = 0              # where the enabled call goes
        self.via_plt = 0
        self.owner = None            # the ops or trampoline using the site


class FtraceOps:
    """register_ftrace_function for one function: handler(hit) gets the function and its caller."""

    def __init__(self, ft, site: Site, handler):
        self.ft, self.site, self.handler = ft, site, handler
        self.kind = "ftrace"
        self.enabled = False

    def enable(self):
        if not self.enabled:
            self.ft.make_call(self.site, self.ft.ftrace_addr, self)
            self.enabled = True
        return self

    def disable(self):
        if self.enabled:
            self.ft.make_nop(self.site)
            self.enabled = False
        return self

    def sites(self):
        return []


class Ftrace:
    def __init__(self, probes):
        self.p = probes
        self.m = probes.m
        self.thumb = bool(self.m.config.thumb2)
        self.sites: dict[int, Site] = {}
        self.by_function: dict[tuple[int, str], list[Site]] = {}
        self.errors: list[str] = []
        self._caller_ready = False
        self.ftrace_addr = self._kernel_addr("ftrace_caller")
        self.mcount_addr = self._kernel_addr(MCOUNT)

    def _kernel_addr(self, name: str) -> int:
        for mod in self.m.modules:
            for e in mod.plt_entries:
                if e.fixed and e.symbol == name:
                    return e.target
        a = self.m.kernel_symbol(name)
        if a is None and self.m.kernel is not None:
            from ..kernel.provider import Export
            a = self.m.kernel.address_of(self.m.kernel.find_export(name) or Export(name=name, addr=None), "func")[0]
        return a

    # --- ftrace_module_init -------------------------------------------------------------------
    def find_sites(self, mod) -> list[int]:
        """__mcount_loc entries (the kernel's list), cross-checked against the mcount relocations."""
        locs: list[int] = []
        for s in mod.sections:
            if s.name == "__mcount_loc" and s.data:
                n = len(s.data) // 4
                locs = [a & ~1 for a in struct.unpack(f"<{n}I", s.data[:4 * n])]
        rel = set()
        names = mod.sym_names
        for row in mod.branches:
            si = int(row["sym"])
            if si < len(names) and names[si] == MCOUNT:
                rel.add(int(row["place"]))
        if not locs:
            return sorted(rel)
        missing = rel - set(locs)
        if missing:
            self.errors.append(f"{mod.name}: {len(missing)} mcount call(s) not listed in __mcount_loc")
        return locs

    def module_init(self, mod) -> None:
        fin = getattr(mod, "finalized", None)
        loader_nops = set(fin.ftrace_nops) if fin is not None else set()
        for addr in self.find_sites(mod):
            if mod.region_of(addr) is None or self.p.owner(addr) is None:
                continue                     # an init site whose memory is already freed
            fn = self.p.function_at(addr)
            reg = mod.region_of(addr)
            thumb = fn.thumb if fn is not None else self.thumb
            site = Site(mod, addr, thumb, fn.name if fn else f"{addr:#x}", bool(reg and reg.init))
            if addr in loader_nops:          # the loader ran ftrace_module_init: already the NOP
                site.state = "nop"
            self.sites[addr] = site
            if fn is not None:               # under every name of the function (init_module = x_init)
                for name in self.p.function_names(mod, fn.start):
                    self.by_function.setdefault((id(mod), name), []).append(site)
            try:
                self.make_nop(site)
            except ProbeError as e:
                self.errors.append(str(e))

    # --- encodings ----------------------------------------------------------------------------
    def _nop(self, site: Site) -> bytes:
        return I.thumb_bytes(I.THUMB_FTRACE_NOP, 4) if site.thumb else struct.pack("<I", I.ARM_FTRACE_NOP)

    def _plt_slot(self, site: Site, target: int) -> int | None:
        """get_module_plt: the fixed entry of the site's PLT (core or init) holding target."""
        want = "init" if site.init else "core"
        for e in site.module.plt_entries:
            if e.fixed and e.plt == want and e.target == target:
                return e.addr
        return None

    def call_insn(self, site: Site, target: int, fixed_plt: bool = True) -> tuple[bytes, int]:
        """ftrace_call_replace, then the PLT when out of range: (bytes, plt slot or 0)."""
        for dest, plt in ((target, 0), (self._plt_slot(site, target) if fixed_plt else None, 1)):
            if dest is None:
                continue
            op = I.thumb_bl(site.addr, dest) if site.thumb else I.arm_bl(site.addr, dest & ~1)
            if op is not None:
                return (I.thumb_bytes(op, 4) if site.thumb else struct.pack("<I", op)), (dest if plt else 0)
        raise refuse("ftrace_make_call", EINVAL, f"{self.m.symbolize(site.addr)}: {target:#010x} is out of "
                     f"bl range and the module has no PLT entry for it")

    def _bug(self, site: Site, actual: bytes) -> ProbeError:
        return ProbeError(f"ftrace failed to modify [<{site.addr:08x}>] {self.m.symbolize(site.addr)} "
                          f"actual: {':'.join(f'{b:02x}' for b in actual)}", errno=-EINVAL)

    def _live(self, site: Site) -> bool:
        return self.p.owner(site.addr) is not None

    def make_nop(self, site: Site) -> None:
        if not self._live(site):             # freed init text: nothing left to patch
            site.state, site.target, site.via_plt, site.owner = "nop", 0, 0, None
            return
        cur = self.p.read(site.addr, 4)
        if site.state == "call":
            old, _ = self.call_insn(site, site.target)
        else:
            old, _ = self.call_insn(site, self.mcount_addr)
        if site.state == "nop" and cur == self._nop(site):
            return
        if cur != old:
            raise self._bug(site, cur)
        self.p.write_code(site.addr, self._nop(site))
        site.state, site.target, site.via_plt, site.owner = "nop", 0, 0, None

    def make_call(self, site: Site, target: int, owner, fixed_plt: bool = True) -> None:
        if site.state == "call":
            raise refuse("register_ftrace_function", EBUSY, f"{site.function}: its ftrace site is in use "
                         f"({getattr(site.owner, 'kind', '?')})")
        if not self._live(site):
            raise refuse("register_ftrace_function", EINVAL, f"{site.function}: its code was init memory, "
                         f"freed after init")
        if target == self.ftrace_addr:
            self._ensure_caller()
        new, plt = self.call_insn(site, target, fixed_plt)
        cur = self.p.read(site.addr, 4)
        if cur != self._nop(site):
            raise self._bug(site, cur)
        self.p.write_code(site.addr, new)
        site.state, site.target, site.via_plt, site.owner = "call", target, plt, owner

    # --- ftrace_caller ------------------------------------------------------------------------
    def set_tracer(self, addr: int | None) -> None:
        """ftrace_update_ftrace_func: ftrace_call calls `addr` (emulated code taking (ip, parent_ip))
        directly instead of the ops list function; None restores the list function."""
        self._ensure_caller()
        th = self.thumb
        at = self.caller_body + (6 if th else 12)             # the `bl` at ftrace_call
        dest = self.list_func if addr is None else addr
        op = I.thumb_bl(at, dest) if th else I.arm_bl(at, dest & ~1)
        if op is None:
            raise refuse("ftrace_update_ftrace_func", EINVAL, f"{dest:#010x} is out of bl range of ftrace_call")
        self.p.write_code(at, I.thumb_bytes(op, 4) if th else struct.pack("<I", op))

    def _ensure_caller(self) -> None:
        if self._caller_ready:
            return
        th = self.thumb
        fa = self.ftrace_addr & ~1
        if self.m._page_prot(fa & ~0xFFF) is None:
            self.m._map_sim_text(fa, th)
        body = self.p.alloc_text(64)
        lst = self.p.stub(th, self._list_func, addr=body + 48)
        if th:
            code = thumb_frame_code(body, lst, struct.pack("<HHH", 0x9905, 0xF1AE, 0x0005))
        else:
            code = assemble(_CALLER_ARM, body, False, LIST=lst & ~1)
        self.p.write_code(body, code)
        if th:                       # ldr.w pc, [pc, #0]; .word body|1  (entry is word aligned)
            entry = struct.pack("<HHI", 0xF8DF, 0xF000, body | 1) if fa % 4 == 0 else \
                struct.pack("<HHHI", 0xBF00, 0xF8DF, 0xF000, body | 1)
        else:                        # ldr pc, [pc, #-4]; .word body
            entry = struct.pack("<II", 0xE51FF004, body)
        self.p.write_code(fa, entry)
        self.caller_body = body
        self.list_func = lst
        self.p.name_code(body, 64, "ftrace_caller")
        self._caller_ready = True

    def _list_func(self, machine) -> None:
        """ftrace_ops_list_func(ip, parent_ip): the handlers of the function at ip."""
        from unicorn import arm_const as A
        ip, parent = self.p.uc.reg_read_batch([A.UC_ARM_REG_R0, A.UC_ARM_REG_R1])
        site = self.sites.get(ip)
        if site is None or not isinstance(site.owner, FtraceOps):
            return
        sp = self.p.uc.reg_read(A.UC_ARM_REG_SP)
        args = list(struct.unpack("<4I", self.p.read(sp, 16)))     # the saved r0-r3
        h = self.p.hit("ftrace", site.function, ip, args=args, caller=parent)
        if site.owner.handler is not None:
            site.owner.handler(h)

    # --- lookups --------------------------------------------------------------------------------
    def site_of(self, func) -> Site:
        sites = self.by_function.get((id(func.module), func.name))
        if not sites:
            raise refuse("register_ftrace_function", ENODEV,
                         f"{func.name} has no mcount call site (not traceable: notrace or no -pg)")
        return sites[0]

    def ops(self, target, handler) -> FtraceOps:
        func = self.p.function(target) if isinstance(target, str) else target
        return FtraceOps(self, self.site_of(func), handler)

    def is_site(self, addr: int) -> bool:
        return addr in self.sites

    def call_sites(self) -> list[dict]:
        return [{"module": s.module, "place": s.addr, "thumb": s.thumb, "target": s.target,
                 "plt": s.via_plt, "symbol": "ftrace_caller" if s.target == self.ftrace_addr else
                 self.m.symbolize(s.target & ~1)} for s in self.sites.values() if s.state == "call"]

    def patched_sites(self) -> list[dict]:
        out = []
        for s in self.sites.values():
            what = {"nop": "ftrace nop (add sp, sp, #4)", "call": f"ftrace call -> "
                    f"{'ftrace_caller' if s.target == self.ftrace_addr else self.p.symbolize(s.target & ~1)}"
                    + (" via PLT" if s.via_plt else "")}.get(s.state)
            if what:
                out.append({"addr": s.addr, "size": 4, "thumb": s.thumb, "what": what, "module": s.module.name})
        return out
