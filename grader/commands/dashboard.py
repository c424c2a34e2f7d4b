"""`dashboard`: rebuild the class dashboard (and, with --scorecards, every scorecard) from the gradebook.

Exit status:
  0  the dashboard was written
  2  no gradebook in the class folder, or the gradebook cannot be opened
"""

from __future__ import annotations

import argparse
import sys

from grader.commands.grade_batch import add_out_option


def register(verbs: argparse._SubParsersAction) -> None:
    p = verbs.add_parser("dashboard", help="rebuild DIR/dashboard.html from the gradebook")
    add_out_option(p)
    p.add_argument("--lang", choices=("zh", "en"), default=None, help="language (default: the config's)")
    p.add_argument("--scorecards", action="store_true", help="also rewrite each student's scorecards (e.g. in another language)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from grader.classfolder import write_dashboard, write_student_files
    from grader.config import load_config
    from grader.gradebook import FILENAME, Gradebook

    if not (args.out / FILENAME).is_file():
        print(f"dashboard: no gradebook in {args.out} (run grade-batch or import first)", file=sys.stderr)
        return 2
    lang = args.lang or load_config().feedback.language
    if args.scorecards:
        with Gradebook.in_dir(args.out) as book:
            for entry in book.current():
                write_student_files(args.out, entry.student, entry.result, lang)
    print(write_dashboard(args.out, lang))
    return 0
