"""Module parameters, as load_module applies them before init (kernel/params.c parse_args).

`insmod m.ko a=1 b=x` joins its arguments into one string; the kernel splits it with
next_arg(), finds each name in the module's `__param` table (struct kernel_param, 6.1 ARM):

    const char *name;                  +0
    struct module *mod;                +4
    const struct kernel_param_ops *ops;+8   { unsigned flags; set; get; free; }
    const u16 perm;                    +12
    s8 level;                          +14
    u8 flags;                          +15  KERNEL_PARAM_FL_UNSAFE = 1
    union { void *arg; const struct kparam_string *str;     /* {maxlen, string} */
            const struct kparam_array *arr; };  +16        /* {max, elemsize, num*, ops*, elem*} */

and calls `ops->set(val, kp)` under kernel_param_lock(mod). With the kernel image the set
functions are the kernel's own (param_set_int, param_set_charp, param_array_set, ...), so a
bad value is refused with the kernel's own result; without it the standard ops are Python
versions of the same code (said in the notes). A parameter the module does not have is, as in
6.1 kernel/module/main.c unknown_module_param_cb, warned about and ignored (insmod succeeds).
Errors: parse_args keeps going and returns the last error; the load then fails with it.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

from ..errors import EmulationError
from .errno import errno_name

KP_SIZE = 20
KERNEL_PARAM_OPS_FL_NOARG = 1
KERNEL_PARAM_FL_UNSAFE = 1
EINVAL, ENOENT, ENOSPC, ERANGE, EPERM = 22, 2, 28, 34, 1
MAX_CHARP = 1024


@dataclass
class KernelParam:
    name: str
    addr: int                     # address of the struct kernel_param
    mod: int
    ops: int
    ops_name: str | None          # param_ops_int, ... when ops is a kernel symbol
    perm: int
    level: int
    flags: int
    arg: int


@dataclass
class ParamOutcome:
    module: str
    ok: bool = True
    error: int = 0                # the errno load_module fails with (negative), 0 when ok
    applied: list[dict] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    run: object = None            # the RunResult of a set function that faulted

    def summary(self) -> str:
        if self.ok:
            return f"{self.module}: parameters: " + (", ".join(f"{a['name']}={a['value']}" if a['value'] is not None
                                                              else a['name'] for a in self.applied) or "none")
        return f"{self.module}: insmod failed: parameters refused: {self.error} (-{errno_name(self.error)})"

    def to_dict(self) -> dict:
        return {"module": self.module, "ok": self.ok, "error": self.error,
                "errno_name": errno_name(self.error) if self.error else None,
                "applied": self.applied, "log": self.log, "notes": self.notes,
                "run": self.run.to_dict() if self.run is not None else None}


def join_args(args) -> str:
    """insmod's argument string: words joined by spaces; a value with spaces quoted."""
    out = []
    for a in args:
        if " " in a and '"' not in a:
            k, eq, v = a.partition("=")
            a = f'{k}="{v}"' if eq else f'"{a}"'
        out.append(a)
    return " ".join(out)


def next_args(s: str) -> list[tuple[str, str | None]]:
    """kernel/params.c next_arg() over the whole string: (param, val or None), quotes removed."""
    out = []
    s = s.lstrip()
    while s:
        in_quote = quoted = False
        i = 0
        if s[0] == '"':
            s = s[1:]
            in_quote = quoted = True
        equals = None
        while i < len(s):
            c = s[i]
            if c.isspace() and not in_quote:
                break
            if equals is None and c == "=":
                equals = i
            if c == '"':
                in_quote = not in_quote
            i += 1
        word, rest = s[:i], s[i + 1:]
        if equals is None:
            param, val = word, None
            if quoted and param.endswith('"'):
                param = param[:-1]
        else:
            param, val = word[:equals], word[equals + 1:]
            if val.startswith('"'):
                val = val[1:]
                if val.endswith('"'):
                    val = val[:-1]
            elif quoted and val.endswith('"'):
                val = val[:-1]
        out.append((param, val))
        s = rest.lstrip()
    return out


def parameq(a: str, b: str) -> bool:
    return a.replace("-", "_") == b.replace("-", "_")


def read_table(machine, m) -> list[KernelParam]:
    """The module's __param table, read from its mapped (relocated) memory."""
    machine.map_module(m)
    sec = next((s for s in m.sections if s.name == "__param"), None)
    if sec is None or sec.size == 0:
        return []
    by_addr = {rs.addr & ~1: rs.name for rs in m.resolved.values() if rs.addr}
    out = []
    for a in range(sec.addr, sec.addr + sec.size - KP_SIZE + 1, KP_SIZE):
        name_p, mod, ops, perm, level, flags, arg = struct.unpack("<IIIHbBI", machine.read(a, KP_SIZE))
        name = machine.read_cstring(name_p, 256).decode("utf-8", "replace")
        out.append(KernelParam(name, a, mod, ops, by_addr.get(ops) or _kernel_name(machine, ops),
                               perm, level, flags, arg))
    return out


def _kernel_name(machine, addr: int) -> str | None:
    img = getattr(machine, "image", None)
    if img is None:
        return None
    for n in ("param_ops_int", "param_ops_uint", "param_ops_bool", "param_ops_charp", "param_ops_string",
              "param_array_ops", "param_ops_ulong", "param_ops_long", "param_ops_short", "param_ops_ushort",
              "param_ops_byte", "param_ops_invbool", "param_ops_bint", "param_ops_ullong", "param_ops_hexint"):
        if img.address(n) == addr:
            return n
    return None


def apply_params(machine, module, args, *, prefer_kernel: bool = True) -> ParamOutcome:
    """Set the module's parameters from insmod-style words (["a=1", "b"] or one string)."""
    m = machine._find_module(module) if not hasattr(module, "sections") else machine.map_module(module)
    text = args if isinstance(args, str) else join_args(list(args))
    out = ParamOutcome(m.name)
    table = read_table(machine, m)
    real = prefer_kernel and getattr(machine, "image", None) is not None
    py_used = False
    err = 0
    first_log = len(_log_lines(machine))
    for param, val in next_args(text):
        if val is None and param == "--":
            rest = text.split("--", 1)[1].strip()
            if rest:
                _log(machine, out, 4, f"{m.name}: parameters '{rest}' after `--' ignored")
            break
        kp = next((k for k in table if parameq(param, k.name)), None)
        if kp is None:
            ret = _unknown(machine, out, m.name, param, val)
        else:
            ops_flags = _u32(machine, kp.ops) if real or kp.ops_name not in PY_OPS else PY_FLAGS.get(kp.ops_name, 0)
            if val is None and not ops_flags & KERNEL_PARAM_OPS_FL_NOARG:
                ret = -EINVAL
            else:
                if kp.flags & KERNEL_PARAM_FL_UNSAFE:
                    _log(machine, out, 5, f"Setting dangerous option {kp.name} - tainting kernel")
                ret, how = _set(machine, m, kp, val, real, out)
                if out.run is not None:
                    out.ok, out.error = False, -EINVAL
                    out.log = _log_lines(machine)[first_log:]
                    return out
                py_used |= how == "python"
                if ret == 0:
                    out.applied.append({"name": kp.name, "value": val, "how": how, "ops": kp.ops_name})
        if ret == 0:
            continue
        if ret == -ENOENT:
            _log(machine, out, 3, f"{m.name}: Unknown parameter `{param}'")
        elif ret == -ENOSPC:
            _log(machine, out, 3, f"{m.name}: `{val or ''}' too large for parameter `{param}'")
        else:
            _log(machine, out, 3, f"{m.name}: `{val or ''}' invalid for parameter `{param}'")
        err = ret
    if py_used:
        out.notes.append("module parameters set by armload's Python versions of the kernel's param_set_* "
                         "(no kernel image: --kernel vmlinuz runs the kernel's own)")
    if err:
        out.ok, out.error = False, err
    out.log = _log_lines(machine)[first_log:]
    return out


def _log_lines(machine) -> list[str]:
    log = machine.log
    return [r.text for r in log.records] if hasattr(log, "records") else list(log.lines)


def _unknown(machine, out, modname, param, val) -> int:
    """unknown_module_param_cb: async_probe and dyndbg are the module loader's; others warned."""
    if param == "async_probe":
        out.notes.append("async_probe accepted (probing is synchronous in armload)")
        return 0
    if param.split(".")[-1] == "dyndbg":
        out.notes.append(f"dyndbg query {val or '+p'!r} accepted but not simulated (no dynamic debug)")
        return 0
    _log(machine, out, 4, f"{modname}: unknown parameter '{param}' ignored")
    return 0


def _log(machine, out, level, text) -> None:
    machine.log.printk(text + "\n", level)
    machine.log.finish()


def _u32(machine, addr: int) -> int:
    return struct.unpack("<I", machine.read(addr, 4))[0]


def _kstring(machine, s: str) -> int:
    """The value in kernel memory for good (mod->args lives as long as the module)."""
    b = s.encode() + b"\0"
    a = machine.heap.alloc(len(b), kind="module args")
    if not a:
        raise EmulationError("cannot allocate the module's argument string")
    machine.write(a, b)
    return a


def _set(machine, m, kp: KernelParam, val, real: bool, out) -> tuple[int, str]:
    set_fn = _u32(machine, kp.ops + 4) if kp.ops else 0
    in_module = machine._owner_any(set_fn & ~1) is not None if set_fn else False
    if real or in_module:
        return _call_set(machine, m, kp, val, set_fn, out), "kernel" if not in_module else "module"
    fn = PY_OPS.get(kp.ops_name or "")
    if fn is None:
        raise EmulationError(f"{m.name}: parameter {kp.name} uses {kp.ops_name or hex(kp.ops)}, which armload "
                             f"can set only with the kernel image (--kernel vmlinuz)")
    return fn(machine, kp.arg, val, kp), "python"


def _call_set(machine, m, kp, val, set_fn, out) -> int:
    v = _kstring(machine, val) if val is not None else 0
    lock, unlock = machine.kernel_function("kernel_param_lock"), machine.kernel_function("kernel_param_unlock")
    if lock is not None and kp.mod:
        machine.call(lock, [kp.mod], name="kernel_param_lock", module=m)
    res = machine.call(set_fn, [v, kp.addr], name=f"{kp.ops_name or 'ops'}->set ({kp.name})", module=m)
    if lock is not None and kp.mod:
        machine.call(unlock, [kp.mod], name="kernel_param_unlock", module=m)
    if res.status != "returned":
        out.run = res
        return -EINVAL
    return res.retval


# --- Python versions of the kernel's standard ops (kernel/params.c, lib/kstrtox.c) ----------
def _kstrtoull(s: str, base: int = 0) -> int:
    if s.startswith("+"):
        s = s[1:]
    if s.endswith("\n"):
        s = s[:-1]
    if base == 0:
        if s[:2].lower() == "0x" and len(s) > 2 and s[2] in "0123456789abcdefABCDEF":
            base, s = 16, s[2:]
        elif s.startswith("0") and len(s) > 1:
            base, s = 8, s[1:]
        else:
            base = 10
    elif base == 16 and s[:2].lower() == "0x":
        s = s[2:]
    if not s or any(c not in "0123456789abcdefABCDEF"[:base + (6 if base > 10 else 0)] for c in s):
        raise ValueError(-EINVAL)
    v = int(s, base)
    if v >= 1 << 64:
        raise ValueError(-ERANGE)
    return v


def _kstrtoll(s: str, base: int = 0) -> int:
    if s.startswith("-"):
        v = _kstrtoull(s[1:], base)
        if v > 1 << 63:
            raise ValueError(-ERANGE)
        return -v
    v = _kstrtoull(s, base)
    if v >= 1 << 63:
        raise ValueError(-ERANGE)
    return v


def _int_setter(fmt: str, lo: int, hi: int, signed: bool, base: int = 0):
    def set_(machine, arg, val, kp):
        try:
            v = _kstrtoll(val, base) if signed else _kstrtoull(val, base)
        except ValueError as e:
            return e.args[0]
        if not lo <= v <= hi:
            return -ERANGE
        machine.write(arg, struct.pack(fmt, v))
        return 0
    return set_


def _kstrtobool(val: str):
    if not val:
        return None
    c = val[0]
    if c in "yYtT1":
        return True
    if c in "nNfF0":
        return False
    if c in "oO" and len(val) > 1:
        return {"n": True, "N": True, "f": False, "F": False}.get(val[1])
    return None


def _set_bool(machine, arg, val, kp):
    b = _kstrtobool("1" if val is None else val)
    if b is None:
        return -EINVAL
    machine.write(arg, bytes([b]))
    return 0


def _set_invbool(machine, arg, val, kp):
    b = _kstrtobool("1" if val is None else val)
    if b is None:
        return -EINVAL
    machine.write(arg, bytes([not b]))
    return 0


def _set_bint(machine, arg, val, kp):
    b = _kstrtobool("1" if val is None else val)
    if b is None:
        return -EINVAL
    machine.write(arg, struct.pack("<i", int(b)))
    return 0


def _set_charp(machine, arg, val, kp):
    if len(val.encode()) > MAX_CHARP:
        _log_plain(machine, f"{kp.name}: string parameter too long")
        return -ENOSPC
    machine.write(arg, struct.pack("<I", _kstring(machine, val)))
    return 0


def _set_string(machine, arg, val, kp):
    maxlen, dest = struct.unpack("<II", machine.read(arg, 8))
    b = val.encode()
    if len(b) + 1 > maxlen:
        _log_plain(machine, f"{kp.name}: string doesn't fit in {maxlen - 1} chars.")
        return -ENOSPC
    machine.write(dest, b + b"\0")
    return 0


def _set_array(machine, arg, val, kp):
    mx, elemsize, num_p, ops, elem = struct.unpack("<IIIII", machine.read(arg, 20))
    by_addr = {rs.addr & ~1: rs.name for m in machine.modules for rs in m.resolved.values() if rs.addr}
    fn = PY_OPS.get(by_addr.get(ops, ""))
    if fn is None or fn is _set_array:
        return -EINVAL
    n = 0

    def count(v):
        if num_p:
            machine.write(num_p, struct.pack("<I", v))
    count(0)
    for part in val.split(","):
        if n == mx:
            _log_plain(machine, f"{kp.name}: can only take {mx} arguments")
            return -EINVAL
        r = fn(machine, elem + n * elemsize, part, kp)
        if r:
            return r
        n += 1
        count(n)
    return 0


def _log_plain(machine, text):
    machine.log.printk(text + "\n", 3)
    machine.log.finish()


PY_FLAGS = {"param_ops_bool": KERNEL_PARAM_OPS_FL_NOARG, "param_ops_bint": KERNEL_PARAM_OPS_FL_NOARG}
PY_OPS = {
    "param_ops_byte": _int_setter("<B", 0, 0xFF, False),
    "param_ops_short": _int_setter("<h", -0x8000, 0x7FFF, True),
    "param_ops_ushort": _int_setter("<H", 0, 0xFFFF, False),
    "param_ops_int": _int_setter("<i", -0x80000000, 0x7FFFFFFF, True),
    "param_ops_uint": _int_setter("<I", 0, 0xFFFFFFFF, False),
    "param_ops_long": _int_setter("<i", -0x80000000, 0x7FFFFFFF, True),
    "param_ops_ulong": _int_setter("<I", 0, 0xFFFFFFFF, False),
    "param_ops_ullong": _int_setter("<Q", 0, (1 << 64) - 1, False),
    "param_ops_hexint": _int_setter("<I", 0, 0xFFFFFFFF, False, 16),
    "param_ops_bool": _set_bool,
    "param_ops_invbool": _set_invbool,
    "param_ops_bint": _set_bint,
    "param_ops_charp": _set_charp,
    "param_ops_string": _set_string,
    "param_array_ops": _set_array,
}


def read_param(machine, module, name: str):
    """The current value of a parameter, decoded by its ops (int/uint/bool/charp/string/arrays)."""
    m = machine._find_module(module) if not hasattr(module, "sections") else module
    kp = next((k for k in read_table(machine, m) if parameq(k.name, name)), None)
    if kp is None:
        raise EmulationError(f"{m.name} has no parameter {name!r}")
    return _decode(machine, kp.ops_name, kp.arg)


_FMT = {"param_ops_byte": "<B", "param_ops_short": "<h", "param_ops_ushort": "<H", "param_ops_int": "<i",
        "param_ops_uint": "<I", "param_ops_long": "<i", "param_ops_ulong": "<I", "param_ops_ullong": "<Q",
        "param_ops_hexint": "<I", "param_ops_bint": "<i"}


def _decode(machine, ops_name, arg):
    if ops_name in _FMT:
        f = _FMT[ops_name]
        return struct.unpack(f, machine.read(arg, struct.calcsize(f)))[0]
    if ops_name in ("param_ops_bool", "param_ops_invbool"):
        b = machine.read(arg, 1)[0] != 0
        return b if ops_name == "param_ops_bool" else not b
    if ops_name == "param_ops_charp":
        p = _u32(machine, arg)
        return machine.read_cstring(p).decode("utf-8", "replace") if p else None
    if ops_name == "param_ops_string":
        maxlen, dest = struct.unpack("<II", machine.read(arg, 8))
        return machine.read_cstring(dest, maxlen).decode("utf-8", "replace")
    if ops_name == "param_array_ops":
        mx, elemsize, num_p, ops, elem = struct.unpack("<IIIII", machine.read(arg, 20))
        n = _u32(machine, num_p) if num_p else mx
        inner = None
        for m in machine.modules:
            for rs in m.resolved.values():
                if rs.addr and rs.addr & ~1 == ops:
                    inner = rs.name
        inner = inner or _kernel_name(machine, ops)
        return [_decode(machine, inner, elem + i * elemsize) for i in range(min(n, mx))]
    raise EmulationError(f"armload cannot decode a parameter with ops {ops_name or '(module-defined)'}")
