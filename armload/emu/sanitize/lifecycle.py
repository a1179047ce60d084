"""The sanitizers' checks at the ends the kernel's own detectors check, one place for `run`,
`check`, the devkit (pytest) and the fault sweep: after a call from the harness returns (locks
still held: lockdep's check when a system call returns), after exit (the module's hooks go, locks
held, kmemleak's scan with the module's freed memory no root), and kmemleak's scan on demand.
The scan at the end of init is the engine's own (engine.Sanitizer._init_returned)."""
from __future__ import annotations


def after_call(san, name: str) -> list:
    """A call into module `name` returned to the harness: the new reports."""
    n = len(san.reports)
    san.returned_to_user(san.uc, name, "call")
    return san.reports[n:]


def after_exit(san, name: str) -> list:
    """Module `name` was unloaded (its exit ran): the new reports."""
    n = len(san.reports)
    san.module_gone(name)
    san.returned_to_user(san.uc, name, "exit")
    if "leak" in san.classes:
        san.leak_scan(when="after exit", excluded=san.module_pages(name), module=name)
    return san.reports[n:]


def scan_leaks(san, name: str | None = None) -> list:
    """kmemleak's scan now (echo scan > /sys/kernel/debug/kmemleak): the new leak reports of
    module `name` (every watched module's for None)."""
    if "leak" not in san.classes:
        return []
    return san.leak_scan(when="on demand", module=name)
