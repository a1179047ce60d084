"""Models without a kernel image: printk formatting, string fallbacks, registration, overriding
models, the call-class table and the unmodelled policy."""
import os
import struct
import sys


sys.path.insert(0, os.path.dirname(__file__))
from emu_fixtures import build_module  # noqa: E402

from armload.emu import Machine  # noqa: E402
from armload.emu.calls import CallTable  # noqa: E402
from armload.emu.log import KernelLog  # noqa: E402
from armload.emu.models import ModelLibrary, default_library  # noqa: E402
from armload.emu.models.base import ArgReader  # noqa: E402
from armload.emu.models.fmt import format_kernel  # noqa: E402

EXTERNS = {"_printk": "func", "snprintf": "func", "strcmp": "func", "strlen": "func", "memcpy": "func",
           "memset": "func", "misc_register": "func", "some_new_function": "func", "__aeabi_uidivmod": "func",
           "kzalloc": "func", "mutex_lock": "func", "strscpy": "func"}


def _run(code, rodata=None, data=None, models=None, **kw):
    mod, k = build_module({"init_module": code}, rodata=rodata or {}, data=data or {}, externs=EXTERNS)
    m = Machine(mod, k, models=models, **kw)
    return m, m.run_init()


class FakeCall:
    """Enough of a model Call for format_kernel: args from a list, strings from a dict."""
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
    return format_kernel(FakeCall(list(args) + [0] * 8, strings), f.encode(), ArgReader(FakeCall(list(args) + [0] * 8, strings), 0))


def test_format_conversions():
    assert fmt("%d %u %x %X %c", -5 & 0xFFFFFFFF, 7, 255, 255, ord("z")) == "-5 7 ff FF z"
    assert fmt("%5d|%-5d|%05d|%+d", 42, 42, 42, 42) == "   42|42   |00042|+42"
    assert fmt("%#x %#o %.3d %ld %lu %lx %zu", 255, 8, 7, 3, 4, 0xab, 9) == "0xff 010 007 3 4 ab 9"
    assert fmt("%s|%.2s|%6s|%-6s|", 0x1000, 0x1000, 0x1000, 0x1000, strings={0x1000: b"abc"}) == \
        "abc|ab|   abc|abc   |"
    assert fmt("%s", 0) == "(null)"
    # plain %p before the pointer-hash key exists is the placeholder (lib/vsprintf.c ptr_to_id)
    assert fmt("%p %px %pS", 0xbf000010, 0xbf000010, 0xbf000010) == "(ptrval) bf000010 sym+0xbf000010"
    assert fmt("%pe", -12 & 0xFFFFFFFF) == "-ENOMEM"
    # 64-bit argument: aligned to an even register pair
    assert fmt("%d %lld %d", 1, 0, 0x5, 0x1, 9) == "1 4294967301 9"
    assert fmt("%*d|%%", 6, 3) == "     3|%"
    # lib/vsprintf.c where C's printf differs (test_emu_differential checks these against the kernel)
    assert fmt("%#x|%#o|%.0d|%05.2d|%p|%p|%20p|", 0, 0, 0, 3, 0, 0xFFFFFFF4, 0xBF000010) == \
        "0x0|0|0|00003|00000000|fffffff4|(ptrval)|"
    assert fmt("%c|%s", 0xE9, 0x1000, strings={0x1000: b"\xff"}).encode("utf-8", "surrogateescape") == b"\xe9|\xff"
    assert fmt("a%yb%d", 1) == "a"                         # unsupported conversion: output ends
    assert len(fmt("%*d", 0x7FFFFFFF, 1)) == (1 << 23) - 1  # width clamped to FIELD_WIDTH_MAX


def test_kernel_log_levels_and_continuation():
    out = []
    log = KernelLog(None, out.append)
    log.printk("a", level=6)
    log.printk("b\n", cont=True)
    log.printk("c\nd\n")
    assert log.lines == ["ab", "c", "d"]
    assert [r.level for r in log.records] == [6, 4, 4]       # no level: the default message loglevel
    assert out == ["[    0.000000] ab", "[    0.000000] c", "[    0.000000] d"]


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
    assert [(c.name, c.cls) for c in r.calls] == [("snprintf", "fallback"), ("strcmp", "fallback")]
    m, r = _run(code, rodata={"fmt": b"n=%03d\0", "expect": b"n=008\0"})
    assert r.retval == (5 << 8) - 1    # strcmp: "n=007" < "n=008"


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
    # drivers/char/misc.c (6.1): the first dynamic minor is DYNAMIC_MINORS - 1 = 127, written back
    assert res.registrations[0]["minor"] == 127
    assert struct.unpack("<I", bytes(m.uc.mem_read(misc_addr, 4)))[0] == 127
    # a kernel function nothing simulates ends the run, naming it and its caller
    assert res.status == "unmodelled" and res.retval is None
    assert res.fault.message == "unmodelled: some_new_function called from init_module+0x1c/0x28 [fixture]"
    assert res.fault.unmodelled == "some_new_function"
    assert [(c.name, c.cls) for c in res.calls] == [("misc_register", "model"), ("some_new_function", "unmodelled")]
    # --unmodelled zero: it returns 0, and the record says so
    m = Machine(mod, k, unmodelled="zero")
    res = m.run_init()
    assert res.status == "returned" and res.retval == 127
    assert [(c.name, c.cls, c.ret) for c in res.calls] == [("misc_register", "model", 0),
                                                           ("some_new_function", "unmodelled-zero", 0)]
    # a second dynamic misc device gets the next free minor down
    m.uc.mem_write(misc_addr, struct.pack("<I", 255))
    res = m.call("init_module")
    assert res.registrations[0]["minor"] == 126 and res.retval == 126


def test_override_with_decorator_and_returns():
    lib = default_library()
    seen = []

    @lib.model("some_new_function", subsystem="test", nargs=1)
    def h(call):
        seen.append(call.arg(0))
        return 99
    code = "push {r4, lr}\nmov r0, #5\nbl {some_new_function}\npop {r4, pc}"
    m, r = _run(code, models=lib)
    assert r.retval == 99 and seen == [5]
    assert [(c.name, c.cls, c.args[0], c.ret) for c in r.calls] == [("some_new_function", "model", 5, 99)]
    lib.returns("some_new_function", -16)
    m, r = _run(code, models=lib)
    assert r.retval == -16
    # the shared default library is not modified: there the function is unmodelled
    m, r = _run(code)
    assert r.status == "unmodelled" and r.fault.unmodelled == "some_new_function"
    # a model replaces a fallback too
    lib.returns("strlen", 7, subsystem="test")
    m, r = _run("push {r4, lr}\nmov r0, #0\nbl {strlen}\npop {r4, pc}", models=lib)
    assert r.retval == 7 and r.calls[0].cls == "model"


def test_division_helper_sets_two_registers():
    code = "push {r4, lr}\nmov r0, #47\nmov r1, #10\nbl {__aeabi_uidivmod}\nadd r0, r1, r0, lsl #8\npop {r4, pc}"
    m, r = _run(code)
    assert r.retval == (4 << 8) + 7


def test_handler_fault_stops_with_report():
    lib = default_library()

    @lib.model("some_new_function", subsystem="test")
    def boom(call):
        call.fault("device on fire")
    m, r = _run("push {r4, lr}\nbl {some_new_function}\npop {r4, pc}", models=lib)
    assert r.status == "fault" and r.fault.kind == "bug"
    assert r.fault.message == "some_new_function: device on fire"
    assert r.fault.last_calls[-1].name == "some_new_function"


def test_model_reports_unmodelled_part():
    lib = default_library()

    @lib.model("some_new_function", subsystem="test")
    def partial(call):
        call.unmodelled("flag 0x8")
    m, r = _run("push {r4, lr}\nbl {some_new_function}\npop {r4, pc}", models=lib)
    assert r.status == "unmodelled" and r.fault.unmodelled == "some_new_function"
    assert r.fault.message == "unmodelled: flag 0x8 in some_new_function called from init_module+0x8/0xc [fixture]"


def test_handler_exception_does_not_crash():
    lib = default_library()
    lib.set("some_new_function", lambda call: 1 / 0)
    m, r = _run("push {r4, lr}\nbl {some_new_function}\npop {r4, pc}", models=lib)
    assert r.status == "fault" and r.fault.kind == "model-error"
    assert r.fault.message == ("armload's model of some_new_function raised ZeroDivisionError: "
                               "division by zero")


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
    assert r.status == "fault" and r.fault.kind == "write-protect" and r.fault.message.startswith("memset: ")


def test_strlen_null_faults_in_kernel_function():
    m, r = _run("push {r4, lr}\nmov r0, #0\nbl {strlen}\npop {r4, pc}")
    assert r.status == "fault" and r.fault.kind == "null-deref"
    assert r.fault.message == ("strlen: unable to handle kernel NULL pointer dereference at virtual address "
                               "00000000 when read")


def test_patterns():
    lib = ModelLibrary()
    lib.set("register_*", lambda c: 1)
    lib.set("register_foo", lambda c: 2)
    assert lib.get("register_bar").fn(None) == 1
    assert lib.get("register_foo").fn(None) == 2
    assert lib.get("unrelated") is None
    lib.remove("register_*")
    assert lib.get("register_bar") is None and lib.get("register_foo").fn(None) == 2
    d = default_library()
    assert d.get("misc_deregister").subsystem == "driver" and not d.get("misc_deregister").fallback
    assert d.get("strlen").subsystem == "lib" and d.get("strlen").fallback


def test_call_table_classes():
    lib = default_library()
    without, with_image = CallTable(lib, has_image=False), CallTable(lib, has_image=True)
    # a model always wins; real code needs the image, else its fallback, else unmodelled
    assert (without.decide("__kmalloc").cls, with_image.decide("__kmalloc").cls) == ("model", "model")
    assert (without.decide("strlen").cls, with_image.decide("strlen").cls) == ("fallback", "real")
    assert with_image.decide("strlen").subsystem == "lib/string"
    d = without.decide("rb_insert_color")                 # real code without a fallback
    assert (d.cls, d.subsystem, with_image.decide("rb_insert_color").cls) == ("unmodelled", "lib/rbtree", "real")
    assert (without.decide("some_new_function").cls, with_image.decide("some_new_function").cls) == \
        ("unmodelled", "unmodelled")
    assert without.table(["strlen", "__kmalloc", "x", "strlen"]) == {"fallback": ["strlen"], "model": ["__kmalloc"],
                                                                       "unmodelled": ["x"]}
    import pytest
    with pytest.raises(ValueError, match="fail, real, zero"):
        CallTable(lib, has_image=False, policy="ignore")


def test_real_code_without_fallback_is_unmodelled_without_image():
    ext = dict(EXTERNS, rb_insert_color="func")
    mod, k = build_module({"init_module": "push {r4, lr}\nbl {rb_insert_color}\npop {r4, pc}"}, externs=ext)
    r = Machine(mod, k).run_init()
    assert r.status == "unmodelled"
    assert r.fault.message == ("unmodelled: rb_insert_color called from init_module+0x4/0xc [fixture] "
                               "(its real code runs only with the kernel image: --kernel vmlinuz)")
