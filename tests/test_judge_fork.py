"""The judge's forked copy (grader/judge_fork.py): same verdicts as the judge's threads, and a
copy that fails costs nothing (the judge grades its TODOs itself)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from grader import judge_fork
from grader.config import load_config
from grader.grade import grade_path
from grader.results import GradeResult
from grader.sandbox.client import Sandbox
from tests.conftest import CORPUS, ROOT

REFERENCE = ROOT / "reference" / "paged_attention.py"
# A TODO 3 mistake and a TODO 5 mistake: both TODOs are the copy's (grade._balanced puts them
# in the last group), so their failures are found, shrunk and reproduced there.
TODO3_BUG = CORPUS / "buggy" / "todo3_mod_eq_one.py"
TODO5_BUG = CORPUS / "buggy" / "todo5_gqa_head_modulo.py"


def _verdicts(result: GradeResult) -> list[tuple[str, str, str, str]]:
    return [(i.id, i.status, i.failure.message.en if i.failure else "", i.failure.repro if i.failure else "") for i in result.items]


def test_token_lock_is_held_by_one_process_at_a_time() -> None:
    lock = judge_fork.TokenLock()
    read_end, write_end = os.pipe()
    try:
        with lock:
            pid = os.fork()
            if pid == 0:  # the child waits for the lock, then says so
                try:
                    with lock:
                        os.write(write_end, b"c")
                finally:
                    os._exit(0)
            time.sleep(0.3)
            os.set_blocking(read_end, False)
            with pytest.raises(BlockingIOError):
                os.read(read_end, 1)  # the child is still waiting
        os.set_blocking(read_end, True)
        assert os.read(read_end, 1) == b"c"  # released here: the child got it
        os.waitpid(pid, 0)
        taken: list[int] = []
        threads = [threading.Thread(target=lambda n=n: _take(lock, taken, n)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(taken) == [0, 0, 1, 1, 2, 2, 3, 3]
        assert all(taken[k] == taken[k + 1] for k in range(0, 8, 2))  # never two holders at once
    finally:
        lock.close()
        os.close(read_end)
        os.close(write_end)


def _take(lock: judge_fork.TokenLock, taken: list[int], n: int) -> None:
    with lock:
        taken.append(n)
        time.sleep(0.01)
        taken.append(n)


_THREADS_ONLY: dict[Path, GradeResult] = {}


def _threads_only(path: Path) -> GradeResult:
    """The grading without a copy (once per file in this module)."""
    if path not in _THREADS_ONLY:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv(judge_fork.SWITCH, "0")
            _THREADS_ONLY[path] = grade_path(path, load_config(), "cpu")
    return _THREADS_ONLY[path]


@pytest.mark.parametrize("path", [TODO3_BUG, pytest.param(TODO5_BUG, marks=pytest.mark.slow)], ids=["todo3", "todo5"])
def test_the_copy_grades_as_the_threads_do(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    merged: list[int] = []
    original = judge_fork.merge

    def counted(result: judge_fork.CopyResult, sandbox: Sandbox, grading: object) -> list:
        merged.append(len(result.outcomes))
        return original(result, sandbox, grading)  # type: ignore[arg-type]

    monkeypatch.setattr(judge_fork, "merge", counted)
    with_copy = grade_path(path, load_config(), "cpu")
    assert merged and merged[0] > 0, "the copy did not grade"
    threads_only = _threads_only(path)
    assert _verdicts(with_copy) == _verdicts(threads_only)
    assert with_copy.score == threads_only.score < 100


def test_a_failed_copy_costs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: Sandbox, first_session: int) -> None:
        raise RuntimeError("the copy breaks before grading anything")

    monkeypatch.setattr(Sandbox, "become_copy", broken)  # runs in the copy only
    result = grade_path(TODO3_BUG, load_config(), "cpu")
    assert _verdicts(result) == _verdicts(_threads_only(TODO3_BUG))
    assert {i.todo for i in result.items} == {"todo1", "todo2", "todo3", "todo4", "todo5"}


def test_a_copy_that_finds_the_worker_gone_hands_its_todos_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """The copy never restarts the worker (the judge owns it): it says so, and the judge grades its TODOs."""
    original = Sandbox.become_copy

    def gone(self: Sandbox, first_session: int) -> None:
        original(self, first_session)
        self.copy_lost = True  # as if the copy's first fork order found the loaded worker dead

    monkeypatch.setattr(Sandbox, "become_copy", gone)
    assert _verdicts(grade_path(TODO3_BUG, load_config(), "cpu")) == _verdicts(_threads_only(TODO3_BUG))


def test_no_copy_on_one_core_or_when_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert judge_fork.available()
    monkeypatch.setenv(judge_fork.SWITCH, "0")
    assert not judge_fork.available()
    monkeypatch.delenv(judge_fork.SWITCH)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3})
    assert not judge_fork.available()
