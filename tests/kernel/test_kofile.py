"""Compressed modules (.ko.xz, .ko.zst, .ko.gz) read as kmod reads them (armload/kernel/kofile.py),
in the loader, the tree scan and index, check, and the booted kernel's load path."""
import gzip
import json
import lzma
import os
import shutil

import pytest
import zstandard

from testinputs import BOOT_VMLINUZ, SYMVERS, sample
from armload.cli import main
from armload.errors import ElfFormatError
from armload.kernel import kofile
from armload.loader.elf import read_object

PACK = {".ko.xz": lambda d: lzma.compress(d, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC32),
        ".ko.zst": lambda d: zstandard.ZstdCompressor().compress(d),
        ".ko.gz": gzip.compress}


def _packed(tmp_path, name, suffix):
    data = open(sample(f"{name}-arm.ko"), "rb").read()
    p = tmp_path / f"{name}-arm{suffix}"
    p.write_bytes(PACK[suffix](data))
    return str(p), data


@pytest.mark.parametrize("suffix", sorted(PACK))
def test_each_format_reads_as_the_plain_module(tmp_path, suffix):
    path, data = _packed(tmp_path, "hello", suffix)
    assert kofile.read_module(path) == data
    assert kofile.compression_of(open(path, "rb").read()) == {".ko.xz": "xz", ".ko.zst": "zstd", ".ko.gz": "gzip"}[suffix]
    obj = read_object(path)
    assert obj.name == "hello" and obj.data == data


def test_the_magic_decides_not_the_name(tmp_path):
    """kmod_file_open tests the first bytes: a gzip stream named .ko is inflated, a plain ELF named
    .ko.xz is read as it is."""
    data = open(sample("hello-arm.ko"), "rb").read()
    (tmp_path / "a.ko").write_bytes(gzip.compress(data))
    (tmp_path / "b.ko.xz").write_bytes(data)
    assert kofile.read_module(str(tmp_path / "a.ko")) == data
    assert kofile.read_module(str(tmp_path / "b.ko.xz")) == data
    assert kofile.compression_of(b"\x7fELF") is None and kofile.compression_of(b"") is None


@pytest.mark.parametrize("suffix", sorted(PACK))
def test_a_corrupt_or_truncated_stream_is_one_clear_error(tmp_path, suffix, capsys):
    path, _ = _packed(tmp_path, "hello", suffix)
    raw = open(path, "rb").read()
    (tmp_path / f"t{suffix}").write_bytes(raw[:len(raw) // 2])
    bad = bytearray(raw)
    for i in range(24, min(len(bad), 400)):
        bad[i] ^= 0x5A
    (tmp_path / f"c{suffix}").write_bytes(bytes(bad))
    with pytest.raises(ElfFormatError, match="stream is truncated"):
        kofile.read_module(str(tmp_path / f"t{suffix}"))
    with pytest.raises(ElfFormatError, match="stream is (corrupt|truncated)"):
        kofile.read_module(str(tmp_path / f"c{suffix}"))
    assert main(["load", str(tmp_path / f"t{suffix}"), "--kernel", SYMVERS]) != 0
    err = capsys.readouterr().err
    assert "stream is truncated" in err and "Traceback" not in err


def test_names_as_depmod_and_modprobe_take_them():
    assert [kofile.is_module_file(n) for n in ("a.ko", "a.ko.xz", "a.ko.zst", "a.ko.gz", "a.ko.bz2", "a.o", "ko")] \
        == [True, True, True, True, False, False, False]
    assert kofile.module_stem("/x/nf-conntrack.ko.xz") == "nf_conntrack"
    assert kofile.module_stem("nls_cp437.ko") == "nls_cp437" and kofile.module_stem("a.ko.zst") == "a"


def test_who_decompresses_follows_the_kernel_config():
    """kmod gives the kernel the compressed file only when /sys/module/compression names its format."""
    xz = PACK[".ko.xz"](b"\x7fELF")
    cfg_612 = {"CONFIG_MODULE_DECOMPRESS": "y", "CONFIG_MODULE_COMPRESS_XZ": "y"}
    assert kofile.kernel_format(cfg_612) == "xz" and kofile.kernel_decompresses(xz, cfg_612)
    assert not kofile.kernel_decompresses(gzip.compress(b"\x7fELF"), cfg_612)
    assert not kofile.kernel_decompresses(b"\x7fELF", cfg_612)
    assert kofile.kernel_format({"CONFIG_MODULE_COMPRESS_XZ": "y"}) is None        # no MODULE_DECOMPRESS
    assert kofile.kernel_format({}) is None and kofile.kernel_format(None) is None


def test_check_walks_compressed_modules_and_resolves_their_dependencies(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    _packed(tree, "exporter", ".ko.zst")
    _packed(tree, "importer", ".ko.xz")
    _packed(tree, "hello", ".ko.gz")
    out = tmp_path / "c.json"
    assert main(["check", str(tree), "--kernel", SYMVERS, "-q", "--jobs", "1", "--no-emulate",
                 "--json", str(out)]) == 0
    recs = {r["module"]: r for r in json.loads(out.read_text())["modules"]}
    assert set(recs) == {"exporter-arm.ko.zst", "importer-arm.ko.xz", "hello-arm.ko.gz"}
    assert all(r["outcome"] == "ok" for r in recs.values())
    assert recs["importer-arm.ko.xz"]["depends"] == ["exporter"]
    assert recs["importer-arm.ko.xz"]["symbols"]["from_modules"] == {"exporter": ["armload_sample_add", "armload_sample_counter"]}
    # the file's hash is of the file; the build-id is the ELF's, inside the stream
    plain = tmp_path / "plain"
    plain.mkdir()
    shutil.copy(sample("hello-arm.ko"), plain)
    assert main(["check", str(plain), "--kernel", SYMVERS, "-q", "--jobs", "1", "--no-emulate",
                 "--json", str(tmp_path / "p.json")]) == 0
    p = json.loads((tmp_path / "p.json").read_text())["modules"][0]
    assert p["build_id"] == recs["hello-arm.ko.gz"]["build_id"] and p["sha256"] != recs["hello-arm.ko.gz"]["sha256"]


def test_booted_6_1_has_no_in_kernel_decompression_so_kmod_inflates(booted_dir, tmp_path):
    """Debian 6.1 armmp: no CONFIG_MODULE_DECOMPRESS (no /sys/module/compression), so kmod inflates
    the file and calls init_module: the kernel's image is armload's, byte for byte."""
    from armload.emu.booted.modload import kernel_compression
    from armload.emu.booted.modrun import BootedRun
    from armload.kernel.config import DEBIAN_ARMMP
    from armload.kernel.provider import Kernel
    run = BootedRun(BOOT_VMLINUZ, Kernel.from_files([SYMVERS, BOOT_VMLINUZ], DEBIAN_ARMMP), DEBIAN_ARMMP)
    assert kernel_compression(run.bk) is None
    for name, suffix in (("exporter", ".ko.xz"), ("importer", ".ko.zst")):
        path, _ = _packed(tmp_path, name, suffix)
        r = run.load(path)
        assert r.ok and r.loader.identical and r.decompressed_by == "kmod", r.to_dict()
        assert r.to_dict()["decompressed_by"].startswith("kmod in user space")
    plain = run.load(sample("hello-arm.ko"))
    assert plain.ok and plain.decompressed_by == "" and "decompressed_by" not in plain.to_dict()


def test_a_compressed_modules_dwarf_is_read_through_the_stream(tmp_path):
    """Line tables and addr2line (oops decoding, coverage, sanitizers) read .ko.xz too: the 6.12
    tree's check ended in ELFError 'Magic number does not match' when an oops was decoded."""
    from armload.emu.debuginfo import line_table, module_addr2line
    from armload.kernel.config import DEBIAN_ARMMP
    from armload.kernel.provider import Kernel
    from armload.loader.session import Session
    data = open(sample("devkit-arm-debug.ko"), "rb").read()
    packed = tmp_path / "devkit-arm-debug.ko.xz"
    packed.write_bytes(PACK[".ko.xz"](data))
    k = Kernel.from_files([SYMVERS], DEBIAN_ARMMP)
    plain = Session(k, DEBIAN_ARMMP).load(sample("devkit-arm-debug.ko"))
    xz = Session(k, DEBIAN_ARMMP).load(str(packed))
    assert len(line_table(xz).addrs) == len(line_table(plain).addrs) > 0
    assert module_addr2line(xz) is not None
