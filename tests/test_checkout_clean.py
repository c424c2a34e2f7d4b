"""A test run that leaves a new file in the checkout fails (tests/conftest.py checks at the end)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT


def test_a_run_that_leaves_a_file_in_the_checkout_fails() -> None:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: nothing to compare with")
    module = ROOT / "tests" / "test_zz_leaves_a_file.py"
    left = ROOT / "results-left-by-a-test.json"
    module.write_text(f"def test_writes():\n    open({str(left)!r}, 'w').write('{{}}')\n")
    try:
        run = subprocess.run([sys.executable, "-m", "pytest", "-q", str(module)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    finally:
        module.unlink(missing_ok=True)
        left.unlink(missing_ok=True)
    assert run.returncode == 1, (run.stdout[-2000:], run.stderr[-2000:])
    assert "the test run left new files in the checkout" in run.stderr and left.name in run.stderr
