"""Cells run as Jupyter runs them: display() and get_ipython() exist, magics behave, `!` does nothing."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from grader.cells import python_view
from grader.config import load_config
from grader.grade import grade_path
from tests.conftest import SOLUTION_NB


@pytest.mark.parametrize(
    "cell, expected",
    [
        ("%time x = 1", "get_ipython().run_line_magic('time', 'x = 1')"),
        ("!pip install numpy", "get_ipython().system('pip install numpy')"),
        ("files = !ls", "files = get_ipython().getoutput('ls')"),
        ("%matplotlib inline\nimport torch", "get_ipython().run_line_magic('matplotlib', 'inline')\nimport torch"),
        ("%%bash\necho hi", "get_ipython().run_cell_magic('bash', '', 'echo hi\\n')"),
    ],
)
def test_magics_become_ipython_calls(cell: str, expected: str) -> None:
    assert python_view(cell).strip() == expected


def test_python_cell_magics_keep_their_body_as_the_cell() -> None:
    out = python_view("%%time\nclass A:\n    pass\n!echo hi")
    assert out.splitlines()[0].startswith("pass  # %%time")
    assert "class A:" in out and "get_ipython().system('echo hi')" in out


def test_valid_python_is_never_touched() -> None:
    source = "ok = (1\n!= 2)\nrest = 7 % 3"
    assert python_view(source) == source


def _notebook_with(tmp_path: Path, before: list[str], wrap_cell_magic: str | None = None) -> Path:
    nb = nbformat.read(SOLUTION_NB, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    for index, source in enumerate(before):
        nb.cells.insert(index, nbformat.v4.new_code_cell(source))
    if wrap_cell_magic:
        manager = next(c for c in code if "class KVCacheManager" in c.source)
        manager.source = f"%%{wrap_cell_magic}\n{manager.source}"
    path = tmp_path / "semantics.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    return path


@pytest.mark.slow
def test_a_notebook_using_ipython_features_scores_100(tmp_path: Path) -> None:
    path = _notebook_with(
        tmp_path,
        [
            "display('starting'); shell = get_ipython()\nprint(type(shell).__name__)",
            "%matplotlib inline\n!pip list\nlisting = !ls\n%load_ext autoreload",
            "%time warm = sum(range(10))\nassert warm == 45",
            "%%bash\necho this never runs while grading",
            "get_ipython().run_line_magic('config', \"InlineBackend.figure_format = 'svg'\")",
        ],
        wrap_cell_magic="time",
    )
    result = grade_path(path, load_config(), "cpu")
    assert [c.status for c in result.cells if c.status != "ok"] == [], [(c.index, c.message) for c in result.cells]
    assert result.score == 100, [(i.id, i.failure.message.en) for i in result.items if i.status == "failed"]
    assert not result.given_code, [g.message.en for g in result.given_code]
