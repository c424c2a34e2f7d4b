"""grade-batch takes only each student's own regular file, and tells the TA about identical ones.

A class folder unpacked from students' archives may hold symbolic links (to a classmate's
notebook, to the solution notebook, to reference/), device files, sockets and pipes: each is
refused with the reason on that student's row (never graded as their own work, never lost),
and the submission time is the file's own.  Two students with byte-for-byte identical files are
both graded and flagged in the CSV and on the dashboard.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import socket
import stat
from datetime import datetime, timezone
from pathlib import Path

import pytest

from grader.classfolder import error_result
from grader.config import load_config
from grader.discovery import discover, file_sha256, file_time
from grader.gradebook import BATCH, Gradebook
from grader.report import dashboard
from grader.standing import all_of, identical
from tests.conftest import ROOT, SOLUTION_NB
from tests.test_batch import cli, synthetic

ROOT_USER = os.geteuid() == 0


def _class_folder(tmp_path: Path) -> Path:
    """Every kind of entry an archive can hold, one student each."""
    folder = tmp_path / "class"
    folder.mkdir()
    shutil.copy(ROOT / "reference" / "paged_attention.py", folder / "alice.py")
    shutil.copy(ROOT / "reference" / "paged_attention.py", folder / "henry.py")  # byte for byte alice's
    (folder / "bob.py").symlink_to(folder / "alice.py")  # a classmate's file
    (folder / "carol").mkdir()
    (folder / "carol" / "notebook.ipynb").symlink_to(SOLUTION_NB)  # the solution notebook
    (folder / "dave").symlink_to(ROOT / "reference")  # a folder: the answer key
    os.mkfifo(folder / "erin.py")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(folder / "gina.py"))
    if ROOT_USER:
        os.mknod(folder / "frank.ipynb", 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's numbers
    (folder / "ivan").mkdir()
    (folder / "ivan" / "work.ipynb").write_bytes(SOLUTION_NB.read_bytes())
    (folder / "ivan" / "helper.py").symlink_to("/etc/passwd")  # a link beside a real notebook: ivan is refused too
    return folder


def test_links_devices_sockets_and_pipes_are_refused_with_the_reason(tmp_path: Path) -> None:
    folder = _class_folder(tmp_path)
    students, left_out = discover([folder])
    assert [(s.id, s.path.name) for s in students] == [("alice", "alice.py"), ("henry", "henry.py")]
    reasons = {o.id: o.reason.en for o in left_out}
    expected = {"bob": "symbolic link", "carol": "symbolic link", "dave": "symbolic link", "erin": "named pipe", "gina": "socket", "ivan": "symbolic link"}
    if ROOT_USER:
        expected["frank"] = "device file"
    assert set(reasons) == set(expected), reasons
    for student, words in expected.items():
        assert words in reasons[student] and "refused" in reasons[student], (student, reasons[student])
        zh = next(o.reason.zh for o in left_out if o.id == student)
        assert "拒绝评分" in zh
    assert str(SOLUTION_NB) in reasons["carol"] and str(ROOT / "reference") in reasons["dave"]


def test_files_named_one_by_one_are_refused_too(tmp_path: Path) -> None:
    real = tmp_path / "alice.py"
    real.write_text("x = 1\n")
    link = tmp_path / "bob.py"
    link.symlink_to(real)
    students, left_out = discover([real, link])
    assert [s.id for s in students] == ["alice"]
    assert [(o.id, "symbolic link" in o.reason.en) for o in left_out] == [("bob", True)]


def test_a_folder_outside_the_class_folder_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "nb.ipynb").write_bytes(SOLUTION_NB.read_bytes())
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "mallory").symlink_to(outside)
    _, left_out = discover([folder])
    assert [o.id for o in left_out] == ["mallory"] and "symbolic link" in left_out[0].reason.en


def test_time_and_hash_are_the_files_own(tmp_path: Path) -> None:
    target = tmp_path / "target.py"
    target.write_text("print('the target')\n")
    os.utime(target, (1_700_000_000, 1_700_000_000))
    link = tmp_path / "link.py"
    link.symlink_to(target)
    os.utime(link, (1_600_000_000, 1_600_000_000), follow_symlinks=False)
    assert file_time(link) == datetime.fromtimestamp(1_600_000_000, timezone.utc).isoformat(timespec="seconds")
    assert file_time(target) == datetime.fromtimestamp(1_700_000_000, timezone.utc).isoformat(timespec="seconds")
    assert file_sha256(link) == ""  # never the target's bytes
    assert file_sha256(target) != ""


def test_identical_submissions_are_flagged_in_the_csv_and_the_dashboard(tmp_path: Path) -> None:
    out = tmp_path / "grades"
    with Gradebook.in_dir(out) as book:
        for student, sha in (("alice", "aa"), ("henry", "aa"), ("ivy", "aa"), ("bob", "bb"), ("carol", "cc")):
            book.add(student, synthetic(None, sha=sha), sha256=sha * 32, source=BATCH, path=f"{student}.py", status="graded")
        for student in ("dan", "eve"):  # two empty files: alike, and not graded: nothing to flag
            empty = error_result(Path(f"{student}.py"), load_config(), "unreadable", "the file is empty", "文件是空的")
            book.add(student, empty, sha256="e3" * 32, source=BATCH, path=f"{student}.py", status="graded")
        entries = book.current()
    assert identical(entries) == {"alice": ("henry", "ivy"), "henry": ("alice", "ivy"), "ivy": ("alice", "henry")}
    standings = {s.student: s for s in all_of(entries, "en")}
    assert standings["alice"].total == standings["bob"].total == 100  # flagged, not failed
    exported = cli("export", "--out", str(out), "--lang", "en")
    assert exported.returncode == 0, exported.stderr
    rows = {row["student_id"]: row for row in csv.DictReader(io.StringIO(exported.stdout))}
    assert json.loads(rows["alice"]["identical_to"]) == ["henry", "ivy"] and rows["bob"]["identical_to"] == ""
    assert rows["henry"]["total"] == "100" and rows["henry"]["status"] == "graded"
    page = dashboard.render(entries, "en")
    assert 'id="identical-note"' in page and "alice, henry, ivy" in page
    assert "identical to henry, ivy" in page
    stats = page.split('id="stats"', 1)[1].split("</div></div>", 1)[0]
    assert "<b>3</b>Identical submissions" in stats


@pytest.mark.slow
def test_grade_batch_grades_only_the_students_own_files(tmp_path: Path) -> None:
    """The whole command: links and special files refused on their rows, twins flagged, nobody lost."""
    folder = _class_folder(tmp_path)
    out = tmp_path / "grades"
    batch = cli("grade-batch", str(folder), "--out", str(out), "-j", "2", "--lang", "en", "--public-seed", timeout=900)
    assert batch.returncode == 1, batch.stderr[-3000:]  # some students have no grade: refused
    exported = cli("export", "--out", str(out), "--lang", "en")
    rows = {row["student_id"]: row for row in csv.DictReader(io.StringIO(exported.stdout))}
    refused = {"bob", "carol", "dave", "erin", "gina", "ivan"} | ({"frank"} if ROOT_USER else set())
    assert set(rows) == refused | {"alice", "henry"}
    for student in refused:
        assert rows[student]["status"] == "left_out" and "refused" in rows[student]["reason"] and rows[student]["total"] == "", rows[student]
    for student, twin in (("alice", "henry"), ("henry", "alice")):
        assert rows[student]["total"] == "100" and json.loads(rows[student]["identical_to"]) == [twin]
        own = datetime.fromtimestamp((folder / f"{student}.py").lstat().st_mtime, timezone.utc).isoformat(timespec="seconds")
        assert rows[student]["submitted_at"] == own
    page = (out / "dashboard.html").read_text(encoding="utf-8")
    assert 'id="identical-note"' in page and "alice, henry" in page
    # Nothing outside the class folder was read as anyone's work: no solution graded for carol or dave.
    assert not (out / "students" / "carol.json").read_text().count('"score": 100')


def test_identical_ids_with_spaces_and_commas_stay_apart_in_the_csv() -> None:
    """"Alice Smith" and "Bob, Jr" are two students, not four: the column is a JSON list."""
    from grader.commands.export import rows as csv_rows
    from grader.standing import Standing

    twin = Standing("carol", "graded", 100.0, 97.0, 97.0, identical_to=("Alice Smith", "Bob, Jr"))
    header, row = list(csv_rows([twin], ()))
    buffer = io.StringIO()
    csv.writer(buffer).writerows([header, row])
    parsed = next(csv.DictReader(io.StringIO(buffer.getvalue())))
    assert json.loads(parsed["identical_to"]) == ["Alice Smith", "Bob, Jr"]
