"""The worker starts while the judge still reads the submission (Sandbox.start_early, grade_path).

The cells go to it when they are known; a file load_submission will refuse starts no worker;
a sandbox closed before loading leaves no process and no folder behind; a start that fails is
reported by load() as before.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grader import grade
from grader.cells import Cell
from grader.config import load_config
from grader.folder import plan
from grader.sandbox.client import Sandbox

CONFIG = load_config()


def _notebook(path: Path, *sources: str) -> Path:
    cells = [{"cell_type": "code", "metadata": {}, "source": s, "outputs": [], "execution_count": None} for s in sources]
    path.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells}))
    return path


@pytest.mark.parametrize(("name", "data"), [
    ("empty.ipynb", b""),
    ("binary.ipynb", b"\x00\x01\x02"),
    ("latin1.py", "x = 'é'".encode("latin-1")),
    ("not_json.ipynb", b"{ this is not json"),
    ("a_list.ipynb", b"[1, 2]"),
    ("deep.ipynb", b"[" * 100_000),
    ("notes.txt", b"x = 1\n"),
])
def test_a_file_that_will_not_load_starts_no_worker(tmp_path: Path, name: str, data: bytes) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    assert grade._started_early(path, plan(path, None, CONFIG.notebook), CONFIG, "cpu") is None


def test_a_sandbox_closed_before_its_cells_came_leaves_nothing(tmp_path: Path) -> None:
    path = _notebook(tmp_path / "nb.ipynb", "x = 1")
    sandbox = grade._started_early(path, plan(path, None, CONFIG.notebook), CONFIG, "cpu")
    assert sandbox is not None
    folder = sandbox.tmp
    sandbox.close()
    assert sandbox.process is None and not folder.exists()
    sandbox.close()  # twice: nothing more to do


def test_cells_given_after_the_start_are_the_ones_run(tmp_path: Path) -> None:
    path = _notebook(tmp_path / "nb.ipynb", "x = 1")
    sandbox = grade._started_early(path, plan(path, None, CONFIG.notebook), CONFIG, "cpu")
    assert sandbox is not None
    with sandbox:
        sandbox.cells = [Cell(1, "answer = 6 * 7"), Cell(2, "def estimate_kv_cache_bytes(*args):\n    return answer")]
        report = sandbox.load()
        assert report.failed is None, report.failed
        assert [c.status for c in report.cells] == ["ok", "ok"]
        assert report.names["estimate_kv_cache_bytes"]["kind"] == "function"  # the cells given late, not the empty list


def test_a_start_that_fails_is_reported_by_load(tmp_path: Path) -> None:
    sandbox = Sandbox([Cell(1, "x = 1")], CONFIG.limits, python=str(tmp_path / "no-such-python"))
    with sandbox:
        sandbox.start_early()
        report = sandbox.load()
    assert report.failed is not None and "could not start" in report.failed


def test_grading_a_notebook_that_nbformat_refuses_still_gives_a_scorecard(tmp_path: Path) -> None:
    path = tmp_path / "v2.ipynb"
    path.write_text(json.dumps({"nbformat": 2, "cells": []}))  # a JSON object: a worker starts, then is stopped
    result = grade.grade_path(path, CONFIG, "cpu")
    assert result.error is not None and result.error.kind == "unreadable"
    assert "nbformat 2" in result.error.message.en
