"""Three plain command lines that ended in an internal error (issue 33): each now does its job or
gives one clear error. The whole command-line surface is exercised in test_readme.py (COMMAND_LINES)."""
from __future__ import annotations

import json
import sys
import types

from testinputs import SYMVERS, sample

from armload.cli import main


def test_verify_json_is_json(capsys):
    """`verify MODULE --json`: VerifyResult went to json.dump as an object (TypeError)."""
    assert main(["verify", sample("hello-arm.ko"), "--kernel", SYMVERS, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is True and [m["module"] for m in out["modules"]] == ["hello"]
    m = out["modules"][0]
    assert m["ok"] and m["branches_verified"] == m["branches_total"] > 0
    assert m["plt_verified"] == m["plt_total"] and m["branch_failures"] == [] == m["plt_failures"]


def test_verify_json_failure_is_json(capsys, monkeypatch):
    """The other side: a failing verification is still a JSON document, exit 1."""
    from armload.loader import verify as v
    real = v.verify_module

    def failing(m, k):
        r = real(m, k)
        r.plt_failures.append(v.PltFailure(0x100, "printk", 0x201, None, "planted"))
        return r
    monkeypatch.setattr(v, "verify_module", failing)
    assert main(["verify", sample("hello-arm.ko"), "--kernel", SYMVERS, "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False and len(out["modules"][0]["plt_failures"]) == 1
    f = out["modules"][0]["plt_failures"][0]
    assert f["symbol"] == "printk" and f["reason"] == "planted"


def test_bench_kallsyms_arm_reaches_its_result(monkeypatch, capsys):
    """`bench kallsyms-arm`: a function-local `import os` further down (task-rename) made `os` a
    local of the whole dispatcher, unbound where kallsyms-arm reads it (UnboundLocalError). The
    benchmark itself is replaced by a recorder: this is the dispatcher's test (the real benchmark
    runs in test_readme.py, COMMAND_LINES)."""
    from armload.bench import kallsyms_arm
    seen = []
    monkeypatch.setattr(kallsyms_arm, "run_benchmark", lambda image: seen.append(image) or {"rows": []})
    monkeypatch.setattr(kallsyms_arm, "print_benchmark", lambda r: print("table"))
    assert main(["bench", "kallsyms-arm"]) == 0
    assert seen and seen[0].endswith("vmlinuz-6.1.0-50-armmp")
    assert "table" in capsys.readouterr().out


class _NoCluster(types.ModuleType):
    """A stand-in for `ray` whose init behaves as Ray's does with no head running."""

    def __init__(self):
        super().__init__("ray")
        self.calls = []

    def is_initialized(self):
        return False

    def init(self, address=None, **kw):
        self.calls.append(address)
        if address != "local" and address is not None:
            raise ConnectionError("Could not find any running Ray instance. Please specify the one to connect to "
                                  "by setting `--address` flag or `RAY_ADDRESS` environment variable.")


def test_ray_auto_without_a_cluster_says_how_to_start_one(monkeypatch, capsys, tmp_path):
    fake = _NoCluster()
    monkeypatch.setitem(sys.modules, "ray", fake)
    tree = tmp_path / "t"
    tree.mkdir()
    (tree / "hello-arm.ko").write_bytes(open(sample("hello-arm.ko"), "rb").read())
    rc = main(["check", str(tree), "--kernel", SYMVERS, "-q", "--ray", "auto"])
    err = capsys.readouterr().err
    assert rc == 1 and fake.calls == ["auto"], (rc, err)
    assert "internal error" not in err
    assert "--ray auto: no running Ray cluster (Could not find any running Ray instance" in err
    assert "ray start --head" in err


def test_ray_local_still_starts_its_own(monkeypatch):
    """The other side: "local" starts an instance and does not ask for a cluster."""
    from armload.ci import cluster
    fake = _NoCluster()
    monkeypatch.setitem(sys.modules, "ray", fake)
    fake.init = lambda address=None, num_cpus=None, **kw: fake.calls.append(("local", num_cpus))
    assert cluster.connect("local", 2) is fake and fake.calls == [("local", 2)]
