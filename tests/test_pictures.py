"""The pictures say what the load did: every address and name they print comes from the module,
the same input gives the same SVG, and PNG works on request."""
from armload.inspect import pictures
from armload.kernel.config import KernelConfig
from armload.kernel.provider import Kernel
from armload.loader.session import Session

from conftest import SYMVERS, sample


def _load(ko, placement):
    cfg = KernelConfig()
    return cfg, Session(Kernel.from_files([SYMVERS], cfg), cfg, placement).load(sample(ko))


def test_address_space_marks_each_allocation_and_the_reach():
    cfg, m = _load("kalloc-arm.ko", 0xBE100000)
    svg = pictures.svg_text(pictures.address_space(cfg, [m], 0xBE100000))
    for r in m.regions:
        assert f"{r.base:#010x}" in svg
    assert "±32 MiB from _stext: 0xbe008000..0xc2008000" in svg
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
