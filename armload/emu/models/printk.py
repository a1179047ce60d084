"""kernel/printk: the log sink, warnings, panics.

With the kernel image, printk, dev_printk and friends run their real code down to
vprintk_emit(); the model there formats with the kernel's own vsnprintf (so every %p extension
is exact), keeps the log level and stamps the record with simulated time. Without an image the
fallbacks below format in Python (fmt.py).
"""
from __future__ import annotations

from .base import ModelLibrary
from .fmt import format_kernel_bytes

LOGLEVEL_DEFAULT = -1
LOG_LINE_MAX = 1024 - 32          # PRINTKRB_RECORD_MAX - PREFIX_MAX


def _split_level(raw: bytes) -> tuple[bytes, int | None, bool]:
    """printk_parse_prefix: KERN_SOH + level digit or 'c' (KERN_CONT)."""
    level, cont = None, False
    while len(raw) >= 2 and raw[0] == 1:
        ch = chr(raw[1])
        if ch.isdigit():
            level = int(ch)
        elif ch == "c":
            cont = True
        raw = raw[2:]
    return raw, level, cont


def _stored_len(text: bytes) -> int:
    """What printk returns (printk_sprint): the record's length, level prefix and one trailing
    newline not counted."""
    return len(text) - (1 if text.endswith(b"\n") else 0)


def register(lib: ModelLibrary) -> None:
    m = lib.model
    f = lib.fallback

    @m("vprintk_emit", subsystem="printk", nargs=5)
    def vprintk_emit(call):
        # vprintk_emit(facility, level, dev_info, fmt, args)
        level, fmt, va = call.sarg(1), call.arg(3), call.arg(4)
        buf = call.machine.scratch(LOG_LINE_MAX + 1)
        n = call.kernel("vsnprintf", buf, LOG_LINE_MAX + 1, fmt, va)
        raw = call.read(buf, min(n, LOG_LINE_MAX))
        text, lvl, cont = _split_level(raw)
        if level == LOGLEVEL_DEFAULT and lvl is not None:
            level = lvl
        call.machine.log.printk(text.decode("utf-8", "replace"), level=None if level < 0 else level, cont=cont)
        return _stored_len(text)

    def _printk(call, fmt_ptr, args, prefix="", level=None):
        raw = call.string(fmt_ptr, 1024)
        raw, lvl, cont = _split_level(raw)
        level = lvl if level is None else level
        text = format_kernel_bytes(call, raw, args)[:LOG_LINE_MAX]
        call.machine.log.printk(prefix + text.decode("utf-8", "replace"), level=level, cont=cont)
        return _stored_len(text)

    @f("_printk", "printk", subsystem="printk")
    def printk(call):
        return _printk(call, call.arg(0), call.varargs(1))

    @f("vprintk", "vprintk_default", subsystem="printk", nargs=2)
    def vprintk(call):
        return _printk(call, call.arg(0), call.va_list(call.arg(1)))

    def dev_level(level):
        def h(call):
            # void _dev_info(dev, fmt, ...): "(NULL device *): " as drivers/base/core.c prints it;
            # for a device the kernel prints "driver name: ", which needs the driver core's layout
            dev = call.arg(0)
            prefix = "(NULL device *): "
            if dev:
                prefix = f"[armload: device {dev:#010x}, its name needs the kernel image]: "
                call.note = "fallback: the kernel would prefix 'driver name: ', which armload cannot read here"
            _printk(call, call.arg(1), call.varargs(2), prefix, level=level)
        return h

    for lvl, name in enumerate(("_dev_emerg", "_dev_alert", "_dev_crit", "_dev_err", "_dev_warn",
                                "_dev_notice", "_dev_info")):
        lib.set(name, dev_level(lvl), subsystem="printk", fallback=True)

    @m("warn_slowpath_fmt", subsystem="printk")
    def warn(call):
        # warn_slowpath_fmt(file, line, taint, fmt, ...): __warn prints the banner, then fmt
        file = call.text(call.arg(0)) if call.arg(0) else "?"
        call.machine.log.printk(f"WARNING: CPU: 0 PID: 0 at {file}:{call.arg(1)} {call.symbolize(call.lr)}", level=4)
        if call.arg(3):
            if call.machine.image is not None:
                call.kernel("vprintk", call.arg(3), call.sp)      # the varargs are the va_list
            else:
                _printk(call, call.arg(3), call.varargs(4))
        call.machine.record("warning", file=file, line=call.arg(1), caller=call.symbolize(call.lr))
        call.note = "WARN: taint and continue, as the kernel does"

    @m("panic", subsystem="printk")
    def panic(call):
        msg = format_kernel_bytes(call, call.string(call.arg(0), 1024), call.varargs(1)).decode("utf-8", "replace")
        call.machine.log.printk("Kernel panic - not syncing: " + msg, level=0)
        call.fault(f"kernel panic: {msg.strip()}", "panic")

    @m("__stack_chk_fail", subsystem="printk")
    def stack_chk(call):
        call.fault("stack-protector: Kernel stack is corrupted in: " + call.symbolize(call.lr), "stack-protector")

    @m("__div0", subsystem="printk")
    def div0(call):
        # arch/arm/kernel/traps.c: pr_err("Division by zero in kernel.\n"); dump_stack(); then
        # lib1funcs.S's Ldiv0 returns 0 (and the *divmod helpers the dividend as remainder)
        call.machine.log.printk("Division by zero in kernel.", level=3)
        call.note = "division by zero: the kernel prints this and returns 0 (armload prints no stack dump)"

    @m("__bug", "__bad_udelay", "__bad_xchg", "__bad_cmpxchg", "fortify_panic", subsystem="printk")
    def bug(call):
        call.fault(f"{call.name} called from {call.symbolize(call.lr)}", "bug")

    @m("dump_stack", "dump_stack_lvl", subsystem="printk")
    def dump_stack(call):
        call.machine.log.printk(f"CPU: 0 PID: 0 Call trace from {call.symbolize(call.lr)} (armload prints no full dump_stack)", level=4)
