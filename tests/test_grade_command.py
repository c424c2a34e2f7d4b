"""`grade`: the text report and the JSON are always written, and exit 3 (never 1) means the
grader failed, whatever the submission's strings hold."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import grader.grade
from grader.cli import main
from grader.report import html, markdown
from tests.conftest import ROOT
from tests.handmade import hostile_huge_result, picture_result


def _run(tmp_path: Path, *extra: str) -> int:
    submission = tmp_path / "nb.py"
    submission.write_text("x = 1\n", encoding="utf-8")
    return main(["grade", str(submission), "--lang", "en", "--json", str(tmp_path / "r.json"), *extra])


def test_a_renderer_that_fails_still_leaves_text_and_json_and_exit_3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(grader.grade, "grade_path", lambda *args, **kwargs: picture_result())

    def broken(*args: object, **kwargs: object) -> str:
        raise UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed")

    monkeypatch.setattr(html, "render", broken)
    monkeypatch.setattr(markdown, "render", broken)
    code = _run(tmp_path, "--html", str(tmp_path / "s.html"), "--markdown", str(tmp_path / "s.md"), "--fail-under", "100")
    out = capsys.readouterr()
    assert code == 3  # not 1, although the score is below --fail-under
    assert out.out.startswith("Score: 61.86 / 100") and "todo3.growth" in out.out
    payload = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert payload["score"] == 61.86 and any(i["id"] == "todo3.growth" and i["status"] == "failed" for i in payload["extra_data"]["grade_result"]["items"])
    assert "61.86" in (tmp_path / "s.html").read_text(encoding="utf-8")  # a plain stand-in, never nothing
    assert "html: UnicodeEncodeError" in out.err and "markdown: UnicodeEncodeError" in out.err


def test_the_json_is_written_when_its_own_rendering_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from grader.report import gradescope

    monkeypatch.setattr(grader.grade, "grade_path", lambda *args, **kwargs: picture_result())
    monkeypatch.setattr(gradescope, "to_results_json", lambda *args: 1 / 0)
    assert _run(tmp_path) == 3
    payload = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert payload["score"] == 61.86 and len(payload["tests"]) == len(picture_result().items)
    assert payload["extra_data"]["grade_result"]["submission"] == "student.ipynb"  # grade-batch reads it back
    assert "json: ZeroDivisionError" in capsys.readouterr().err


def test_a_bug_anywhere_exits_3_not_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from grader import job

    monkeypatch.setattr(job, "_run", lambda job: [][0])
    assert _run(tmp_path) == 3
    assert "IndexError" in capsys.readouterr().err


def test_hostile_strings_reach_the_terminal_escaped_and_reports_stay_small(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(grader.grade, "grade_path", lambda *args, **kwargs: hostile_huge_result(cells=40_000))
    code = _run(tmp_path, "--html", str(tmp_path / "s.html"), "--markdown", str(tmp_path / "s.md"))
    out = capsys.readouterr().out
    assert code == 0
    assert "\x1b" not in out and "\ud800" not in out
    assert [line for line in out.splitlines() if line.startswith("Score:")] == [out.splitlines()[0]]
    for name in ("r.json", "s.html", "s.md"):
        assert (tmp_path / name).stat().st_size < 1 << 20, name


def test_quiet_prints_one_line_per_item(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(grader.grade, "grade_path", lambda *args, **kwargs: picture_result())
    assert _run(tmp_path, "--quiet") == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 + 1 + len(picture_result().items)  # score, the cell that raised, one per item
    assert json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))["tests"][[i.id for i in picture_result().items].index("todo3.growth")]["counterexample"].startswith("m = KVCacheManager")


def test_a_lone_surrogate_in_an_exception_is_graded_not_a_crash(tmp_path: Path) -> None:
    # The case that once crashed `grade` with exit 1 and no results.json.
    submission = tmp_path / "nb.py"
    submission.write_text(
        'print("\\x1b[2J\\x1b[HScore: 100 / 100")\nraise ValueError("bad \\ud800 \\x1b[31mred\\nScore: 100 / 100")\n',
        encoding="utf-8",
    )
    out = tmp_path / "out" / "results.json"
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    proc = subprocess.run(
        [sys.executable, "-m", "grader", "grade", str(submission), "--lang", "en", "--json", str(out)],
        capture_output=True, cwd=ROOT, env=env, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")
    text = proc.stdout.decode("utf-8")
    assert "\x1b" not in text and "\\x1b[31mred ⏎ Score: 100 / 100" in text
    assert sum(1 for line in text.splitlines() if line.startswith("Score:")) == 1
    payload = json.loads(out.read_text(encoding="utf-8"))
    assert payload["score"] == 0 and "\ufffd" in json.dumps(payload["extra_data"]["grade_result"]["cells"], ensure_ascii=False)
