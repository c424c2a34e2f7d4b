"""The class gradebook: one SQLite file (stdlib sqlite3) that batch grading and imports append to.

Every grading is a new row in `submissions`, never an update, so regrades stay as history;
a student's current grade is their latest row (the `latest` view).  Each row keeps the whole
GradeResult as JSON (scorecards and the dashboard are rebuilt from it) and its items are
also spread into `item_results` for queries.
"""

from __future__ import annotations

import json
import os
import sqlite3
from contextlib import closing
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from grader.results import GradeResult

FILENAME = "gradebook.sqlite"
SCHEMA_VERSION = 1
# Row status.  GRADED: the grader produced a result (which may say the file could not be read);
# ERROR: the grader itself failed (timeout, crash), retried on re-run; LEFT_OUT: the batch found
# the student but no single file to grade (several notebooks in their folder, or none).
GRADED, ERROR, LEFT_OUT = "graded", "error", "left_out"
# Row source: where the grade was made.  Imports are as trustworthy as the run that made them.
BATCH, CI, GRADESCOPE = "batch", "import:ci", "import:gradescope"
LEGACY_IMPORT = "import"  # rows imported before CI and Gradescope were told apart


class GradebookError(Exception):
    """The gradebook file cannot be used (not a gradebook, or written by a newer grader)."""

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
    source TEXT NOT NULL,            -- 'batch', 'import:ci', 'import:gradescope' ('import': older imports)
    path TEXT NOT NULL,
    submitted_at TEXT,               -- file time (batch), the export's submission time (Gradescope), UTC
    graded_at TEXT NOT NULL,
    status TEXT NOT NULL,            -- 'graded', 'error' or 'left_out'
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
-- Which seed a batch's grading drew its random cases from (seeds.identity: "public:<seed>",
-- "given:<seed>", "secret:<fingerprint>"): a student is skipped as unchanged only on the same one.
-- A table of its own, so that a gradebook stays readable by graders that predate it.
CREATE TABLE IF NOT EXISTS seed_identities (
    submission_id INTEGER PRIMARY KEY REFERENCES submissions(id),
    identity TEXT NOT NULL
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
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # isolation_level=None: explicit BEGIN/COMMIT, so one student's rows land all or nothing.
            self.db = sqlite3.connect(path, isolation_level=None, timeout=30)
        except (OSError, sqlite3.Error) as error:
            raise GradebookError(f"cannot open {path}: {error}") from None
        try:
            self.db.execute("PRAGMA foreign_keys = ON")
            version = self.db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise GradebookError(f"{path} was written by a newer grader (schema {version})")
            self.db.executescript(SCHEMA)
            self.db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except sqlite3.Error as error:  # e.g. "file is not a database"
            self.db.close()
            raise GradebookError(f"cannot use {path}: {error}") from None
        except GradebookError:
            self.db.close()
            raise

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
        seed_identity: str = "",
    ) -> int:
        """Record one grading as the student's newest submission; returns its row id.

        `seed_identity`: the seed its random cases came from (a batch's grading), or "" (unknown:
        an import, or a grader that predates it)."""
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
                        _storable(path),
                        submitted_at,
                        now(),
                        status,
                        result.score,
                        result.max_score,
                        _result_json(result),
                    ),
                )
                row_id = int(cur.lastrowid or 0)
                if seed_identity:
                    cur.execute("INSERT INTO seed_identities VALUES (?, ?)", (row_id, seed_identity))
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

    def has_result(self, student: str, source: str, result: GradeResult) -> bool:
        """This exact result is already recorded for the student from this source (an import run twice)."""
        raw = _result_json(result)
        row = self.db.execute(
            "SELECT 1 FROM submissions WHERE student_id = ? AND source IN (?, ?) AND result_json = ? LIMIT 1",
            (student, source, LEGACY_IMPORT, raw),
        ).fetchone()
        return row is not None

    def latest_made_here(self, student: str) -> Entry | None:
        """The student's newest row from grade-batch (imports aside)."""
        row = self.db.execute(
            "SELECT * FROM submissions WHERE student_id = ? AND source = ? ORDER BY id DESC LIMIT 1", (student, BATCH)
        ).fetchone()
        return _entry(row) if row else None

    def latest(self, student: str) -> Entry | None:
        row = self.db.execute("SELECT * FROM latest WHERE student_id = ?", (student,)).fetchone()
        return _entry(row) if row else None

    def is_current(self, student: str, sha256: str, config_digest: str, folder_sha256: str = "", seed_identity: str = "") -> bool:
        """Already graded from these exact bytes (the notebook's, and its folder's files: `folder_sha256`)
        under this configuration and on this seed (`seed_identity`; errors do not count).  A row whose
        seed is unknown is never current: a grade made on the public seed is not kept once a secret is set."""
        # Only this machine's own grading counts: an imported result cannot make a re-grade skip.
        entry = self.latest_made_here(student)
        return (entry is not None and entry.sha256 == sha256 and entry.config_digest == config_digest and entry.status == GRADED
                and entry.result.folder_sha256 == folder_sha256 and self.seed_identity(entry.row_id) == seed_identity != "")

    def seed_identity(self, row_id: int) -> str:
        """The seed a row's grading drew its random cases from ("" where unknown)."""
        row = self.db.execute("SELECT identity FROM seed_identities WHERE submission_id = ?", (row_id,)).fetchone()
        return str(row[0]) if row else ""

    def current(self) -> list[Entry]:
        """Every student's latest submission, by student id."""
        return [_entry(row) for row in self.db.execute("SELECT * FROM latest ORDER BY student_id")]

    def history(self, student: str) -> list[Entry]:
        rows = self.db.execute("SELECT * FROM submissions WHERE student_id = ? ORDER BY id", (student,))
        return [_entry(row) for row in rows]

    def students(self) -> list[str]:
        return [row[0] for row in self.db.execute("SELECT id FROM students ORDER BY id")]


def _result_json(result: GradeResult) -> str:
    """The result as stored; a string that is not valid Unicode (a lone surrogate from a file name
    that is not UTF-8) is written as a JSON escape, which SQLite can store and JSON reads back."""
    text = json.dumps(result.to_dict(), ensure_ascii=False, sort_keys=True)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(result.to_dict(), ensure_ascii=True, sort_keys=True)
    return text


def _storable(path: str) -> str:
    """A path as SQLite can store it: a name that is not UTF-8 (lone surrogates in Python) keeps
    its bytes as escapes (\\xff)."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(path).decode("utf-8", "backslashreplace")
    return path


def _entry(row: tuple) -> Entry:
    (row_id, student, sha256, digest, source, path, submitted_at, graded_at, status, _score, _max, raw) = row
    return Entry(row_id, student, sha256, digest, source, path, submitted_at, graded_at, status, GradeResult.from_dict(json.loads(raw)))
