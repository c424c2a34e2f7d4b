"""A card for some TODOs only (`grader.check("todo3")`): its total is those TODOs' points.

A check of one TODO grades that TODO's items alone.  Its score out of 100 (GradeResult.score,
scaled over the items that ran) would read "68 / 100" for 17 of TODO 3's 25 points; the card
says "TODO 3 decode growth: 17 / 25" instead, and that the other TODOs were not checked.
"""

from __future__ import annotations

from collections.abc import Sequence

from grader.report.labels import colon, todo_name
from grader.results import GradeResult


def checked(result: GradeResult, todos: Sequence[str]) -> list[tuple[str, float, float]]:
    """(TODO, points, possible) of each TODO of `todos` that was graded; [] for a whole card."""
    scores = result.todo_scores()
    return [(todo, *scores[todo]) for todo in todos if todo in scores]


def total(result: GradeResult, todos: Sequence[str], lang: str) -> str:
    """"TODO 3 decode growth: 17 / 25" (each TODO checked), or "" for a whole card."""
    parts = [f"{todo_name(todo, lang)}{colon(lang)}{got:g} / {possible:g}" for todo, got, possible in checked(result, todos)]
    return ("；" if lang == "zh" else "; ").join(parts)


def note(result: GradeResult, todos: Sequence[str], lang: str) -> str:
    """What a partial card leaves out, and how to check everything."""
    names = [f"TODO {todo.removeprefix('todo')}" for todo, *_ in checked(result, todos)]
    if not names:
        return ""
    if lang == "zh":
        return f"只检查了 {'、'.join(names)}，分数是这部分的得分；不带参数的 grader.check() 检查全部 TODO（满分 100）"
    return f"only {', '.join(names)} checked, and the points are that part's; grader.check() with no argument checks every TODO (out of 100)"
