"""`export`: every student's current grade as CSV for an LMS, with where it came from.

Columns: student_id, total (out of 100), points, possible, todo1..todo5 (raw rubric points,
adding up to `points`), status, reason, source, submitted_at, recorded_at, identical_to (the
other students whose submitted file has the same bytes: a flag for the TA, not a verdict),
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
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

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


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:g}"
    text = str(value)
    # Ids and reasons come from students' files: a spreadsheet must not read them as formulas.
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def rows(standings: Iterable[Standing], todos: tuple[str, ...]) -> Iterable[list[str]]:
    yield [*COLUMNS_BEFORE_TODOS, *todos, *COLUMNS_AFTER_TODOS]
    for s in standings:
        numbers = [s.total, s.points, s.possible, *(s.todos.get(t) for t in todos)]
        extra = [s.status, s.reason, s.source, s.submitted_at, s.recorded_at, " ".join(s.identical_to), s.tampering]
        yield [_cell(s.student), *map(_cell, numbers), *map(_cell, extra)]


def run(args: argparse.Namespace) -> int:
    from grader import standing
    from grader.config import TODOS, load_config
    from grader.gradebook import FILENAME, Gradebook

    if not (args.out / FILENAME).is_file():
        print(f"export: no gradebook in {args.out} (run grade-batch or import first)", file=sys.stderr)
        return 2
    lang = args.lang or load_config().feedback.language
    with Gradebook.in_dir(args.out) as book:
        standings = standing.all_of(book.current(), lang)
    if args.csv == "-":
        csv.writer(sys.stdout, lineterminator="\n").writerows(rows(standings, TODOS))
        return 0
    try:
        with open(Path(args.csv), "w", newline="", encoding="utf-8") as handle:
            csv.writer(handle, lineterminator="\n").writerows(rows(standings, TODOS))
    except OSError as error:
        print(f"export: cannot write {args.csv}: {error.strerror or error}", file=sys.stderr)
        return 2
    return 0
