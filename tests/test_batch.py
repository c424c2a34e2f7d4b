"""Class workflow: finding submissions, the gradebook, import/export, and a batch that is killed and resumed."""

from __future__ import annotations

import csv
import io
import json
import os
import re
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

from grader import classfolder, discovery, runner
from grader.config import load_config
from grader.gradebook import BATCH, CI, ERROR, GRADED, GRADESCOPE, LEFT_OUT, Gradebook
from grader.job import GradeJob
from grader.report.gradescope import to_results_json
from grader.results import FAILED, NOT_RUN, PASSED, Failure, GradeResult, ItemResult, Text
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
    (tmp_path / "erin").mkdir()
    (tmp_path / "erin" / "essay.docx").write_text("")
    (tmp_path / "grades").mkdir()  # the class folder itself, among the submissions
    (tmp_path / "grades" / "notes.md").write_text("")
    students, left_out = discovery.discover([tmp_path], exclude=[tmp_path / "grades"])
    assert [(s.id, s.path.name) for s in students] == [("alice", "alice.ipynb"), ("bob", "bob.py"), ("carol", "hw.ipynb")]
    # Nobody vanishes: a folder with several notebooks, or none, is a student left out with the reason.
    assert [(s.id, s.path.name) for s in left_out] == [("dave", "dave"), ("erin", "erin")]
    assert "several notebooks" in left_out[0].reason.en and "a.ipynb, b.ipynb" in left_out[0].reason.en
    assert "no .ipynb or .py" in left_out[1].reason.en and left_out[1].reason.zh


def test_discover_refuses_two_files_for_one_student(tmp_path: Path) -> None:
    (tmp_path / "alice.ipynb").write_text("{}")
    (tmp_path / "alice.py").write_text("")
    with pytest.raises(discovery.BatchError, match="alice"):
        discovery.discover([tmp_path])
    one, two = tmp_path / "x" / "notebook.ipynb", tmp_path / "y" / "notebook.ipynb"
    for path in (one, two):
        path.parent.mkdir()
        path.write_text("{}")
    with pytest.raises(discovery.BatchError):
        discovery.discover([one, two])
    students, _ = discovery.discover([one, two], id_from="parent")
    assert [s.id for s in students] == ["x", "y"]


def test_slug_is_a_safe_unique_file_name() -> None:
    assert classfolder.slug("alice") == "alice" and classfolder.slug("张三") == "张三"
    assert classfolder.slug("../evil") != classfolder.slug("__evil") and "/" not in classfolder.slug("../evil")


# -- gradebook, import, export --------------------------------------------------------------


def test_gradebook_keeps_history_and_knows_what_is_current(tmp_path: Path) -> None:
    seed = "secret:0123456789abcdef"
    with Gradebook.in_dir(tmp_path) as book:
        book.add("alice", synthetic("todo3", sha="aa"), sha256="a" * 64, source="batch", path="alice.ipynb", seed_identity=seed)
        assert book.is_current("alice", "a" * 64, load_config().digest, seed_identity=seed)
        assert not book.is_current("alice", "b" * 64, load_config().digest, seed_identity=seed)
        book.add("alice", synthetic(None, sha="bb"), sha256="b" * 64, source="batch", path="alice.ipynb", seed_identity=seed)
        book.add("bob", synthetic("todo1"), sha256="c" * 64, source="batch", path="bob.ipynb", status=ERROR, seed_identity=seed)
        assert not book.is_current("bob", "c" * 64, load_config().digest, seed_identity=seed)  # errors are retried
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
        assert not book.is_current("bob", "b" * 64, digest, seed_identity="public:1")  # only a grade made here lets a re-run skip
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


def _no_gpu(result: GradeResult) -> GradeResult:
    """The same result graded where the CUDA item cannot run."""
    for item in result.items:
        if item.id == "todo5.cuda":
            item.status, item.failure = NOT_RUN, None
    return result


def _csv(out: Path, *args: str) -> list[dict[str, str]]:
    exported = cli("export", "--out", str(out), "--lang", "en", *args)
    assert exported.returncode == 0, exported.stderr
    return list(csv.DictReader(io.StringIO(exported.stdout)))


def test_import_ci_results_and_a_gradescope_export_then_export_csv(tmp_path: Path) -> None:
    out = tmp_path / "class"
    with Gradebook.in_dir(out) as book:  # alice was graded here; her own CI run claims full marks
        book.add("alice", synthetic("todo3", sha="aa"), sha256="a" * 64, source=BATCH, path="alice.ipynb")
    classfolder.write_student_files(out, "alice", synthetic("todo3", sha="aa"), "en")
    for student, failing in (("dave", "todo5"), ("alice", None)):
        (tmp_path / "ci" / student).mkdir(parents=True)
        (tmp_path / "ci" / student / "results.json").write_text(json.dumps(to_results_json(synthetic(failing, sha="33"), "en")))
    proc = cli("import", str(tmp_path / "ci"), str(_gradescope_export(tmp_path)), "--out", str(out), "--lang", "en")
    assert proc.returncode == 1, proc.stderr  # one result could not be imported, and it says which
    assert "submission_103" in proc.stderr and "imported 5" in proc.stderr
    again = cli("import", str(tmp_path / "ci"), "--out", str(out))
    # Also alice's, although her current grade is the one made here: importing twice adds nothing.
    assert again.returncode == 0 and "imported 0, already there 2" in again.stderr, again.stderr
    with Gradebook.in_dir(out) as book:
        assert book.students() == ["alice", "c@example.edu", "dave", "s001", "s002"]
        assert [e.source for e in book.history("alice")] == [BATCH, CI] and len(book.history("dave")) == 1
        assert book.latest("s001").submitted_at == "2026-11-01T10:00:00+00:00"
        assert {e.student: e.source for e in book.current()} == {
            "alice": BATCH, "c@example.edu": GRADESCOPE, "dave": CI, "s001": GRADESCOPE, "s002": GRADESCOPE
        }
    assert (out / "students" / "dave.html").is_file() and (out / "dashboard.html").is_file()
    # alice's scorecard is still the grade made here, not the import that lost to it
    assert json.loads((out / "students" / "alice.json").read_text())["score"] == 75

    rows = {row["student_id"]: row for row in _csv(out)}
    assert list(rows["s001"]) == ["student_id", "total", "points", "possible", "todo1", "todo2", "todo3", "todo4", "todo5",
                                  "status", "reason", "source", "submitted_at", "recorded_at", "identical_to", "tampering"]
    s001 = rows["s001"]
    assert [s001[k] for k in ("total", "points", "possible", "todo1", "todo2", "todo3", "todo4", "todo5")] == \
        ["75", "75", "100", "15", "20", "0", "15", "25"]
    assert (s001["status"], s001["source"], s001["submitted_at"]) == ("graded", "import:gradescope", "2026-11-01T10:00:00+00:00")
    assert s001["recorded_at"].startswith("20") and rows["dave"]["source"] == "import:ci" and rows["dave"]["submitted_at"] == ""
    assert (rows["alice"]["total"], rows["alice"]["source"]) == ("75", "batch")
    cli("export", "--out", str(out), "--csv", str(tmp_path / "grades.csv"))
    assert (tmp_path / "grades.csv").read_text().splitlines()[0].startswith("student_id,total,points,possible,todo1")


def test_csv_totals_match_their_columns_and_nobody_is_missing(tmp_path: Path) -> None:
    out = tmp_path / "class"
    config = load_config()
    unreadable = synthetic(None)
    unreadable.error = Failure("unreadable", Text("不是有效的笔记本", "not a valid notebook: line 1"))
    with Gradebook.in_dir(out) as book:
        book.add("ann", synthetic("todo2"), sha256="a" * 64, source=BATCH, path="ann.ipynb")
        book.add("nogpu", _no_gpu(synthetic(None)), sha256="b" * 64, source=BATCH, path="nogpu.ipynb")
        book.add("half", _no_gpu(synthetic("todo1")), sha256="c" * 64, source=BATCH, path="half.ipynb")
        book.add("bad", unreadable, sha256="d" * 64, source=BATCH, path="bad.ipynb")
        timeout = classfolder.error_result(Path("zed.ipynb"), config, "timeout", "grading took longer than 9 s", "超时")
        book.add("zed", timeout, sha256="e" * 64, source=BATCH, path="zed.ipynb", status=ERROR)
        two = classfolder.error_result(Path("lou"), config, "left_out", "several notebooks in lou (a.ipynb, b.ipynb)", "多个")
        book.add("lou", two, sha256="", source=BATCH, path="lou", status=LEFT_OUT)
        book.add("=cmd|' /C calc'!A0", synthetic(None), sha256="f" * 64, source=CI, path="results.json")
        flagged = synthetic("todo1")
        flagged.flags = [Text("读取了参考答案", "read the reference solution")]
        book.add("flo", flagged, sha256="9" * 64, source=BATCH, path="flo.ipynb")
    rows = {row["student_id"]: row for row in _csv(out)}
    assert sorted(rows) == sorted(["ann", "nogpu", "half", "bad", "zed", "lou", "flo", "'=cmd|' /C calc'!A0"])  # a formula stays text
    assert (rows["flo"]["status"], rows["flo"]["total"], rows["flo"]["reason"]) == ("graded", "85", "read the reference solution")
    # The case of the issue: without a GPU the CUDA item does not run; 97 of 97 points is 100.
    nogpu = rows["nogpu"]
    assert [nogpu[k] for k in ("total", "points", "possible", "todo1", "todo2", "todo3", "todo4", "todo5")] == \
        ["100", "97", "97", "15", "20", "25", "15", "22"]
    for row in rows.values():
        if row["status"] == "graded":
            todos = [float(row[f"todo{n}"]) for n in range(1, 6)]
            assert sum(todos) == float(row["points"]), row
            assert float(row["total"]) == round(100 * float(row["points"]) / float(row["possible"]), 2), row
    assert rows["half"]["total"] == "84.54" and rows["half"]["points"] == "82"
    # Everyone without a grade is there, with an empty total and the reason.
    for student, status, reason in (("bad", "not_gradable", "not a valid notebook"), ("zed", "grader_error", "longer than 9 s"),
                                    ("lou", "left_out", "several notebooks")):
        row = rows[student]
        assert row["status"] == status and reason in row["reason"], row
        assert [row[k] for k in ("total", "points", "possible", "todo1", "todo5")] == ["", "", "", "", ""]
    assert "不是有效的笔记本" in cli("export", "--out", str(out), "--lang", "zh").stdout


def test_import_skips_what_is_malformed_and_says_why(tmp_path: Path) -> None:
    out, bad = tmp_path / "class", tmp_path / "bad"
    for name, text in {
        "deep/results.json": "[" * 100_000 + "]" * 100_000,
        "items/results.json": json.dumps({"extra_data": {"grade_result": {"submission": "x", "sha256": "", "config_digest": "d", "items": [1, 2]}}}),
        "extra/results.json": json.dumps({"extra_data": ["not", "a", "mapping"]}),
        "good/results.json": json.dumps(to_results_json(synthetic(None), "en")),
    }.items():
        (bad / name).parent.mkdir(parents=True, exist_ok=True)
        (bad / name).write_text(text)
    (tmp_path / "broken.zip").write_bytes(b"PK\x03\x04 not really a zip")
    (tmp_path / "list.yml").write_text("- just\n- a list\n")
    proc = cli("import", str(bad), str(tmp_path / "broken.zip"), str(tmp_path / "list.yml"), "--out", str(out))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "imported 1, already there 0, skipped 5" in proc.stderr, proc.stderr
    for name in ("deep", "items", "extra", "broken.zip", "list.yml"):
        assert name in proc.stderr


def test_a_gradebook_that_is_not_one_is_a_message_not_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "gradebook.sqlite").write_text("not sqlite at all " * 100)
    for verb in ("export", "dashboard"):
        proc = cli(verb, "--out", str(tmp_path))
        assert proc.returncode == 2 and "Traceback" not in proc.stderr and "gradebook.sqlite" in proc.stderr, proc.stderr


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
    student = discovery.Student("alice", tmp_path / "alice.ipynb")
    crash = runner.Runner(config, GradeJob(), timeout_s=30, python=_fake_python(tmp_path, "echo 'Segmentation fault' >&2; exit 139"))
    outcome = crash.grade(student, "ff")
    assert outcome is not None and outcome.status == ERROR and outcome.result.score == 0
    assert outcome.result.error.kind == "grader_crash" and "Segmentation fault" in outcome.result.error.message.en
    started = time.monotonic()
    hang = runner.Runner(config, GradeJob(), timeout_s=1, python=_fake_python(tmp_path, "exec sleep 60"))
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
from grader import batch, discovery
from grader.config import load_config
from grader.job import GradeJob
out, fake, subs = sys.argv[1:]
students, left_out = discovery.discover([Path(subs)])
summary = batch.run_batch(students, Path(out), load_config(), lang="en", jobs=3, job=GradeJob(), timeout_s=300,
                          left_out=left_out, python=fake)
sys.exit(130 if summary.interrupted else 0)
"""

IGNORING_SIGINT = "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); os.execv(sys.executable, sys.argv[1:])"


def _ignored(sigign_line: str, sig: int) -> bool:
    return bool(int(sigign_line.split()[1], 16) >> (sig - 1) & 1)


def test_a_batch_started_with_sigint_ignored_still_stops_on_it_and_resumes(tmp_path: Path) -> None:
    subs, out = tmp_path / "subs", tmp_path / "out"
    subs.mkdir()
    paths = [subs / f"{name}.ipynb" for name in ("quick1", "slow1", "slow2")]
    for path in [*paths, subs / "lou" / "a.ipynb", subs / "lou" / "b.ipynb"]:  # lou: two notebooks, left out
        path.parent.mkdir(exist_ok=True)
        path.write_text("{}")
    result = tmp_path / "result.json"
    result.write_text(json.dumps(to_results_json(synthetic(None), "en")))
    fake = _fake_python(tmp_path, FAKE_GRADER.split("\n", 1)[1])
    env = {**os.environ, "FAKE_RESULT": str(result), "FAKE_PYTHON": sys.executable, "FAKE_FINISH": "nobody"}
    argv = [sys.executable, "-c", DRIVER, str(out), fake, str(subs)]
    # As a background job of a script would: SIGINT ignored before the batch's Python starts.
    proc = subprocess.Popen([sys.executable, "-c", IGNORING_SIGINT, *argv], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    markers = [subs / "slow1.ipynb.sigign", subs / "slow2.ipynb.sigign"]
    try:
        deadline = time.monotonic() + 60
        while (_recorded(out / "gradebook.sqlite") < 2 or not all(m.exists() and m.read_text() for m in markers)) and time.monotonic() < deadline:
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
    assert _recorded(out / "gradebook.sqlite") == 2  # quick1, and lou with the reason

    again = subprocess.run(argv, cwd=ROOT, env={**env, "FAKE_FINISH": "slow"}, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert "1 unchanged since their last grading: skipped" in again.stderr
    with Gradebook.in_dir(out) as book:
        assert [(e.student, e.status, len(book.history(e.student))) for e in book.current()] == [
            ("lou", LEFT_OUT, 1), ("quick1", GRADED, 1), ("slow1", GRADED, 1), ("slow2", GRADED, 1)
        ]


def test_a_changed_file_beside_the_notebook_is_graded_again(tmp_path: Path) -> None:
    """A notebook runs in a copy of its student's folder: a batch re-grades the student when a
    helper module or a data file there changed, or a new one came, though the notebook did not."""
    subs, out = tmp_path / "subs", tmp_path / "out"
    (subs / "alice").mkdir(parents=True)
    (subs / "alice" / "notebook.ipynb").write_text("{}")
    (subs / "alice" / "kv_helpers.py").write_text("BLOCK = 16\n")
    (subs / "bob.ipynb").write_text("{}")  # graded alone: nothing beside it counts
    result = tmp_path / "result.json"
    result.write_text(json.dumps(to_results_json(synthetic(None), "en")))
    fake = _fake_python(tmp_path, FAKE_GRADER.split("\n", 1)[1])
    env = {**os.environ, "FAKE_RESULT": str(result), "FAKE_PYTHON": sys.executable, "FAKE_FINISH": "ipynb"}
    argv = [sys.executable, "-c", DRIVER, str(out), fake, str(subs)]

    def batch() -> str:
        proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return proc.stderr

    def graded_times() -> dict[str, int]:
        with Gradebook.in_dir(out) as book:
            return {e.student: len(book.history(e.student)) for e in book.current()}

    batch()
    assert graded_times() == {"alice": 1, "bob": 1}
    assert "2 unchanged since their last grading: skipped" in batch()
    (subs / "alice" / "kv_helpers.py").write_text("BLOCK = 8\n")
    assert "1 unchanged since their last grading: skipped" in batch()
    assert graded_times() == {"alice": 2, "bob": 1}
    (subs / "alice" / "tokens.csv").write_text("1,2,3\n")
    (subs / "carol.txt").write_text("beside bob, in the class's folder")
    batch()
    assert graded_times() == {"alice": 3, "bob": 1}
    assert "2 unchanged since their last grading: skipped" in batch()


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
    buggy = sorted(p for p in (CORPUS / "buggy").glob("*.py") if "_cuda_" not in p.name)  # CUDA-only mistakes pass on a CPU
    for todo in range(1, 6):
        # Not a bug only CUDA shows (todo5_cuda_*): on a machine without a GPU it scores 100.
        for source in [p for p in buggy if p.name.startswith(f"todo{todo}_") and "cuda" not in p.name][:2]:
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
    args = ["grade-batch", str(subs), "--out", str(out), "-j", "2", "--lang", "en", "--device", "cpu", "--public-seed"]

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
    counts = re.search(r"graded (\d+), not gradable (\d+), grader errors 0, unchanged (\d+)", done.stderr)
    assert counts, done.stderr
    assert int(counts[1]) + int(counts[2]) == len(expected) - second and int(counts[3]) == second

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
            assert (students / f"{classfolder.slug(sid)}{suffix}").is_file(), (sid, suffix)
        assert json.loads((students / f"{classfolder.slug(sid)}.json").read_text(encoding="utf-8"))["score"] == totals[sid]
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]  # no half-written file survived the kills
    assert "data-student=\"zoe\"" in (out / "dashboard.html").read_text(encoding="utf-8")

    # A changed submission is regraded, with its old grade kept as history; the rest are skipped.
    (subs / "garbage.ipynb").write_text("{still not json")
    again = cli(*args)
    assert again.returncode == 0 and f"unchanged {len(expected) - 1}" in again.stderr and "graded 0, not gradable 1," in again.stderr
    assert db.execute("SELECT count(*) FROM submissions WHERE student_id='garbage'").fetchone()[0] == 2
    rows = {row["student_id"]: row for row in _csv(out)}
    assert sorted(rows) == sorted(expected)
    assert [rows["zoe"][k] for k in ("total", "points", "possible", "todo1", "todo5", "source")] == ["100", "97", "97", "15", "22", "batch"]
    for sid in ("empty", "garbage"):  # could not be read: no total, and why
        assert rows[sid]["total"] == "" and rows[sid]["status"] == "not_gradable" and rows[sid]["reason"], rows[sid]


def test_a_grade_made_by_another_version_of_the_grader_is_not_current(monkeypatch: pytest.MonkeyPatch) -> None:
    """The configuration's digest, which a batch's skip compares, covers the grader's own code:
    a fix to the grader regrades everyone instead of keeping the grades the old one made."""
    from grader import config as config_module

    before = config_module.load_config().digest
    monkeypatch.setattr(config_module, "grader_fingerprint", lambda: b"another version")
    assert config_module.load_config().digest != before
    monkeypatch.undo()
    assert config_module.load_config().digest == before
    assert len(config_module.grader_fingerprint()) == 32
