"""`import`: add results graded elsewhere (students' CI runs, a Gradescope export) to the gradebook."""

from __future__ import annotations

import argparse
import json
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
    from grader import batch, imports
    from grader.config import load_config
    from grader.gradebook import Gradebook

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
                    print(f"skipped {found}", file=sys.stderr)
                    continue
                latest = book.latest(found.student)
                raw = json.dumps(found.result.to_dict(), ensure_ascii=False, sort_keys=True)
                if latest is not None and book.raw_json(latest.row_id) == raw:
                    same += 1  # the same results imported again: no new history row
                    continue
                batch.write_student_files(args.out, found.student, found.result, lang)
                book.add(found.student, found.result, sha256=found.result.sha256, source="import",
                         path=found.origin, submitted_at=found.submitted_at)
                added += 1
    batch.write_dashboard(args.out, lang)
    print(f"imported {added}, already there {same}, skipped {problems}", file=sys.stderr)
    return 1 if problems else 0
