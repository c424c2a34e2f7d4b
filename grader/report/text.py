"""The short summary printed on the terminal after grading."""

from __future__ import annotations

from grader.report.labels import status_word, todo_name, word
from grader.results import FAILED, GradeResult

MARK = {"passed": "✓", "failed": "✗", "not_run": "–"}


def one_line(text: str, limit: int = 300) -> str:
    """Student-controlled text on one line: it cannot fake a line of the report."""
    return " ".join(text.split())[:limit]


def render(result: GradeResult, lang: str) -> str:
    lines = [f"{word('score', lang)}: {result.score:g} / {result.max_score:g}   ({result.submission})"]
    if result.error is not None:
        lines.append(f"{word('unreadable', lang)}: {one_line(result.error.message.get(lang))}")
        return "\n".join(lines) + "\n"
    for flag in result.flags:
        lines.append(f"! {flag.get(lang)}")
    for note in result.notes:
        lines.append(f"* {note.get(lang)}")
    todos = result.todo_scores()
    shown: set[str] = set()
    for item in result.items:
        if item.todo not in shown:
            shown.add(item.todo)
            got, possible = todos.get(item.todo, (0.0, 0.0))
            lines.append(f"\n{todo_name(item.todo, lang)}: {got:g}/{possible:g}")
        lines.append(f"  {MARK[item.status]} {item.id} ({item.score:g}/{item.weight:g}) {status_word(item.status, lang)}")
        if item.status == FAILED and item.failure is not None:
            lines.append(f"      {one_line(item.failure.message.get(lang))}")
    broken = [c for c in result.cells if c.status not in ("ok", "not_run")]
    if broken:
        lines.append(f"\n{word('cells', lang)}:")
        for cell in broken:
            lines.append(f"  {word('cell', lang)} {cell.index}: {one_line(cell.error_type or cell.status, 80)}: {one_line(cell.message, 200)}")
    return "\n".join(lines) + "\n"
