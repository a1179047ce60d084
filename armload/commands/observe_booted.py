"""`armload run`'s developer views inside the booted kernel: the oops decoded to file:line
(emu/booted/decode.py), --coverage, --trace and --gdb (emu/booted/observe.py). run_booted.py
calls these; the logic lives below them."""
from __future__ import annotations


def loaded_module(run, name: str):
    """armload's LoadedModule for a module the kernel loaded (same addresses), or None."""
    key = name.replace("-", "_")
    return next((m for m in reversed(run.session.modules) if m.name.replace("-", "_") == key), None)


def decoded_oops(run, r, vmlinux: str | None) -> list[str]:
    """The result's oops through decode_stacktrace.sh's rules; [] without an oops."""
    if not r.oops:
        return []
    from ..emu.booted.decode import decode
    return decode(r.oops, run.session.modules, vmlinux)


def say_decoded(say, lines: list[str], vmlinux: str | None) -> None:
    if not lines:
        return
    say("armload: the oops decoded as the kernel's scripts/decode_stacktrace.sh decodes it "
        f"(addr2line -i from the modules' DWARF"
        + (f" and {vmlinux}):" if vmlinux else "; kernel frames need Debian's -dbg vmlinux: make vmlinux-dbg, then --kernel it):"))
    for ln in lines:
        say(ln)
