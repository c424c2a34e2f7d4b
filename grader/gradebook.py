"""The class gradebook: one SQLite file (stdlib sqlite3) that batch grading and imports append to.

Every grading is a new row in `submissions`, never an update, so regrades stay as history;
a student's current grade is their latest row (the `latest` view).  Each row keeps the whole
GradeResult as JSON (scorecards and the dashboard are rebuilt from it) and its items are
also spread into `item_results` for queries.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from grader.results import GradeResult

FILENAME = "gradebook.sqlite"
SCHEMA_VERSION = 1
GRADED, ERROR = "graded", "error"  # ERROR: the grader itself failed (timeout, crash), retried on re-run

SCHEMA = """
CREATE TABLE IF NOT EXISTS students (
    id TEXT PRIMARY KEY,
    first_seen TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS submissions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    student_id TEXT NOT NULL REFERENCES students(id),
    sha256 TEXT NOT NULL,            -- of the submitted file's bytes
    config_digest TEXT NOT NULL,     -- grader/config.toml that graded it
    source TEXT NOT NULL,            -- 'batch' or 'import'
    path TEXT NOT NULL,
    submitted_at TEXT,               -- file time (batch) or the export's time (import), UTC
    graded_at TEXT NOT NULL,
    status TEXT NOT NULL,            -- 'graded' or 'error'
    score REAL NOT NULL,
    max_score REAL NOT NULL,
    result_json TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS submissions_by_student ON submissions(student_id, id);
CREATE TABLE IF NOT EXISTS item_results (
    submission_id INTEGER NOT NULL REFERENCES submissions(id),
    item_id TEXT NOT NULL,
    todo TEXT NOT NULL,
    weight REAL NOT NULL,
    status TEXT NOT NULL,
    score REAL NOT NULL,
    failure_kind TEXT,
    message_en TEXT,
    message_zh TEXT,
    repro TEXT,
    PRIMARY KEY (submission_id, item_id)
);
-- A grade made here (source 'batch') outranks any imported one: an imported results.json is
-- only as trustworthy as the run that made it, and a student can edit their own CI workflow.
DROP VIEW IF EXISTS latest;
CREATE VIEW latest AS
    SELECT s.* FROM submissions s
    WHERE s.id = (
        SELECT t.id FROM submissions t WHERE t.student_id = s.student_id
        ORDER BY (t.source = 'batch') DESC, t.id DESC LIMIT 1
    );
"""


@dataclass(frozen=True)
class Entry:
    """One row of `submissions`, with its result parsed."""

    row_id: int
    student: str
    sha256: str
    config_digest: str
    source: str
    path: str
    submitted_at: str | None
    graded_at: str
    status: str
    result: GradeResult


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Gradebook:
    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        # isolation_level=None: explicit BEGIN/COMMIT, so one student's rows land all or nothing.
        self.db = sqlite3.connect(path, isolation_level=None, timeout=30)
        self.db.execute("PRAGMA foreign_keys = ON")
        version = self.db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise RuntimeError(f"{path} was written by a newer grader (schema {version})")
        self.db.executescript(SCHEMA)
        self.db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    @classmethod
    def in_dir(cls, directory: Path) -> Gradebook:
        return cls(directory / FILENAME)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Gradebook:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add(
        self,
        student: str,
        result: GradeResult,
        *,
        sha256: str,
        source: str,
        path: str,
        status: str = GRADED,
        submitted_at: str | None = None,
    ) -> int:
        """Record one grading as the student's newest submission; returns its row id."""
        with closing(self.db.cursor()) as cur:
            cur.execute("BEGIN IMMEDIATE")
            try:
                cur.execute("INSERT OR IGNORE INTO students(id, first_seen) VALUES (?, ?)", (student, now()))
                cur.execute(
                    "INSERT INTO submissions(student_id, sha256, config_digest, source, path, submitted_at, graded_at,"
                    " status, score, max_score, result_json) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    (
                        student,
                        sha256,
                        result.config_digest,
                        source,
                        path,
                        submitted_at,
                        now(),
                        status,
                        result.score,
                        result.max_score,
                        json.dumps(result.to_dict(), ensure_ascii=False, sort_keys=True),
                    ),
                )
                row_id = int(cur.lastrowid or 0)
                cur.executemany(
                    "INSERT INTO item_results VALUES (?,?,?,?,?,?,?,?,?,?)",
                    [
                        (
                            row_id,
                            item.id,
                            item.todo,
                            item.weight,
                            item.status,
                            item.score,
                            item.failure.kind if item.failure else None,
                            item.failure.message.en if item.failure else None,
                            item.failure.message.zh if item.failure else None,
                            item.failure.repro if item.failure else None,
                        )
                        for item in result.items
                    ],
                )
                cur.execute("COMMIT")
            except BaseException:
                # A Ctrl-C can land just after COMMIT; only roll back what is still open.
                if self.db.in_transaction:
                    cur.execute("ROLLBACK")
                raise
        return row_id

    def latest(self, student: str) -> Entry | None:
        row = self.db.execute("SELECT * FROM latest WHERE student_id = ?", (student,)).fetchone()
        return _entry(row) if row else None

    def is_current(self, student: str, sha256: str, config_digest: str) -> bool:
        """Already graded from these exact bytes under this configuration (errors do not count)."""
        # Only this machine's own grading counts: an imported result cannot make a re-grade skip.
        entry = self.db.execute(
            "SELECT sha256, config_digest, status FROM submissions WHERE student_id = ? AND source = 'batch' ORDER BY id DESC LIMIT 1",
            (student,),
        ).fetchone()
        return entry is not None and entry[0] == sha256 and entry[1] == config_digest and entry[2] == GRADED

    def current(self) -> list[Entry]:
        """Every student's latest submission, by student id."""
        return [_entry(row) for row in self.db.execute("SELECT * FROM latest ORDER BY student_id")]

    def history(self, student: str) -> list[Entry]:
        rows = self.db.execute("SELECT * FROM submissions WHERE student_id = ? ORDER BY id", (student,))
        return [_entry(row) for row in rows]

    def students(self) -> list[str]:
        return [row[0] for row in self.db.execute("SELECT id FROM students ORDER BY id")]

    def raw_json(self, row_id: int) -> str:
        return str(self.db.execute("SELECT result_json FROM submissions WHERE id = ?", (row_id,)).fetchone()[0])


def _entry(row: tuple) -> Entry:
    (row_id, student, sha256, digest, source, path, submitted_at, graded_at, status, _score, _max, raw) = row
    return Entry(row_id, student, sha256, digest, source, path, submitted_at, graded_at, status, GradeResult.from_dict(json.loads(raw)))


def iter_todo_points(result: GradeResult, todos: tuple[str, ...]) -> Iterator[float]:
    """Points earned per TODO, in `todos` order (0 for a TODO with no item that ran)."""
    scores = result.todo_scores()
    for todo in todos:
        yield scores.get(todo, (0.0, 0.0))[0]
