"""How each student stands in the gradebook: one reading, shared by the CSV and the dashboard.

A student has a total only when a submission of theirs was graded.  Everyone else found (a
file that could not be read, a grader error, a folder with several notebooks or none) has
no total and a reason, never a zero they did not earn and never a missing row.

Points: the TODO columns are raw rubric points, they add up to `points`, and `possible` is
the rubric points of the items that ran (97 where the CUDA item cannot run); the total is
100 x points / possible, rounded to two decimals, exactly as GradeResult.score computes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from grader import gradebook, tampering
from grader.config import TODOS
from grader.gradebook import BATCH, CI, GRADESCOPE, LEGACY_IMPORT, Entry
from grader.report.labels import not_graded


class Status:
    """A student's standing, as the CSV's `status` column spells it."""

    GRADED = "graded"  # a total
    NOT_GRADABLE = "not_gradable"  # the file could not be graded (empty, not a notebook, too large)
    GRADER_ERROR = "grader_error"  # the grader failed (timeout, crash); the next batch retries
    LEFT_OUT = "left_out"  # no single file to grade (several notebooks in the folder, or none)


SOURCE_WORDS = {
    BATCH: ("本机评分", "graded here"),
    CI: ("导入：学生的 CI 运行", "imported: student's CI run"),
    GRADESCOPE: ("导入：Gradescope", "imported: Gradescope"),
    LEGACY_IMPORT: ("导入", "imported"),
}
STATUS_WORDS = {
    Status.GRADED: ("已评分", "graded"),
    Status.NOT_GRADABLE: ("无法评分", "could not be graded"),
    Status.GRADER_ERROR: ("评分程序出错", "grader error"),
    Status.LEFT_OUT: ("没有唯一的提交", "left out"),
}


@dataclass(frozen=True)
class Standing:
    student: str
    status: str  # a Status
    total: float | None  # out of 100; None: no grade, `reason` says why
    points: float | None  # the sum of `todos`
    possible: float | None  # rubric points of the items that ran
    todos: dict[str, float] = field(default_factory=dict)  # raw points per TODO (empty without a total)
    todo_possible: dict[str, float] = field(default_factory=dict)
    reason: str = ""
    source: str = BATCH
    submitted_at: str | None = None
    recorded_at: str = ""
    identical_to: tuple[str, ...] = ()  # other students whose current submission has the same bytes (sha256)
    tampering: str = ""  # what the submission did to the grader's machinery, in short (grader/tampering.py)

    @property
    def imported(self) -> bool:
        return self.source != BATCH


def word(table: dict[str, tuple[str, str]], key: str, lang: str) -> str:
    zh, en = table.get(key, (key, key))
    return zh if lang == "zh" else en


def _one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def identical(entries: list[Entry]) -> dict[str, tuple[str, ...]]:
    """For each student whose current file is byte for byte another's (same sha256), those others.

    A flag for the TA to look at (one student copied another, or both the same source), never a
    verdict: both keep their grades.
    """
    by_hash: dict[str, list[str]] = {}
    for entry in entries:
        # Only files that were graded: two empty or broken files are alike, and say nothing.
        if entry.sha256 and entry.status == gradebook.GRADED and entry.result.error is None:
            by_hash.setdefault(entry.sha256, []).append(entry.student)
    same: dict[str, tuple[str, ...]] = {}
    for students in by_hash.values():
        if len(students) > 1:
            for student in students:
                same[student] = tuple(sorted(s for s in students if s != student))
    return same


def all_of(entries: list[Entry], lang: str) -> list[Standing]:
    """Every student's standing, with the identical submissions flagged."""
    same = identical(entries)
    return [of(entry, lang, same.get(entry.student, ())) for entry in entries]


def of(entry: Entry, lang: str, identical_to: tuple[str, ...] = ()) -> Standing:
    """The student's standing from their current gradebook entry; `lang` for the reason."""
    result = entry.result
    if entry.status != gradebook.GRADED or result.error is not None:
        status = {gradebook.LEFT_OUT: Status.LEFT_OUT, gradebook.ERROR: Status.GRADER_ERROR}.get(entry.status, Status.NOT_GRADABLE)
        why = result.error.message.get(lang) if result.error is not None else word(STATUS_WORDS, status, lang)
        reason = not_graded(why, lang)  # the same sentence as the student's scorecard and results.json
        return Standing(entry.student, status, None, None, None, reason=_one_line(reason), source=entry.source,
                        submitted_at=entry.submitted_at, recorded_at=entry.graded_at, identical_to=identical_to)
    per_todo = result.todo_scores()
    todos = {todo: per_todo.get(todo, (0.0, 0.0))[0] for todo in TODOS}
    todo_possible = {todo: per_todo.get(todo, (0.0, 0.0))[1] for todo in TODOS}
    reason = result.flags[0].get(lang) if result.flags else ""  # an integrity flag explains a zero
    errors = result.grader_errors()
    if errors:  # graded, but some item not by our fault scored 0: the TA must look (retried cold already)
        reason = ("评分程序出错：" if lang == "zh" else "grader error: ") + ", ".join(errors) + (f"; {reason}" if reason else "")
    return Standing(
        entry.student, Status.GRADED, result.score, sum(todos.values()), sum(todo_possible.values()), todos, todo_possible,
        reason=_one_line(reason), source=entry.source, submitted_at=entry.submitted_at, recorded_at=entry.graded_at,
        identical_to=identical_to, tampering=tampering.summary(result.tampering, lang),
    )
