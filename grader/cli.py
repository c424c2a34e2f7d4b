"""`python -m grader VERB ...` and the `paged-attention-grader` command: one module per verb in grader/commands.

A first argument that is not a verb is a submission to grade, as with ./grade:
`paged-attention-grader my.ipynb` is `paged-attention-grader grade my.ipynb`.

Every verb, besides its own exit statuses (in its --help):
  2    a usage error (unknown option, missing argument), or the gradebook cannot be opened
  130  interrupted (Ctrl-C, SIGTERM)
  141  standard output was closed by its reader (`export | head`); as for any Unix tool
       that SIGPIPE ends, nothing else went wrong
"""

from __future__ import annotations

import argparse
import os
import sys

from grader.commands import (
    assign,
    audit,
    dashboard,
    export,
    grade,
    grade_batch,
    gradescope_zip,
    import_results,
    kv_lab,
    secret,
)
from grader.gradebook import GradebookError

VERBS = (grade, grade_batch, import_results, export, dashboard, gradescope_zip, secret, assign, audit, kv_lab)
EXIT_USAGE, EXIT_INTERRUPTED, EXIT_CLOSED_PIPE = 2, 130, 141
COMMON_EXITS = "Every verb also exits 2 on a usage error, 130 when interrupted, 141 when its output pipe was closed."


def _exit_statuses(doc: str | None) -> str:
    """The 'Exit status:' paragraph of a verb's module docstring, for its --help."""
    text = doc or ""
    start = text.find("Exit status:")
    return (text[start:].strip() + "\n\n" if start >= 0 else "") + COMMON_EXITS


def build_parser() -> argparse.ArgumentParser:
    called = os.path.basename(sys.argv[0])
    parser = argparse.ArgumentParser(
        prog=called if called == "paged-attention-grader" else "python -m grader",
        description="Autograder for the PagedAttention exercise.  A submission given without a verb is graded: "
        "`paged-attention-grader my.ipynb` is `paged-attention-grader grade my.ipynb`.",
        epilog=COMMON_EXITS,
    )
    verbs = parser.add_subparsers(dest="verb", required=True)
    for module in VERBS:
        module.register(verbs)
    for module, sub in zip(VERBS, verbs.choices.values(), strict=True):
        sub.epilog = _exit_statuses(module.__doc__)
        sub.formatter_class = argparse.RawDescriptionHelpFormatter
    return parser


def with_verb(argv: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """A bare submission path means `grade` (verbs win over files named like them, as in ./grade)."""
    verbs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    if argv and argv[0] not in verbs and argv[0] not in ("-h", "--help"):
        return ["grade", *argv]
    return argv


def _quiet_closed_stdout() -> None:
    """Send whatever is still buffered for stdout nowhere, so exiting prints no second error."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(with_verb(list(sys.argv[1:] if argv is None else argv), parser))
    try:
        status = int(args.run(args))
        sys.stdout.flush()  # a reader that went away shows here, inside the try, not at exit
        return status
    except BrokenPipeError:
        _quiet_closed_stdout()
        return EXIT_CLOSED_PIPE
    except KeyboardInterrupt:
        print(f"{args.verb}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except GradebookError as error:
        print(f"{args.verb}: {error}", file=sys.stderr)
        return EXIT_USAGE
