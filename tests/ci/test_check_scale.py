"""`armload check` at distribution scale, on small trees of the bundled samples: subsets with
dependencies from a full tree, shards and their merge (equal to one whole run), the baseline
limited to the modules that ran, the content fingerprint, JSON that does not depend on --jobs
or on the subset, one scenario per row of the outcome table, and the dependency rule."""
from __future__ import annotations

import json
import os
import shutil
import struct

import pytest

from testinputs import BOOT_VMLINUZ, SAMPLES, SYMVERS
from test_check import BX_LR, MOV_R0_0, MVN_R0_18, _build_id, check, make_tree, patch_init

from armload.cli import main
from armload.ci.outcomes import OUTCOMES

LDR_R0_R0 = 0xE5900000          # ldr r0, [r0]: with r0 = 0 a NULL dereference
B_SELF = 0xEAFFFFFE             # b .
# init runs inside the booted kernel (the image is given): load_module takes about 400k instructions
BOOTED = ["--kernel", BOOT_VMLINUZ, "--budget", "3000000"]
MIX = ("deferred", "enodev", "exporter", "hello", "importer", "kalloc", "nullderef", "regdev")


def run_json(tree, out, *extra) -> tuple[int, bytes]:
    rc = main(["check", tree, "--kernel", SYMVERS, "-q", "--no-timing", "--fail-on", "none", "--json", out, *extra])
    return rc, open(out, "rb").read()


# --------------------------------------------------------------------------------------------
# Determinism: the same bytes for any --jobs, and a module's record is the same in a subset
# --------------------------------------------------------------------------------------------
def test_json_is_the_same_for_any_jobs_and_any_subset(tmp_path):
    """Module.symvers alone gives no addresses: armload hands them out. They must come from the
    module's own dependency closure, not from which worker checked which modules before."""
    tree = make_tree(tmp_path, *MIX)
    _, one = run_json(tree, str(tmp_path / "j1.json"), "--jobs", "1")
    _, two = run_json(tree, str(tmp_path / "j2.json"), "--jobs", "2")
    _, three = run_json(tree, str(tmp_path / "j3.json"), "--jobs", "3")
    assert one == two == three
    whole = {r["module"]: r for r in json.loads(one)["modules"]}
    assert all(r.get("image_sha256") for r in whole.values())     # every sample loads: the image is compared
    # Each module alone (after its dependencies) gets the addresses it got in the whole run.
    for m in ("kalloc-arm.ko", "importer-arm.ko", "regdev-arm.ko"):
        _, alone = run_json(tree, str(tmp_path / "alone.json"), "--module", m)
        assert json.loads(alone)["modules"] == [whole[m]], m


def test_json_is_the_same_for_any_jobs_with_the_builtin_kernel(tmp_path):
    tree = make_tree(tmp_path, *MIX)
    outs = []
    for jobs in ("1", "2"):
        out = str(tmp_path / f"b{jobs}.json")
        main(["check", tree, "--builtin-kernel", "-q", "--no-timing", "--fail-on", "none", "--json", out,
              "--jobs", jobs])
        outs.append(open(out, "rb").read())
    assert outs[0] == outs[1]


# --------------------------------------------------------------------------------------------
# Subsets: --module patterns, --deps-from, and the baseline on the modules that ran
# --------------------------------------------------------------------------------------------
def test_module_patterns_select_inside_the_tree(tmp_path, capsys):
    tree = make_tree(tmp_path, "hello", "enodev", sub="drivers/a")
    make_tree(tmp_path, "exporter", "importer", sub="drivers/b")
    rc, doc, recs = check(tree, "--module", "drivers/b", "--fail-on", "none")
    assert list(recs) == ["drivers/b/exporter-arm.ko", "drivers/b/importer-arm.ko"]
    assert doc["selection"] == {"filters": ["--module drivers/b"], "modules": 2, "of": 4}
    _, _, recs = check(tree, "--module", "*/a/*", "--fail-on", "none")
    assert list(recs) == ["drivers/a/enodev-arm.ko", "drivers/a/hello-arm.ko"]
    _, _, recs = check(tree, "--module", "imp*", "--fail-on", "none")              # a glob over names
    assert list(recs) == ["drivers/b/importer-arm.ko"] and recs["drivers/b/importer-arm.ko"]["outcome"] == "ok"
    _, doc, _ = check(tree, "--fail-on", "none", name="whole")
    assert doc["selection"] is None
    capsys.readouterr()
    assert main(["check", tree, "--kernel", SYMVERS, "-q", "--module", "drivers/c", "--module", "hello"]) == 1
    assert capsys.readouterr().err == f"armload: check: --module: no module named or matching drivers/c in {tree}\n"


def test_deps_from_takes_dependencies_from_the_full_tree(tmp_path, booted_dir, capsys):
    full = make_tree(tmp_path, "hello", sub="net/core")
    make_tree(tmp_path, "exporter", sub="lib")
    sub = make_tree(tmp_path, "importer", sub="net/can")
    sub = os.path.join(sub, "net", "can")
    rc, doc, recs = check(sub, "--fail-on", "none", name="alone", *BOOTED)
    assert recs["importer-arm.ko"]["outcome"] == "load"
    assert recs["importer-arm.ko"]["reason"] == "depends on exporter, not found in the tree"
    rc, doc, recs = check(sub, "--deps-from", full, name="deps", *BOOTED)
    assert rc == 0 and list(recs) == ["net/can/importer-arm.ko"]            # named by its path in the full tree
    assert recs["net/can/importer-arm.ko"]["outcome"] == "ok"
    assert recs["net/can/importer-arm.ko"]["symbols"]["from_modules"] == {"exporter": ["armload_sample_add", "armload_sample_counter"]}
    assert doc["selection"]["of"] == 3 and doc["selection"]["modules"] == 1
    # The full tree's baseline applies to the subset: compared on the module that ran.
    base = str(tmp_path / "base.json")
    assert check(full, "--baseline", base, "--update-baseline", name="full", *BOOTED)[0] == 0
    rc, doc, _ = check(sub, "--deps-from", full, "--baseline", base, "--fail-on", "none", name="deps2", *BOOTED)
    assert rc == 0 and doc["baseline"]["differences"] == 0 and doc["baseline"]["subset"] is True
    # A copy of a module of the full tree (rebuilt, patched) is named by that module's path.
    patched = tmp_path / "patched"
    patched.mkdir()
    shutil.copy(os.path.join(SAMPLES, "exporter-arm.ko"), patched)
    rc, doc, recs = check(str(patched), "--deps-from", full, "--baseline", base, "--fail-on", "none", name="p", *BOOTED)
    assert list(recs) == ["lib/exporter-arm.ko"] and doc["baseline"]["differences"] == 0
    patch_init(str(patched / "exporter-arm.ko"), MVN_R0_18, BX_LR)
    rc, doc, recs = check(str(patched), "--deps-from", full, "--baseline", base, "--fail-on", "none", name="p", *BOOTED)
    assert [c["kinds"] for c in doc["baseline"]["changes"]] == [
        ["newly failing", "file changed, same build-id", "loaded image changed"]]
    # A module that is not in the full tree (out-of-tree build) keeps its own name.
    out = tmp_path / "oot"
    out.mkdir()
    shutil.copy(os.path.join(SAMPLES, "kalloc-arm.ko"), out)
    rc, doc, recs = check(str(out), "--deps-from", full, name="oot", *BOOTED)
    assert list(recs) == ["kalloc-arm.ko"] and recs["kalloc-arm.ko"]["outcome"] == "ok"
    capsys.readouterr()
    assert main(["check", str(out), "--kernel", SYMVERS, "-q", "--deps-from", str(tmp_path / "nope")]) == 1
    assert "--deps-from" in capsys.readouterr().err


def test_baseline_of_a_subset_compares_only_the_modules_that_ran(tmp_path, booted_dir, capsys):
    tree = make_tree(tmp_path, *MIX)
    base = str(tmp_path / "base.json")
    check(tree, "--fail-on", "none", "--baseline", base, "--update-baseline", name="full", *BOOTED)
    for extra in (("--module", "hello"), ("--limit", "2"), ("--shard", "2/3")):
        rc, doc, recs = check(tree, "--fail-on", "none", "--baseline", base, *extra, *BOOTED)
        d = doc["baseline"]
        assert rc == 0 and d["differences"] == 0 and d["modules_compared"] == len(recs) < len(MIX), extra
    # A whole run still names a module that is gone.
    os.remove(os.path.join(tree, "hello-arm.ko"))
    rc, doc, _ = check(tree, "--fail-on", "none", "--baseline", base, *BOOTED)
    assert rc == 1 and doc["baseline"]["counts"] == {"module gone": 1}
    # --update-baseline on a subset rewrites only the lines of the modules that ran.
    patch_init(os.path.join(tree, "kalloc-arm.ko"), MVN_R0_18, BX_LR)
    before = json.load(open(base))["passes"]["window+init"]
    assert check(tree, "--baseline", base, "--update-baseline", "--module", "kalloc", *BOOTED)[0] == 0
    after = json.load(open(base))["passes"]["window+init"]
    assert after["modules"]["kalloc-arm.ko"][0] == "error -ENODEV"
    assert {k: v for k, v in after["modules"].items() if k != "kalloc-arm.ko"} == \
        {k: v for k, v in before["modules"].items() if k != "kalloc-arm.ko"}
    assert after["totals"] == before["totals"]


# --------------------------------------------------------------------------------------------
# Shards and their merge
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("extra", [tuple(BOOTED)], ids=["booted"])
def test_shards_merged_equal_one_whole_run(tmp_path, capsys, booted_dir, extra):
    tree = make_tree(tmp_path, *MIX)
    patch_init(os.path.join(tree, "exporter-arm.ko"), MOV_R0_0, LDR_R0_R0)   # its dependents: dependency-failed
    whole_rc = main(["check", tree, "--kernel", SYMVERS, "-q", "--no-timing", "--json", str(tmp_path / "w.json"),
                     *extra])
    shards = []
    for k in (1, 2, 3):
        out = str(tmp_path / f"s{k}.json")
        main(["check", tree, "--kernel", SYMVERS, "-q", "--no-timing", "--json", out, "--shard", f"{k}/3", *extra])
        shards.append(out)
    docs = [json.load(open(s)) for s in shards]
    where = {r["name"]: d["shard"]["index"] for d in docs for r in d["modules"]}
    assert where["exporter"] != where["importer"]           # the rule crosses shards
    assert sorted(len(d["modules"]) for d in docs) == [2, 3, 3]
    merged = str(tmp_path / "m.json")
    rc = main(["check-merge", *reversed(shards), "--json", merged])
    assert open(merged, "rb").read() == open(tmp_path / "w.json", "rb").read()
    assert rc == whole_rc == 1
    w = {r["module"]: r for r in json.load(open(merged))["modules"]}
    assert w["importer-arm.ko"]["outcome"] == "dependency-failed"
    # The merge is compared with a baseline (the whole run's JSON) and writes JUnit like a whole run.
    xml = str(tmp_path / "m.xml")
    assert main(["check-merge", *shards, "--baseline", str(tmp_path / "w.json"), "--junit", xml,
                 "--json", merged]) == whole_rc
    d = json.load(open(merged))["baseline"]
    assert d["differences"] == 0 and d["modules_compared"] == len(MIX) and d["subset"] is False
    main(["check", tree, "--kernel", SYMVERS, "-q", "--no-timing", "--junit", str(tmp_path / "w.xml"), *extra])
    strip = lambda t: [x for x in t.splitlines() if "timestamp=" not in x and "<property" not in x]   # noqa: E731
    assert strip(open(xml).read()) == strip(open(tmp_path / "w.xml").read())
    capsys.readouterr()
    assert main(["check-merge", shards[0], shards[2]]) == 1
    assert "shards of 3: missing 2" in capsys.readouterr().err
    assert main(["check-merge", shards[0], str(tmp_path / "w.json")]) == 1
    assert "not the --json output of `armload check --shard K/N`" in capsys.readouterr().err


def test_bad_shard_is_one_clear_error(tmp_path, capsys):
    tree = make_tree(tmp_path, "hello")
    for bad in ("3/2", "0/2", "x", "1/0"):
        assert main(["check", tree, "--kernel", SYMVERS, "-q", "--shard", bad]) == 1
        err = capsys.readouterr().err
        assert err.startswith("armload: check: --shard ") and err.count("\n") == 1, bad


# --------------------------------------------------------------------------------------------
# The content fingerprint
# --------------------------------------------------------------------------------------------
def _section(path, name):
    from elftools.elf.elffile import ELFFile
    with open(path, "rb") as f:
        s = ELFFile(f).get_section_by_name(name)
        return s["sh_offset"], s["sh_size"]


def _flip(path, off):
    data = bytearray(open(path, "rb").read())
    data[off] ^= 0x01
    open(path, "wb").write(bytes(data))


def test_fingerprint_names_the_kind_of_change(tmp_path, booted_dir, capsys):
    tree = make_tree(tmp_path, "hello", "kalloc", "enodev")
    base = str(tmp_path / "base.json")
    assert check(tree, "--baseline", base, "--update-baseline", "--fail-on", "none", *BOOTED)[0] == 0
    rc, doc, recs = check(tree, "--baseline", base, "--fail-on", "none", *BOOTED)
    assert rc == 0 and recs["hello-arm.ko"]["build_id"] == _build_id(os.path.join(tree, "hello-arm.ko"))
    # One flipped byte in a string of .rodata: the module still loads and runs the same.
    path = os.path.join(tree, "hello-arm.ko")
    off, size = _section(path, ".rodata.str1.4") if _has(path, ".rodata.str1.4") else _section(path, ".modinfo")
    _flip(path, off + 1)
    # One flipped byte in .comment (not loaded): only the file changed.
    k = os.path.join(tree, "kalloc-arm.ko")
    _flip(k, _section(k, ".comment")[0] + 2)
    rc, doc, recs = check(tree, "--baseline", base, "--fail-on", "none", "--top", "0", *BOOTED)
    out = capsys.readouterr().out
    kinds = {c["module"]: c["kinds"] for c in doc["baseline"]["changes"]}
    assert rc == 1 and recs["hello-arm.ko"]["outcome"] == "ok"
    assert kinds == {"hello-arm.ko": ["file changed, same build-id", "loaded image changed"],
                     "kalloc-arm.ko": ["file changed, same build-id"]}
    row = next(x for x in out.splitlines() if x.startswith("kalloc-arm.ko ") and "file changed" in x)
    assert f"file {recs['kalloc-arm.ko']['sha256']}" in row
    # A rebuilt module: another build-id.
    shutil.copy(os.path.join(SAMPLES, "hello-arm-debug.ko"), os.path.join(tree, "enodev-arm.ko"))
    rc, doc, _ = check(tree, "--baseline", base, "--fail-on", "none", *BOOTED)
    kinds = {c["module"]: c["kinds"] for c in doc["baseline"]["changes"]}
    assert "rebuilt (new build-id)" in kinds["enodev-arm.ko"] and "newly passing" in kinds["enodev-arm.ko"]
    # The same file against a kernel whose map puts _printk elsewhere: the loaded image alone changed.
    tree2 = make_tree(tmp_path / "t2", "hello")
    base2 = str(tmp_path / "base2.json")
    check(tree2, "--baseline", base2, "--update-baseline", "--fail-on", "none")
    smap = tmp_path / "System.map"
    smap.write_text("c0a00000 T _printk\nc0a00100 T __gnu_mcount_nc\n")
    rc, doc, _ = check(tree2, "--baseline", base2, "--fail-on", "none", "--kernel", str(smap))
    assert [c["kinds"] for c in doc["baseline"]["changes"]] == [
        ["loaded image changed (same file: the kernel or the loader differs)"]]


def _has(path, name) -> bool:
    from elftools.elf.elffile import ELFFile
    with open(path, "rb") as f:
        return ELFFile(f).get_section_by_name(name) is not None


def test_baseline_format_1_still_compares_what_it_holds(tmp_path, booted_dir):
    tree = make_tree(tmp_path, "hello", "enodev")
    base = str(tmp_path / "b.json")
    check(tree, "--baseline", base, "--update-baseline", "--fail-on", "none", *BOOTED)
    doc = json.load(open(base))
    doc["format"] = "armload-check-baseline/1"
    for p in doc["passes"].values():
        p["modules"] = {m: e[:6] for m, e in p["modules"].items()}
    json.dump(doc, open(base, "w"))
    rc, d, _ = check(tree, "--baseline", base, "--fail-on", "none", *BOOTED)
    assert rc == 0 and d["baseline"]["differences"] == 0
    patch_init(os.path.join(tree, "enodev-arm.ko"), MOV_R0_0, BX_LR)
    rc, d, _ = check(tree, "--baseline", base, "--fail-on", "none", *BOOTED)
    assert [c["kinds"] for c in d["baseline"]["changes"]] == [["newly passing"]]


# --------------------------------------------------------------------------------------------
# The outcome table: one scenario per row, and --update-baseline's exit status
# --------------------------------------------------------------------------------------------
def _corrupt_a_branch(monkeypatch, name):
    """After `name` is loaded, one of its ARM branches goes 4 bytes further (as
    tests/loader/test_verify_failures.py does to a loaded module)."""
    from armload.loader import session as S
    real = S.Session.load

    def load(self, path, *a, **k):
        mod = real(self, path, *a, **k)
        if mod.name == name:
            b = next(b for b in mod.branches.tolist() if b[3] in (28, 29))
            r = mod.region_of(b[2])
            w = struct.unpack_from("<I", r.data, b[2] - r.base)[0]
            struct.pack_into("<I", r.data, b[2] - r.base, (w & 0xFF000000) | ((w + 1) & 0x00FFFFFF))
        return mod
    monkeypatch.setattr(S.Session, "load", load)


def _internal(monkeypatch):
    import armload.loader.verify as V

    def broken(*a, **k):
        raise RuntimeError("a bug")
    monkeypatch.setattr(V, "verify_module", broken)


# class -> (sample modules, how to prepare (tmp tree, monkeypatch), the module that must end in it, options)
SCENARIOS = {
    "ok": (("hello",), None, "hello-arm.ko", BOOTED),
    "load": (("hello",), lambda t, mp: open(os.path.join(t, "hello-arm.ko"), "r+b").truncate(3000), "hello-arm.ko",
             BOOTED),
    # a corrupted branch is also a word unlike the booted kernel's image, and loader-differs (the kernel as
    # the oracle) outranks verify: the verify class on its own is the loader-only check's
    "verify": (("hello",), lambda t, mp: _corrupt_a_branch(mp, "hello"), "hello-arm.ko", (*BOOTED, "--no-emulate")),
    "dependency-failed": (("exporter", "importer"),
                          lambda t, mp: patch_init(os.path.join(t, "exporter-arm.ko"), MOV_R0_0, LDR_R0_R0),
                          "importer-arm.ko", BOOTED),
    "fault": (("nullderef",), None, "nullderef-arm.ko", BOOTED),
    "budget": (("hello",), lambda t, mp: patch_init(os.path.join(t, "hello-arm.ko"), B_SELF), "hello-arm.ko", BOOTED),
    "error": (("enodev",), None, "enodev-arm.ko", BOOTED),
    "timeout": (("hello",), lambda t, mp: patch_init(os.path.join(t, "hello-arm.ko"), B_SELF), "hello-arm.ko",
                ["--kernel", BOOT_VMLINUZ, "--budget", "100000000000", "--timeout", "0.5"]),
    "internal": (("hello",), lambda t, mp: _internal(mp), "hello-arm.ko", BOOTED),
}


def test_every_outcome_class_has_a_scenario():
    from hostile_samples import CORPUS       # the booted kernel's hostile ends: one sample each there
    hostile = {cls for _, _, cls in CORPUS.values()} - set(SCENARIOS)
    assert set(SCENARIOS) | hostile | {"loader-differs", "sanitizer"} == set(OUTCOMES)
    # loader-differs: tests/emu/test_booted_run.py::test_check_a_loader_difference_is_its_own_outcome_and_fails_by_default
    # sanitizer: tests/ci/test_check_sanitize.py (check --sanitize on the sanbugs sample)
    assert [c for c in OUTCOMES if c in SCENARIOS] == list(SCENARIOS)


@pytest.mark.parametrize("cls", list(SCENARIOS))
def test_outcome_scenario(tmp_path, monkeypatch, booted_dir, cls):
    names, prepare, module, opts = SCENARIOS[cls]
    tree = make_tree(tmp_path, *names)
    if prepare:
        prepare(tree, monkeypatch)
    rc, doc, recs = check(tree, "--fail-on", cls if cls != "ok" else "none", *opts)
    assert recs[module]["outcome"] == cls, recs[module]
    assert rc == (cls != "ok") and doc["failed"] == ({cls: 1} if cls != "ok" else {})
    # Outside --fail-on the same module passes the gate; --update-baseline always exits 0.
    rc, doc, recs = check(tree, "--fail-on", "none", *opts)
    assert rc == 0 and recs[module]["outcome"] == cls
    base = str(tmp_path / "b.json")
    assert check(tree, "--fail-on", "all", *opts, "--baseline", base, "--update-baseline")[0] == 0
    text = open(base).read()
    assert "Error" not in text.replace("Error", "", 0) or cls != "load"      # no Python class names
    passes = json.load(open(base))["passes"]
    assert "Error" not in passes["window" if "--no-emulate" in opts else "window+init"]["modules"][module][0]


# --------------------------------------------------------------------------------------------
# The dependency rule: a dependency whose init did not succeed is not a good dependency
# --------------------------------------------------------------------------------------------
DEP_INITS = {"fault": (MOV_R0_0, LDR_R0_R0), "error": (MVN_R0_18, BX_LR), "budget": (B_SELF,)}


@pytest.mark.parametrize("how", ["whole run", "alone", "shards"])
@pytest.mark.parametrize("dep", list(DEP_INITS) + ["ok"])
def test_dependency_rule(tmp_path, booted_dir, dep, how):
    tree = make_tree(tmp_path, "exporter", "importer", "hello")
    patch_init(os.path.join(tree, "exporter-arm.ko"), *DEP_INITS.get(dep, (MOV_R0_0, BX_LR)))
    extra = ["--fail-on", "none", *BOOTED]
    if how == "alone":
        extra += ["--module", "importer"]
    if how == "shards":
        outs = []
        for k in (1, 2):
            out = str(tmp_path / f"s{k}.json")
            main(["check", tree, "--kernel", SYMVERS, "-q", "--json", out, "--shard", f"{k}/2", *extra])
            outs.append(out)
        main(["check-merge", *outs, "--json", str(tmp_path / "m.json")])
        recs = {r["module"]: r for r in json.load(open(tmp_path / "m.json"))["modules"]}
    else:
        _, _, recs = check(tree, *extra)
    imp = recs["importer-arm.ko"]
    if dep == "ok":
        assert imp["outcome"] == "ok" and "dependency" not in imp
        return
    assert imp["outcome"] == "dependency-failed", imp
    assert imp["dependency"]["name"] == "exporter"
    assert imp["reason"].startswith(f"dependency exporter (exporter-arm.ko) init {dep}")
    assert imp["init"]["status"] == "not-run"           # the kernel never loads it: its dependency failed there
    if how != "alone":
        assert recs["exporter-arm.ko"]["outcome"] == dep
        assert recs["hello-arm.ko"]["outcome"] == "ok"                    # not a dependent


# --------------------------------------------------------------------------------------------
# Progress
# --------------------------------------------------------------------------------------------
def test_progress_rate_counts_checked_modules_only(monkeypatch):
    import io
    from armload.commands import check as C
    now = [100.0]
    monkeypatch.setattr(C.time, "perf_counter", lambda: now[0])
    buf = io.StringIO()
    pr = C.Progress(buf, every=0.0)
    pr(300, 400, 300, None)                      # 300 decided by the plan alone, at once
    now[0] = 110.0
    pr(320, 400, 301, {"module": "drivers/net/veth.ko"})
    lines = buf.getvalue().splitlines()
    assert lines[0] == "check: 300/400 modules (75%), 300 failed, rate not known yet, 0s elapsed"
    # 20 modules in 10 s: 2.0/s (not 32/s), 80 left: 40 s.
    assert lines[1] == ("check: 320/400 modules (80%), 301 failed, 2.0 modules/s, ETA 0:40, 10s elapsed, "
                        "last drivers/net/veth.ko")


def test_progress_on_a_terminal_is_a_rich_bar():
    import io
    from armload.commands.check import Progress

    class Tty(io.StringIO):
        def isatty(self):
            return True
    buf = Tty()
    pr = Progress(buf)
    pr(0, 3, 0, None)
    for i, m in enumerate(("a.ko", "b.ko", "net/c.ko"), 1):
        pr(i, 3, 0, {"module": m})
    pr.close()
    out = buf.getvalue()
    assert "3/3" in out and "ETA" in out and "/s" in out and "net/c.ko" in out


def test_no_word_is_said_twice(tmp_path, booted_dir, capsys):
    """A class is named once in the reason, the JSON and the JUnit file ("fault: fault" was once printed)."""
    tree = make_tree(tmp_path, "exporter", "importer")
    patch_init(os.path.join(tree, "exporter-arm.ko"), MOV_R0_0, LDR_R0_R0)
    xml = str(tmp_path / "j.xml")
    capsys.readouterr()
    rc, doc, recs = check(tree, "--fail-on", "none", "--junit", xml, *BOOTED)
    out = capsys.readouterr().out + json.dumps(doc) + open(xml).read()
    imp = recs["importer-arm.ko"]
    assert imp["reason"] == ("dependency exporter (exporter-arm.ko) init fault: Unable to handle kernel NULL "
                             "pointer dereference at virtual address 00000000")
    for twice in ("fault: fault", "oops: oops", "fault (fault)", "oops (oops)"):
        assert twice not in out, twice
