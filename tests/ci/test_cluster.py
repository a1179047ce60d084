"""`check --ray` on a local Ray instance: the same JSON as a local run, with one and with two
workers. Starting Ray takes seconds and a few hundred MB, so this file runs in `make test-cluster`
(pytest -m cluster), not in `make test`."""
from __future__ import annotations

import pytest

from testinputs import SYMVERS
from test_check import MOV_R0_0, make_tree, patch_init
from test_check_scale import LDR_R0_R0, MIX

from armload.cli import main

pytestmark = pytest.mark.cluster


def test_ray_gives_the_json_of_a_local_run(tmp_path):
    ray = pytest.importorskip("ray", reason="the cluster extra: pip install 'armload[cluster]'")
    tree = make_tree(tmp_path, *MIX)
    patch_init(tmp_path / "tree" / "exporter-arm.ko", MOV_R0_0, LDR_R0_R0)
    args = ["check", tree, "--kernel", SYMVERS, "-q", "--no-timing", "--fail-on", "none"]
    assert main([*args, "--jobs", "2", "--json", str(tmp_path / "local.json")]) == 0
    local = (tmp_path / "local.json").read_bytes()
    for cpus in ("1", "2"):
        try:
            assert main([*args, "--ray", "local", "--jobs", cpus, "--json", str(tmp_path / f"ray{cpus}.json")]) == 0
        finally:
            ray.shutdown()
        assert (tmp_path / f"ray{cpus}.json").read_bytes() == local, cpus
