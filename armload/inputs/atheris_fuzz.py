"""Coverage-guided fuzzing of armload with Atheris (libFuzzer for Python), issue 21.

The target is target.exercise (load with and without object=True, verify, report and explain,
init with a small instruction budget). The custom mutator mixes libFuzzer's byte mutations
with armload's structured ones: the one-field classes of fuzz.py (when the input still parses as
a module) and the stacked, per-cpu, string-table, rename and duplicate classes of mutators.py,
one or two per case, plus the control byte (object mode, placement, run, report, Thumb-2).
Seeds: sample_modules (.ko and plain .o), a few small Debian modules, tests/fuzz_seeds.

    python -m armload.inputs.atheris_fuzz [--time 600] [--corpus .cache/fuzz-corpus] [libFuzzer flags]

Needs the optional extra `fuzz` (pip install -e '.[fuzz]'). A crash is written under
.cache/fuzz-crashes/; minimise it (python -m armload.inputs.target FILE --minimise OUT, or
make fuzz-minimise FUZZ_MIN=FILE) and commit it to tests/fuzz_crashes/.
"""
from __future__ import annotations

import argparse
import glob
import os
import random
import sys

import atheris

with atheris.instrument_imports(include=["armload"]):
    from armload.inputs import booted_diff, target, mutators
    from armload.inputs import fuzz as structured
    from armload.loader import elf, layout, plt, relocate, session, symbols, verify, validity  # noqa: F401
    from armload.inspect import explain, report  # noqa: F401
    from armload.kernel import debian

ROOT = target.ROOT
DEBIAN = debian.MODULES
DEBIAN_SEEDS = ("drivers/char/hw_random/meson-rng.ko", "lib/crc-itu-t.ko", "drivers/leds/leds-gpio.ko",
                "net/802/stp.ko", "fs/nls/nls_cp437.ko", "net/netfilter/nf_dup_netdev.ko")  # the last has .data..percpu


def seed_files() -> list[str]:
    out = [p for p in sorted(glob.glob(os.path.join(ROOT, "sample_modules", "*.ko"))) if "-debug" not in p]
    out += sorted(glob.glob(os.path.join(ROOT, "sample_modules", "obj", "*.o")))
    out += [os.path.join(DEBIAN, p) for p in DEBIAN_SEEDS if os.path.exists(os.path.join(DEBIAN, p))]
    out += sorted(glob.glob(os.path.join(ROOT, "tests", "fuzz_seeds", "*")))
    return out


def seed_input(path: str) -> bytes:
    data = open(path, "rb").read()
    if data[:2] == target.PREFIX:
        return data
    flags = (1 if path.endswith(".o") else 0) | (16 if "thumb2" in os.path.basename(path) else 0)
    return target.with_flags(flags | 2, data)


def _structured(elf_bytes: bytes, rng: random.Random) -> bytes:
    """One of fuzz.py's one-field classes, when the input still parses as an object."""
    try:
        obj = elf.read_object("m.ko", elf_bytes, object=True)
    except Exception:                 # noqa: BLE001 - no longer a module: the other mutators take it
        return mutators.mutate_any(elf_bytes, rng)[0]
    import struct
    sd = structured.Seed("m.ko", elf_bytes, obj, None, struct.unpack_from("<I", elf_bytes, 32)[0],
                         struct.unpack_from("<H", elf_bytes, 48)[0])
    cls = rng.choice([c for c in structured.CLASSES if c not in ("ksymtab",)])
    try:
        return structured.mutate(sd, cls, rng)[0]
    except Exception:                 # noqa: BLE001 - the class needs a section this input lacks
        return mutators.mutate_any(elf_bytes, rng)[0]


def custom_mutator(data: bytes, max_size: int, seed: int) -> bytes:
    try:
        return _mutate(data, max_size, seed)
    except Exception as e:            # noqa: BLE001 - a mutator bug must not end the campaign: say it
        print(f"custom mutator failed ({type(e).__name__}: {e}); libFuzzer's mutation instead",
              file=sys.stderr)
        return atheris.Mutate(data, max_size)


def _mutate(data: bytes, max_size: int, seed: int) -> bytes:
    rng = random.Random(seed)
    flags, body = target.split(data)
    r = rng.random()
    if r < 0.25:
        body = atheris.Mutate(body, max(len(body), max_size - 3))
    else:
        for _ in range(rng.choice((1, 1, 2))):            # stacked: two mutations in one case
            body = _structured(body, rng) if rng.random() < 0.35 else mutators.mutate_any(body, rng)[0]
    if rng.random() < 0.2:
        flags ^= 1 << rng.randrange(8)
    return target.with_flags(flags, body)[:max(max_size, 3)]


def test_one_input(data: bytes) -> None:
    res = target.exercise(data)         # InternalError propagates: libFuzzer records the crash
    if res.flags & 2 and not res.flags & 17:   # bit 1, not an object nor Thumb-2: the booted kernel decides too
        booted_diff.check(target.split(data)[1])    # a Disagreement is a finding (booted_diff.py)


def main(argv=None) -> int:
    argv = list(sys.argv if argv is None else argv)
    p = argparse.ArgumentParser(prog="python -m armload.inputs.atheris_fuzz", add_help=True)
    p.add_argument("--time", type=int, default=600, help="seconds to run (libFuzzer -max_total_time)")
    p.add_argument("--corpus", default=os.path.join(ROOT, ".cache", "fuzz-corpus"))
    p.add_argument("--crashes", default=os.path.join(ROOT, ".cache", "fuzz-crashes"))
    a, rest = p.parse_known_args(argv[1:])
    os.makedirs(a.corpus, exist_ok=True)
    os.makedirs(a.crashes, exist_ok=True)
    if not os.listdir(a.corpus):
        for s in seed_files():
            with open(os.path.join(a.corpus, "seed-" + os.path.basename(s)), "wb") as f:
                f.write(seed_input(s))
    args = [argv[0], a.corpus, f"-max_total_time={a.time}", f"-artifact_prefix={a.crashes}/", "-timeout=20",
            "-rss_limit_mb=3072", "-max_len=1200000", "-print_final_stats=1"] + rest
    atheris.Setup(args, test_one_input, custom_mutator=custom_mutator)
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    sys.exit(main())
