"""grader.check() lines are feedback: grading never runs them, never flags them, and keeps
everything else of their cells."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from grader import integrity
from grader.checkcalls import PLACEHOLDER, strip_check_calls, strip_source
from grader.submission import Cell, load_submission
from tests.conftest import SOLUTION_NB, STUDENT_NB


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import grader\ngrader.check()", PLACEHOLDER),
        ("import grader\nr = grader.check('todo3')\nprint(r.score)\nassert r.score == 100", PLACEHOLDER),
        ("from grader import check as c\nc(3, lang='en')", PLACEHOLDER),
        ("try:\n    import grader\nexcept ImportError:\n    print('pip install')\nelse:\n    grader.check()", PLACEHOLDER),
        # A definition next to the check is still graded; only the check's lines go.
        ("def f():\n    return 1\n\nimport grader\ngrader.check('todo1')", "def f():\n    return 1\n\npass\npass"),
        ("x = 1; import grader; grader.check(\n    'todo3')\ny = 2", "x = 1; pass; pass\n\ny = 2"),
        # Any other import of the grader stays what it is (and integrity flags it).
        ("import grader.checks", "import grader.checks"),
        ("import grader, time\nt = time.monotonic(); r = grader.check('todo3')", "import time\nt = time.monotonic(); pass"),
        ("import torch as t, grader as g\nx = t.zeros(1)\ng.check()", "import torch as t\nx = t.zeros(1)\npass"),
        ("import grader.checks, time", "import grader.checks, time"),
        ("from grader.grade import grade_path", "from grader.grade import grade_path"),
        ("import grader\nfrom grader import integrity", "pass\nfrom grader import integrity"),
        # A name taken back by the student is theirs again.
        ("import grader\ngrader = 5\nprint(grader)", "pass\ngrader = 5\nprint(grader)"),
        ("def broken(:\n    import grader", "def broken(:\n    import grader"),  # the worker reports it
        # Cells as typed, with IPython's syntax: the check goes, the magics stay, line for line.
        ("!ls\nimport grader\ngrader.check()\nx = 1", "!ls\npass\npass\nx = 1"),
        ("%time y = 2\nimport grader as g\nprint(g.check().score)", "%time y = 2\npass\npass"),
        ("import grader\n%time r = grader.check()\nx = 1", "pass\npass\nx = 1"),
        ("%%time\nimport grader\ngrader.check()", "%%time\n" + PLACEHOLDER),
        ("%%capture out\ndef f():\n    return 1\nimport grader\ngrader.check()", "%%capture out\ndef f():\n    return 1\npass\npass"),
        ("%%bash\nimport grader", "%%bash\nimport grader"),  # not Python: nothing runs it as such
    ],
)
def test_strip_source(source: str, expected: str) -> None:
    stripped = strip_source(source, set())
    assert stripped == expected
    if expected != source and "broken(" not in source and not stripped.startswith(("%", "!")):
        ast.parse(stripped)
        assert len(stripped.split("\n")) in (1, len(source.split("\n")))  # line numbers kept


def test_names_bound_to_the_grader_are_followed_across_cells() -> None:
    cells = strip_check_calls([Cell(1, "import grader"), Cell(2, "x = 1"), Cell(3, "r = grader.check()"), Cell(4, "print(r.score)\ny = x")])
    assert [c.source for c in cells] == [PLACEHOLDER, "x = 1", PLACEHOLDER, "pass\ny = x"]
    assert [c.index for c in cells] == [1, 2, 3, 4]


@pytest.mark.parametrize("notebook", [SOLUTION_NB, STUDENT_NB], ids=["solution", "student"])
def test_generated_notebooks_end_in_a_check_that_grading_skips_unflagged(notebook: Path) -> None:
    submission = load_submission(notebook, 1 << 24)
    assert submission.cells[-1].source == PLACEHOLDER
    assert integrity.scan(submission) == []


def test_a_real_import_of_the_grader_is_still_flagged(tmp_path: Path) -> None:
    path = tmp_path / "sub.py"
    path.write_text("import grader\ngrader.check()\n# %%\nfrom grader.checks import CHECKS\n", encoding="utf-8")
    flags = integrity.scan(load_submission(path, 1 << 20))
    assert [flag.en for flag in flags] == ["code cell 2 imports grader.checks"]


@pytest.mark.parametrize(
    ("cell", "flag"),
    [
        ("%run ../reference/paged_attention.py", "refers to the path '../reference/paged_attention.py'"),
        ("%%writefile sneaky.py\nfrom reference import paged_attention\n", "imports reference"),
        ("%%time\nimport student_template\n", "imports student_template"),
        ("x = 1\n%load_ext autoreload\nfrom grader.checks import CHECKS", "imports grader.checks"),
    ],
)
def test_code_that_arrives_through_magics_is_scanned_as_the_kernel_runs_it(tmp_path: Path, cell: str, flag: str) -> None:
    """A cell is read as IPython compiles it (Cell.python), and a module a cell writes as Python:
    an import of the answer key through %run, %%writefile or a cell magic's body is flagged."""
    import nbformat

    path = tmp_path / "sub.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 0"), nbformat.v4.new_code_cell(cell)]
    nbformat.write(nb, path)
    flags = [f.en for f in integrity.scan(load_submission(path, 1 << 20))]
    assert any(flag in f for f in flags), flags
