"""Kernel stubs: printk formatting, string functions, registration, overriding handlers."""
import os
import sys


sys.path.insert(0, os.path.dirname(__file__))
from emu_fixtures import build_module  # noqa: E402

from armload.emulate import KernelLog, Machine  # noqa: E402
from armload.stubs import default_library, format_kernel, StubLibrary  # noqa: E402

EXTERNS = {"_printk": "func", "snprintf": "func", "strcmp": "func", "strlen": "func", "memcpy": "func",
           "memset": "func", "misc_register": "func", "some_new_function": "func", "__aeabi_uidivmod": "func",
           "kzalloc": "func", "mutex_lock": "func", "strscpy": "func"}


def _run(code, rodata=None, data=None, stubs=None, **kw):
    mod, k = build_module({"init_module": code}, rodata=rodata or {}, data=data or {}, externs=EXTERNS)
    m = Machine(mod, k, stubs=stubs, **kw)
    return m, m.run_init()


class FakeCall:
    """Enough of StubCall for format_kernel: args from a list, strings from a dict."""
    def __init__(self, args, strings=None):
        self.a = args
        self.strings = strings or {}

    def arg(self, i):
        return self.a[i]

    def string(self, p, limit=4096):
        return self.strings[p][:limit]

    def symbolize(self, p):
        return f"sym+{p:#x}"


def fmt(f, *args, strings=None):
    from armload.stubs import ArgReader
    return format_kernel(FakeCall(list(args) + [0] * 8, strings), f.encode(), ArgReader(FakeCall(list(args) + [0] * 8, strings), 0))


def test_format_conversions():
    assert fmt("%d %u %x %X %c", -5 & 0xFFFFFFFF, 7, 255, 255, ord("z")) == "-5 7 ff FF z"
    assert fmt("%5d|%-5d|%05d|%+d", 42, 42, 42, 42) == "   42|42   |00042|+42"
    assert fmt("%#x %#o %.3d %ld %lu %lx %zu", 255, 8, 7, 3, 4, 0xab, 9) == "0xff 010 007 3 4 ab 9"
    assert fmt("%s|%.2s|%6s|%-6s|", 0x1000, 0x1000, 0x1000, 0x1000, strings={0x1000: b"abc"}) == \
        "abc|ab|   abc|abc   |"
    assert fmt("%s", 0) == "(null)"
    assert fmt("%p %px %pS", 0xbf000010, 0xbf000010, 0xbf000010) == "bf000010 bf000010 sym+0xbf000010"
    assert fmt("%pe", -12 & 0xFFFFFFFF) == "-ENOMEM"
    # 64-bit argument: aligned to an even register pair
    assert fmt("%d %lld %d", 1, 0, 0x5, 0x1, 9) == "1 4294967301 9"
    assert fmt("%*d|%%", 6, 3) == "     3|%"


def test_kernel_log_levels_and_continuation():
    out = []
    log = KernelLog(out.append)
    log.printk("a", level=6)
    log.printk("b\n", cont=True)
    log.printk("c\nd\n")
    assert log.lines == ["ab", "c", "d"]
    assert out[0] == "[    0.000000] ab"


def test_string_functions_and_snprintf():
    code = """
        push {r4, r5, lr}
        sub sp, sp, #64
        mov r0, sp
        mov r1, #64
        movw r2, #{lo:fmt}
        movt r2, #{hi:fmt}
        mov r3, #7
        bl {snprintf}
        mov r4, r0
        mov r0, sp
        movw r1, #{lo:expect}
        movt r1, #{hi:expect}
        bl {strcmp}
        add r0, r0, r4, lsl #8
        add sp, sp, #64
        pop {r4, r5, pc}
    """
    m, r = _run(code, rodata={"fmt": b"n=%03d\0", "expect": b"n=007\0"})
    assert r.retval == 5 << 8          # snprintf returned 5 and strcmp 0


def test_registration_recorded_and_minor_written_back():
    code = """
        push {r4, lr}
        movw r0, #{lo:misc}
        movt r0, #{hi:misc}
        bl {misc_register}
        movw r3, #{lo:misc}
        movt r3, #{hi:misc}
        ldr r4, [r3]
        bl {some_new_function}
        add r0, r0, r4
        pop {r4, pc}
    """
    import struct
    mod, k = build_module({"init_module": code}, rodata={"name": b"mydev\0"}, data={"misc": b"\0" * 32},
                          externs=EXTERNS)
    # struct miscdevice { int minor = 255; const char *name; ... }
    name_addr = next(s.addr for s in mod.symbols if s.name == "name")
    misc_addr = next(s.addr for s in mod.symbols if s.name == "misc")
    r = mod.region_of(misc_addr)
    struct.pack_into("<II", r.data, misc_addr - r.base, 255, name_addr)
    m = Machine(mod, k)
    res = m.run_init()
    assert res.registrations[0]["call"] == "misc_register" and res.registrations[0]["name"] == "mydev"
    assert res.retval == res.registrations[0]["minor"] != 255
    assert [c.name for c in res.calls] == ["misc_register", "some_new_function"]
    assert res.calls[1].ret == 0       # unknown functions return 0 and are recorded


def test_override_with_decorator_and_returns():
    stubs = default_library()
    seen = []

    @stubs.handler("some_new_function", nargs=1)
    def h(call):
        seen.append(call.arg(0))
        return 99
    code = "push {r4, lr}\nmov r0, #5\nbl {some_new_function}\npop {r4, pc}"
    m, r = _run(code, stubs=stubs)
    assert r.retval == 99 and seen == [5]
    stubs.returns("some_new_function", -16)
    m, r = _run(code, stubs=stubs)
    assert r.retval == -16
    # the shared default table is not modified
    m, r = _run(code)
    assert r.retval == 0


def test_division_helper_sets_two_registers():
    code = "push {r4, lr}\nmov r0, #47\nmov r1, #10\nbl {__aeabi_uidivmod}\nadd r0, r1, r0, lsl #8\npop {r4, pc}"
    m, r = _run(code)
    assert r.retval == (4 << 8) + 7


def test_handler_fault_stops_with_report():
    stubs = default_library()

    @stubs.handler("some_new_function")
    def boom(call):
        call.fault("device on fire")
    m, r = _run("push {r4, lr}\nbl {some_new_function}\npop {r4, pc}", stubs=stubs)
    assert r.status == "fault" and "device on fire" in r.fault.message
    assert r.fault.last_calls[-1].name == "some_new_function"


def test_handler_exception_does_not_crash():
    stubs = default_library()
    stubs.set("some_new_function", lambda call: 1 / 0)
    m, r = _run("push {r4, lr}\nbl {some_new_function}\npop {r4, pc}", stubs=stubs)
    assert r.status == "fault" and "ZeroDivisionError" in r.fault.message


def test_memset_into_rodata_faults():
    code = """
        push {r4, lr}
        movw r0, #{lo:ro}
        movt r0, #{hi:ro}
        mov r1, #0
        mov r2, #4
        bl {memset}
        pop {r4, pc}
    """
    m, r = _run(code, rodata={"ro": b"abcd"})
    assert r.status == "fault" and r.fault.kind == "write-protect"


def test_strlen_null_faults_in_kernel_function():
    m, r = _run("push {r4, lr}\nmov r0, #0\nbl {strlen}\npop {r4, pc}")
    assert r.status == "fault" and "strlen" in r.fault.message


def test_patterns():
    lib = StubLibrary()
    lib.set("register_*", lambda c: 1)
    lib.set("register_foo", lambda c: 2)
    assert lib.get("register_bar").fn(None) == 1
    assert lib.get("register_foo").fn(None) == 2
    assert lib.get("unrelated") is None
    d = default_library()
    assert d.get("misc_deregister").kind == "unregister"
    assert d.get("register_netdev").kind == "register"
