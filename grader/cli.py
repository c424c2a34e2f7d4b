"""`python -m grader VERB ...`: one module per verb in grader/commands."""

from __future__ import annotations

import argparse

from grader.commands import assign, audit, dashboard, export, grade, grade_batch, gradescope_zip, import_results

VERBS = (grade, grade_batch, import_results, export, dashboard, gradescope_zip, assign, audit)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m grader", description="Autograder for the PagedAttention exercise.")
    verbs = parser.add_subparsers(dest="verb", required=True)
    for module in VERBS:
        module.register(verbs)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.run(args))
