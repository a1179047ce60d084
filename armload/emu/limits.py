"""A run's limits inside the booted kernel (run, check, the pytest plugin): budgets in instructions
(the results depend on them), the wall-clock timeout (a safety net only, never a result). Kept
apart so the CLI can show them without Unicorn."""
from __future__ import annotations

BOOTED_BUDGET = 1_000_000_000     # instructions per load (load_module and init) and per call, everything the kernel runs meanwhile included
BOOTED_TIMEOUT = 600.0            # seconds: a safety net only, never a result
