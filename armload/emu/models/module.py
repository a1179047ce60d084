"""kernel/module: reference counts of loaded modules and module symbols for %pS."""
from __future__ import annotations

from .base import ModelLibrary

KSYM_NAME_LEN = 512
MODULE_NAME = 12                  # offsetof(struct module, name)


def register(lib: ModelLibrary) -> None:
    m = lib.model

    def refs(call) -> dict:
        return call.state("module.refs", dict)

    @m("try_module_get", subsystem="module")
    def try_module_get(call):
        mod = call.arg(0)
        if mod:
            refs(call)[mod] = refs(call).get(mod, 1) + 1
        return 1

    @m("__module_get", subsystem="module")
    def module_get(call):
        if call.arg(0):
            refs(call)[call.arg(0)] = refs(call).get(call.arg(0), 1) + 1

    @m("module_put", subsystem="module")
    def module_put(call):
        mod = call.arg(0)
        if mod:
            n = refs(call).get(mod, 1) - 1
            if n < 1:
                call.fault(f"module_put: reference count of {call.symbolize(mod)} below its base", "bug")
            refs(call)[mod] = n

    @m("module_refcount", subsystem="module")
    def module_refcount(call):
        return refs(call).get(call.arg(0), 1) - 1

    @m("module_address_lookup", subsystem="module")
    def module_address_lookup(call):
        # (addr, *size, *offset, **modname, **modbuildid, namebuf): what %pS asks for module text
        addr, size_p, off_p, modname_p, _bid, namebuf = call.args(6)
        mach = call.machine
        mod = mach._in_module(addr)
        if mod is None:
            return 0
        s = mod.symbolize(addr)
        if not s:
            return 0
        name, rest = s.split("+", 1)
        off, size = (int(x, 16) for x in rest.split(" ")[0].split("/"))
        if size_p:
            call.put_u32(size_p, size)
        if off_p:
            call.put_u32(off_p, off)
        if modname_p:
            base = next((r.base for r in mod.regions if not r.init), 0)
            this = next((sec.addr for sec in mod.sections if sec.name == ".gnu.linkonce.this_module"), None)
            call.put_u32(modname_p, (this + MODULE_NAME) if this is not None else 0)
            del base
        call.write(namebuf, name.encode()[:KSYM_NAME_LEN - 1] + b"\0")
        return namebuf
