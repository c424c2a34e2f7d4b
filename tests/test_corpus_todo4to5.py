"""The buggy files of TODOs 4 and 5: each is caught in its own TODO and only there, with a
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

FILES = buggy_in("todo4", "todo5")


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


@pytest.mark.parametrize(
    "name, hint",
    [
        ("todo5_gqa_head_modulo", "h % num_kv_heads"),
        ("todo5_gqa_repeat_tile", "h % num_kv_heads"),
        ("todo5_no_scale", "not scaled"),
        ("todo5_double_scale", "1/head_dim"),
        ("todo5_ignores_seq_lens", "ignoring seq_len"),
    ],
)
def test_attention_failure_names_the_likely_mistake(name: str, hint: str) -> None:
    result = graded(CORPUS / "buggy" / f"{name}.py")
    messages = [i.failure.message.en for i in result.items if i.status == "failed" and i.failure]
    assert any(hint in message for message in messages), messages


@pytest.mark.parametrize("name", ["todo5_drops_last_token", "todo5_double_scale", "todo5_no_scale"])
def test_a_base_mistake_costs_every_feature_item(name: str) -> None:
    """Every feature item needs right values on its own cases: none is paid for output that is
    wrong wherever its feature is on, however consistently it handles its feature (each is
    blocked by the base item).  The inputs item is paid only for calls that returned the right
    result without touching their inputs: a scale applied twice, or not at all, is right where
    the scale is 1 (head_dim 1) or given, and those calls are its evidence."""
    items = {i.id: i for i in graded(CORPUS / "buggy" / f"{name}.py").items if i.todo == "todo5" and i.status != "not_run"}
    features = {i: item for i, item in items.items() if i not in ("todo5.mha_fp32", "todo5.inputs_unchanged")}
    assert items["todo5.mha_fp32"].status == "failed" and items["todo5.mha_fp32"].failure.kind == "wrong"
    assert all(item.status == "failed" and item.blocked_by == "todo5.mha_fp32" for item in features.values()), \
        [(i, item.status, item.blocked_by) for i, item in features.items()]


@pytest.mark.parametrize("name, item", [("todo5_gqa_head_modulo", "todo5.gqa"), ("todo5_returns_float32", "todo5.low_precision")])
def test_a_feature_mistake_costs_that_features_item_only(name: str, item: str) -> None:
    """A call wrong only because of one feature is that feature's: the same call without it is
    right, which is evidence for every other feature it keeps."""
    items = {i.id: i for i in graded(CORPUS / "buggy" / f"{name}.py").items if i.todo == "todo5"}
    assert [i for i, result in items.items() if result.status == "failed"] == [item]
