"""Student ids come from file names, which students choose: every TA-facing output keeps them inert.

Two different ids never share a scorecard, every id gets a row (also one longer than a file name
may be), the CSV has one record per student with no formula and no control character in it, and
the terminal, the dashboard and results.json show escapes instead of what the name would do.
"""

from __future__ import annotations

import csv
import io
import json
import os
import unicodedata
from pathlib import Path

import pytest

from grader import batch, classfolder, discovery
from grader.commands.export import rows as csv_rows
from grader.config import load_config
from grader.gradebook import BATCH, LEFT_OUT, Gradebook
from grader.pick import notebook_in
from grader.report import text
from grader.standing import all_of
from tests.test_batch import cli, synthetic

NFC, NFD = unicodedata.normalize("NFC", "José"), unicodedata.normalize("NFD", "José")
OSC52 = "\x1b]52;c;cm0gLXJmIH4=\x07"  # sets the terminal's clipboard
HOSTILE_IDS = [
    "alice@uni.edu",
    "alice_uni.edu-0f5784",  # the slug the old rule gave alice@uni.edu: one scorecard for two students
    "Alice",
    "alice",
    NFC,
    NFD,
    "bob\rnext=2+5",  # a bare CR used to end the CSV record: the rest opened as a formula
    "carol\n@SUM(A1:A9)",
    f"dave{OSC52}",
    "\x1b[2J\x1b[Herin",
    'fay "the" \'quote\'',
    "..",
    "../../etc/passwd",
    ".hidden",
    "=2+5",
    "+cmd",
    "-1",
    "@SUM(1)",
    "\tTAB",
    "\u202egnp.exe",  # right-to-left override
    "x" * 240,
    "é" * 200,  # 400 bytes: beyond any file name
    "con",
    "a/b",
    "",  # nobody is named nothing, but nothing breaks either
]
CONTROL = [chr(c) for c in (*range(0x20), 0x7F, *range(0x80, 0xA0), 0x202E)]


def test_slugs_are_distinct_bounded_and_safe_on_any_file_system() -> None:
    slugs = [classfolder.slug(sid) for sid in HOSTILE_IDS]
    assert len(set(slugs)) == len(HOSTILE_IDS)
    # A case-insensitive, normalising volume (macOS, Windows, a USB stick) still keeps them apart.
    folded = {unicodedata.normalize("NFC", s).casefold() for s in slugs}
    assert len(folded) == len(HOSTILE_IDS)
    for sid, name in zip(HOSTILE_IDS, slugs, strict=True):
        assert 0 < len(name.encode("utf-8")) + len(".html") < 200, (sid, name)
        assert "/" not in name and "\\" not in name and not name.startswith(".") and not any(c in name for c in CONTROL), name
    assert classfolder.slug("alice") == "alice" and classfolder.slug("张三") == "张三" and classfolder.slug("john.doe") == "john.doe"
    assert classfolder.slug("alice@uni.edu") != "alice_uni.edu-0f5784"


def test_every_hostile_id_gets_its_own_scorecards_a_row_and_a_safe_csv(tmp_path: Path) -> None:
    out = tmp_path / "class"
    ids = [sid for sid in HOSTILE_IDS if sid]
    with Gradebook.in_dir(out) as book:
        for number, sid in enumerate(ids):
            result = synthetic("todo3" if number % 2 else None, submission=f"{sid}.ipynb", sha=f"{number:02x}")
            book.add(sid, result, sha256=result.sha256, source=BATCH, path=result.submission)
            classfolder.write_student_files(out, sid, result, "en")
    cards = sorted(p.name for p in (out / "students").iterdir())
    assert len(cards) == 3 * len(ids)  # .json, .md, .html each, none shared
    for number, sid in enumerate(ids):
        payload = json.loads((out / "students" / f"{classfolder.slug(sid)}.json").read_text(encoding="utf-8"))
        assert payload["extra_data"]["submission_sha256"] == f"{number:02x}" * 32, sid

    exported = cli("export", "--out", str(out), "--lang", "en", "--csv", str(tmp_path / "grades.csv"))
    assert exported.returncode == 0, exported.stderr
    raw = (tmp_path / "grades.csv").read_bytes().decode("utf-8")
    records = raw.split("\r\n")
    assert records[-1] == "" and len(records) == len(ids) + 2  # the header, one record each, nothing split
    assert not any(c in raw.replace("\r\n", "") for c in CONTROL)
    table = list(csv.reader(io.StringIO(raw, newline="")))
    assert len(table) == len(ids) + 1
    for row in table[1:]:
        for cell in row:
            assert cell[:1] not in ("=", "+", "-", "@", "\t", "\r", "\n"), row
    shown = [row[0] for row in table[1:]]
    assert len(set(shown)) == len(ids)
    assert "bob\\x0dnext=2+5" in shown and "dave\\x1b]52;c;cm0gLXJmIH4=\\x07" in shown and "'=2+5" in shown and "'-1" in shown
    assert "'\\x09TAB" in shown and "\\u202egnp.exe" in shown

    # The same to a terminal: export's standard output carries no escape sequence.
    to_terminal = cli("export", "--out", str(out), "--lang", "en")
    assert not any(c in to_terminal.stdout.replace("\n", "") for c in CONTROL)

    # The dashboard: a row per id, each linking to its own scorecard, no raw control character.
    classfolder.write_dashboard(out, "en")
    page = (out / "dashboard.html").read_text(encoding="utf-8")
    assert page.count("<tr data-student=") == len(ids)
    assert not any(c in page for c in CONTROL if c not in "\n")
    assert len(set(classfolder.slug(sid) for sid in ids)) == len(ids)


def test_csv_cells_neutralise_formulas_and_controls() -> None:
    config = load_config()
    result = classfolder.error_result(Path("x.ipynb"), config, "unreadable", "=HYPERLINK(\"http://evil\")\r\n@x", "=1")
    entries = []
    with Gradebook(Path(":memory:")) as book:
        for sid in ("\r=2+5", "\t=1", "-2", "ok"):
            book.add(sid, result if sid == "ok" else synthetic(None), sha256="", source=BATCH, path="x")
        entries = book.current()
    table = list(csv_rows(all_of(entries, "en"), ("todo1",)))
    ids = [row[0] for row in table[1:]]
    assert sorted(ids) == sorted(["'\\x0d=2+5", "'\\x09=1", "'-2", "ok"])
    reason = next(row for row in table if row[0] == "ok")[table[0].index("reason")]
    assert reason.startswith("Not graded: ") and "\r" not in reason and "\n" not in reason


def test_progress_lines_and_notes_show_escapes_not_sequences() -> None:
    stream = io.StringIO()
    progress = batch.Progress(2, stream)
    progress.advance(f"dave{OSC52}", "100/100")
    progress.note(f"left out \u202eevil\r\n{OSC52}")
    written = stream.getvalue()
    assert "\x1b" not in written and "\x07" not in written and "\u202e" not in written and "\r" not in written
    assert "dave\\x1b]52;c;cm0gLXJmIH4=\\x07: 100/100" in written and written.count("\n") == 2


def test_the_text_scorecard_shows_a_hostile_file_name_escaped() -> None:
    rendered = text.render(synthetic("todo1", submission=f"sub/{OSC52}\u202e.ipynb"), "en")
    assert "\x1b" not in rendered and "\u202e" not in rendered and "\\x1b]52" in rendered


def test_names_that_are_not_utf8_get_a_row(tmp_path: Path) -> None:
    folder = tmp_path / "subs"
    folder.mkdir()
    (folder / os.fsdecode(b"bad\xff.py")).write_text("x = 1\n")
    (folder / "good.py").write_text("x = 1\n")
    students, _ = discovery.discover([folder])
    assert sorted(s.id for s in students) == ["bad\\xff", "good"]
    out = tmp_path / "class"
    with Gradebook.in_dir(out) as book:
        for student in students:
            result = synthetic(None, submission=str(student.path))
            book.add(student.id, result, sha256="", source=BATCH, path=str(student.path))
            classfolder.write_student_files(out, student.id, result, "en")
        assert sorted(book.students()) == ["bad\\xff", "good"]


def test_lookalike_ids_are_different_students_and_the_batch_says_so(tmp_path: Path) -> None:
    for name in ("Alice", "alice", NFC, NFD):
        (tmp_path / f"{name}.py").write_text("x = 1\n")
    students, _ = discovery.discover([tmp_path])
    if len(students) < 4:
        pytest.skip("this file system folds case or normalisation")
    assert len({s.id for s in students}) == 4
    assert sorted(map(sorted, discovery.lookalikes([s.id for s in students]))) == sorted([["Alice", "alice"], sorted([NFC, NFD])])


def test_a_folder_with_the_named_notebook_and_a_stray_one_grades_the_named_one(tmp_path: Path) -> None:
    named = load_config().submission_file
    for student, files in {
        "alice": [named, "Untitled.ipynb"],
        "bob": [named.upper(), "scratch.ipynb"],  # another case: still the named one
        "carol": ["work.ipynb", "helper.py"],  # the only notebook
        "dave": ["a.ipynb", "b.ipynb"],  # neither: left out, told what to do
        "erin": ["one.py", "two.py"],
    }.items():
        (tmp_path / student).mkdir()
        for name in files:
            (tmp_path / student / name).write_text("{}")
    students, left_out = discovery.discover([tmp_path], named=named)
    assert {s.id: s.path.name for s in students} == {"alice": named, "bob": named.upper(), "carol": "work.ipynb"}
    reasons = {s.id: s.reason.en for s in left_out}
    assert set(reasons) == {"dave", "erin"}
    assert "a.ipynb, b.ipynb" in reasons["dave"] and named in reasons["dave"] and "several .py files" in reasons["erin"]


def test_one_truth_for_a_student_without_a_grade(tmp_path: Path) -> None:
    """Scorecards, results.json, the CSV and the dashboard say the same: not graded, and why."""
    out = tmp_path / "class"
    config = load_config()
    why = "the submission is empty (0 bytes)"
    result = classfolder.error_result(Path("empty.ipynb"), config, "unreadable", why, "提交的文件是空的（0 字节）")
    assert result.score == 0 and all(item.status == "not_run" for item in result.items)
    with Gradebook.in_dir(out) as book:
        book.add("emma", result, sha256="", source=BATCH, path="empty.ipynb")
        book.add("lou", classfolder.error_result(Path("lou"), config, "left_out", "no .ipynb or .py file in lou", "没有"),
                 sha256="", source=BATCH, path="lou", status=LEFT_OUT)
    classfolder.write_dashboard(out, "en")  # writes the scorecards that are missing
    sentence = f"Not graded: {why}"
    payload = json.loads((out / "students" / "emma.json").read_text(encoding="utf-8"))
    assert payload["tests"] == [] and payload["score"] == 0 and payload["output"].startswith(sentence)
    assert "Gradescope needs a score" in payload["output"] and payload["output_format"] == "text"
    assert payload["extra_data"]["graded"] is False
    assert sentence in (out / "students" / "emma.md").read_text(encoding="utf-8").replace("**", "").replace("\\", "")
    card = (out / "students" / "emma.html").read_text(encoding="utf-8")
    assert "Not graded" in card and why in card and 'id="total"' not in card
    rows = {row["student_id"]: row for row in csv.DictReader(io.StringIO(cli("export", "--out", str(out), "--lang", "en").stdout))}
    assert rows["emma"]["reason"] == sentence and rows["emma"]["total"] == "" and rows["emma"]["status"] == "not_gradable"
    assert rows["lou"]["reason"].startswith("Not graded: no .ipynb")
    page = (out / "dashboard.html").read_text(encoding="utf-8")
    assert sentence in page
    zh = json.loads(json.dumps(classfolder.gradescope.to_results_json(result, "zh"), ensure_ascii=False))
    assert zh["output"].startswith("未评分：提交的文件是空的")


@pytest.mark.slow
def test_a_class_of_hostile_file_names_each_gets_a_row_a_scorecard_and_a_safe_line(tmp_path: Path) -> None:
    """grade-batch end to end on files named as an attacker would (empty files: not gradable, fast)."""
    subs = tmp_path / "subs"
    subs.mkdir()
    stems = ["bob\rnext=2+5", "carol\n@SUM(A1:A9)", f"dave{OSC52}", "fay \"the\" 'quote'", "=2+5", "-1", "Alice", "alice",
             NFC, NFD, "alice@uni.edu", "alice_uni.edu-0f5784", "x" * 240, "é" * 120, "x\\..\\..\\evil", "\u202egnp"]
    for stem in stems:
        (subs / f"{stem}.py").write_bytes(b"")
    (subs / ".hidden.py").write_bytes(b"")  # a hidden file is nobody's submission
    (subs / os.fsdecode(b"bad\xff.py")).write_bytes(b"")
    (subs / "gina").mkdir()  # the named notebook beside a stray one: the named one is graded
    named = load_config().submission_file
    (subs / "gina" / named).write_bytes(b"")
    (subs / "gina" / "Untitled.ipynb").write_text("{}")
    if len(list(subs.iterdir())) < len(stems) + 3:
        pytest.skip("this file system folds case or normalisation")
    out = tmp_path / "class"
    proc = cli("grade-batch", str(subs), "--out", str(out), "-j", "2", "--lang", "en", "--cold", "--public-seed")
    assert proc.returncode == 0, proc.stderr
    assert not any(c in proc.stderr.replace("\n", "") for c in CONTROL), proc.stderr
    assert "dave\\x1b]52;c;cm0gLXJmIH4=\\x07: not gradable" in proc.stderr
    assert "differ only by case or Unicode normalisation" in proc.stderr
    with Gradebook.in_dir(out) as book:
        ids = book.students()
        assert len(ids) == len(stems) + 2
        assert book.latest("gina").path.endswith(named)
    cards = list((out / "students").iterdir())
    assert len(cards) == 3 * len(ids) and len({classfolder.slug(sid) for sid in ids}) == len(ids)
    assert all(json.loads((out / "students" / f"{classfolder.slug(sid)}.json").read_text())["tests"] == [] for sid in ids)
    exported = cli("export", "--out", str(out), "--lang", "en", "--csv", str(tmp_path / "grades.csv"))
    assert exported.returncode == 0, exported.stderr
    table = list(csv.reader(io.StringIO((tmp_path / "grades.csv").read_text(encoding="utf-8"), newline="")))
    assert len(table) == len(ids) + 1 and all(row[9] == "not_gradable" and row[10].startswith("Not graded: ") for row in table[1:])
    assert not any(c in cell for row in table for cell in row for c in CONTROL)
    page = (out / "dashboard.html").read_text(encoding="utf-8")
    assert page.count("<tr data-student=") == len(ids)


def test_the_notebook_a_kernel_runs_is_named_when_it_can_be_told(tmp_path: Path) -> None:
    named = load_config().submission_file
    assert notebook_in(tmp_path, named) is None
    (tmp_path / "my work.ipynb").write_text("{}")
    (tmp_path / "helper.py").write_text("")
    assert notebook_in(tmp_path, named) == "my work.ipynb"
    (tmp_path / "Untitled.ipynb").write_text("{}")
    assert notebook_in(tmp_path, named) is None  # two notebooks: which one runs is not ours to guess
    (tmp_path / named).write_text("{}")
    assert notebook_in(tmp_path, named) == named
