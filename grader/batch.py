"""Grade a whole class: many submissions in parallel, resumable, into one gradebook folder.

Each submission is graded by its own `python -m grader grade --json` process, so one
student's crash, hang or memory blow-up ends only that process; it becomes an error record
and the batch goes on.  Results are written as each student finishes (files atomically, the
gradebook row in one transaction), so a batch stopped by Ctrl-C, SIGTERM or a crash loses
only the students in flight; running the same command again skips every student whose file
bytes and grading configuration are unchanged, and retries the error records.

Output folder:
    gradebook.sqlite          every grading, with history (grader/gradebook.py)
    dashboard.html            the class dashboard (grader/report/dashboard.py)
    students/<id>.json        Gradescope-format results.json (extra_data.grade_result inside)
    students/<id>.md, .html   the student's scorecards
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TextIO
from urllib.parse import quote

import grader
from grader.config import Config
from grader.gradebook import ERROR, GRADED, Gradebook
from grader.report import gradescope, html, markdown
from grader.results import FAILED, Failure, GradeResult, ItemResult, Text

GRADABLE = (".ipynb", ".py")
_UMASK = os.umask(0o022)
os.umask(_UMASK)
STUDENTS_DIR = "students"


class BatchError(Exception):
    """A problem with the batch as a whole (nothing to grade, two files for one student id)."""


# -- finding submissions -------------------------------------------------------------


@dataclass(frozen=True)
class Student:
    id: str
    path: Path


def _visible(path: Path) -> bool:
    return not path.name.startswith((".", "_"))  # .ipynb_checkpoints, __pycache__, .git


def _gradable_in(folder: Path) -> list[Path]:
    files = sorted(p for p in folder.iterdir() if p.is_file() and _visible(p) and p.suffix.lower() in GRADABLE)
    notebooks = [p for p in files if p.suffix.lower() == ".ipynb"]
    return notebooks or files  # a folder with a notebook and a helper .py is the notebook


def discover(paths: Sequence[Path], id_from: str = "auto") -> tuple[list[Student], list[str]]:
    """Submissions and their student ids, plus warnings about folders that were left out.

    auto: a file given directly or lying at the top of a given folder is named by its stem
    (alice.ipynb -> alice); a file inside a sub-folder of a given folder is named by that
    sub-folder (alice/notebook.ipynb -> alice).  id_from="stem" or "parent" forces one rule.
    """
    found: list[tuple[str, Path]] = []
    warnings: list[str] = []
    for given in paths:
        if given.is_file():
            found.append((given.parent.name if id_from == "parent" else given.stem, given))
            continue
        if not given.is_dir():
            raise BatchError(f"not found: {given}")
        for entry in sorted(given.iterdir()):
            if not _visible(entry):
                continue
            if entry.is_file() and entry.suffix.lower() in GRADABLE:
                found.append((given.name if id_from == "parent" else entry.stem, entry))
            elif entry.is_dir():
                files = _gradable_in(entry)
                if len(files) == 1:
                    found.append((files[0].stem if id_from == "stem" else entry.name, files[0]))
                elif len(files) > 1:
                    names = ", ".join(p.name for p in files)
                    warnings.append(f"{entry}: several notebooks ({names}); keep one per student folder — not graded")
    by_id: dict[str, list[Path]] = {}
    for student_id, path in found:
        by_id.setdefault(student_id, []).append(path)
    clashes = {sid: ps for sid, ps in by_id.items() if len(ps) > 1}
    if clashes:
        lines = [f"  {sid}: {', '.join(map(str, ps))}" for sid, ps in sorted(clashes.items())]
        raise BatchError("several submissions map to one student id (see --id-from):\n" + "\n".join(lines))
    if not found and not warnings:
        raise BatchError("no .ipynb or .py submissions found")
    return [Student(sid, ps[0]) for sid, ps in sorted(by_id.items())], warnings


def slug(student_id: str) -> str:
    """A file name for a student id; ids that needed changing get a hash so two never collide."""
    safe = re.sub(r"[^\w.-]", "_", student_id).strip(".") or "_"
    if safe != student_id:
        safe += "-" + hashlib.sha1(student_id.encode("utf-8")).hexdigest()[:6]
    return safe


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


# -- writing a student's files ---------------------------------------------------------


def write_atomic(path: Path, text: str) -> None:
    """Readers (and a resumed batch) see the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600; scorecards are shared with the TAs
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_student_files(out: Path, student_id: str, result: GradeResult, lang: str) -> None:
    folder, name = out / STUDENTS_DIR, slug(student_id)  # not with_suffix: ids like john.doe have dots
    payload = gradescope.to_results_json(result, lang)
    write_atomic(folder / f"{name}.json", json.dumps(payload, ensure_ascii=False, indent=2) + "\n")
    write_atomic(folder / f"{name}.md", markdown.render(result, lang))
    write_atomic(folder / f"{name}.html", html.render(result, lang))


def error_result(path: Path, config: Config, kind: str, en: str, zh: str) -> GradeResult:
    """The record kept when the grader itself failed for a submission: zero, with the reason."""
    failure = Failure(kind=kind, message=Text(zh, en))
    items = [
        ItemResult(id=i.id, todo=i.todo, title=Text(i.zh, i.en), weight=i.weight, status=FAILED, failure=failure)
        for i in config.items
    ]
    return GradeResult(submission=str(path), sha256="", config_digest=config.digest, items=items, error=failure)


# -- grading one student in its own process ------------------------------------------------


@dataclass
class Outcome:
    student: Student
    sha256: str
    status: str  # GRADED or ERROR
    result: GradeResult
    seconds: float


@dataclass
class Runner:
    """Runs `grade` processes and can stop every one of them at once (on Ctrl-C / SIGTERM)."""

    config: Config
    grade_args: list[str]
    timeout_s: float
    python: str = sys.executable
    stopping: threading.Event = field(default_factory=threading.Event)
    _children: set[subprocess.Popen] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def command(self, path: Path, json_out: Path) -> list[str]:
        return [self.python, "-m", "grader", "grade", str(path), "--json", str(json_out), *self.grade_args]

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        # The batch's grader package, whatever the child's working directory.
        package_root = str(Path(grader.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
        env.pop("GITHUB_ACTIONS", None)  # per-student annotations would flood a CI log
        return env

    def grade(self, student: Student, sha256: str) -> Outcome | None:
        """Grade one student; None when the batch is stopping (nothing is recorded then)."""
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="grade-batch-") as tmp:
            json_out = Path(tmp) / "results.json"
            with open(Path(tmp) / "stderr", "w+b") as stderr:
                with self._lock:
                    if self.stopping.is_set():
                        return None
                    # Own session: a timeout or a stop kills the grader and everything it started.
                    child = subprocess.Popen(
                        self.command(student.path.resolve(), json_out),
                        cwd=tmp,
                        env=self.env(),
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=stderr,
                        start_new_session=True,
                    )
                    self._children.add(child)
                try:
                    child.wait(timeout=self.timeout_s)
                    timed_out = False
                except subprocess.TimeoutExpired:
                    timed_out = True
                    _stop(child)
                finally:
                    with self._lock:
                        self._children.discard(child)
                if self.stopping.is_set():
                    return None
                stderr.seek(0)
                err_tail = stderr.read()[-2000:].decode("utf-8", "replace")
            seconds = round(time.monotonic() - started, 3)
            if timed_out:
                result = error_result(
                    student.path,
                    self.config,
                    "timeout",
                    f"grading took longer than {self.timeout_s:g} s and was stopped",
                    f"评分超过 {self.timeout_s:g} 秒，已被终止",
                )
                return Outcome(student, sha256, ERROR, result, seconds)
            try:
                payload = json.loads(json_out.read_text(encoding="utf-8"))
                result = GradeResult.from_dict(payload["extra_data"]["grade_result"])
            except (OSError, ValueError, KeyError, TypeError):
                result = error_result(
                    student.path,
                    self.config,
                    "grader_crash",
                    f"the grader failed (exit status {child.returncode}): {err_tail.strip()[-500:]}",
                    f"评分程序出错（退出码 {child.returncode}）：{err_tail.strip()[-500:]}",
                )
                return Outcome(student, sha256, ERROR, result, seconds)
            if result.error is not None and result.error.kind == "internal":  # the grader's bug: retry on re-run
                return Outcome(student, sha256, ERROR, result, seconds)
            return Outcome(student, sha256, GRADED, result, seconds)

    def stop_all(self) -> None:
        with self._lock:
            self.stopping.set()
            children = list(self._children)
        for child in children:
            _signal(child, signal.SIGINT)  # all at once, then wait for each
        for child in children:
            _stop(child)


def _signal(child: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(child.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _stop(child: subprocess.Popen, grace_s: float = 5.0) -> None:
    """SIGINT first (the grader then shuts its sandbox down), SIGKILL for whatever is left."""
    _signal(child, signal.SIGINT)
    try:
        child.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    _signal(child, signal.SIGKILL)  # the grader if it is still there, and anything left in its group
    child.wait()


# -- progress ---------------------------------------------------------------------------


class Progress:
    """A bar on a terminal; one plain line per student when stderr is a file or a CI log."""

    def __init__(self, total: int, stream: TextIO):
        self.total, self.done, self.stream = total, 0, stream
        self.tty = stream.isatty()
        if self.tty and total:
            self._draw("")

    def _draw(self, last: str) -> None:
        width = 30
        filled = width * self.done // max(self.total, 1)
        line = f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total}  {last}"
        self.stream.write("\r\033[K" + line[:160])
        self.stream.flush()

    def advance(self, student: str, text: str) -> None:
        self.done += 1
        if self.tty:
            self._draw(f"{student}: {text}")
            if self.done == self.total:
                self.stream.write("\n")
        else:
            self.stream.write(f"[{self.done}/{self.total}] {student}: {text}\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty and 0 < self.done < self.total:
            self.stream.write("\n")
            self.stream.flush()


# -- the batch ----------------------------------------------------------------------------


@dataclass
class Summary:
    graded: int = 0
    errors: int = 0
    skipped: int = 0
    left: int = 0
    interrupted: bool = False


def run_batch(
    students: Sequence[Student],
    out: Path,
    config: Config,
    *,
    lang: str,
    jobs: int,
    grade_args: list[str],
    timeout_s: float,
    force: bool = False,
    stream: TextIO = sys.stderr,
    on_record: Callable[[Outcome], None] | None = None,
    python: str = sys.executable,
) -> Summary:
    summary = Summary()
    with Gradebook.in_dir(out) as book:
        todo: list[tuple[Student, str]] = []
        for student in students:
            sha = file_sha256(student.path)
            if not force and sha and book.is_current(student.id, sha, config.digest):
                summary.skipped += 1
            else:
                todo.append((student, sha))
        if summary.skipped:
            stream.write(f"{summary.skipped} unchanged since their last grading: skipped (--force regrades)\n")
        runner = Runner(config, grade_args, timeout_s, python)
        progress = Progress(len(todo), stream)
        pool = ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="grade")
        finished = False
        try:
            with stop_on_signals():
                by_future = {pool.submit(runner.grade, s, sha): s for s, sha in todo}
                pending: set[Future[Outcome | None]] = set(by_future)
                while pending:
                    done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                    for future in done:
                        _finish(future, by_future[future], book, out, lang, summary, progress, on_record)
                finished = True
        except KeyboardInterrupt:
            summary.interrupted = True
        finally:
            if not finished:
                runner.stopping.set()  # from here on no grader starts
            with _signals_ignored():  # a second Ctrl-C must not leave graders running unwatched
                if not finished:
                    runner.stop_all()
                pool.shutdown(wait=True, cancel_futures=True)
            progress.close()
        summary.left = len(todo) - summary.graded - summary.errors
    return summary


def _finish(
    future: Future[Outcome | None],
    student: Student,
    book: Gradebook,
    out: Path,
    lang: str,
    summary: Summary,
    progress: Progress,
    on_record: Callable[[Outcome], None] | None,
) -> None:
    try:
        outcome = future.result()
        if outcome is None:  # the batch is stopping: nothing to record
            return
        _record(book, out, outcome, lang)
    except Exception as error:  # one student's trouble (a full disk, a bug) never ends the batch
        summary.errors += 1
        progress.advance(student.id, f"ERROR not recorded: {type(error).__name__}: {error}")
        return
    if on_record is not None:
        on_record(outcome)
    if outcome.status == GRADED:
        summary.graded += 1
        text = f"{outcome.result.score:g}/{outcome.result.max_score:g} ({outcome.seconds:.1f} s)"
    else:
        summary.errors += 1
        text = f"ERROR {outcome.result.error.kind if outcome.result.error else ''}"
    progress.advance(outcome.student.id, text)


def _record(book: Gradebook, out: Path, outcome: Outcome, lang: str) -> None:
    # Files first, then the gradebook row: a crash between the two only means a regrade.
    write_student_files(out, outcome.student.id, outcome.result, lang)
    book.add(
        outcome.student.id,
        outcome.result,
        sha256=outcome.sha256,
        source="batch",
        path=str(outcome.student.path),
        status=outcome.status,
        submitted_at=file_time(outcome.student.path),
    )


@contextmanager
def _signals_ignored() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGINT and SIGTERM (Ctrl-C, `kill`, a CI cancel) raise KeyboardInterrupt in the main thread.

    Installed for SIGINT too, not left to Python: a process that starts with SIGINT ignored
    (a background job of a script, `cmd &` under nohup or cron) keeps it ignored, and so would
    every grader it starts.  A handler of our own is reset to the default in each grader at
    exec, so the graders also stop on the SIGINT the batch sends them.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.signal(sig, _raise_interrupt) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def write_dashboard(out: Path, lang: str) -> Path:
    """Rebuild DIR/dashboard.html from the gradebook's latest results."""
    from grader.report import dashboard  # the dashboard is only needed at the end

    with Gradebook.in_dir(out) as book:
        entries = book.current()
    links = {e.student: f"{STUDENTS_DIR}/{quote(slug(e.student))}.html" for e in entries}
    target = out / "dashboard.html"
    write_atomic(target, dashboard.render(entries, lang, links))
    return target
