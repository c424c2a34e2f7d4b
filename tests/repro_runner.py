"""Run reproductions as a student would: pasted after their code, in a fresh interpreter, and
confined as the grader confines a submission.

Each script is the one cell of a submission run in the grader's own sandbox (namespaces, uid,
cgroup, Landlock, seccomp, a tmpfs of its own as its folder: grader/sandbox/), its worker
forked from a warm template that imported torch once.  So corpus code (gaming and hostile
submissions included) never runs in the tests' working directory: it cannot write into the
checkout (a gaming file once left a results.json there), read the answer key or reach the
machine.  Used by tests/corpus_cases.py and tests/test_reproductions.py.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor

from grader.config import load_config
from grader.sandbox import warm
from grader.sandbox.client import Sandbox, worker_env
from grader.submission import Cell

SCRIPT_TIMEOUT_S = 60


def run_scripts(scripts: list[str], jobs: int = 2) -> list[tuple[int, str]]:
    """Each script's exit status (0 clean, 1 raised, 2 timed out or crashed) and its last error line."""
    template = warm.start(worker_env(False))
    try:
        template.wait_ready()
        warm.use(template)
    except OSError:
        template = None  # each worker imports torch itself: slower, the same
    try:
        with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="repro") as pool:
            return list(pool.map(_run_one, scripts))
    finally:
        if template is not None:
            warm.use(None)
            template.close()


def _run_one(code: str) -> tuple[int, str]:
    limits = dataclasses.replace(load_config().limits, cell_timeout_s=SCRIPT_TIMEOUT_S, total_budget_s=SCRIPT_TIMEOUT_S * 2)
    with Sandbox([Cell(1, code)], limits) as sandbox:
        report = sandbox.load()
    if report.failed is not None:
        return 2, f"the sandbox failed: {report.failed}"[:500]
    outcome = report.cells[0]
    if outcome.status == "ok":
        return 0, ""
    error = outcome.error or {}
    line = f"{error.get('type', outcome.status)}: {error.get('message', '')}".strip()
    return (1 if outcome.status == "error" else 2), line[:500]
