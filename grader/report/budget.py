"""Reports of bounded size, whatever the submission did.

Every renderer draws a sanitised copy of the result (so a caller that skipped the boundary
pass still prints nothing unsafe). When the report comes out larger than its budget, the
copy is sanitised again with smaller limits (shorter values, fewer lines, fewer listed
cells and pictures) until it fits; the smallest limits always fit (a few KiB per item).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from grader.results import GradeResult
from grader.sanitize import DEFAULT_LIMITS, sanitized_copy

MAX_REPORT_BYTES = 1 << 20  # per student and per report: results.json, Markdown, HTML
BUDGET = MAX_REPORT_BYTES - (64 << 10)  # room for what callers add around a report

T = TypeVar("T")


def sanitized(result: GradeResult, factor: float = 1.0) -> GradeResult:
    limits = DEFAULT_LIMITS if factor >= 1 else DEFAULT_LIMITS.scaled(factor)
    return sanitized_copy(result, limits)


def fit(render: Callable[[GradeResult], T], size: Callable[[T], int], result: GradeResult, budget: int = BUDGET) -> T:
    """render(sanitised result), shrinking the limits until size(output) <= budget."""
    factor = 1.0
    out = render(sanitized(result))
    while size(out) > budget and factor > 1 / 64:
        factor /= 4
        out = render(sanitized(result, factor))
    return out


def utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "replace"))
