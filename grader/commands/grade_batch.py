"""`grade-batch`: grade a class's submissions in parallel into a gradebook folder (resumable).

Exit status: 0 every submission graded; 1 some ended as grader errors (timeout, crash) or
were left out (a folder with several notebooks); 2 nothing to grade / ambiguous student ids;
130 interrupted (run the same command again to resume).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from grader.commands.grade import add_common_options

DEFAULT_OUT = Path("grades")


def add_out_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"class folder with the gradebook (default: {DEFAULT_OUT})")


def register(verbs: argparse._SubParsersAction) -> None:
    p = verbs.add_parser("grade-batch", help="grade many submissions in parallel into a gradebook (resumable)")
    p.add_argument("submissions", nargs="+", type=Path, help="notebooks/scripts, or folders of them (alice.ipynb or alice/notebook.ipynb)")
    add_out_option(p)
    p.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1, help="submissions graded at once (default: all cores)")
    p.add_argument("--id-from", choices=("auto", "stem", "parent"), default="auto",
                   help="student id: file stem, or its folder's name (auto: folder name for files in sub-folders)")
    p.add_argument("--timeout", type=float, default=None, help="seconds per submission (default: the config's total budget + 120)")
    p.add_argument("--force", action="store_true", help="regrade submissions that are unchanged since their last grading")
    add_common_options(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from grader import batch
    from grader.config import load_config
    from grader.grade import with_seed

    config = with_seed(load_config(args.config), args.seed)
    lang = args.lang or config.feedback.language
    try:
        students, warnings = batch.discover(args.submissions, args.id_from)
    except batch.BatchError as error:
        print(f"grade-batch: {error}", file=sys.stderr)
        return 2
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    grade_args = ["--lang", lang, "--device", args.device]
    if args.seed is not None:
        grade_args += ["--seed", str(args.seed)]
    if args.config is not None:
        grade_args += ["--config", str(args.config.resolve())]
    timeout = args.timeout if args.timeout is not None else config.limits.total_budget_s + 120
    summary = batch.run_batch(
        students, args.out, config, lang=lang, jobs=args.jobs, grade_args=grade_args, timeout_s=timeout, force=args.force
    )
    dashboard = batch.write_dashboard(args.out, lang)
    print(
        f"graded {summary.graded}, grader errors {summary.errors}, unchanged {summary.skipped}"
        + (f", left {summary.left}" if summary.left else "")
        + f"; gradebook {args.out / 'gradebook.sqlite'}, dashboard {dashboard}",
        file=sys.stderr,
    )
    if summary.interrupted:
        print("interrupted: run the same command again to grade the rest", file=sys.stderr)
        return 130
    return 1 if summary.errors or warnings else 0
