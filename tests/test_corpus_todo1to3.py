"""The buggy files of TODOs 1 to 3: each is caught in its own TODO and only there, with a
reproduction that fails on it and runs clean on the reference (tests/corpus_cases.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import CORPUS, graded
from tests.corpus_cases import (
    buggy_in,
    check_buggy,
    check_chinese_cards_say_expected_actual_and_comments_in_chinese,
    check_no_card_shows_the_same_expected_and_actual,
    check_reproductions,
    file_id,
    grade_side_by_side,
)

pytestmark = pytest.mark.slow

FILES = buggy_in("todo1", "todo2", "todo3")


@pytest.fixture(scope="module", autouse=True)
def _graded_side_by_side() -> None:
    grade_side_by_side(FILES)


@pytest.mark.parametrize("path", FILES, ids=[file_id(p) for p in FILES])
def test_buggy_submission_is_caught_in_its_todo(path: Path) -> None:
    check_buggy(path)


def test_reproductions_fail_on_the_submission_and_pass_on_the_reference() -> None:
    check_reproductions(FILES)


def test_cards_show_what_differs_in_both_languages() -> None:
    check_no_card_shows_the_same_expected_and_actual(FILES)
    check_chinese_cards_say_expected_actual_and_comments_in_chinese(FILES)


def test_a_reproduction_ends_in_an_assert_stating_expected_and_actual() -> None:
    item = next(i for i in graded(CORPUS / "buggy" / "todo3_mod_eq_one.py").items if i.status == "failed")
    last = item.failure.repro.rstrip().splitlines()[-1]
    assert last.startswith("assert ") and ", f\"" in last, last


def test_correct_submission_gets_no_hint() -> None:
    result = graded(CORPUS / "buggy" / "todo1_no_kv_factor.py")
    assert not any("Hint" in (i.failure.message.en if i.failure else "") for i in result.items if i.todo == "todo5")


def test_a_decode_growth_bug_leaves_the_ownership_item_alone() -> None:
    items = {i.id: i for i in graded(CORPUS / "buggy" / "todo3_seq_len_not_stored.py").items}
    assert items["todo3.growth"].status == "failed"
    assert items["todo3.ownership"].status == "passed"
