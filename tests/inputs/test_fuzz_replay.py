"""Deterministic replay of the fuzzers' kept inputs (issue 21), without Atheris: every crash ever
found (tests/fuzz_crashes/, minimised) and the tiny seed corpus (tests/fuzz_seeds/, one input
per hostile class) through armload.inputs.target.exercise, the function the coverage-guided
fuzzer calls. Each must end as a refusal or an accepted load (never an InternalError), the seeds
as recorded in EXPECTED.json, each within the counted-operation budget of the campaign."""
import glob
import json
import os
import sys

import pytest

from testinputs import ROOT, require_input

from armload.inputs import fuzz, target

SEEDS = os.path.join(ROOT, "tests", "fuzz_seeds")
CRASHES = os.path.join(ROOT, "tests", "fuzz_crashes")
EXPECTED = json.load(open(os.path.join(SEEDS, "EXPECTED.json")))
FILES = sorted(p for p in glob.glob(os.path.join(SEEDS, "*")) + glob.glob(os.path.join(CRASHES, "*"))
               if not p.endswith((".json", ".md")))


def _budget(data: bytes) -> int:
    flags, _ = target.split(data)
    return fuzz.OPS_BASE + fuzz.OPS_PER_BYTE * len(data) + (400_000 if flags & 32 else 0)


@pytest.mark.parametrize("path", FILES, ids=lambda p: os.path.relpath(p, ROOT))
def test_replay(path):
    data = open(path, "rb").read()
    assert len(data) < 64 << 10, "keep committed fuzz inputs small"
    if target.split(data)[0] & 128:          # runs against the Debian kernel image
        require_input(target.VMLINUZ, "make test-inputs")
    target.exercise(data)                    # once unmeasured: the image's kallsyms and unwind index
    counter = fuzz._OpCounter()              # are parsed on first use and cached (not per case)
    sys.setprofile(counter)
    try:
        res = target.exercise(data)
    finally:
        sys.setprofile(None)
    assert res.outcome in ("accepted", "refused")
    name = os.path.basename(path)
    if path.startswith(SEEDS):
        assert [res.outcome, res.detail.replace(ROOT + "/", "")[:60]] == EXPECTED[name]
    assert counter.n < _budget(data), (counter.n, _budget(data))


def test_every_seed_is_replayed():
    assert sorted(EXPECTED) == sorted(os.path.basename(p) for p in FILES if p.startswith(SEEDS))
    assert len(EXPECTED) >= 8


def test_an_internal_error_is_raised_not_swallowed(monkeypatch):
    """The replay would notice a broken entry point: a non-ArmloadError is an InternalError."""
    from armload.loader import session
    monkeypatch.setattr(session, "_allocate_memory", lambda *a: (_ for _ in ()).throw(ValueError("boom")))
    with pytest.raises(target.InternalError, match="ValueError: boom"):
        target.exercise(open(os.path.join(ROOT, "sample_modules", "hello-arm.ko"), "rb").read())


def test_minimise_keeps_the_error_and_shrinks(monkeypatch):
    """A planted bug (hello's load raises ValueError): the minimised input clears the control
    bits that do not matter, is no larger and has fewer non-zero bytes, and still raises it."""
    from armload.loader import session
    real = session._load_object

    def buggy(obj, s):
        if obj.name == "hello":
            raise ValueError("planted")
        return real(obj, s)
    monkeypatch.setattr(session, "_load_object", buggy)
    data = target.with_flags(2 | 32, open(os.path.join(ROOT, "sample_modules", "hello-arm.ko"), "rb").read())
    small = target.minimise(data, max_tries=300)
    assert target.split(small)[0] == 0
    assert len(small) <= len(data) and sum(map(bool, small)) < sum(map(bool, data))
    with pytest.raises(target.InternalError, match="planted"):
        target.exercise(small)
    with pytest.raises(ValueError, match="no internal error"):
        monkeypatch.setattr(session, "_load_object", real)
        target.minimise(data)


def test_mutators_take_any_bytes():
    """The custom mutator's structured classes on inputs with 0, 1 or 2 section headers, cut
    headers and non-ELF bytes: always bytes back, never an exception (a one-section file ended
    the first coverage-guided run)."""
    import random
    import struct
    from armload.inputs import mutators
    hello = open(os.path.join(ROOT, "sample_modules", "hello-arm.ko"), "rb").read()
    inputs = [b"", b"\x7fELF", hello[:52], hello[:60], hello]
    for shnum in (0, 1, 2):
        b = bytearray(hello)
        struct.pack_into("<H", b, 48, shnum)
        inputs.append(bytes(b))
    rng = random.Random(5)
    for d in inputs:
        for _ in range(40):
            out, what = mutators.mutate_any(d, rng)
            assert isinstance(out, bytes) and what
