"""A warm batch (grader/judge_server.py, grader/runner.py): the same grades as cold `grade`
processes, a judge that crashes or hangs ends alone, and Ctrl-C, a dead server or one that never
starts lose nobody."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import nbformat
import pytest

from grader import discovery, runner
from grader.batch import run_batch
from grader.config import load_config
from grader.gradebook import ERROR, GRADED, Gradebook
from grader.job import GradeJob
from grader.results import GradeResult
from grader.sanitize import sanitize_result
from tests.conftest import CORPUS, ROOT

IGNORING_SIGINT = "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); os.execv(sys.executable, sys.argv[1:])"
SAME_GRADE = [  # a correct one, buggy ones of several TODOs (a notebook among them), given code edited, a hostile one
    CORPUS / "correct" / "online_softmax_blockwise.py",
    CORPUS / "buggy" / "todo1_nb_decorator_defined_later.ipynb",
    CORPUS / "buggy" / "todo2_not_removed_from_free.py",
    CORPUS / "buggy" / "todo4_sorted_table.py",
    CORPUS / "buggy" / "todo5_gqa_head_modulo.py",
    CORPUS / "hostile" / "forge_monkeypatch.py",
]


def _notebook(path: Path, *sources: str) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


def _comparable(result: dict[str, Any]) -> dict[str, Any]:
    """A result less what differs between any two gradings: times, and the grading's own uid."""
    result = json.loads(json.dumps(result))
    result.pop("seconds", None)
    for item in result["items"]:
        item.pop("seconds", None)
    isolation = result.get("isolation") or {}
    if isolation.get("uid") is not None:
        uid = str(isolation["uid"])
        isolation["uid"] = "<uid>"
        isolation["summary"] = {k: v.replace(uid, "<uid>") for k, v in isolation["summary"].items()}
    return result


def _processes_naming(text: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if text.encode() in cmdline:
                shown = cmdline.replace(b"\0", b" ")[:200]
                found.append(f"{entry.name}: {shown!r}")
    return found


def _none_left(text: str, wait_s: float = 20) -> None:
    """No judge server, template, judge or worker of the batch is left (their command lines name its folder)."""
    deadline = time.monotonic() + wait_s
    while (left := _processes_naming(text)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == []


@pytest.mark.slow
def test_a_warm_batch_grades_exactly_as_cold_grade_processes(tmp_path: Path) -> None:
    subs, out = tmp_path / "subs", tmp_path / "out"
    subs.mkdir()
    for path in SAME_GRADE:
        (subs / path.name).write_bytes(path.read_bytes())
    batch = subprocess.run([sys.executable, "-m", "grader", "grade-batch", str(subs), "--out", str(out), "-j", "2", "--lang", "en",
                            "--device", "cpu", "--public-seed"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert batch.returncode == 0, batch.stderr
    assert "no warm" not in batch.stderr, batch.stderr  # it really was warm
    with sqlite3.connect(out / "gradebook.sqlite") as db:
        warm = {sid: json.loads(text) for sid, text in db.execute("SELECT student_id, result_json FROM latest")}
    assert sorted(warm) == sorted(p.stem for p in SAME_GRADE)
    for path in SAME_GRADE:
        report = tmp_path / f"{path.stem}.json"
        cold = subprocess.run([sys.executable, "-m", "grader", "grade", str((subs / path.name).resolve()), "--json", str(report),
                               "--lang", "en", "--device", "cpu"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert cold.returncode in (0, 1), cold.stderr
        result = sanitize_result(GradeResult.from_dict(json.loads(report.read_text())["extra_data"]["grade_result"]))
        assert _comparable(warm[path.stem]) == _comparable(result.to_dict()), path.name


PINNED = """
import json, sys
from hypothesis.internal.conjecture import providers
import grader.checks
{more}
from grader.draws import pin_local_constants
pin_local_constants()
found = providers._get_local_constants()
print(json.dumps([sorted(found.integers), list(found.strings)[:50], len(found)]))
"""


def test_a_grading_draws_the_checks_constants_whatever_it_has_loaded() -> None:
    """Hypothesis draws, now and then, constants from the source of the "local" modules loaded at
    that moment: `grade` has the CLI, a warm judge what its server imported, grader.check()'s
    process neither, pytest the tests.  Pinned to the checks' own, they all meet the same examples,
    in the same order."""
    seen = []
    for more in ("", "import grader.cli, grader.judge_server, tests.test_domain  # local modules full of constants"):
        proc = subprocess.run([sys.executable, "-c", PINNED.format(more=more)], cwd=ROOT, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": str(len(seen) + 1)})
        assert proc.returncode == 0, proc.stderr
        seen.append(json.loads(proc.stdout))
    assert seen[0] == seen[1]
    integers, _, count = seen[0]
    assert count > 100 and 4096 in integers and 130 not in integers  # a block size of the checks', no exit status of the CLI's


def _judges(server_pid: int) -> list[int]:
    """The server's children that are judges (not its worker template)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if int(stat[stat.rfind(")") + 2 :].split()[1]) == server_pid and b"--template" not in cmdline:
                found.append(int(entry.name))
    return found


def _server_of(out: Path) -> int | None:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"grader.judge_server" in cmdline and str(out.resolve()).encode() in cmdline:
                return int(entry.name)
    return None


def _recorded(out: Path) -> int:
    if not (out / "gradebook.sqlite").exists():
        return 0
    try:
        with sqlite3.connect(f"file:{out / 'gradebook.sqlite'}?mode=ro", uri=True, timeout=5) as db:
            return int(db.execute("SELECT count(DISTINCT student_id) FROM submissions").fetchone()[0])
    except sqlite3.OperationalError:
        return 0


@pytest.mark.slow
def test_a_warm_batch_started_with_sigint_ignored_stops_on_it_and_resumes(tmp_path: Path) -> None:
    subs, out = tmp_path / "subs", tmp_path / "out"
    (subs / "quick1.ipynb").parent.mkdir(parents=True)
    (subs / "quick1.ipynb").write_text("{not json")
    for name in ("slow1", "slow2"):
        _notebook(subs / f"{name}.ipynb", "import time\ntime.sleep(300)")
    args = ["grade-batch", str(subs), "--out", str(out), "-j", "3", "--lang", "en", "--device", "cpu", "--public-seed"]
    proc = subprocess.Popen([sys.executable, "-c", IGNORING_SIGINT, sys.executable, "-m", "grader", *args], cwd=ROOT,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        judges: list[int] = []
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            server = _server_of(out)
            judges = _judges(server) if server else []
            if _recorded(out) == 1 and len(judges) == 2:
                break
            time.sleep(0.2)
        assert len(judges) == 2 and _recorded(out) == 1
        for pid in judges:  # each judge stops on the SIGINT the batch sends it
            sigign = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("SigIgn"))
            assert not int(sigign.split()[1], 16) >> (signal.SIGINT - 1) & 1, sigign
        os.kill(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=60) == 130, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
    _none_left(str(out.resolve()))
    assert _recorded(out) == 1
    for name in ("slow1", "slow2"):  # they would hang again: now they are quick too
        (subs / f"{name}.ipynb").write_text("{still not json")
    again = subprocess.run([sys.executable, "-m", "grader", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert "1 unchanged since their last grading: skipped" in again.stderr
    with Gradebook.in_dir(out) as book:
        assert [(e.student, e.status, len(book.history(e.student))) for e in book.current()] == [
            ("quick1", GRADED, 1), ("slow1", GRADED, 1), ("slow2", GRADED, 1)
        ]
    _none_left(str(out.resolve()))


@pytest.mark.slow
def test_a_judge_that_hangs_or_fails_ends_alone(tmp_path: Path) -> None:
    """Timeouts and a judge that fails become error records; the server goes on serving the next."""
    config = load_config()
    hang = tmp_path / "hang.ipynb"
    _notebook(hang, "while True:\n    pass")
    fine = tmp_path / "fine.ipynb"
    fine.write_text("{not json")
    batch = runner.Runner(config, GradeJob(lang="en", device="cpu"), timeout_s=8)
    batch.start_warm("cpu", label=str(tmp_path))
    try:
        assert batch.judges is not None and batch.judges.template
        started = time.monotonic()
        outcome = batch.grade(discovery.Student("hang", hang), "aa")
        assert outcome is not None and outcome.status == ERROR and outcome.result.error is not None
        assert outcome.result.error.kind == "timeout" and time.monotonic() - started < 30
        failing = runner.Runner(config, GradeJob(config=tmp_path / "no-such-config.toml"), timeout_s=60, judges=batch.judges)
        outcome = failing.grade(discovery.Student("fine", fine), "bb")
        assert outcome is not None and outcome.status == ERROR and outcome.result.error is not None
        assert outcome.result.error.kind == "grader_crash" and "exit status 3" in outcome.result.error.message.en
        outcome = batch.grade(discovery.Student("fine", fine), "bb")
        assert outcome is not None and outcome.status == GRADED and batch.judges is not None  # still warm
    finally:
        batch.close()
    _none_left(str(tmp_path))


FAKE = """#!/bin/sh
if [ "$2" = grader.judge_server ]; then echo "no judge server here" >&2; exit 1; fi
cp "$FAKE_RESULT" "$6"
"""


def test_a_judge_server_that_cannot_start_leaves_a_cold_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from grader.report.gradescope import to_results_json
    from tests.test_batch import synthetic

    subs = tmp_path / "subs"
    subs.mkdir()
    for name in ("ann", "bob"):
        (subs / f"{name}.ipynb").write_text("{}")
    result = tmp_path / "result.json"
    result.write_text(json.dumps(to_results_json(synthetic(None), "en")))
    fake = tmp_path / "fake-python"
    fake.write_text(FAKE)
    fake.chmod(0o755)
    monkeypatch.setenv("FAKE_RESULT", str(result))
    students, _ = discovery.discover([subs])
    log = tmp_path / "log"
    with open(log, "w") as stream:
        summary = run_batch(students, tmp_path / "out", load_config(), lang="en", jobs=2, job=GradeJob(), timeout_s=60,
                            python=str(fake), warm=True, stream=stream)
    assert (summary.graded, summary.errors, summary.interrupted) == (2, 0, False)
    assert "no warm judge" in log.read_text() and "no judge server here" in log.read_text(), log.read_text()


@pytest.mark.slow
def test_a_judge_server_killed_mid_batch_loses_nobody(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    subs, out = tmp_path / "subs", tmp_path / "out"
    subs.mkdir()
    for name in ("a1", "a2", "a3"):
        (subs / f"{name}.ipynb").write_text("{not json")
    students, _ = discovery.discover([subs])
    killed: list[int] = []
    grade = runner.Runner.grade

    def grade_then_kill_the_server(self: runner.Runner, student: discovery.Student, sha256: str) -> runner.Outcome | None:
        # In the grading thread itself, so the next grading cannot start before the server is gone
        # (killing it from on_record raced with the pool, which may already have graded a2 and a3).
        outcome = grade(self, student, sha256)
        if not killed:
            pid = _server_of(out)
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            for _ in range(100):  # gone, not merely signalled
                if _server_of(out) is None:
                    break
                time.sleep(0.05)
        return outcome

    monkeypatch.setattr(runner.Runner, "grade", grade_then_kill_the_server)
    log = tmp_path / "log"
    with open(log, "w") as stream:
        summary = run_batch(students, out, load_config(), lang="en", jobs=1, job=GradeJob(lang="en", device="cpu"),
                            timeout_s=300, warm=True, device="cpu", stream=stream)
    assert killed and (summary.graded, summary.errors) == (3, 0), log.read_text()
    assert "stopped answering" in log.read_text(), log.read_text()
    _none_left(str(out.resolve()))

