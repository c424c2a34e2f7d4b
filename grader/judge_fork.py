"""Some TODOs graded in a forked copy of the judge, beside the judge's own thread.

Why: the judge's work for an item (hypothesis, the models, the dense reference) is Python
under one GIL.  Two TODO threads in one process queue for it, and while one waits the other
thread's worker waits too: on two cores a grading's checks left a third of the machine idle
(benchmarks/grading_vs_execution.py).  A copy of the judge made after the cells are loaded
has a GIL of its own, the same sandbox, and every import already done.

What the copy shares with the judge is the sandbox: the loaded worker, its listener and its
control connection.  A fork order and the connection that answers it go together, so both
processes take one lock around them (`TokenLock`: a pipe holding one byte, which nothing
outside this grading can open), and the copy numbers its sessions from a range of its own.
The copy never restarts or stops the worker: the worker is the judge's child.  If the copy
finds it gone, crashes, or does not answer by the grading's deadline, the judge grades those
TODOs itself, as it does without a copy, so a grading never depends on the copy.

What comes back is a pickle over a pipe.  The copy is the judge's own process, which runs no
submission code and reads the worker only through validated JSON, as the judge does.

PA_GRADER_JUDGE_FORK=0 grades every TODO in the judge's threads (as before this module).
"""

from __future__ import annotations

import ctypes
import os
import pickle
import select
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from grader.results import ItemResult

if TYPE_CHECKING:
    from grader.checks.base import Grading
    from grader.sandbox.client import Sandbox

SWITCH = "PA_GRADER_JUDGE_FORK"
COPY_SESSIONS = 1 << 30  # the copy's session numbers start here; the judge's never get there
PR_SET_PDEATHSIG = 1


def available() -> bool:
    """Whether a copy is worth making: two cores or more to run on (one core gains nothing), and fork."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return os.environ.get(SWITCH, "1") != "0" and hasattr(os, "fork") and cores >= 2


class TokenLock:
    """A lock shared by threads and forked processes: a pipe holding one byte, taken by reading it."""

    def __init__(self) -> None:
        self.read_end, self.write_end = os.pipe()
        os.set_blocking(self.read_end, False)
        os.write(self.write_end, b"t")

    def __enter__(self) -> None:
        while True:
            try:
                if os.read(self.read_end, 1):
                    return
            except BlockingIOError:
                pass
            select.select([self.read_end], [], [], 1.0)

    def __exit__(self, *exc: object) -> None:
        os.write(self.write_end, b"t")

    def close(self) -> None:
        for fd in (self.read_end, self.write_end):
            os.close(fd)


@dataclass
class CopyResult:
    """What a copy sends back: its items, and what it added to the grading and the sandbox."""

    outcomes: list[ItemResult]
    given: dict[str, Any]
    mutations: list[Any]
    tampering: list[Any]
    sandbox_tamper: list[Any]


class Copy:
    """A forked copy of the judge grading some TODOs; `join` gives its CopyResult, or None (the judge grades them)."""

    def __init__(self, run: Callable[[], list[ItemResult]], sandbox: Sandbox, grading: Grading, lock: TokenLock):
        self.lock = lock
        marks = (len(grading.mutations), len(grading.tampering), len(sandbox.tamper), set(grading.given))
        read_end, write_end = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the copy: never returns
            os.close(read_end)
            _serve(write_end, run, sandbox, grading, marks)
        os.close(write_end)
        self.pid, self.read_end = pid, read_end

    def join(self, deadline: float) -> CopyResult | None:
        """The copy's result once it ends (killed at `deadline`, monotonic): None if it failed."""
        chunks: list[bytes] = []
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([self.read_end], [], [], left)[0]:
                    os.kill(self.pid, signal.SIGKILL)
                    return None
                chunk = os.read(self.read_end, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            os.close(self.read_end)
            try:
                _, status = os.waitpid(self.pid, 0)
            except ChildProcessError:  # reaped already (SIGCHLD ignored): what it sent says
                status = 0
        if status != 0 or not chunks:
            return None
        try:
            result = pickle.loads(b"".join(chunks))
        except Exception:
            return None
        return result if isinstance(result, CopyResult) else None


def _serve(write_end: int, run: Callable[[], list[ItemResult]], sandbox: Sandbox, grading: Grading,
           marks: tuple[int, int, int, set[str]]) -> None:
    """In the copy: grade, send the result, and exit without running anything of the judge's
    (no atexit, no Sandbox.close: the sandbox is the judge's)."""
    status = 1
    try:
        _die_with_parent()
        sandbox.become_copy(COPY_SESSIONS)
        outcomes = run()
        if not sandbox.copy_lost:
            mutations, tampering, sandbox_tamper, given = marks
            result = CopyResult(
                outcomes=outcomes,
                given={k: v for k, v in grading.given.items() if k not in given},
                mutations=grading.mutations[mutations:],
                tampering=grading.tampering[tampering:],
                sandbox_tamper=sandbox.tamper[sandbox_tamper:],
            )
            data = memoryview(pickle.dumps(result))
            while data:
                data = data[os.write(write_end, data):]
            status = 0
    except BaseException:
        status = 1
    finally:
        os._exit(status)


def _die_with_parent() -> None:
    """A copy whose judge died (killed, Ctrl-C) ends too."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def merge(result: CopyResult, sandbox: Sandbox, grading: Grading) -> list[ItemResult]:
    """The copy's additions, put where the judge's own threads would have put them."""
    for key, finding in result.given.items():
        grading.given.setdefault(key, finding)
    grading.mutations += result.mutations
    grading.tampering += result.tampering
    sandbox._note_tamper(result.sandbox_tamper)  # kept once: every session's hello repeats the cells' denials
    return result.outcomes
