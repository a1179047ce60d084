"""`armload report --html DIR`: one self-contained HTML page per load (inline SVG pictures, CSS
and a few lines of JavaScript; nothing fetched), with the memory map, sections, relocation and
PLT tables, why the PLT numbers differ, every PLT entry, every branch site with its explanation
one click away, and the disassembly linked to the relocations applied in it."""
from __future__ import annotations

import html
import json
import os
import re

from ..loader.plt import counted_relocations
from . import pictures
from .disasm import disassemble
from .explain import explain_row, format_explanation
from .report import plt_notes, plt_usage, to_dict

MAX_EXPLAINED = 5000          # beyond this many relocations only branch sites are explained
MAX_SITES = 2000              # branch sites listed (a per-symbol table summarises the rest)
MAX_LISTING = 30000           # disassembly lines written

CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1100px;color:#222;line-height:1.35}
h1{font-size:1.5em}h2{font-size:1.15em;border-bottom:1px solid #ccc;margin-top:1.6em}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}
td,th{border:1px solid #ddd;padding:2px 6px;text-align:left}th{background:#f3f3f3}
td.num{text-align:right;font-variant-numeric:tabular-nums}
code,pre,.mono{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.85em}
pre.explanation{background:#fff8e6;border:1px solid #e8c66a;padding:.6em;white-space:pre-wrap}
pre.listing{background:#fafafa;border:1px solid #eee;padding:.6em;overflow-x:auto;line-height:1.25}
.figure svg{max-width:100%;height:auto;display:block;margin:.5em 0}
button.site{font-family:ui-monospace,monospace;font-size:.95em;cursor:pointer}
.veneer{color:#d9480f}.direct{color:#2b8a3e}.refused{color:#c92a2a;font-weight:bold}
ul.notes li{margin:.25em 0}
a.rel{color:#1864ab}
#explain-panel{position:fixed;right:8px;bottom:8px;width:min(640px,60vw);max-height:50vh;overflow:auto;
  margin:0;box-shadow:0 2px 10px rgba(0,0,0,.25);z-index:10}

"""

JS = """
function panelText(id,text){
  var holder=document.getElementById('explain-panel');
  holder.textContent=text;
  holder.hidden=false;
  holder.dataset.showing=id;
}
function showExplanation(id){
  var el=document.getElementById(id);
  if(el){panelText(id,el.textContent);return;}
  var src=document.body.dataset.explain;
  if(!src){return;}
  if(window.armloadExplain){panelText(id,window.armloadExplain[id]||('no explanation for '+id));return;}
  panelText(id,'loading the explanations ('+src+') ...');
  var s=document.createElement('script');
  s.src=src;
  s.onload=function(){showExplanation(id);};
  s.onerror=function(){panelText(id,'cannot load '+src+' (it is written next to this page)');};
  document.head.appendChild(s);
}
function hideExplanation(){document.getElementById('explain-panel').hidden=true;}
document.addEventListener('keydown',function(ev){if(ev.key==='Escape'){hideExplanation();}});
document.addEventListener('click',function(ev){
  var b=ev.target.closest('[data-explain]');
  if(!b){
    if(!ev.target.closest('#explain-panel')){hideExplanation();}
    return;
  }
  ev.preventDefault();
  showExplanation(b.dataset.explain);
});
"""


def _e(s) -> str:
    return html.escape(str(s))


def _svg(fig, prefix: str) -> str:
    """Inline SVG with its ids made unique on the page (several figures share matplotlib's ids)."""
    s = pictures.svg_text(fig)
    ids = set(re.findall(r'id="([^"]+)"', s))
    for i in sorted(ids, key=len, reverse=True):
        s = s.replace(f'id="{i}"', f'id="{prefix}-{i}"').replace(f'#{i})', f'#{prefix}-{i})') \
             .replace(f'href="#{i}"', f'href="#{prefix}-{i}"')
    return s


def _table(head: list[str], rows: list[list], num: set[int] = frozenset(), cls: str = "") -> str:
    out = [f'<table class="{cls}"><tr>' + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"]
    for r in rows:
        out.append("<tr>" + "".join(f'<td class="num">{c}</td>' if i in num else f"<td>{c}</td>"
                                    for i, c in enumerate(r)) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def rel_id(row) -> str:
    return f"rel-{row.relsec}-{row.index}"


def kernel_stext(kernel) -> int | None:
    """The kernel's _stext from kallsyms (a real image or map); None for a simulated kernel."""
    sym = getattr(kernel, "symbols", {}).get("_stext")
    return getattr(sym, "addr", None) if sym is not None and not getattr(kernel, "default", False) else None


def figures(ctx, placement, modules_so_far, stext: int | None = None) -> dict:
    """name -> matplotlib Figure for one load (the same pictures the page inlines)."""
    out = {"address-space": pictures.address_space(ctx.config, modules_so_far, placement, stext),
           "layout": pictures.module_layout(ctx.mod)}
    if len(ctx.mod.branches):
        out["branches"] = pictures.branch_map(ctx.mod)
    return out


INLINE_LISTING = 4000          # instructions: a longer disassembly goes to NAME.disasm.html


def render(ctx, session, placement, modules_so_far, progress=None) -> tuple[str, dict[str, str]]:
    """The page for one load (ctx: explain.Context of that module) and the files it loads on
    demand beside it: NAME.explain.js (every explanation, fetched on the first click) and, for a
    long listing, NAME.disasm.html."""
    mod, obj, cfg = ctx.mod, ctx.obj, ctx.config
    step = progress or (lambda what: None)
    extra: dict[str, str] = {}
    title = f"armload report: {obj.name}"
    explain_js = f"{obj.name}.explain.js"
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{_e(title)}</title>"
             f"<style>{CSS}</style></head><body data-explain='{_e(explain_js)}'>", f"<h1>{_e(title)}</h1>",
             f"<p class='mono'>{_e(obj.path)}<br>kernel: {_e(session.kernel.describe())}<br>"
             f"config: {'Thumb-2' if cfg.thumb2 else 'ARM'} kernel, L1 {cfg.l1_cache_bytes} B, ftrace "
             f"{'on' if cfg.dynamic_ftrace else 'off'}, PLT rules {cfg.plt_algorithm}, layout {cfg.layout}, "
             f"placement {_e(placement if isinstance(placement, str) else hex(placement))}</p>",
             "<pre id='explain-panel' class='explanation' title='Esc or a click elsewhere closes it' hidden></pre>"]
    rows = [r for r in ctx.rows if r.applied]
    branch_rows = [r for r in rows if r.type_name in ("R_ARM_CALL", "R_ARM_JUMP24", "R_ARM_PC24",
                                                      "R_ARM_THM_CALL", "R_ARM_THM_JUMP24")]
    to_explain = rows if len(rows) <= MAX_EXPLAINED else branch_rows
    explainable = {rel_id(r): r for r in to_explain}
    shown: set[str] = set()                  # the ids a link on the pages points at: explained at the end
    if mod is None:
        exs = {rid: explain_row(r, obj, mod, ctx.syms, cfg, ctx.error) for rid, r in explainable.items()}
        parts.append(f"<h2>Load refused</h2><p class='refused'>{_e(ctx.error)}</p>")
        bad = [e for e in exs.values() if e.decision == "refused"]
        for e in bad[:20]:
            parts.append(f"<pre class='explanation' id='{rel_id(e.row)}'>{_e(format_explanation(e))}</pre>")
        parts.append("</body></html>")
        return "\n".join(parts), extra
    d = to_dict(mod, session.kernel.describe(), placement)
    # Pictures.
    step("pictures")
    parts.append("<h2>Pictures</h2>")
    for name, fig in figures(ctx, placement, modules_so_far, kernel_stext(session.kernel)).items():
        parts.append(f"<div class='figure' id='fig-{name}'>" + _svg(fig, name) + "</div>")
    # Memory and sections.
    parts.append("<h2>Memory</h2>")
    parts.append(_table(["region", "start", "end", "size"],
                        [[_e(r.name), f"<span class=mono>{r.base:#010x}</span>", f"<span class=mono>{r.end:#010x}</span>",
                          f"{r.size:#x}"] for r in mod.regions], {3}))
    parts.append(_table(["section", "class", "address", "size"],
                        [[_e(s.name), _e(s.mem), f"<span class=mono>{s.addr:#010x}</span>", f"{s.size:#x}"]
                         for s in mod.sections if s.size], {3}))
    # Relocations and PLT counts.
    parts.append("<h2>Relocations and PLT counts</h2>")
    parts.append(_table(["relocation type", "applied"],
                        [[_e(k), v] for k, v in sorted(mod.reloc_counts.items(), key=lambda kv: -kv[1])], {1}))
    parts.append(_table(["PLT counting rules", "core", "init", "total"],
                        [[_e(a) + (" (in use)" if a == cfg.plt_algorithm else ""), c.core, c.init, c.total]
                         for a, c in mod.plt_counts.items()], {1, 2, 3}))
    u = plt_usage(mod)
    parts.append(f"<p>PLT entries used: core {u['core_used']} (.plt {u['core_size']} bytes), init "
                 f"{u['init_used']} (.init.plt {u['init_size']} bytes); branch sites: {d['branches']['sites']} "
                 f"({d['branches']['direct']} direct, {d['branches']['via_plt']} through PLT veneers)</p>")
    counted = counted_relocations(obj, cfg)
    parts.append("<h3>Why the numbers differ</h3><ul class='notes'>" +
                 "".join(f"<li>{_e(n)}</li>" for n in plt_notes(mod, counted, limit=None)) + "</ul>")
    # PLT entries.
    parts.append("<h2>PLT entries</h2>")
    users: dict[int, list] = {}
    for b in mod.branch_sites():
        if b.plt:
            users.setdefault(b.plt, []).append(b)
    prow = []
    for e in mod.plt_entries:
        sec = next((s for s in mod.sections if s.name == (".init.plt" if e.plt == "init" else ".plt")), None)
        g = (e.addr - sec.addr) // (2 * cfg.plt_stride) if sec else "?"
        us = users.get(e.addr, [])
        prow.append([f"<span class=mono id='plt-{e.addr:x}'>{e.addr:#010x}</span>", _e(sec.name if sec else e.plt), g,
                     _e(e.symbol or ""), f"<span class=mono>{e.target:#010x}</span>",
                     "fixed (ftrace)" if e.fixed else "", len(us)])
    parts.append(_table(["slot", "section", "group", "symbol", "literal (target)", "", "branch sites"], prow, {2, 6}))
    # Branch sites.
    sites = sorted(mod.branch_sites(), key=lambda b: b.place)
    parts.append("<h2>Branch sites</h2><p>Click a site to see how its relocation was applied.</p>")
    if len(sites) > MAX_SITES:
        parts.append(f"<p>{len(sites):,} sites: the first {MAX_SITES:,} by address are listed (and explained); "
                     f"<code>armload explain MODULE --site ADDR</code> explains any other. Per symbol:</p>")
        per: dict[str, list[int]] = {}
        for b in sites:
            c = per.setdefault(b.symbol, [0, 0])
            c[1 if b.plt else 0] += 1
        top = sorted(per.items(), key=lambda kv: -sum(kv[1]))[:MAX_SITES]
        parts.append(_table(["symbol", "direct", "through a veneer"], [[_e(k), a, v] for k, (a, v) in top], {1, 2}))
    by_place = {(r.target_section, r.place): r for r in branch_rows}
    brow = []
    for b in sites[:MAX_SITES]:
        r = by_place.get((b.section, b.place))
        rid = rel_id(r) if r is not None and rel_id(r) in explainable else ""
        if rid:
            shown.add(rid)
        how = (f"<span class=veneer>veneer {b.plt:#010x}</span>" if b.plt else "<span class=direct>direct</span>")
        brow.append([f"<button class='site' id='site-{b.place:x}' data-explain='{rid}'>{b.place:#010x}</button> "
                     f"<a href='#insn-{b.place:x}' title='the instruction in the disassembly'>code</a>",
                     _e(b.section_name), _e(b.type_name), _e(b.symbol), f"<span class=mono>{b.target:#010x}</span>",
                     how])
    parts.append(_table(["site", "section", "type", "symbol", "target", "decision"], brow))
    # Disassembly linked to the relocations.
    step("disassembly")
    at: dict[int, list] = {}
    for r in rows:
        at.setdefault(r.place, []).append(r)
    listing = disassemble(mod, session.kernel, relocs=ctx.rows, max_lines=MAX_LISTING + 1)
    n_insns = sum(len(lines) for _, lines in listing)
    budget = MAX_LISTING
    inline = n_insns <= INLINE_LISTING
    disasm_page = f"{obj.name}.disasm.html"
    if not inline:
        parts.append(f"<h2>Disassembly</h2><p>{min(n_insns, MAX_LISTING):,}{'+' if n_insns > MAX_LISTING else ''} lines: on their own page, "
                     f"<a href='{_e(disasm_page)}'>{_e(disasm_page)}</a> (the sites' <em>code</em> links go there).</p>")
        parts[:] = [p.replace("href='#insn-", f"href='{disasm_page}#insn-") for p in parts]
        dparts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{_e(title)}: disassembly"
                  f"</title><style>{CSS}</style></head><body data-explain='{_e(explain_js)}'>",
                  f"<h1>{_e(obj.name)}: disassembly</h1><p><a href='{_e(obj.name)}.html'>back to the report</a></p>",
                  "<pre id='explain-panel' class='explanation' hidden></pre>"]
    else:
        parts.append("<h2>Disassembly</h2>")
        dparts = parts
    for header, lines in listing:
        out = []
        if budget <= 0:
            dparts.append(f"<h3>{_e(header)}</h3><p>not listed: the listing stops after {MAX_LISTING:,} lines "
                          f"(<code>armload disasm MODULE</code> prints all of it)</p>")
            continue
        lines = lines[:budget]
        budget -= len(lines)
        for ln in lines:
            text = ln.format().split("\n")
            # The instruction line (after any source lines), then one link per relocation.
            head = [t for t in text if not t.startswith("\t\t\t")]
            out.extend(_e(t) for t in head[:-1])
            out.append(f"<span id='insn-{ln.addr:x}'>{_e(head[-1])}</span>" if head else "")
            for r in (x for a in range(ln.addr, ln.addr + max(len(ln.raw), 1)) for x in at.get(a, ())):
                rid = rel_id(r)
                if rid in explainable:
                    shown.add(rid)
                link = f"<a class='rel' href='#{rid}' data-explain='{rid}'>" if rid in explainable else "<a class='rel'>"
                out.append(f"\t\t\t{r.place:x}: {link}{_e(r.type_name)}\t{_e(r.sym_name)}</a>")
        dparts.append(f"<h3>{_e(header)}</h3><pre class='listing'>" + "\n".join(out) + "</pre>")
    if not inline:
        dparts.append(f"<script>{JS}</script></body></html>")
        extra[disasm_page] = "\n".join(dparts)
    # Every explanation a link points at, in a script loaded on the first click (the page stays small).
    step(f"explaining {len(shown):,} relocations")
    exs = {rid: explain_row(explainable[rid], obj, mod, ctx.syms, cfg, ctx.error) for rid in sorted(shown)}
    step("writing")
    parts.append("<h2>Relocation explanations</h2>")
    parts.append(f"<p>{len(exs):,} explanations, loaded from <code>{_e(explain_js)}</code> when a site or "
                 f"relocation is first clicked.</p>")
    if len(to_explain) < len(rows):
        parts.append(f"<p>{len(rows):,} relocations: only the {len(branch_rows):,} branch sites are explained "
                     f"here (armload explain shows any other).</p>")
    extra[explain_js] = ("window.armloadExplain=" + json.dumps({rid: format_explanation(e) for rid, e in exs.items()},
                                                               separators=(",", ":")) + ";\n")
    parts.append(f"<script>{JS}</script></body></html>")
    return "\n".join(parts), extra


def write_report(session, paths: list[str], outdir: str, picture_formats: tuple[str, ...] = (),
                 corpus: list[dict] | None = None, corpus_title: str = "corpus", *,
                 object: bool = False, progress=None) -> list[str]:
    """Load `paths` in order into `session`; write DIR/NAME.html per module and DIR/index.html.
    picture_formats ("svg", "png"): also write each picture as DIR/NAME-PICTURE.EXT. corpus:
    records for the PLT-counts-per-rule plot (pictures.records_from_check/corpus_counts).
    progress(i, n, module, stage): called as each module's stages start (the CLI's progress bar)."""
    from .explain import context_for
    os.makedirs(outdir, exist_ok=True)
    written, loaded = [], []
    tell = progress or (lambda i, n, name, what: None)
    for i, p in enumerate(paths):
        tell(i, len(paths), os.path.basename(p), "loading")
        ctx = context_for(session, p, object=object)
        if ctx.mod is not None:
            loaded.append(ctx.mod)
        page, extra = render(ctx, session, session.placement, list(loaded),
                             progress=lambda what, i=i, n=ctx.obj.name: tell(i, len(paths), n, what))
        if ctx.mod is not None:
            for ext in picture_formats:
                for name, fig in figures(ctx, session.placement, list(loaded), kernel_stext(session.kernel)).items():
                    f = os.path.join(outdir, f"{ctx.obj.name}-{name}.{ext}")
                    pictures.save(fig, f)
                    written.append(f)
        out = os.path.join(outdir, f"{ctx.obj.name}.html")
        with open(out, "w", encoding="utf-8") as f:
            f.write(page)
        written.append(out)
        for fname, text in extra.items():
            with open(os.path.join(outdir, fname), "w", encoding="utf-8") as f:
                f.write(text)
            written.append(os.path.join(outdir, fname))
        if ctx.mod is None:
            break                     # the kernel stops here too: later modules are not loaded
    tell(len(paths), len(paths), "", "done")
    if corpus:
        out = os.path.join(outdir, "corpus-plt-counts.html")
        fig = pictures.corpus_counts_plot(corpus, corpus_title)
        for ext in picture_formats:
            f = os.path.join(outdir, f"corpus-plt-counts.{ext}")
            pictures.save(pictures.corpus_counts_plot(corpus, corpus_title), f)
            written.append(f)
        with open(out, "w", encoding="utf-8") as f:
            f.write("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>PLT counts per rule</title>"
                    f"<style>{CSS}</style></head><body><h1>PLT counts per rule: {_e(corpus_title)}</h1>"
                    f"<div class='figure' id='fig-corpus'>{_svg(fig, 'corpus')}</div></body></html>")
        written.insert(0, out)
    index = os.path.join(outdir, "index.html")
    with open(index, "w", encoding="utf-8") as f:
        f.write("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>armload report</title>"
                f"<style>{CSS}</style></head><body><h1>armload report</h1><ol>"
                + "".join(f"<li><a href='{_e(os.path.basename(w))}'>{_e(os.path.basename(w)[:-5])}</a></li>"
                          for w in written if w.endswith(".html") and not w.endswith(".disasm.html"))
                + "</ol></body></html>")
    return written + [index]
