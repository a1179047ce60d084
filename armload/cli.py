"""Command-line interface: a thin layer over the library.

Each subcommand lives in armload/commands/<name>.py and exposes `register(subparsers)`, which adds
its parser and sets `func(args) -> int`. Only the command being run is imported (all of them only
for the top-level help or an unknown name), and a command imports the library inside `func`, so
`armload load` never loads the emulator and `armload --help` loads neither.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from . import __version__
from .errors import ArmloadError

INTERMIXED = ("run",)          # commands whose positional words may come between options
COMMANDS = ("load", "run", "verify", "disasm", "explain", "report", "check", "check-merge", "matrix", "agree",
            "kallsyms", "bench")


def command_in(argv: list[str]) -> str | None:
    """The subcommand named by argv (its first word that is not an option), if it is one of ours."""
    word = next((a for a in argv if not a.startswith("-")), None)
    return word if word in COMMANDS else None


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser with every subcommand, or with `only` that one."""
    p = argparse.ArgumentParser(
        prog="armload",
        description="Load 32-bit ARM/Thumb-2 Linux kernel modules exactly as the kernel's loader "
                    "does, then run and verify them in an emulator.")
    p.add_argument("--version", action="version", version=f"armload {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS if only is None else (only,):
        importlib.import_module(f"armload.commands.{name.replace('-', '_')}").register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # armload does no linear algebra: the thread pool OpenBLAS starts when numpy is imported only
    # burns CPU (about half of `armload load`'s). Set before any command imports numpy; a value the
    # user chose is kept, and --jobs workers inherit it.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    cmd = command_in(argv)
    parser = build_parser(cmd)
    if cmd in INTERMIXED and argv and argv[0] == cmd:
        # insmod words (`MODULE.ko name=value`) may follow options: `run m.ko --kernel K n=1`
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[cmd]
        args = sub.parse_intermixed_args(argv[1:])
        args.command = cmd
    else:
        args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ArmloadError as e:
        if getattr(args, "json", False):
            import json
            json.dump({"ok": False, **e.to_dict()}, sys.stdout, indent=2)
            print()
        print(f"armload: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("armload: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as e:  # a bug in armload, not in the input: say so without a traceback
        import traceback
        if os.environ.get("ARMLOAD_DEBUG"):
            traceback.print_exc()
        print(f"armload: internal error: {type(e).__name__}: {e} (set ARMLOAD_DEBUG=1 for a traceback)",
              file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
