"""Class workflow: finding submissions, the gradebook, import/export, and a batch that is killed and resumed."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import nbformat
import pytest
import yaml

from grader import batch
from grader.config import load_config
from grader.gradebook import ERROR, GRADED, Gradebook
from grader.report.gradescope import to_results_json
from grader.results import FAILED, PASSED, Failure, GradeResult, ItemResult, Text
from tests.conftest import CORPUS, ROOT, graded


def cli(*args: str, cwd: Path = ROOT, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "grader", *args], capture_output=True, text=True, cwd=cwd, timeout=timeout)


def synthetic(failing_todo: str | None, submission: str = "nb.ipynb", sha: str = "00") -> GradeResult:
    """A result without grading: every item passed except those of failing_todo."""
    config = load_config()
    items = []
    for rubric in config.items:
        status = FAILED if rubric.todo == failing_todo else PASSED
        failure = Failure("wrong", Text("错", f"wrong in {rubric.id} with n=3"), repro=f"repro_{rubric.id}()") if status == FAILED else None
        items.append(ItemResult(rubric.id, rubric.todo, Text(rubric.zh, rubric.en), rubric.weight, status, failure))
    return GradeResult(submission=submission, sha256=sha * 32, config_digest=config.digest, items=items)


# -- finding submissions ------------------------------------------------------------------


def test_discover_names_students_by_stem_or_folder(tmp_path: Path) -> None:
    (tmp_path / "alice.ipynb").write_text("{}")
    (tmp_path / "bob.py").write_text("")
    (tmp_path / "notes.txt").write_text("")
    (tmp_path / "carol").mkdir()
    (tmp_path / "carol" / "hw.ipynb").write_text("{}")
    (tmp_path / "carol" / "helper.py").write_text("")  # the notebook is the submission
    (tmp_path / "dave").mkdir()
    (tmp_path / "dave" / "a.ipynb").write_text("{}")
    (tmp_path / "dave" / "b.ipynb").write_text("{}")
    (tmp_path / ".ipynb_checkpoints").mkdir()
    (tmp_path / ".ipynb_checkpoints" / "alice-checkpoint.ipynb").write_text("{}")
    students, warnings = batch.discover([tmp_path])
    assert [(s.id, s.path.name) for s in students] == [("alice", "alice.ipynb"), ("bob", "bob.py"), ("carol", "hw.ipynb")]
    assert len(warnings) == 1 and "dave" in warnings[0]


def test_discover_refuses_two_files_for_one_student(tmp_path: Path) -> None:
    (tmp_path / "alice.ipynb").write_text("{}")
    (tmp_path / "alice.py").write_text("")
    with pytest.raises(batch.BatchError, match="alice"):
        batch.discover([tmp_path])
    one, two = tmp_path / "x" / "notebook.ipynb", tmp_path / "y" / "notebook.ipynb"
    for path in (one, two):
        path.parent.mkdir()
        path.write_text("{}")
    with pytest.raises(batch.BatchError):
        batch.discover([one, two])
    students, _ = batch.discover([one, two], id_from="parent")
    assert [s.id for s in students] == ["x", "y"]


def test_slug_is_a_safe_unique_file_name() -> None:
    assert batch.slug("alice") == "alice" and batch.slug("张三") == "张三"
    assert batch.slug("../evil") != batch.slug("__evil") and "/" not in batch.slug("../evil")


# -- gradebook, import, export --------------------------------------------------------------


def test_gradebook_keeps_history_and_knows_what_is_current(tmp_path: Path) -> None:
    with Gradebook.in_dir(tmp_path) as book:
        book.add("alice", synthetic("todo3", sha="aa"), sha256="a" * 64, source="batch", path="alice.ipynb")
        assert book.is_current("alice", "a" * 64, load_config().digest)
        assert not book.is_current("alice", "b" * 64, load_config().digest)
        book.add("alice", synthetic(None, sha="bb"), sha256="b" * 64, source="batch", path="alice.ipynb")
        book.add("bob", synthetic("todo1"), sha256="c" * 64, source="batch", path="bob.ipynb", status=ERROR)
        assert not book.is_current("bob", "c" * 64, load_config().digest)  # errors are retried
        assert [e.result.score for e in book.history("alice")] == [75.0, 100.0]
        assert [(e.student, e.result.score) for e in book.current()] == [("alice", 100.0), ("bob", 85.0)]
        assert book.students() == ["alice", "bob"]
    rows = sqlite3.connect(tmp_path / "gradebook.sqlite").execute("SELECT count(*) FROM item_results").fetchone()[0]
    assert rows == 3 * len(load_config().items)


def test_an_imported_result_never_outranks_or_skips_a_grade_made_here(tmp_path: Path) -> None:
    """A forged results.json (every item passed, the right file hash) changes nothing."""
    digest = load_config().digest
    with Gradebook.in_dir(tmp_path) as book:
        book.add("alice", synthetic("todo3", sha="aa"), sha256="a" * 64, source="batch", path="alice.ipynb")
        book.add("alice", synthetic(None, sha="aa"), sha256="a" * 64, source="import", path="results.json")
        assert [(e.student, e.result.score, e.source) for e in book.current()] == [("alice", 75.0, "batch")]
        book.add("bob", synthetic(None, sha="bb"), sha256="b" * 64, source="import", path="results.json")
        assert not book.is_current("bob", "b" * 64, digest)  # only a grade made here lets a re-run skip
        assert [(e.student, e.source) for e in book.current()] == [("alice", "batch"), ("bob", "import")]


def _gradescope_export(tmp_path: Path) -> Path:
    metadata = {
        "submission_101": {
            ":submitters": [{":name": "Alice", ":sid": "s001", ":email": "a@example.edu"}],
            ":created_at": "2026-11-01 10:00:00 +0000",
            ":score": 75.0,
            ":results": to_results_json(synthetic("todo3", sha="11"), "en"),
        },
        "submission_102": {  # a pair: both get the grade
            ":submitters": [{":name": "Bob", ":sid": "s002"}, {":name": "Carol", ":email": "c@example.edu"}],
            ":results": to_results_json(synthetic(None, sha="22"), "en"),
        },
        "submission_103": {":submitters": [{":sid": "s004"}], ":results": {"score": 3, "tests": []}},  # another grader's
    }
    path = tmp_path / "export.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("assignment_9_export/submission_metadata.yml", yaml.safe_dump(metadata, allow_unicode=True))
        archive.writestr("assignment_9_export/submission_101/nb.ipynb", "{}")
    return path


def test_import_ci_results_and_a_gradescope_export_then_export_csv(tmp_path: Path) -> None:
    out = tmp_path / "class"
    ci = tmp_path / "ci" / "dave"
    ci.mkdir(parents=True)
    (ci / "results.json").write_text(json.dumps(to_results_json(synthetic("todo5", sha="33"), "en")))
    proc = cli("import", str(tmp_path / "ci"), str(_gradescope_export(tmp_path)), "--out", str(out), "--lang", "en")
    assert proc.returncode == 1, proc.stderr  # one result could not be imported, and it says which
    assert "submission_103" in proc.stderr and "imported 4" in proc.stderr
    again = cli("import", str(tmp_path / "ci"), "--out", str(out))
    assert again.returncode == 0 and "imported 0, already there 1" in again.stderr
    with Gradebook.in_dir(out) as book:
        assert book.students() == ["c@example.edu", "dave", "s001", "s002"]
        assert len(book.history("dave")) == 1
        assert book.latest("s001").submitted_at == "2026-11-01T10:00:00+00:00"
    assert (out / "students" / "dave.html").is_file() and (out / "dashboard.html").is_file()
    with Gradebook.in_dir(out) as book:  # a grader error exports as empty cells, not as a zero
        book.add("zed", synthetic("todo1"), sha256="e" * 64, source="batch", path="zed.ipynb", status=ERROR)
    exported = cli("export", "--out", str(out), "--csv")
    assert exported.returncode == 0, exported.stderr
    rows = list(csv.reader(io.StringIO(exported.stdout)))
    assert rows[0] == ["student_id", "total", "todo1", "todo2", "todo3", "todo4", "todo5"]
    assert ["s001", "75", "15", "20", "0", "15", "25"] in rows and ["zed", "", "", "", "", "", ""] in rows and len(rows) == 6
    cli("export", "--out", str(out), "--csv", str(tmp_path / "grades.csv"))
    assert (tmp_path / "grades.csv").read_text().splitlines()[0].startswith("student_id,total")


def test_export_without_a_gradebook_says_so(tmp_path: Path) -> None:
    proc = cli("export", "--out", str(tmp_path))
    assert proc.returncode == 2 and "no gradebook" in proc.stderr


# -- one student's failure is a record, not the end of the batch ------------------------------


def _fake_python(tmp_path: Path, body: str) -> str:
    script = tmp_path / "fake-python"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return str(script)


def test_a_crashing_or_hanging_grader_becomes_an_error_record(tmp_path: Path) -> None:
    config = load_config()
    student = batch.Student("alice", tmp_path / "alice.ipynb")
    crash = batch.Runner(config, [], timeout_s=30, python=_fake_python(tmp_path, "echo 'Segmentation fault' >&2; exit 139"))
    outcome = crash.grade(student, "ff")
    assert outcome is not None and outcome.status == ERROR and outcome.result.score == 0
    assert outcome.result.error.kind == "grader_crash" and "Segmentation fault" in outcome.result.error.message.en
    started = time.monotonic()
    hang = batch.Runner(config, [], timeout_s=1, python=_fake_python(tmp_path, "exec sleep 60"))
    outcome = hang.grade(student, "ff")
    assert outcome is not None and outcome.result.error.kind == "timeout"
    assert time.monotonic() - started < 15


# -- stopping on signals, also when SIGINT was inherited as ignored ---------------------------

# A stand-in for `python -m grader grade PATH --json OUT ...`: students named quick* get a
# results.json at once; the others record which signals they ignore and wait to be stopped
# (a Python, like the real grader, so SIGINT with the default disposition ends it).
FAKE_GRADER = """#!/bin/sh
case "$4" in
    *quick*|*"$FAKE_FINISH"*) cp "$FAKE_RESULT" "$6"; exit 0 ;;
esac
grep '^SigIgn' /proc/$$/status > "$4.sigign"
exec "$FAKE_PYTHON" -c 'import time; time.sleep(120)' "$4"
"""

DRIVER = """
import sys
from pathlib import Path
from grader import batch
from grader.config import load_config
out, fake, *paths = sys.argv[1:]
students = [batch.Student(Path(p).stem, Path(p)) for p in paths]
summary = batch.run_batch(students, Path(out), load_config(), lang="en", jobs=3, grade_args=[], timeout_s=300, python=fake)
sys.exit(130 if summary.interrupted else 0)
"""

IGNORING_SIGINT = "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); os.execv(sys.executable, sys.argv[1:])"


def _ignored(sigign_line: str, sig: int) -> bool:
    return bool(int(sigign_line.split()[1], 16) >> (sig - 1) & 1)


def test_a_batch_started_with_sigint_ignored_still_stops_on_it_and_resumes(tmp_path: Path) -> None:
    subs, out = tmp_path / "subs", tmp_path / "out"
    subs.mkdir()
    paths = [subs / f"{name}.ipynb" for name in ("quick1", "slow1", "slow2")]
    for path in paths:
        path.write_text("{}")
    result = tmp_path / "result.json"
    result.write_text(json.dumps(to_results_json(synthetic(None), "en")))
    fake = _fake_python(tmp_path, FAKE_GRADER.split("\n", 1)[1])
    env = {**os.environ, "FAKE_RESULT": str(result), "FAKE_PYTHON": sys.executable, "FAKE_FINISH": "nobody"}
    argv = [sys.executable, "-c", DRIVER, str(out), fake, *map(str, paths)]
    # As a background job of a script would: SIGINT ignored before the batch's Python starts.
    proc = subprocess.Popen([sys.executable, "-c", IGNORING_SIGINT, *argv], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    markers = [subs / "slow1.ipynb.sigign", subs / "slow2.ipynb.sigign"]
    try:
        deadline = time.monotonic() + 60
        while (_recorded(out / "gradebook.sqlite") < 1 or not all(m.exists() and m.read_text() for m in markers)) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.1)
        assert proc.poll() is None, "the batch ended by itself"
        os.kill(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=60) == 130, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # Each grader started with SIGINT at its default, so the SIGINT the batch sent it ended it.
    assert not any(_ignored(m.read_text(), signal.SIGINT) for m in markers), [m.read_text() for m in markers]
    _no_grader_left(tmp_path)
    assert _recorded(out / "gradebook.sqlite") == 1

    again = subprocess.run(argv, cwd=ROOT, env={**env, "FAKE_FINISH": "slow"}, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert "1 unchanged since their last grading: skipped" in again.stderr
    with Gradebook.in_dir(out) as book:
        assert [(e.student, e.status, len(book.history(e.student))) for e in book.current()] == [
            ("quick1", GRADED, 1), ("slow1", GRADED, 1), ("slow2", GRADED, 1)
        ]


# -- the whole class, killed twice and resumed -------------------------------------------------


def _notebook(path: Path, *sources: str, markdown_only: bool = False) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(s) if markdown_only else nbformat.v4.new_code_cell(s) for s in sources]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


def _class_folder(root: Path) -> dict[str, tuple[str, Path | None]]:
    """23 submissions: expected outcome per student id ("correct", "buggy todoN", "broken")."""
    expected: dict[str, tuple[str, Path | None]] = {}
    for source in sorted((CORPUS / "correct").glob("*.py"))[:7]:
        _notebook(root / f"{source.stem}.ipynb", source.read_text(encoding="utf-8"))
        expected[source.stem] = ("correct", source)
    buggy = sorted((CORPUS / "buggy").glob("*.py"))
    for todo in range(1, 6):
        for source in [p for p in buggy if p.name.startswith(f"todo{todo}_")][:2]:
            _notebook(root / f"{source.stem}.ipynb", source.read_text(encoding="utf-8"))
            expected[source.stem] = (f"buggy todo{todo}", source)
    (root / "empty.ipynb").write_bytes(b"")
    (root / "garbage.ipynb").write_text("{not json")
    _notebook(root / "syntax_error.ipynb", "def broken(:\n    pass")
    _notebook(root / "only_markdown.ipynb", "# my answer is in my head", markdown_only=True)
    _notebook(root / "raises.ipynb", "import torch\n", "raise SystemExit(3)")
    for name in ("empty", "garbage", "syntax_error", "only_markdown", "raises"):
        expected[name] = ("broken", None)
    correct = sorted((CORPUS / "correct").glob("*.py"))[7]
    _notebook(root / "zoe" / "paged_attention_student.ipynb", correct.read_text(encoding="utf-8"))  # folder style
    expected["zoe"] = ("correct", correct)
    return expected


def _recorded(gradebook: Path) -> int:
    if not gradebook.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{gradebook}?mode=ro", uri=True, timeout=5) as db:
            return int(db.execute("SELECT count(DISTINCT student_id) FROM submissions").fetchone()[0])
    except sqlite3.OperationalError:
        return 0


def _no_grader_left(tmp_path: Path) -> None:
    """Every grading process of the batch is gone once it has exited."""
    deadline = time.monotonic() + 20
    while True:
        alive = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    cmdline = (entry / "cmdline").read_bytes()
                except OSError:
                    continue
                if str(tmp_path).encode() in cmdline and b"grader" in cmdline:
                    alive.append(cmdline.replace(b"\0", b" ")[:200])
        if not alive or time.monotonic() > deadline:
            assert not alive, alive
            return
        time.sleep(0.5)


def _run_until(args: list[str], gradebook: Path, students: int, sig: signal.Signals, log: Path, sigint_ignored: bool = False) -> int:
    command = [sys.executable, "-m", "grader", *args]
    if sigint_ignored:  # as under nohup or cron, or `grade-batch ... &` in a script
        command = [sys.executable, "-c", IGNORING_SIGINT, *command]
    with open(log, "w") as stderr:
        proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True)
        deadline = time.monotonic() + 400
        while _recorded(gradebook) < students and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert proc.poll() is None, "the batch finished before it could be interrupted"
        os.killpg(proc.pid, sig)  # the whole process group, as a terminal's Ctrl-C or a CI cancel would
        return proc.wait(timeout=120)


@pytest.mark.slow
def test_batch_killed_twice_resumes_and_records_every_student_once(tmp_path: Path) -> None:
    subs, out = tmp_path / "submissions", tmp_path / "grades"
    expected = _class_folder(subs)
    assert len(expected) >= 20
    gradebook = out / "gradebook.sqlite"
    args = ["grade-batch", str(subs), "--out", str(out), "-j", "2", "--lang", "en", "--device", "cpu"]

    # The first run started with SIGINT ignored: the batch must stop on it all the same.
    assert _run_until(args, gradebook, 4, signal.SIGINT, tmp_path / "run1.log", sigint_ignored=True) == 130
    _no_grader_left(tmp_path)
    first = _recorded(gradebook)
    assert 4 <= first < len(expected)
    assert _run_until(args, gradebook, first + 4, signal.SIGTERM, tmp_path / "run2.log") == 130
    _no_grader_left(tmp_path)
    second = _recorded(gradebook)
    assert "run the same command again" in (tmp_path / "run2.log").read_text()

    done = cli(*args)
    assert done.returncode == 0, done.stderr
    assert f"{second} unchanged since their last grading: skipped" in done.stderr
    assert f"graded {len(expected) - second}," in done.stderr

    db = sqlite3.connect(gradebook)
    assert sorted(r[0] for r in db.execute("SELECT id FROM students")) == sorted(expected)
    per_student = dict(db.execute("SELECT student_id, count(*) FROM submissions GROUP BY student_id").fetchall())
    assert per_student == {sid: 1 for sid in expected}  # nobody graded twice, nobody lost
    totals = dict(db.execute("SELECT student_id, score FROM latest").fetchall())
    statuses = {r[0] for r in db.execute("SELECT status FROM submissions")}
    assert statuses == {GRADED}
    for sid, (kind, _source) in expected.items():
        if kind == "correct":
            assert totals[sid] == 100, sid
        elif kind == "broken":
            assert totals[sid] == 0, sid
        else:
            todo = kind.split()[1]
            result = GradeResult.from_dict(json.loads(db.execute("SELECT result_json FROM latest WHERE student_id=?", (sid,)).fetchone()[0]))
            assert totals[sid] < 100 and todo in {i.todo for i in result.items if i.status == FAILED}, sid
    assert totals["todo1_elements_not_bytes"] == graded(expected["todo1_elements_not_bytes"][1]).score  # as graded directly

    students = out / "students"
    for sid in expected:
        for suffix in (".json", ".md", ".html"):
            assert (students / f"{batch.slug(sid)}{suffix}").is_file(), (sid, suffix)
        assert json.loads((students / f"{batch.slug(sid)}.json").read_text(encoding="utf-8"))["score"] == totals[sid]
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]  # no half-written file survived the kills
    assert "data-student=\"zoe\"" in (out / "dashboard.html").read_text(encoding="utf-8")

    # A changed submission is regraded, with its old grade kept as history; the rest are skipped.
    (subs / "garbage.ipynb").write_text("{still not json")
    again = cli(*args)
    assert again.returncode == 0 and f"{len(expected) - 1} unchanged" in again.stderr and "graded 1," in again.stderr
    assert db.execute("SELECT count(*) FROM submissions WHERE student_id='garbage'").fetchone()[0] == 2
    rows = list(csv.reader(io.StringIO(cli("export", "--out", str(out)).stdout)))
    assert len(rows) == 1 + len(expected) and ["zoe", "100", "15", "20", "25", "15", "22"] in rows
