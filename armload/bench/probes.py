"""Seed 004 in the booted Debian kernel: armload's kprobe-table model (probes/table.py) against
the kernel's own register_kprobe, enable_kprobe and get_kprobe (armload/emu/booted).

    k = BootedKernel.get(VMLINUZ)
    table, bits = table_layout(k)          # kprobe_table, KPROBE_HASH_BITS: read from get_kprobe's code
    probes, refused, costs = register(k, candidates(k.image), 5000)     # disabled: no text patch
    addrs = [p.addr for p in probes]
    kernel_lists(k, table, bits) == model_lists(addrs, bits)  # the kernel's hlists are the oracle
    lookup_insns(k, addrs[0])              # (instructions of one get_kprobe, its return), no interrupt inside
    res = run(); print_result(res)        # the benchmark (`bench probes --many`; smaller without --many)

The probes are on the Image's own text: every function's entry first, then the instructions on
the straight path from the entry up to its first branch (never a literal pool: a breakpoint
there would corrupt data), the `bl __gnu_mcount_nc` (the ftrace site) skipped; the kernel refuses
what it refuses (-EINVAL: its blacklist, its instruction decoder); and, by default, on the
entries of btrfs's functions (btrfs and its dependencies loaded by the kernel's load_module,
the addresses from the kernel's kallsyms), spread among them. They are registered disabled
(KPROBE_FLAG_DISABLED: no patch_text), then a share is enabled with enable_kprobe in steps: the
kernel's arm_kprobe -> patch_text -> stop_machine path, the kprobe_optimizer it kicks, and the
breakpoints the running kernel hits meanwhile all count, as on the seed's machine.

The kernel's table is mainline's: 64 lists (get_kprobe shifts the hash right by 26). The seed's
4,096 lists and its per-cpu cache are not in this kernel; 4,096 lists cannot be had without
rebuilding it (every loop over KPROBE_TABLE_SIZE and the static array are compiled in). The
measured line instructions = a + b * nodes is what predicts the kernel's cost for the model's
nodes at 4,096 lists: an extrapolation, said so where printed.

Every count is an instruction count of the emulated kernel (deterministic: the booted state is
restored from the same snapshot); host seconds are shown beside them.
"""
from __future__ import annotations

import os
import random
import statistics
import time

from ..probes.base import ProbeError
from ..probes.table import GOLDEN_RATIO_32, KprobeTable
from .inputs import DEBIAN, DEBIAN_SYMVERS, VMLINUZ

KP_NEXT, KP_ADDR = 0, 20                 # struct kprobe: hlist.next, addr (include/linux/kprobes.h, 32-bit)
MODULES_VADDR, PAGE_OFFSET = 0xBF000000, 0xC0000000     # arch/arm/include/asm/memory.h (16 MiB)
TREE = DEBIAN
MODULES = ("fs/btrfs/btrfs.ko",)         # 2,269 functions; its dependencies are loaded first
MAX_DEPTH = 8                            # instructions per function at most (entry and its straight path)


class _P:
    """A probe as the model sees it: an address (table.KprobeTable keys lists by .addr)."""
    __slots__ = ("addr",)

    def __init__(self, addr: int):
        self.addr = addr


# --- the kernel's table ----------------------------------------------------------------------------
def _zipf(rng, addrs, k):
    """k hit addresses over `addrs`: a few hot probes and a long tail (deterministic)."""
    if not addrs:
        return []
    weights = [1.0 / (i + 1) ** 1.1 for i in range(len(addrs))]
    order = list(range(len(addrs)))
    rng.shuffle(order)
    return rng.choices([addrs[i] for i in order], weights=weights, k=k)


def table_layout(k) -> tuple[int, int]:
    """(kprobe_table, KPROBE_HASH_BITS) from get_kprobe's code: the movw/movt pair that is not
    GOLDEN_RATIO_32 is the table; `lsr #(32 - bits)` is the hash. Debian has no KALLSYMS_ALL, so
    kallsyms does not name the static array."""
    a = k.image.symbols["get_kprobe"]
    regs: dict[int, int] = {}
    table = shift = None
    for i in range(24):
        w = k.image.word(a + 4 * i)
        rd, imm = (w >> 12) & 0xF, ((w >> 4) & 0xF000) | (w & 0xFFF)
        if (w & 0x0FF00000) == 0x03000000:                       # movw rd, #imm16
            regs[rd] = imm
        elif (w & 0x0FF00000) == 0x03400000:                     # movt rd, #imm16
            regs[rd] = regs.get(rd, 0) | imm << 16
            if regs[rd] != GOLDEN_RATIO_32:
                table = regs[rd]
        elif (w & 0x0FEF0070) == 0x01A00020 and shift is None:   # mov rd, rm, lsr #imm5
            shift = (w >> 7) & 0x1F
        if table is not None and shift is not None:
            return table, 32 - shift
    raise ProbeError("get_kprobe: kprobe_table or the hash shift not found in its code")


def kernel_lists(k, table: int, bits: int) -> list[list[int]]:
    """kprobe_table's hlists as the kernel holds them: the addresses, head first."""
    out = []
    for h in range(1 << bits):
        lst, p = [], k.u32(table + 4 * h)
        while p:
            lst.append(k.u32(p + KP_ADDR))
            p = k.u32(p + KP_NEXT)
        out.append(lst)
    return out


def model_table(addrs, bits: int) -> KprobeTable:
    """table.KprobeTable with probes added in the kernel's registration order."""
    tab = KprobeTable(bits=bits)
    for a in addrs:
        tab.add(_P(a))
    return tab


def model_lists(addrs, bits: int) -> list[list[int]]:
    return [list(x) for x in model_table(addrs, bits).addrs]


# --- where to probe --------------------------------------------------------------------------------
def _writes_pc(insn) -> bool:
    from capstone.arm import ARM_REG_PC
    try:
        return ARM_REG_PC in insn.regs_access()[1]
    except Exception:                                            # capstone without details: be safe
        return True


def candidates(image, max_depth: int = MAX_DEPTH) -> list[int]:
    """Instruction addresses of the Image's text, round robin: every function's entry, then each
    function's +4, +8, ... while on the straight path from the entry (up to and including the
    first instruction that writes pc); mcount sites skipped. Computed once per Image and process."""
    key = (image.path, len(image.data), max_depth)
    if key not in _CANDIDATES:
        _CANDIDATES[key] = _candidates(image, max_depth)
    return list(_CANDIDATES[key])


_CANDIDATES: dict = {}


def _candidates(image, max_depth: int) -> list[int]:
    import capstone
    from ..probes.ktext import KernelText
    kt = KernelText(image)
    md = capstone.Cs(capstone.CS_ARCH_ARM, capstone.CS_MODE_ARM)
    md.detail = True
    per = []
    for a in kt.starts:
        n = min(kt.size_of(a), 4 * max_depth) // 4
        offs = []
        for insn in md.disasm(bytes(image.data[a - image.base: a - image.base + 4 * n]), a):
            if kt.is_mcount_site(insn.address):
                continue
            offs.append(insn.address)
            if _writes_pc(insn):
                break
        if offs and offs[0] == a:
            per.append(offs)
    return [p[d] for d in range(max_depth) for p in per if d < len(p)]


def load_modules(vmlinuz: str, paths, tree: str):
    """A BootedRun (a restored booted kernel) with each of `paths` loaded after its dependencies
    by the kernel's own load_module (modprobe's part done from `tree`): (run, [(module, status, ret)])."""
    from ..kernel.modtree import load_order, tree_index
    from ..emu.booted.modrun import BootedRun
    from ..kernel.config import DEBIAN_ARMMP
    from ..kernel.provider import Kernel
    run = BootedRun(vmlinuz, Kernel.from_files([DEBIAN_SYMVERS, vmlinuz], DEBIAN_ARMMP), DEBIAN_ARMMP, tree=tree)
    loaded, index = [], tree_index(tree)
    for path in paths:
        for p in load_order(path, index):
            if any(os.path.basename(p) == x for x, _, _ in loaded):
                continue
            r = run.load(p)
            loaded.append((os.path.basename(p), r.status, r.ret))
    return run, loaded


def module_entries(k, path: str) -> list[int]:
    """The entries of a loaded module's functions (its .symtab's STT_FUNC in .text*, not init or
    exit text), where the kernel's kallsyms puts them ("module:function")."""
    from elftools.elf.elffile import ELFFile
    from ..kernel.modtree import parse_modinfo
    with open(path, "rb") as f:
        ko = f.read()
    name = parse_modinfo(ko)[0].get("name", [os.path.basename(path)[:-3].replace("-", "_")])[0]
    with open(path, "rb") as f:
        elf = ELFFile(f)
        syms = [(sym.name, elf.get_section(sym["st_shndx"]).name)
                for sym in elf.get_section_by_name(".symtab").iter_symbols()
                if sym["st_info"]["type"] == "STT_FUNC" and sym["st_size"] >= 4 and isinstance(sym["st_shndx"], int)]
    buf, out = k.kmalloc(512), []
    for fn, sec in syms:
        if sec.startswith(".text") and fn:
            k.write(buf, f"{name}:{fn}".encode() + b"\0")
            a = k.call("kallsyms_lookup_name", buf)
            if a and not a & 3 and a not in out:
                out.append(a)
    k.kfree(buf)
    return out


# --- the kernel doing it ---------------------------------------------------------------------------
def register(k, addrs, n: int, disabled: bool = True, kp=None) -> tuple[list, dict, list[int]]:
    """register_kprobe on `addrs` in order until n are registered: (probes, refused {errno: count},
    instructions of each registration that succeeded)."""
    from ..probes.booted import KernelProbes
    kp = kp or KernelProbes(k)
    probes, refused, costs = [], {}, []
    for a in addrs:
        if len(probes) >= n:
            break
        i0 = k.insns
        try:
            probes.append(kp.kprobe(a, disabled=disabled, count=False))
        except ProbeError as e:
            refused[e.errno] = refused.get(e.errno, 0) + 1
            continue
        costs.append(k.insns - i0)
    return probes, refused, costs


def lookup_insns(k, addr: int) -> tuple[int, int]:
    """(instructions of get_kprobe(addr) called from pid 1, its return value); repeated when a
    timer interrupt fell inside it (the lookup changes nothing), so the count is the lookup's."""
    while True:
        q0, i0 = k.m.hw.irqs_taken, k.insns
        r = k.call("get_kprobe", addr)
        if k.m.hw.irqs_taken == q0:
            return k.insns - i0, r


def fit(xs, ys) -> dict:
    """Least squares ys = a + b * xs: a, b, r2, the largest |residual|."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    a = my - b * mx
    res = [y - (a + b * x) for x, y in zip(xs, ys)]
    syy = sum((y - my) ** 2 for y in ys)
    return {"a": a, "b": b, "r2": 1 - sum(r * r for r in res) / syy if syy else 1.0,
            "max_abs_residual": max(abs(r) for r in res), "n": n}


def _settle(kp, enabled, rounds: int = 40) -> dict:
    """Let the kernel's kprobe_optimizer run (OPTIMIZE_DELAY, MAX_OPTIMIZE_PROBES a round) until a
    round changes nothing: the instructions that took (everything the kernel ran meanwhile)."""
    k = kp.k
    i0, before = k.insns, None
    for r in range(rounds):
        kp.wait_optimizer()
        now = sum(1 for p in enabled if p.state() == "optimized")
        if now == before:
            return {"insns": k.insns - i0, "rounds": r + 1}
        before = now
    return {"insns": k.insns - i0, "rounds": rounds}


def _undefs(k) -> int:
    return k.m.exception_counts.get("undef", 0)


# --- the benchmark ---------------------------------------------------------------------------------
def spread(main: list, extra: list, n: int) -> list:
    """`extra` placed at even intervals among the first n items of `main`, then the rest of `main`."""
    if not extra:
        return list(main)
    every = max(1, n // len(extra))
    out, it = [], iter(extra)
    for i, a in enumerate(main):
        if i % every == 0:
            out.extend(x for x in [next(it, None)] if x is not None)
        out.append(a)
    return out + list(it)


def run(n_register: int = 40000, n_enable: int = 20000, step: int = 2000, n_hits: int = 20000,
               seed: int = 12, vmlinuz: str = VMLINUZ, modules=MODULES, tree: str = TREE) -> dict:
    """Register n_register disabled kprobes on the Image's text, check the kernel's 64 hlists
    against the model's, time get_kprobe on hits and misses against the model's nodes, then
    enable n_enable of them in steps of `step` (every other one at 40k/20k, as the seed). `modules`
    (paths under `tree`) are loaded first by the kernel's load_module; their functions' entries are
    spread among the Image's candidates."""
    from ..emu.booted.kernel import BootedKernel
    from ..probes.booted import KernelProbes
    from ..probes.ktext import KernelText
    loaded, mod_addrs = [], []
    if modules and os.path.isdir(tree):
        run, loaded = load_modules(vmlinuz, [os.path.join(tree, m) for m in modules], tree)
        k = run.bk
        for m in modules:
            mod_addrs += module_entries(k, os.path.join(tree, m))
    else:
        k = BootedKernel.get(vmlinuz)
    table, bits = table_layout(k)
    empty_before = not any(kernel_lists(k, table, bits))
    cands = spread(candidates(k.image), mod_addrs, n_register)
    kp = KernelProbes(k)
    t0 = time.perf_counter()
    probes, refused, reg_costs = register(k, cands, n_register, kp=kp)
    t_reg = time.perf_counter() - t0
    addrs = [p.addr for p in probes]
    tab = model_table(addrs, bits)
    lists_equal = kernel_lists(k, table, bits) == [list(x) for x in tab.addrs]
    # get_kprobe: every registered address (hits), as many unregistered text addresses (misses)
    taken = set(addrs)
    misses = [a for a in cands if a not in taken][:len(addrs)]
    t0 = time.perf_counter()
    look, found = {}, []
    for kind, sample in (("hit", addrs), ("miss", misses)):
        nodes, insns = [], []
        for a in sample:
            n = tab.walk(a)[1]
            c, r = lookup_insns(k, a)
            if (r != 0) != (kind == "hit") or r and k.u32(r + KP_ADDR) != a:
                raise ProbeError(f"get_kprobe({a:#x}) returned {r:#x}: expected a {kind}")
            nodes.append(n)
            insns.append(c)
            if kind == "hit":
                found.append(r)
        look[kind] = {"n": len(sample), "fit": fit(nodes, insns), "nodes_mean": statistics.mean(nodes),
                      "insns_mean": statistics.mean(insns), "nodes_max": max(nodes), "insns_max": max(insns)}
    t_look = time.perf_counter() - t0
    # enabling in steps (every other probe at the seed's 40k/20k), then the seed's Zipf-like hits
    hf = look["hit"]["fit"]
    every = max(1, len(probes) // max(1, n_enable))
    enabled = probes[::every][:n_enable]
    steps, t_en = [], 0.0
    k.m.exception_log = log = []
    for s in range(0, len(enabled), step):
        chunk = enabled[s:s + step]
        i0, u0, q0 = k.insns, _undefs(k), k.m.hw.irqs_taken
        t0 = time.perf_counter()
        per = []
        for p in chunk:
            c0 = k.insns
            r = p.enable()
            if r:
                raise ProbeError(f"enable_kprobe({p.target}) returned {r}")
            per.append(k.insns - c0)
        dt = time.perf_counter() - t0
        t_en += dt
        nodes = statistics.mean(tab.walk(p.addr)[1] for p in chunk)
        steps.append({"enabled": s + len(chunk), "insns": k.insns - i0, "insns_per_enable": (k.insns - i0) / len(chunk),
                      "median_per_enable": statistics.median(per), "traps": _undefs(k) - u0,
                      "irqs": k.m.hw.irqs_taken - q0, "model_nodes_per_enable": nodes,
                      "predicted_get_kprobe_insns": hf["a"] + hf["b"] * nodes, "host_s": dt})
    trapped, kt = {}, KernelText(k.image)
    k.m.exception_log = None
    for kind, pc in log:
        if kind == "undef":
            f = kt.function_at(pc)
            name = f.name if f else f"{pc:#x}"
            trapped[name] = trapped.get(name, 0) + 1
    opt = _settle(kp, enabled)
    states = {}
    for p in enabled:
        st = p.state()
        states[st] = states.get(st, 0) + 1
    plain = [i for i, (p, r) in enumerate(zip(probes, found)) if r == p.struct]
    page = k.module_alloc(4096)          # where the next detour buffer page would come from
    k.call("vfree", page)
    hits = _zipf(random.Random(seed + 1), [p.addr for p in enabled], n_hits)
    zipf_nodes, zipf_insns = [], []
    for a in hits:
        zipf_nodes.append(tab.walk(a)[1])
        zipf_insns.append(lookup_insns(k, a)[0])
    out = {"vmlinuz": os.path.basename(vmlinuz), "kprobe_table": table, "bits": bits, "lists": 1 << bits,
           "table_empty_before": empty_before, "candidates": len(cands), "registered": len(probes),
           "modules": [{"module": m, "status": st, "ret": r} for m, st, r in loaded],
           "module_entries": len(mod_addrs),
           "module_probes": sum(1 for a in addrs if MODULES_VADDR <= a < PAGE_OFFSET),
           "refused": {str(e): c for e, c in sorted(refused.items())},
           "register_insns_mean": statistics.mean(reg_costs) if reg_costs else 0,
           "register_insns_module": statistics.mean(c for a, c in zip(addrs, reg_costs)
                                                    if MODULES_VADDR <= a < PAGE_OFFSET) if mod_addrs else None,
           "register_insns_image": statistics.mean(c for a, c in zip(addrs, reg_costs)
                                                   if not MODULES_VADDR <= a < PAGE_OFFSET),
           "register_insns_first_1000": statistics.mean(reg_costs[:1000]) if reg_costs else 0,
           "register_insns_last_1000": statistics.mean(reg_costs[-1000:]) if reg_costs else 0,
           "aggregated": len(probes) - len(plain), "first_plain": plain[0] if plain else None,
           "module_alloc_after": page,
           "lists_equal_model": lists_equal, "chain_min": min(len(x) for x in tab.addrs),
           "chain_max": max(len(x) for x in tab.addrs), "chain_mean": len(probes) / (1 << bits),
           "lookup": look,
           "enable": {"n": len(enabled), "every": every, "step": step, "steps": steps, "states_after": states,
                      "optimizer_insns": opt["insns"], "optimizer_rounds": opt["rounds"],
                      "trapped_top": sorted(trapped.items(), key=lambda kv: (-kv[1], kv[0]))[:8],
                      "traps": sum(trapped.values())},
           "zipf": {"n": n_hits, "model_nodes_mean": statistics.mean(zipf_nodes),
                    "insns_mean": statistics.mean(zipf_insns),
                    "predicted_insns_mean": hf["a"] + hf["b"] * statistics.mean(zipf_nodes)},
           "host_s": {"register": t_reg, "lookups": t_look, "enable": t_en}}
    # the seed's 4,096 lists: the model's nodes for the same probes and hits, priced by the measured line
    big = model_table(addrs, 12)
    zn = statistics.mean(big.walk(a)[1] for a in hits)
    out["extrapolated_4096"] = {"model_nodes_per_hit": zn, "predicted_insns_per_hit": hf["a"] + hf["b"] * zn,
                                "chain_mean": len(probes) / 4096}
    # the seed's per-cpu cache (a patch this kernel has not): the model's nodes for the same hits
    out["cache"] = []
    for b in (bits, 12):
        t = KprobeTable(bits=b, cache=True)
        for a in addrs:
            t.add(_P(a))
        t.reset_counts()
        for a in hits:
            t.get(a)
        out["cache"].append({"lists": 1 << b, "model_nodes_per_hit": t.nodes / max(1, len(hits)),
                             "cache_hit_share": t.cache_hits / max(1, len(hits))})
    kp.close()
    return out


def print_result(res: dict) -> None:
    """The booted kernel's numbers, beside the table model's (probes/table.py) for the same probes."""
    print(f"\nseed 004 in the booted kernel ({res['vmlinuz']}): the Image's own register_kprobe, enable_kprobe, "
          f"get_kprobe")
    print(f"  kprobe_table at {res['kprobe_table']:#x}, {res['lists']} lists (get_kprobe: lsr #{32 - res['bits']}, "
          f"KPROBE_HASH_BITS {res['bits']}); the seed's 4,096 lists need a rebuilt kernel, its per-cpu cache is "
          f"a patch this kernel has not")
    ref = ", ".join(f"{c:,} ({e})" for e, c in res["refused"].items()) or "none"
    if res.get("modules"):
        mods = ", ".join(f"{m['module']} ({m['status']} {m['ret']})" for m in res["modules"])
        print(f"  modules loaded by the kernel's load_module first: {mods}")
    print(f"  registered {res['registered']:,} disabled kprobes: {res.get('module_probes', 0):,} on module "
          f"function entries ({res.get('module_entries', 0):,} resolved by the kernel's kallsyms), the rest on the "
          f"Image's text (entries, then straight-line offsets; {res['candidates']:,} candidates); refused by the "
          f"kernel: {ref}")
    print(f"  register_kprobe: {res['register_insns_mean']:,.0f} instructions each (first 1,000: "
          f"{res['register_insns_first_1000']:,.0f}, last 1,000: {res['register_insns_last_1000']:,.0f}"
          + (f"; on the Image {res['register_insns_image']:,.0f}, on a module {res['register_insns_module']:,.0f}"
             if res.get("register_insns_module") else "") + "); "
          f"{res['aggregated']:,} hashed as an optimized_kprobe aggregate (a detour buffer was had)")
    if res["first_plain"] is not None:
        a = res["module_alloc_after"]
        why = ("in the module area: not the reason" if MODULES_VADDR <= a < PAGE_OFFSET else
               "vmalloc: the 16 MiB module area is full of instruction slots and detour buffers, and a detour "
               "buffer must be within b range of the probe")
        print(f"    from probe {res['first_plain']:,} on none: module_alloc(4096) now returns {a:#x} ({why}); "
              f"these stay breakpoint probes")
    print(f"  the kernel's {res['lists']} hlists == the model's (table.KprobeTable, same order): "
          f"{'yes' if res['lists_equal_model'] else 'NO'}; probes per list {res['chain_min']}-{res['chain_max']}, "
          f"mean {res['chain_mean']:.1f}")
    print("  get_kprobe called directly, instructions vs the model's list nodes (fit insns = a + b*nodes):")
    print(f"    {'':5} {'lookups':>8} {'nodes/lookup':>13} {'insns/lookup':>13} {'a':>6} {'b':>6} {'R^2':>9} "
          f"{'max |res|':>10}")
    for kind, d in res["lookup"].items():
        f = d["fit"]
        print(f"    {kind:5} {d['n']:>8,} {d['nodes_mean']:>13.1f} {d['insns_mean']:>13.1f} {f['a']:>6.1f} "
              f"{f['b']:>6.2f} {f['r2']:>9.6f} {f['max_abs_residual']:>10.2f}")
    z, x = res["zipf"], res["extrapolated_4096"]
    print(f"    the seed's Zipf-like hits over the enabled probes ({z['n']:,}): model {z['model_nodes_mean']:.1f} "
          f"nodes -> predicted {z['predicted_insns_mean']:,.1f}, kernel {z['insns_mean']:,.1f} instructions")
    hf = res["lookup"]["hit"]["fit"]

    def price(nodes: float) -> str:
        return f"{nodes:8.2f} -> {hf['a'] + hf['b'] * nodes:8,.1f}"
    print("  side by side, Zipf-like hits: the model's list nodes per hit -> this kernel's get_kprobe instructions "
          "(a + b*nodes;")
    print("    4,096 lists and the per-cpu cache are not in this kernel: extrapolated, the cache's own instructions "
          "not counted)")
    print(f"    {'lists':>6} {'cache':>5} {'model nodes -> insns':>22} {'kernel measured':>16}")
    rows = [(64, False, z["model_nodes_mean"], f"{z['insns_mean']:16,.1f}"),
            (4096, False, x["model_nodes_per_hit"], f"{'-':>16}")]
    rows += [(c["lists"], True, c["model_nodes_per_hit"], f"{'-':>16}") for c in res.get("cache", ())]
    for lists, cache, nodes, meas in rows:
        print(f"    {lists:>6,} {'on' if cache else 'off':>5}   {price(nodes)} {meas}")
    e = res["enable"]
    nth = {1: "every probe", 2: "every other probe"}.get(e["every"], f"one probe in {e['every']}")
    print(f"  enabling {e['n']:,} ({nth}) in steps of {e['step']:,}: enable_kprobe -> arm_kprobe -> "
          f"patch_text -> stop_machine; everything the kernel ran meanwhile counts")
    print(f"    {'enabled':>8} {'insns/enable':>13} {'median':>8} {'model nodes':>12} {'get_kprobe':>11} {'traps':>7} "
          f"{'irqs':>5} {'host s':>7}")
    for s in e["steps"]:
        print(f"    {s['enabled']:>8,} {s['insns_per_enable']:>13,.0f} {s['median_per_enable']:>8,.0f} "
              f"{s['model_nodes_per_enable']:>12.1f} {s['predicted_get_kprobe_insns']:>11,.0f} {s['traps']:>7,} "
              f"{s['irqs']:>5} {s['host_s']:>7.2f}")
    print(f"    get_kprobe: the model's nodes priced by the fitted line (enable_kprobe looks the probe up once); "
          f"traps: breakpoints of enabled probes the kernel hit, {e['traps']:,} in all, most in: "
          + ", ".join(f"{n} {c:,}" for n, c in e["trapped_top"][:5]))
    print(f"    then kprobe_optimizer until a round changes nothing: {e['optimizer_insns']:,} instructions, "
          f"{e['optimizer_rounds']} sleeps of 100 ms; the enabled probes after: "
          + ", ".join(f"{v:,} {k}" for k, v in sorted(e["states_after"].items())))
    h = res["host_s"]
    print(f"  host: register {h['register']:.1f} s, lookups {h['lookups']:.1f} s, enable {h['enable']:.1f} s")
