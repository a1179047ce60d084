"""Seed 000 in the booted Debian kernel: the Image's own kallsyms_lookup_name, called in the
kernel booted by armload/emu/booted, on the names `bench kallsyms-arm` looks up.

    res = run_booted(VMLINUZ, kallsyms_arm.run_benchmark(VMLINUZ))

Each name's address must equal what every strategy of the model benchmark returned, (a) the
kernel's code run on armload's model machine, (b)-(d) and seed 000's batch index (e). The booted
kernel's instruction count per lookup is the real one: the model machine runs the same code as
the vmlinuz file holds it, where every traced function still calls __gnu_mcount_nc; the booted
kernel's ftrace made those calls NOPs at boot, so it runs ~100 instructions fewer per lookup:
the model benchmark counts them (a_mcount_insns) and `explained` says whether that is the whole
difference on every name. Deterministic: the booted state is a snapshot, and a
lookup a timer interrupt fell into is run again (it changes nothing).
"""
from __future__ import annotations

import statistics

from ..errors import ArmloadError

STRATEGIES = "abcde"


def lookup(k, name: str, buf: int) -> tuple[int, int]:
    """(kallsyms_lookup_name(name), its instructions) in the booted kernel `k`; `buf` holds the name."""
    k.write(buf, name.encode() + b"\0")
    while True:
        q0, i0 = k.m.hw.irqs_taken, k.insns
        r = k.call("kallsyms_lookup_name", buf)
        if k.m.hw.irqs_taken == q0:
            return r, k.insns - i0


def run_booted(vmlinuz: str, model: dict) -> dict:
    """The booted kernel's lookups of the model benchmark's names, beside its rows."""
    from ..emu.booted.kernel import BootedKernel
    k = BootedKernel.get(vmlinuz)
    buf = k.kmalloc(512)
    rows = []
    for row in model["rows"]:
        addr, insns = lookup(k, row["name"], buf)
        strat = {s: row.get(f"{s}_address", row["address"]) for s in STRATEGIES}
        rows.append({"name": row["name"], "kind": row["kind"], "address": addr,
                     "agrees": all(v == addr for v in strat.values()),
                     "disagreeing": sorted(s for s, v in strat.items() if v != addr),
                     "insns": insns, "model_a_insns": row["a_insns"], "model_a_mcount_insns": row.get("a_mcount_insns"),
                     "explained": row.get("a_mcount_insns") is not None
                     and insns == row["a_insns"] - row["a_mcount_insns"], "e_insns": row["e_insns"]})
    k.kfree(buf)
    out = {"rows": rows, "agree": all(r["agrees"] for r in rows), "explained": all(r["explained"] for r in rows)}
    for kind in ("hit", "miss"):
        sel = [r for r in rows if r["kind"] == kind]
        if not sel:
            continue
        kern = statistics.mean(r["insns"] for r in sel)
        out[kind] = {"booted_insns": kern, "model_a_insns": model[kind]["a"]["insns"],
                     "e_insns": model[kind]["e"]["insns"], "gain_e_vs_booted": kern / model[kind]["e"]["insns"],
                     "booted_vs_model_a": kern / model[kind]["a"]["insns"]}
    if not out["agree"]:
        bad = [f"{r['name']} ({','.join(r['disagreeing'])})" for r in rows if not r["agrees"]]
        raise ArmloadError(f"the booted kernel's kallsyms_lookup_name disagrees with armload's strategies on {bad}")
    return out


def print_booted(res: dict) -> None:
    print(f"\nthe booted kernel's own kallsyms_lookup_name (the Image booted, ftrace initialised) on the same names: "
          f"{'every address equals every strategy (a)-(e)' if res['agree'] else 'DISAGREES'}")
    print(f"  {'name':<16} {'kind':<5} {'address':>11} {'booted insns':>13} {'model (a)':>10} {'mcount':>7} "
          f"{'(e) batch':>10} {'booted/(e)':>11}")
    for r in res["rows"]:
        print(f"  {r['name']:<16} {r['kind']:<5} {r['address']:>#11x} {r['insns']:>13,} {r['model_a_insns']:>10,} "
              f"{r['model_a_mcount_insns']:>7,} {r['e_insns']:>10,} {r['insns'] / r['e_insns']:>10.1f}x")
    for kind in ("hit", "miss"):
        d = res.get(kind)
        if d:
            print(f"  {kind}: booted kernel {d['booted_insns']:,.1f} instructions per lookup, the model machine's (a) "
                  f"{d['model_a_insns']:,.1f} ({d['booted_vs_model_a']:.4f}x); (e) {d['e_insns']:,.1f}: "
                  f"{d['gain_e_vs_booted']:.1f}x fewer than the booted kernel's real lookup "
                  f"(target >= 10x: {'met' if d['gain_e_vs_booted'] >= 10 else 'NOT met'})")
    print("  mcount: instructions (a) spent in __gnu_mcount_nc on the model machine, which runs the vmlinuz file's "
          "text; the booted kernel's ftrace made those calls NOPs.")
    print(f"  booted = model (a) - mcount on every name: {'yes' if res['explained'] else 'NO'}")

