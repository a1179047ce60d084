"""Which kernels the sanitizers serve. The detectors hook the kernel's own entry points by name
(engine.py, heap_hooks.py, locks.py), 6.1's and 6.12's: a kernel without them is refused at the
door with the reason, never run with a detector that would silently see nothing."""
from __future__ import annotations

from ...errors import ArmloadError

# the module's memory (engine: its code hooks, init's return) and the heap family's core (heap_hooks);
# where 6.10+ renamed one (execmem, allocation tagging's *_noprof), either name serves
REQUIRED = (("module_alloc", "execmem_alloc"), ("module_memfree", "execmem_free"), ("do_init_module",),
            ("do_one_initcall",), ("__kmalloc", "__kmalloc_noprof"), ("kmalloc_trace", "__kmalloc_cache_noprof"),
            ("kmem_cache_alloc", "kmem_cache_alloc_noprof"), ("kfree",))
BUCKETED = "__kmalloc_node_noprof"       # its gfp argument's place depends on CONFIG_SLAB_BUCKETS


class SanitizerUnsupported(ArmloadError):
    """The sanitizers cannot watch this kernel (its entry points are not the ones they hook)."""


def unsupported(symbols, config: dict | None = None) -> str | None:
    """Why the sanitizers cannot serve a kernel with these symbols and config (None: not
    known), or None."""
    miss = [" or ".join(alts) for alts in REQUIRED if not any(n in symbols for n in alts)]
    if miss:
        return f"the kernel has no {', '.join(miss)}: the detectors hook 6.1's and 6.12's entry points"
    if BUCKETED in symbols and not config:
        return (f"the kernel's config is not found: {BUCKETED}'s arguments depend on CONFIG_SLAB_BUCKETS "
                "(give the image with its config-RELEASE beside it, as Debian's boot/ has)")
    return None


def buckets(config: dict | None) -> bool:
    return bool(config) and config.get("CONFIG_SLAB_BUCKETS") == "y"
