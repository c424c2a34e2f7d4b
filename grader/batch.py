"""Grade a whole class: many submissions in parallel, resumable, into one class folder.

Finding the students is grader/discovery.py, grading one of them in its own process
grader/runner.py, and the folder's files grader/classfolder.py; this module runs the batch.
Results are recorded as each student finishes (files atomically, the gradebook row in one
transaction), so a batch stopped by Ctrl-C, SIGTERM or a crash loses only the students in
flight; running the same command again skips every student whose file bytes (and the files of
the folder their notebook runs in), grading configuration and seed (the term secret's
fingerprint, or the public seed) are unchanged, and retries the grader errors.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from grader import seeds
from grader.classfolder import error_result, write_student_files
from grader.config import Config
from grader.discovery import LeftOut, Student, file_sha256, file_time, lookalikes
from grader.folder import folder_digest
from grader.gradebook import BATCH, GRADED, LEFT_OUT, Gradebook
from grader.job import GradeJob
from grader.results import GradeResult
from grader.runner import Outcome, Runner
from grader.sanitize import visible
from grader.stopping import held, signals_ignored, stop_on_signals

# -- progress ---------------------------------------------------------------------------------


def _printable(text: str) -> str:
    """Student ids come from file names: no escape sequence, line break or bidirectional override
    of theirs reaches the TA's terminal; each is shown as its escape (\\x1b)."""
    return visible(text)


class Progress:
    """A bar on a terminal; one plain line per student when stderr is a file or a CI log.

    Best effort: once the stream cannot be written (a closed pipe), it falls silent and the
    batch goes on.
    """

    def __init__(self, total: int, stream: TextIO):
        self.total, self.done, self.stream = total, 0, stream
        try:
            self.tty = stream.isatty()
        except (OSError, ValueError):
            self.tty = False
        if self.tty and total:
            self._write(self._bar(""))

    def _write(self, text: str) -> None:
        if self.stream is None:
            return
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            self.stream = None  # type: ignore[assignment]

    def _bar(self, last: str) -> str:
        width = 30
        filled = width * self.done // max(self.total, 1)
        return "\r\033[K" + f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total}  {last}"[:160]

    def advance(self, student: str, text: str) -> None:
        self.done += 1
        line = _printable(f"{student}: {text}")
        if self.tty:
            self._write(self._bar(line) + ("\n" if self.done == self.total else ""))
        else:
            self._write(f"[{self.done}/{self.total}] {line}\n")

    def note(self, text: str) -> None:
        self._write(("\r\033[K" if self.tty else "") + _printable(text) + "\n")

    def close(self) -> None:
        if self.tty and 0 < self.done < self.total:
            self._write("\n")


# -- the batch ----------------------------------------------------------------------------------


@dataclass
class Summary:
    graded: int = 0
    unreadable: int = 0  # of `graded`: a scorecard saying why the file could not be graded
    errors: int = 0  # the grader failed (timeout, crash), or recording failed
    left_out: int = 0  # found without a single file to grade
    skipped: int = 0  # unchanged since their last grading
    unfinished: int = 0  # not reached before the batch was stopped
    interrupted: bool = False


def run_batch(
    students: Sequence[Student],
    out: Path,
    config: Config,
    *,
    lang: str,
    jobs: int,
    job: GradeJob,
    timeout_s: float,
    left_out: Sequence[LeftOut] = (),
    force: bool = False,
    stream: TextIO = sys.stderr,
    on_record: Callable[[Outcome], None] | None = None,
    python: str = sys.executable,
    warm: bool = False,
    device: str = "auto",
    seed_identity: str | None = None,
) -> Summary:
    """Grade `students` into the class folder `out` and record the `left_out` ones with their reason.

    `warm`: judges forked from one judge server, workers from one template (runner.py);
    otherwise one `grade` process each.  `seed_identity`: which seed the random cases come
    from (seeds.identity; None: the one `config` gives), kept with each row: a student is
    skipped as unchanged only if their last grade was made on the same one.  Stops on SIGINT or SIGTERM
    (summary.interrupted) after stopping every grader it started.
    """
    summary = Summary()
    if seed_identity is None:
        seed_identity = seeds.identity(config)
    with Gradebook.in_dir(out) as book:
        for student in left_out:
            _record_left_out(book, out, student, config, lang)
            summary.left_out += 1
        todo: list[tuple[Student, str]] = []
        folders: dict[str, str] = {}  # student -> their folder's files, as a grading copies them
        for student in students:
            sha = file_sha256(student.path)
            folders[student.id] = folder_digest(student.path, student.folder, config.notebook)
            if not force and sha and book.is_current(student.id, sha, config.digest, folders[student.id], seed_identity):
                summary.skipped += 1
            else:
                todo.append((student, sha))
        progress = Progress(len(todo), stream)
        for student in left_out:
            progress.note(f"left out {student.id}: {student.reason.en}")
        for group in lookalikes([s.id for s in students] + [s.id for s in left_out]):
            # ascii(): NFC and NFD spellings look alike on a terminal; their escapes do not.
            progress.note(f"{', '.join(map(ascii, group))}: ids that differ only by case or Unicode normalisation, graded as different students")
        if summary.skipped:
            progress.note(f"{summary.skipped} unchanged since their last grading: skipped (--force regrades)")
        runner = Runner(config, job, timeout_s, python)
        pool = ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="grade")
        finished = False
        try:
            with stop_on_signals():
                if warm and todo:
                    _start_warm(runner, device, out, progress)
                by_future = {pool.submit(runner.grade, s, sha): s for s, sha in todo}
                pending: set[Future[Outcome | None]] = set(by_future)
                noted_cold = False
                while pending:
                    done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                    for future in done:
                        with held():  # a student's row and scorecards, recorded whole before a stop
                            _finish(future, by_future[future], folders, book, out, lang, summary, progress, on_record, seed_identity)
                    if runner.cold_reason and not noted_cold:
                        noted_cold = True
                        progress.note(f"the judge server stopped answering ({runner.cold_reason}): the rest in processes of their own")
                finished = True
        except KeyboardInterrupt:
            summary.interrupted = True
        finally:
            if not finished:
                runner.stopping.set()  # from here on no grader starts
            with signals_ignored():  # a second Ctrl-C must not leave graders running unwatched
                if not finished:
                    runner.stop_all()
                pool.shutdown(wait=True, cancel_futures=True)
                runner.close()
            progress.close()
        summary.unfinished = len(todo) - summary.graded - summary.errors
    return summary


def _start_warm(runner: Runner, device: str, out: Path, progress: Progress) -> None:
    """The judge server and its worker template; without them the batch grades cold, as well."""
    try:
        # The class folder in its command line names the batch's processes in `ps`.
        runner.start_warm(device, label=str(out.resolve()))
    except OSError as error:
        progress.note(f"no warm judge ({error}): each submission in a grader process of its own")
        return
    assert runner.judges is not None
    if not runner.judges.template:
        progress.note(f"no warm worker template ({runner.judges.why_cold}): each worker imports torch itself")


def _finish(
    future: Future[Outcome | None],
    student: Student,
    folders: dict[str, str],
    book: Gradebook,
    out: Path,
    lang: str,
    summary: Summary,
    progress: Progress,
    on_record: Callable[[Outcome], None] | None,
    seed_identity: str = "",
) -> None:
    try:
        outcome = future.result()
        if outcome is None:  # the batch is stopping: nothing to record
            return
        outcome.result.folder_sha256 = folders.get(outcome.student.id, "")
        _record(book, outcome, seed_identity)
    except Exception as error:  # one student's trouble (a full disk, a bug) never ends the batch
        summary.errors += 1
        progress.advance(student.id, f"ERROR not recorded: {type(error).__name__}: {error}")
        return
    unwritten = _write_files(out, outcome.student.id, outcome.result, lang)
    if on_record is not None:
        on_record(outcome)
    if outcome.status == GRADED and outcome.result.error is not None:
        summary.graded += 1
        summary.unreadable += 1
        text = f"not gradable: {outcome.result.error.message.en}"
    elif outcome.status == GRADED:
        summary.graded += 1
        text = f"{outcome.result.score:g}/{outcome.result.max_score:g} ({outcome.seconds:.1f} s)"
    else:
        summary.errors += 1
        text = f"ERROR {outcome.result.error.kind if outcome.result.error else ''}"
    progress.advance(outcome.student.id, text + unwritten)


def _write_files(out: Path, student_id: str, result: GradeResult, lang: str) -> str:
    """The student's scorecards; what went wrong, said after their progress line ("" if nothing).
    Their gradebook row is kept either way: the dashboard writes missing scorecards again."""
    try:
        write_student_files(out, student_id, result, lang)
    except OSError as error:
        return f"; scorecards not written ({error.strerror or error})"
    return ""


def _record(book: Gradebook, outcome: Outcome, seed_identity: str = "") -> None:
    # The gradebook row first: a crash before the scorecards are written loses nothing, since
    # the dashboard writes the missing ones from the row (classfolder.write_dashboard).
    book.add(
        outcome.student.id,
        outcome.result,
        sha256=outcome.sha256,
        source=BATCH,
        path=str(outcome.student.path),
        status=outcome.status,
        submitted_at=file_time(outcome.student.path),
        seed_identity=seed_identity,
    )


def _record_left_out(book: Gradebook, out: Path, student: LeftOut, config: Config, lang: str) -> None:
    """A row with the reason, once: a re-run that finds the same folder the same way adds nothing."""
    result = error_result(student.path, config, "left_out", student.reason.en, student.reason.zh)
    assert result.error is not None
    previous = book.latest_made_here(student.id)
    if previous is not None and previous.status == LEFT_OUT and previous.result.error is not None:
        if previous.result.error.message.en == result.error.message.en:
            return
    book.add(student.id, result, sha256="", source=BATCH, path=str(student.path), status=LEFT_OUT)
    _write_files(out, student.id, result, lang)
