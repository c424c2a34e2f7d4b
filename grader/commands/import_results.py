"""`import`: add results graded elsewhere (students' CI runs, a Gradescope export) to the gradebook.

Each imported row is marked with where it came from (`import:ci`, `import:gradescope`) and
never outranks a grade made here by grade-batch; importing the same result again adds nothing.

Exit status:
  0  everything found was imported (or was already there)
  1  some files or entries could not be imported; each is named on stderr, the rest were imported
  2  --student without exactly one results file, or the gradebook cannot be opened
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grader.commands.grade_batch import add_out_option


def register(verbs: argparse._SubParsersAction) -> None:
    p = verbs.add_parser("import", help="import results.json files or a Gradescope export into the gradebook")
    p.add_argument("sources", nargs="+", type=Path, help="results.json files, folders of them, or a Gradescope export (.zip or folder)")
    add_out_option(p)
    p.add_argument("--student", default=None, help="student id for a single results file (default: from its path)")
    p.add_argument("--lang", choices=("zh", "en"), default=None, help="scorecard language (default: the config's)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from grader import imports
    from grader.classfolder import write_dashboard, write_student_files
    from grader.config import load_config
    from grader.gradebook import Gradebook
    from grader.sanitize import visible

    lang = args.lang or load_config().feedback.language
    if args.student is not None and (len(args.sources) != 1 or not args.sources[0].is_file()):
        print("import: --student needs exactly one results file", file=sys.stderr)
        return 2
    added = same = problems = 0
    with Gradebook.in_dir(args.out) as book:
        for source in args.sources:
            for found in imports.read(source, args.student):
                if isinstance(found, imports.ImportProblem):
                    problems += 1
                    print(f"skipped {visible(str(found))}", file=sys.stderr)  # paths in an export are the students' names
                    continue
                if book.has_result(found.student, found.source, found.result):
                    same += 1  # the same results imported again: no new history row
                    continue
                row = book.add(found.student, found.result, sha256=found.result.sha256, source=found.source,
                               path=found.origin, submitted_at=found.submitted_at)
                added += 1
                current = book.latest(found.student)
                # The scorecards show the current grade: a grade made here keeps its own.
                if current is not None and current.row_id == row:
                    write_student_files(args.out, found.student, found.result, lang)
    write_dashboard(args.out, lang)
    print(f"imported {added}, already there {same}, skipped {problems}", file=sys.stderr)
    return 1 if problems else 0
