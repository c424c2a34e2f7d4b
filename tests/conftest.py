"""Shared fixtures: the project root, the default configuration, and a cached grading call."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterable
from pathlib import Path

import pytest

from grader.config import Config, load_config
from grader.grade import grade_path
from grader.results import GradeResult
from grader.sandbox import warm
from grader.sandbox.client import worker_env

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus"
SOLUTION_NB = ROOT / "notebooks" / "paged_attention_solution.ipynb"
STUDENT_NB = ROOT / "notebooks" / "paged_attention_student.ipynb"

_GRADED: dict[tuple[Path, str], GradeResult] = {}

# The tests grade with the public seed (their expectations are for it), whatever the machine holds.
os.environ.pop("PA_GRADER_SECRET", None)
os.environ["PA_GRADER_SECRET_FILE"] = os.devnull


@pytest.fixture(scope="session")
def config() -> Config:
    return load_config()


def graded(path: Path, config: Config | None = None) -> GradeResult:
    """Grade once per test session and configuration; several tests read the same result."""
    config = config or load_config()
    if (path, config.digest) not in _GRADED:
        _GRADED[path, config.digest] = grade_path(path, config, "cpu")
    return _GRADED[path, config.digest]


def _grade_one(job: tuple[Path, Config]) -> tuple[Path, GradeResult]:
    return job[0], grade_path(job[0], job[1], "cpu")


def grade_all(paths: Iterable[Path], config: Config | None = None, processes: int | None = None) -> None:
    """Grade many submissions at once, one per core (or `processes`), into the cache `graded` reads.

    Forked from this process (the checks already imported), as a class batch grades.
    """
    config = config or load_config()
    todo = [p for p in dict.fromkeys(paths) if (p, config.digest) not in _GRADED]
    if len(todo) < 2:
        return
    # Workers forked from one warm template, as grade-batch's are (tests/test_warm_batch.py
    # checks that this grades as a cold worker does); a cold worker if it cannot start.
    template = warm.start(worker_env(False), label="tests")
    try:
        template.wait_ready()
        warm.use(template)
    except OSError:
        template = None
    try:
        with multiprocessing.get_context("fork").Pool(max(1, min(len(todo), processes or os.cpu_count() or 1))) as pool:
            for path, result in pool.imap_unordered(_grade_one, [(p, config) for p in todo]):
                _GRADED[path, config.digest] = result
    finally:
        if template is not None:
            warm.use(None)
            template.close()


def failing_todos(result: GradeResult) -> set[str]:
    return {item.todo for item in result.items if item.status == "failed"}
