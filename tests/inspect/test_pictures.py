"""The pictures say what the load did: every address and name they print comes from the module,
the same input gives the same SVG, and PNG works on request."""
from armload.inspect import pictures
from armload.kernel.config import KernelConfig
from armload.kernel.provider import Kernel
from armload.loader.session import Session

from testinputs import SYMVERS, sample


def _load(ko, placement):
    cfg = KernelConfig()
    return cfg, Session(Kernel.from_files([SYMVERS], cfg), cfg, placement).load(sample(ko))


def test_address_space_marks_each_allocation_and_the_reach():
    cfg, m = _load("kalloc-arm.ko", 0xBE100000)
    svg = pictures.svg_text(pictures.address_space(cfg, [m], 0xBE100000))
    for r in m.regions:
        assert f"{r.base:#010x}" in svg
    # the band is drawn from the first call out of the module (.exit.text's `b _printk` at 0xbe100008):
    # ARM b/bl reach P + 8 - 32 MiB .. P + 8 + 32 MiB - 4
    site = min((b for b in m.branch_sites() if m.region_of(b.target & ~1) is None), key=lambda b: b.place)
    assert site.place == 0xBE100008 and site.symbol == "_printk"
    lo, hi = site.place + 8 - (1 << 25), site.place + 8 + (1 << 25) - 4
    assert f"reaches directly: {lo:#010x}..{hi:#010x}" in svg
    assert f"its target _printk {site.target:#010x} is OUTSIDE" in svg        # 16 bytes too far: the veneer
    assert f"_stext {cfg.kernel_text:#010x} (simulated kernel: no image)" in svg
    assert "1 branch sites: all through PLT veneers" in svg and "8 branch sites: all direct" in svg


def test_layout_and_branch_map_name_everything():
    cfg, m = _load("kalloc-arm.ko", "vmalloc")
    svg = pictures.svg_text(pictures.module_layout(m))
    for s in m.sections:
        if s.size and s.name != ".data..percpu":
            assert s.name in svg and f"{s.addr:#010x}" in svg
    for e in m.plt_entries:
        assert f"{e.target:08x}" in svg                 # every literal of every PLT group
    svg = pictures.svg_text(pictures.branch_map(m))
    for b in m.branch_sites():
        assert f"{b.place:#010x}" in svg and f"{b.plt:#010x}" in svg
    assert "9 branch sites, 0 direct (green), 9 through a PLT veneer" in svg


def test_address_space_uses_the_images_stext():
    import os
    from testinputs import BOOT_VMLINUZ, DEBIAN_SYMVERS, require_input
    from armload.inspect.html_report import kernel_stext
    require_input(BOOT_VMLINUZ, "make test-inputs")
    cfg = KernelConfig()
    k = Kernel.from_files([DEBIAN_SYMVERS, BOOT_VMLINUZ], cfg)
    m = Session(k, cfg, "window").load(sample("hello-arm.ko"))
    stext = kernel_stext(k)
    assert stext == k.symbols["_stext"].addr and stext != cfg.kernel_text
    svg = pictures.svg_text(pictures.address_space(cfg, [m], "window", stext))
    assert f"_stext {stext:#010x}<" in svg.replace("</text>", "<") and "simulated kernel" not in svg
    assert os.path.exists(BOOT_VMLINUZ)


def test_layout_plots_every_sections_address_and_size():
    cfg, m = _load("kalloc-arm.ko", "window")
    svg = pictures.svg_text(pictures.module_layout(m))
    for s in m.sections:
        if s.size and s.name != ".data..percpu":
            assert f"{s.addr:#010x} +{s.size:#x}" in svg


def test_branch_map_rows_are_the_loads_and_direct_branches_avoid_the_plt_boxes():
    # the lecture's boundary picture: 8 direct branches and one veneer
    cfg, m = _load("kalloc-arm.ko", 0xBE100000)
    fig = pictures.branch_map(m)
    drawn = fig.armload
    want = {}
    for b in sorted(m.branch_sites(), key=lambda b: b.place):
        want.setdefault((b.symbol, b.plt, b.target & ~1), []).append(b.place)
    assert dict(drawn["rows"]) == want
    assert drawn["veneers"] == sorted({b.plt for b in m.branch_sites() if b.plt}) and len(drawn["veneers"]) == 1
    assert len(drawn["direct_paths"]) == sum(1 for k in want if not k[1])
    for pts in drawn["direct_paths"]:
        for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
            if x1 < 1 or x0 > 1.3:
                continue                              # wholly left or right of the veneer column
            assert y0 == y1, "a direct arrow crosses the veneer column on a horizontal lane"
            for lo, hi in drawn["boxes"]:
                assert not lo <= y0 <= hi, (pts, lo, hi)
    svg = pictures.svg_text(fig)
    for t in drawn["targets"]:
        assert f"{t:#010x}" in svg


def test_svg_is_deterministic_and_png_on_request(tmp_path):
    cfg, m = _load("hello-arm.ko", "window")
    a = pictures.svg_text(pictures.branch_map(m))
    b = pictures.svg_text(pictures.branch_map(m))
    assert a == b
    p = tmp_path / "x.png"
    pictures.save(pictures.module_layout(m), str(p))
    assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plt_plots_from_bench_and_corpus_records():
    from armload.bench.plt import run
    res = run((100, 200), repeat=1)
    r = res["rows"]
    assert [x["relocations"] for x in r] == [100, 200]
    # The literal v4.0 scan and the hashed count agree; the three rules are all measured.
    assert all(x["counts"]["legacy_quadratic"] == x["counts"]["legacy"] for x in r)
    assert all(set(x["count_ms"]) == {"legacy_quadratic", "legacy", "sorted", "v6"} for x in r)
    svg = pictures.svg_text(pictures.plt_bench_plot(res))
    assert "O(n^2) scan" in svg and "slot lookup" in svg
    recs = pictures.corpus_counts([sample("hello-arm.ko"), sample("kalloc-arm.ko")])
    assert [x["module"] for x in recs] == ["hello", "kalloc"]
    svg = pictures.svg_text(pictures.corpus_counts_plot(recs, "two"))
    assert "across two" in svg
    # From `armload check --json`: modules that failed before counting (no plt.counts) are left out.
    doc = {"modules": [{"module": "x", "plt": {}},
                       {"module": "y", "relocations": 9, "plt": {"counts": recs[0]["counts"]}}]}
    assert pictures.records_from_check(doc) == [{"module": "y", "relocations": 9, "counts": recs[0]["counts"]}]
