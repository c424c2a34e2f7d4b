"""Shared fixtures: the project root, the default configuration, and a cached grading call."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
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
_CHECKOUT = pytest.StashKey[set[str] | None]()  # what git saw untracked when the run began


def _untracked() -> set[str] | None:
    """Files in the checkout that git does not track and does not ignore (None: not a git checkout)."""
    try:
        out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return {line[3:] for line in out.stdout.splitlines() if line.startswith("?? ")}


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_CHECKOUT] = _untracked()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A test run leaves nothing new in the checkout (submission code runs confined: tests/repro_runner.py)."""
    before = session.config.stash.get(_CHECKOUT, None)
    after = _untracked() if before is not None else None
    if before is None or after is None:
        return
    new = sorted(after - before)
    if new:
        print(f"\nthe test run left new files in the checkout (not ignored by git): {new[:20]}", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# The tests grade with the public seed (their expectations are for it), whatever the machine holds.
os.environ.pop("PA_GRADER_SECRET", None)
os.environ["PA_GRADER_SECRET_FILE"] = os.devnull


@pytest.fixture(scope="session")
def config() -> Config:
    return load_config()


def _alone(path: Path) -> bool:
    """A file lying flat in a corpus folder is graded alone, as a batch grades a flat class folder
    (its neighbours are other submissions); a folder submission with the files it uses."""
    return path.parent.parent == CORPUS


def graded(path: Path, config: Config | None = None) -> GradeResult:
    """Grade once per test session and configuration; several tests read the same result."""
    config = config or load_config()
    if (path, config.digest) not in _GRADED:
        _GRADED[path, config.digest] = grade_path(path, config, "cpu", alone=_alone(path))
    return _GRADED[path, config.digest]


def _grade_one(job: tuple[Path, Config]) -> tuple[Path, GradeResult]:
    return job[0], grade_path(job[0], job[1], "cpu", alone=_alone(job[0]))


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
    template = warm.start(worker_env(False))
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
