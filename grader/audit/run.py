"""Grade mutants in parallel, each in its own `python -m grader.audit.child` process.

A mutant may loop, crash the interpreter or eat memory; the grader's sandbox bounds that,
and the process boundary bounds the grader itself: a grading that fails or passes its
timeout becomes an "error" outcome for that mutant, and the audit goes on.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import grader
from grader.audit import tamper
from grader.audit.mutants import Mutant
from grader.audit.regions import GIVEN
from grader.results import FAILED, GradeResult
from grader.runner import signal_group, stop_grader

KILLED, SURVIVED, INVALID, ERROR = "killed", "survived", "invalid", "error"


@dataclass
class Outcome:
    mutant: Mutant
    status: str  # KILLED, SURVIVED, INVALID or ERROR
    score: float | None = None
    failed_items: list[str] = field(default_factory=list)
    reason: str = ""  # why invalid or error; for a kill, the first failure's message
    seconds: float = 0.0


@dataclass(frozen=True)
class Options:
    jobs: int
    timeout_s: float
    device: str = "cpu"
    config: Path | None = None
    all_items: bool = False  # grade every rubric item, not only the mutant's TODO's
    python: str = sys.executable


def classify(mutant: Mutant, result: GradeResult) -> Outcome:
    if result.error is not None:
        return Outcome(mutant, ERROR, reason=f"not graded: {result.error.message.en}")
    broken = [c for c in result.cells if c.status != "ok"]
    if broken:  # the mutant module does not even import: no verdict on the strategies
        cell = broken[0]
        return Outcome(mutant, INVALID, reason=f"does not import: {cell.error_type}: {cell.message}".strip())
    if result.grader_errors():
        return Outcome(mutant, ERROR, reason=f"grader error: {', '.join(result.grader_errors())}")
    if mutant.todo == GIVEN:
        # Given code earns no points: a mutant of it is killed by a finding on its behaviour, or by
        # the items that call it (the source comparison names every edit anyway: it does not count).
        found = [g for g in result.given_code if g.kind == "given"]
        if found:
            return Outcome(mutant, KILLED, result.score, [], found[0].message.en[:300])
    failed = [item for item in result.items if item.status == FAILED]
    if mutant.operator == tamper.OPERATOR and not result.tampering:
        # The hunt for the grader's observers must be seen, whatever the mistake cost.
        return Outcome(mutant, SURVIVED, result.score, [i.id for i in failed], "the hunt for the grader's observers was not recorded")
    if result.score < 100:
        first = failed[0].failure.message.en if failed and failed[0].failure else ""
        return Outcome(mutant, KILLED, result.score, [i.id for i in failed], first[:300])
    return Outcome(mutant, SURVIVED, result.score)


class Runner:
    """Starts the child graders and can stop every one of them at once (Ctrl-C)."""

    def __init__(self, options: Options):
        self.options = options
        self.stopping = threading.Event()
        self._children: set[subprocess.Popen[bytes]] = set()
        self._lock = threading.Lock()

    def command(self, path: Path, out: Path, mutant: Mutant) -> list[str]:
        cmd = [self.options.python, "-m", "grader.audit.child", str(path), str(out), "--device", self.options.device]
        if not self.options.all_items:
            cmd += ["--todo", mutant.graded_by or mutant.todo]  # given code: with the items that call it
        if self.options.config is not None:
            cmd += ["--config", str(self.options.config.resolve())]
        return cmd

    def grade(self, mutant: Mutant) -> Outcome:
        if mutant.invalid:
            return Outcome(mutant, INVALID, reason=mutant.invalid)
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="audit-") as tmp:
            path, out = Path(tmp) / "mutant.py", Path(tmp) / "result.json"
            path.write_text(mutant.module, encoding="utf-8")
            with open(Path(tmp) / "stderr", "w+b") as stderr:
                with self._lock:
                    if self.stopping.is_set():
                        return Outcome(mutant, ERROR, reason="audit stopped")
                    # Its own session: a timeout kills the grader and all its sandbox processes.
                    child = subprocess.Popen(
                        self.command(path, out, mutant),
                        cwd=tmp,  # hypothesis and the sandbox leave nothing in the checkout
                        env=_env(),
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=stderr,
                        start_new_session=True,
                    )
                    self._children.add(child)
                try:
                    child.wait(timeout=self.options.timeout_s)
                    timed_out = False
                except subprocess.TimeoutExpired:
                    timed_out = True
                    stop_grader(child)
                finally:
                    with self._lock:
                        self._children.discard(child)
                stderr.seek(0)
                tail = stderr.read()[-500:].decode("utf-8", "replace").strip()
            seconds = round(time.monotonic() - started, 2)
            if timed_out:
                return Outcome(mutant, ERROR, reason=f"grading ran past {self.options.timeout_s:g} s", seconds=seconds)
            try:
                result = GradeResult.from_dict(_load(out))
            except (OSError, ValueError, KeyError, TypeError):
                return Outcome(
                    mutant, ERROR, reason=f"the grader failed (exit {child.returncode}): {tail}", seconds=seconds
                )
        outcome = classify(mutant, result)
        outcome.seconds = seconds
        return outcome

    def stop_all(self) -> None:
        with self._lock:
            self.stopping.set()
            children = list(self._children)
        for child in children:
            signal_group(child, signal.SIGINT)  # SIGINT to all first, so they shut down side by side
        for child in children:
            stop_grader(child)


def grade_all(
    mutants: Sequence[Mutant], options: Options, on_done: Callable[[Outcome], None] | None = None
) -> list[Outcome]:
    """Outcomes in the mutants' order.  Ctrl-C stops every child grader, then propagates."""
    runner = Runner(options)
    outcomes: dict[str, Outcome] = {}
    pool = ThreadPoolExecutor(max_workers=max(1, options.jobs), thread_name_prefix="audit")
    try:
        futures = {pool.submit(runner.grade, m): m for m in mutants}
        for future in as_completed(futures):
            outcome = future.result()
            outcomes[outcome.mutant.id] = outcome
            if on_done is not None:
                on_done(outcome)
    except KeyboardInterrupt:
        runner.stop_all()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return [outcomes[m.id] for m in mutants]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    package_root = str(Path(grader.__file__).resolve().parent.parent)  # this checkout's grader
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    env.pop("GITHUB_ACTIONS", None)
    return env


def _load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))
