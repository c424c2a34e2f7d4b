"""What grading produces: plain, JSON-ready records that reports and gradebooks read.

Data flows one way: submission -> sandboxed run -> checks -> these records -> reports.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from grader.config import RubricItem

PASSED, FAILED, NOT_RUN = "passed", "failed", "not_run"
GRADER_ERROR = "grader_error"  # a Failure kind: the grader's own check raised (a bug of ours, never the student's)


@dataclass
class Text:
    """A sentence in both of the course's languages."""

    zh: str
    en: str

    def get(self, lang: str) -> str:
        return self.zh if lang == "zh" else self.en


@dataclass
class Failure:
    """Why an item failed, with the smallest reproduction found."""

    kind: str  # "wrong", "error", "not_implemented", "missing", "timeout", "crashed", "budget", "integrity"
    message: Text
    repro: str = ""  # code a student can paste after their cells; ends in asserts (comments in English)
    expected: str = ""
    actual: str = ""
    traceback: str = ""
    # Structured data for a picture of the failing state (reports draw it; absent: no picture).
    #   {"kind": "pool", "num_blocks": int, "step": str,
    #    "before": {"free": [int], "tables": {name: [int]}, "lens": {name: seq_len}}, "after": {...},
    #    "highlight": [int], "earlier": {"step", "before", "after", "highlight"} (optional: the call
    #    that first broke what the failing call found broken)}
    #   {"kind": "attention", "errors": [[float]] (per sequence, per query head: max |out - expected|),
    #    "tolerance": float, "dtype": str, "worst": [seq, head]}
    picture: dict[str, Any] | None = None
    repro_zh: str = ""  # the same reproduction with its comments in Chinese (empty: use `repro`)
    expected_zh: str = ""  # `expected` and `actual` in Chinese, where they hold words (empty: the same)
    actual_zh: str = ""

    def repro_for(self, lang: str) -> str:
        return self.repro_zh if lang == "zh" and self.repro_zh else self.repro

    def expected_for(self, lang: str) -> str:
        return self.expected_zh if lang == "zh" and self.expected_zh else self.expected

    def actual_for(self, lang: str) -> str:
        return self.actual_zh if lang == "zh" and self.actual_zh else self.actual


@dataclass
class ItemResult:
    id: str
    todo: str
    title: Text
    weight: float
    status: str  # PASSED, FAILED or NOT_RUN
    failure: Failure | None = None
    examples: int = 0  # cases the item tried
    seconds: float = 0.0
    exercised: int = 0  # times the item's property was actually checked (a pass needs enough of them)
    random_cases: int = 0  # random cases that completed and checked it (a pass needs [evidence] min_random)
    blocked_by: str = ""  # the failing item of the same TODO that kept this one from being judged (its reproduction is shown)

    @property
    def score(self) -> float:
        return self.weight if self.status == PASSED else 0.0


@dataclass
class CellReport:
    index: int
    status: str  # "ok", "error", "timeout", "crashed", "not_run"
    error_type: str = ""
    message: str = ""
    traceback: str = ""


@dataclass
class SkippedLine:
    """A line of the notebook that did not run while grading (reports say why, in both languages)."""

    cell: int
    line: int | None  # in the cell, when known
    text: str  # the line as typed
    reason: str  # "shell", "install", "debugger", "network" or "program" (grader/report/labels.py)


@dataclass
class Tampering:
    """Something the submission did to the grader's own machinery (grader/tampering.py): what, where,
    whether it was stopped at the call, and the items it cost."""

    kind: str  # "gc", "frames", "frame", "code", "trace", "audit", "memory", "forged", "broken", "grown", "kernel"
    detail: str  # the operation (gc.get_objects, tb_frame, sys.settrace, ...) or the path
    where: str  # the submission's file and line it was done at ("<cell 3>:12"), or ""
    scopes: list[str]  # "cells" (while the cells ran), or the items, TODOs or "given" whose sessions it was in
    denied: bool  # stopped at the call: it touched nothing
    message: Text
    cost: list[str] = field(default_factory=list)  # the items that got no points for it ([integrity] tamper)


@dataclass
class GradeResult:
    submission: str
    sha256: str
    config_digest: str
    items: list[ItemResult]
    cells: list[CellReport] = field(default_factory=list)
    notes: list[Text] = field(default_factory=list)
    flags: list[Text] = field(default_factory=list)  # integrity findings
    output_excerpt: str = ""
    output_bytes: int = 0
    error: Failure | None = None  # set when the submission could not be graded at all
    seconds: float = 0.0
    device: str = "cpu"
    isolation: dict[str, Any] = field(default_factory=dict)  # what confined the submission while it ran
    given_code: list[Failure] = field(default_factory=list)  # given (non-TODO) code changed or behaving differently
    random_cases: dict[str, str] = field(default_factory=dict)  # {"kind": "secret" | "public" | "given", "zh": ..., "en": ...}
    skipped: list[SkippedLine] = field(default_factory=list)  # lines not run while grading (shell, installs, debuggers)
    folder_sha256: str = ""  # a batch's: the notebook folder's files as graded (grader/folder.py folder_digest)
    tampering: list[Tampering] = field(default_factory=list)  # what the submission did to the grader's machinery
    submission_name: str = ""  # the student's own file name, where `submission` is another path (a copy, a kernel's history)

    @property
    def shown_name(self) -> str:
        """The file name a card is titled with: the student's own, else the graded path's."""
        return self.submission_name or PurePath(self.submission).name

    @property
    def max_score(self) -> float:
        return 100.0

    @property
    def score(self) -> float:
        """Points out of 100.  Items that could not run here (no GPU) are left out of the scale."""
        counted = [item for item in self.items if item.status != NOT_RUN]
        possible = sum(item.weight for item in counted)
        if not possible:
            return 0.0
        return round(100.0 * sum(item.score for item in counted) / possible, 2)

    def grader_errors(self) -> list[str]:
        """The items (and "given code") whose check failed by a bug of the grader's own."""
        found = [item.id for item in self.items if item.failure is not None and item.failure.kind == GRADER_ERROR]
        return found + ["given code" for g in self.given_code if g.kind == GRADER_ERROR][:1]

    def todo_scores(self) -> dict[str, tuple[float, float]]:
        """Per TODO: (points earned, points possible) among the items that ran."""
        out: dict[str, tuple[float, float]] = {}
        for item in self.items:
            if item.status == NOT_RUN:
                continue
            got, possible = out.get(item.todo, (0.0, 0.0))
            out[item.todo] = (got + item.score, possible + item.weight)
        return out

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["score"] = self.score
        data["max_score"] = self.max_score
        return data

    @staticmethod
    def from_dict(data: dict[str, Any]) -> GradeResult:
        def failure(raw: dict[str, Any] | None) -> Failure | None:
            if not raw:
                return None
            return Failure(**{**raw, "message": Text(**raw["message"])})

        return GradeResult(
            submission=data["submission"],
            sha256=data["sha256"],
            config_digest=data["config_digest"],
            items=[
                ItemResult(**{**i, "title": Text(**i["title"]), "failure": failure(i.get("failure"))})
                for i in data["items"]
            ],
            cells=[CellReport(**c) for c in data.get("cells", [])],
            notes=[Text(**n) for n in data.get("notes", [])],
            flags=[Text(**f) for f in data.get("flags", [])],
            output_excerpt=data.get("output_excerpt", ""),
            output_bytes=data.get("output_bytes", 0),
            error=failure(data.get("error")),
            seconds=data.get("seconds", 0.0),
            device=data.get("device", "cpu"),
            isolation=dict(data.get("isolation") or {}),
            given_code=[f for f in (failure(g) for g in data.get("given_code") or []) if f is not None],
            random_cases={str(k): str(v) for k, v in (data.get("random_cases") or {}).items()},
            skipped=[SkippedLine(**s) for s in data.get("skipped") or [] if isinstance(s, dict)],
            folder_sha256=str(data.get("folder_sha256") or ""),
            submission_name=str(data.get("submission_name") or ""),
            tampering=[_tampering(t) for t in data.get("tampering") or [] if isinstance(t, dict)],
        )


def not_graded(submission: str, config_digest: str, rubric: Iterable[RubricItem], failure: Failure, device: str = "cpu") -> GradeResult:
    """The record of a submission that was not graded (unreadable, not found, the grader failed):
    `error` says why, and every item is NOT_RUN, none failed, so no report counts a failure or a
    score that nothing earned.  (GradeResult.score is 0 here, which Gradescope needs.)"""
    items = [ItemResult(i.id, i.todo, Text(i.zh, i.en), i.weight, NOT_RUN) for i in rubric]
    return GradeResult(submission=submission, sha256="", config_digest=config_digest, items=items, error=failure, device=device)


def _tampering(raw: dict[str, Any]) -> Tampering:
    message = raw.get("message") if isinstance(raw.get("message"), dict) else {}
    return Tampering(
        kind=str(raw.get("kind", "")), detail=str(raw.get("detail", "")), where=str(raw.get("where", "")),
        scopes=[str(c) for c in raw.get("scopes") or [] if isinstance(c, str)] if isinstance(raw.get("scopes"), list) else [],
        denied=raw.get("denied") is True,
        message=Text(str(message.get("zh", "")), str(message.get("en", ""))),
        cost=[str(c) for c in raw.get("cost") or [] if isinstance(c, str)] if isinstance(raw.get("cost"), list) else [],
    )
