"""`export`: the gradebook's current grades as CSV for an LMS (student id, total, points per TODO).

A student whose latest grading ended in a grader error (timeout, crash) gets empty cells.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from grader.commands.grade_batch import add_out_option


def register(verbs: argparse._SubParsersAction) -> None:
    p = verbs.add_parser("export", help="write the gradebook's current grades as CSV")
    add_out_option(p)
    p.add_argument("--csv", nargs="?", const="-", default="-", metavar="PATH", help="CSV file to write (default: standard output)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from grader.config import TODOS
    from grader.gradebook import FILENAME, GRADED, Gradebook, iter_todo_points

    if not (args.out / FILENAME).is_file():
        print(f"export: no gradebook in {args.out} (run grade-batch or import first)", file=sys.stderr)
        return 2
    with Gradebook.in_dir(args.out) as book:
        entries = book.current()
    handle = sys.stdout if args.csv == "-" else open(Path(args.csv), "w", newline="", encoding="utf-8")
    try:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["student_id", "total", *TODOS])
        for entry in entries:
            if entry.status != GRADED:  # the grader failed: an empty cell, not a zero the student never earned
                writer.writerow([entry.student, "", *([""] * len(TODOS))])
                continue
            points = [f"{p:g}" for p in iter_todo_points(entry.result, TODOS)]
            writer.writerow([entry.student, f"{entry.result.score:g}", *points])
    finally:
        if handle is not sys.stdout:
            handle.close()
    return 0
