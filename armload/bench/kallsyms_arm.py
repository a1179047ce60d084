"""kallsyms lookups as ARM code, in the emulator, against the real tables of the Debian Image.

Strategy (a) is the 6.1 kernel's own kallsyms_lookup_name, executed from the Image (Debian's
6.1.y has the kallsyms_seqs_of_names binary search backported). Strategies (b)-(e) are compiled
for ARM from benchmarks/kallsyms_arm.c with the cross compiler and run against the same tables.
(e) is seed 000 complete: kallsyms_lookup_batch_start fills a u32 index of record offsets once
per batch (its cost is reported, and amortized over the batch's lookups in a separate column),
then each lookup is (d)'s binary search without the marker walk; kallsyms_lookup_batch_end
drops the index.
Each lookup's cost is its emulated instruction count (deterministic); host time is reported
beside it. The Python strategies of armload.kernel.kallsyms are the reference every result must match.
"""
from __future__ import annotations

import hashlib
import os
import statistics
import struct
import subprocess
import tempfile

from unicorn import UC_HOOK_CODE

from ..errors import ArmloadError
from .inputs import ROOT, SAMPLES

SRC = os.path.join(ROOT, "benchmarks", "kallsyms_arm.c")
CODE_BASE = 0xE0000000
CROSS = os.environ.get("CROSS", "arm-linux-gnueabihf-")
# the seeds' C figures (ns per lookup, x86): linear, compressed, bsearch, bsearch+token compare
SEEDS_NS = {"hit": {"c": 3811, "d": 246}, "miss": {"c": 3625, "d": 196}}


def _count(uc, addr, size, counter):
    counter[0] += 1


def build_code() -> tuple[bytes, dict[str, int]]:
    """benchmarks/kallsyms_arm.c for ARM at CODE_BASE: (code, {function: address})."""
    src = open(SRC, "rb").read()
    tag = hashlib.sha256(src).hexdigest()[:12]
    out = os.path.join(tempfile.gettempdir(), f"armload-kallsyms-arm-{tag}")
    elf, binf = out + ".elf", out + ".bin"
    if not os.path.exists(binf):
        try:
            subprocess.run([f"{CROSS}gcc", "-O2", "-marm", "-march=armv7-a", "-mfloat-abi=soft", "-ffreestanding",
                            "-fno-builtin", "-nostdlib", "-fno-pic", "-fno-stack-protector",
                            f"-Wl,-Ttext={CODE_BASE:#x}", "-Wl,-e,lookup_c", "-Wl,--build-id=none", "-o", elf, SRC],
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


def _machine(vmlinuz: str):
    from ..kernel.config import KernelConfig
    from ..emu import Machine
    from ..kernel.provider import Kernel
    from ..loader.session import Session
    k = Kernel.from_files([os.path.join(SAMPLES, "Module.symvers"), vmlinuz], KernelConfig())
    mod = Session(k, k.config, "window").load(os.path.join(SAMPLES, "hello-arm.ko"))
    m = Machine(mod, k, budget=2_000_000_000)
    m.map_module(mod)
    return m, k


def run_benchmark(vmlinuz: str, *, hits=("vsnprintf", "kmalloc_trace", "_stext", "zlib_inflate", "tcp_sendmsg"),
                  misses=("no_such_symbol", "zzzz_last", "aaaa_first", "vsnprintf_x", "kmalloc_trac")) -> dict:
    from ..kernel.kallsyms import image_payloads, parse_tables
    m, k = _machine(vmlinuz)
    img = m.image
    parsed = parse_tables(image_payloads(vmlinuz)[0][0])
    lab = parsed["labels"]
    seqs_off = lab["kallsyms_markers"] + 4 * len(parsed["markers"])
    table = k.kallsyms
    code, fns = build_code()
    m.map_code(CODE_BASE, code)
    rel_base = struct.unpack_from("<I", img.data, lab["kallsyms_offsets"] + 4 * parsed["num_syms"])[0]
    if rel_base != parsed["relative_base"]:
        raise ArmloadError("kallsyms tables: relative base not where expected")
    t = m.heap.alloc(64, zero=True, kind="bench: struct tables")
    m.uc.mem_write(t, struct.pack("<8I", img.base + lab["kallsyms_names"], img.base + lab["kallsyms_markers"],
                                  img.base + lab["kallsyms_token_table"], img.base + lab["kallsyms_token_index"],
                                  img.base + lab["kallsyms_offsets"], rel_base, parsed["num_syms"],
                                  img.base + seqs_off))
    q = m.heap.alloc(1024, zero=True, kind="bench: query")
    kernel_fn = m.kernel_function("kallsyms_lookup_name")
    index = m.heap.alloc(4 * parsed["num_syms"], zero=True, kind="bench: batch index")
    rs = m.call(fns["kallsyms_lookup_batch_start"], [t, index], name="kallsyms_lookup_batch_start")
    if rs.status != "returned" or rs.retval != parsed["num_syms"]:
        raise ArmloadError(f"kallsyms_lookup_batch_start: {rs.summary()}")
    batch_start_insns = rs.instructions
    # (a) runs the file's text: each traced function still calls __gnu_mcount_nc (the booted
    # kernel's ftrace made those calls NOPs); count the instructions spent there
    mc = img.address("__gnu_mcount_nc")
    mcount_range = (mc, min(a for a in img.symbols.values() if a > mc) - 1)
    mcount = [0]
    rows = []
    for kind, names in (("hit", hits), ("miss", misses)):
        for name in names:
            ref = {s: table.lookup(name, s) for s in "abcd"}
            if len({v for v in ref.values()}) != 1:
                raise ArmloadError(f"the Python strategies disagree on {name}: {ref}")
            want = ref["a"] or 0
            m.uc.mem_write(q, name.encode() + b"\0")
            res = {}
            mcount[0] = 0
            hook = m.uc.hook_add(UC_HOOK_CODE, _count, mcount, *mcount_range)
            m.uc.ctl_remove_cache(mcount_range[0], mcount_range[1] + 1)   # a translated block would miss the hook
            r = m.call(kernel_fn, [q], name="kallsyms_lookup_name")
            m.uc.hook_del(hook)
            res["a"] = r
            for s in "cd":
                res[s] = m.call(fns[f"lookup_{s}"], [t, q], name=f"lookup_{s}")
            res["e"] = m.call(fns["lookup_e"], [t, index, q], name="lookup_e")
            cq = table.compress(("T" + name).encode())          # type char + name, as stored
            m.uc.mem_write(q + 512, cq)
            rb = m.call(fns["lookup_b"], [t, q + 512, len(cq)], name="lookup_b")
            res["b"] = rb
            got_by = {}
            for s, rr in res.items():
                if rr.status != "returned":
                    raise ArmloadError(f"strategy ({s}) on {name}: {rr.fault and rr.fault.message}")
                got = rr.retval & 0xFFFFFFFF
                if s == "b" and want and got != want:
                    # (b) compares type+name: a symbol of another type (t, W, ...) is another record
                    for typ in "tTWwrRdD":
                        cq = table.compress((typ + name).encode())
                        m.uc.mem_write(q + 512, cq)
                        rr = res["b"] = m.call(fns["lookup_b"], [t, q + 512, len(cq)], name="lookup_b")
                        got = rr.retval & 0xFFFFFFFF
                        if got == want:
                            break
                if got != want:
                    raise ArmloadError(f"strategy ({s}) found {got:#x} for {name}, the Python reference {want:#x}")
                got_by[s] = got
            rows.append({"name": name, "kind": kind, "address": want,
                         **{f"{s}_address": got_by[s] for s in "abcde"},
                         **{f"{s}_insns": res[s].instructions for s in "abcde"}, "a_mcount_insns": mcount[0],
                         **{f"{s}_us": res[s].elapsed * 1e6 for s in "abcde"}})
    re_ = m.call(fns["kallsyms_lookup_batch_end"], [t, index], name="kallsyms_lookup_batch_end")
    out = {"rows": rows, "num_syms": parsed["num_syms"], "batch_start_insns": batch_start_insns,
           "batch_end_insns": re_.instructions}
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
    print(f"kallsyms lookups as ARM code on the Debian Image's tables ({res['num_syms']:,} symbols); "
          f"every result equals the Python reference and the kernel's own kallsyms_lookup_name")
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
