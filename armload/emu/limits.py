"""A run's limits: budgets in emulated instructions (the results depend on them), the wall-clock
timeout (a safety net only, never a result). Kept apart so the CLI can show them without Unicorn."""
from __future__ import annotations

DEFAULT_BUDGET = 200_000_000      # instructions per call (kernel code included)
DEFAULT_TIMEOUT = 120.0           # seconds: a safety net only, never a result
DEFAULT_DEFERRED_BUDGET = 50_000_000

# inside the booted kernel (run, check, the pytest plugin): per load (load_module and init) and per call
BOOTED_BUDGET = 1_000_000_000     # instructions, everything the kernel runs meanwhile included
BOOTED_TIMEOUT = 600.0            # seconds: a safety net only, never a result
