"""Words of the Image's text the running kernel rewrites: the static-key (jump label) sites, each
a NOP or a `b` flipped with its key (kernel/jump_label.c, arch/arm/kernel/jump_label.c), and
ftrace's `bl __gnu_mcount_nc` calls, a NOP from boot on and a call while traced
(arch/arm/kernel/ftrace.c). Read by the probes (where kprobes may not go) and by the emulator (a
rewritten word may fall through into what follows it)."""
from __future__ import annotations

_MCOUNT: dict = {}


def mcount_sites(image) -> frozenset:
    """Every `bl __gnu_mcount_nc` of the Image's core text (once per process and image)."""
    key = (image.path, image.base, len(image.data))
    if key not in _MCOUNT:
        import numpy as np
        out: set[int] = set()
        mc = image.symbols.get("__gnu_mcount_nc")
        if mc is not None:
            lo, hi = image.stext, image.etext
            w = np.frombuffer(image.data[lo - image.base:(hi - image.base) & ~3], dtype="<u4")
            idx = np.flatnonzero((w & 0xFF000000) == 0xEB000000)
            off = (w[idx] & 0xFFFFFF).astype(np.int64) << 2
            off = np.where(off & (1 << 25), off - (1 << 26), off)
            at = lo + idx.astype(np.int64) * 4
            out = set(at[at + 8 + off == mc].tolist())
        _MCOUNT[key] = frozenset(out)
    return _MCOUNT[key]


def find_jump_sites(image) -> list[int]:
    """The code addresses of the Image's __jump_table entries that lie in core text: the longest
    run of word triples {code, target, key} with code (word aligned) and target in the text or
    past _sinittext (init text, and the exit text ARM keeps after it: one entry's code is there,
    and a run that stops at it misses 888 core sites) within 1 MiB of each other, and key (a
    static_key, flag bits in its low two bits) in the Image's data or bss."""
    import numpy as np
    lo_i = image.symbols.get("_sinittext", image.etext)
    w = np.frombuffer(image.data[:len(image.data) // 4 * 4], dtype="<u4").astype(np.int64)

    def text(a):
        return ((a >= image.stext) & (a < image.etext)) | ((a >= lo_i) & (a < image.end))
    best = (0, 0, 0)
    for phase in range(3):
        a = w[phase:][:(len(w) - phase) // 3 * 3].reshape(-1, 3)
        ok = (text(a[:, 0]) & text(a[:, 1]) & ((a[:, 0] & 3) == 0) & (np.abs(a[:, 1] - a[:, 0]) < 0x100000)
              & (a[:, 2] >= image.etext) & (a[:, 2] < image.bss_end))
        edges = np.diff(np.concatenate(([0], ok.astype(np.int8), [0])))
        starts, ends = np.nonzero(edges == 1)[0], np.nonzero(edges == -1)[0]
        if len(starts):
            i = int(np.argmax(ends - starts))
            if ends[i] - starts[i] > best[0]:
                best = (int(ends[i] - starts[i]), phase, int(starts[i]))
    n, phase, start = best
    if n < 16:
        return []
    codes = w[phase + 3 * start: phase + 3 * (start + n): 3]
    return sorted({int(c) for c in codes if image.stext <= c < image.etext})
