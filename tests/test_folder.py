"""The notebook's folder, copied next to it for grading (grader/folder.py): what goes, what never does."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from grader import folder
from grader.config import NotebookEnvironment, load_config
from grader.discovery import discover
from grader.environment import folder_notes
from tests.conftest import ROOT, SOLUTION_NB

ENV = load_config().notebook


def _names(copy: folder.FolderCopy) -> list[str]:
    return [relative for relative, _ in copy.files]


def _class_of(tmp_path: Path) -> Path:
    work = tmp_path / "alice"
    (work / "data").mkdir(parents=True)
    (work / "nb.ipynb").write_text("{}")
    (work / "helper.py").write_text("X = 1\n")
    (work / "data" / "sizes.csv").write_text("1,2\n")
    return work


def test_the_folder_is_copied_with_the_submission_first(tmp_path: Path) -> None:
    work = _class_of(tmp_path)
    copy = folder.plan(work / "nb.ipynb", work, ENV)
    assert copy.name == "alice" and _names(copy) == ["nb.ipynb", "helper.py", "data/sizes.csv"] and copy.left_out == {}
    (tmp_path / "work").mkdir()
    target = copy.copy_into(tmp_path / "work", 1 << 20)
    assert sorted(str(p.relative_to(target)) for p in target.rglob("*")) == ["data", "data/sizes.csv", "helper.py", "nb.ipynb"]
    assert (target / "data" / "sizes.csv").read_text() == "1,2\n"


def test_alone_is_only_the_submission(tmp_path: Path) -> None:
    work = _class_of(tmp_path)
    assert _names(folder.plan(work / "nb.ipynb", None, ENV)) == ["nb.ipynb"]


def test_links_special_files_and_hidden_folders_never_go(tmp_path: Path) -> None:
    work = _class_of(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("classmate's answer")
    (work / "link.txt").symlink_to(secret)
    (work / "linked_dir").symlink_to(tmp_path)
    os.mkfifo(work / "pipe")  # opening it would block the grader
    for hidden in (".git", ".ipynb_checkpoints", "__pycache__"):
        (work / hidden).mkdir()
        (work / hidden / "x.py").write_text("1")
    copy = folder.plan(work / "nb.ipynb", work, ENV)
    assert _names(copy) == ["nb.ipynb", "helper.py", "data/sizes.csv"]
    assert copy.left_out == {"link": 2, "special": 1}
    assert "symbolic links" in folder_notes(copy)[0].en and "符号链接" in folder_notes(copy)[0].zh


def test_caps_on_files_bytes_and_depth(tmp_path: Path) -> None:
    work = tmp_path / "bob"
    deep = work / "a" / "b" / "c"
    deep.mkdir(parents=True)
    (work / "nb.ipynb").write_text("{}")
    (deep / "deep.txt").write_text("deep")
    for i in range(5):
        (work / f"f{i}.txt").write_text("x" * 1000)
    small = NotebookEnvironment(folder_files=3, folder_mb=1, folder_depth=2)
    copy = folder.plan(work / "nb.ipynb", work, small)
    assert _names(copy) == ["nb.ipynb", "f0.txt", "f1.txt"] and copy.left_out == {"files": 3, "depth": 1}
    (work / "big.bin").write_bytes(b"\0" * (1 << 20))
    copy = folder.plan(work / "nb.ipynb", work, NotebookEnvironment(folder_depth=8))
    assert "big.bin" in _names(copy) and "a/b/c/deep.txt" in _names(copy)
    copy = folder.plan(work / "nb.ipynb", work, NotebookEnvironment(folder_mb=1))
    assert "big.bin" not in _names(copy) and copy.left_out == {"bytes": 1}
    # A file that grows past what is left between the listing and the copy is left out too.
    (tmp_path / "w").mkdir()
    copy = folder.plan(work / "nb.ipynb", work, NotebookEnvironment(folder_mb=2))
    (work / "f0.txt").write_bytes(b"x" * (3 << 20))
    target = copy.copy_into(tmp_path / "w", 2 << 20)
    assert not (target / "f0.txt").exists() and copy.left_out.get("bytes") == 1


def test_the_answer_key_never_goes_wherever_it_lies(tmp_path: Path) -> None:
    """Grading the student notebook inside the grader's checkout copies neither the solution
    notebook next to it nor notebooks/source; a copy of an answer-key file anywhere is recognised
    by its bytes, whatever its name."""
    copy = folder.plan(ROOT / "notebooks" / "paged_attention_student.ipynb", ROOT / "notebooks", ENV)
    names = _names(copy)
    assert names[0] == "paged_attention_student.ipynb"
    assert not any("solution" in n or n.startswith("source/") for n in names), names
    assert copy.left_out.get("answer_key", 0) >= 2
    work = _class_of(tmp_path)
    shutil.copy(SOLUTION_NB, work / "my_notes.ipynb")
    shutil.copy(ROOT / "reference" / "paged_attention.py", work / "data" / "utils.py")
    copy = folder.plan(work / "nb.ipynb", work, ENV)
    assert _names(copy) == ["nb.ipynb", "helper.py", "data/sizes.csv"] and copy.left_out == {"answer_key": 2}


def test_grading_from_the_checkout_root_copies_nothing_of_the_grader() -> None:
    unsaved = ROOT / "an_unsaved_notebook.ipynb"  # grader.check() in a kernel started at the root
    names = _names(folder.plan(unsaved, ROOT, NotebookEnvironment(folder_files=100_000, folder_mb=1 << 12)))
    assert "README.md" in names and unsaved.name not in names
    assert not [n for n in names if n.split("/")[0] in ("grader", "reference", "student_template", ".git") or n.startswith("notebooks/source")]
    assert "notebooks/paged_attention_solution.ipynb" not in names


@pytest.mark.parametrize(("layout", "expected"), [("flat", None), ("folders", "alice")])
def test_a_batch_gives_each_student_their_own_folder_or_none(tmp_path: Path, layout: str, expected: str | None) -> None:
    subs = tmp_path / "subs"
    subs.mkdir()
    if layout == "flat":
        (subs / "alice.ipynb").write_text("{}")
        (subs / "bob.ipynb").write_text("{}")
    else:
        for name in ("alice", "bob"):
            (subs / name).mkdir()
            (subs / name / "nb.ipynb").write_text("{}")
    students, _ = discover([subs])
    alice = next(s for s in students if s.id == "alice")
    assert (alice.folder.name if alice.folder else None) == expected


def test_a_grading_stopped_while_copying_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The copy is made before the worker (and its keeper, who cleans up) exists: Ctrl-C then
    must not leave the grading's private directory behind."""
    import tempfile

    from grader.sandbox.client import Sandbox

    work = _class_of(tmp_path)
    copy = folder.plan(work / "nb.ipynb", work, ENV)

    def interrupted(self: folder.FolderCopy, target: Path, limit: int) -> Path:
        raise KeyboardInterrupt

    monkeypatch.setattr(folder.FolderCopy, "copy_into", interrupted)
    # Short (the socket's path must fit AF_UNIX's 108 bytes; pytest-xdist's tmp_path is long).
    private = Path(tempfile.mkdtemp(prefix="pa-t-"))
    try:
        monkeypatch.setattr(tempfile, "tempdir", str(private))
        with pytest.raises(KeyboardInterrupt):
            Sandbox([], load_config().limits, folder=copy)
        assert list(private.iterdir()) == []
    finally:
        shutil.rmtree(private, ignore_errors=True)
