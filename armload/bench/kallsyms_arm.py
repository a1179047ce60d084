"""kallsyms lookups as ARM code inside the booted Debian kernel, against its own tables (seed 000).

Strategy (a) is the kernel's own kallsyms_lookup_name, called in the booted kernel (Debian's
6.1.y has the kallsyms_seqs_of_names binary search backported; ftrace made its mcount calls NOPs
at boot). Strategies (b)-(e) are compiled for ARM from benchmarks/kallsyms_arm.c with the cross
compiler, linked at the module_alloc memory (executable, PAGE_KERNEL_EXEC) the kernel gives them,
and called there on the same tables (the Image's kallsyms_* arrays, at their kernel addresses).
(e) is seed 000 complete: kallsyms_lookup_batch_start fills a u32 index of record offsets once
per batch (vmalloc'd; its cost is reported, and amortized over the batch's lookups in a separate
column), then each lookup is (d)'s binary search without the marker walk;
kallsyms_lookup_batch_end drops the index.
Each lookup's cost is its instruction count in the booted kernel (deterministic: the booted state
is a snapshot, and a call a timer interrupt fell into is run again); host time is reported beside
it. The Python strategies of armload.kernel.kallsyms are the reference every result must match.
"""
from __future__ import annotations

import hashlib
import os
import statistics
import struct
import subprocess
import tempfile
import time

from ..errors import ArmloadError
from .inputs import ROOT

SRC = os.path.join(ROOT, "benchmarks", "kallsyms_arm.c")
PAGE = 4096
CROSS = os.environ.get("CROSS", "arm-linux-gnueabihf-")
# the seeds' C figures (ns per lookup, x86): linear, compressed, bsearch, bsearch+token compare
SEEDS_NS = {"hit": {"c": 3811, "d": 246}, "miss": {"c": 3625, "d": 196}}


def build_code(base: int) -> tuple[bytes, dict[str, int]]:
    """benchmarks/kallsyms_arm.c for ARM linked at `base`: (code, {function: address})."""
    src = open(SRC, "rb").read()
    tag = hashlib.sha256(src).hexdigest()[:12] + f"-{base:08x}"
    out = os.path.join(tempfile.gettempdir(), f"armload-kallsyms-arm-{tag}")
    elf, binf = out + ".elf", out + ".bin"
    if not os.path.exists(binf):
        try:
            subprocess.run([f"{CROSS}gcc", "-O2", "-marm", "-march=armv7-a", "-mfloat-abi=soft", "-ffreestanding",
                            "-fno-builtin", "-nostdlib", "-fno-pic", "-fno-stack-protector",
                            f"-Wl,-Ttext={base:#x}", "-Wl,-e,lookup_c", "-Wl,--build-id=none", "-o", elf, SRC],
                           check=True, capture_output=True, timeout=120)
            subprocess.run([f"{CROSS}objcopy", "-O", "binary", "-j", ".text", elf, binf], check=True,
                           capture_output=True, timeout=60)
        except (OSError, subprocess.SubprocessError) as e:
            raise ArmloadError(f"bench kallsyms-arm needs the ARM cross compiler ({CROSS}gcc, make toolchain): {e}")
    nm = subprocess.run([f"{CROSS}nm", elf], check=True, capture_output=True, text=True).stdout
    syms = {n: int(a, 16) for a, t, n in (ln.split() for ln in nm.splitlines() if len(ln.split()) == 3)}
    return open(binf, "rb").read(), {k: syms[k] for k in ("lookup_b", "lookup_c", "lookup_d", "lookup_e",
                                                          "kallsyms_lookup_batch_start",
                                                          "kallsyms_lookup_batch_end")}


def _call(k, fn, *args) -> tuple[int, int, float]:
    """(r0, instructions, host seconds) of fn(*args) in the booted kernel, run again if an
    interrupt fell inside (it changes nothing: the lookups only read)."""
    while True:
        q0, i0, t0 = k.m.hw.irqs_taken, k.insns, time.perf_counter()
        r = k.call(fn, *args)
        if k.m.hw.irqs_taken == q0:
            return r & 0xFFFFFFFF, k.insns - i0, time.perf_counter() - t0


def run_benchmark(vmlinuz: str, *, hits=("vsnprintf", "kmalloc_trace", "_stext", "zlib_inflate", "tcp_sendmsg"),
                  misses=("no_such_symbol", "zzzz_last", "aaaa_first", "vsnprintf_x", "kmalloc_trac")) -> dict:
    from ..emu.booted.kernel import BootedKernel
    from ..kernel.kallsyms import parse_tables
    from ..kernel.zimage import image_payloads
    k = BootedKernel.get(vmlinuz)
    img = k.image
    parsed = parse_tables(image_payloads(vmlinuz)[0][0])
    lab = parsed["labels"]
    seqs_off = lab["kallsyms_markers"] + 4 * len(parsed["markers"])
    table = img.kallsyms
    size = len(build_code(0xBF000000)[0])          # its size, linked anywhere in the module area
    base = k.module_alloc((size + PAGE - 1) & ~(PAGE - 1))
    if not base:
        raise ArmloadError("module_alloc failed in the booted kernel (the strategies' code)")
    code, fns = build_code(base)
    k.write(base, code)
    rel_base = struct.unpack_from("<I", img.data, lab["kallsyms_offsets"] + 4 * parsed["num_syms"])[0]
    if rel_base != parsed["relative_base"]:
        raise ArmloadError("kallsyms tables: relative base not where expected")
    t = k.kmalloc(64)
    k.write(t, struct.pack("<8I", img.base + lab["kallsyms_names"], img.base + lab["kallsyms_markers"],
                           img.base + lab["kallsyms_token_table"], img.base + lab["kallsyms_token_index"],
                           img.base + lab["kallsyms_offsets"], rel_base, parsed["num_syms"], img.base + seqs_off))
    q = k.kmalloc(1024)
    index = k.vmalloc(4 * parsed["num_syms"])
    if not (t and q and index):
        raise ArmloadError("kmalloc/vmalloc failed in the booted kernel (the benchmark's buffers)")
    r0, batch_start_insns, _ = _call(k, fns["kallsyms_lookup_batch_start"], t, index)
    if r0 != parsed["num_syms"]:
        raise ArmloadError(f"kallsyms_lookup_batch_start returned {r0}, not {parsed['num_syms']}")
    rows = []
    for kind, names in (("hit", hits), ("miss", misses)):
        for name in names:
            ref = {s: table.lookup(name, s) for s in "abcd"}
            if len({v for v in ref.values()}) != 1:
                raise ArmloadError(f"the Python strategies disagree on {name}: {ref}")
            want = ref["a"] or 0
            k.write(q, name.encode() + b"\0")
            res = {"a": _call(k, "kallsyms_lookup_name", q)}
            for s in "cd":
                res[s] = _call(k, fns[f"lookup_{s}"], t, q)
            res["e"] = _call(k, fns["lookup_e"], t, index, q)
            cq = table.compress(("T" + name).encode())          # type char + name, as stored
            k.write(q + 512, cq)
            res["b"] = _call(k, fns["lookup_b"], t, q + 512, len(cq))
            for s, (got, _, _) in res.items():
                if s == "b" and want and got != want:
                    # (b) compares type+name: a symbol of another type (t, W, ...) is another record
                    for typ in "tTWwrRdD":
                        cq = table.compress((typ + name).encode())
                        k.write(q + 512, cq)
                        res["b"] = _call(k, fns["lookup_b"], t, q + 512, len(cq))
                        if res["b"][0] == want:
                            break
                if res[s][0] != want:
                    raise ArmloadError(f"strategy ({s}) found {res[s][0]:#x} for {name}, the Python reference "
                                       f"{want:#x}")
            rows.append({"name": name, "kind": kind, "address": want,
                         **{f"{s}_address": res[s][0] for s in "abcde"},
                         **{f"{s}_insns": res[s][1] for s in "abcde"},
                         **{f"{s}_us": res[s][2] * 1e6 for s in "abcde"}})
    _, batch_end_insns, _ = _call(k, fns["kallsyms_lookup_batch_end"], t, index)
    k.vfree(index)
    k.kfree(q)
    k.kfree(t)
    out = {"rows": rows, "num_syms": parsed["num_syms"], "code_base": base, "batch_start_insns": batch_start_insns,
           "batch_end_insns": batch_end_insns}
    for kind in ("hit", "miss"):
        sel = [r for r in rows if r["kind"] == kind]
        out[kind] = {s: {"insns": statistics.mean(r[f"{s}_insns"] for r in sel),
                         "us": statistics.median(r[f"{s}_us"] for r in sel)} for s in "abcde"}
    out["hit_gain_e_vs_a"] = out["hit"]["a"]["insns"] / out["hit"]["e"]["insns"]
    out["miss_gain_e_vs_a"] = out["miss"]["a"]["insns"] / out["miss"]["e"]["insns"]
    # a batch of N lookups pays batch_start once: break-even against (a) and (d)
    out["break_even_vs_a"] = batch_start_insns / max(1e-9, out["hit"]["a"]["insns"] - out["hit"]["e"]["insns"])
    out["break_even_vs_d"] = batch_start_insns / max(1e-9, out["hit"]["d"]["insns"] - out["hit"]["e"]["insns"])
    return out


def print_benchmark(res: dict) -> None:
    print(f"kallsyms lookups as ARM code in the booted Debian kernel, on its own tables ({res['num_syms']:,} symbols; "
          f"instructions per lookup); every result equals the Python reference and the kernel's own "
          f"kallsyms_lookup_name (a)")
    print(f"{'':6} {'(a) kernel 6.1.y':>18} {'(b) compressed':>16} {'(c) bsearch':>14} {'(d) bsearch+tok':>16}"
          f" {'(e) batch index':>16}   a/e      c/d    seeds' C c/d")
    for kind in ("hit", "miss"):
        r = res[kind]
        cells = "".join(f"{r[s]['insns']:>12,.0f} ins" for s in "abcde")
        print(f"{kind:6} {cells}  {r['a']['insns'] / r['e']['insns']:>5.1f}x  {r['c']['insns'] / r['d']['insns']:.2f}x"
              f"   {SEEDS_NS[kind]['c'] / SEEDS_NS[kind]['d']:.1f}x ({SEEDS_NS[kind]['c']} -> {SEEDS_NS[kind]['d']} ns)")
        cells = "".join(f"{r[s]['us']:>13.0f} us" for s in "abcde")
        print(f"{'host':6} {cells}")
    print(f"(e) kallsyms_lookup_batch_start: {res['batch_start_insns']:,} instructions once per batch (one pass over "
          f"kallsyms_names); it pays for itself after {res['break_even_vs_a']:.0f} lookups against (a), "
          f"{res['break_even_vs_d']:.0f} against (d).")
    print(f"target: (e) >= 10x fewer instructions per hit than the kernel's own lookup: "
          f"{res['hit_gain_e_vs_a']:.1f}x ({'met' if res['hit_gain_e_vs_a'] >= 10 else 'NOT met'}); the seeds' "
          f"15.5x (hit) / 18.5x (miss) compare c and d in C on x86.")
