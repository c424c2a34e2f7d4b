"""Both notebooks run top to bottom in a real kernel, as a student would run them."""

from __future__ import annotations

import nbformat
import pytest
from nbclient import NotebookClient

from tests.conftest import SOLUTION_NB, STUDENT_NB

pytestmark = pytest.mark.slow


def _run(path, edit=None) -> tuple[str, str]:
    """Run a notebook as a student would, Run All: a cell that raises stops it (nbclient raises);
    (what it printed, the scorecard its last cell showed).  `edit` changes the notebook first."""
    nb = nbformat.read(path, as_version=4)
    if edit is not None:
        edit(nb)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    texts = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            texts.append(output.get("text", ""))
            assert output.get("output_type") != "error", output
    last = nb.cells[-1]
    assert last.source.strip().endswith("grader.check()")  # the notebook ends by asking the grader
    [card] = [o["data"] for o in last.outputs if o.get("output_type") == "display_data"]
    assert card["text/html"].startswith('<div class="pa-card"')
    return "".join(texts), card["text/plain"]


def test_solution_notebook_passes_its_self_checks_and_the_grader() -> None:
    printed, card = _run(SOLUTION_NB)
    assert printed.count("✅") == 6
    assert "❌" not in printed and "⏳" not in printed
    assert card.startswith("得分：100 / 100")  # grader.check(), unchanged, gives full marks


def test_student_notebook_reports_every_todo_not_implemented() -> None:
    printed, card = _run(STUDENT_NB)
    assert printed.count("⏳") == 6  # five TODOs, and the given release waiting for prefill
    assert "❌" not in printed and "✅" not in printed
    # The given code is named as given, never as "not implemented".
    assert "⏳ given release / 已给出的释放复用: 给定代码，等待 TODO 2 完成 / given code, waits for TODO 2" in printed
    assert printed.count("未实现 / not implemented") == 5
    assert card.startswith("得分：0 / 100") and "TODO 1 还没有实现" in card


WRONG_LEDGER = """    kv_bytes_per_token = num_layers * num_kv_heads * head_dim * dtype_bytes  # V forgotten: a real mistake
    kv_bytes_per_block = kv_bytes_per_token * block_size
    total_cache_bytes = kv_bytes_per_block * num_blocks"""


def _write_a_wrong_ledger(nb) -> None:
    [cell] = [c for c in nb.cells if 'raise NotImplementedError("TODO 1' in c.source]
    lines = cell.source.split("\n")
    [at] = [i for i, line in enumerate(lines) if 'raise NotImplementedError("TODO 1' in line]
    cell.source = "\n".join([*lines[:at], WRONG_LEDGER, *lines[at + 1 :]])


def test_run_all_reaches_the_grader_when_a_self_check_fails() -> None:
    """Issue 21: a failed self-check used to raise, and Run All stopped before grader.check().
    The real grader runs in the last cell here (nothing stubbed): its card is the proof it ran."""
    printed, card = _run(STUDENT_NB, _write_a_wrong_ledger)
    assert "❌ TODO 1 ledger / 容量账本: AssertionError" in printed and "1 self-check(s) failed" in printed
    assert printed.count("⏳") == 5  # the other TODOs are still to be written
    # One mistake, one item: the per-block figures, counted from its own per-token figure, are right (8 of 97 points).
    assert card.startswith("得分：8.25 / 100") and "✗ todo1.per_token" in card and "✗ todo1.per_block_and_total" not in card
    assert "这一项检查的规则" in card and "K 和 V" in card  # the rule it broke, as the notebook states it
