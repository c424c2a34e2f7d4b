"""Both directions: every buggy submission loses points in its own TODO and only there; every
differently-written correct submission scores 100."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import CORPUS, failing_todos, graded

pytestmark = pytest.mark.slow


def _expectation(path: Path) -> str:
    header = path.read_text(encoding="utf-8").splitlines()[0]
    assert header.startswith("# corpus: "), path
    return header.removeprefix("# corpus: ")


BUGGY = sorted((CORPUS / "buggy").glob("*.py"))
CORRECT = sorted((CORPUS / "correct").glob("*.py"))


def test_corpus_is_big_enough() -> None:
    todos = [_expectation(p).split()[-1] for p in BUGGY]
    assert len(BUGGY) >= 30 and len(CORRECT) >= 8
    assert all(todos.count(f"todo{n}") >= 5 for n in range(1, 6))


@pytest.mark.parametrize("path", BUGGY, ids=[p.stem for p in BUGGY])
def test_buggy_submission_is_caught_in_its_todo(path: Path) -> None:
    expectation = _expectation(path)
    assert expectation.startswith("expect-fail ")
    todo = expectation.split()[-1]
    result = graded(path)
    assert failing_todos(result) == {todo}, [(i.id, i.failure.message.en) for i in result.items if i.failure and i.status == "failed"]
    for item in result.items:
        if item.status == "failed":
            assert item.failure is not None and item.failure.message.en and item.failure.message.zh
            assert item.failure.kind in ("wrong", "error", "not_exercised")
            assert item.failure.repro, f"{item.id} failed without a reproduction"


@pytest.mark.parametrize("path", CORRECT, ids=[p.stem for p in CORRECT])
def test_correct_submission_scores_100(path: Path) -> None:
    assert _expectation(path) == "expect-pass"
    result = graded(path)
    assert result.score == 100, [(i.id, i.failure.message.en, i.failure.repro) for i in result.items if i.status == "failed"]


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


def test_correct_submission_gets_no_hint() -> None:
    result = graded(CORPUS / "buggy" / "todo1_no_kv_factor.py")
    assert not any("Hint" in (i.failure.message.en if i.failure else "") for i in result.items if i.todo == "todo5")


def test_a_decode_growth_bug_leaves_the_ownership_item_alone() -> None:
    items = {i.id: i for i in graded(CORPUS / "buggy" / "todo3_seq_len_not_stored.py").items}
    assert items["todo3.growth"].status == "failed"
    assert items["todo3.ownership"].status == "passed"


def test_non_finite_answers_still_get_a_reproduction(tmp_path: Path) -> None:
    source = (CORPUS.parent.parent / "reference" / "paged_attention.py").read_text(encoding="utf-8")
    answer = "        return torch.cat(ordered, dim=0)[: req.seq_len]\n"
    assert answer in source
    path = tmp_path / "inf.py"
    path.write_text(source.replace(answer, "        return torch.full((req.seq_len, self.head_dim), float('inf'))\n"), encoding="utf-8")
    item = next(i for i in graded(path).items if i.id == "todo4.table_order")
    assert item.failure.kind == "wrong" and "inf" in item.failure.message.en and item.failure.repro
