"""Which students a batch has, and which file is each one's submission.

Every student found is accounted for: one with a gradable file is a `Student`; one whose
folder holds several notebooks or none is a `LeftOut` with the reason, so the batch can
record them (an empty total with that reason in the CSV) instead of letting them vanish.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from grader.results import Text

GRADABLE = (".ipynb", ".py")


class BatchError(Exception):
    """A problem with the batch as a whole (nothing to grade, two files for one student id)."""


@dataclass(frozen=True)
class Student:
    id: str
    path: Path
    # The folder the notebook runs in (a private copy: grader/folder.py): the student's own folder
    # (submissions/alice/nb.ipynb), or None: the submission alone (submissions/alice.ipynb, whose
    # folder is the whole class's).
    folder: Path | None = None


@dataclass(frozen=True)
class LeftOut:
    """A student found without exactly one submission to grade."""

    id: str
    path: Path  # their folder
    reason: Text


def _visible(path: Path) -> bool:
    return not path.name.startswith((".", "_"))  # .ipynb_checkpoints, __pycache__, __MACOSX, .git


def _gradable_in(folder: Path) -> list[Path]:
    files = sorted(p for p in folder.iterdir() if p.is_file() and _visible(p) and p.suffix.lower() in GRADABLE)
    notebooks = [p for p in files if p.suffix.lower() == ".ipynb"]
    return notebooks or files  # a folder with a notebook and a helper .py is the notebook


def _left_out(student_id: str, folder: Path, files: list[Path]) -> LeftOut:
    if not files:
        return LeftOut(
            student_id,
            folder,
            Text(f"文件夹 {folder} 中没有 .ipynb 或 .py 文件，未评分", f"no .ipynb or .py file in {folder}: not graded"),
        )
    names = ", ".join(p.name for p in files)
    return LeftOut(
        student_id,
        folder,
        Text(
            f"文件夹 {folder} 中有多个笔记本（{names}），每位学生只能保留一个，未评分",
            f"several notebooks in {folder} ({names}); keep one per student: not graded",
        ),
    )


def discover(paths: Sequence[Path], id_from: str = "auto", exclude: Sequence[Path] = ()) -> tuple[list[Student], list[LeftOut]]:
    """Submissions and their student ids, and the students found without exactly one submission.

    auto: a file given directly or lying at the top of a given folder is named by its stem
    (alice.ipynb -> alice); a file inside a sub-folder of a given folder is named by that
    sub-folder (alice/notebook.ipynb -> alice).  id_from="stem" or "parent" forces one rule.
    A sub-folder is one student: with several notebooks, or none, that student is left out.
    `exclude`: folders that are no student's (the class folder, when it lies among the submissions).
    """
    skip = {p.resolve() for p in exclude}
    found: list[tuple[str, Path, Path | None]] = []
    left_out: list[LeftOut] = []
    for given in paths:
        if given.is_file():
            own = id_from == "parent"  # named by its folder: the folder is the student's
            found.append((given.parent.name if own else given.stem, given, given.parent if own else None))
            continue
        if not given.is_dir():
            raise BatchError(f"not found: {given}")
        for entry in sorted(given.iterdir()):
            if not _visible(entry) or entry.resolve() in skip:
                continue
            if entry.is_file() and entry.suffix.lower() in GRADABLE:
                found.append((given.name if id_from == "parent" else entry.stem, entry, None))
            elif entry.is_dir():
                files = _gradable_in(entry)
                if len(files) == 1:
                    found.append((files[0].stem if id_from == "stem" else entry.name, files[0], entry))
                else:
                    left_out.append(_left_out(entry.name, entry, files))
    by_id: dict[str, list[Path]] = {}
    for student_id, path in [*((sid, path) for sid, path, _ in found), *((s.id, s.path) for s in left_out)]:
        by_id.setdefault(student_id, []).append(path)
    clashes = {sid: ps for sid, ps in by_id.items() if len(ps) > 1}
    if clashes:
        lines = [f"  {sid}: {', '.join(map(str, ps))}" for sid, ps in sorted(clashes.items())]
        raise BatchError("several submissions map to one student id (see --id-from):\n" + "\n".join(lines))
    if not found and not left_out:
        raise BatchError("no .ipynb or .py submissions found")
    return sorted((Student(sid, path, folder) for sid, path, folder in found), key=lambda s: s.id), left_out


def file_sha256(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ""


def file_time(path: Path) -> str | None:
    try:
        return datetime.fromtimestamp(path.stat().st_mtime, timezone.utc).isoformat(timespec="seconds")
    except OSError:
        return None
