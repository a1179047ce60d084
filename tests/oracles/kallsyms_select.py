"""Which symbols scripts/kallsyms (Linux 6.1) keeps, and in which order: read_symbol() +
is_ignored_symbol(), symbol_valid() without --all-symbols, and compare_symbols(). Written from
scripts/kallsyms.c; a sketch for nm-style (addr, type, name) input, no armload code."""
from __future__ import annotations

IGNORED_SYMBOLS = {"kallsyms_addresses", "kallsyms_offsets", "kallsyms_relative_base", "kallsyms_num_syms",
                   "kallsyms_names", "kallsyms_markers", "kallsyms_token_table", "kallsyms_token_index",
                   "kallsyms_seqs_of_names", "_SDA_BASE_", "_SDA2_BASE_"}
IGNORED_PREFIXES = ("$", ".L", "__crc_", "__efistub_", "__kvm_nvhe_$", "__kvm_nvhe_.L", "__AArch64ADRPThunk_",
                    "__ARMV5PILongThunk_", "__ARMV7PILongThunk_", "__ThumbV7PILongThunk_", "__LA25Thunk_",
                    "__microLA25Thunk_", "__kcfi_typeid_")
IGNORED_SUFFIXES = ("_from_arm", "_from_thumb", "_veneer")
IGNORED_MATCHES = (".long_branch.", ".plt_branch.")
KEPT_ABSOLUTE = {"__kernel_syscall_via_break", "__kernel_syscall_via_epc", "__kernel_sigtramp", "__gp"}
KSYM_NAME_LEN = 512
TEXT_RANGES = (("_stext", "_etext"), ("_sinittext", "_einittext"))


def is_ignored_symbol(name: str, typ: str) -> bool:
    if name in IGNORED_SYMBOLS or name.startswith(IGNORED_PREFIXES) or name.endswith(IGNORED_SUFFIXES):
        return True
    if any(m in name for m in IGNORED_MATCHES):
        return True
    if typ in "Uu" or typ in "Nn":
        return True
    return typ.upper() == "A" and name not in KEPT_ABSOLUTE


def may_be_linker_script_provide_symbol(name: str) -> bool:
    if len(name) < 8 or not name.startswith("__"):
        return False
    return (name[2:].startswith(("start_", "stop_", "end_")) or name.endswith("_start") or name.endswith("_end"))


def select(symbols):
    """[(addr, type, name)] as scripts/kallsyms would emit them (address order)."""
    read = [(a, t, n) for a, t, n in symbols if len(n) < KSYM_NAME_LEN and not is_ignored_symbol(n, t)]
    ranges = []
    for start_sym, end_sym in TEXT_RANGES:
        start = next(a for a, _, n in read if n == start_sym)
        end = next(a for a, _, n in read if n == end_sym)
        ranges.append((start, end, end_sym))

    def valid(a, n):
        if not any(s <= a <= e for s, e, _ in ranges):
            return False
        return not any(a == e and n != end_sym for _, e, end_sym in ranges)     # the corner case

    kept = [(a, t, n) for a, t, n in read if valid(a, n)]
    order = sorted(range(len(kept)), key=lambda i: (kept[i][0], kept[i][1] in "wW",
                                                    may_be_linker_script_provide_symbol(kept[i][2]),
                                                    len(kept[i][2]) - len(kept[i][2].lstrip("_")), i))
    return [kept[i] for i in order]
