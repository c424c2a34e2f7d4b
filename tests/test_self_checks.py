"""The notebooks' self-check cell reports a failure and never raises it, so that Run All goes on
to `grader.check()` (a raising cell stops Run All).  Run here in one namespace, without a kernel;
tests/test_notebooks.py runs the whole student notebook in a real one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import SOLUTION_NB, STUDENT_NB

GOOD_DECODE = "        if new_len > len(req.block_table) * self.block_size:"
BUGGY_DECODE = "        if new_len > len(req.block_table) * self.block_size + 1:"  # the block comes one token late


def _code_cells(path: Path) -> tuple[list[str], str]:
    """The notebook's module cells, and its self-check cell (the `selfcheck` cell that runs them; the
    lab's cell and the grader's are `selfcheck` cells too)."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    modules = ["".join(c["source"]) for c in code if "module" in c["metadata"]["tags"]]
    checks = ["".join(c["source"]) for c in code if "selfcheck" in c["metadata"]["tags"]]
    self_check = [c for c in checks if "run_self_checks()" in c]
    assert len(self_check) == 1 and "grader.check()" in checks[-1]
    return modules, self_check[0]


def _run(modules: list[str], check: str) -> None:
    namespace: dict[str, object] = {"__name__": "__main__"}
    for number, source in enumerate([*modules, check]):
        exec(compile(source, f"<cell {number}>", "exec"), namespace)  # noqa: S102 - the project's own notebook


def test_a_failing_self_check_is_printed_and_the_cell_does_not_raise(capsys: pytest.CaptureFixture[str]) -> None:
    modules, check = _code_cells(SOLUTION_NB)
    assert sum(GOOD_DECODE in m for m in modules) == 1
    _run([m.replace(GOOD_DECODE, BUGGY_DECODE) for m in modules], check)  # raises nothing
    printed = capsys.readouterr().out
    assert "❌ TODO 3 decode / 解码扩容: AssertionError: line " in printed  # a bare assert: the line that failed
    assert printed.count("✅") == 5 and "⏳" not in printed
    assert "1 项自检未通过" in printed and "1 self-check(s) failed" in printed and "grader.check()" in printed


def test_the_solution_passes_every_self_check_and_prints_no_summary(capsys: pytest.CaptureFixture[str]) -> None:
    _run(*_code_cells(SOLUTION_NB))
    printed = capsys.readouterr().out
    assert printed.count("✅") == 6 and "❌" not in printed and "failed" not in printed


def test_the_template_reports_every_todo_as_not_implemented(capsys: pytest.CaptureFixture[str]) -> None:
    _run(*_code_cells(STUDENT_NB))
    printed = capsys.readouterr().out
    assert printed.count("⏳") == 6 and "❌" not in printed and "✅" not in printed
