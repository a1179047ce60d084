"""KASAN-, kmemleak- and lockdep-class detectors for modules running in the booted Debian kernel
(which has none of them), without rebuilding it: engine.py (the hooks), heap.py, stack.py,
leak.py, locks.py, support.py (the kernels they serve), report.py (the kernel's formats), access.py (the module's loads and stores),
lifecycle.py (the checks after a call, after exit and on demand), faultsweep.py (init with the
n-th allocation failing)."""
from .report import CLASSES, Report
from .engine import Sanitizer
from .support import SanitizerUnsupported


def parse_classes(text: str | None) -> tuple[str, ...]:
    """`--sanitize` LIST: comma-separated classes, `all` (the default) or `none`."""
    from ...errors import ArmloadError
    if text is None or text.strip() in ("", "all"):
        return CLASSES
    if text.strip() == "none":
        return ()
    want = [w.strip() for w in text.split(",") if w.strip()]
    bad = [w for w in want if w not in CLASSES]
    if bad:
        raise ArmloadError(f"--sanitize: unknown class {', '.join(bad)} (use {', '.join(CLASSES)}, all or none)")
    return tuple(c for c in CLASSES if c in want)


__all__ = ["CLASSES", "Report", "Sanitizer", "SanitizerUnsupported", "parse_classes"]
