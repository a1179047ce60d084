"""The on-disk setup cache (armload/kernel/cache.py): a hit equals a fresh build, a changed
input file or a damaged entry is rebuilt, an empty ARMLOAD_SETUP_CACHE turns it off."""
import os

from armload.kernel import cache as setup_cache


def test_hit_miss_damage_and_off(tmp_path, monkeypatch):
    monkeypatch.setenv("ARMLOAD_SETUP_CACHE", str(tmp_path / "c"))
    src = tmp_path / "in.bin"
    src.write_bytes(b"one")
    calls = []

    def build():
        calls.append(1)
        return {"bytes": src.read_bytes(), "n": len(calls)}

    a = setup_cache.cached("t", [str(src)], "x", build)
    b = setup_cache.cached("t", [str(src)], "x", build)
    assert a == b == {"bytes": b"one", "n": 1} and len(calls) == 1          # the second is a hit
    assert setup_cache.cached("t", [str(src)], "y", build)["n"] == 2         # another key part: a miss
    src.write_bytes(b"two!")                                                  # new bytes (and size): a miss
    assert setup_cache.cached("t", [str(src)], "x", build) == {"bytes": b"two!", "n": 3}
    (entry,) = [p for p in (tmp_path / "c").iterdir() if p.stat().st_mtime_ns == max(
        q.stat().st_mtime_ns for q in (tmp_path / "c").iterdir())]
    entry.write_bytes(b"not a pickle")
    assert setup_cache.cached("t", [str(src)], "x", build)["n"] == 4         # damaged: rebuilt
    assert setup_cache.cached("t", [str(src)], "x", build)["n"] == 4         # and rewritten
    monkeypatch.setenv("ARMLOAD_SETUP_CACHE", "")
    assert setup_cache.cached("t", [str(src)], "x", build)["n"] == 5         # off: always built
    assert not any(p.name.endswith(".tmp") for p in (tmp_path / "c").iterdir())


def test_the_kernel_from_the_cache_equals_a_fresh_parse(tmp_path, monkeypatch):
    from testinputs import BOOT_VMLINUZ, SYMVERS, require_input
    require_input(BOOT_VMLINUZ, "make test-inputs")
    from armload.kernel.config import DEBIAN_ARMMP
    from armload.kernel.provider import Kernel
    monkeypatch.setenv("ARMLOAD_SETUP_CACHE", str(tmp_path))
    fresh = Kernel._from_files([SYMVERS, BOOT_VMLINUZ], DEBIAN_ARMMP)
    Kernel.from_files([SYMVERS, BOOT_VMLINUZ], DEBIAN_ARMMP)                 # stores
    hit = Kernel.from_files([SYMVERS, BOOT_VMLINUZ], DEBIAN_ARMMP)          # loads
    assert [n.split("-")[0] for n in os.listdir(tmp_path)].count("kernel") == 1
    assert hit.exports == fresh.exports and hit.symbols == fresh.symbols and hit.sources == fresh.sources
    assert hit.image_path == fresh.image_path and hit.vermagic == fresh.vermagic


def test_small_kernel_files_are_parsed_not_cached(tmp_path, monkeypatch):
    """Below CACHE_FROM_BYTES in all, parsing is cheaper than keying an entry: nothing is stored (and
    `armload load --kernel Module.symvers` with a small symvers never imports hashlib, test_layout)."""
    from testinputs import sample
    from armload.kernel.config import DEBIAN_ARMMP
    from armload.kernel.provider import CACHE_FROM_BYTES, Kernel
    monkeypatch.setenv("ARMLOAD_SETUP_CACHE", str(tmp_path / "c"))
    small = sample("Module.symvers")
    assert os.path.getsize(small) < CACHE_FROM_BYTES
    k = Kernel.from_files([small], DEBIAN_ARMMP)
    assert k.exports == Kernel._from_files([small], DEBIAN_ARMMP).exports and len(k.exports) > 10
    assert not (tmp_path / "c").exists()
    big = tmp_path / "Module.symvers"                    # the same exports, padded past the bound: stored
    big.write_bytes(open(small, "rb").read() + b"\n" * CACHE_FROM_BYTES)
    assert Kernel.from_files([str(big)], DEBIAN_ARMMP).exports == k.exports
    assert [n.split("-")[0] for n in os.listdir(tmp_path / "c")] == ["kernel"]


def test_one_directory_rule_for_every_cache(tmp_path, monkeypatch):
    """The setup cache, the kallsyms decode cache and the boot snapshots take their directory from
    kernel/cache.cache_dir: the kind's variable (empty: no cache), else <$CACHE>/kind, else ~/.cache/armload."""
    from armload.emu.booted.kernel import default_cache_root
    from armload.kernel.kallsyms import cache as KC
    monkeypatch.setenv("CACHE", str(tmp_path))
    assert default_cache_root() == str(tmp_path / "boot")
    assert KC.cache_dir() == str(tmp_path / "kallsyms")
    assert setup_cache.cache_dir("setup", "ARMLOAD_SETUP_CACHE") == str(tmp_path / "setup")
    monkeypatch.setenv("ARMLOAD_KALLSYMS_CACHE", "")
    assert KC.cache_dir() is None
    monkeypatch.setenv("ARMLOAD_KALLSYMS_CACHE", str(tmp_path / "k"))
    assert KC.cache_dir() == str(tmp_path / "k")
    monkeypatch.setenv("CACHE", str(tmp_path / "absent"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_root() == str(tmp_path / "home" / ".cache" / "armload" / "boot")


def test_source_hash_is_content_and_name(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "b.py").write_text("x = 1\n")
    ha, hb = setup_cache.source_hash(str(tmp_path), ["a.py"]), setup_cache.source_hash(str(tmp_path), ["b.py"])
    assert ha != hb                                   # the same bytes under another name: another version
    (tmp_path / "a.py").write_text("x = 2\n")
    assert setup_cache.source_hash(str(tmp_path), ["a.py"]) != ha
    assert setup_cache.tree_sources(str(tmp_path)) == ["a.py", "b.py"]
