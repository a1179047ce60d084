"""The named choices of KernelConfig (config.py) that the CLI offers as option values: kept apart
so `armload --help` and every command's parser have them without config.py's dataclasses (whose
import brings inspect, ast and dis)."""
from __future__ import annotations

PLT_ALGORITHMS = ("legacy", "sorted", "v6")     # KernelConfig.plt_algorithm: v4.0, the 2016 series, 6.1
LAYOUTS = ("6.1", "6.4")                        # KernelConfig.layout: core+init allocations, one per memory class
