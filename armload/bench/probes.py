"""`armload bench probes`: the attach benchmark, and many probes on Debian modules.

Attach: exporter's armload_sample_add(a, b) is called in a loop by an emitted driver routine,
with nothing, a kprobe, a kretprobe, ftrace, a direct trampoline (fentry) and fentry+fexit on
it, each running the same tiny handler. Two handler flavours: a Python callable (the library
API: every handler is reached through a trap) and an emulated ARM handler that increments a
counter in memory (trampolines and ftrace_call reach it with `bl`, without a trap; kprobes and
kretprobes still trap, then call it). Emulated instructions per event are deterministic
(Machine.clock); host events per second are this host's, shown for the ordering only.

Many: a few hundred Debian modules in one machine, 40,000 kprobes registered on their
functions (entries and offsets), 20,000 enabled, hits at probed addresses driven through the
kprobe table (hash lists of KPROBE_TABLE_SIZE as in 6.1) without and with a per-cpu cache.
"""
from __future__ import annotations

import os
import random
import struct
import time

from ..probes.base import ProbeError
from ..probes.core import Probes
from ..probes.ftrace import assemble

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLES = os.path.join(ROOT, "sample_modules")
DEBIAN = os.path.join(ROOT, ".cache", "linux-image-6.1.0-50-armmp", "lib", "modules", "6.1.0-50-armmp", "kernel")
DEBIAN_SYMVERS = os.path.join(ROOT, ".cache", "linux-headers-6.1.0-50-armmp", "usr", "src",
                              "linux-headers-6.1.0-50-armmp", "Module.symvers")
# test_progs "bench trig-*" on a 2.4 GHz x86 (the issue): K events/s, without / with retpoline
X86 = {"base": (2743, 2401), "kprobe": (2419, 1930), "kretprobe": (1876, 1485), "fentry": (2710, 2351),
       "fexit": (2685, 2185)}
MODES = ("base", "kprobe", "kretprobe", "ftrace", "fentry", "fentry+fexit")
X86_ROW = {"base": "base", "kprobe": "kprobe", "kretprobe": "kretprobe", "ftrace": None, "fentry": "fentry",
           "fentry+fexit": "fexit"}

_DRIVER = """
    push {r4, lr}
    movw r4, #NLO
    movt r4, #NHI
loop:
    mov r0, r4
    mov r1, #1
    movw ip, #TLO
    movt ip, #THI
    blx ip
    subs r4, r4, #1
    bne loop
    pop {r4, pc}
"""
# the emulated tiny handler: (*counter)++ ; the counter's address is the literal after bx lr
_HANDLER = struct.pack("<6I", 0xE59F000C, 0xE5901000, 0xE2811001, 0xE5801000, 0xE12FFF1E, 0)


def _machine(placement="window"):
    from ..kernel.config import DEBIAN_ARMMP
    from ..emu import Machine
    from ..kernel.provider import Kernel
    from ..loader.session import Session
    path = os.path.join(SAMPLES, "exporter-arm.ko")
    symvers = os.path.join(SAMPLES, "Module.symvers")
    for f in (path, symvers):
        if not os.path.exists(f):
            raise ProbeError(f"bench probes: {f} missing (make samples)")
    kernel = Kernel.from_files([symvers], DEBIAN_ARMMP)
    mod = Session(kernel, DEBIAN_ARMMP, placement).load(path)
    m = Machine(mod, kernel, budget=0)
    return m, mod


def run_attach(events: int = 5000, min_time: float = 0.3) -> dict:
    m, mod = _machine()
    pr = Probes(m, record=False)
    func = pr.function("armload_sample_add")
    drv = pr.alloc_text(64)
    n_lo, n_hi, t_lo, t_hi = events & 0xFFFF, events >> 16, func.start & 0xFFFF, func.start >> 16
    pr.write_code(drv, assemble(_DRIVER, drv, False, NLO=n_lo, NHI=n_hi, TLO=t_lo, THI=t_hi))
    counter = m.heap.alloc(4, zero=True, kind="bench counter")
    hcode = pr.alloc_near(mod, 32)
    pr.write_code(hcode, _HANDLER[:20] + struct.pack("<I", counter))
    hcode_ft = pr.alloc_text(32)                 # the same handler within bl range of ftrace_call
    pr.write_code(hcode_ft, _HANDLER[:20] + struct.pack("<I", counter))
    traps = [0]
    dispatch = m._breakpoint

    def counting(addr):
        traps[0] += 1
        return dispatch(addr)
    m._breakpoint = counting
    py_count = [0]

    def tiny(_hit):                       # the Python handler: count the event
        py_count[0] += 1

    def emulated(_hit):                   # a trap calls the emulated handler
        m.invoke(hcode)

    def read_counter():
        return struct.unpack("<I", m.read(counter, 4))[0]

    rows = []
    for flavour in ("python", "emulated"):
        for mode in MODES:
            h = tiny if flavour == "python" else emulated
            attached = []
            if mode == "kprobe":
                attached.append(pr.kprobe(func, 0, pre=h))
            elif mode == "kretprobe":
                attached.append(pr.kretprobe(func, h))
            elif mode == "ftrace":
                attached.append(pr.ftrace_function(func, tiny if flavour == "python" else None))
                pr.ftrace.set_tracer(hcode_ft if flavour == "emulated" else None)
            elif mode == "fentry":
                attached.append(pr.direct(func, entry=tiny, entry_code=hcode if flavour == "emulated" else None)
                                if flavour == "python" else pr.direct(func, entry_code=hcode))
            elif mode == "fentry+fexit":
                attached.append(pr.direct(func, entry=h, exit=h))
            m.call(drv, budget=0)                        # warm the translation cache
            py_count[0] = 0
            m.write(counter, b"\0\0\0\0")
            traps[0] = 0
            r = m.call(drv, budget=0)                    # the measured run: counts are deterministic
            if r.status != "returned":
                raise ProbeError(f"bench probes: {mode}: {r.summary()}")
            handled = py_count[0] + read_counter()
            n_traps = traps[0]
            runs, t0 = 0, time.perf_counter()            # host rate: repeat for at least min_time
            while True:
                m.call(drv, budget=0)
                runs += 1
                dt = time.perf_counter() - t0
                if dt >= min_time:
                    break
            per = {"base": 0, "fentry+fexit": 2}.get(mode, 1)
            if handled != per * events:
                raise ProbeError(f"bench probes: {mode} ({flavour}): the handler ran {handled} times "
                                 f"for {events} events (expected {per * events})")
            rows.append({"flavour": flavour, "mode": mode, "events": events,
                         "insns_per_event": r.instructions / events, "traps_per_event": n_traps / events,
                         "handler_runs_per_event": per, "events_per_s": runs * events / dt})
            for a in attached:
                for x in (a,):
                    if hasattr(x, "unregister"):
                        x.unregister()
                    else:
                        x.disable()
            if mode == "ftrace":
                pr.ftrace.set_tracer(None)
            if mode in ("fentry", "fentry+fexit"):
                pr.probes = [p for p in pr.probes if p not in attached]
    m._breakpoint = dispatch
    base = {f: next(r for r in rows if r["flavour"] == f and r["mode"] == "base") for f in ("python", "emulated")}
    for r in rows:
        b = base[r["flavour"]]
        r["extra_insns"] = r["insns_per_event"] - b["insns_per_event"]
        r["host_ratio"] = r["events_per_s"] / b["events_per_s"]
        x = X86_ROW[r["mode"]]
        r["x86_k_per_s"] = X86[x][0] if x else None
        r["x86_ratio"] = X86[x][0] / X86["base"][0] if x else None
    return {"events": events, "rows": rows, "ordering": _ordering(rows)}


def _ordering(rows) -> dict:
    out = {}
    for f in ("python", "emulated"):
        r = {x["mode"]: x for x in rows if x["flavour"] == f}
        eps = {k: v["events_per_s"] for k, v in r.items()}
        tramp_near_base = eps["fentry"] >= 0.8 * eps["base"]
        out[f] = {"fentry_vs_base": eps["fentry"] / eps["base"],
                  "trampoline ~ base": tramp_near_base, "base > kprobe": eps["base"] > eps["kprobe"],
                  "kprobe > kretprobe": eps["kprobe"] > eps["kretprobe"],
                  "reproduced": tramp_near_base and eps["base"] > eps["kprobe"] > eps["kretprobe"]}
    return out


def print_attach(res: dict) -> None:
    print(f"probes attach benchmark: armload_sample_add called {res['events']:,} times by a driver loop "
          f"(exporter-arm.ko)")
    print("emulated insns/event: deterministic (Machine.clock), including the driver loop; traps: breakpoint "
          "dispatches to Python per event;")
    print("host events/s: this host (ordering only); x86: the issue's test_progs figures (2.4 GHz, no retpoline)")
    for f, title in (("python", "handler = a Python callable (reached through a trap in every mode)"),
                     ("emulated", "handler = emulated ARM code (bl from ftrace_call / trampolines; kprobes trap, "
                                  "then call it)")):
        print(f"\n{title}")
        print(f"  {'mode':<14}{'insns/event':>12}{'+insns':>8}{'traps/ev':>9}{'host ev/s':>12}{'vs base':>8}"
              f"{'x86 K/s':>9}{'x86 vs base':>12}")
        for r in res["rows"]:
            if r["flavour"] != f:
                continue
            x86 = f"{r['x86_k_per_s']:,}" if r["x86_k_per_s"] else "-"
            xr = f"{r['x86_ratio']:.2f}" if r["x86_ratio"] else "-"
            print(f"  {r['mode']:<14}{r['insns_per_event']:>12.1f}{r['extra_insns']:>8.1f}{r['traps_per_event']:>9.1f}"
                  f"{r['events_per_s']:>12,.0f}{r['host_ratio']:>8.2f}{x86:>9}{xr:>12}")
        o = res["ordering"][f]
        print(f"  ordering trampoline ~ base > kprobe > kretprobe: "
              f"{'reproduced' if o['reproduced'] else 'NOT reproduced'}: fentry/base = {o['fentry_vs_base']:.2f} "
              f"({'~' if o['trampoline ~ base'] else 'not ~'} base, within 20%), base > kprobe: "
              f"{o['base > kprobe']}, kprobe > kretprobe: {o['kprobe > kretprobe']}")
    print("\nwhy: a kprobe costs one trap (breakpoint -> kprobe_handler -> out-of-line slot), a kretprobe two "
          "(entry kprobe + trampoline),")
    print("fentry+fexit two (entry and exit traps). The kernel's exception entry and kprobe_handler are "
          "Python here and retire no")
    print("emulated instructions, so insns/event understates kprobes; host time is dominated by leaving the "
          "emulator for each trap,")
    py = {r["mode"]: r for r in res["rows"] if r["flavour"] == "python"}
    per_insn = 1 / py["base"]["events_per_s"] / py["base"]["insns_per_event"]
    per_trap = (1 / py["kprobe"]["events_per_s"] - 1 / py["base"]["events_per_s"]) / py["kprobe"]["traps_per_event"]
    print(f"which plays the role of the x86 trap cost: here one trap costs ~{per_trap * 1e6:.0f} us of host time, "
          f"~{per_trap / per_insn:,.0f} emulated instructions")
    print("(on x86 a kprobe costs ~0.14 us more than base). A trap that calls the emulated handler starts a nested "
          "emulation, dearer still.")
    print("With an emulated handler ftrace and fentry need no trap at all and are the cheapest probes, as on x86;")
    print("they are still not ~ base because the probed function is 9 instructions and the trampoline adds ~11, "
          "where the x86")
    print("bench probes a whole syscall (hundreds of cycles per event).")
    em = {r["mode"]: r for r in res["rows"] if r["flavour"] == "emulated"}
    cyc = 2.4e9 / (X86["base"][0] * 1000)               # x86 cycles per base event
    proj = ", ".join(f"{k} {cyc / (cyc + em[k]['extra_insns']):.3f}" for k in ("ftrace", "fentry"))
    print(f"projection (deterministic counts only): with x86's ~{cyc:.0f} cycles per base event and one cycle per "
          f"added instruction, the")
    print(f"trap-free probes would run at {proj} of base (x86 measured fentry {X86['fentry'][0] / X86['base'][0]:.3f}); "
          f"trap costs are not simulated, so no projection is given for kprobes.")


# --- many probes ---------------------------------------------------------------------------------
def _debian_machine(n_modules: int):
    from ..kernel.config import DEBIAN_ARMMP
    from ..ci.corpus import plan_order, scan_tree
    from ..emu import Machine
    from ..errors import ArmloadError
    from ..kernel.provider import Kernel
    from ..loader.session import Session
    if not os.path.isdir(DEBIAN) or not os.path.exists(DEBIAN_SYMVERS):
        raise ProbeError(f"bench probes --many: the Debian corpus is missing ({DEBIAN}; make corpus)")
    kernel = Kernel.from_files([DEBIAN_SYMVERS], DEBIAN_ARMMP)
    plan = plan_order(scan_tree(DEBIAN))
    s = Session(kernel, DEBIAN_ARMMP, "vmalloc")
    loaded, failed = [], set()
    t0 = time.perf_counter()
    for name in plan.order:
        if len(loaded) >= n_modules:
            break
        info = plan.modules[name]
        if any(d in failed or d not in {m.name for m in loaded} for d in plan.closure.get(name, [])):
            failed.add(name)
            continue
        try:
            loaded.append(s.load(info.path))
        except ArmloadError:
            failed.add(name)
    m = Machine(loaded, kernel, budget=0)
    for mod in loaded:                     # as after each init: the next module reuses init memory
        m.free_init_memory(mod)
    t_load = time.perf_counter() - t0
    return m, loaded, t_load


def _candidates(pr, mods, max_depth: int = 64):
    """(function, offset) pairs: each function's entry first, then its other ARM instructions."""
    import bisect
    per_func = []
    for mod in mods:
        marks = sorted((s.addr & ~1, s.name[:2]) for s in mod.symbols
                       if s.stype == "notype" and s.name[:2] in ("$a", "$t", "$d"))
        starts = [a for a, _ in marks]
        for s in mod.symbols:
            if s.stype != "func" or not s.section or s.size < 4 or s.addr & 1 or not mod.region_of(s.addr):
                continue
            sec = mod.section_at(s.addr)
            if sec is None or not sec.flags & 0x4 or sec.mem.startswith("init"):
                continue
            offs = []
            for o in range(0, min(s.size, 4 * max_depth), 4):
                i = bisect.bisect_right(starts, s.addr + o) - 1
                if (i < 0 or marks[i][1] != "$d") and not pr.ftrace.is_site(s.addr + o):
                    offs.append(o)
            per_func.append((mod, s, offs))
    out, depth, seen = [], 0, set()
    while True:                            # round robin: entries of all functions, then +4, ...
        added = False
        for mod, s, offs in per_func:
            if depth < len(offs):
                added = True
                if s.addr + offs[depth] not in seen:       # aliases share their code
                    seen.add(s.addr + offs[depth])
                    out.append((mod, s, offs[depth]))
        if not added:
            return out
        depth += 1


def run_many(n_modules: int = 300, n_register: int = 40000, n_enable: int = 20000, n_lookups: int = 200000,
             seed: int = 12, cache_slots: int = 256) -> dict:
    from ..probes.base import Function
    from ..probes.kprobe import Kprobe
    from ..probes.table import KprobeTable
    m, mods, t_load = _debian_machine(n_modules)
    t0 = time.perf_counter()
    pr = Probes(m, record=False)
    t_ftrace = time.perf_counter() - t0
    cands = _candidates(pr, mods)
    refused: dict[str, int] = {}
    probes = []
    t0 = time.perf_counter()
    with pr.batch():
        for mod, s, off in cands:
            if len(probes) >= n_register:
                break
            kp = Kprobe(pr, Function(mod, s.name, s.addr, s.size, False), off, pre=None)
            try:
                kp.register()
            except ProbeError as e:
                import re
                hit = (re.search(r"instruction [0-9a-f]+ \((.*)\) is rejected", str(e))
                       or re.search(r"instruction [0-9a-f]+ \((.*)\):", str(e)))
                key = f"{e.errno}: " + (hit.group(1) if hit else str(e).split(": ")[-1])[:100]
                refused[key] = refused.get(key, 0) + 1
                continue
            probes.append(kp)
    t_register = time.perf_counter() - t0
    rng = random.Random(seed)
    enabled = probes[::max(1, len(probes) // n_enable)][:n_enable]
    # hits: a few hot probes and a long tail (deterministic Zipf-like over the enabled ones)
    weights = [1.0 / (i + 1) ** 1.1 for i in range(len(enabled))]
    order = list(range(len(enabled)))
    rng.shuffle(order)
    hot = [enabled[i].addr for i in order]
    hits = rng.choices(hot, weights=weights, k=n_lookups)
    configs = []
    for cache in (False, True):
        tab = KprobeTable(cache=cache, cache_slots=cache_slots)
        for kp in probes:
            tab.add(kp)
        pr.table = tab
        tab.reset_counts()
        t0 = time.perf_counter()
        for kp in enabled:                 # enable_kprobe: __get_valid_kprobe (a lookup) ...
            if tab.get(kp.addr) is not kp:
                raise ProbeError("bench probes --many: kprobe table lookup failed")
        t_enable_lookup = time.perf_counter() - t0
        t0 = time.perf_counter()
        with pr.batch():
            for kp in enabled:             # ... then arm_kprobe (patch the text)
                kp.enable()
        t_enable = t_enable_lookup + time.perf_counter() - t0
        enable_nodes = tab.nodes / max(1, tab.lookups)
        tab.reset_counts()
        get = tab.get
        t0 = time.perf_counter()
        for a in hits:
            get(a)
        t_look = time.perf_counter() - t0
        configs.append({"cache": cache, "enable_s": t_enable, "enable_lookup_s": t_enable_lookup, "enable_nodes_per_lookup": enable_nodes,
                        "lookups": n_lookups, "lookups_per_s": n_lookups / t_look,
                        "nodes_per_lookup": tab.nodes / n_lookups,
                        "cache_hit_rate": tab.cache_hits / n_lookups if cache else None})
        with pr.batch():
            for kp in enabled:
                kp.disable()
    chains = [len(h) for h in pr.table.heads]
    return {"modules": len(mods), "load_s": t_load, "ftrace_init_s": t_ftrace, "ftrace_sites": len(pr.ftrace.sites),
            "candidates": len(cands), "registered": len(probes), "refused": refused, "register_s": t_register,
            "enabled": len(enabled), "chain_min": min(chains), "chain_max": max(chains),
            "chain_mean": sum(chains) / len(chains), "configs": configs, "seed": seed, "cache_slots": cache_slots}


def print_many(res: dict) -> None:
    print(f"\nmany probes: {res['modules']} Debian modules in one machine (loaded in {res['load_s']:.1f} s; "
          f"{res['ftrace_sites']:,} mcount sites made NOPs in {res['ftrace_init_s']:.2f} s)")
    print(f"  registered {res['registered']:,} kprobes on function entries and offsets in "
          f"{res['register_s']:.2f} s ({res['candidates']:,} candidates); refused by the kernel's rules:")
    for k, v in sorted(res["refused"].items(), key=lambda kv: -kv[1])[:8]:
        print(f"    {v:>6,}  {k}")
    print(f"  kprobe_table: 64 hlists, {res['chain_min']}..{res['chain_max']} probes per list "
          f"(mean {res['chain_mean']:.0f}); {res['enabled']:,} enabled; hits: Zipf-like over the enabled probes")
    c0, c1 = res["configs"]
    print(f"  {'':<34}{'hash lists only':>18}{'+ per-cpu cache':>18}   (cache: {res['cache_slots']} "
          f"direct-mapped slots per CPU)")
    rows = [(f"enable {res['enabled']:,} (lookup + arm), s", f"{c0['enable_s']:.2f}", f"{c1['enable_s']:.2f}"),
            ("  of which lookups, s", f"{c0['enable_lookup_s']:.3f}", f"{c1['enable_lookup_s']:.3f}"),
            ("  list nodes per enable lookup", f"{c0['enable_nodes_per_lookup']:.1f}", f"{c1['enable_nodes_per_lookup']:.1f}"),
            (f"hit lookups ({c0['lookups']:,}) per s", f"{c0['lookups_per_s']:,.0f}", f"{c1['lookups_per_s']:,.0f}"),
            ("  list nodes visited per lookup", f"{c0['nodes_per_lookup']:.1f}", f"{c1['nodes_per_lookup']:.1f}"),
            ("  cache hit rate", "-", f"{c1['cache_hit_rate']:.1%}")]
    for a, b, c in rows:
        print(f"  {a:<34}{b:>18}{c:>18}")
    print("  hits are driven through the table (get_kprobe) at probed addresses, not by running the modules' code.")
    print("  list nodes visited is the deterministic measure (each is a cache line the kernel's walk touches); host "
          "lookups/s")
    print("  is Python's (the walk is one C-level list.index, the cache check is interpreted), not the kernel's.")
