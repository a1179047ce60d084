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
    "mm/util": ("kmemdup", "kmemdup_nul", "kstrdup", "kstrdup_const", "kstrndup", "memdup_user",
                "memdup_user_nul", "vmemdup_user", "strndup_user", "kvmemdup", "kfree_strarray", "kasprintf_strarray"),
    "kernel/printk": ("_printk", "printk", "vprintk", "vprintk_default", "_dev_emerg", "_dev_alert", "_dev_crit",
                      "_dev_err", "_dev_warn", "_dev_notice", "_dev_info", "dev_printk", "dev_printk_emit",
                      "dev_vprintk_emit", "__dynamic_dev_dbg", "__dynamic_pr_debug", "__dynamic_netdev_dbg",
                      "__dynamic_ibdev_dbg", "netdev_printk", "netdev_emerg", "netdev_alert", "netdev_crit",
                      "netdev_err", "netdev_warn", "netdev_notice", "netdev_info", "___ratelimit",
                      "__warn_printk", "print_hex_dump_bytes", "hex_dump_to_buffer", "dev_driver_string",
                      "dev_err_probe", "printk_timed_ratelimit", "__printk_ratelimit", "_printk_deferred"),
    "kernel/sched/wait": ("prepare_to_wait_event", "prepare_to_wait", "prepare_to_wait_exclusive", "finish_wait",
                          "init_wait_entry", "add_wait_queue", "remove_wait_queue", "add_wait_queue_exclusive",
                          "autoremove_wake_function", "woken_wake_function", "default_wake_function",
                          "wait_woken", "__init_swait_queue_head"),
    "fs/registries": ("register_filesystem", "unregister_filesystem", "__register_nls", "unregister_nls",
                      "register_quota_format", "unregister_quota_format", "register_binfmt", "__register_binfmt",
                      "unregister_binfmt"),
    "lib/textsearch": ("textsearch_register", "textsearch_unregister", "textsearch_find_continuous",
                       "textsearch_prepare", "textsearch_destroy"),
    "mm/mempool": ("mempool_*",),
    "kernel/time/timer": ("round_jiffies", "round_jiffies_relative", "__round_jiffies", "__round_jiffies_relative",
                          "round_jiffies_up", "round_jiffies_up_relative"),
    "kernel/sched/core": ("__cond_resched", "_cond_resched", "__cond_resched_lock"),   # never need resched here
    "kernel/locking/mutex": ("mutex_is_locked", "atomic_dec_and_mutex_lock"),         # reads the owner word
    "kernel/softirq": ("tasklet_setup", "tasklet_init", "tasklet_unlock_wait", "tasklet_unlock_spin_wait"),
    "kernel/jump_label": ("static_key_count",),
    "arch/arm/vfp": ("kernel_neon_begin", "kernel_neon_end"),
    "lib/scatterlist": ("sg_init_table", "sg_next", "sg_nents", "sg_nents_for_len", "sg_last"),
    "block/elevator": ("elv_register", "elv_unregister"),
    "net/core/sock": ("proto_register", "proto_unregister"),
    "registries": ("register_qdisc", "unregister_qdisc", "attribute_container_register",
                   "attribute_container_unregister", "drm_firmware_drivers_only", "tcp_register_congestion_control",
                   "tcp_unregister_congestion_control", "rtnl_link_register", "rtnl_link_unregister",
                   "__rtnl_link_register", "__rtnl_link_unregister", "tty_dev_name_to_number", "sock_register",
                   "sock_unregister", "register_tcf_proto_ops", "unregister_tcf_proto_ops", "tcf_em_register",
                   "tcf_em_unregister", "sock_diag_register", "sock_diag_unregister", "tty_register_ldisc",
                   "tty_unregister_ldisc", "__request_region", "__release_region", "request_resource",
                   "release_resource", "xfrm_register_type", "xfrm_unregister_type", "transport_class_register",
                   "transport_class_unregister", "anon_transport_class_register", "anon_transport_class_unregister",
                   "cdev_init", "register_shrinker", "unregister_shrinker", "cpufreq_register_governor",
                   "cpufreq_unregister_governor", "__platform_register_drivers", "platform_unregister_drivers",
                   "mipi_dsi_driver_register_full", "mipi_dsi_driver_unregister", "rtnl_lock", "rtnl_unlock",
                   "rtnl_is_locked", "register_netdevice_notifier", "unregister_netdevice_notifier",
                   "blocking_notifier_chain_register", "blocking_notifier_chain_unregister",
                   "atomic_notifier_chain_register", "atomic_notifier_chain_unregister",
                   "raw_notifier_chain_register", "raw_notifier_chain_unregister", "srcu_notifier_chain_register",
                   "blocking_notifier_call_chain", "atomic_notifier_call_chain", "raw_notifier_call_chain",
                   "register_reboot_notifier", "unregister_reboot_notifier", "register_die_notifier",
                   "unregister_die_notifier", "register_keyboard_notifier", "unregister_keyboard_notifier",
                   "register_module_notifier", "unregister_module_notifier", "register_inetaddr_notifier",
                   "unregister_inetaddr_notifier", "register_inet6addr_notifier", "unregister_inet6addr_notifier",
                   "ipv6_mod_enabled", "register_8022_client",
                   "unregister_8022_client", "llc_sap_open", "llc_sap_close", "inet_register_protosw",
                   "inet_unregister_protosw", "inet_add_protocol", "inet_del_protocol", "inet6_add_protocol",
                   "inet6_del_protocol", "nf_register_sockopt", "nf_unregister_sockopt",
                   "register_ip_vs_scheduler", "unregister_ip_vs_scheduler", "register_ip_vs_app",
                   "input_register_handler", "input_unregister_handler", "hid_ignore", "usb_register_dev"),
    "net/core/net_namespace": ("register_pernet_subsys", "register_pernet_device", "unregister_pernet_subsys",
                               "unregister_pernet_device", "rtnl_register_module", "rtnl_unregister",
                               "rtnl_unregister_all", "net_ns_type_operations"),
    "crypto/api": ("crypto_register_alg", "crypto_unregister_alg", "crypto_register_algs", "crypto_unregister_algs",
                   "crypto_register_shash", "crypto_unregister_shash", "crypto_register_shashes",
                   "crypto_unregister_shashes", "crypto_register_ahash", "crypto_unregister_ahash",
                   "crypto_register_ahashes", "crypto_unregister_ahashes", "crypto_register_skcipher",
                   "crypto_unregister_skcipher", "crypto_register_skciphers", "crypto_unregister_skciphers",
                   "crypto_register_aead", "crypto_unregister_aead", "crypto_register_aeads", "crypto_unregister_aeads",
                   "crypto_register_akcipher", "crypto_unregister_akcipher", "crypto_register_kpp",
                   "crypto_unregister_kpp", "crypto_register_kpps", "crypto_register_rng", "crypto_unregister_rng",
                   "crypto_register_rngs", "crypto_unregister_rngs", "crypto_register_template",
                   "crypto_unregister_template", "crypto_register_templates", "crypto_unregister_templates",
                   "crypto_register_scomp", "crypto_unregister_scomp", "crypto_register_scomps",
                   "crypto_unregister_scomps", "crypto_register_acomp", "crypto_unregister_acomp",
                   "crypto_register_acomps", "crypto_unregister_acomps", "crypto_register_notifier",
                   "crypto_unregister_notifier", "crypto_init_queue", "crypto_register_instance",
                   "crypto_check_attr_type", "crypto_attr_alg_name", "crypto_grab_spawn", "crypto_drop_spawn"),
    "arch/arm/barrier": ("arm_heavy_mb", "arm_dma_zone_size"),
    "drivers/base/core": ("dev_name", "dev_set_name", "device_initialize", "kobject_get", "kobject_set_name",
                          "dev_get_drvdata"),
    "lib/kref": ("kref_*", "refcount_dec_and_test", "refcount_dec_and_lock*", "refcount_dec_not_one",
                 "refcount_dec_if_one", "refcount_dec_and_mutex_lock"),
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


_REAL_MEMO: dict[str, str | None] = {}


def real_subsystem(name: str) -> str | None:
    """The subsystem whose real code table lists `name`, or None (memoised per process)."""
    if name in _REAL_MEMO:
        return _REAL_MEMO[name]
    hit = None
    for sub, pats in REAL_CODE.items():
        for p in pats:
            if p == name or (("*" in p or "?" in p or "[" in p) and fnmatch.fnmatchcase(name, p)):
                hit = sub
                break
        if hit:
            break
    _REAL_MEMO[name] = hit
    return hit


class CallTable:
    """Decides, once per name, how a kernel function is simulated on one machine."""

    def __init__(self, models, *, has_image: bool, policy: str = "fail"):
        if policy not in POLICIES:
            raise ValueError(f"unmodelled policy must be one of {', '.join(POLICIES)}")
        self.models = models
        self.has_image = has_image
        self.policy = policy
        self._memo: dict[str, Decision] = {}

    def force_unmodelled(self, name: str) -> None:
        """This machine cannot run `name` honestly (its boot-time state failed to initialise)."""
        self._memo[name] = Decision(name, UNMODELLED, "", None)

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
    from .bootdata import CPU_MASKS
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
