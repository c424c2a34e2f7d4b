"""`export`: every student's current grade as CSV for an LMS, with where it came from.

Columns: student_id, total (out of 100), points, possible, todo1..todo5 (raw rubric points,
adding up to `points`), status, reason, source, submitted_at, recorded_at, identical_to (the
other students whose submitted file has the same bytes, as a JSON list of ids, since an id may
hold spaces: a flag for the TA, not a verdict),
tampering (what the submission did to the grader's own machinery, in short: grader/tampering.py).  total =
100 x points / possible, rounded to two decimals; `possible` leaves out the items that could
not run (97 without a GPU).  A student without a grade (file not gradable, grader error, left
out) has empty numbers and the reason, never a zero they did not earn.  `source` is `batch`
(graded here), `import:ci` or `import:gradescope`.

Exit status:
  0  the CSV was written
  2  no gradebook in the class folder, the gradebook cannot be opened, or the CSV file
     cannot be written
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from grader.commands.grade_batch import add_out_option

if TYPE_CHECKING:
    from grader.standing import Standing

COLUMNS_BEFORE_TODOS = ["student_id", "total", "points", "possible"]
COLUMNS_AFTER_TODOS = ["status", "reason", "source", "submitted_at", "recorded_at", "identical_to", "tampering"]


def register(verbs: argparse._SubParsersAction) -> None:
    p = verbs.add_parser("export", help="write the gradebook's current grades as CSV")
    add_out_option(p)
    p.add_argument("--csv", nargs="?", const="-", default="-", metavar="PATH", help="CSV file to write (default: standard output)")
    p.add_argument("--lang", choices=("zh", "en"), default=None, help="language of the reasons (default: the config's)")
    p.set_defaults(run=run)


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "\n")


def _cell(value: object) -> str:
    """One CSV cell.  Ids and reasons come from students' files: control characters (CR, LF, ESC,
    bidirectional overrides) are written as their escapes, so no cell starts a record, a terminal
    escape sequence (`export` to a terminal, `cat grades.csv`) or a reordering; and a cell a
    spreadsheet would read as a formula (= + - @, also after a tab or CR) starts with a quote."""
    from grader.sanitize import visible

    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:g}"
    text = str(value)
    if text[:1] in FORMULA_STARTS:  # before escaping: a leading tab or CR is what some spreadsheets skip
        text = "'" + text
    return visible(text)


def writer(handle: TextIO) -> Any:
    """RFC 4180: CRLF between records, so a field holding a CR or LF (none does, escaped) is quoted."""
    return csv.writer(handle, lineterminator="\r\n", quoting=csv.QUOTE_MINIMAL)


def rows(standings: Iterable[Standing], todos: tuple[str, ...]) -> Iterable[list[str]]:
    yield [*COLUMNS_BEFORE_TODOS, *todos, *COLUMNS_AFTER_TODOS]
    for s in standings:
        numbers = [s.total, s.points, s.possible, *(s.todos.get(t) for t in todos)]
        # A JSON list: ids may hold spaces and commas ("Alice Smith"), so no separator is safe.
        twins = json.dumps(list(s.identical_to), ensure_ascii=False) if s.identical_to else ""
        extra = [s.status, s.reason, s.source, s.submitted_at, s.recorded_at, twins, s.tampering]
        yield [_cell(s.student), *map(_cell, numbers), *map(_cell, extra)]


def run(args: argparse.Namespace) -> int:
    from grader import standing
    from grader.config import TODOS, load_config
    from grader.gradebook import FILENAME, Gradebook
    from grader.sanitize import visible

    if not (args.out / FILENAME).is_file():
        print(f"export: no gradebook in {visible(args.out)} (run grade-batch or import first)", file=sys.stderr)
        return 2
    lang = args.lang or load_config().feedback.language
    with Gradebook.in_dir(args.out) as book:
        standings = standing.all_of(book.current(), lang)
    if args.csv == "-":
        writer(sys.stdout).writerows(rows(standings, TODOS))
        return 0
    try:
        with open(Path(args.csv), "w", newline="", encoding="utf-8") as handle:
            writer(handle).writerows(rows(standings, TODOS))
    except OSError as error:
        print(f"export: cannot write {visible(args.csv)}: {visible(error.strerror or error)}", file=sys.stderr)
        return 2
    return 0
