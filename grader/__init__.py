"""Autograder for the PagedAttention exercise.

In a notebook: `import grader; grader.check()` (or `grader.check("todo3")`): see grader/notebook.py;
`grader.kv_lab(KVCacheManager, Request)` serves a request trace through the notebook's allocator
(grader/kvlab/notebook.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from grader.kvlab.lab import LabResult
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


def kv_lab(manager_cls: Any, request_cls: Any, **options: Any) -> LabResult | None:
    """Serve a request trace under static, power-of-two and oracle reservation and under paging
    through your KVCacheManager and Request; print the figures and plot them.  Ungraded: it
    never runs while grading.  Options: trace ("sharegpt" or "alpaca"), requests, rate, seed,
    block_size, pool_blocks, max_model_len, max_running, sweep (block sizes), lang, plot."""
    from grader.kvlab.notebook import kv_lab as run_lab

    return run_lab(manager_cls, request_cls, **options)
