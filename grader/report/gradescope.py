"""Gradescope's results.json, with a few extensions (max_score, counterexample, tags per TODO).

Under about 1 MiB whatever the submission did (grader/report/budget.py); `extra_data.grade_result`
is the whole sanitised GradeResult, which `grader import` and `grade-batch` read back.
"""

from __future__ import annotations

import json
from typing import Any

from grader.report.budget import fit
from grader.report.labels import colon, not_graded, paren, status_word, word
from grader.report.text import render as render_text
from grader.results import NOT_RUN, PASSED, GradeResult, ItemResult


def item_output(item: ItemResult, lang: str) -> str:
    if item.failure is None:
        return status_word(item.status, lang)
    parts = [item.failure.message.get(lang)]
    said = colon(lang)  # "：" in Chinese
    if item.failure.expected or item.failure.actual:
        parts.append(f"{word('expected', lang)}{said}{item.failure.expected_for(lang)}\n{word('actual', lang)}{said}{item.failure.actual_for(lang)}")
    repro = item.failure.repro_for(lang)
    if repro:
        parts.append(f"{word('repro', lang)}{said.rstrip()}\n{repro}")
    if item.failure.traceback:
        parts.append(f"{word('traceback', lang)}{said.rstrip()}\n{item.failure.traceback}")
    return "\n\n".join(parts)


def to_json(payload: dict[str, Any]) -> str:
    """The file's text, exactly as `grade --json` and `grade-batch` write it."""
    return json.dumps(payload, ensure_ascii=False, indent=2) + "\n"


def to_results_json(result: GradeResult, lang: str) -> dict[str, Any]:
    return fit(lambda clean: _payload(clean, lang), lambda payload: len(to_json(payload).encode("utf-8")), result)


# Gradescope shows every string as plain text ("text"), never as HTML or Markdown: the outputs
# quote what the submission printed and raised, which may hold <a href>, <img src>, ...
# (its default, simple_format, lets such tags through).
TEXT = "text"
FORMATS = {"output_format": TEXT, "test_output_format": TEXT, "test_name_format": TEXT}
PLACEHOLDER = (
    "Gradescope 需要一个分数，所以这里记为 0 分：这不是对你代码的评价。请按上面的说明改正后重新提交。",
    "Gradescope needs a score, so this one is 0: it is not a judgement of your code. Fix what is said above and submit again.",
)


def not_graded_output(result: GradeResult, lang: str) -> str:
    """What a student reads on Gradescope when nothing was graded: why, and why the score says 0."""
    assert result.error is not None
    zh, en = PLACEHOLDER
    return f"{not_graded(result.error.message.get(lang), lang)}\n\n{zh if lang == 'zh' else en}\n\n{paren(result.submission, lang).strip()}\n"


def _payload(result: GradeResult, lang: str) -> dict[str, Any]:
    if result.error is not None:
        return _not_graded_payload(result, lang)
    tests = []
    for number, item in enumerate(result.items, start=1):
        test: dict[str, Any] = {
            "name": f"{item.id}: {item.title.get(lang)}",
            "number": str(number),
            "score": item.score,
            "max_score": 0.0 if item.status == NOT_RUN else item.weight,
            "status": "passed" if item.status == PASSED else "failed",
            "output": item_output(item, lang),
            "tags": [item.todo] + (["not_run"] if item.status == NOT_RUN else []),
            "visibility": "visible",
            "output_format": TEXT,
            "name_format": TEXT,
        }
        if item.status == NOT_RUN:
            test["status"] = "passed"  # nothing failed; Gradescope has no third status
        if item.failure is not None and item.failure.repro_for(lang):
            test["counterexample"] = item.failure.repro_for(lang)
        tests.append(test)
    return {
        "score": result.score,
        "max_score": result.max_score,
        "execution_time": result.seconds,
        "output": render_text(result, lang),
        **FORMATS,
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
        "extra_data": _extra(result),
    }


def _not_graded_payload(result: GradeResult, lang: str) -> dict[str, Any]:
    """No tests (none ran, none failed); the score Gradescope needs, said to be only that."""
    assert result.error is not None
    return {
        "score": 0.0,
        "max_score": result.max_score,
        "execution_time": result.seconds,
        "output": not_graded_output(result, lang),
        **FORMATS,
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": [],
        "extra_data": {**_extra(result), "graded": False, "not_graded_because": result.error.message.get(lang)},
    }


def _extra(result: GradeResult) -> dict[str, Any]:
    return {
        "submission_sha256": result.sha256,
        "config_digest": result.config_digest,
        "device": result.device,
        "isolation": result.isolation,
        "grade_result": result.to_dict(),
    }
