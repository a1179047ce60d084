"""`armload run`: load modules into the booted Debian kernel, run their init, calls and exit there."""
from __future__ import annotations

import argparse

from ..errors import EmulationError
from .modargs import assign_params, split_modules

DESCRIPTION = """\
Load one or more modules (in order; later ones may import from earlier ones) into the Debian
kernel booted in Unicorn (--kernel vmlinuz; `make test-inputs` fetches it): the kernel's own
load_module loads each one, at the addresses its module_alloc chooses (there is no --placement),
and runs its init; armload's loader loads the same files at the same addresses and its image is
compared with the kernel's byte for byte. Without a kernel image run refuses and says how to get
one (load, verify, explain, disasm and report need none).
Words after a module that are not module files are its parameters (insmod semantics; options
may come between them): the kernel's parse_args sets them. After the inits every branch is
verified (--no-verify skips it), then each --call runs in order from pid 1's kernel context, its
string and buffer arguments in the kernel's own __kmalloc'ed memory; the file operations (--open
PATH, --write, --read, --lseek, --ioctl, --poll, --mmap, --close, --cat, --echo) follow, in order,
as real system calls through the kernel's VFS; --exit unloads the modules (delete_module) last. An
oops is the kernel's own report: pid 1 is then dead, nothing more runs. Thumb-2 modules are
refused: they need CONFIG_THUMB2_KERNEL, which Debian does not build.
Exit status 0 only when every init returned 0, every --call and file operation returned, and
every branch verified."""


def add_module_args(p: argparse.ArgumentParser) -> None:
    from .load import add_common_args
    add_common_args(p)


def build_session(args):
    from .load import session_from_args
    return session_from_args(args)


def load_all(args):
    session, modules, _ = load_with_params(args)
    return session, modules


def load_with_params(args):
    """Load the positional modules; their parameters (positional words and --param) by module."""
    session = build_session(args)
    pairs = split_modules(args.modules)
    modules = [session.load(p, object=getattr(args, "object", False)) for p, _ in pairs]
    per = assign_params([m.name for m in modules], pairs, getattr(args, "params", None))
    return session, modules, {id(m): ps for m, ps in zip(modules, per)}




def _int(s: str) -> int:
    try:
        return int(s, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {s!r}") from None


def register(sub) -> None:
    from ..emu.limits import BOOTED_BUDGET as DEFAULT_BUDGET, BOOTED_TIMEOUT as DEFAULT_TIMEOUT
    p = sub.add_parser("run", help="run modules inside the booted Debian kernel and verify every branch",
                       description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("modules", nargs="+", metavar="MODULE.ko [name=value ...]",
                   help="modules in load order, each followed by its parameters as for insmod")
    from .load import add_common_args
    add_common_args(p, placement=False)
    p.add_argument("--param", dest="params", action="append", default=[], metavar="[MODULE.]NAME=VALUE",
                   help="a parameter of the last module (or of MODULE); repeatable; set through the module's "
                        "__param table by the kernel's own param_set_* before init, as load_module does")
    p.add_argument("--call", dest="calls", action="append", nargs="+", default=[], metavar=("NAME", "ARG"),
                   help="after the inits, call NAME(ARG...) of a module from pid 1's kernel context; "
                        "repeatable, in order. ARG: an integer, s:TEXT (a C string), b:HEX (a buffer) or buf:N "
                        "(N zeroed bytes), copied into the kernel's own __kmalloc'ed memory; buffers are "
                        "printed after the call, the return value is r0 (signed)")
    p.add_argument("--exit", action="store_true", help="after init (and the calls) succeed, unload the modules "
                                                       "(delete_module: their exit runs), last loaded first")
    p.add_argument("--image", metavar="FILE", help="write each loaded module as an ELF executable at the addresses "
                                                   "the kernel's module_alloc gave it, with its DWARF relocated "
                                                   "(symbols for gdb/addr2line; several modules: FILE gets a "
                                                   "-NAME suffix)")
    p.add_argument("--coverage", metavar="OUT.info",
                   help="record which module instructions ran (init, calls, exit) and write an lcov tracefile "
                        "with line and function coverage from the modules' DWARF (genhtml renders it); "
                        "prints a summary line per module")
    p.add_argument("--gdb", type=int, metavar="PORT",
                   help="stop before the last module's init and serve the GDB remote protocol on PORT "
                        "(udbserver); load symbols with `file` on the --image FILE")
    p.add_argument("--trace", action="store_true", help="list every kernel call with its arguments and result")
    p.add_argument("--budget", type=_int, default=DEFAULT_BUDGET, metavar="N",
                   help=f"instruction budget per load (load_module and init) and per --call, everything the "
                        f"kernel runs meanwhile included (default {DEFAULT_BUDGET:,})")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                   help=f"wall-clock safety net per load and per call (default {DEFAULT_TIMEOUT:g} s; 0: none); "
                        f"when it ends one the status is 'stopped', never a verdict")
    p.add_argument("--no-verify", action="store_true", help="skip branch-reach verification")
    p.add_argument("--probe", dest="probes", action="append", default=[], metavar="KIND:FUNC[+OFF]",
                   help="probe a module or (with --kernel vmlinuz) kernel function (repeatable): "
                        "kprobe:FUNC[+OFF], kprobe:MODULE:FUNC, kprobe:0xADDR, kretprobe:FUNC, ftrace:FUNC, "
                        "graph:FUNC (function_graph): the kernel's own register_kprobe/kretprobe/ftrace/"
                        "function_graph (32-bit ARM 6.1 has no fentry/fexit); each hit is printed with its "
                        "arguments or return value")
    from .devio_booted import add_devio_args
    add_devio_args(p)
    p.add_argument("--tree", metavar="DIR",
                   help="the module tree request_module's modprobe loads from (default: the "
                        "lib/modules tree of the kernel package the vmlinuz comes from, when present)")
    p.add_argument("--settle-ms", type=int, default=1000, metavar="MS",
                   help="after the last init (and the calls), let the kernel run its deferred work (timers, "
                        "workqueues, kthreads, RCU) for up to MS of simulated time, until idle (default 1000)")
    p.add_argument("--json", action="store_true", help="machine-readable result on stdout")
    from .sanitize_opts import add_args as add_sanitize_args
    add_sanitize_args(p)
    p.add_argument("--fail-sweep", action="store_true",
                   help="run the last module's init again with its n-th kmalloc-family allocation failing, for "
                        "each n the unfailed init reaches (the kernel's fail_nth idea), each in a fresh kernel "
                        "with the sanitizers on; list the allocation sites whose failure oopses, leaks (or gives "
                        "another report) or returns success (exit 1 when there is one)")
    p.set_defaults(func=cmd_run, devio=[])


def cmd_run(args) -> int:
    if args.fail_sweep:
        from .fail_sweep import cmd_fail_sweep
        return cmd_fail_sweep(args)
    from .run_booted import cmd_run_booted
    return cmd_run_booted(args)
