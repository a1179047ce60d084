"""The hostile samples (sample_modules/hostile/) and the end each meets in the booted Debian kernel:
the table tests/emu/test_hostile.py runs them by, and tests/ci/test_check_scale.py counts check's
outcome classes by (one sample each there)."""

# sample -> (run's status, a line the kernel prints (None: it prints nothing of its own), check's class)
CORPUS = {
    "spin_irqoff": ("hang", None, "hang"),
    "spin_irqon": ("soft-lockup", "watchdog: BUG: soft lockup - CPU#0 stuck for 26s! [init:1]", "soft-lockup"),
    "panic": ("panic", "Kernel panic - not syncing: hostile_panic: asked to panic", "panic"),
    "bug": ("oops", "Internal error: Oops - BUG: 0 [#1] SMP ARM", "fault"),
    "wtext": ("oops", "Unable to handle kernel paging request at virtual address c0", "fault"),
    "wmod": ("oops", "Unable to handle kernel paging request at virtual address bf", "fault"),
    "recurse": ("oops", "Internal error: kernel stack overflow: 0 [#1] SMP ARM", "fault"),
    "requeue": ("returned", None, "ok"),
    "timer": ("returned", None, "ok"),
    "restart": ("restart", "reboot: Restarting system", "reboot"),
    "halt": ("halt", "reboot: System halted", "reboot"),
    "oom": ("panic", "Kernel panic - not syncing: System is deadlocked on memory", "panic"),
    "exit_hang": ("returned", None, "ok"),
    "wait": ("hung-task", "INFO: task init:1 blocked for more than 120 seconds.", "hung-task"),
}
