"""The correct files score 100, and the files that change only given code keep every TODO point
and are told so (tests/corpus_cases.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.corpus_cases import CORRECT, GIVEN, check_correct, check_given, file_id, grade_side_by_side, sampled

pytestmark = pytest.mark.slow

FILES = sampled(CORRECT)


@pytest.fixture(scope="module", autouse=True)
def _graded_side_by_side() -> None:
    grade_side_by_side([*FILES, *GIVEN])


@pytest.mark.parametrize("path", FILES, ids=[file_id(p) for p in FILES])
def test_correct_submission_scores_100(path: Path) -> None:
    check_correct(path)


@pytest.mark.parametrize("path", GIVEN, ids=[p.stem for p in GIVEN])
def test_changed_given_code_is_said_and_costs_no_todo_points(path: Path) -> None:
    check_given(path)
