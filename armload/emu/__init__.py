"""armload's emulator: the booted Debian kernel (booted/), its hardware (hw/), the sanitizers
(sanitize/), and what they share: errno names, the instruction budgets (limits), the native build
helper, coverage counting, DWARF lines (debuginfo) and EHABI unwinding.

    from armload.emu.booted.kernel import BootedKernel
"""
from .. import _lazy

_PUBLIC = {
    "BOOTED_BUDGET": ".limits", "BOOTED_TIMEOUT": ".limits",
    "errno_name": ".errno",
}
__all__ = sorted(_PUBLIC)
__getattr__, __dir__ = _lazy.exports(__name__, _PUBLIC)
