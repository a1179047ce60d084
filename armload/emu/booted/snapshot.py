"""The booted state on disk: .cache/boot/<key>/{ram.bin, state.pkl}, one per (vmlinuz, device
tree, command line, armload's boot code). The key hashes the kernel file, the DTB bytes, the
command line and the source of every file that shapes the booted state (hw/, booted/boot.py,
machine.py, initramfs.py), so a change to the hardware model boots again (the key's hashes are
kernel/cache.py's, the one cache pattern; the directory is its cache_dir("boot")).

ram.bin is the guest RAM as a sparse file (zero chunks are holes); a restore maps it
MAP_PRIVATE (copy-on-write: restores share its pages through the page cache, a write copies
one page), so restoring costs a mmap, a Uc and the hooks, not 256 MiB of copying.
state.pkl holds the CPU context (UcContext: registers, banked registers, cp15) and the
hardware model (GIC, PL011, timer, simulated time).
"""
from __future__ import annotations

import hashlib
import mmap
import os
import pickle
import sys

from ...kernel.cache import file_hash, source_hash
from .machine import RAM_SIZE, Machine

CHUNK = 1 << 16
_SOURCES = ("../hw/gic.py", "../hw/pl011.py", "../hw/timer.py", "../hw/cpu.py", "../hw/tick.py", "../hw/_tick.c", "../hw/c14.py", "../hw/_c14.c", "../arm_cond.h",
            "../hw/dtb.py", "boot.py", "machine.py", "initramfs.py", "snapshot.py")


def code_version() -> str:
    return source_hash(os.path.dirname(os.path.abspath(__file__)), _SOURCES)


def key(vmlinuz: str, dtb: bytes, cmdline: str) -> str:
    h = hashlib.sha256()
    h.update(file_hash(vmlinuz).encode())
    h.update(hashlib.sha256(dtb).digest())
    h.update(cmdline.encode() + b"\0" + code_version().encode())
    return h.hexdigest()[:24]


def save(m: Machine, directory: str, meta: dict) -> None:
    """Write the machine's RAM, CPU context and hardware state into `directory` (atomically)."""
    tmp = f"{directory}.tmp{os.getpid()}"
    os.makedirs(tmp, exist_ok=True)
    zero = bytes(CHUNK)
    with open(os.path.join(tmp, "ram.bin"), "wb") as f:
        mv = memoryview(m.ram)
        for o in range(0, RAM_SIZE, CHUNK):
            c = mv[o:o + CHUNK]
            if c == zero:
                f.seek(CHUNK, os.SEEK_CUR)
            else:
                f.write(c)
        f.truncate(RAM_SIZE)
        del mv
    m.hw.insns = m.t.insns
    state = {"context": m.uc.context_save(), "hw": m.hw, "meta": meta}
    with open(os.path.join(tmp, "state.pkl"), "wb") as f:
        pickle.dump(state, f)
    try:
        os.rename(tmp, directory)
    except OSError:                       # another process saved the same key first: keep theirs
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)


def load(image, directory: str) -> tuple[Machine, dict]:
    """A Machine in the saved state; its RAM is a private (copy-on-write) map of ram.bin."""
    with open(os.path.join(directory, "state.pkl"), "rb") as f:
        state = pickle.load(f)
    with open(os.path.join(directory, "ram.bin"), "rb") as f:
        ram = mmap.mmap(f.fileno(), RAM_SIZE, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    m = Machine(image, ram, state["hw"], booted=True)       # snapshots are taken once booted
    m.uc.context_restore(state["context"])
    return m, state["meta"]


def disk_bytes(directory: str) -> int:
    """Blocks actually used by the snapshot (ram.bin is sparse)."""
    return sum(os.stat(os.path.join(directory, f)).st_blocks * 512 for f in os.listdir(directory))


def announce(directory: str) -> None:
    print(f"booting the Debian kernel in Unicorn (once; cached in {directory})", file=sys.stderr, flush=True)
