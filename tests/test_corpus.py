"""The corpus's size, and its gaming files: the TODO each games earns nothing.

The other files are graded in test_corpus_todo1to3.py, test_corpus_todo4to5.py and
test_corpus_correct.py (tests/corpus_cases.py says why four modules and what each checks).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import CORPUS, graded
from tests.corpus_cases import (
    BUGGY,
    CORRECT,
    GAMING,
    GIVEN,
    check_chinese_cards_say_expected_actual_and_comments_in_chinese,
    check_gaming,
    check_no_card_shows_the_same_expected_and_actual,
    check_reproductions,
    grade_side_by_side,
    todo_of,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def _graded_side_by_side() -> None:
    grade_side_by_side(GAMING)


def test_corpus_is_big_enough() -> None:
    todos = [todo_of(p) for p in BUGGY]
    assert len(BUGGY) >= 140 and len(CORRECT) >= 60 and len(GIVEN) >= 12 and len(GAMING) >= 28
    assert all(todos.count(f"todo{n}") >= 12 for n in range(1, 6))
    assert sum(p.suffix == ".ipynb" for p in CORRECT) >= 5


@pytest.mark.parametrize("path", GAMING, ids=[p.stem for p in GAMING])
def test_gaming_earns_nothing_in_the_todo_it_games(path: Path) -> None:
    check_gaming(path)


def test_no_op_methods_and_return_query_earn_no_ownership_or_inputs_points() -> None:
    noop = {i.id: i for i in graded(CORPUS / "gaming" / "noop_prefill.py").items}
    assert noop["todo2.ownership"].status == "failed" and noop["todo2.ownership"].failure.kind == "not_exercised"
    query = {i.id: i for i in graded(CORPUS / "gaming" / "return_query.py").items}
    assert query["todo5.inputs_unchanged"].status == "failed"


def test_gaming_reproductions_fail_on_the_submission_and_pass_on_the_reference() -> None:
    check_reproductions([p for p in GAMING if not p.stem.startswith("slow_")])


def test_gaming_cards_show_what_differs_in_both_languages() -> None:
    check_no_card_shows_the_same_expected_and_actual(GAMING)
    check_chinese_cards_say_expected_actual_and_comments_in_chinese(GAMING)


def test_non_finite_answers_still_get_a_reproduction(tmp_path: Path) -> None:
    source = (CORPUS.parent.parent / "reference" / "paged_attention.py").read_text(encoding="utf-8")
    answer = "        return torch.cat(ordered, dim=0)[: req.seq_len]\n"
    assert answer in source
    path = tmp_path / "inf.py"
    path.write_text(source.replace(answer, "        return torch.full((req.seq_len, self.head_dim), float('inf'))\n"), encoding="utf-8")
    item = next(i for i in graded(path).items if i.id == "todo4.table_order")
    assert item.failure.kind == "wrong" and "inf" in item.failure.message.en and item.failure.repro
