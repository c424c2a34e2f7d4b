"""The one pass that makes submission-controlled strings safe (grader/sanitize.py)."""

from __future__ import annotations

import json
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from grader.results import CellReport, Failure, GradeResult, Text
from grader.sanitize import DEFAULT_LIMITS, FOLD, safe_block, safe_line, sanitize_result, sanitized_copy
from tests.handmade import ESC_CLEAR, hostile_huge_result, picture_result

RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
ANY_TEXT = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=300)


def test_escapes_control_characters_and_replaces_surrogates() -> None:
    line = safe_line(ESC_CLEAR + "red \x1b[31mX\x9b bell\x07 \u202eevil \ud800 ok")
    assert "\x1b" not in line and "\\x1b[2J" in line and "\\x9b" in line and "\\x07" in line
    assert "\\u202e" in line and "\ufffd" in line and line.endswith(" ok")
    line.encode("utf-8")  # a lone surrogate would raise here


def test_newlines_fold_on_one_line_fields_and_stay_in_blocks() -> None:
    assert safe_line("a\nScore: 100 / 100\r\nb\rc\u2028d") == f"a{FOLD}Score: 100 / 100{FOLD}b{FOLD}c{FOLD}d"
    block = safe_block("x = 1\r\ny = 2\n\tz\rw")
    assert block == "x = 1\ny = 2\n    z\\rw"  # a lone CR (which redraws a line) is shown


def test_clipping_counts_what_was_cut() -> None:
    line = safe_line("x" * 10_000)
    assert len(line) <= DEFAULT_LIMITS.value and re.search(r"(\d+) chars cut", line)
    cut = int(re.search(r"(\d+) chars cut", line).group(1))  # type: ignore[union-attr]
    assert cut == 10_000 - line.index(" [")
    output = "\n".join(f"step_{i} = {i}" for i in range(100))
    shown = safe_block(output)
    rows = shown.split("\n")
    assert len(rows) == DEFAULT_LIMITS.lines and rows[-1] == "# [… 截去 61 行 / 61 lines cut]"
    assert rows[:-1] == output.split("\n")[:39]  # the start, at line boundaries: still pasteable
    tail = safe_block("\n".join(f"frame {i}" for i in range(100)), keep="tail")
    assert tail.split("\n")[0].startswith("# ") and tail.endswith("frame 99")


def test_a_huge_value_is_cut_without_reading_all_of_it() -> None:
    huge = "y" * 50_000_000 + "\n" * 3
    assert len(safe_line(huge)) <= DEFAULT_LIMITS.value
    block = safe_block("line\n" * 10_000_000)
    assert block.endswith("# [… 截去 9999961 行 / 9999961 lines cut]")


@settings(max_examples=300, deadline=None)
@given(ANY_TEXT, st.integers(min_value=60, max_value=400))
def test_line_is_safe_bounded_and_idempotent(text: str, limit: int) -> None:
    once = safe_line(text, limit)
    assert not RAW_CONTROL.search(once) and "\n" not in once and "\r" not in once
    assert len(once) <= limit
    assert safe_line(once, limit) == once


@settings(max_examples=300, deadline=None)
@given(st.lists(ANY_TEXT, max_size=60).map("\n".join), st.integers(min_value=120, max_value=800), st.integers(min_value=3, max_value=40))
def test_block_is_safe_bounded_and_idempotent(text: str, limit: int, lines: int) -> None:
    for keep in ("head", "tail"):
        once = safe_block(text, limit, lines, keep)
        assert not RAW_CONTROL.search(once) and "\r" not in once
        assert len(once) <= limit and len(once.split("\n")) <= lines
        assert safe_block(once, limit, lines, keep) == once


def test_hostile_result_is_bounded_and_a_second_pass_changes_nothing() -> None:
    result = sanitize_result(hostile_huge_result(cells=40_000))
    data = result.to_dict()
    text = json.dumps(data, ensure_ascii=False)
    assert not RAW_CONTROL.search(text)
    assert len(text.encode("utf-8")) < 1 << 20  # the record alone; each report is fitted on its own
    raised = [c for c in result.cells if c.status == "error"]
    assert len(raised) == DEFAULT_LIMITS.cells
    assert [c.index for c in raised] == list(range(1, DEFAULT_LIMITS.cells + 1))  # the first ones, in order
    assert any(f"and {40_000 - DEFAULT_LIMITS.cells} more cells that raised" in n.en for n in result.notes)
    assert len(result.flags) == DEFAULT_LIMITS.flags and "more integrity flags" in result.flags[-1].en
    assert len(result.notes) <= DEFAULT_LIMITS.flags and len(result.given_code) == DEFAULT_LIMITS.flags
    assert all("\n" not in flag.en for flag in result.flags)  # no forged second score block
    pictures = [i.failure.picture for i in result.items if i.failure and i.failure.picture]
    assert len(pictures) == DEFAULT_LIMITS.pictures
    assert all(len(p["errors"]) <= 16 and len(p["errors"][0]) <= 32 for p in pictures)
    assert json.dumps(sanitize_result(GradeResult.from_dict(data)).to_dict(), ensure_ascii=False) == text


def test_sanitized_copy_leaves_the_original_alone() -> None:
    original = hostile_huge_result(cells=50, message_mb=1)
    before = original.items[0].failure.message.en  # type: ignore[union-attr]
    copy = sanitized_copy(original)
    assert original.items[0].failure.message.en is before and len(original.cells) == 50  # type: ignore[union-attr]
    assert copy.items[0].failure.message.en != before  # type: ignore[union-attr]


def test_imported_garbage_becomes_well_formed_records() -> None:
    raw = picture_result().to_dict()
    raw["items"][0].update(weight="lots", status="hacked", seconds=float("nan"), examples="x")
    raw["items"][1]["failure"]["picture"] = {"kind": "pool", "num_blocks": 10**9}
    growth = next(i for i, item in enumerate(raw["items"]) if item["id"] == "todo3.growth")  # the pool picture
    raw["items"][growth]["failure"]["picture"]["after"]["tables"]["r0"] = ["not", "ints"]
    raw["cells"].append({"index": "7", "status": "weird", "error_type": 5, "message": None, "traceback": ["x"]})
    raw["isolation"] = {"limits": {"memory": float("inf")}, "summary": {"en": "ok\x1b[2J"}}
    result = sanitize_result(GradeResult.from_dict(raw))
    first = result.items[0]
    assert (first.weight, first.status, first.seconds, first.examples) == (0.0, "failed", 0.0, 0)
    assert result.items[1].failure.picture is None and result.items[growth].failure.picture is None  # type: ignore[union-attr]
    assert result.cells[-1] == CellReport(7, "error", "5", "", "['x']")
    assert result.isolation == {"limits": {"memory": 0.0}, "summary": {"en": "ok\\x1b[2J"}}
    json.dumps(result.to_dict(), allow_nan=False)  # strict JSON: no NaN or inf anywhere


def test_well_formed_pictures_survive_unchanged_in_shape() -> None:
    result = sanitize_result(picture_result())
    pool = next(i.failure.picture for i in result.items if i.id == "todo3.growth")  # type: ignore[union-attr]
    assert pool is not None and pool["after"]["tables"] == {"r0": [0, 1], "r1": [1]} and pool["highlight"] == [1]
    attention = next(i.failure.picture for i in result.items if i.id == "todo5.mha_fp32")  # type: ignore[union-attr]
    assert attention is not None and attention["errors"][2][1] is None  # NaN kept as "not finite"
    assert attention["worst"] == [0, 2] and attention["tolerance"] == 2e-5


def test_text_fields_of_failures_and_errors_are_all_covered() -> None:
    nasty = "a\x1b[2Jb\ud800\nc"
    failure = Failure(nasty, Text(nasty, nasty), nasty, nasty, nasty, nasty, None, nasty)
    result = GradeResult(nasty, nasty, nasty, [], error=failure, notes=[Text(nasty, nasty)], device=nasty, output_excerpt=nasty)
    text = json.dumps(sanitize_result(result).to_dict(), ensure_ascii=False)
    assert "\x1b" not in text and "\\ud800" not in text
    text.encode("utf-8")
