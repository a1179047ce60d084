"""The fuzz target (issue 14): a deterministic mutator over the samples, a few hundred cases.

Every case must end in a kernel-style refusal (an ArmloadError) or a load whose image verifies;
never in an internal error. Cost per case is bounded in operations (Python calls, counted) and
traced memory, proportional to the file and to the module memory the simulated kernel handed
out. `make fuzz` runs the long campaign (FUZZ_CASES, default 20000)."""
import random

import pytest

from armload.inputs import fuzz

N_CASES = 24 * len(fuzz.CLASSES)   # 24 per class
N_RUN_CASES = 48               # 4 per class, loaded and inited by the booted kernel


@pytest.fixture(scope="module")
def stats():
    return fuzz.campaign(N_CASES, seed_value=14)


@pytest.fixture(scope="module")
def run_stats():
    """Cases whose accepted modules the booted kernel's own load_module loads and inits
    (fuzz.booted_init): every one of them would be an internal error if the campaign's import of
    the booted kernel broke (the model's did, issue 21)."""
    return fuzz.campaign(N_RUN_CASES, seed_value=21, run=True, measure=False)


def test_init_runs_on_accepted_cases(run_stats):
    assert run_stats.internal == [], "\n".join(run_stats.internal)
    accepted = sum(c["accepted"] for c in run_stats.by_class.values())
    ran = sum(n for k, n in run_stats.runs.items() if k != "not run")
    assert accepted > N_RUN_CASES // 4 and ran >= accepted - run_stats.runs.get("not run", 0) > 0
    assert run_stats.runs.get("returned 0", 0) > 0, run_stats.runs


def test_no_internal_errors(stats):
    assert stats.cases == N_CASES
    assert stats.internal == [], "\n".join(stats.internal)


def test_accepted_cases_verify(stats):
    assert stats.unverified == [], "\n".join(stats.unverified)


def test_cost_within_budget(stats):
    assert stats.over_budget == [], "\n".join(stats.over_budget)
    assert 0 < stats.max_ops < fuzz.OPS_BASE + fuzz.OPS_PER_BYTE * 10_000


def test_every_class_is_exercised_both_ways(stats):
    for cls in fuzz.CLASSES:
        c = stats.by_class[cls]
        if cls not in ("dup", "duplicated"):   # duplicated headers: 6.1 mostly takes the first (or last) and loads
            assert c["refused"] > 0, (cls, c)
        if cls not in ("truncate", "non_elf"):   # a truncated module, a non-ELF file never load
            assert c["accepted"] > 0, (cls, c)


def test_mutator_is_deterministic():
    seeds = fuzz.default_seeds()
    for i in (0, 7, 131):
        a, _ = fuzz.make_case(seeds, i, 3)
        b, _ = fuzz.make_case(seeds, i, 3)
        assert (a.data, a.what, a.placement) == (b.data, b.what, b.placement)
        assert a.data != seeds[0].data or a.cls == "byteflip"


def test_budget_catches_a_per_entry_loop(monkeypatch):
    """The operation count is what would have caught the 11 s __ksymtab loop: a loop over an
    attacker-sized table blows the budget."""
    seeds = fuzz.default_seeds()
    from armload.loader import session as loader
    from armload.errors import ArmloadError
    real = loader.read_object
    for i in range(64):                   # a case whose file parses, so the slow path is reached
        case, sd = fuzz.make_case(seeds, i, 1)
        try:
            real(case.seed, case.data, object=sd.object) if hasattr(sd, "object") else real(case.seed, case.data)
            break
        except ArmloadError:
            continue

    def slow(*a, **kw):
        obj = real(*a, **kw)
        for _ in range(fuzz.OPS_BASE + fuzz.OPS_PER_BYTE * len(case.data) + 1):
            len(())
        return obj
    monkeypatch.setattr(loader, "read_object", slow)
    from armload.kernel.provider import Kernel
    import tracemalloc
    tracemalloc.start()
    try:
        out = fuzz.run_case(case, sd, {sd.config: Kernel.builtin(sd.config)}, verify=False)
    finally:
        tracemalloc.stop()
    assert "operations > budget" in out.over_budget


def test_unexplained_branch_failure_is_reported():
    """A branch site that still holds a BL but lands elsewhere is armload's fault and must be
    reported; a site whose word is no longer a branch is the input's."""
    from armload.kernel.provider import Kernel
    from armload.loader.session import Session
    from armload.loader.verify import verify_module
    import struct
    seeds = fuzz.default_seeds()
    sd = next(s for s in seeds if s.path.endswith("hello-arm.ko"))
    mod = Session(Kernel.builtin(sd.config), sd.config).load(sd.path)
    site = int(mod.branches["place"][0])
    r = mod.region_of(site)
    w, = struct.unpack_from("<I", r.data, site - r.base)
    struct.pack_into("<I", r.data, site - r.base, (w & 0xFF000000) | ((w + 1) & 0xFFFFFF))
    res = verify_module(mod)
    assert not res.ok and fuzz._unexplained(mod, res)
    struct.pack_into("<I", r.data, site - r.base, 0xE1A00000)       # mov r0, r0: not a branch
    res = verify_module(mod)
    assert not res.ok and not fuzz._unexplained(mod, res)
