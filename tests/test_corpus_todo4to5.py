"""The buggy files of TODOs 4 and 5: each is caught in its own TODO and only there, with a
reproduction that fails on it and runs clean on the reference (tests/corpus_cases.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from grader.config import load_config
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
def test_a_base_mistake_costs_the_base_item_and_no_feature_is_paid_where_it_went_unchecked(name: str) -> None:
    """Output wrong almost everywhere: the base item fails on a case of its own.  No feature item
    fails on its own account (the mistake is none of theirs); each is paid only for right calls
    of its own, and is blocked by the base item where too few were right.  The scale's item is
    never paid here: its right calls (a peaked softmax, or a scale of 1) are right again with a
    flat softmax and a scale of 1/sqrt(head_dim) in none of these files."""
    items = {i.id: i for i in graded(CORPUS / "buggy" / f"{name}.py").items if i.todo == "todo5" and i.status != "not_run"}
    features = {i: item for i, item in items.items() if i not in ("todo5.mha_fp32", "todo5.inputs_unchanged")}
    assert items["todo5.mha_fp32"].status == "failed" and items["todo5.mha_fp32"].failure.kind == "wrong"
    assert all(item.status == "passed" or item.blocked_by == "todo5.mha_fp32" for item in features.values()), \
        [(i, item.status, item.blocked_by) for i, item in features.items()]
    assert features["todo5.scale_and_stability"].blocked_by == "todo5.mha_fp32"


def test_calls_right_only_because_the_softmax_peaked_do_not_pay_the_scale() -> None:
    """With seed 1, calls that drop the last token were right where the softmax peaked on another
    token (queries boosted 30 to 100 times): a peaked softmax picks one token whatever the scale,
    and `scale_and_stability` was paid on them.  Now its calls count only where their base
    counterpart (float32, a flat softmax: grader/checks/attention_evidence.py) is right too."""
    config = load_config()
    config = dataclasses.replace(config, hypothesis=dataclasses.replace(config.hypothesis, seed=1), digest=config.digest + "-seed1")
    items = {i.id: i for i in graded(CORPUS / "buggy" / "todo5_drops_last_token.py", config).items}
    scale = items["todo5.scale_and_stability"]
    assert scale.status == "failed" and scale.blocked_by == "todo5.mha_fp32", (scale.status, scale.failure and scale.failure.message.en)


@pytest.mark.parametrize("name, item", [("todo5_gqa_head_modulo", "todo5.gqa"), ("todo5_returns_float32", "todo5.low_precision")])
def test_a_feature_mistake_costs_that_features_item_only(name: str, item: str) -> None:
    """A call wrong only because of one feature is that feature's: the same call without it is
    right, which is evidence for every other feature it keeps."""
    items = {i.id: i for i in graded(CORPUS / "buggy" / f"{name}.py").items if i.todo == "todo5"}
    assert [i for i, result in items.items() if result.status == "failed"] == [item]
