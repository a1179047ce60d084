"""`armload run` inside the booted kernel and the kernel's load_module as the loader's oracle
(armload/emu/booted/modrun.py, armload/commands/run_booted.py)."""
import json
import os
import subprocess
import sys

import pytest

from testinputs import BOOT_VMLINUZ, CACHE, ROOT, SYMVERS, sample
from armload.kernel.config import DEBIAN_ARMMP
from armload.kernel.provider import Kernel
from armload.kernel import debian

TREE = debian.MODULES


def test_sample_loads_identically_and_its_init_runs_in_the_kernel(run):
    r = run.load(sample("hello-arm.ko"))
    assert (r.status, r.ret, r.name) == ("returned", 0, "hello")
    assert any(line.endswith("hello: loaded, answer=42, greeting=world") for line in r.console)
    c = r.loader
    assert c.identical and c.agrees and c.differences == 0 and c.compared == 0x8000
    assert r.core_base == 0xBF000000
    ret, lines = run.unload("hello")
    assert ret == 0 and any(line.endswith("hello: unloaded") for line in lines)
    assert run.unload("hello")[0] == -2            # gone: delete_module says -ENOENT


def test_refusal_must_be_the_kernels(run):
    r = run.load(sample("importer-arm.ko"))        # its exporter is not loaded: Unknown symbol
    assert (r.status, r.ret) == ("refused", -2)
    assert any("importer: Unknown symbol armload_sample_add (err -2)" in line for line in r.console)
    assert r.loader.agrees and "Unknown symbol armload_sample_add" in r.loader.refusal


def test_dependencies_in_order_and_a_dependency_without_init(run):
    for p in ("arch/arm/lib/xor-neon.ko", "crypto/xor.ko"):
        r = run.load(os.path.join(TREE, p))
        assert (r.status, r.ret) == ("returned", 0) and r.loader.identical, (p, r.loader.to_dict())
    assert any("xor: using function:" in line for line in r.console)


def test_an_oops_is_the_kernels_own_report(run):
    r = run.load(sample("nullderef-arm.ko"))
    assert r.status == "oops" and r.ret is None
    assert "Internal error: Oops: 5 [#1] SMP ARM" in r.oops and "Modules linked in: nullderef" in r.oops
    assert r.loader.identical                       # compared before init ran


def test_a_loader_bug_is_caught_by_the_kernels_image(run, monkeypatch):
    """The old ftrace NOP (pop {lr}) instead of 6.1's add sp, sp, #4: the kernel's bytes disagree."""
    from armload.loader import finalize
    monkeypatch.setattr(finalize, "ARM_FTRACE_NOP", 0xE8BD4000)
    r = run.load(sample("hello-arm.ko"))
    c = r.loader
    assert not c.identical and c.differences == 1 and c.by_section == {".init.text": 1}
    assert c.listed[0]["armload"] == "0040bde8" and c.listed[0]["kernel"] == "04d08de2"


def test_a_layout_bug_is_caught(run, monkeypatch):
    """6.1 page-aligns the whole core before the symbol tables: without it module_alloc's size differs."""
    from armload.loader import layout
    monkeypatch.setattr(layout, "page_align", lambda x: x)          # no page alignment anywhere
    r = run.load(sample("devkit-arm-debug.ko"))
    assert not r.loader.identical


def test_cli_run_booted_json_and_exit(booted_dir):
    p = subprocess.run([sys.executable, "-m", "armload", "run", sample("exporter-arm.ko"), sample("importer-arm.ko"),
                        "--kernel", BOOT_VMLINUZ, "--kernel", SYMVERS, "--exit", "--settle-ms", "50", "--json"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["runtime"] == "booted" and d["ok"]
    assert [(m["module"], m["ret"], m["loader_vs_kernel"]["identical"]) for m in d["modules"]] == \
        [("exporter", 0, True), ("importer", 0, True)]
    assert [u["module"] for u in d["unloaded"]] == ["importer", "exporter"]
    assert all(u["ret"] == 0 for u in d["unloaded"])


def test_cli_verify_against_kernel_with_the_tree(booted_dir):
    p = subprocess.run([sys.executable, "-m", "armload", "verify", "--against-kernel", "--kernel", BOOT_VMLINUZ,
                        "--kernel", SYMVERS, "--tree", TREE, os.path.join(TREE, "crypto/xor.ko"),
                        sample("hello-thumb2.ko")], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "xor_neon: identical to the kernel's load_module" in p.stdout
    assert "xor: identical to the kernel's load_module" in p.stdout
    assert "hello: the kernel refused it (-8); armload refused it too: hello: unknown relocation: 10" in p.stdout


def test_check_runtime_booted_outcomes_and_the_dependency_rule(booted_dir, tmp_path):
    """check with a vmlinuz (its default path): each module after its dependencies in a fresh copy of the booted
    kernel; the outcomes are the kernel's, the loader is compared on every module."""
    import shutil
    from armload.cli import main
    tree = tmp_path / "tree"
    tree.mkdir()
    for n in ("hello", "nullderef", "enodev", "exporter", "importer"):
        shutil.copy(sample(f"{n}-arm.ko"), tree)
    out = tmp_path / "c.json"
    rc = main(["check", str(tree), "--kernel", SYMVERS, "--kernel", BOOT_VMLINUZ, "-q",
               "--jobs", "1", "--json", str(out), "--fail-on", "none"])
    assert rc == 0
    recs = {r["module"]: r for r in json.loads(out.read_text())["modules"]}
    got = {m: (r["outcome"], r["init"]["status"], r["init"].get("retval")) for m, r in recs.items()}
    assert got == {"hello-arm.ko": ("ok", "returned", 0), "nullderef-arm.ko": ("fault", "oops", None),
                   "enodev-arm.ko": ("error", "returned", -19), "exporter-arm.ko": ("ok", "returned", 0),
                   "importer-arm.ko": ("ok", "returned", 0)}
    assert recs["importer-arm.ko"]["depends"] == ["exporter"] and "dependency_init_failures" not in recs["importer-arm.ko"]["init"]
    assert all(r["init"]["loader_vs_kernel"]["identical"] for r in recs.values())
    assert "Unable to handle kernel NULL pointer dereference" in recs["nullderef-arm.ko"]["reason"]


def test_request_module_is_served_as_modprobe_from_the_tree(booted_dir):
    """nls_euc-jp's init calls load_nls("cp932"): request_module runs /sbin/modprobe; armload
    does modprobe's part (name, then .modinfo aliases) with the kernel's load_module."""
    from armload.emu.booted.modrun import BootedRun, package_tree
    k = Kernel.from_files([SYMVERS, BOOT_VMLINUZ], DEBIAN_ARMMP)
    assert package_tree(BOOT_VMLINUZ) == os.path.abspath(TREE)
    run = BootedRun(BOOT_VMLINUZ, k, DEBIAN_ARMMP, tree=TREE)
    r = run.load(os.path.join(TREE, "fs/nls/nls_euc-jp.ko"))
    assert (r.status, r.ret) == ("returned", 0) and r.loader.identical
    assert [(q["request"], [m["module"] for m in q["modules"]], q["status"]) for q in run.requests] == \
        [("nls_cp932", ["nls_cp932"], 0)]
    run = BootedRun(BOOT_VMLINUZ, k, DEBIAN_ARMMP, tree=TREE)     # by alias: crypto-crc32c
    r = run.load(os.path.join(TREE, "lib/libcrc32c.ko"))
    assert (r.status, r.ret) == ("returned", 0)
    first = run.requests[0]
    assert first["request"] == "crypto-crc32c" and first["status"] == 0
    assert ("crc32c_generic", 0) in [(m["module"], m["ret"]) for m in first["modules"]]


def test_request_module_without_a_tree_fails_as_modprobe_would(booted_dir):
    from armload.emu.booted.modrun import BootedRun
    run = BootedRun(BOOT_VMLINUZ, Kernel.from_files([SYMVERS, BOOT_VMLINUZ], DEBIAN_ARMMP), DEBIAN_ARMMP)
    r = run.load(os.path.join(TREE, "fs/nls/nls_euc-jp.ko"))
    assert (r.status, r.ret) == ("returned", -22)                  # load_nls failed: init's -EINVAL
    assert run.requests[0]["status"] == 256 and run.requests[0]["note"] == "no module tree given"


def _patched(tmp_path, name, fn):
    from armload.loader.elf import read_object
    data = bytearray(open(sample(name), "rb").read())
    obj = read_object(sample(name), bytes(data))
    fn(data, obj)
    p = tmp_path / name
    p.write_bytes(bytes(data))
    return str(p)


def _versions_entry(data, obj, symbol):
    sec = next(s for s in obj.sections if s.name == "__versions")
    for off in range(sec.sh_offset, sec.sh_offset + sec.sh_size, 64):     # struct modversion_info
        if data[off + 4:off + 4 + len(symbol) + 1] == symbol.encode() + b"\0":
            return off
    raise AssertionError(symbol)


def test_a_symbol_missing_from_versions_is_refused_as_the_debian_kernel_does(run, tmp_path):
    """Upstream 6.1's check_version warns once and lets it go; the Debian 6.1.0-50 kernel refuses with
    -EINVAL ("no symbol version for"), and armload follows the kernel it loads into."""
    def rename(data, obj):
        off = _versions_entry(data, obj, "delayed_work_timer_fn")
        data[off + 4] = ord("X")
    r = run.load(_patched(tmp_path, "devkit-arm.ko", rename))
    assert (r.status, r.ret) == ("refused", -22)
    assert any("devkit: no symbol version for delayed_work_timer_fn" in line for line in r.console)
    assert r.loader.agrees and "no symbol version for delayed_work_timer_fn" in r.loader.refusal


@pytest.mark.parametrize("length,kernel_oopses", [(59, False), (60, True)])
def test_an_unterminated_struct_module_name_is_refused_where_the_kernel_bugs(run, tmp_path, length, kernel_oopses):
    from armload.loader.elf import MODULE_NAME_OFF
    def fill(data, obj):
        tm = next(s for s in obj.sections if s.name == ".gnu.linkonce.this_module")
        at = tm.sh_offset + MODULE_NAME_OFF
        data[at:at + 60] = b"h" * length + b"\0" * (60 - length)
    r = run.load(_patched(tmp_path, "hello-arm.ko", fill))
    if kernel_oopses:
        assert r.status == "oops" and "fortify_panic" in r.oops
        assert "is not NUL-terminated within MODULE_NAME_LEN (60)" in r.loader.refusal
    else:
        assert r.status == "returned" and not r.loader.refusal and r.loader.identical


def _corpus_sample(n=24, seed=20):
    import random
    mods = sorted(os.path.relpath(os.path.join(d, f), TREE) for d, _, fs in os.walk(TREE) for f in fs
                  if f.endswith(".ko"))
    return random.Random(seed).sample(mods, n)


@pytest.mark.parametrize("rel", _corpus_sample() if os.path.isdir(TREE) else ["(make test-inputs)"])
def test_a_corpus_sample_loads_byte_for_byte_as_the_kernel_loads_it(booted_dir, rel):
    """The kernel's own load_module is the loader's oracle on real Debian modules (with their
    dependencies, request_module served from the tree): every compared word identical."""
    assert os.path.isdir(TREE), "the Debian module tree is an oracle input: make test-inputs"
    from armload.kernel.modtree import load_order, tree_index
    from armload.emu.booted.modrun import BootedRun
    k = Kernel.from_files([os.path.join(CACHE, "linux-headers-6.1.0-50-armmp", "usr", "src",
                                        "linux-headers-6.1.0-50-armmp", "Module.symvers"), BOOT_VMLINUZ], DEBIAN_ARMMP)
    run = BootedRun(BOOT_VMLINUZ, k, DEBIAN_ARMMP, tree=TREE)
    for p in load_order(os.path.join(TREE, rel), tree_index(TREE)):
        r = run.load(p, budget=2_000_000_000)
        assert r.loader.agrees and (r.loader.identical or r.status == "refused"), (p, r.loader.to_dict())
        if not r.ok:
            break


@pytest.mark.parametrize("name", ["mt7615_common", "mt76x02_lib", "libiscsi_tcp"])
def test_a_key_in_a_dependency_is_read_from_its_core_not_from_freed_init_memory(booted_dir, name):
    """Each of these has a jump-label site on a tracepoint key of a dependency (mt76, libiscsi),
    whose core the kernel's module_alloc placed where an earlier dependency's freed init memory
    was (cfg80211's, mac80211's, scsi_mod's). Reading the key's state from that stale init copy
    made armload patch the site to `b` where the kernel kept its `nop` (one .text word each, and
    in libiscsi for libiscsi_tcp's closure)."""
    from armload.kernel.modtree import load_order, tree_index
    from armload.emu.booted.modrun import BootedRun
    idx = tree_index(TREE)
    run = BootedRun(BOOT_VMLINUZ, Kernel.from_files([SYMVERS, BOOT_VMLINUZ], DEBIAN_ARMMP), DEBIAN_ARMMP, tree=TREE)
    order = load_order(idx[name], idx)
    for p in order:
        r = run.load(p)
        assert r.ok and r.loader.identical, (p, r.loader.to_dict())
    mods = run.session.modules
    assert any(i.init and not c.init and i.base <= c.base < i.end
               for k, a in enumerate(mods) for b in mods[k + 1:] for i in a.regions for c in b.regions), \
        "no core was placed over an earlier module's freed init memory: the case is not exercised"
    assert run.session.modules[-1].finalized.jump_entries > 0


def test_a_module_whose_init_failed_is_gone_from_the_session(run):
    """do_init_module frees a module whose init returned an error: its exports and memory are gone
    from armload's session too (a later module must not resolve against it nor read its words)."""
    r = run.load(sample("enodev-arm.ko"))
    assert (r.status, r.ret) == ("returned", -19)
    assert all(m.name != r.name for m in run.session.modules)
    assert all(t.module != r.name for t in run.session.export_tables)
    r = run.load(sample("exporter-arm.ko"))
    assert r.ok and r.name in {m.name for m in run.session.modules}
    assert run.unload(r.name)[0] == 0 and r.name not in {m.name for m in run.session.modules}


def test_check_a_loader_difference_is_its_own_outcome_and_fails_by_default(booted_dir, tmp_path, monkeypatch):
    """The kernel's verdict stays in the record's init; the outcome says armload's loader is wrong,
    in --fail-on by default, a JUnit <error> on the load stage, its own baseline key."""
    import shutil
    from armload.ci.baseline import outcome_key
    from armload.ci.outcomes import DEFAULT_FAIL_ON, OUTCOMES
    from armload.cli import main
    from armload.loader import finalize
    assert "loader-differs" in DEFAULT_FAIL_ON and OUTCOMES["loader-differs"][0] == "harness"
    tree = tmp_path / "tree"
    tree.mkdir()
    shutil.copy(sample("hello-arm.ko"), tree)
    args = ["check", str(tree), "--kernel", SYMVERS, "--kernel", BOOT_VMLINUZ, "-q",
            "--jobs", "1", "--no-timing"]
    assert main(args + ["--json", str(tmp_path / "ok.json")]) == 0
    assert json.loads((tmp_path / "ok.json").read_text())["modules"][0]["outcome"] == "ok"
    monkeypatch.setattr(finalize, "ARM_FTRACE_NOP", 0xE8BD4000)       # the pre-5.17 NOP: a loader bug
    rc = main(args + ["--json", str(tmp_path / "c.json"), "--junit", str(tmp_path / "j.xml")])
    assert rc == 1
    rec = json.loads((tmp_path / "c.json").read_text())["modules"][0]
    assert rec["outcome"] == "loader-differs" and rec["stage"] == "compare"
    assert rec["reason"] == "armload's image differs from the kernel's in 1 word(s) (.init.text: 1)"
    assert rec["where"].endswith("armload 0040bde8, kernel 04d08de2")
    assert (rec["init"]["status"], rec["init"]["retval"]) == ("returned", 0)        # the kernel's verdict
    assert outcome_key(rec) == "loader-differs"
    xml = (tmp_path / "j.xml").read_text()
    assert '<error message="loader-differs: armload' in xml and 'type="loader-differs"' in xml
    assert main(args + ["--fail-on", "none"]) == 0


def test_request_module_from_a_kernel_thread_and_without_waiting(booted_dir):
    """drbg's self-tests ask for algorithms from the cryptomgr_test kthread (no user mm: the nested
    load's parameters are a kernel string); 6lowpan asks for its nhc_* modules with
    request_module_nowait, served once its own load is done, and they find it loaded."""
    from armload.emu.booted.modrun import BootedRun
    k = Kernel.from_files([BOOT_VMLINUZ], DEBIAN_ARMMP)
    run = BootedRun(BOOT_VMLINUZ, k, DEBIAN_ARMMP, tree=TREE)
    r = run.load(os.path.join(TREE, "crypto/drbg.ko"))
    assert (r.status, r.ret) == ("returned", 0)
    assert any(q["request"] == "crypto-sha512" and q["status"] == 0 for q in run.requests)
    run = BootedRun(BOOT_VMLINUZ, k, DEBIAN_ARMMP, tree=TREE)
    r = run.load(os.path.join(TREE, "net/6lowpan/6lowpan.ko"))
    assert (r.status, r.ret) == ("returned", 0)
    assert [x.name for x in run.results][0] == "6lowpan"             # the nhc_* modules come after
    assert {"nhc_udp", "nhc_ipv6"} <= {x.name for x in run.results if x.ok}


def test_a_module_without_versions_is_force_loaded_as_the_debian_kernel_does(run, tmp_path):
    """CONFIG_MODULE_FORCE_LOAD=y: no __versions taints and loads (the booted kernel loads it);
    without the option armload refuses, as such a kernel would."""
    def rename(data, obj):
        import struct as st
        shoff, = st.unpack_from("<I", data, 0x20)
        shstrndx, = st.unpack_from("<H", data, 0x32)
        strtab = st.unpack_from("<10I", data, shoff + 40 * shstrndx)[4]
        name = st.unpack_from("<10I", data, shoff + 40 * obj.versions_index)[0]
        at = strtab + name
        assert data[at:at + 11] == b"__versions\0"
        data[at:at + 10] = b"__versionz"
    path = _patched(tmp_path, "hello-arm.ko", rename)
    r = run.load(path)
    assert (r.status, r.ret) == ("returned", 0) and r.loader.identical
    from armload.errors import SymbolError
    from armload.loader.session import Session
    symvers = os.path.join(CACHE, "linux-headers-6.1.0-50-armmp", "usr", "src", "linux-headers-6.1.0-50-armmp",
                           "Module.symvers")                       # with the kernel's CRCs
    s = Session(Kernel.from_files([symvers], DEBIAN_ARMMP), DEBIAN_ARMMP)
    assert "hello: no versions for imported symbols: kernel tainted." in s.load(path).warnings
    cfg = DEBIAN_ARMMP.with_(module_force_load=False)
    with pytest.raises(SymbolError, match="module has no __versions section"):
        Session(Kernel.from_files([symvers], cfg), cfg).load(path)
