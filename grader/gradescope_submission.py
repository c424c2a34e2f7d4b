"""Which uploaded file Gradescope grades: `python -m grader.gradescope_submission SUBMISSION_DIR --json RESULTS`.

run_autograder (grader/gradescope_package.py) asks this first.  It picks the file by the rule of
grader/pick.py (the assignment's file name, then the only notebook, then the only .py) among the
regular files uploaded (links, hidden files and folders such as .ipynb_checkpoints and __MACOSX
left out) and prints its path, ended by a NUL byte, for run_autograder to grade.  When no file is
the submission it prints nothing and writes RESULTS itself: not graded, the files it found, what
to upload, and the 0 Gradescope needs, said to be only that.

Exit status: 0 (a file picked, or RESULTS written); 2 RESULTS could not be written.
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from grader.pick import choose

if TYPE_CHECKING:
    from grader.config import Config

MAX_FILES = 10_000  # what an upload may hold that is looked at (a repository with its history, say)
LISTED = 10  # files named in the message; the rest are counted
NAME_CHARS = 80


def uploaded(root: Path) -> list[Path]:
    """The regular files under `root`, in name order: no link (neither followed nor taken), nothing
    hidden (.git, .ipynb_checkpoints, ._ files) and no __MACOSX or __pycache__."""
    found: list[Path] = []
    for folder, dirs, files in os.walk(root, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__MACOSX", "__pycache__")))
        for name in sorted(files):
            path = Path(folder) / name
            if name.startswith(".") or not _regular(path):
                continue
            found.append(path)
            if len(found) >= MAX_FILES:
                return found
    return found


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.lstat().st_mode)
    except OSError:
        return False


def _listing(root: Path, files: list[Path], separator: str) -> str:
    names = []
    for path in files[:LISTED]:
        name = path.relative_to(root).as_posix()
        names.append(name if len(name) <= NAME_CHARS else name[: NAME_CHARS - 1] + "…")
    more = len(files) - LISTED
    return separator.join(names) + (f" (+{more})" if more > 0 else "")


def why_none(root: Path, files: list[Path], named: str) -> tuple[str, str]:
    """(zh, en): what was found, and what to upload."""
    if not files:
        return (f"没有收到任何文件。请上传你的笔记本 {named}。", f"no file was uploaded. Upload your notebook, {named}.")
    zh, en = _listing(root, files, "、"), _listing(root, files, ", ")
    gradable = [p for p in files if p.suffix.lower() in (".ipynb", ".py")]
    if not gradable:
        return (
            f"上传的文件中没有笔记本（.ipynb）或 Python 文件（.py）：{zh}。请上传你的笔记本 {named}。",
            f"none of the files uploaded is a notebook (.ipynb) or a Python file (.py): {en}. Upload your notebook, {named}.",
        )
    return (
        f"上传了多个可评分的文件，而没有一个名为 {named}，无法确定评哪一个：{zh}。"
        f"请把要评分的笔记本命名为 {named} 后上传（也可以只上传这一个笔记本）。",
        f"several files could be the submission and none is named {named}, so none was graded: {en}. "
        f"Name the notebook to grade {named} and upload it (or upload that notebook alone).",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader.gradescope_submission", description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="the uploaded files (/autograder/submission)")
    parser.add_argument("--json", type=Path, required=True, help="results.json to write when no file is picked")
    parser.add_argument("--lang", choices=("zh", "en"), default=None)
    parser.add_argument("--config", type=Path, default=None)
    args = parser.parse_args(argv)

    from grader.config import load_config

    config = load_config(args.config)
    files = uploaded(args.root) if args.root.is_dir() else []
    choice = choose([p.relative_to(args.root) for p in files], config.submission_file)
    if choice.path is not None:
        sys.stdout.buffer.write(os.fsencode(args.root / choice.path) + b"\0")
        return 0
    return write_not_found(args.root, files, config, args.lang or config.feedback.language, args.json)


def write_not_found(root: Path, files: list[Path], config: Config, lang: str, target: Path) -> int:
    from grader.report import gradescope
    from grader.results import Failure, Text, not_graded
    from grader.sanitize import sanitize_result

    zh, en = why_none(root, files, config.submission_file)
    result = sanitize_result(not_graded(str(root), config.digest, config.items, Failure("no_submission", Text(zh, en))))
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(gradescope.to_json(gradescope.to_results_json(result, lang)), encoding="utf-8")
    except OSError as error:
        print(f"cannot write {target}: {error.strerror or error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
