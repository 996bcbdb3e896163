"""The two test commands (issue 47, item 1): `make test` runs every test, `make test-fast` the same
but those marked slow, and what takes minutes (the rack's end-to-end modules, the wheel builds)
is marked so."""

import shutil
import subprocess
import sys

import pytest

from conftest import ROOT


def _pytest_line(target: str) -> str:
    """The pytest command `make TARGET` runs (make -n prints it without running anything)."""
    r = subprocess.run(["make", "-n", "--no-print-directory", target], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    (line,) = [x for x in r.stdout.splitlines() if " -m pytest " in x]
    return line


def test_test_fast_leaves_out_the_slow_tests_and_test_runs_them_all():
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    assert '-m "not slow"' in _pytest_line("test-fast")
    assert " -m " not in _pytest_line("test").split(" -m pytest ", 1)[1]


def test_the_rack_and_the_wheel_builds_are_left_out_of_test_fast():
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only",
                        "-m", "not slow", "tests/integration", "tests/test_wheel_install.py", "tests/test_packaging.py"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 5 and "::" not in r.stdout, r.stdout[-2000:]  # 5: nothing collected
