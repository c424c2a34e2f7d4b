"""A bug of the grader's own is that item's alone: said in the grader's words, exit 3, the other
items graded; a batch retries it once, cold, and the TA's row names the item if it stays."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

import grader.checks
from grader.config import load_config
from grader.discovery import Student
from grader.grade import grade_path, grader_error
from grader.gradebook import GRADED, Entry
from grader.results import GRADER_ERROR
from grader.runner import Outcome, Runner
from tests.conftest import ROOT

REFERENCE = ROOT / "reference" / "paged_attention.py"
SUBMISSION_TEXT = "the submission's own words 3f9a"


def _broken_check(ctx):
    raise KeyError(SUBMISSION_TEXT)  # as if a check had indexed with a value the submission sent


def test_a_check_that_raises_is_a_grader_error_of_that_item_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(grader.checks.CHECKS, "todo1.per_token", _broken_check)
    result = grade_path(REFERENCE, load_config(), "cpu", todos={"todo1"})
    items = {i.id: i for i in result.items}
    broken = items["todo1.per_token"]
    assert broken.status == "failed" and broken.failure.kind == GRADER_ERROR
    assert "KeyError at grade.py" in broken.failure.message.en  # the type and where in the grader, nothing else
    assert SUBMISSION_TEXT not in json.dumps(result.to_dict())  # never quoted as the grader's words
    assert items["todo1.per_block_and_total"].status == "passed"
    assert result.grader_errors() == ["todo1.per_token"] and result.error is None


def test_the_cli_exits_3_for_a_grader_error_and_still_writes_the_results(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from grader.cli import main

    monkeypatch.setitem(grader.checks.CHECKS, "todo1.per_token", _broken_check)
    assert main(["grade", str(REFERENCE), "--json", str(tmp_path / "r.json"), "--lang", "en"]) == 3
    payload = json.loads((tmp_path / "r.json").read_text())
    assert payload["score"] > 90  # every other item graded


def _outcome(result) -> Outcome:
    return Outcome(Student("alice", REFERENCE), "", GRADED, result, 1.0)


def _with_grader_error(result):
    try:
        raise KeyError("x")
    except KeyError as error:
        result.items[0].status, result.items[0].failure = "failed", grader_error(error)
    return result


@pytest.fixture(scope="module")
def todo1_graded():
    """TODO 1 of the reference, graded once for the tests below (each changes a copy)."""
    return grade_path(REFERENCE, load_config(), "cpu", todos={"todo1"})


def test_a_batch_retries_a_grader_error_once_cold(monkeypatch: pytest.MonkeyPatch, todo1_graded) -> None:
    config = load_config()
    broken = _with_grader_error(copy.deepcopy(todo1_graded))
    fine = copy.deepcopy(todo1_graded)
    calls: list[bool] = []

    def once(self, student, sha256, cold=False):
        calls.append(cold)
        return _outcome(fine if cold else broken)

    monkeypatch.setattr(Runner, "_grade_once", once)
    runner = Runner(config, [], 60.0)
    outcome = runner.grade(Student("alice", REFERENCE), "")
    assert calls == [False, True] and outcome.result is fine

    calls.clear()
    monkeypatch.setattr(Runner, "_grade_once", lambda self, student, sha256, cold=False: calls.append(cold) or _outcome(broken))
    outcome = runner.grade(Student("alice", REFERENCE), "")
    assert calls == [False, True] and outcome.result.grader_errors() == ["todo1.per_token"]


def test_the_tas_row_says_grader_error_with_the_item(todo1_graded) -> None:
    from grader import standing

    result = _with_grader_error(copy.deepcopy(todo1_graded))
    entry = Entry(row_id=1, student="alice", sha256="", config_digest="", source="batch", path="", submitted_at=None, graded_at="", status=GRADED, result=result)
    row = standing.of(entry, "en")
    assert row.status == standing.Status.GRADED and row.total is not None  # the other items' points stand
    assert row.reason.startswith("grader error: todo1.per_token")
