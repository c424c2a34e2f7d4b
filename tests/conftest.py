"""Shared fixtures: the project root, the default configuration, and a cached grading call."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from grader.config import Config, load_config
from grader.grade import grade_path
from grader.results import GradeResult

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus"
SOLUTION_NB = ROOT / "notebooks" / "paged_attention_solution.ipynb"
STUDENT_NB = ROOT / "notebooks" / "paged_attention_student.ipynb"


@pytest.fixture(scope="session")
def config() -> Config:
    return load_config()


@functools.cache
def graded(path: Path) -> GradeResult:
    """Grade once per test session; several tests read the same result."""
    return grade_path(path, load_config(), "cpu")


def failing_todos(result: GradeResult) -> set[str]:
    return {item.todo for item in result.items if item.status == "failed"}
