"""Issue 15's attacks and mistakes, each a corpus file: none earns a point or erases a grade,
and each mistake costs the item of the call that made it."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from grader.config import load_config
from grader.results import GradeResult
from tests.conftest import CORPUS, grade_all, graded

pytestmark = pytest.mark.slow

ATTACKS = {name: CORPUS / "gaming" / f"{name}.py" for name in ("rt4_free_blocks_none", "rt4_first_token_value", "rt4_crash_on_rerun")}
GIVEN = {name: CORPUS / "given" / f"{name}.py" for name in ("rt4_report_huge_utilization", "rt4_class_decorator_release", "rt4_subclass_rebound", "rt4_report_tail_exact_multiple")}
MISTAKES = {
    # file: (the item that must fail, words its message must hold)
    "todo3_rt4_decode_zeroes_held_block": ("todo3.ownership", "KV data"),
    "todo4_rt4_zeroes_unused_tail": ("todo4.table_order", "is a read"),
    "todo4_rt4_reused_output_buffer": ("todo4.table_order", "returned earlier"),
    "todo2_rt4_tuple_block_table": ("todo2.block_count", "tuple"),
    "todo1_rt4_module_level_dict": ("todo1.per_token", "an earlier call returned"),
    "todo4_rt4_view_single_block": ("todo4.table_order", "returned earlier"),
    "todo5_rt4_bf16_sum_in_query_dtype": ("todo5.low_precision", "bfloat16"),
    "todo2_rt4_float_ceiling_big_blocks": ("todo2.block_count", "block_size=4096"),
}
CORNER_ANSWERS = CORPUS / "gaming" / "slow_rt4_corner_answers.py"


def _pacing_config():
    config = load_config()
    # 3 CPU seconds an item: its wall-clock backstop (9 s) ends a stalled call (9.5 s of sleep) before it returns.
    return dataclasses.replace(config, limits=dataclasses.replace(config.limits, item_budget_s=3), digest=config.digest + "-pacing")


@pytest.fixture(scope="module", autouse=True)
def _graded_side_by_side() -> None:
    grade_all([*ATTACKS.values(), *GIVEN.values(), *(CORPUS / "buggy" / f"{name}.py" for name in MISTAKES)])


def _failed(result: GradeResult, todo: str) -> dict[str, str]:
    return {i.id: i.failure.message.en for i in result.items if i.todo == todo and i.status == "failed" and i.failure}


def _no_grader_error(result: GradeResult) -> None:
    assert result.error is None and result.grader_errors() == []


def _fixed_corner_keys() -> set[tuple]:
    """What the corner-answering file keys its answers by, for every fixed corner of TODO 5."""
    from grader.checks.attention import SURVEYED
    from grader.checks.attention_cases import make_inputs
    from grader.checks.attention_corners import _fixed

    keys = set()
    for item in SURVEYED:
        for history in _fixed(item, "cpu"):
            for case in history:
                x = make_inputs(case)
                keys.add((tuple(x["query"].shape), tuple(x["key_cache"].shape),
                          tuple(int(v) for v in x["block_tables"].values().flatten()), tuple(int(v) for v in x["seq_lens"].values().flatten())))
    return keys


def test_the_corner_answers_know_every_fixed_corner() -> None:
    """Else the attack below is stale: it would stall on a fixed corner, proving nothing about the
    far cases.  Regenerate its `_CORNERS` from `_fixed_corner_keys()` when the corners change."""
    namespace: dict[str, object] = {}
    exec(CORNER_ANSWERS.read_text().split("\n_CORNERS = ", 1)[1].join(["_CORNERS = ", "\n"]), namespace)
    missing = _fixed_corner_keys() - set(namespace["_CORNERS"])  # type: ignore[arg-type]
    assert not missing, f"{len(missing)} fixed corners unknown to {CORNER_ANSWERS.name}: regenerate its _CORNERS"


def test_answers_to_the_corners_that_stall_on_anything_else_earn_nothing() -> None:
    """The file answers every fixed corner and stalls on anything else: on the far cases, which
    run among the corners but are drawn per grading, or on the random cases."""
    from grader.checks.attention_corners import BASE, _fixed

    result = graded(CORNER_ANSWERS, _pacing_config())
    todo5 = [i for i in result.items if i.todo == "todo5" and i.status != "not_run"]
    assert todo5 and all(i.status == "failed" for i in todo5)
    assert {i.failure.kind for i in todo5} <= {"too_slow", "timeout"}
    for item in todo5:
        message = item.failure.message.en
        stopped = re.search(r"(\d+) of \d+ corner cases", message)
        # Stopped among the corners only after every fixed one of the first item passed.
        assert "random cases" in message or (stopped and int(stopped[1]) >= len(_fixed(BASE, "cpu"))), message
    assert result.todo_scores()["todo1"][0] == 15  # the rest is graded as usual


def test_state_unreadable_outside_the_corners_fails_the_items_that_read_it() -> None:
    result = graded(ATTACKS["rt4_free_blocks_none"])
    failed = _failed(result, "todo2")
    assert set(failed) == {"todo2.block_count", "todo2.ownership", "todo2.oom_atomic"}
    assert all("free_blocks" in message and "None" in message for message in failed.values()), failed


def test_attention_that_returns_the_first_token_earns_no_attention_item() -> None:
    result = graded(ATTACKS["rt4_first_token_value"])
    assert result.todo_scores()["todo5"][0] == 0
    assert {"todo5.gqa", "todo5.paging", "todo5.scale_and_stability", "todo5.low_precision"} <= set(_failed(result, "todo5"))


def test_the_code_that_makes_handles_is_out_of_a_cells_reach() -> None:
    """Red team 4 patched the worker's handle maker to hand out strings (the judge crashed). Hunted
    for now, it is nowhere a cell can see; a forged reply is tests/test_hostile_replies.py's."""
    result = graded(CORPUS / "correct" / "rt4_hunts_the_handle_code.py")
    _no_grader_error(result)
    assert "HANDLE HUNT: []" in result.output_excerpt, result.output_excerpt[-1000:]
    assert result.score == 100 and result.tampering == []


def test_a_submission_that_poisons_the_reruns_keeps_its_failing_grade() -> None:
    result = graded(ATTACKS["rt4_crash_on_rerun"])
    _no_grader_error(result)
    assert result.todo_scores()["todo3"][0] == 0
    assert result.todo_scores()["todo2"][0] == 20 and result.todo_scores()["todo5"][0] == 22


def test_a_huge_utilization_is_a_given_code_finding_not_a_crash() -> None:
    result = graded(GIVEN["rt4_report_huge_utilization"])
    _no_grader_error(result)
    assert result.score == 100
    assert any(g.message.en.startswith("given code: allocation_report") for g in result.given_code)


@pytest.mark.parametrize("name, method", [("rt4_class_decorator_release", "release_request"), ("rt4_subclass_rebound", "allocation_report")])
def test_given_methods_changed_without_touching_their_text_are_named(name: str, method: str) -> None:
    result = graded(GIVEN[name])
    findings = [g.message.en for g in result.given_code]
    assert any(f"KVCacheManager.{method}, as bound when graded" in f for f in findings), findings
    assert any(f.startswith(f"given code: {method}") for f in findings), findings
    assert result.score == 100


def test_an_edited_report_wrong_when_the_last_block_is_full_is_found() -> None:
    result = graded(GIVEN["rt4_report_tail_exact_multiple"])
    assert any(g.message.en.startswith("given code: allocation_report") for g in result.given_code)


@pytest.mark.parametrize("name", sorted(MISTAKES))
def test_each_mistake_costs_the_item_of_the_call_that_made_it(name: str) -> None:
    item, words = MISTAKES[name]
    result = graded(CORPUS / "buggy" / f"{name}.py")
    failed = _failed(result, item.split(".")[0])
    assert item in failed and words in failed[item], failed
    assert {i.todo for i in result.items if i.status == "failed"} == {item.split(".")[0]}


def test_every_attack_and_mistake_has_its_own_corpus_file() -> None:
    for path in [*ATTACKS.values(), *GIVEN.values(), CORNER_ANSWERS, *(CORPUS / "buggy" / f"{name}.py" for name in MISTAKES)]:
        assert Path(path).is_file(), path
