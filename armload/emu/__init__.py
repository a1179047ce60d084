"""armload's emulator: the machine, the real kernel image, the call-class table, the models.

    from armload.emu import Machine
    res = Machine(module, kernel).run_init()      # RunResult: status, retval, calls, log, ...
"""
from .. import _lazy

_PUBLIC = {
    "CallTable": ".calls", "REAL_CODE": ".calls",
    "Machine": ".machine", "DEFAULT_BUDGET": ".limits", "DEFAULT_TIMEOUT": ".limits",
    "SENTINEL": ".cpu",
    "Call": ".models", "ModelLibrary": ".models", "default_library": ".models",
    "CallRecord": ".results", "FaultReport": ".results", "RunResult": ".results",
    "errno_name": ".errno",
}
__all__ = sorted(_PUBLIC)
__getattr__, __dir__ = _lazy.exports(__name__, _PUBLIC)
