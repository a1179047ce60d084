"""armload's emulator: the machine, the real kernel image, the call-class table, the models.

    from armload.emu import Machine
    res = Machine(module, kernel).run_init()      # RunResult: status, retval, calls, log, ...
"""
from __future__ import annotations

from .calls import CallTable, REAL_CODE
from .machine import DEFAULT_BUDGET, DEFAULT_TIMEOUT, SENTINEL, Machine
from .models import Call, ModelLibrary, default_library
from .results import CallRecord, FaultReport, RunResult
from .errno import errno_name

__all__ = ["CallTable", "REAL_CODE", "Machine", "DEFAULT_BUDGET", "DEFAULT_TIMEOUT", "SENTINEL",
           "Call", "ModelLibrary", "default_library", "CallRecord", "FaultReport", "RunResult", "errno_name"]
