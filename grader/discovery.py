"""Which students a batch has, and which file is each one's submission.

Every student found is accounted for: one with a gradable file is a `Student`; one whose
folder holds several notebooks or none is a `LeftOut` with the reason, so the batch can
record them (an empty total with that reason in the CSV) instead of letting them vanish.
"""

from __future__ import annotations

import hashlib
import os
import stat
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from grader.config import DEFAULT_SUBMISSION_FILE
from grader.pick import GRADABLE, choose
from grader.results import Text
from grader.sanitize import visible


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


def name_id(name: str) -> str:
    """A student id from a file or folder name.  A name that is not UTF-8 (Python holds its bytes
    as lone surrogates, which neither SQLite nor a UTF-8 file can store) keeps them as escapes
    (\\xff); every other character is kept, so different names stay different ids."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(name).decode("utf-8", "backslashreplace")
    return name


def lookalikes(ids: Sequence[str]) -> list[list[str]]:
    """Groups of ids that differ only by case or Unicode normalisation (Alice, alice; NFC, NFD):
    different students, each with a row, that a TA may take for one."""
    groups: dict[str, list[str]] = {}
    for student_id in ids:
        groups.setdefault(unicodedata.normalize("NFC", student_id).casefold(), []).append(student_id)
    return [sorted(group) for group in groups.values() if len(group) > 1]


def _visible(path: Path) -> bool:
    return not path.name.startswith((".", "_"))  # .ipynb_checkpoints, __pycache__, __MACOSX, .git


def refusal(path: Path, root: Path | None = None) -> Text | None:
    """Why `path` is not taken as anyone's submission, or None: a link (to a classmate's notebook,
    the solution, reference/), a device, a socket, a pipe, or anything whose real place is
    outside `root` (the class folder).  Read with lstat: a link is judged as a link, never by
    what it points to."""
    try:
        info = path.lstat()
    except OSError as error:
        return Text(f"{path} 无法读取（{error.strerror}）", f"{path} cannot be read ({error.strerror})")
    if stat.S_ISLNK(info.st_mode):
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        return Text(
            f"{path} 是一个符号链接（指向 {target}），拒绝评分：请提交文件本身",
            f"{path} is a symbolic link (to {target}): refused, submit the file itself",
        )
    if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
        kind_zh, kind_en = _kind(info.st_mode)
        return Text(f"{path} 是{kind_zh}，不是普通文件，拒绝评分", f"{path} is {kind_en}, not a regular file: refused")
    if root is not None:
        real, top = path.resolve(), root.resolve()
        if real != top and top not in real.parents:
            return Text(f"{path} 实际位于班级文件夹之外（{real}），拒绝评分", f"{path} lies outside the class folder (at {real}): refused")
    return None


def _kind(mode: int) -> tuple[str, str]:
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "设备文件", "a device file"
    if stat.S_ISSOCK(mode):
        return "套接字", "a socket"
    if stat.S_ISFIFO(mode):
        return "命名管道", "a named pipe"
    return "特殊文件", "a special file"


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.lstat().st_mode)
    except OSError:
        return False


def _gradable_in(folder: Path, named: str) -> tuple[list[Path], LeftOut | None]:
    """The submission candidates in a student's folder, or why that student is refused."""
    candidates = sorted(p for p in folder.iterdir() if _visible(p) and p.suffix.lower() in GRADABLE and not _is_dir(p))
    for path in candidates:
        why = refusal(path, folder)
        if why is not None:
            return [], LeftOut(name_id(folder.name), folder, why)
    choice = choose(candidates, named)  # grader/pick.py: the named file, the only notebook, the only .py
    if choice.path is not None:
        return [choice.path], None
    notebooks = [p for p in candidates if p.suffix.lower() == ".ipynb"]
    return notebooks or candidates, None  # none, or several: the student is left out with them listed


def _is_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(path.lstat().st_mode)
    except OSError:
        return False


def _left_out(student_id: str, folder: Path, files: list[Path], named: str) -> LeftOut:
    if not files:
        return LeftOut(
            student_id,
            folder,
            Text(f"文件夹 {folder} 中没有 .ipynb 或 .py 文件", f"no .ipynb or .py file in {folder}"),
        )
    names = ", ".join(p.name for p in files)
    what_zh, what_en = ("笔记本", "notebooks") if files[0].suffix.lower() == ".ipynb" else (".py 文件", ".py files")
    return LeftOut(
        student_id,
        folder,
        Text(
            f"文件夹 {folder} 中有多个{what_zh}（{names}），且没有一个名为 {named}：请改名为 {named}，或只保留一个",
            f"several {what_en} in {folder} ({names}) and none named {named}: rename the one to grade {named}, or keep one",
        ),
    )


def discover(
    paths: Sequence[Path], id_from: str = "auto", exclude: Sequence[Path] = (), named: str = DEFAULT_SUBMISSION_FILE
) -> tuple[list[Student], list[LeftOut]]:
    """Submissions and their student ids, and the students found without exactly one submission.

    auto: a file given directly or lying at the top of a given folder is named by its stem
    (alice.ipynb -> alice); a file inside a sub-folder of a given folder is named by that
    sub-folder (alice/notebook.ipynb -> alice).  id_from="stem" or "parent" forces one rule.
    A sub-folder is one student: its submission is chosen as grader/pick.py says (`named` first,
    the assignment's file name); with several notebooks and none named so, or none, that student
    is left out.
    `exclude`: folders that are no student's (the class folder, when it lies among the submissions).
    """
    skip = {p.resolve() for p in exclude}
    found: list[tuple[str, Path, Path | None]] = []
    left_out: list[LeftOut] = []
    for given in paths:
        if not given.is_dir() and (given.is_file() or given.is_symlink() or given.exists()):
            own = id_from == "parent"  # named by its folder: the folder is the student's
            student_id = name_id(given.parent.name if own else given.stem)
            why = refusal(given)  # a file named on the command line: no link, no device either
            if why is not None:
                left_out.append(LeftOut(student_id, given, why))
            else:
                found.append((student_id, given, given.parent if own else None))
            continue
        if not given.is_dir():
            raise BatchError(f"not found: {visible(str(given))}")
        for entry in sorted(given.iterdir()):
            if not _visible(entry) or (not entry.is_symlink() and entry.resolve() in skip):
                continue
            gradable_name = entry.suffix.lower() in GRADABLE
            why = refusal(entry, given)
            if why is not None:  # a student's file or folder that is a link, a device, ...: their row says so
                student_id = name_id((given.name if id_from == "parent" else entry.stem) if gradable_name else entry.name)
                left_out.append(LeftOut(student_id, entry, why))
                continue
            if _regular(entry) and gradable_name:
                found.append((name_id(given.name if id_from == "parent" else entry.stem), entry, None))
            elif _is_dir(entry):
                files, refused = _gradable_in(entry, named)
                if refused is not None:
                    left_out.append(refused)
                elif len(files) == 1:
                    found.append((name_id(files[0].stem if id_from == "stem" else entry.name), files[0], entry))
                else:
                    left_out.append(_left_out(name_id(entry.name), entry, files, named))
    by_id: dict[str, list[Path]] = {}
    for student_id, path in [*((sid, path) for sid, path, _ in found), *((s.id, s.path) for s in left_out)]:
        by_id.setdefault(student_id, []).append(path)
    clashes = {sid: ps for sid, ps in by_id.items() if len(ps) > 1}
    if clashes:
        lines = [f"  {visible(sid)}: {', '.join(visible(str(p)) for p in ps)}" for sid, ps in sorted(clashes.items())]
        raise BatchError("several submissions map to one student id (see --id-from):\n" + "\n".join(lines))
    if not found and not left_out:
        raise BatchError("no .ipynb or .py submissions found")
    return sorted((Student(sid, path, folder) for sid, path, folder in found), key=lambda s: s.id), left_out


def file_sha256(path: Path) -> str:
    """The file's own bytes (never a link's target: O_NOFOLLOW)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return ""
    digest = hashlib.sha256()
    try:
        while chunk := os.read(fd, 1 << 20):
            digest.update(chunk)
    except OSError:
        return ""
    finally:
        os.close(fd)
    return digest.hexdigest()


def file_time(path: Path) -> str | None:
    """When the file itself was last written (lstat: a link's target never decides it)."""
    try:
        return datetime.fromtimestamp(path.lstat().st_mtime, timezone.utc).isoformat(timespec="seconds")
    except OSError:
        return None
