"""The boot snapshot's key (armload/emu/booted/snapshot.py): 24 hex digits that change with each
of its inputs (the kernel file's bytes, the DTB, the command line, armload's boot code) and with
nothing else; and the boot code it hashes is the files that shape the booted state."""
import os
import re

from armload.emu.booted import snapshot


def test_the_key_follows_each_input_and_only_them(tmp_path, monkeypatch):
    v = tmp_path / "vmlinuz"
    v.write_bytes(b"kernel one")
    k0 = snapshot.key(str(v), b"dtb", "console=ttyAMA0")
    assert re.fullmatch(r"[0-9a-f]{24}", k0)
    assert snapshot.key(str(v), b"dtb", "console=ttyAMA0") == k0
    w = tmp_path / "copy"
    w.write_bytes(b"kernel one")
    assert snapshot.key(str(w), b"dtb", "console=ttyAMA0") == k0          # the bytes, not the path
    v.write_bytes(b"kernel two")
    k1 = snapshot.key(str(v), b"dtb", "console=ttyAMA0")
    assert k1 != k0
    others = {snapshot.key(str(v), b"dtb2", "console=ttyAMA0"), snapshot.key(str(v), b"dtb", "console=ttyAMA1")}
    # the command line and the code version are separated: moving a byte between them moves the key
    monkeypatch.setattr(snapshot, "code_version", lambda: "ab")
    a = snapshot.key(str(v), b"dtb", "x")
    monkeypatch.setattr(snapshot, "code_version", lambda: "b")
    b = snapshot.key(str(v), b"dtb", "xa")
    others |= {a, b}
    assert len(others | {k1}) == 5


def test_the_boot_code_is_the_hardware_model_and_the_boot(monkeypatch):
    here = os.path.dirname(snapshot.__file__)
    assert all(os.path.isfile(os.path.join(here, s)) for s in snapshot._SOURCES)
    names = {os.path.basename(s) for s in snapshot._SOURCES}
    assert {"gic.py", "pl011.py", "timer.py", "cpu.py", "boot.py", "machine.py", "initramfs.py",
            "snapshot.py", "_tick.c"} <= names
    v = snapshot.code_version()
    seen = []
    monkeypatch.setattr(snapshot, "source_hash", lambda d, s: seen.append((d, s)) or "h")
    assert snapshot.code_version() == "h" and seen == [(here, snapshot._SOURCES)] and v != "h"


def test_disk_bytes_counts_blocks_not_lengths(tmp_path):
    with open(tmp_path / "sparse", "wb") as f:
        f.truncate(64 << 20)
    (tmp_path / "full").write_bytes(b"x" * 10000)
    n = snapshot.disk_bytes(str(tmp_path))
    assert 10000 <= n < 1 << 20 and n % 512 == 0                 # st_blocks counts 512-byte units
