"""Gradescope's results.json, with a few extensions (max_score, counterexample, tags per TODO).

Under about 1 MiB whatever the submission did (grader/report/budget.py); `extra_data.grade_result`
is the whole sanitised GradeResult, which `grader import` and `grade-batch` read back.
"""

from __future__ import annotations

import json
from typing import Any

from grader.report.budget import fit
from grader.report.labels import status_word, word
from grader.report.text import render as render_text
from grader.results import NOT_RUN, PASSED, GradeResult, ItemResult


def item_output(item: ItemResult, lang: str) -> str:
    if item.failure is None:
        return status_word(item.status, lang)
    parts = [item.failure.message.get(lang)]
    if item.failure.expected or item.failure.actual:
        parts.append(f"{word('expected', lang)}: {item.failure.expected_for(lang)}\n{word('actual', lang)}: {item.failure.actual_for(lang)}")
    repro = item.failure.repro_for(lang)
    if repro:
        parts.append(f"{word('repro', lang)}:\n{repro}")
    if item.failure.traceback:
        parts.append(f"{word('traceback', lang)}:\n{item.failure.traceback}")
    return "\n\n".join(parts)


def to_json(payload: dict[str, Any]) -> str:
    """The file's text, exactly as `grade --json` and `grade-batch` write it."""
    return json.dumps(payload, ensure_ascii=False, indent=2) + "\n"


def to_results_json(result: GradeResult, lang: str) -> dict[str, Any]:
    return fit(lambda clean: _payload(clean, lang), lambda payload: len(to_json(payload).encode("utf-8")), result)


def _payload(result: GradeResult, lang: str) -> dict[str, Any]:
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
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
        "extra_data": {
            "submission_sha256": result.sha256,
            "config_digest": result.config_digest,
            "device": result.device,
            "isolation": result.isolation,
            "grade_result": result.to_dict(),
        },
    }
