"""The HTML report in a real headless browser: Playwright driving Debian's chromium.

A missing chromium/playwright fails (`make test` installs chromium with `make browser`, and
playwright comes with the test extra); only a developer who opts out (ARMLOAD_OFFLINE=1, never
in CI) gets a skip."""
import os
import re
import shutil

import pytest

from armload.cli import main

from testinputs import OFFLINE, SYMVERS, sample

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _need(what: str):
    msg = f"{what} missing: run `make browser` (apt-get install chromium) and `make venv` (playwright)"
    if not OFFLINE:
        pytest.fail(msg + "; a developer without it may set ARMLOAD_OFFLINE=1 to skip", pytrace=False)
    pytest.skip(msg + " [ARMLOAD_OFFLINE=1]")


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _need("the playwright Python package")
    if not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)):
        _need(CHROMIUM)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    assert main(["report", sample("exporter-arm.ko"), sample("importer-arm.ko"), "--kernel", SYMVERS,
                 "--placement", "vmalloc", "--html", str(out)]) == 0
    return out


def _panel(page) -> str:
    """The explanation panel's text once the explanations (NAME.explain.js) have loaded."""
    page.wait_for_function("!document.getElementById('explain-panel').textContent.startsWith('loading')")
    return page.locator("#explain-panel").inner_text()


def _open(browser, path):
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: errors.append(f"network request {r.url}")
            if not r.url.startswith(("file:", "data:", "about:")) else None)
    page.goto("file://" + str(path))
    page.wait_for_load_state("load")
    return page, errors


@pytest.mark.parametrize("name", ["exporter", "importer"])
def test_page_loads_pictures_render_and_sites_explain(browser, report, name):
    page, errors = _open(browser, report / f"{name}.html")
    assert errors == []
    for fig in ("fig-address-space", "fig-layout", "fig-branches"):
        box = page.locator(f"#{fig} svg").bounding_box()
        assert box and box["width"] > 100 and box["height"] > 100, (fig, box)
    # Text inside the pictures really renders (fonttype none keeps it as SVG text).
    assert page.locator("#fig-branches svg text").count() > 5
    panel = page.locator("#explain-panel")
    assert not panel.is_visible()
    sites = page.locator("button.site")
    assert sites.count() >= 1
    for i in range(sites.count()):
        site = sites.nth(i)
        addr = site.inner_text().strip()
        site.click()
        assert panel.is_visible()
        text = _panel(page)
        assert f"P = {addr}" in text and "decision: " in text and "before:" in text and "after:" in text
        # Its "code" link leads to the instruction in the disassembly.
        target = page.locator(f"#insn-{int(addr, 16):x}")
        assert target.count() == 1 and addr[2:] in target.inner_text()
    # A relocation link in the disassembly opens the same kind of explanation.
    page.keyboard.press("Escape")
    assert not panel.is_visible()
    link = page.locator("pre.listing a.rel[data-explain]").first
    link.click()
    assert panel.is_visible() and "formula:" in _panel(page)
    assert errors == []
    page.close()


def test_veneer_sites_say_so(browser, report):
    page, errors = _open(browser, report / "importer.html")
    veneer = page.locator("tr:has(.veneer) button.site").first
    veneer.click()
    assert "decision: veneer" in _panel(page)
    direct = page.locator("tr:has(.direct) button.site").first     # armload_sample_add: the exporter is near
    direct.click()
    assert "decision: direct" in _panel(page)
    assert errors == []
    page.close()


def test_index_and_self_contained(report):
    idx = (report / "index.html").read_text()
    assert "exporter.html" in idx and "importer.html" in idx
    page = (report / "importer.html").read_text()
    # Nothing to fetch: no external scripts, styles or images (XML namespaces are only names).
    import re
    assert not re.search(r"""(src|href)=["']https?:""", page) and "<link" not in page and "<img" not in page
    assert page.count("<svg") == 3


def test_refused_load_page(tmp_path):
    from testinputs import obj
    assert main(["report", obj("interwork-arm-gcc12.o"), "--object", "--html", str(tmp_path)]) == 0
    page = (tmp_path / "interwork_arm_gcc12.html").read_text()
    assert "Load refused" in page and "unsupported interworking call (ARM -&gt; Thumb)" in page


def test_explanations_and_a_long_listing_load_on_demand(browser, tmp_path, monkeypatch):
    # issue 22: the page of a big module stays small: explanations in NAME.explain.js (loaded on the
    # first click), a long disassembly on NAME.disasm.html (here forced with a 10-line threshold)
    from armload.inspect import html_report
    monkeypatch.setattr(html_report, "INLINE_LISTING", 10)
    assert main(["report", sample("exporter-arm.ko"), sample("importer-arm.ko"), "--kernel", SYMVERS, "--placement", "vmalloc",
                 "--html", str(tmp_path)]) == 0
    page_text = (tmp_path / "importer.html").read_text()
    assert "<pre class='explanation'" not in page_text and "pre class='listing'" not in page_text
    js = (tmp_path / "importer.explain.js").read_text()
    assert js.startswith("window.armloadExplain=") and "decision: " in js
    page, errors = _open(browser, tmp_path / "importer.html")
    site = page.locator("button.site").first
    addr = site.inner_text().strip()
    site.click()
    assert f"P = {addr}" in _panel(page)
    page.keyboard.press("Escape")
    href = page.locator(f"#site-{int(addr, 16):x} ~ a").get_attribute("href")
    assert href == f"importer.disasm.html#insn-{int(addr, 16):x}"       # the listing's own page
    page.goto(f"file://{tmp_path}/{href}")
    assert page.locator(f"#insn-{int(addr, 16):x}").count() == 1
    page.locator("pre.listing a.rel[data-explain]").first.click()
    assert "formula:" in _panel(page)
    assert errors == []
    page.close()


def test_progress_on_stderr(tmp_path, capsys):
    assert main(["report", sample("exporter-arm.ko"), sample("importer-arm.ko"), "--kernel", SYMVERS,
                 "--html", str(tmp_path)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "report: [--------------------] 1/2 exporter-arm.ko: loading"
    assert "report: [##########----------] 2/2 importer: disassembly" in err
    assert err[-1] == "report: 2/2 modules done"


def test_big_module_caps(tmp_path, monkeypatch):
    # a seed-scale module's page: the first MAX_SITES sites (a per-symbol table for all), the
    # listing cut at MAX_LISTING lines, and only what a link points at explained
    import json
    from armload.inspect import html_report
    monkeypatch.setattr(html_report, "MAX_SITES", 2)
    monkeypatch.setattr(html_report, "MAX_LISTING", 5)
    monkeypatch.setattr(html_report, "INLINE_LISTING", 3)
    assert main(["report", sample("kalloc-arm.ko"), "--kernel", SYMVERS, "--placement", "vmalloc",
                 "--html", str(tmp_path)]) == 0
    page = (tmp_path / "kalloc.html").read_text()
    assert page.count("<button class='site'") == 2 and "9 sites: the first 2 by address are listed" in page
    listing = (tmp_path / "kalloc.disasm.html").read_text()
    assert listing.count("<span id='insn-") == 5 and "the listing stops after 5 lines" in listing
    js = (tmp_path / "kalloc.explain.js").read_text()
    explained = set(json.loads(js[len("window.armloadExplain="):].rstrip().rstrip(";")))
    linked = set(re.findall(r"data-explain='(rel-[\d-]+)'", page + listing))
    assert explained == linked and 0 < len(explained) < 9 + 5
