"""Grading one student in a process of its own, with a time limit, and stopping them all at once.

Each submission is graded by its own judge process in its own session, so one student's
crash, hang or memory blow-up ends only that process (and everything it started); it becomes
an error record and the batch goes on.  Warm (the default of grade-batch): the judge is forked
from the batch's judge server (grader/judge_server.py), which imported the checks once, and
its sandbox forks the worker from a template that imported torch once.  Cold (`--cold`, and
the fallback when the server cannot start or stops answering): a `python -m grader grade
--json` process per submission.  Both run the same GradeJob (grader/job.py), with the same result.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import grader
from grader.classfolder import error_result
from grader.config import Config
from grader.discovery import Student
from grader.gradebook import ERROR, GRADED
from grader.job import GradeJob
from grader.judge_server import JudgeServer
from grader.results import GradeResult
from grader.sandbox.forked import Forked, ForkRefused
from grader.sanitize import sanitize_result


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
    job: GradeJob  # the options of every student's grading (lang, device, seed, configuration)
    timeout_s: float
    python: str = sys.executable
    stopping: threading.Event = field(default_factory=threading.Event)
    judges: JudgeServer | None = None  # warm: judges forked from here
    cold_reason: str = ""  # why gradings went cold after the server had started (for the progress log)
    _children: set[subprocess.Popen | Forked] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server_dir: str | None = None

    def start_warm(self, device: str, label: str) -> None:
        """Start the batch's judge server (and its worker template).  Raises OSError: stay cold."""
        self._server_dir = tempfile.mkdtemp(prefix="grade-batch-server-")
        try:
            self.judges = JudgeServer.start(python=self.python, env=self.env(), device=device, label=label, cwd=self._server_dir)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Stop the judge server, if any (after stop_all, or once every grading is done)."""
        judges, self.judges = self.judges, None
        if judges is not None:
            judges.close()
        if self._server_dir is not None:
            shutil.rmtree(self._server_dir, ignore_errors=True)
            self._server_dir = None

    def _start(self, student: Student, json_out: Path, tmp: str, stderr: int, cold: bool = False) -> subprocess.Popen | Forked:
        job = self.job_for(student.path.resolve(), json_out, student.folder)
        judges = None if cold else self.judges
        if judges is not None:
            try:
                return judges.grade(job, cwd=tmp, stderr=stderr)
            except ForkRefused as error:  # the server is gone: the rest of the batch goes cold
                self.judges = None
                self.cold_reason = str(error)
        # Own session: a timeout or a stop kills the grader and everything it started.
        return subprocess.Popen(
            [self.python, "-m", "grader", "grade", *job.argv()],
            cwd=tmp,
            env=self.env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
        )

    def job_for(self, path: Path, json_out: Path, folder: Path | None = None) -> GradeJob:
        """One student's grading; the notebook runs in a copy of `folder`, or alone (None)."""
        where = {"folder": folder.resolve(), "alone": False} if folder is not None else {"folder": None, "alone": True}
        return dataclasses.replace(self.job, submission=path, json=json_out, **where)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        # The batch's grader package, whatever the child's working directory.
        package_root = str(Path(grader.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
        env.pop("GITHUB_ACTIONS", None)  # per-student annotations would flood a CI log
        return env

    def grade(self, student: Student, sha256: str) -> Outcome | None:
        """Grade one student; None when the batch is stopping (nothing is recorded then).

        A grading where the grader failed on some item (a bug of ours) is done once more, cold
        (a `grade` process of its own); if it fails again, that result stands, and the TA's row
        names the items (grader/standing.py)."""
        outcome = self._grade_once(student, sha256)
        if outcome is not None and outcome.status == GRADED and outcome.result.grader_errors():
            again = self._grade_once(student, sha256, cold=True)
            if again is not None and again.status == GRADED:
                again.seconds = round(outcome.seconds + again.seconds, 3)
                return again
        return outcome

    def _grade_once(self, student: Student, sha256: str, cold: bool = False) -> Outcome | None:
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="grade-batch-") as tmp:
            json_out = Path(tmp) / "results.json"
            with open(Path(tmp) / "stderr", "w+b") as stderr:
                with self._lock:
                    if self.stopping.is_set():
                        return None
                    child = self._start(student, json_out, tmp, stderr.fileno(), cold)
                    self._children.add(child)
                try:
                    child.wait(timeout=self.timeout_s)
                    timed_out = False
                except subprocess.TimeoutExpired:
                    timed_out = True
                    stop_grader(child)
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
                result = sanitize_result(GradeResult.from_dict(payload["extra_data"]["grade_result"]))
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
            signal_group(child, signal.SIGINT)  # all at once, then wait for each
        for child in children:
            stop_grader(child)


def signal_group(child: subprocess.Popen | Forked, sig: int) -> None:
    if isinstance(child, Forked):  # a judge forked by the server: only while its pid is surely its own
        child.killpg(sig)
        return
    try:
        os.killpg(child.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_grader(child: subprocess.Popen | Forked, grace_s: float = 5.0) -> None:
    """SIGINT first (the grader then shuts its sandbox down), SIGKILL for whatever is left."""
    signal_group(child, signal.SIGINT)
    try:
        child.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    signal_group(child, signal.SIGKILL)  # the grader if it is still there, and anything left in its group
    child.wait()
