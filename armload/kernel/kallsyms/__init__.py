"""kallsyms: the kernel's compressed symbol table (spec §5, scripts/kallsyms.c, kernel/kallsyms.c).

    build   build like scripts/kallsyms (the selection, the token compression, the .S layout); System.map
    parse   find and decode the tables in a kernel's memory image (what kernel/kallsyms.c reads)
    cache   the decode cache (.cache/kallsyms), keyed on the image and the decoder's code
    lookup  KallsymsTable: strategies (a)-(d), addr_to_name, iteration; table_from_image

The image's payload (zImage decompression) is armload/kernel/zimage.py. Imports go one way,
lookup -> parse, cache -> build; the strategies' benchmark is `armload/bench/kallsyms.py`
(`armload bench kallsyms`). This package re-exports the public names:
`from armload.kernel import kallsyms; kallsyms.table_from_image(...)`.
"""
from .build import (KSYM_NAME_LEN, KallsymsTables, build_tables, compress_symbols, expand_best_table,
                    is_ignored_symbol, read_system_map, select_symbols, sort_symbols, write_system_map)
from .cache import cache_dir, cache_key, cache_load, cache_store, cache_store_extra, code_version
from .lookup import STRATEGIES, STRATEGY_TITLES, KallsymsTable, load_kernel_image, symbols_from_image, table_from_image
from .parse import parse_tables

__all__ = [
    "KSYM_NAME_LEN", "KallsymsTables", "build_tables", "select_symbols", "sort_symbols",
    "is_ignored_symbol", "compress_symbols", "expand_best_table", "parse_tables",
    "write_system_map", "read_system_map", "code_version", "cache_dir", "cache_key", "cache_load",
    "cache_store", "cache_store_extra",
    "STRATEGIES", "STRATEGY_TITLES", "KallsymsTable", "table_from_image", "symbols_from_image", "load_kernel_image",
]
