"""Grade one mutant in this process and write its GradeResult as JSON (the audit runs one per mutant).

    python -m grader.audit.child MUTANT.py OUT.json [--todo todo3] [--config PATH] [--seed N] [--device cpu]

Its own process, so a mutant that hangs, crashes or exhausts memory ends this process only.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader.audit.child")
    parser.add_argument("mutant", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--todo", default=None, help="grade only this TODO's items (default: all; given: none, only the given code's checks)")
    parser.add_argument("--config", type=Path, default=None)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)

    from grader.config import load_config
    from grader.grade import grade_path, with_seed

    config = with_seed(load_config(args.config), args.seed)
    todos = None if args.todo is None else set() if args.todo == "given" else {args.todo}
    # A mutant is a module alone: nothing of the folder it was written to (the audit's own files).
    result = grade_path(args.mutant, config, args.device, todos, alone=True)
    args.out.write_text(json.dumps(result.to_dict(), ensure_ascii=False), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
