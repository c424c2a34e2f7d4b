"""The notebook's folder, as the graded notebook sees it: a private copy, made by the judge.

A kernel started next to a notebook runs in the notebook's folder: the data files there can be
read, and the files the notebook writes can be imported or `%run`.  A grading gives the
notebook a private copy of that folder (in the sandbox's work directory, which is its current
directory), made before the worker starts, with these rules:

- which folder: the one holding the submission (`grade path/nb.ipynb`), the student's own
  folder in a batch (`submissions/alice/nb.ipynb`), or none, only the submission itself
  (a batch's flat layout `submissions/alice.ipynb`, where the folder is the whole class's);
- never a symbolic link (neither followed nor copied), never anything but regular files and
  folders, no folder whose name starts with a dot (`.git`, `.ipynb_checkpoints`, `.venv`) and
  no `__pycache__`;
- never the answer key or the grader: when the folder lies in the grader's own checkout, its
  `grader/`, `reference/`, `student_template/`, `notebooks/source/` and the solution notebook are
  left out, and anywhere, any file whose bytes are those of an answer-key file of that checkout
  (the generated solution, the solution notebook, the exercise's single source);
- caps ([notebook] in config.toml): files, bytes and depth; what does not fit is left out, in
  order (the submission first, then by path), and the scorecard says how much.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from grader.config import NotebookEnvironment

CHECKOUT = Path(__file__).resolve().parent.parent  # the folder above the grader package
# Inside the grader's own checkout: what is never copied (the grader, the answer key and its source).
CHECKOUT_PRIVATE = ("grader", "reference", "student_template", "notebooks/source", "notebooks/paged_attention_solution.ipynb", ".git")
# Files whose bytes are the answer key's, wherever they lie.
ANSWER_KEY_GLOBS = ("reference/*.py", "notebooks/source/*.py", "notebooks/*solution*.ipynb")
SKIPPED_DIRS = ("__pycache__",)
SAFE_NAME = re.compile(r"[A-Za-z0-9_][\w.-]{0,63}")
CHUNK = 1 << 20


@dataclass
class FolderCopy:
    """What of a folder goes next to the graded notebook, and what was left out (and why)."""

    name: str  # the folder's name, as the notebook sees its current directory
    files: list[tuple[str, Path]]  # (path inside the folder, the file): the submission first
    left_out: dict[str, int] = field(default_factory=dict)  # reason -> how many
    bytes: int = 0

    def copy_into(self, work: Path, limit_bytes: int) -> Path:
        """Copy the files into `work`/name (made here); returns that folder.  Never follows a link,
        never opens anything but a regular file, never copies more than `limit_bytes` in all."""
        target = work / self.name
        target.mkdir()
        budget = limit_bytes
        for relative, source in self.files:
            dest = target / relative
            dest.parent.mkdir(parents=True, exist_ok=True)
            try:
                budget -= _copy_file(source, dest, budget)
            except (OSError, _TooBig) as error:  # changed since it was listed: left out
                reason = "bytes" if isinstance(error, _TooBig) else "changed"
                self.left_out[reason] = self.left_out.get(reason, 0) + 1
                dest.unlink(missing_ok=True)
        return target


class _TooBig(Exception):
    pass


def _copy_file(source: Path, dest: Path, budget: int) -> int:
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    fd = os.open(source, flags)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{source} is not a regular file")
        if info.st_size > budget:
            raise _TooBig
        written = 0
        with open(dest, "wb") as out:
            while chunk := os.read(fd, CHUNK):
                written += len(chunk)
                if written > budget:
                    raise _TooBig
                out.write(chunk)
        os.chmod(dest, 0o755 if info.st_mode & 0o111 else 0o644)
        return written
    finally:
        os.close(fd)


def folder_name(folder: Path | None) -> str:
    name = folder.name if folder is not None else ""
    return name if SAFE_NAME.fullmatch(name) else "notebook"


def plan(submission: Path, folder: Path | None, env: NotebookEnvironment) -> FolderCopy:
    """The files of `folder` that go next to `submission` (always copied, as `submission.name`, when
    it is a file: grader.check() grades a kernel's history, whose notebook may not be saved);
    `folder` None: the submission alone."""
    copy = FolderCopy(folder_name(folder if folder is not None else submission.parent), [])
    if submission.is_file():
        copy.files.append((submission.name, submission))
    if folder is None:
        return copy
    try:
        root = folder.resolve(strict=True)
        own = submission.resolve()
    except (OSError, RuntimeError):
        return copy
    if not root.is_dir():
        return copy
    private = _private_paths()
    key_digests = answer_key_digests()
    limit_bytes = env.folder_mb << 20
    if copy.files:
        copy.bytes = submission.stat().st_size

    def leave(reason: str) -> None:
        copy.left_out[reason] = copy.left_out.get(reason, 0) + 1

    for directory, names in _walk(root, env.folder_depth, private, leave):
        for name in names:
            path = directory / name
            try:
                info = path.lstat()
            except OSError:
                continue
            if stat.S_ISLNK(info.st_mode):
                leave("link")
                continue
            if not stat.S_ISREG(info.st_mode):
                if not stat.S_ISDIR(info.st_mode):
                    leave("special")
                continue
            if path == own:
                continue
            if path in private or (info.st_size in key_digests and _digest(path) in key_digests[info.st_size]):
                leave("answer_key")
                continue
            if len(copy.files) >= env.folder_files:
                leave("files")
                continue
            if copy.bytes + info.st_size > limit_bytes:
                leave("bytes")
                continue
            copy.files.append((path.relative_to(root).as_posix(), path))
            copy.bytes += info.st_size
    return copy


def folder_digest(submission: Path, folder: Path | None, env: NotebookEnvironment) -> str:
    """What of the folder a grading copies next to the submission, as one sha256: each file's path
    and bytes, and what was left out.  "" for a submission graded alone.  A batch re-grades a
    student whose helper module or data file changed even when the notebook did not."""
    if folder is None:
        return ""
    copy = plan(submission, folder, env)
    digest = hashlib.sha256()
    for relative, path in copy.files:
        if path != submission:
            digest.update(f"{relative}\0{_digest(path)}\n".encode())
    digest.update(repr(sorted(copy.left_out.items())).encode())
    return digest.hexdigest()


def _walk(root: Path, max_depth: int, private: frozenset[Path], leave: Callable[[str], None]) -> Iterator[tuple[Path, list[str]]]:
    """(folder, its entries' names), top-down and sorted; never through a link, never into a
    private folder, a folder whose name starts with a dot, or __pycache__."""
    stack = [(root, 0)]
    while stack:
        directory, depth = stack.pop()
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        yield directory, names
        below = []
        for name in names:
            path = directory / name
            try:
                info = path.lstat()
            except OSError:
                continue
            if not stat.S_ISDIR(info.st_mode) or name.startswith(".") or name in SKIPPED_DIRS:
                continue  # a notebook's folder usually has some (.ipynb_checkpoints): not worth a note
            if path in private:
                leave("answer_key")
            elif depth + 1 > max_depth:
                leave("depth")
            else:
                below.append((path, depth + 1))
        stack.extend(reversed(below))


def _is_checkout(root: Path) -> bool:
    return (root / "grader" / "config.toml").is_file() and (root / "notebooks" / "source").is_dir()


@cache
def _private_paths() -> frozenset[Path]:
    if not _is_checkout(CHECKOUT):
        return frozenset()
    return frozenset(CHECKOUT / p for p in CHECKOUT_PRIVATE)


@cache
def answer_key_digests() -> dict[int, frozenset[str]]:
    """Size -> sha256 of every answer-key file of the grader's checkout (none for an installed grader)."""
    if not _is_checkout(CHECKOUT):
        return {}
    found: dict[int, set[str]] = {}
    for pattern in ANSWER_KEY_GLOBS:
        for path in CHECKOUT.glob(pattern):
            data = path.read_bytes()
            found.setdefault(len(data), set()).add(hashlib.sha256(data).hexdigest())
    return {size: frozenset(digests) for size, digests in found.items()}


def _digest(path: Path) -> str:
    try:
        with open(path, "rb", opener=lambda p, f: os.open(p, f | os.O_NOFOLLOW | os.O_NONBLOCK)) as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return ""


LEFT_OUT_REASONS = {
    "answer_key": ("答案或评分器的文件", "files of the answer key or the grader"),
    "link": ("符号链接（从不跟随）", "symbolic links (never followed)"),
    "special": ("不是普通文件（管道、设备、套接字）", "not regular files (pipes, devices, sockets)"),
    "depth": ("层级过深的文件夹", "folders nested too deep"),
    "files": ("超出文件个数上限", "files over the file count cap"),
    "bytes": ("超出总大小上限", "files over the size cap"),
    "changed": ("评分期间变化或消失的文件", "files that changed or vanished while being copied"),
}
