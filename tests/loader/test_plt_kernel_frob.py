"""armload's PLT counts and lib/sort.c order against the real kernel's own code, called in the
booted Debian kernel.

The Debian Image's module_frob_arch_sections sorts every exec REL table of a module in place
(lib/sort.c with cmp_rel) and sizes .plt/.init.plt; its count_plts counts each sorted table.
armload's v6 rule must give the same permutation and the same counts, on the samples and on a
spread of real Debian modules.
"""
import os

import numpy as np
import pytest

from armload.kernel.config import KernelConfig
from armload.loader.elf import read_object
from armload.loader.plt import count_plts, exec_rel_tables
from oracles.kernel_frob import kernel_frob
from armload.kernel import debian
from testinputs import ROOT

CACHE = os.path.join(ROOT, ".cache")
VMLINUZ = debian.VMLINUZ
TREE = debian.MODULES
SAMPLES = os.path.join(ROOT, "sample_modules")
PLT_ENT_SIZE, PLT_ENTRIES = 8, 128          # sizeof(struct plt_entries) / PLT_ENT_COUNT, sizeof(plt_entries)


@pytest.fixture
def machine(booted_dir):
    """A fresh restore of the booted kernel per test (the calls write into its memory)."""
    from armload.emu.booted.kernel import BootedKernel
    assert os.path.exists(VMLINUZ), "the Debian kernel image is an oracle input: make test-inputs"
    return BootedKernel.get(VMLINUZ)


def _round_up(n, m):
    return (n + m - 1) // m * m


def _corpus_sample(n=24):
    paths = []
    for d, _, fs in os.walk(TREE):
        paths += [os.path.join(d, f) for f in fs if f.endswith(".ko")]
    paths.sort()
    assert paths, "the Debian module tree is an oracle input: make corpus"
    return paths[:: max(1, len(paths) // n)][:n]


def _check(machine, path):
    data = open(path, "rb").read()
    obj = read_object(path, object=False) if "object" in read_object.__code__.co_varnames else read_object(path)
    cfg = KernelConfig()
    ours, orders = count_plts(obj, cfg, "v6")
    _, exact = count_plts(obj, cfg, "v6", exact_sort=True)
    theirs = kernel_frob(machine, data)
    assert theirs["rc"] == 0
    for t in exec_rel_tables(obj):
        rel = np.frombuffer(data, dtype="<u4", count=2 * len(t.r_info), offset=obj.sections[t.relsec].sh_offset)
        rel = rel.reshape(-1, 2)
        kernel = np.frombuffer(theirs["sorted"][t.relsec], dtype="<u4").reshape(-1, 2)
        # the exact lib/sort.c replay gives the kernel's permutation, ties included
        assert rel[exact[t.relsec]].tobytes() == kernel.tobytes(), f"{path}: exact sort of section {t.relsec} differs"
        # the fast order may permute entries that compare equal (same r_info), nothing else
        assert (rel[orders[t.relsec]][:, 1] == kernel[:, 1]).all(), f"{path}: key order of section {t.relsec} differs"
    # and the same counts, table by table and in .plt/.init.plt sizes
    init = sum(n for i, n in theirs["counts"].items() if i in theirs.get("init_tables", ()))
    core = sum(theirs["counts"].values()) - init
    assert (core + cfg.n_fixed_plts, init + cfg.n_fixed_plts) == (ours.core, ours.init)
    assert theirs["plt_size"] == _round_up(ours.core * PLT_ENT_SIZE, PLT_ENTRIES)
    assert theirs["init_plt_size"] == _round_up(ours.init * PLT_ENT_SIZE, PLT_ENTRIES)
    return theirs


@pytest.mark.parametrize("name", sorted(f for f in os.listdir(SAMPLES) if f.endswith("-arm.ko")))
def test_samples_match_the_kernels_frob(machine, name):
    _check(machine, os.path.join(SAMPLES, name))


def test_debian_modules_match_the_kernels_frob(machine):
    total = 0
    for p in _corpus_sample():
        total += sum(_check(machine, p)["counts"].values())
    assert total > 0
