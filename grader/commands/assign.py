"""`assign`: regenerate the exercise's four artefacts from its one source.

Exit status: 0 written (with --check: every file up to date); 1 with --check, some files are out of date.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grader import assign


def register(verbs: argparse._SubParsersAction) -> None:
    p = verbs.add_parser("assign", help="regenerate reference/, student_template/ and notebooks/ from the source")
    p.add_argument("--root", default=".", help="project root (default: current directory)")
    p.add_argument("--check", action="store_true", help="only report files that are out of date (exit 1 if any)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    root = Path(args.root)
    if args.check:
        stale = assign.stale_files(root)
        for path in stale:
            print(f"out of date: {path}", file=sys.stderr)
        if stale:
            print("run `python -m grader assign` to regenerate", file=sys.stderr)
        return 1 if stale else 0
    for path in assign.write_all(root):
        print(f"wrote {path}")
    return 0
