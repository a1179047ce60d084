"""Where the pytest plugin finds the kernel image (devkit.testing.find_kernel), in its order: the
option, the ini value, $ARMLOAD_KERNEL, the test tree's .cache, then $CACHE (else armload's own
checkout's .cache); nothing found, or an explicit path that does not exist, is one error with the fix."""
import os

import pytest

from armload.devkit import testing as T
from armload.errors import ArmloadError
from armload.kernel.debian import image_under


def _image(root):
    p = image_under(os.path.join(root, ".cache"))
    os.makedirs(os.path.dirname(p))
    open(p, "wb").close()
    return p


def test_the_search_order(tmp_path, monkeypatch):
    tree, other = _image(str(tmp_path / "tree")), _image(str(tmp_path / "other"))
    env = str(tmp_path / "env-vmlinuz")
    open(env, "wb").close()
    monkeypatch.setattr(T, "VMLINUZ", other)
    monkeypatch.setenv("ARMLOAD_KERNEL", env)
    assert T.find_kernel(option=other, ini=tree, root=str(tmp_path / "tree")) == (other, "--armload-kernel")
    assert T.find_kernel(ini=tree, root=str(tmp_path / "tree")) == (tree, "armload_kernel (ini)")
    assert T.find_kernel(root=str(tmp_path / "tree")) == (env, "$ARMLOAD_KERNEL")
    monkeypatch.delenv("ARMLOAD_KERNEL")
    assert T.find_kernel(root=str(tmp_path / "tree")) == (tree, f"{tmp_path / 'tree'}/.cache")
    monkeypatch.setenv("CACHE", str(tmp_path / "other" / ".cache"))
    assert T.find_kernel(root=str(tmp_path / "nothing")) == (other, "$CACHE")   # e.g. a staged copy (make mutants)


def test_nothing_or_a_missing_file_is_one_error_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.delenv("ARMLOAD_KERNEL", raising=False)
    monkeypatch.setattr(T, "VMLINUZ", str(tmp_path / "absent"))
    with pytest.raises(ArmloadError, match="no kernel image for the armload fixtures: fetch Debian's image once"):
        T.find_kernel(root=str(tmp_path))
    with pytest.raises(ArmloadError, match=r"--armload-kernel: no such kernel file '/nope'; fetch"):
        T.find_kernel(option="/nope", root=str(tmp_path))
    monkeypatch.setenv("ARMLOAD_KERNEL", str(tmp_path / "gone"))
    with pytest.raises(ArmloadError, match=r"\$ARMLOAD_KERNEL: no such kernel file"):
        T.find_kernel(root=str(tmp_path))
