"""Arrows point down: reading cells stands below stripping grader.check() lines, which stands below
reading a submission; a warm batch's judge runs the grading, never the command line."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT

LOADED = """
import json, sys
import {module}
{then}
print(json.dumps(sorted(m for m in sys.modules if m == "grader" or m.startswith("grader."))))
"""


def _loaded_by(module: str, then: str = "") -> set[str]:
    proc = subprocess.run([sys.executable, "-c", LOADED.format(module=module, then=then)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stdout))


def test_cell_reading_stands_below_check_stripping_below_submissions() -> None:
    assert "grader.submission" not in _loaded_by("grader.checkcalls")
    assert not {"grader.checkcalls", "grader.submission"} & _loaded_by("grader.cells")


def test_a_judge_never_loads_the_command_line() -> None:
    # What the judge server imports before it forks its first judge (all a judge has to start from).
    loaded = _loaded_by("grader.judge_server", "grader.judge_server._import_judge()") | _loaded_by("grader.runner")
    assert "grader.job" in loaded and "grader.checks" in loaded
    assert not {m for m in loaded if m == "grader.cli" or m.startswith("grader.commands")}, loaded
