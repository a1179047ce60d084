"""kallsyms tables found and decoded in a kernel's memory image, by structure alone (what
kernel/kallsyms.c reads: the token table/index pair, the markers, `kallsyms_num_syms` in front of
the names, the address-sorted offsets and the name-ordered index), then every symbol decoded.
Every walk over image bytes is bounded; errors are `KernelFileError` naming what was not found."""
from __future__ import annotations

import struct

import numpy as np

from ...errors import KernelFileError
from .build import KSYM_NAME_LEN, MAX_COMPRESSED_LEN


def _walk_records(data: bytes, off: int, count: int, limit: int) -> int:
    """Skip `count` name records from `off`; -1 if any record is empty or runs past `limit`."""
    for _ in range(count):
        if off >= limit:
            return -1
        b = data[off]
        if b & 0x80:
            if off + 1 >= limit:
                return -1
            n = (b & 0x7F) | (data[off + 1] << 7)
            off += 2 + n
        else:
            n = b
            off += 1 + n
        if n == 0 or off > limit:
            return -1
    return off


def _find_token_tables(data: bytes):
    """Candidates (token_table_off, token_index_off, tokens) for the token table + index pair."""
    found = []
    usable = len(data) - (len(data) % 4)
    if usable < 1024:
        return found
    u16 = np.frombuffer(data, np.uint16, usable // 2)
    # token_index: 256 strictly increasing u16 starting at 0, at a 4-aligned offset
    inc = np.diff(u16.astype(np.int32)) > 0
    # run[i] = True if inc[i .. i+254] all true; via cumulative sums
    cs = np.concatenate(([0], np.cumsum(inc, dtype=np.int64)))
    n = len(u16) - 255
    if n <= 0:
        return found
    starts = np.nonzero((u16[:n] == 0) & ((cs[255:255 + n] - cs[:n]) == 255))[0]
    starts = starts[(starts % 2) == 0]          # 4-byte aligned
    for s in starts[:64].tolist():
        ti = s * 2
        idx = u16[s:s + 256].astype(np.int64).tolist()
        last = idx[255]
        # the token table ends with the last token's NUL, then padding up to ti
        for pad in range(0, 4):
            end = ti - pad                       # one past the final NUL
            if end < 1 or data[end - 1] != 0:
                continue
            # last token length L: NUL at end-1, the token starts at tt + last
            # tt is 4-aligned; try the lengths that keep tt aligned
            for L in range(0, min(KSYM_NAME_LEN, end)):
                tt = end - 1 - L - last
                if tt < 0:
                    break
                if tt % 4:
                    continue
                if data.find(b"\0", tt + last, end) != end - 1:
                    continue
                ok = True
                toks = []
                for i in range(256):
                    a = tt + idx[i]
                    b = tt + idx[i + 1] - 1 if i < 255 else end - 1
                    if b < a or data[b] != 0 or data.find(b"\0", a, b) != -1:
                        ok = False
                        break
                    toks.append(bytes(data[a:b]))
                if ok:
                    found.append((tt, ti, toks))
                    break
            else:
                continue
            break
    return found


def _u32(data: bytes, off: int) -> int:
    return struct.unpack_from("<I", data, off)[0]


def _check_seqs(data, off, n, names, names_off, markers, tokens) -> list[int] | None:
    """A 3-byte big-endian permutation of 0..n-1 ordering names by strcmp? (spot-checked)."""
    if off < 0 or off + 3 * n > len(data):
        return None
    raw = np.frombuffer(data, np.uint8, 3 * n, off).reshape(n, 3).astype(np.int64)
    seqs = (raw[:, 0] << 16) | (raw[:, 1] << 8) | raw[:, 2]
    if seqs.max(initial=0) >= n or len(np.unique(seqs)) != n:
        return None
    return seqs.tolist()


def parse_tables(data: bytes, *, base: int = 0, source: str = "image") -> dict:
    """Locate the kallsyms tables in `data` by structure and decode them.

    Returns a dict with num_syms, names, markers, token_table, addresses, relative_base, seqs
    (None when the image has no kallsyms_seqs_of_names), layout offsets and the names' end.
    Raises KernelFileError naming what could not be found.
    """
    cands = _find_token_tables(data)
    if not cands:
        raise KernelFileError(f"{source}: no kallsyms token table found (256 NUL-terminated tokens "
                              f"followed by their u16 token index); the kernel may lack CONFIG_KALLSYMS",
                              file=source)
    errors = []
    for tt, ti, toks in cands:
        try:
            return _parse_around(data, tt, ti, toks, source)
        except KernelFileError as e:
            errors.append(e.message)
    raise KernelFileError(errors[0] if len(errors) == 1 else
                          f"{source}: found {len(cands)} token-table candidates but no consistent "
                          f"kallsyms tables around them ({errors[0]})", file=source)


def _parse_around(data: bytes, tt: int, ti: int, toks: list[bytes], source: str) -> dict:
    # --- markers: u32 array starting at 0, growing by 2..(0x3FFF+2)*256 bytes per 256 symbols,
    #     ending right before the token table ("direct": pre-6.2 and mainline order) or before
    #     kallsyms_seqs_of_names ("seqs": Debian 6.1.y order, token table at align4(end + 3n)).
    usable = min(len(data) - (len(data) % 4), tt)
    u32 = np.frombuffer(data, np.uint32, usable // 4)
    lim = 256 * (MAX_COMPRESSED_LEN + 2)

    def delta_ok(m: int, delta: int) -> bool:
        return delta == 0 or (3 * (256 * (m - 1) + 1) + 3) // 4 * 4 <= delta <= (3 * 256 * m + 3) // 4 * 4

    cand = []
    # one marker (n <= 256)
    for delta in sorted({0} | {(3 * k + 3) // 4 * 4 for k in range(1, 257)}):
        ms = tt - delta - 4
        if ms >= 8 and ms % 4 == 0 and int(u32[ms // 4]) == 0:
            cand.append((ms, [0]))
    zi = np.nonzero(u32[:-1] == 0)[0]
    if len(zi):
        d = u32[zi + 1].astype(np.int64)
        zi = zi[(d >= 512) & (d <= lim)]
    for z in zi[-4096:].tolist():
        run = [0]
        j = z + 1
        while j < len(u32):
            v = int(u32[j])
            if not (512 <= v - run[-1] <= lim):
                break
            run.append(v)
            j += 1
            if delta_ok(len(run), tt - 4 * j):
                cand.append((4 * z, list(run)))

    def names_for(ms: int, markers: list[int]):
        """num_syms + names ending right before the markers at ms: (nm, n, names_end) or None."""
        m = len(markers)
        lo_n, hi_n = 256 * (m - 1) + 1, 256 * m
        last = markers[-1]
        top = (ms - last - 4) // 4            # nm/4 upper bound (names are longer than `last`)
        bot = max(1, (ms - last - 4 - 256 * (MAX_COMPRESSED_LEN + 2)) // 4)
        if top < bot:
            return None
        w = u32[bot - 1:top].astype(np.int64)      # u32 at nm-4 for nm/4 in [bot, top)
        hits = np.nonzero((w >= lo_n) & (w <= hi_n))[0][::-1]
        for h in hits[:4096].tolist():
            nm = (bot + h) * 4
            n = int(w[h])
            e = _walk_records(data, nm + last, n - 256 * (m - 1), ms)
            if e < 0 or (e + 3) // 4 * 4 != ms:
                continue
            return nm, n, e
        return None

    layout = names_info = None
    for ms, markers in cand:
        ni = names_for(ms, markers)
        if not ni:
            continue
        n = ni[1]
        me = ms + 4 * len(markers)
        if me == tt:
            layout, names_info = ("direct", ms, markers), ni
            break
        if tt - me == (3 * n + 3) // 4 * 4:
            layout, names_info = ("seqs", ms, markers, me), ni
            break
    if layout is None:
        raise KernelFileError(f"{source}: kallsyms token table at {tt:#x} but no kallsyms_markers / "
                              f"kallsyms_names / kallsyms_num_syms in front of it", file=source)
    token_index_end = ti + 512
    nm, n, names_end = names_info
    markers = layout[2]
    ms = layout[1]
    # full walk: every record valid, markers agree
    off = nm
    for i in range(n):
        if (i & 0xFF) == 0 and nm + markers[i >> 8] != off:
            raise KernelFileError(f"{source}: kallsyms_markers[{i >> 8}] disagrees with kallsyms_names",
                                  file=source)
        off = _walk_records(data, off, 1, ms)
        if off < 0:
            raise KernelFileError(f"{source}: kallsyms_names truncated at symbol {i} of {n}", file=source)
    names = bytes(data[nm:names_end])
    # --- offsets + relative_base (or absolute addresses)
    addresses = relative_base = offs_at = None

    def try_offsets(at: int, rb_at: int | None):
        if at < 0 or at + 4 * n > len(data) or at % 4:
            return None
        arr = np.frombuffer(data, np.uint32, n, at).astype(np.int64)
        if n > 1 and np.any(np.diff(arr) < 0):
            return None
        if rb_at is None:
            if arr[0] < 0xBF000000 and arr[0] != 0:
                pass
            return None if arr[0] == 0 else (None, arr)
        if rb_at + 4 > len(data):
            return None
        rb = _u32(data, rb_at)
        if arr[0] != 0:
            return None
        return rb, arr

    for at, rb_at in ((nm - 8 - 4 * n, nm - 8),                              # 6.1.y / older
                      ((token_index_end + 3) // 4 * 4, (token_index_end + 3) // 4 * 4 + 4 * n)):   # mainline
        r = try_offsets(at, rb_at)
        if r is not None:
            relative_base, arr = r
            addresses = ((arr + relative_base) & 0xFFFFFFFF).tolist()
            offs_at = at
            break
    if addresses is None:
        r = try_offsets(nm - 4 - 4 * n, None)        # kallsyms_addresses (no BASE_RELATIVE)
        if r is not None:
            addresses = r[1].tolist()
            offs_at = nm - 4 - 4 * n
    if addresses is None:
        raise KernelFileError(f"{source}: kallsyms_names found ({n} symbols) but no address-sorted "
                              f"kallsyms_offsets/kallsyms_relative_base or kallsyms_addresses next to them",
                              file=source)
    # --- seqs_of_names (optional)
    seqs = None
    seq_cands = []
    if layout[0] == "seqs":
        seq_cands.append(layout[3])
    if relative_base is not None and offs_at > nm:
        seq_cands.append(offs_at + 4 * n + 4)
    for at in seq_cands:
        seqs = _check_seqs(data, at, n, names, nm, markers, toks)
        if seqs is not None:
            break
    return {"num_syms": n, "names": names, "markers": markers, "token_table": toks,
            "addresses": addresses, "relative_base": relative_base, "seqs": seqs,
            "labels": {"kallsyms_num_syms": nm - 4, "kallsyms_names": nm, "kallsyms_markers": ms,
                       "kallsyms_token_table": tt, "kallsyms_token_index": ti,
                       ("kallsyms_offsets" if relative_base is not None else "kallsyms_addresses"): offs_at}}
