"""lib/sort.c, both generations, ported line by line on byte offsets as the C does.

* sort_r_v52: the bottom-up heapsort of lib/sort.c since v5.2 (sort_r(), used by 6.1's
  module-plts.c through sort()), with its parent() bit trick.
* sort_classic: the heapsort lib/sort.c had until v5.1 (the 2016 module-plts series used it).

Both sort a Python list in place with a C-style three-way `cmp(a, b)`; elements are opaque.
"""
from __future__ import annotations


def _parent(i: int, lsbit: int, size: int) -> int:
    # i -= size; i -= size & -(i & lsbit); return i / 2;   (size_t arithmetic, i > 0)
    i -= size
    i -= size & -(i & lsbit)
    return i // 2


def sort_r_v52(base: list, cmp, size: int = 8) -> None:
    """void sort_r(void *base, size_t num, size_t size, cmp_r_func_t cmp_func, ...)"""
    def at(off):
        return base[off // size]

    def do_swap(x, y):
        base[x // size], base[y // size] = base[y // size], base[x // size]

    num = len(base)
    n = num * size
    a = (num // 2) * size
    lsbit = size & -size
    if not a:                           # num < 2 || size == 0
        return
    while True:
        if a:                           # Building heap: sift down --a
            a -= size
        else:
            n -= size
            if n:                       # Sorting: Extract root to --n
                do_swap(0, n)
            else:                       # Sort complete
                break
        b = a
        while True:                     # for (b = a; c = 2*b + size, (d = c + size) < n;)
            c = 2 * b + size
            d = c + size
            if not d < n:
                break
            b = c if cmp(at(c), at(d)) >= 0 else d
        if d == n:                      # Special case last leaf with no sibling
            b = c
        while b != a and cmp(at(a), at(b)) >= 0:
            b = _parent(b, lsbit, size)
        c = b                           # Where "a" belongs
        while b != a:                   # Shift it into place
            b = _parent(b, lsbit, size)
            do_swap(b, c)


def sort_classic(base: list, cmp, size: int = 8) -> None:
    """void sort(void *base, size_t num, size_t size, cmp_func, swap_func) before v5.2."""
    def at(off):
        return base[off // size]

    def swap(x, y):
        base[x // size], base[y // size] = base[y // size], base[x // size]

    num = len(base)
    i = (num // 2 - 1) * size           # int arithmetic: -size for num < 2
    n = num * size
    while i >= 0:                       # heapify
        r = i
        while r * 2 + size < n:
            c = r * 2 + size
            if c < n - size and cmp(at(c), at(c + size)) < 0:
                c += size
            if cmp(at(r), at(c)) >= 0:
                break
            swap(r, c)
            r = c
        i -= size
    i = n - size
    while i > 0:                        # sort
        swap(0, i)
        r = 0
        while r * 2 + size < i:
            c = r * 2 + size
            if c < i - size and cmp(at(c), at(c + size)) < 0:
                c += size
            if cmp(at(r), at(c)) >= 0:
                break
            swap(r, c)
            r = c
        i -= size


def cmp_3way(a: int, b: int) -> int:
    return -1 if a < b else (1 if a > b else 0)


def cmp_rel(x, y) -> int:
    """module-plts.c cmp_rel() on (r_offset, r_info) pairs: by ELF32_R_TYPE, then ELF32_R_SYM."""
    i = cmp_3way(x[1] & 0xFF, y[1] & 0xFF)
    if i == 0:
        i = cmp_3way(x[1] >> 8, y[1] >> 8)
    return i


def kernel_sort(rels: list, variant: str = "v6") -> None:
    """sort(rels, numrels, sizeof(Elf32_Rel), cmp_rel, NULL) under one kernel generation."""
    (sort_r_v52 if variant == "v6" else sort_classic)(rels, cmp_rel, 8)
