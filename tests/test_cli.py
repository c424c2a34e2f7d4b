"""The command line as a TA or a student meets it: a bare path, one name for the output, exit statuses
that are all documented, no traceback on a closed pipe, and the points notice GitHub Classroom reads."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from grader import cli
from grader.gradebook import BATCH, Gradebook
from grader.report import github
from tests.conftest import ROOT
from tests.test_batch import _no_gpu, synthetic

VERB_NAMES = ("grade", "grade-batch", "import", "export", "dashboard", "gradescope-zip", "secret", "assign", "kv-lab")


def test_a_first_argument_that_is_not_a_verb_is_graded() -> None:
    parser = cli.build_parser()
    assert cli.with_verb(["my.ipynb", "--lang", "en"], parser) == ["grade", "my.ipynb", "--lang", "en"]
    assert cli.with_verb(["--lang", "en", "my.ipynb"], parser) == ["grade", "--lang", "en", "my.ipynb"]
    for argv in (["export", "--out", "g"], ["grade", "x.py"], ["-h"], []):
        assert cli.with_verb(argv, parser) == argv


def test_the_console_script_grades_a_bare_path_as_grade_does(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "paged-attention-grader"
    if not script.exists():
        pytest.skip("the project is not installed in this environment (pip install -e .)")
    missing = str(tmp_path / "my.ipynb")  # quick to grade: a scorecard saying it is not there
    bare = subprocess.run([str(script), missing, "--lang", "en"], capture_output=True, text=True, timeout=120)
    verb = subprocess.run([sys.executable, "-m", "grader", "grade", missing, "--lang", "en"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert "invalid choice" not in bare.stderr, bare.stderr
    assert bare.returncode == verb.returncode == 2 and "submission not found" in bare.stdout
    assert bare.stdout == verb.stdout


def test_out_names_the_output_of_every_verb_that_writes_one() -> None:
    parser = cli.build_parser()
    for argv in (["grade-batch", "s"], ["import", "r.json"], ["export"], ["dashboard"], ["gradescope-zip"]):
        assert parser.parse_args([*argv, "--out", "x"]).out == Path("x"), argv
    for alias in ("-o", "--output"):  # the names gradescope-zip had first still work
        assert parser.parse_args(["gradescope-zip", alias, "z.zip"]).out == Path("z.zip")


def test_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    """`export | head`: the reader is gone before the CSV is written; no traceback, status 141."""
    with Gradebook.in_dir(tmp_path) as book:
        for number in range(50):
            book.add(f"student{number:02d}", synthetic(None), sha256="a" * 64, source=BATCH, path="nb.ipynb")
    read_end, write_end = os.pipe()
    os.close(read_end)  # nobody will ever read: the first write fails, whatever the timing
    try:
        proc = subprocess.run([sys.executable, "-m", "grader", "export", "--out", str(tmp_path)],
                              stdout=write_end, stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=120)
    finally:
        os.close(write_end)
    assert proc.returncode == cli.EXIT_CLOSED_PIPE and proc.stderr == "", proc.stderr


def _codes(text: str) -> set[int]:
    """Exit statuses listed in a verb's 'Exit status:' paragraph ("0  ...", "; 1 ...")."""
    paragraph = text[text.index("Exit status:") :]
    return {int(code) for code in re.findall(r"(?:^|;|:)\s*(\d{1,3})\s", paragraph, re.M)}


def _readme_row(first_cell: str) -> str:
    readme = (ROOT / "docs" / "ta.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Exit statuses") :]
    return next(line for line in section.splitlines() if line.startswith(f"| {first_cell} |"))


@pytest.mark.parametrize("verb", VERB_NAMES)
def test_every_exit_status_of_every_verb_is_documented(verb: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args([verb, "--help"])
    shown = capsys.readouterr().out
    assert "Exit status:" in shown and cli.COMMON_EXITS.split()[-1] in shown
    documented = _codes(shown)
    assert 0 in documented
    # docs/ta.md's table says the same as --help, code for code.
    assert {int(code) for code in re.findall(r"`(\d{1,3})`", _readme_row(f"`{verb}`"))} == documented, verb
    common = {int(code) for code in re.findall(r"`(\d{1,3})`", _readme_row("every verb"))}
    assert common == {cli.EXIT_USAGE, cli.EXIT_INTERRUPTED, cli.EXIT_CLOSED_PIPE}


def test_grade_batch_exit_statuses_are_the_ones_it_returns() -> None:
    assert _codes(cli.grade_batch.__doc__ or "") == {0, 1, 2, 130}


def test_points_notice_keeps_the_decimals() -> None:
    result = _no_gpu(synthetic("todo1"))  # 82 of 97 points: 84.54
    assert result.score == 84.54
    assert github.points_notice(result) == "::notice title=Points::Points 84.54/100"
    assert github.points_notice(synthetic(None)) == "::notice title=Points::Points 100/100"
