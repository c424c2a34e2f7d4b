"""Autograder for the PagedAttention exercise.

In a notebook: `import grader; grader.check()` (or `grader.check("todo3")`): see grader/notebook.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grader.notebook import CheckResult

__version__ = "0.1.0"


def check(todo: str | int | None = None, *, lang: str | None = None) -> CheckResult | None:
    """Grade the cells this notebook's kernel has run so far, and show the scorecard.

    todo: "todo1" … "todo5" (or 1 … 5) to check one TODO only; lang: "zh" or "en".
    Returns the result (`.score` out of 100, `.items`), or None outside a notebook.
    """
    # Imported on use: `import grader` stays instant, and `python -m grader.notebook` runs cleanly.
    from grader.notebook import check as run_check

    return run_check(todo, lang=lang)
