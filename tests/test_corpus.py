"""Both directions, on every submission of the corpus.

- buggy/: a single realistic mistake; it loses points in its own TODO and only there;
- correct/: written in other ways (custom OOM classes, SDPA, notebooks with magics...); 100;
- given/: only given code changed; every TODO point kept, and the scorecard says "given code";
- gaming/: work avoided (no-op methods, `return query`, pacing calls against the time
  budget); the TODO it games earns nothing.

Each file says what it expects on its first line (a notebook: its first code cell's).
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from grader.config import load_config
from grader.results import ItemResult
from tests.conftest import CORPUS, failing_todos, grade_all, graded

pytestmark = pytest.mark.slow


def _header(path: Path) -> list[str]:
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        source = next(c["source"] for c in cells if c["cell_type"] == "code")
        return ("".join(source) if isinstance(source, list) else source).splitlines()[:3]
    return path.read_text(encoding="utf-8").splitlines()[:3]


def expectation(path: Path) -> str:
    header = _header(path)[0]
    assert header.startswith("# corpus: "), path
    return header.removeprefix("# corpus: ")


def breaks(path: Path) -> set[str] | None:
    """The items the file's mistake breaks (`# breaks: item, ...`, its second line), if it says."""
    said = [line.removeprefix("# breaks:") for line in _header(path)[1:] if line.startswith("# breaks:")]
    return {item.strip() for item in said[0].split(",")} if said else None


def _files(kind: str) -> list[Path]:
    """Submissions: files, and folders holding one notebook with the files it reads or runs (graded
    in a copy of that folder, as a batch grades students/alice/notebook.ipynb)."""
    return sorted(
        [p for p in (CORPUS / kind).iterdir() if p.suffix in (".py", ".ipynb")]
        + [nb for d in (CORPUS / kind).iterdir() if d.is_dir() for nb in d.glob("*.ipynb")]
    )


BUGGY = [p for p in _files("buggy") if not expectation(p).endswith(" cuda")]  # the CUDA ones: scripts/gpu-check
CORRECT, GIVEN, GAMING = _files("correct"), _files("given"), _files("gaming")


@pytest.fixture(scope="module", autouse=True)
def _graded_side_by_side() -> None:
    grade_all([*BUGGY, *CORRECT, *GIVEN, *(p for p in GAMING if not p.stem.startswith("slow_"))])
    slow = [p for p in GAMING if p.stem.startswith("slow_")]
    grade_all(slow, _pacing_config(), processes=len(slow))  # they sleep: all at once


def test_corpus_is_big_enough() -> None:
    todos = [expectation(p).split()[1] for p in BUGGY]
    assert len(BUGGY) >= 140 and len(CORRECT) >= 60 and len(GIVEN) >= 12 and len(GAMING) >= 28
    assert all(todos.count(f"todo{n}") >= 12 for n in range(1, 6))
    assert sum(p.suffix == ".ipynb" for p in CORRECT) >= 5


def _id(path: Path) -> str:
    return path.parent.name if path.parent.parent.parent == CORPUS else path.stem


@pytest.mark.parametrize("path", BUGGY, ids=[_id(p) for p in BUGGY])
def test_buggy_submission_is_caught_in_its_todo(path: Path) -> None:
    expected = expectation(path)
    assert expected.startswith("expect-fail ")
    todo = expected.split()[1]
    result = graded(path)
    assert result.tampering == [], [r.message.en for r in result.tampering]
    assert failing_todos(result) == {todo}, [(i.id, i.failure.message.en) for i in result.items if i.failure and i.status == "failed"]
    for item in result.items:
        if item.status == "failed":
            assert item.failure is not None and item.failure.message.en and item.failure.message.zh
            assert item.failure.kind in ("wrong", "error", "not_exercised", "not_implemented", "missing")
            assert item.failure.repro, f"{item.id} failed without a reproduction"
    # One mistake, one item: it loses the items it breaks, each on a case of its own; any other
    # item it loses could not be judged, and says which of those blocks it (docs/grading.md).
    declared = breaks(path)
    if declared is not None:
        own = {i.id for i in result.items if i.status == "failed" and not i.blocked_by}
        blocked = {i.id: i.blocked_by for i in result.items if i.status == "failed" and i.blocked_by}
        assert own == declared, [(i.id, i.failure.kind, i.failure.message.en) for i in result.items if i.status == "failed" and i.failure]
        assert set(blocked.values()) <= declared, blocked


@pytest.mark.parametrize("path", CORRECT, ids=[_id(p) for p in CORRECT])
def test_correct_submission_scores_100(path: Path) -> None:
    assert expectation(path) == "expect-pass"
    result = graded(path)
    assert result.score == 100, [(i.id, i.failure.message.en, i.failure.repro) for i in result.items if i.status == "failed"]
    # Nothing a correct notebook does touches the grader's own code (docs/trust.md, "Trust map").
    assert result.tampering == [], [r.message.en for r in result.tampering]


@pytest.mark.parametrize("path", GIVEN, ids=[p.stem for p in GIVEN])
def test_changed_given_code_is_said_and_costs_no_todo_points(path: Path) -> None:
    assert expectation(path) == "expect-fail given"
    result = graded(path)
    assert result.tampering == [], [r.message.en for r in result.tampering]
    findings = [g.message.en for g in result.given_code]
    assert any(f.startswith("given code changed") for f in findings), findings
    assert any(f.startswith("given code:") for f in findings), findings  # and how it behaves differently
    assert result.score == 100, [(i.id, i.failure.message.en) for i in result.items if i.status == "failed"]


def _pacing_config():
    """Calls that sleep just under the 10 s call limit meet a short item budget: the corner
    cases cannot all finish, and that is a failure, not a pass."""
    config = load_config()
    return dataclasses.replace(config, limits=dataclasses.replace(config.limits, item_budget_s=6), digest=config.digest + "-pacing")


@pytest.mark.parametrize("path", GAMING, ids=[p.stem for p in GAMING])
def test_gaming_earns_nothing_in_the_todo_it_games(path: Path) -> None:
    expected = expectation(path)
    assert expected.startswith("expect-fail ")
    todo = expected.split()[1]
    result = graded(path, _pacing_config()) if path.stem.startswith("slow_") else graded(path)
    scores = result.todo_scores()
    assert scores[todo][0] == 0, [(i.id, i.status, i.failure and i.failure.message.en) for i in result.items if i.todo == todo]
    if path.stem.startswith("slow_"):
        kinds = {i.failure.kind for i in result.items if i.todo == todo and i.failure}
        assert kinds & {"too_slow", "timeout"}, kinds


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


@pytest.mark.parametrize("name", ["todo5_drops_last_token", "todo5_double_scale", "todo5_no_scale"])
def test_a_base_mistake_costs_every_attention_item(name: str) -> None:
    """Every item needs right values on its own cases: none is paid for output that is wrong
    everywhere, however consistently it handles its feature."""
    items = {i.id: i for i in graded(CORPUS / "buggy" / f"{name}.py").items if i.todo == "todo5" and i.status != "not_run"}
    assert all(item.status == "failed" for item in items.values()), [i for i, item in items.items() if item.status != "failed"]


@pytest.mark.parametrize("name, item", [("todo5_gqa_head_modulo", "todo5.gqa"), ("todo5_returns_float32", "todo5.low_precision")])
def test_a_feature_mistake_costs_that_features_item_only(name: str, item: str) -> None:
    """A call wrong only because of one feature is that feature's: the same call without it is
    right, which is evidence for every other feature it keeps."""
    items = {i.id: i for i in graded(CORPUS / "buggy" / f"{name}.py").items if i.todo == "todo5"}
    assert [i for i, result in items.items() if result.status == "failed"] == [item]


def test_no_op_methods_and_return_query_earn_no_ownership_or_inputs_points() -> None:
    noop = {i.id: i for i in graded(CORPUS / "gaming" / "noop_prefill.py").items}
    assert noop["todo2.ownership"].status == "failed" and noop["todo2.ownership"].failure.kind == "not_exercised"
    query = {i.id: i for i in graded(CORPUS / "gaming" / "return_query.py").items}
    assert query["todo5.inputs_unchanged"].status == "failed"


def test_non_finite_answers_still_get_a_reproduction(tmp_path: Path) -> None:
    source = (CORPUS.parent.parent / "reference" / "paged_attention.py").read_text(encoding="utf-8")
    answer = "        return torch.cat(ordered, dim=0)[: req.seq_len]\n"
    assert answer in source
    path = tmp_path / "inf.py"
    path.write_text(source.replace(answer, "        return torch.full((req.seq_len, self.head_dim), float('inf'))\n"), encoding="utf-8")
    item = next(i for i in graded(path).items if i.id == "todo4.table_order")
    assert item.failure.kind == "wrong" and "inf" in item.failure.message.en and item.failure.repro


def _failed(paths: list[Path]) -> list[tuple[str, ItemResult]]:
    out = []
    for path in paths:
        result = graded(path, _pacing_config()) if path.stem.startswith("slow_") else graded(path)
        out += [(f"{path.name} {item.id}", item) for item in result.items if item.status == "failed" and item.failure is not None]
    return out


def test_no_card_shows_the_same_expected_and_actual() -> None:
    """A card whose expected and actual read the same says nothing (issue 21: a decode that raised
    seq_len before its OOM showed one free list and table twice): each shows the fields that differ."""
    same = []
    for label, item in _failed([*BUGGY, *GAMING]):
        failure = item.failure
        assert failure is not None
        if failure.expected or failure.actual:
            same += [f"{label} ({lang}): {failure.expected_for(lang)!r}" for lang in ("en", "zh") if failure.expected_for(lang) == failure.actual_for(lang)]
    assert not same, same


# A word of English in a Chinese card, once code (identifiers, calls, values) is taken out.
_CODE = re.compile(r"[\w.]*[_.(\[=\d][\w.()\[\]=,:'\-+*/ ]*")
_NAMES = {"OOM", "RuntimeError", "ValueError", "TypeError", "IndexError", "MemoryError", "NotImplementedError", "AssertionError",
          "NaN", "inf", "KV", "GQA", "TODO", "int", "list", "dict", "tuple", "torch", "Tensor", "True", "False", "None", "dtype", "cpu", "cuda",
          "prefill", "decode", "token", "query", "softmax", "logits", "scale", "GPU", "CUDA", "SDPA"}  # the course's own terms


def english_words(text: str) -> list[str]:
    text = _CODE.sub(" ", re.sub(r"\{[^{}]*\}|\|[^|]*\|", " ", text))  # f-string fields and |a - b| are code too
    return [w for w in re.findall(r"[A-Za-z]{2,}", text) if w not in _NAMES]


def test_chinese_cards_say_expected_actual_and_comments_in_chinese() -> None:
    """Everything of ours in a Chinese card is Chinese: expected, actual (less the submission's own
    exception text), and the reproduction's comments and assert messages."""
    found = []
    for label, item in _failed([*BUGGY, *GAMING]):
        failure = item.failure
        assert failure is not None
        raised = failure.actual_zh == "" and re.match(r"^[A-Za-z_][\w.]*: ", failure.actual)  # the submission's exception, as it said it
        for what, text in (("expected", failure.expected_for("zh")), ("actual", "" if raised else failure.actual_for("zh"))):
            if english_words(text):
                found.append(f"{label} {what}: {text[:120]!r}")
        for line in failure.repro_for("zh").splitlines():
            said = line.split("  # ", 1)[1] if "  # " in line else line[2:] if line.startswith("# ") else ""
            said += " ".join(re.findall(r'f"([^"]*)"', line)) if line.lstrip().startswith("assert ") else ""
            if english_words(said):
                found.append(f"{label} repro: {line.strip()[:120]!r}")
    assert not found, sorted(set(found))[:40]
