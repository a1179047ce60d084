"""The plugin's forked tests and pytest's setup state: a test forked in a directory whose earlier
test ran in the parent must leave the parent's collectors torn down for the next test, as pytest's
own teardown phase would (the suite's wing folders met this under pytest-xdist: "previous item was
not torn down properly")."""
import subprocess
import sys

from testinputs import BOOT_VMLINUZ, ROOT, require_input


def test_a_forked_test_between_directories_leaves_the_setup_state_clean(tmp_path):
    require_input(BOOT_VMLINUZ, "make test-inputs")
    for d, body in (("a", "def test_a():\n    pass\n"),
                    ("b", "def test_b0():\n    pass\n\n\ndef test_b(kernel):\n    assert kernel is not None\n"),
                    ("c", "def test_c():\n    pass\n")):
        (tmp_path / d).mkdir()
        (tmp_path / d / f"test_{d}.py").write_text(body)
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--armload-kernel", BOOT_VMLINUZ,
                        "a/test_a.py", "b/test_b.py", "c/test_c.py"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=600, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ROOT, "HOME": str(tmp_path)})
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "4 passed" in p.stdout and "error" not in p.stdout.lower()
