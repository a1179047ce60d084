"""`armload matrix` on synthetic cells: three "kernel builds" made from the samples' own
Module.symvers (one with a changed CRC, one with a removed export, one with another flavour's
version magic), in the folder layout scripts/fetch-debs.sh unpacks Debian packages into."""
from __future__ import annotations

import glob
import json
import os
import shutil

import pytest

from testinputs import BOOT_VMLINUZ, SAMPLES, SYMVERS

from armload.cli import main

ARM = ("exporter", "importer", "kalloc", "deferred", "hello", "enodev")


def _move_init(data: bytes, by: int) -> bytes:
    """Move the relocations of .gnu.linkonce.this_module (init, exit) `by` bytes: a kernel
    whose struct module is laid out otherwise (rt-armmp has init at 0xc8, exit at 0x228)."""
    import io
    import struct
    from elftools.elf.elffile import ELFFile
    rel = ELFFile(io.BytesIO(data)).get_section_by_name(".rel.gnu.linkonce.this_module")
    out = bytearray(data)
    for i in range(rel["sh_size"] // 8):
        at = rel["sh_offset"] + 8 * i
        struct.pack_into("<I", out, at, struct.unpack_from("<I", out, at)[0] + by)
    return bytes(out)


def _cell(cache, release, edit=lambda lines: lines, vermagic=None, move_init=0):
    tree = cache / f"linux-image-{release}" / "lib" / "modules" / release / "kernel" / "drivers" / "misc"
    tree.mkdir(parents=True)
    for n in ARM:
        data = open(os.path.join(SAMPLES, f"{n}-arm.ko"), "rb").read()
        if vermagic:
            old = b"vermagic=6.1.0-50-armmp SMP mod_unload modversions ARMv7 p2v8 "
            new = f"vermagic={vermagic}".encode()
            assert old in data and len(new) <= len(old)
            data = data.replace(old, new + b"\0" * (len(old) - len(new)))
        if move_init:
            data = _move_init(data, move_init)
        (tree / f"{n}-arm.ko").write_bytes(data)
    if release == "6.1.0-50-armmp":          # the one cell with an image: its init runs inside the booted kernel
        boot = cache / f"linux-image-{release}" / "boot"
        boot.mkdir(parents=True)
        (boot / f"vmlinuz-{release}").symlink_to(BOOT_VMLINUZ)
    hdr = cache / f"linux-headers-{release}" / "usr" / "src" / f"linux-headers-{release}"
    hdr.mkdir(parents=True)
    (hdr / "Module.symvers").write_text("".join(edit(open(SYMVERS).read().splitlines(True))))


def _crc(name, value):
    return lambda lines: [f"{value}\t{name}" + x[x.index("\t" + name + "\t") + len(name) + 1:]
                          if f"\t{name}\t" in x else x for x in lines]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    c = tmp_path_factory.mktemp("cache")
    _cell(c, "6.1.0-50-armmp")
    _cell(c, "6.1.0-51-armmp", _crc("kmalloc_trace", "0x00000001"))
    _cell(c, "6.1.0-52-armmp", lambda lines: [x for x in lines if "\twake_up_process\t" not in x])
    _cell(c, "6.1.0-50-rt-armmp", vermagic="6.1.0-50-rt-armmp SMP preempt_rt mod_unload", move_init=-4)
    return str(c)


CELLS = ["6.1.0-50-armmp", "6.1.0-51-armmp", "6.1.0-52-armmp"]


def matrix(cache, tmp_path, *extra, cells=CELLS):
    out = str(tmp_path / "m.json")
    rc = main(["matrix", *(a for c in cells for a in ("--cell", c)), "--cache", cache, "--jobs", "1", "-q",
               "--json", out, "--no-timing", *extra])
    return rc, json.load(open(out))


def test_tree_matrix_names_crc_changes_and_removed_symbols(cache, tmp_path, capsys):
    rc, doc = matrix(cache, tmp_path)
    assert rc == 0 and doc["mode"] == "tree" and [c["release"] for c in doc["cells"]] == CELLS
    m = doc["modules"]
    k = m["drivers/misc/kalloc-arm.ko"]
    assert k["6.1.0-50-armmp"] == {"outcome": "ok", "loaded": True}
    assert k["6.1.0-51-armmp"] == {"outcome": "load symbol EINVAL", "loaded": False,
                                   "resolve": {"crc": ["kmalloc_trace"]}, "init": "not run"}
    assert k["6.1.0-52-armmp"] == {"outcome": "ok", "loaded": True, "init": "not run"}      # no image: no init
    d = m["drivers/misc/deferred-arm.ko"]
    assert d["6.1.0-52-armmp"] == {"outcome": "load symbol ENOENT", "loaded": False,
                                   "resolve": {"missing": ["wake_up_process"]}, "init": "not run"}
    assert m["drivers/misc/importer-arm.ko"]["6.1.0-50-armmp"] == {"outcome": "ok", "loaded": True}
    assert all(c["struct_module"] == {"size": 0x240, "name": 0x0C, "init": 0xCC, "exit": 0x230} for c in doc["cells"])
    assert [c["init"] for c in doc["cells"]] == ["run in this kernel booted"] + ["init not run: no kernel image for this cell (init runs "
                                                           "inside the booted kernel)"] * 2
    assert {c["module"]: c["kind"] for c in doc["changes"]} == {
        "drivers/misc/kalloc-arm.ko": "CRC change", "drivers/misc/deferred-arm.ko": "symbol removed"}
    assert doc["summary"] == {"modules": 6, "changing": 2, "kinds": {"CRC change": 1, "symbol removed": 1}}
    out = capsys.readouterr().out
    assert "modules whose result differs between cells: 2 of 6" in out
    row = next(x for x in out.splitlines() if x.startswith("drivers/misc/kalloc-arm.ko"))
    assert "load: CRC kmalloc_trace" in row


def test_out_of_tree_modules_on_another_flavour(cache, tmp_path):
    """Modules built for 6.1.0-50-armmp (the samples) loaded on each cell, the rt flavour included.
    The committed samples are copied apart: sample_modules/build/ (make samples' work folder) holds
    the same modules again, and a tree with two modules of one name keeps only the first."""
    oot = tmp_path / "oot"
    oot.mkdir()
    for ko in glob.glob(os.path.join(SAMPLES, "*-arm.ko")):
        shutil.copy(ko, oot)
    rc, doc = matrix(cache, tmp_path, "--modules", str(oot), "--module", "*-arm.ko",
                     cells=["6.1.0-50-armmp", "6.1.0-51-armmp", "6.1.0-50-rt-armmp"])
    assert doc["mode"] == "out-of-tree"
    m = doc["modules"]
    assert m["kalloc-arm.ko"]["6.1.0-51-armmp"]["resolve"] == {"crc": ["kmalloc_trace"]}
    rt = m["enodev-arm.ko"]["6.1.0-50-rt-armmp"]
    assert rt["outcome"] == "load ENOEXEC"
    assert rt["resolve"]["vermagic"]["kernel"].startswith("6.1.0-50-rt-armmp SMP preempt_rt")
    assert m["importer-arm.ko"]["6.1.0-50-rt-armmp"] == {"outcome": "dependency-failed exporter", "loaded": False,
                                                         "init": "not run"}
    kinds = {c["module"]: c["kind"] for c in doc["changes"]}
    assert kinds["enodev-arm.ko"] == "version magic" and kinds["importer-arm.ko"] == "dependency"


def test_matrix_refusals(cache, tmp_path, capsys):
    for extra, msg in ((["--cell", "6.1.0-49-armmp"], "kernel 6.1.0-49-armmp not found under"),
                       (["--cell", "armmp"], "is not a kernel release"),
                       (["--cell", "6.1.0-50-armmp", "--cell", "6.1.0-50-armmp"], "a --cell is given twice"),
                       (["--cell", "6.1.0-50-armmp", "--module", "nope"], "no module named or matching nope")):
        assert main(["matrix", "--cache", cache, "-q", *extra]) == 1
        err = capsys.readouterr().err
        assert msg in err and err.count("\n") == 1, err


def test_change_kind_rules():
    from armload.ci.matrix import change_kind
    ok = {"outcome": "ok"}
    assert change_kind({"a": ok, "b": ok}) is None
    no_init = {"outcome": "ok", "loaded": True, "init": "not run"}
    assert change_kind({"a": {"outcome": "error -ENODEV", "loaded": True}, "b": no_init}) is None
    assert change_kind({"a": {"outcome": "dependency-failed x", "loaded": False}, "b": no_init}) == "dependency"
    assert change_kind({"a": {"outcome": "error -ENODEV", "loaded": True}, "b": no_init,
                        "c": {"outcome": "ok", "loaded": True}}) == "init"
    assert change_kind({"a": ok, "b": None}) == "absent"
    assert change_kind({"a": ok, "b": {"outcome": "error -ENODEV"}}) == "init"
    assert change_kind({"a": ok, "b": {"outcome": "fault null-deref in f"}}) == "init"
    assert change_kind({"a": ok, "b": {"outcome": "dependency-failed x"}}) == "dependency"
    assert change_kind({"a": ok, "b": {"outcome": "load symbol EINVAL", "resolve": {"crc": ["f"]}}}) == "CRC change"
    assert change_kind({"a": ok, "b": {"outcome": "load symbol ENOENT", "resolve": {"missing": ["f"]}}}) == \
        "symbol removed"
    assert change_kind({"a": ok, "b": {"outcome": "load format ENOEXEC"}}) == "load"


def test_the_same_module_across_cells_and_why_its_verdict_changes():
    from armload.ci.matrix import evidence, first_difference, same_module
    assert same_module("fs/nls/nls_cp437.ko.xz") == same_module("fs/nls/nls_cp437.ko") == "fs/nls/nls_cp437.ko"
    a = evidence({"outcome": "ok", "init": {"status": "returned", "retval": 0,
                                            "console": ["[    1.5] x: probing", "[    1.6] x: ready"]}})
    b = evidence({"outcome": "error", "reason": "init returned -19 (-ENODEV)",
                  "init": {"status": "returned", "retval": -19, "console": ["[    2.5] x: probing"]}})
    c = evidence({"outcome": "ok", "init": {"status": "returned", "retval": 0,
                                            "console": ["[    3.5] x: probing", "[    3.7] x: ready at 2"]}})
    assert first_difference({"6.1": a, "6.12": b}, ["6.1", "6.12"]) == "6.1: returned; 6.12: init returned -19 (-ENODEV)"
    assert first_difference({"6.1": a, "6.12": c}, ["6.1", "6.12"]) == "6.1: 'x: ready'; 6.12: 'x: ready at 2'"
    assert first_difference({"6.1": a, "6.12": a}, ["6.1", "6.12"]) is None
    assert first_difference({"6.1": a}, ["6.1", "6.12"]) is None
