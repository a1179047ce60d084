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
caller's lr restored (mcount_exit).

Several users per function, as kernel/trace/ftrace.c allows: each FtraceOps has a filter hash
(the functions it traces; None = every traceable function, as with an empty filter); a site
is `bl ftrace_caller` while at least one enabled ops' filter holds it (the record's ref count)
and the NOP otherwise; ftrace_ops_list_func calls every enabled ops whose filter holds the ip,
in registration order. function_graph (CONFIG_FUNCTION_GRAPH_TRACER, which Debian has) is an
ops with an entry and a return handler: prepare_ftrace_return replaces the parent's return
address saved by `push {lr}` with return_to_handler, on the current task's return stack
(FTRACE_RETFUNC_DEPTH 50 deep; deeper calls are not hooked); return_to_handler is the Image's
own code when it is mapped (push {r0-r3}; bl ftrace_return_to_handler; ...), with
ftrace_return_to_handler the Python part. armload's direct trampolines (direct.py, an
extension: 32-bit ARM 6.1 has no direct calls) take a site alone (-EBUSY beside ftrace users).
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


class Users:
    """A site's owner while ftrace_ops use it (the record's ref count lives in Ftrace.users)."""
    kind = "ftrace"


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
    """register_ftrace_function: handler(hit) gets the function and its caller; `filter` (site
    list) is ftrace_set_filter's hash, None for every traceable function. A graph ops
    (register_ftrace_graph) has `entry`/`ret` handlers instead."""

    def __init__(self, ft, sites, handler, *, graph: bool = False, ret=None):
        self.ft, self.handler = ft, handler
        self.filter = None if sites is None else list(sites)
        self.site = self.filter[0] if self.filter else None
        self.graph, self.ret = graph, ret
        self.kind = "function_graph" if graph else "ftrace"
        self.enabled = False
        self.nhit = 0
        self.nmissed = 0                  # graph: calls deeper than FTRACE_RETFUNC_DEPTH

    def covers(self, site: Site) -> bool:
        return self.filter is None or site in self.filter

    def set_filter(self, names) -> None:
        """ftrace_set_filter (reset): trace exactly these functions from now on."""
        was = self.enabled
        self.disable()
        self.filter = None if names is None else [self.ft.site_of(self.ft.p.function(n) if isinstance(n, str) else n)
                                                  for n in names]
        if was:
            self.enable()

    def enable(self):
        if not self.enabled:
            self.ft.add_user(self)
            self.enabled = True
        return self

    def disable(self):
        if self.enabled:
            self.ft.remove_user(self)
            self.enabled = False
        return self

    unregister = disable

    def sites(self):
        return []


FTRACE_RETFUNC_DEPTH = 50


class Ftrace:
    def __init__(self, probes):
        self.p = probes
        self.m = probes.m
        self.thumb = bool(self.m.config.thumb2)
        self.sites: dict[int, Site] = {}
        self.by_function: dict[tuple[int, str], list[Site]] = {}
        self.errors: list[str] = []
        self._caller_ready = False
        self.users: list[FtraceOps] = []         # enabled ops, in registration order
        self._ret_stacks: dict[int, list] = {}   # task -> function_graph return stack
        self._return_to_handler = None
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

    def add_user(self, ops: FtraceOps) -> None:
        """ftrace_startup: the ops joins the list; sites it newly covers become calls."""
        sites = self.traceable() if ops.filter is None else ops.filter
        for site in sites:
            if site.state == "call" and not isinstance(site.owner, Users):
                raise refuse("register_ftrace_function", EBUSY, f"{site.function}: its ftrace site is taken by "
                             f"armload's {getattr(site.owner, 'kind', '?')} trampoline (an extension; no direct "
                             f"calls on 32-bit ARM)")
        self.users.append(ops)
        with self.p.batch():
            for site in sites:
                if site.state != "call" and self._live(site):
                    self.make_call(site, self.ftrace_addr, Users())

    def remove_user(self, ops: FtraceOps) -> None:
        """ftrace_shutdown: sites no remaining ops covers go back to the NOP."""
        self.users.remove(ops)
        with self.p.batch():
            for site in (self.traceable() if ops.filter is None else ops.filter):
                if site.state == "call" and isinstance(site.owner, Users) and \
                        not any(o.covers(site) for o in self.users):
                    self.make_nop(site)

    def traceable(self) -> list[Site]:
        """available_filter_functions: every live site."""
        return [s for s in self.sites.values() if self._live(s)]

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
        """ftrace_ops_list_func(ip, parent_ip): every enabled ops whose filter holds ip; a graph
        ops runs prepare_ftrace_return."""
        from unicorn import arm_const as A
        ip, parent = self.p.uc.reg_read_batch([A.UC_ARM_REG_R0, A.UC_ARM_REG_R1])
        site = self.sites.get(ip)
        if site is None or not isinstance(site.owner, Users):
            return
        self.p.charge("ftrace")
        sp = self.p.uc.reg_read(A.UC_ARM_REG_SP)
        args = list(struct.unpack("<4I", self.p.read(sp, 16)))     # the saved r0-r3
        for ops in list(self.users):
            if not ops.covers(site):
                continue
            if ops.graph:
                self._graph_entry(ops, site, sp, args, parent)
                continue
            ops.nhit += 1
            h = self.p.hit("ftrace", site.function, ip, args=args, caller=parent)
            if ops.handler is not None:
                ops.handler(h)

    # --- function_graph ---------------------------------------------------------------------
    def graph(self, entry=None, ret=None, functions=None, enable: bool = True) -> FtraceOps:
        """register_ftrace_graph: entry(hit) at each traced call, ret(hit) at its return (hit.ret
        is r0); `functions` is set_graph_function (None: every traceable function)."""
        sites = None if functions is None else [self.site_of(self.p.function(f) if isinstance(f, str) else f)
                                                for f in functions]
        ops = FtraceOps(self, sites, entry, graph=True, ret=ret)
        self.return_to_handler()
        if enable:
            ops.enable()
        return ops

    def ret_stack(self, task: int | None = None) -> list:
        return self._ret_stacks.setdefault(self.m.current if task is None else task, [])

    def _graph_entry(self, ops, site, sp, args, parent) -> None:
        """prepare_ftrace_return: the parent's return address (the word `push {lr}` saved, at
        sp + 20 in ftrace_caller's frame) becomes return_to_handler."""
        stack = self.ret_stack()
        if len(stack) >= FTRACE_RETFUNC_DEPTH:
            ops.nmissed += 1
            return
        ops.nhit += 1
        h = self.p.hit("graph-entry", site.function, site.addr, args=args, caller=parent)
        if ops.handler is not None and ops.handler(h) is False:
            return                               # an entry handler returning false: not traced
        slot = self._parent_slot(site, sp)
        if slot is None:                         # unwind_frame failed: the kernel returns untraced
            ops.nmissed += 1
            return
        real = struct.unpack("<I", self.p.read(slot, 4))[0]
        stack.append((ops, site, real, args, len(stack)))
        self.p.uc.mem_write(slot, struct.pack("<I", self._return_to_handler))

    def _parent_slot(self, site: Site, sp: int) -> int | None:
        """Where the function keeps its return address, as prepare_ftrace_return finds it with the
        EHABI unwinder (frame.lr_addr): the `push {..., lr}` of the prologue before `push {lr};
        bl mcount`, else the word `push {lr}` saved. sp is ftrace_caller's after its
        `stmdb sp!, {r0-r3, lr}`: the `push {lr}` word is at sp + 20."""
        rd = self.p.read_original
        fn = self.p.function_at(site.addr)
        if site.thumb:
            before = 2 if rd(site.addr - 2, 2) == struct.pack("<H", 0xB500) else \
                4 if rd(site.addr - 4, 4) == struct.pack("<HH", 0xF84D, 0xED04) else None
        else:
            before = 4 if rd(site.addr - 4, 4) == struct.pack("<I", 0xE52DE004) else None
        if before is None or fn is None:
            return None
        push_at = site.addr - before
        if push_at == fn.start:
            return sp + 20
        pro = rd(fn.start, push_at - fn.start)
        n = None
        if not site.thumb and len(pro) == 4:
            w = struct.unpack("<I", pro)[0]
            if w & 0xFFFF4000 == 0xE92D4000 and not w & 0x8000:
                n = bin(w & 0xFFFF).count("1")
        elif site.thumb and len(pro) == 2:
            h = struct.unpack("<H", pro)[0]
            if h & 0xFF00 == 0xB500:
                n = bin(h & 0xFF).count("1") + 1
        elif site.thumb and len(pro) == 4:
            h1, h2 = struct.unpack("<HH", pro)
            if h1 == 0xE92D and h2 & 0xC000 == 0x4000:
                n = bin(h2).count("1")
        return None if n is None else sp + 24 + 4 * (n - 1)

    def return_to_handler(self) -> int:
        """return_to_handler: the Image's code with ftrace_return_to_handler as a trap, or (no
        Image) a trap standing for both."""
        if self._return_to_handler is not None:
            return self._return_to_handler
        from unicorn import arm_const as A
        img = self.m.image
        a = img.symbols.get("return_to_handler") if img is not None else None
        h = img.symbols.get("ftrace_return_to_handler") if img is not None else None
        if a is not None and h is not None and not self.thumb:
            def on_handler(machine, at):          # r0 = frame pointer (unused); r0-r3 saved on the stack
                uc = self.p.uc
                sp = uc.reg_read(A.UC_ARM_REG_SP)
                r0 = struct.unpack("<I", self.p.read(sp, 4))[0]
                uc.reg_write(A.UC_ARM_REG_R0, self._graph_return(r0))
                self.p.set_pc(uc.reg_read(A.UC_ARM_REG_LR))
            self.p.trap(h & ~1, False, on_handler)
            self._return_to_handler = a & ~1
        else:
            t = self.p.alloc_text(4)

            def on_return(machine, at):
                self.p.set_pc(self._graph_return(self.p.uc.reg_read(A.UC_ARM_REG_R0)))
            self.p.trap(t, self.thumb, on_return)
            self.p.name_code(t, 4, "return_to_handler")
            self._return_to_handler = t | (1 if self.thumb else 0)
        return self._return_to_handler

    def _graph_return(self, r0: int) -> int:
        """ftrace_return_to_handler: pop the task's return stack, the return handler, the real address."""
        stack = self.ret_stack()
        if not stack:
            from ..emu.faults import ModelFault
            raise ModelFault("return_to_handler reached with an empty return stack", "bug")
        ops, site, real, args, depth = stack.pop()
        self.p.charge("graph-return")
        h = self.p.hit("graph-return", site.function, site.addr, ret=r0, args=args, caller=real)
        h.depth = depth
        if ops.ret is not None:
            ops.ret(h)
        return real

    def _kernel_site(self, func) -> None:
        """ftrace_init for one function of the Image, on first use: its mcount call (the Image's
        __mcount_loc is init data kallsyms does not name; the call is found at the prologue)
        becomes the NOP and an ftrace record."""
        kt = self.p.ktext
        for a in range(func.start, min(func.start + 16, func.start + func.size), 4):
            if a in self.sites:
                self.by_function.setdefault((id(kt), func.name), []).append(self.sites[a])
                return
            if kt.is_mcount_site(a):
                site = Site(kt, a, False, func.name, False)
                self.sites[a] = site
                self.by_function.setdefault((id(kt), func.name), []).append(site)
                self.make_nop(site)
                return

    def kernel_nop(self, name: str) -> bool:
        """ftrace_init for one function of the Image: its `bl __gnu_mcount_nc` becomes the ftrace
        NOP (insn.ARM_FTRACE_NOP), as the booted kernel has it. True if there was a call to replace."""
        kt = self.p.ktext
        f = kt.function(name) if kt is not None else None
        if f is None:
            return False
        for a in range(f.start, min(f.start + 16, f.start + f.size), 4):
            if kt.is_mcount_site(a):
                self.p.write_code(a, struct.pack("<I", I.ARM_FTRACE_NOP))
                return True
        return False

    # --- lookups --------------------------------------------------------------------------------
    def site_of(self, func) -> Site:
        if func.module is self.p.ktext and (id(func.module), func.name) not in self.by_function:
            self._kernel_site(func)
        sites = self.by_function.get((id(func.module), func.name))
        if not sites:
            raise refuse("register_ftrace_function", ENODEV,
                         f"{func.name} has no mcount call site (not traceable: notrace or no -pg)")
        return sites[0]

    def ops(self, target, handler) -> FtraceOps:
        """An ops tracing one function (target), several functions (a list) or all (None)."""
        if target is None:
            return FtraceOps(self, None, handler)
        targets = target if isinstance(target, (list, tuple)) else [target]
        funcs = [self.p.function(t) if isinstance(t, str) else t for t in targets]
        return FtraceOps(self, [self.site_of(f) for f in funcs], handler)

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
