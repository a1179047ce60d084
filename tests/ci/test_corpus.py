"""`armload check` over module trees, and the regression suite on Debian's 3,491 armhf modules.

Three groups:
* unit tests of the scanner and the dependency ordering (no corpus needed);
* small temporary trees built from a few real Debian modules, including corrupted copies
  (they fail when .cache lacks the corpus: run `make corpus`);
* the regression assertions over a full `armload check --json` result (`make regress` sets
  ARMLOAD_CORPUS_JSON; deselected otherwise), plus an independent recount of PLTs.
"""
from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys

import pytest

from armload.kernel.modtree import ModuleInfo, plan_order, read_modinfo, scan_tree
from oracles.module_plts import kernel_plt_counts
from testinputs import CACHE, ROOT

KREL = "6.1.0-50-armmp"
CORPUS = os.path.join(CACHE, f"linux-image-{KREL}", "lib", "modules", KREL, "kernel")
SYMVERS = os.path.join(CACHE, f"linux-headers-{KREL}", "usr", "src", f"linux-headers-{KREL}", "Module.symvers")
VMLINUZ = os.path.join(CACHE, f"linux-image-{KREL}", "boot", f"vmlinuz-{KREL}")
BASELINE = os.path.join(ROOT, "tests", "corpus_baseline.json")

needs_corpus = pytest.mark.inputs(CORPUS, SYMVERS, how="Debian armhf corpus: make corpus")   # fails without it


def _m(name, *deps):
    return ModuleInfo(f"/x/{name}.ko", name, list(deps), None, 100)


# --------------------------------------------------------------------------------------------
# Ordering (no corpus needed)
# --------------------------------------------------------------------------------------------
def test_order_puts_dependencies_first():
    plan = plan_order([_m("c", "b"), _m("b", "a"), _m("a"), _m("d", "a", "c")])
    pos = {n: i for i, n in enumerate(plan.order)}
    assert pos["a"] < pos["b"] < pos["c"] < pos["d"]
    assert plan.closure["d"] == ["a", "b", "c"]
    assert plan.closure["a"] == []
    assert not plan.blocked


def test_missing_dependency_and_dependents_blocked():
    plan = plan_order([_m("a", "ghost"), _m("b", "a"), _m("c")])
    assert "ghost" in plan.blocked["a"] and "not found" in plan.blocked["a"]
    assert plan.blocked["b"].startswith("skipped: dependency a")
    assert "c" not in plan.blocked


def test_cycle_detected():
    plan = plan_order([_m("a", "b"), _m("b", "a"), _m("c", "a"), _m("d")])
    assert "dependency cycle" in plan.blocked["a"]
    assert "a -> b -> a" in plan.blocked["a"] or "b -> a -> b" in plan.blocked["b"]
    assert "c" in plan.blocked and "d" not in plan.blocked
    assert set(plan.order) == {"a", "b", "c", "d"}


def test_read_modinfo_of_sample():
    info, err = read_modinfo(os.path.join(ROOT, "sample_modules", "importer-arm.ko"))
    assert err is None
    assert info["name"] == ["importer"]
    assert "exporter" in info["depends"][0].split(",")
    assert info["vermagic"][0].startswith("6.1.0-50-armmp")


def test_read_modinfo_of_garbage(tmp_path):
    p = tmp_path / "junk.ko"
    p.write_bytes(b"\x7fELF" + b"\0" * 20)
    info, err = read_modinfo(str(p))
    assert info == {} and err


def test_progress_plain_lines():
    import io
    from armload.commands.check import Progress
    buf = io.StringIO()
    pr = Progress(buf, every=0.0)
    pr(0, 2, 0, None)
    pr(2, 2, 1, None)
    out = buf.getvalue().splitlines()
    assert out[-1].startswith("check: 2/2 modules (100%), 1 failed")
    assert "\r" not in buf.getvalue()


# --------------------------------------------------------------------------------------------
# Small trees of real modules (corpus needed)
# --------------------------------------------------------------------------------------------
TREE = {"netfs": "fs/netfs/netfs.ko", "fscache": "fs/fscache/fscache.ko", "9pnet": "net/9p/9pnet.ko",
        "9p": "fs/9p/9p.ko", "9pnet_fd": "net/9p/9pnet_fd.ko"}


def _tree(tmp_path, corrupt=None):
    root = tmp_path / "tree"
    for name, rel in TREE.items():
        dst = root / os.path.dirname(rel)
        dst.mkdir(parents=True, exist_ok=True)
        shutil.copy(os.path.join(CORPUS, rel), dst)
    if corrupt:
        corrupt(root)
    return root


def _check(root, *extra):
    from armload.cli import main
    out = str(root.parent / "check.json")
    rc = main(["check", str(root), "--kernel", SYMVERS, "--jobs", "2", "--json", out, "-q", *extra])
    with open(out) as f:
        doc = json.load(f)
    return rc, {r["name"]: r for r in doc["modules"]}, doc


def _truncate(root, name="9pnet", keep=5000):
    p = root / TREE[name]
    data = p.read_bytes()
    p.write_bytes(data[:keep])


def _bad_symbol_index(root, name="netfs"):
    """Point the first relocation of .rel.text past the end of the symbol table."""
    from elftools.elf.elffile import ELFFile
    p = root / TREE[name]
    data = bytearray(p.read_bytes())
    with open(p, "rb") as f:
        elf = ELFFile(f)
        symcount = elf.get_section_by_name(".symtab").num_symbols()
        rel = elf.get_section_by_name(".rel.text")
        off = rel["sh_offset"]
    r_off, r_info = struct.unpack_from("<II", data, off)
    struct.pack_into("<II", data, off, r_off, ((symcount + 1000) << 8) | (r_info & 0xFF))
    p.write_bytes(bytes(data))


@needs_corpus
def test_small_tree_all_ok(tmp_path):
    rc, recs, doc = _check(_tree(tmp_path))
    assert rc == 0, [r["reason"] for r in recs.values() if r["outcome"] != "ok"]
    assert set(recs) == set(TREE)
    order = [r["name"] for r in doc["modules"]]
    assert order.index("9pnet") < order.index("9p") and order.index("netfs") < order.index("fscache")
    assert [r["module"] for r in doc["modules"]] == [TREE[n] for n in order]    # named by path in the tree
    r = recs["9p"]
    assert r["verify"]["ok"]
    assert set(r["symbols"]["from_modules"]) == {"9pnet", "fscache", "netfs"}
    assert "p9_client_create" in r["symbols"]["from_modules"]["9pnet"]
    assert r["symbols"]["crc_checked"] == r["symbols"]["undefined"]
    # Without the kernel image init is not run (it runs only inside the booted kernel), and check says so.
    assert all("init" not in r for r in recs.values())
    assert doc["options"]["emulate"] is False and "no kernel image" in doc["options"]["init_not_run"]
    assert doc["summary"]["loaded"] == 5 and doc["summary"]["outcomes"]["ok"] == 5


@needs_corpus
def test_closure_reuse_gives_fresh_session_addresses(tmp_path):
    """Each module's addresses equal those of a fresh Session loaded with its closure alone."""
    from armload.kernel.config import DEBIAN_ARMMP
    from armload.kernel.provider import Kernel
    from armload.loader.session import Session
    root = _tree(tmp_path)
    rc, recs, doc = _check(root, "--no-emulate", "--no-verify", "--jobs", "1")
    plan = plan_order(scan_tree(str(root)))
    kernel = Kernel.from_files([SYMVERS], DEBIAN_ARMMP)
    for name in TREE:
        s = Session(kernel, DEBIAN_ARMMP)
        for d in plan.closure[name]:
            s.load(plan.modules[d].path)
        m = s.load(plan.modules[name].path)
        assert {r.name: r.base for r in m.regions} == {k: v for k, v in recs[name]["regions"].items()}, name


@needs_corpus
def test_truncated_module_fails_and_dependents_skipped(tmp_path):
    rc, recs, doc = _check(_tree(tmp_path, _truncate))
    assert rc != 0
    bad = recs["9pnet"]
    assert bad["outcome"] == "load" and bad["stage"] == "load"
    assert bad["error"]["error"] == "ElfFormatError"
    assert "9pnet.ko" in bad["error"]["message"]
    for dep in ("9p", "9pnet_fd"):
        assert recs[dep]["outcome"] == "dependency-failed"
        assert recs[dep]["dependency"] == {"name": "9pnet", "module": "net/9p/9pnet.ko", "outcome": "load"}
        assert "9pnet" in recs[dep]["reason"]
    assert recs["netfs"]["outcome"] == "ok" and recs["fscache"]["outcome"] == "ok"
    assert doc["summary"]["outcomes"]["load"] == 1 and doc["summary"]["outcomes"]["dependency-failed"] == 2


@needs_corpus
def test_bad_symbol_index_fails_and_dependents_skipped(tmp_path):
    rc, recs, doc = _check(_tree(tmp_path, _bad_symbol_index), "--no-emulate")
    assert rc != 0
    bad = recs["netfs"]
    assert bad["outcome"] == "load"
    assert "netfs" in bad["error"]["message"] and "sym" in bad["error"]["message"]
    assert bad["error"]["errno_name"] == "ENOEXEC"
    assert recs["fscache"]["outcome"] == "dependency-failed" and recs["fscache"]["dependency"]["name"] == "netfs"
    assert recs["9p"]["outcome"] == "dependency-failed"
    assert recs["9pnet"]["outcome"] == "ok" and recs["9pnet_fd"]["outcome"] == "ok"


@needs_corpus
def test_cli_text_report(tmp_path):
    root = _tree(tmp_path, _truncate)
    p = subprocess.run([sys.executable, "-m", "armload", "check", str(root), "--kernel", SYMVERS,
                        "--jobs", "1", "--no-emulate"], capture_output=True, text=True)
    assert p.returncode == 1
    assert "modules that did not succeed (3), by outcome:" in p.stdout
    assert "\nload (1, in --fail-on):\n  net/9p/9pnet.ko: " in p.stdout
    assert "\ndependency-failed (2):\n  net/9p/9pnet_fd.ko: dependency 9pnet" in p.stdout
    assert "\n  fs/9p/9p.ko: dependency 9pnet (net/9p/9pnet.ko) failed to load: 9pnet.ko: Invalid ELF" in p.stdout
    assert "check: 5/5 modules (100%), 3 failed" in p.stderr      # not a TTY: plain lines


# --------------------------------------------------------------------------------------------
# An independent PLT count: the literal port of arch/arm/kernel/module-plts.c (v6.1) and lib/sort.c
# in tests/oracles/, over relocations read with pyelftools. Deliberately shares no code with armload.
# --------------------------------------------------------------------------------------------
def _plt_sample():
    paths = sorted(m.path for m in scan_tree(CORPUS))
    sample = paths[::97]
    for big in ("fs/btrfs/btrfs.ko", "fs/xfs/xfs.ko"):
        p = os.path.join(CORPUS, big)
        if os.path.exists(p) and p not in sample:
            sample.append(p)
    return sample


@needs_corpus
def test_plt_counts_equal_literal_kernel_port():
    """armload's v6 count equals the literal port on a sample of real modules (~40)."""
    from armload.kernel.config import DEBIAN_ARMMP
    from armload.loader.elf import read_object
    from armload.loader.plt import plan_plts
    bad = []
    sample = _plt_sample()
    for p in sample:
        want = kernel_plt_counts(p)
        c = plan_plts(read_object(p), DEBIAN_ARMMP).counts["v6"]
        if (c.core, c.init) != want:
            bad.append((os.path.relpath(p, CORPUS), (c.core, c.init), want))
    assert not bad, f"armload v6 PLT counts differ from the kernel's algorithm: {bad}"
    assert len(sample) >= 30


# --------------------------------------------------------------------------------------------
# Regression assertions over a full `armload check --json` result (make regress)
# --------------------------------------------------------------------------------------------
RESULTS = {"window": os.environ.get("ARMLOAD_CORPUS_JSON"),
           "vmalloc": os.environ.get("ARMLOAD_CORPUS_JSON_VMALLOC")}
_loaded: dict = {}


def _result_param(placement):
    return pytest.param(placement, marks=pytest.mark.regress_result)   # deselected outside make regress


needs_result = pytest.mark.parametrize("result", [_result_param("window"), _result_param("vmalloc")],
                                       indirect=True)
needs_window_result = pytest.mark.parametrize("result", [_result_param("window")], indirect=True)


@pytest.fixture
def result(request):
    path = RESULTS[request.param]
    if not (path and os.path.exists(path)):
        pytest.fail(f"no corpus check result for the {request.param} placement: {path!r} (make regress sets "
                    f"ARMLOAD_CORPUS_JSON{'' if request.param == 'window' else '_VMALLOC'})", pytrace=False)
    if path not in _loaded:
        with open(path) as f:
            _loaded[path] = json.load(f)
    return _loaded[path]


@pytest.fixture(scope="module")
def baseline_passes():
    from armload.ci.baseline import load
    return load(BASELINE)


@pytest.fixture
def baseline(result, baseline_passes):
    """This result's pass of the committed per-module baseline."""
    from armload.ci.baseline import pass_name
    name = pass_name(result)
    assert name in baseline_passes, f"{BASELINE} has no {name!r} pass: run `make regress-update`"
    return baseline_passes[name]


@needs_result
def test_regress_all_modules_load_and_relocate(result, baseline):
    recs = result["modules"]
    assert len(recs) == len(baseline["modules"]) == baseline["totals"]["modules"]
    bad = [(r["module"], r["outcome"], r.get("reason")) for r in recs if "relocations" not in r]
    assert not bad, bad[:20]
    assert sum(r["relocations"] for r in recs) == baseline["totals"]["relocations"]


@needs_result
def test_regress_no_unresolved_symbol_no_crc_mismatch(result):
    bad = []
    for r in result["modules"]:
        s = r["symbols"]
        if s["simulated"] and not result["kernel"].count("kallsyms"):
            continue
        if s["crc_checked"] + s["weak_undefined"] != s["undefined"]:
            bad.append((r["module"], s))
    assert not bad, bad[:10]


@needs_result
def test_regress_every_branch_verified(result, baseline):
    if not result["options"]["verify"]:
        pytest.skip("check ran with --no-verify")
    bad = [(r["module"], r["verify"]) for r in result["modules"]
           if not r["verify"]["ok"] or r["verify"]["branches_verified"] != r["verify"]["branches"]
           or r["verify"]["plt_verified"] != r["verify"]["plt_entries"]]
    assert not bad, bad[:10]
    assert sum(r["verify"]["branches"] for r in result["modules"]) > 0
    assert sum(r["verify"]["branches"] for r in result["modules"]) == baseline["totals"]["branches"]


@needs_result
def test_regress_plt_emission_within_count(result):
    bad = []
    for r in result["modules"]:
        p = r["plt"]
        v6 = p["counts"]["v6"]
        fixed = p["fixed_entries"]
        if p["core_entries"] + fixed.get("core", 0) > v6["core"] or \
           p["init_entries"] + fixed.get("init", 0) > v6["init"]:
            bad.append((r["module"], p))
    assert not bad, bad[:10]


@needs_window_result
@needs_corpus
def test_regress_plt_counts_recorded_equal_kernel_port(result):
    recs = {os.path.realpath(os.path.join(result["tree"], r["module"])): r for r in result["modules"]}
    bad = []
    for p in _plt_sample()[:12]:
        r = recs.get(os.path.realpath(p))
        assert r is not None, p
        c = r["plt"]["counts"]["v6"]
        if (c["core"], c["init"]) != kernel_plt_counts(p):
            bad.append(r["module"])
    assert not bad


@needs_result
def test_regress_every_module_as_in_the_baseline(result, baseline_passes):
    """The per-module gate (the same comparison `check --baseline` makes): any module whose
    outcome, PLT counts or image size changed fails, listed by name."""
    from armload.ci.baseline import changed_text, diff
    d = diff(baseline_passes, result, BASELINE)
    rows = [f"{c['module']}: {', '.join(c['kinds'])}: {' -> '.join(changed_text(c))}" for c in d["changes"]]
    assert d["differences"] == 0, "\n".join(d["option_differences"] + rows[:50])
    assert d["modules_compared"] == len(result["modules"])
