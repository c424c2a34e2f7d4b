"""Both notebooks run top to bottom in a real kernel, as a student would run them."""

from __future__ import annotations

import nbformat
import pytest
from nbclient import NotebookClient

from tests.conftest import SOLUTION_NB, STUDENT_NB

pytestmark = pytest.mark.slow


def _run(path) -> str:
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    texts = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            texts.append(output.get("text", ""))
            assert output.get("output_type") != "error", output
    return "".join(texts)


def test_solution_notebook_passes_its_self_checks() -> None:
    printed = _run(SOLUTION_NB)
    assert printed.count("✅") == 6
    assert "❌" not in printed and "⏳" not in printed


def test_student_notebook_reports_every_todo_not_implemented() -> None:
    printed = _run(STUDENT_NB)
    assert printed.count("⏳") == 6  # five TODOs, and the release check that needs prefill
    assert "❌" not in printed and "✅" not in printed
