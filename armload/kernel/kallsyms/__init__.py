"""kallsyms: the kernel's compressed symbol table (spec §5, scripts/kallsyms.c, kernel/kallsyms.c).

    tables  build like scripts/kallsyms; find and decode the tables in a kernel image; decode cache
    lookup  KallsymsTable: strategies (a)-(d), addr_to_name, iteration; table_from_image

Imports go one way, lookup -> tables; the strategies' benchmark is `armload/bench/kallsyms.py`
(`armload bench kallsyms`). This package re-exports the public names:
`from armload.kernel import kallsyms; kallsyms.table_from_image(...)`.
"""
from .lookup import STRATEGIES, STRATEGY_TITLES, KallsymsTable, load_kernel_image, symbols_from_image, table_from_image
from .tables import *  # noqa: F401,F403
from .tables import __all__ as _tables_all

__all__ = list(_tables_all) + ["STRATEGIES", "STRATEGY_TITLES", "KallsymsTable", "table_from_image",
                               "symbols_from_image", "load_kernel_image"]
