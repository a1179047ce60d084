"""Pictures of a load (matplotlib, SVG or PNG): the simulated address space, one module's sections
inside its core/init allocations with the PLT groups and cache lines, the branch map (direct or
through a veneer), and plots of the PLT counting rules (time and count versus relocations, and
counts per rule across a corpus).

Every function returns a matplotlib Figure drawn from plain data (a LoadedModule, a config, a
benchmark or check result); save() writes it, svg_text() inlines it in HTML. The figures are
schematic where sizes differ by orders of magnitude (a 4 GiB address space holding a 12 KiB
module): the box heights say so in their labels, and every number printed is a real address.
"""
from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")                     # no display; must precede pyplot
import matplotlib.pyplot as plt           # noqa: E402
import matplotlib.ticker                  # noqa: E402,F401
from matplotlib.patches import FancyArrowPatch, Rectangle  # noqa: E402

from ..kernel.config import KernelConfig          # noqa: E402
from ..loader.model import LoadedModule           # noqa: E402

plt.rcParams.update({
    "svg.fonttype": "none",               # text stays text: small, searchable SVGs
    "svg.hashsalt": "armload",            # deterministic ids: regenerated files do not churn
    "font.size": 9,
    "font.family": "DejaVu Sans",
    "axes.titlesize": 10,
})

CLASS_COLORS = {"text": "#4c72b0", "rodata": "#55a868", "ro_after_init": "#8172b2", "data": "#c44e52",
                "init_text": "#64b5cd", "init_rodata": "#a6d96a", "init_data": "#f4a582"}
PLT_COLOR = "#dd8452"
DIRECT, VENEER = "#2b8a3e", "#d9480f"


def _mib(n: int) -> str:
    if n >= 1 << 20:
        return f"{n / (1 << 20):g} MiB"
    if n >= 1 << 10:
        return f"{n / (1 << 10):g} KiB"
    return f"{n} B"


def save(fig, path: str) -> None:
    """SVG or PNG by the file's extension (PNG at 110 dpi)."""
    if path.endswith(".png"):
        fig.savefig(path, dpi=110, bbox_inches="tight")
    else:
        fig.savefig(path, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)


def svg_text(fig) -> str:
    """The figure as an inline <svg> element (no XML prolog)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    s = buf.getvalue()
    return s[s.index("<svg"):]


# --- 1. the address space --------------------------------------------------------------------
def reach_of(place: int, thumb: bool) -> tuple[int, int]:
    """[lo, hi] a bl/b at `place` can reach: P + 8 + imm24 << 2 (ARM, -32 MiB .. +32 MiB - 4), or
    P + 4 + a signed 25-bit offset (Thumb-2 bl/b.w, -16 MiB .. +16 MiB - 2)."""
    if thumb:
        return max(place + 4 - (1 << 24), 0), min(place + 4 + (1 << 24) - 2, (1 << 32) - 1)
    return max(place + 8 - (1 << 25), 0), min(place + 8 + (1 << 25) - 4, (1 << 32) - 1)


def _inside(m: LoadedModule, addrs):
    """Mask: which addresses fall in one of the module's allocations (numpy, any number of them)."""
    import numpy as np
    a = np.asarray(addrs, dtype=np.uint64)
    ok = np.zeros(len(a), dtype=bool)
    for r in m.regions:
        ok |= (a >= r.base) & (a < r.end)
    return ok


def call_site(modules: list[LoadedModule]):
    """The site the reach band is drawn from: the last module's first branch out of it (a call
    into the kernel or another module), else its first branch site; None without branches."""
    import numpy as np
    for m in reversed(modules):
        br = m.branches
        if not len(br):
            continue
        out = ~_inside(m, br["target"] & np.uint32(0xFFFFFFFE))
        pool = np.flatnonzero(out) if out.any() else np.arange(len(br))
        i = int(pool[np.argmin(br["place"][pool])])
        row = br[i]
        from types import SimpleNamespace
        from ..constants import reloc_name
        sym = int(row["sym"])
        return m, SimpleNamespace(place=int(row["place"]), target=int(row["target"]), plt=int(row["plt"]),
                                  type_name=reloc_name(int(row["rtype"])),
                                  symbol=m.sym_names[sym] if sym < len(m.sym_names) else "")
    return None


def address_space(config: KernelConfig, modules: list[LoadedModule], placement=None, stext: int | None = None):
    """Kernel text, the module window, lowmem and vmalloc as stacked boxes (high addresses on
    top), with each module allocation marked inside the area it fell in, the kernel's _stext
    (`stext`: the image's, from kallsyms; else the simulated kernel's, config.kernel_text) and
    the reach of a direct bl/b from a real call site of the module."""
    areas = [
        ("user space", 0x00000000, config.modules_vaddr, "#eeeeee", 1.0),
        ("module window\n(MODULES_VADDR..MODULES_END)", config.modules_vaddr, config.modules_end, "#d0e1f9", 2.0),
        ("pkmap", config.modules_end, config.page_offset, "#eeeeee", 0.45),
        ("kernel lowmem from PAGE_OFFSET", config.page_offset, config.page_offset + config.lowmem_size,
         "#fde2c8", 1.8),
        ("vmalloc\n(VMALLOC_START..VMALLOC_END)", config.vmalloc_start, config.vmalloc_end, "#e2f0d9", 2.0),
        ("fixmap, vectors", config.vmalloc_end, 1 << 32, "#eeeeee", 0.45),
    ]
    filled = []
    for i, ar in enumerate(areas):           # gaps (the 8 MiB vmalloc offset hole) get a box too
        if filled and filled[-1][2] < ar[1]:
            filled.append(("hole", filled[-1][2], ar[1], "#ffffff", 0.35))
        filled.append(ar)
    fig, ax = plt.subplots(figsize=(9.6, 6.6))
    y = 0.0
    boxes = []
    for name, lo, hi, col, h in filled:
        ax.add_patch(Rectangle((0, y), 4, h, facecolor=col, edgecolor="#555555"))
        ax.text(0.08, y + h / 2, f"{name}  ({_mib(hi - lo)})", va="center", fontsize=8)
        ax.text(-0.08, y, f"{lo:#010x}", va="center", ha="right", fontsize=7.5, family="monospace")
        boxes.append((lo, hi, y, h))
        y += h
    ax.text(-0.08, y, "0xffffffff", va="center", ha="right", fontsize=7.5, family="monospace")

    def ypos(addr: int) -> float:
        for lo, hi, yy, h in boxes:
            if lo <= addr < hi:
                return yy + h * (addr - lo) / max(hi - lo, 1)
        return y
    real = stext is not None
    stext = stext if real else config.kernel_text
    ys = ypos(stext)
    ax.plot([0, 4], [ys, ys], color="#c92a2a", lw=1.2)
    ax.text(3.92, ys + 0.05, f"_stext {stext:#010x}" + ("" if real else " (simulated kernel: no image)"),
            ha="right", va="bottom", fontsize=7.5, color="#c92a2a")
    # Branch reach from a call site of the module: +-32 MiB ARM (bl), +-16 MiB Thumb-2.
    site = call_site(modules)
    if site is not None:
        m, b = site
        lo, hi = reach_of(b.place, m.thumb or config.thumb2)
        lo_r, hi_r = ypos(lo), ypos(hi)
        ax.add_patch(Rectangle((-1.5, lo_r), 0.18, hi_r - lo_r, facecolor=DIRECT, alpha=0.25, edgecolor=DIRECT))
        yp = ypos(b.place)
        ax.plot([-1.5, 0], [yp, yp], color=DIRECT, lw=0.8, ls=":")
        span = _mib((hi - lo + 4) // 2)
        ax.text(-1.55, (lo_r + hi_r) / 2, f"reach ±{span}\nof {b.place:#010x}", rotation=90, ha="right",
                va="center", fontsize=7, color=DIRECT)
        tgt = b.target & ~1
        ax.text(-2.1, -0.25, f"green band: what the {b.type_name[6:]} at {b.place:#010x} "
                f"({m.symbolize(b.place) or m.name}) reaches directly: {lo:#010x}..{hi:#010x}\n"
                f"_stext {stext:#010x} is {'inside' if lo <= stext <= hi else 'outside'} it; its target "
                f"{b.symbol or '?'} {tgt:#010x} is " + ("inside: direct" if lo <= tgt <= hi else
                                                       "OUTSIDE: it goes through a PLT veneer"),
                ha="left", va="top", fontsize=7.5, color=DIRECT)
    # Module allocations: a marker at the address, the label in a column on the right.
    colors = ["#1f77b4", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
    allocs = [(r.base, r.size, m.name, r.name, colors[k % len(colors)], m) for k, m in enumerate(modules)
              for r in m.regions if r.name != "percpu"]
    allocs.sort()
    n = len(allocs)
    for i, (base, size, mname, rname, c, m) in enumerate(allocs):
        ym = ypos(base)
        ax.add_patch(Rectangle((2.6, ym - 0.05), 0.9, 0.1, facecolor=c, edgecolor="black", lw=0.6))
        ly = 0.4 + (y - 0.8) * (i + 0.5) / max(n, 1)
        pl = m.branches["place"]
        here_mask = (pl >= base) & (pl < base + size)
        n_here = int(here_mask.sum())
        ven = int((m.branches["plt"][here_mask] != 0).sum())
        how = (f"{n_here} branch sites: " + ("all direct" if not ven else "all through PLT veneers"
                                             if ven == n_here else f"{ven} through PLT veneers, "
                                             f"{n_here - ven} direct")) if n_here else "no branch sites"
        ax.annotate(f"{mname} {rname}: {base:#010x}, {_mib(size)}\n{how}",
                    xy=(3.5, ym), xytext=(4.6, ly), fontsize=7.5, va="center",
                    arrowprops=dict(arrowstyle="-", color=c, lw=0.8))
    why = {"window": "placement=window: module_alloc() first fit in the module window (vmalloc only when full)",
           "vmalloc": "placement=vmalloc: allocated far from the kernel (what module_alloc falls back to when "
                      "the window is full)"}.get(placement if isinstance(placement, str) else "",
                                                 f"placement={placement:#x}: a fixed address given on the command line"
                                                 if isinstance(placement, int) else "")
    ax.set_title("simulated 32-bit address space (box heights not to scale; addresses are real)"
                 + ("\n" + why if why else ""), fontsize=9)
    ax.set_xlim(-2.2, 8.8)
    ax.set_ylim(-0.75, y + 0.15)
    ax.axis("off")
    return fig


# --- 2. one module's sections ----------------------------------------------------------------
def module_layout(mod: LoadedModule):
    """Sections inside each allocation (one row each, offsets in the allocation) and, below,
    every PLT group: one cache line of `ldr pc` slots, one line of literals."""
    regions = [r for r in mod.regions if r.name != "percpu"]
    secs = [s for s in mod.sections if s.size and any(r.base <= s.addr < r.end for r in regions)]
    plts = [s for s in secs if s.name in (".plt", ".init.plt")]
    cfg = mod.config
    slot_addrs = {e.addr for e in mod.plt_entries}

    def groups_of(s):
        """(index, base) of the groups drawn: every group with a slot in use, and of the groups
        with none, the first one only (a big module reserves many it never uses)."""
        out, empty = [], 0
        for g in range(s.size // (2 * cfg.plt_stride)):
            base = s.addr + g * 2 * cfg.plt_stride
            if any(base + 4 * k in slot_addrs for k in range(cfg.plt_ent_count)):
                out.append((g, base))
            elif empty == 0:
                out.append((g, base))
                empty += 1
        return out
    drawn = {s.name: groups_of(s) for s in plts}
    n_groups = sum(len(v) for v in drawn.values())
    fig_h = 0.8 + 0.26 * len(secs) + (1.6 * n_groups + 0.8 if plts else 0)
    fig = plt.figure(figsize=(8.6, max(fig_h, 3)))
    top_h = 0.26 * len(secs) + 0.6
    gs = fig.add_gridspec(2 if plts else 1, 1, height_ratios=[top_h, 1.6 * n_groups + 0.6] if plts else [1])
    ax = fig.add_subplot(gs[0])
    labels = []
    for i, s in enumerate(secs):
        r = next(r for r in regions if r.base <= s.addr < r.end)
        off = s.addr - r.base
        col = PLT_COLOR if s in plts else CLASS_COLORS.get(s.mem, "#999999")
        ax.barh(i, max(s.size, 8), left=off, color=col, edgecolor="black", lw=0.4)
        labels.append(f"{s.name}  [{r.name}]")
        ax.text(off + max(s.size, 8) + 40, i, f"{s.addr:#010x} +{s.size:#x}", va="center", fontsize=7,
                family="monospace")
    ax.set_yticks(range(len(secs)), labels, fontsize=7.5, family="monospace")
    from matplotlib.patches import Patch
    present = list(dict.fromkeys(s.mem for s in secs if s not in plts))
    ax.legend(handles=[Patch(color=CLASS_COLORS.get(c, "#999999"), label=c) for c in present]
              + ([Patch(color=PLT_COLOR, label="PLT")] if plts else []), fontsize=7, loc="upper left",
              bbox_to_anchor=(1.005, 1.0), title="memory class", title_fontsize=7)
    ax.invert_yaxis()
    span = max(r.size for r in regions)
    for x in range(0, span + 1, 4096) if span <= 0x10000 else ():     # page lines only where they can be seen
        ax.axvline(x, color="#bbbbbb", lw=0.6, ls=":")
    step = 0x1000
    while span // step > 7:                   # at most 8 labels: they never overlap
        step *= 2
    ticks = list(range(0, span + 1, step))
    ax.set_xticks(ticks, [f"{t:#x}" for t in ticks], rotation=30, ha="right", fontsize=7)
    ax.set_xlim(0, span * 1.22)
    ax.set_xlabel("offset in the allocation (" + ("dotted: 4 KiB pages; " if span <= 0x10000 else "")
                  + "colour: memory class, orange: PLT)")
    ax.set_title(f"{mod.name}: sections in " + ", ".join(f"{r.name} {r.base:#010x} ({_mib(r.size)})"
                                                            for r in regions))
    if plts:
        ax2 = fig.add_subplot(gs[1])
        n = cfg.plt_ent_count
        slots = {e.addr: e for e in mod.plt_entries}
        row = 0.0
        for s in plts:
            hidden = s.size // (2 * cfg.plt_stride) - len(drawn[s.name])
            for g, base in drawn[s.name]:
                for k in range(n):
                    e = slots.get(base + 4 * k)
                    col = "#f0f0f0" if e is None else ("#ffd8a8" if e.fixed else PLT_COLOR)
                    ax2.add_patch(Rectangle((k, row), 0.95, 2.0, facecolor=col, edgecolor="#777777", lw=0.4))
                    ax2.add_patch(Rectangle((k, row + 2.1), 0.95, 1.5, facecolor="#e7f5ff" if e else "#f8f9fa",
                                            edgecolor="#777777", lw=0.4))
                    if e is not None:
                        ax2.text(k + 0.47, row + 1.0, (e.symbol or hex(e.target))[:15], ha="center", va="center",
                                 fontsize=5.5, rotation=90)
                        ax2.text(k + 0.47, row + 2.85, f"{e.target:08x}", ha="center", va="center", fontsize=5.5,
                                 rotation=90, family="monospace")
                unused = not any(base + 4 * k in slot_addrs for k in range(n))
                ax2.text(-0.2, row + 1.0, f"{s.name} group {g}: slots  {base:#010x}"
                         + (f"\n(and {hidden} more unused groups, not drawn)" if unused and hidden else ""),
                         ha="right", va="center", fontsize=7, family="monospace")
                ax2.text(-0.2, row + 2.85, f"literals  {base + cfg.plt_stride:#010x}", ha="right", va="center",
                         fontsize=7, family="monospace")
                row += 4.1
        ax2.set_xlim(-8, n + 0.2)
        ax2.set_ylim(row, -0.2)
        ax2.axis("off")
        ldr = f"ldr{'.w' if cfg.thumb2 else ''} pc, [pc, #{cfg.plt_stride - (4 if cfg.thumb2 else 8):#x}]"
        ax2.set_title(f"PLT groups: one {cfg.l1_cache_bytes}-byte cache line of {n} `{ldr}` slots, the next line holds "
                      f"their literals\n(orange: used, light orange: the fixed ftrace entries, grey: reserved "
                      f"but unused)", fontsize=8)
    fig.tight_layout()
    return fig


# --- 3. the branch map -----------------------------------------------------------------------
def branch_map(mod: LoadedModule, limit: int = 40):
    """The branch sites grouped by (symbol, veneer or direct, target): one row each with its
    count, types and places, an arrow straight to the target (green) or into its PLT veneer and
    on (orange). Direct arrows pass the veneer column in a free lane between the PLT boxes, so
    no direct branch looks routed through a veneer. `fig.armload` holds what was drawn (rows,
    boxes, the direct arrows' paths) for the tests."""
    import numpy as np
    from types import SimpleNamespace
    from matplotlib.path import Path
    from ..constants import reloc_name
    br = np.sort(mod.branches, order="place")
    n_sites = len(br)
    n_ven = int((br["plt"] != 0).sum()) if n_sites else 0
    # groups by (symbol, veneer, target), ordered by their first site; only the first `limit` built
    key = np.stack([br["sym"], br["plt"], br["target"] & np.uint32(0xFFFFFFFE)], axis=1) if n_sites else \
        np.zeros((0, 3), dtype=np.uint32)
    _, first, inverse = np.unique(key, axis=0, return_index=True, return_inverse=True)
    inverse = np.asarray(inverse).reshape(-1)
    order = np.argsort(first, kind="stable")
    n_rows = len(first)
    shown = []
    for g in order[:limit]:
        rows_g = br[inverse == g]
        bs = [SimpleNamespace(place=int(r["place"]), type_name=reloc_name(int(r["rtype"]))) for r in rows_g]
        sym = int(rows_g[0]["sym"])
        name = mod.sym_names[sym] if sym < len(mod.sym_names) else ""
        shown.append(((name, int(rows_g[0]["plt"]), int(rows_g[0]["target"]) & ~1), bs))
    targets = sorted({t for (_, _, t), _ in shown})
    veneers = sorted({v for (_, v, _), _ in shown if v})
    h = max(len(shown), len(targets), len(veneers), 3)

    def label(key, bs):
        places = ", ".join(f"{b.place:#010x}" for b in bs[:4]) + (f", ... +{len(bs) - 4}" if len(bs) > 4 else "")
        types = "/".join(sorted({b.type_name[6:] for b in bs}))
        return f"{key[0] or '?'} x{len(bs)} {types}: {places}"
    labels = [label(k, bs) for k, bs in shown]
    tlabels = {t: f"{t:#010x} {next(k[0] for k, _ in shown if k[2] == t)}" for t in targets}
    lw = max([len(x) for x in labels] + [20]) * 0.062          # inches of monospace text at 7 pt
    tw = max([len(x) for x in tlabels.values()] + [16]) * 0.062
    fig, ax = plt.subplots(figsize=(lw + tw + 3.2, 0.9 + 0.3 * h))

    def col_y(items, v):
        return (items.index(v) + 0.5) * h / len(items)
    half = 0.17
    boxes = [(col_y(veneers, v) - half, col_y(veneers, v) + half) for v in veneers]

    def lane(y0):
        """A y near y0 that passes the veneer column clear of every PLT box."""
        for k in range(0, 4 * int(h + 2)):
            for cand in (y0 + 0.1 * k, y0 - 0.1 * k):
                # clear of the box and of its address label just above it
                if -0.3 < cand < h + 0.1 and all(not (lo - 0.55 <= cand <= hi + 0.1) for lo, hi in boxes):
                    return cand
        return -0.3
    direct_paths = []
    for (key, bs), text in zip(shown, labels):
        sym, plt_addr, tgt = key
        y0 = col_y([k for k, _ in shown], key)
        ax.text(-0.05, y0, text, ha="right", va="center", fontsize=7, family="monospace")
        yt = col_y(targets, tgt)
        if plt_addr:
            yv = col_y(veneers, plt_addr)
            ax.add_patch(FancyArrowPatch((0, y0), (1, yv), arrowstyle="-|>", mutation_scale=8, color=VENEER, lw=1))
            ax.add_patch(FancyArrowPatch((1.3, yv), (2, yt), arrowstyle="-|>", mutation_scale=8, color=VENEER,
                                         lw=1, ls="--"))
        else:
            yl = lane(y0)
            pts = [(0, y0), (0.85, yl), (1.45, yl), (2, yt)]
            direct_paths.append(pts)
            ax.add_patch(FancyArrowPatch(path=Path(pts, [Path.MOVETO] + [Path.LINETO] * 3), arrowstyle="-|>",
                                         mutation_scale=8, color=DIRECT, lw=1))
    for v in veneers:
        e = mod.plt_entry_at(v)
        ax.add_patch(Rectangle((1, col_y(veneers, v) - half), 0.3, 2 * half, facecolor=PLT_COLOR, edgecolor="black",
                               lw=0.5, zorder=3))
        ax.text(1.15, col_y(veneers, v) - 0.22, f"{v:#010x} {'.init.plt' if e and e.plt == 'init' else '.plt'}",
                ha="center", va="bottom", fontsize=6.5, family="monospace", zorder=4,
                bbox=dict(boxstyle="square,pad=0.1", facecolor="white", edgecolor="none", alpha=0.85))
    for t in targets:
        ax.text(2.05, col_y(targets, t), tlabels[t], va="center", fontsize=7, family="monospace")
    ax.set_title(f"{mod.name}: {n_sites} branch sites, {n_sites - n_ven} direct (green), {n_ven} through a "
                 f"PLT veneer (orange); one row per symbol and route"
                 + (f"; first {limit} of {n_rows} rows shown" if n_rows > limit else ""))
    ax.text(-0.05, -0.35, "call sites (symbol x count, types: places)", ha="right", fontsize=8, weight="bold")
    ax.text(1.15, -0.35, "PLT veneer", ha="center", fontsize=8, weight="bold")
    ax.text(2.05, -0.35, "target", fontsize=8, weight="bold")
    unit = 1.0 / 1.1                          # data units per inch of the [-?, ?] x range below
    ax.set_xlim(-0.1 - lw * unit * 1.1, 2.05 + tw * unit * 1.1)
    ax.set_ylim(h + 0.2, -0.7)
    ax.axis("off")
    fig.armload = {"rows": [(k, [b.place for b in bs]) for k, bs in shown], "boxes": boxes,
                   "veneers": veneers, "targets": targets, "direct_paths": direct_paths}
    return fig


# --- 4. PLT counting rules: time and count versus relocations --------------------------------
RULE_STYLE = {"legacy_quadratic": ("legacy v4.0 count as written: O(n^2) scan", "#c92a2a", "o-"),
              "legacy": ("legacy count, same result hashed", "#f08c00", "s--"),
              "sorted": ("sorted (2016): sort + one pass", "#1971c2", "^-"),
              "v6": ("v6 (6.1): sort + one pass per core/init", "#2f9e44", "d-")}


def _size_ticks(ax, n):
    from matplotlib.ticker import NullFormatter
    ax.set_xticks(n, [f"{x:,}" for x in n])
    ax.xaxis.set_minor_formatter(NullFormatter())


def plt_bench_plot(res: dict):
    """res: armload.bench.plt.run() output. Log-log time per rule, and the counts."""
    rows = res["rows"]
    n = [r["relocations"] for r in rows]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 5.6))
    for key, (label, col, style) in RULE_STYLE.items():
        ys = [r["count_ms"].get(key) for r in rows]
        pts = [(x, y) for x, y in zip(n, ys) if y is not None]
        if pts:
            a1.plot(*zip(*pts), style, color=col, label=label, ms=4)
    if len(n) >= 2:
        q = [r["count_ms"]["legacy_quadratic"] for r in rows if r["count_ms"].get("legacy_quadratic") is not None]
        if q:
            x0, y0 = n[0], q[0]
            a1.plot(n, [y0 * (x / x0) ** 2 for x in n], ":", color="#c92a2a", lw=0.8, label="slope 2 (n^2) guide")
            a1.plot(n, [y0 * (x / x0) for x in n], ":", color="#868e96", lw=0.8, label="slope 1 (n) guide")
    if any("legacy_lookup_ms" in r for r in rows):
        a1.plot(n, [r["legacy_lookup_ms"] for r in rows], "v-.", color="#862e9c", ms=4,
                label="legacy v4.0 slot lookup during relocation (walks every entry)")
    a1.set_xscale("log")
    a1.set_yscale("log")
    _size_ticks(a1, n)
    a1.set_xlabel("relocations in .rel.text")
    a1.set_ylabel("time, ms (best of runs)")
    a1.set_title("time of the count (module_frob_arch_sections)\nand of the v4.0 slot lookup")
    a1.grid(True, which="both", lw=0.3)
    a1.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=1, frameon=False)
    for key, col, style, label in (("legacy", "#f08c00", "s-", "legacy (v4.0) core + init"),
                                   ("sorted", "#1971c2", "^-", "sorted (one .plt)"),
                                   ("v6", "#2f9e44", "d-", "v6 core + init (incl. fixed ftrace)")):
        a2.plot(n, [r["counts"][key] for r in rows], style, color=col, label=label, ms=4)
    a2.plot(n, [r["used"] for r in rows], "x:", color="black", label="entries actually used (v6, vmalloc)")
    a2.set_xscale("log")
    a2.set_yscale("log")
    _size_ticks(a2, n)
    a2.set_xlabel("relocations in .rel.text")
    a2.set_ylabel("PLT entries reserved")
    a2.set_title("entries each rule reserves")
    a2.grid(True, which="both", lw=0.3)
    a2.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=1, frameon=False)
    fig.suptitle(f"PLT counting rules on synthetic modules ({res.get('externals', '?')} external functions)",
                 fontsize=10)
    fig.tight_layout()
    return fig


# --- 5. counts per rule across a corpus ------------------------------------------------------
def corpus_counts_plot(records: list[dict], title: str = "corpus"):
    """records: [{"module", "relocations", "counts": {alg: {"core", "init"}}}] as `armload check
    --json` writes them (modules[*].plt.counts) or corpus_counts() computes them."""
    import numpy as np
    recs = [r for r in records if r.get("counts")]
    recs.sort(key=lambda r: (sum(r["counts"]["legacy"].values()), sum(r["counts"]["v6"].values())))
    tot = {alg: [sum(r["counts"][alg].values()) for r in recs] for alg in ("legacy", "sorted", "v6")}
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10.5, 4.4))
    x = np.arange(len(recs))
    same = tot["legacy"] == tot["sorted"]
    a1.plot(x, tot["legacy"], color="#f08c00", lw=3.2, alpha=0.6,
            label=f"legacy (v4.0): {sum(tot['legacy']):,} in all" + (" (= sorted on every module)" if same else ""))
    a1.plot(x, tot["sorted"], color="#1971c2", lw=1.2, label=f"sorted (2016): {sum(tot['sorted']):,} in all")
    a1.plot(x, tot["v6"], color="#2f9e44", lw=1.2, label=f"v6 (6.1): {sum(tot['v6']):,} in all")
    if max(max(v) for v in tot.values()) > 100:
        a1.set_yscale("log")
    a1.set_xlabel(f"{len(recs):,} modules, ordered by the legacy count")
    a1.set_ylabel("PLT entries reserved (core + init)")
    a1.set_title("entries reserved per module, per rule")
    a1.grid(True, which="both", lw=0.3)
    a1.legend(fontsize=7.5, loc="upper left")
    diffs = np.array(tot["v6"]) - np.array(tot["legacy"])
    lo, hi = int(diffs.min()), int(diffs.max())
    bins = np.arange(lo - 0.5, hi + 1.5) if hi - lo <= 60 else 60
    a2.hist(diffs, bins=bins, color="#2f9e44", edgecolor="black", lw=0.3)
    if hi - lo <= 60:
        a2.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    if len(recs) > 200:
        a2.set_yscale("log")
    else:
        a2.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    a2.set_xlabel("v6 total - legacy total, entries")
    a2.set_ylabel("modules")
    a2.set_title("v6 minus legacy (v4.0)\n(v6: +2 fixed ftrace entries in each PLT, per distinct target per "
                 "sorted exec table,\nnot symbols of the target section; v4.0: per distinct (r_info, word) "
                 "in every REL table)", fontsize=8)
    fig.suptitle(f"PLT counts per rule across {title}", fontsize=10)
    fig.tight_layout()
    return fig


def corpus_counts(paths: list[str], config: KernelConfig | None = None) -> list[dict]:
    """Counts under the three rules for each object, computed (no load)."""
    from ..loader.elf import read_object
    from ..errors import ArmloadError
    from ..loader.plt import plan_plts
    config = config or KernelConfig()
    out = []
    for p in paths:
        try:
            obj = read_object(p)
            plan = plan_plts(obj, config)
        except ArmloadError:
            continue
        out.append({"module": obj.name, "relocations": sum(len(r) for r in obj.rels.values()),
                    "counts": {k: {"core": v.core, "init": v.init} for k, v in plan.counts.items()}})
    return out


def records_from_check(doc: dict) -> list[dict]:
    return [{"module": m["module"], "relocations": m.get("relocations", 0), "counts": m["plt"]["counts"]}
            for m in doc.get("modules", []) if m.get("plt") and m["plt"].get("counts")]
