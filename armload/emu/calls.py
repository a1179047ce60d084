"""The call-class table: how each kernel function a module can reach is simulated.

* **model**: a Python model (armload/emu/models/) stands at the function's entry, for what needs
  boot-time state or hardware (allocators, printk's console, time, scheduling, the driver core).
* **real**: the kernel's own code runs from the Image (and everything it calls in turn; calls it
  makes to modelled functions reach the models). Without an image, a real function runs its
  Python fallback if it has one, and is unmodelled otherwise.
* **unmodelled**: anything else. The policy decides: `fail` (default) ends the run with
  `unmodelled: NAME called from SYM+0xOFF [module]`; `real` runs the kernel's code anyway;
  `zero` returns 0 (and every trace line and result says so).

A model always wins over the real table. The table is per subsystem so it can be read (and
extended) a subsystem at a time; patterns are fnmatch-style.
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from .results import FALLBACK, MODEL, REAL, UNMODELLED

POLICIES = ("fail", "real", "zero")

# Pure library code: depends only on its arguments and memory, never on boot-time state.
REAL_CODE: dict[str, tuple[str, ...]] = {
    "lib/string": (
        "memcpy", "memmove", "memset", "__memzero", "memcmp", "bcmp", "memchr", "memchr_inv", "memscan",
        "mmioset", "mmiocpy", "strlen", "strnlen", "strcmp", "strncmp", "strcasecmp", "strncasecmp",
        "strcpy", "strncpy", "strlcpy", "strscpy", "strscpy_pad", "sized_strscpy", "strcat", "strncat",
        "strlcat", "strchr", "strchrnul", "strnchr", "strrchr", "strstr", "strnstr", "strpbrk", "strsep",
        "strspn", "strcspn", "skip_spaces", "strim", "strreplace", "sysfs_streq", "match_string",
        "__sysfs_match_string", "strtobool", "kstrtobool", "kstrtobool_from_user", "memcpy_and_pad",
        "fortify_panic", "string_get_size", "string_escape_mem", "string_unescape", "__memcat_p",
        "strncpy_from_user", "strnlen_user", "__memset32", "__memset64", "memset16",
    ),
    "lib/vsprintf": (
        "sprintf", "snprintf", "scnprintf", "vsprintf", "vsnprintf", "vscnprintf", "sscanf", "vsscanf",
        "kasprintf", "kvasprintf", "kvasprintf_const", "bin2hex", "hex2bin", "hex_to_bin", "hex_dump_to_buffer",
        "hex_asc", "hex_asc_upper", "simple_strtoul", "simple_strtol", "simple_strtoull", "simple_strtoll",
        "num_to_str", "sprint_symbol", "sprint_symbol_no_offset", "bprintf", "vbin_printf",
    ),
    "lib/kstrtox": ("kstrto*", "_kstrto*", "kstrtou*", "kstrtos*"),
    "lib/sort": ("sort", "sort_r", "bsearch", "list_sort"),
    "lib/crc": ("crc*", "__crc*", "crc32_le", "crc32_be", "__crc32c_le", "crc32c", "crc_itu_t", "crc_ccitt*",
                "crc16", "crc7_be", "crc8", "crc8_populate_*", "crc4", "crc64_*", "crc_t10dif*"),
    "lib/bitmap": ("bitmap_*", "__bitmap_*", "_find_*", "find_*_bit*", "__sw_hweight*", "hweight*",
                   "_set_bit", "_clear_bit", "_change_bit", "_test_and_set_bit", "_test_and_clear_bit",
                   "_test_and_change_bit", "__bitmap_weight"),
    "lib/list": ("__list_add_valid", "__list_del_entry_valid", "list_sort"),
    "lib/rbtree": ("rb_*", "__rb_*", "rb_first_postorder", "rb_next_postorder"),
    "lib/math": ("__aeabi_*", "__udivsi3", "__divsi3", "__umodsi3", "__modsi3", "__do_div64",
                 "__ashldi3", "__ashrdi3", "__lshrdi3", "__muldi3", "__ucmpdi2", "__bswapsi2", "__bswapdi2",
                 "int_sqrt", "int_pow", "gcd", "lcm", "div64_*", "div_s64_rem", "mul_u64_u64_div_u64",
                 "rational_best_approximation", "reciprocal_value", "prandom_u32_state", "prandom_seed_full_state",
                 "__div64_32", "iter_div_u64_rem", "_ctype", "__ctzsi2", "__clzsi2", "__ctzdi2", "__clzdi2"),
    "lib/parse": ("match_token", "match_int", "match_u64", "match_octal", "match_hex", "match_strlcpy",
                  "match_strdup", "match_wildcard", "get_option", "get_options", "memparse", "parse_int_array_user",
                  "next_arg", "glob_match", "uuid_parse", "guid_parse", "uuid_is_valid", "generate_random_uuid",
                  "mac_pton", "in4_pton", "in6_pton", "in_aton"),
    "lib/checksum": ("csum_partial", "csum_partial_copy_nocheck", "ip_compute_csum", "csum_ipv6_magic",
                     "csum_tcpudp_nofold", "__csum_ipv6_magic", "ip_fast_csum", "csum_fold"),
    "lib/idr": ("idr_*", "ida_*", "xa_*", "__xa_*", "xas_*", "radix_tree_*", "idr_alloc*", "ida_alloc_range",
                "ida_free", "ida_destroy"),
    "lib/hash": ("jhash*", "__jhash*", "siphash*", "hsiphash*", "full_name_hash", "hashlen_string",
                 "__hash_32", "hash_64*"),
    "lib/crypto": ("__crypto_memneq", "crypto_memneq", "__crypto_xor", "crypto_xor*", "sha1_transform",
                   "sha1_init", "sha256*", "sha224*", "blake2s*", "chacha_block_generic", "hchacha_block_generic",
                   "poly1305_*", "curve25519_*", "aes_expandkey", "aes_encrypt", "aes_decrypt", "des_expand_key",
                   "des_encrypt", "des_decrypt", "des3_ede_*", "arc4_*", "gf128mul_*", "md5_*",
                   "libcurve25519*", "chacha20poly1305_*", "xchacha20poly1305_*"),
    "lib/ctype": ("tolower", "toupper", "_tolower", "_toupper"),
    "lib/misc": ("print_hex_dump", "seq_printf", "seq_puts", "seq_putc", "seq_write", "seq_vprintf",
                 "__ww_mutex_init", "get_random_bytes_arch", "errname", "ERR_PTR", "linear_range_*",
                 "bitrev*", "byte_rev_table", "__sw_hweight64", "memweight", "lzo1x_*", "lz4_*", "LZ4_*",
                 "zlib_*", "xz_dec_*", "ZSTD_*", "zstd_*", "unpack_*", "kmemdup_nul", "strndup_user",
                 "__bitmap_parse", "bitmap_parselist", "utf8_*", "utf16s_to_utf8s", "utf8s_to_utf16s",
                 "utf32_to_utf8", "utf8_to_utf32", "ucs2_*", "hdmi_*", "cec_*_edid*",
                 "timespec64_to_jiffies", "jiffies_to_timespec64", "jiffies_to_msecs", "jiffies_to_usecs",
                 "msecs_to_jiffies", "__msecs_to_jiffies", "__usecs_to_jiffies", "nsecs_to_jiffies",
                 "nsecs_to_jiffies64", "jiffies64_to_nsecs", "jiffies64_to_msecs", "usecs_to_jiffies",
                 "jiffies_to_clock_t", "clock_t_to_jiffies", "ns_to_timespec64", "set_normalized_timespec64",
                 "mktime64", "time64_to_tm", "rtc_time64_to_tm", "rtc_tm_to_time64", "rtc_valid_tm",
                 "rtc_month_days", "rtc_year_days", "ns_to_kernel_old_timeval", "timespec64_add_safe",
                 "ktime_add_safe", "__init_rwsem", "__mutex_init", "__raw_spin_lock_init", "__rwlock_init",
                 "__init_waitqueue_head", "__init_swait_queue_head", "init_wait_entry", "init_timer_key",
                 "__init_work", "init_srcu_struct", "lockdep_init_map_type", "__kernel_param_lock",
                 "kobject_init", "kref_init", "refcount_warn_saturate", "__refcount_*", "atomic_dec_and_mutex_lock",
                 "llist_add_batch", "llist_del_first", "llist_reverse_order", "__list_lru_init",
                 "__next_node_in", "__bitmap_or", "__bitmap_and", "cpumask_next", "cpumask_next_and",
                 "cpumask_any_but", "cpumask_local_spread", "cpumask_next_wrap", "__num_online_cpus"),
    "arch/arm": ("__get_user_*", "__put_user_*", "arm_copy_from_user", "arm_copy_to_user", "arm_clear_user",
                 "__copy_from_user", "__copy_to_user", "__clear_user", "_copy_from_user", "_copy_to_user",
                 "__gnu_mcount_nc", "__aeabi_unwind_cpp_pr0", "__aeabi_unwind_cpp_pr1", "__aeabi_unwind_cpp_pr2",
                 "__readwrite_bug", "__pv_phys_pfn_offset", "__pv_offset", "__raw_readsb", "__raw_readsw",
                 "__raw_readsl", "__raw_writesb", "__raw_writesw", "__raw_writesl", "__memcpy_fromio",
                 "__memcpy_toio", "__memset_io", "_memcpy_fromio", "_memcpy_toio", "_memset_io",
                 "arm_delay_ops", "__arm_smccc_smc", "__arm_smccc_hvc", "v7_coherent_kern_range",
                 "cpu_v7_*", "__cpuc_*", "cpu_cache", "cpu_user", "cpu_tlb", "outer_cache"),
}


@dataclass(frozen=True)
class Decision:
    name: str
    cls: str                      # real | model | fallback | unmodelled
    subsystem: str
    model: object | None          # the Model to run (model/fallback), else None


def real_subsystem(name: str) -> str | None:
    """The subsystem whose real code table lists `name`, or None."""
    for sub, pats in REAL_CODE.items():
        for p in pats:
            if p == name or (("*" in p or "?" in p or "[" in p) and fnmatch.fnmatchcase(name, p)):
                return sub
    return None


class CallTable:
    """Decides, once per name, how a kernel function is simulated on one machine."""

    def __init__(self, models, *, has_image: bool, policy: str = "fail"):
        if policy not in POLICIES:
            raise ValueError(f"unmodelled policy must be one of {', '.join(POLICIES)}")
        self.models = models
        self.has_image = has_image
        self.policy = policy
        self._memo: dict[str, Decision] = {}

    def decide(self, name: str) -> Decision:
        d = self._memo.get(name)
        if d is None:
            d = self._memo[name] = self._decide(name)
        return d

    def _decide(self, name: str) -> Decision:
        m = self.models.get(name)
        sub = real_subsystem(name)
        if m is not None and not m.fallback:
            return Decision(name, MODEL, m.subsystem, m)
        if sub is not None or (m is not None and m.fallback):
            if self.has_image:
                return Decision(name, REAL, sub or m.subsystem, None)
            if m is not None:
                return Decision(name, FALLBACK, m.subsystem, m)
            return Decision(name, UNMODELLED, sub, None)
        return Decision(name, UNMODELLED, "", None)

    def table(self, names) -> dict[str, list[str]]:
        """class -> names, for reports."""
        out: dict[str, list[str]] = {}
        for n in sorted(set(names)):
            out.setdefault(self.decide(n).cls, []).append(n)
        return out


def known_names() -> frozenset:
    """Names the built-in kernel (no kernel file) may give invented addresses: the models, the
    fallbacks and the exact names of the real-code table, plus the boot-time data of boot.py."""
    from .boot import CPU_MASKS
    from .models import default_library
    names = set(default_library().names())
    for pats in REAL_CODE.values():
        names.update(p for p in pats if not any(c in p for c in "*?["))
    names.update(CPU_MASKS)
    from .params import PY_OPS               # module parameters: set by Python versions without an image
    names.update(PY_OPS)
    names.update(("jiffies", "jiffies_64", "elf_hwcap", "elf_hwcap2", "nr_cpu_ids", "system_state",
                  "loops_per_jiffy", "hrtimer_resolution", "_ctype", "system_wq", "system_highpri_wq",
                  "system_long_wq", "system_unbound_wq", "system_freezable_wq", "__gnu_mcount_nc",
                  "__aeabi_unwind_cpp_pr0", "__aeabi_unwind_cpp_pr1", "__aeabi_unwind_cpp_pr2",
                  "module_layout"))
    return frozenset(n for n in names if not any(c in n for c in "*?["))
