"""kallsyms: the kernel's compressed symbol table (spec §5, scripts/kallsyms.c, kernel/kallsyms.c).

    tables  build like scripts/kallsyms; find and decode the tables in a kernel image; decode cache
    lookup  KallsymsTable: strategies (a)-(d), addr_to_name, iteration; table_from_image
    bench   the strategies measured on the real Debian table (`armload bench kallsyms`)

Imports go one way, bench -> lookup -> tables. This package re-exports the public names so
`from armload import kallsyms; kallsyms.table_from_image(...)` keeps working.
"""
from .lookup import STRATEGIES, STRATEGY_TITLES, KallsymsTable, load_kernel_image, symbols_from_image, table_from_image
from .tables import *  # noqa: F401,F403
from .tables import __all__ as _tables_all

__all__ = list(_tables_all) + ["STRATEGIES", "STRATEGY_TITLES", "KallsymsTable", "table_from_image",
                               "symbols_from_image", "load_kernel_image", "run_benchmark", "format_benchmark",
                               "print_benchmark"]


def __getattr__(name):      # the benchmark is loaded only when asked for
    if name in ("run_benchmark", "format_benchmark", "print_benchmark"):
        from ...bench import kallsyms as bench
        return getattr(bench, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
