"""The report printed on the terminal (and by `grader.check()` outside a notebook front end).

Errors first: the cells that raised, with cell and line. Then every TODO and item; each failed
item with its explanation, expected and actual, and its reproduction: the first in full (it is
the one to paste after your cells), the others shortened. `quiet=True` gives one line per item.
Every string comes sanitised (grader/sanitize.py): nothing in it can move the cursor or start a
line of its own.
"""

from __future__ import annotations

from collections.abc import Sequence

from grader import rules as item_rules
from grader.report import cells as cell_info
from grader.report import scope
from grader.report.budget import sanitized
from grader.report.labels import blocked, colon, not_graded, paren, status_word, todo_name, word
from grader.report.pictures import picture_text
from grader.results import FAILED, Failure, GradeResult, ItemResult

MARK = {"passed": "✓", "failed": "✗", "not_run": "–"}
SHORT_REPRO = 6  # lines of every reproduction after the first
INDENT = "      "

WORDS = {
    "short_repro": ("复现（共 {total} 行，只显示前 {n} 行）", "Reproduction (first {n} of {total} lines)"),
    "more_lines": ("…… 还有 {n} 行", "… {n} more line{s}"),
    "same": ("↑ 同上", "↑ same as above"),
}


def say(key: str, lang: str, **fmt: object) -> str:
    if key in WORDS:
        zh, en = WORDS[key]
        return (zh if lang == "zh" else en).format(**fmt)
    return word(key, lang)


def one_line(text: str, limit: int = 300) -> str:
    """Sanitised text is already one line; shortened here for the terminal's width."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _block(text: str, limit: int | None, lang: str, tail: bool = False) -> list[str]:
    """Indented lines of code or a traceback: all, or `limit` of them (the last, with tail=True)."""
    rows = text.rstrip("\n").split("\n")
    if limit is not None and len(rows) > limit + 1:
        rest = len(rows) - limit
        more = say("more_lines", lang, n=rest, s="s" if rest != 1 else "")
        rows = [more, *rows[-limit:]] if tail else [*rows[:limit], more]
    return [INDENT + "  " + row for row in rows]


def failure_lines(failure: Failure, lang: str, first: bool) -> list[str]:
    lines = [INDENT + one_line(failure.message.get(lang), 600)]
    if failure.expected or failure.actual:
        lines.append(f"{INDENT}{word('expected', lang)}{colon(lang)}{one_line(failure.expected_for(lang), 300)}")
        lines.append(f"{INDENT}{word('actual', lang)}{colon(lang)}{one_line(failure.actual_for(lang), 300)}")
    repro = failure.repro_for(lang)
    if repro:
        total = len(repro.rstrip("\n").split("\n"))
        if first or total <= SHORT_REPRO + 1:
            lines.append(f"{INDENT}{word('repro', lang)}{colon(lang).rstrip()}")
            lines += _block(repro, None, lang)
        else:
            lines.append(INDENT + say("short_repro", lang, n=SHORT_REPRO, total=total) + colon(lang).rstrip())
            lines += _block(repro, SHORT_REPRO, lang)
    if failure.traceback:
        lines.append(f"{INDENT}{word('traceback', lang)}{colon(lang).rstrip()}")
        lines += _block(failure.traceback, None if first else 4, lang, tail=True)
    lines += [INDENT + row for row in picture_text(failure.picture, lang)]
    return lines


def _header(result: GradeResult, lang: str, todos: Sequence[str] = ()) -> str:
    """The total, or the points of the TODOs checked (grader.check("todo3")), and the file's name."""
    points = scope.total(result, todos, lang) or f"{word('score', lang)}{colon(lang)}{result.score:g} / {result.max_score:g}"
    return f"{points}  {paren(result.submission_name or result.submission, lang)}"


def _not_graded(result: GradeResult, lang: str) -> str:
    """No score line: a submission that was not graded has none (results.json carries Gradescope's 0)."""
    assert result.error is not None
    return f"✗ {not_graded(one_line(result.error.message.get(lang), 600), lang)}{paren(result.submission_name or result.submission, lang)}\n"


def _raised(result: GradeResult, lang: str, numbering: str) -> list[str]:
    broken = cell_info.raised(result)
    if not broken:
        return []
    lines = [f"⚠ {say('fix_first', lang)}{colon(lang).rstrip()}"]
    for number, cell in enumerate(broken):
        lines.append(f"  ✗ {cell_info.where(cell, lang, numbering)}{colon(lang)}{one_line(cell_info.what(cell, lang), 300)}")
        if cell.traceback and number < 3:  # the last frames of the first few; the rest on one line each
            lines += _block(cell.traceback, 4, lang, tail=True)
    return lines + [""]


def _skipped(result: GradeResult, lang: str, numbering: str) -> list[str]:
    rows = cell_info.skipped_lines(result, lang, numbering)
    if not rows:
        return []
    lines = [f"– {word('skipped', lang)}{colon(lang).rstrip()}"]
    for where, text, why in rows:
        lines.append(f"    {where}{colon(lang)}{one_line(text, 120)}{paren(why, lang)}")
    return lines


def render(result: GradeResult, lang: str, *, quiet: bool = False, numbering: str = "order", todos: Sequence[str] = ()) -> str:
    """`todos`: the TODOs a check was limited to (grader.check("todo3")): the header shows their points."""
    result = sanitized(result)
    if quiet:
        return render_quiet(result, lang, numbering=numbering, todos=todos)
    if result.error is not None:
        return _not_graded(result, lang)
    lines = [_header(result, lang, todos)]
    if scope.note(result, todos, lang):
        lines.append(f"* {scope.note(result, todos, lang)}")
    lines.append("")
    lines += _raised(result, lang, numbering)
    for flag in result.flags:
        lines.append(f"! {word('flags', lang)}{colon(lang)}{one_line(flag.get(lang), 600)}")
    for record in result.tampering:
        lines.append(f"! {word('tampering', lang)}{colon(lang)}{one_line(record.message.get(lang), 600)}")
    for note in result.notes:
        lines.append(f"* {one_line(note.get(lang), 600)}")
    lines += _skipped(result, lang, numbering)
    per_todo = result.todo_scores()
    shown: set[str] = set()
    first = True
    previous: tuple[str, str] | None = None
    for item in result.items:
        if item.todo not in shown:
            shown.add(item.todo)
            got, possible = per_todo.get(item.todo, (0.0, 0.0))
            lines.append(f"\n{todo_name(item.todo, lang)}{colon(lang)}{got:g}/{possible:g}")
        lines.append(f"  {MARK[item.status]} {item.id} ({item.score:g}/{item.weight:g}) {status_word(item.status, lang)}{blocked(item.blocked_by, lang)}")
        if item.failure is not None and item.status == FAILED:
            said = (item.failure.message.get(lang), item.failure.repro_for(lang))
            if said == previous and item.failure.repro_for(lang):  # a TODO not written: every item says the same
                lines.append(INDENT + say("same", lang))
                continue
            previous = said
            lines += failure_lines(item.failure, lang, first)
            rules = item_rules.for_item(item.id, item.todo)  # what the notebook told the student this item checks
            if rules:
                lines.append(f"{INDENT}{item_rules.say('on_card', lang)}{colon(lang).rstrip()}")
                lines += [f"{INDENT}  - {one_line(rule.text(lang), 400)}" for rule in rules]
            first = first and not item.failure.repro_for(lang)  # "first": the first reproduction shown
        elif item.failure is not None:  # not run here: say why, on one line
            lines.append(INDENT + one_line(item.failure.message.get(lang), 300))
    if result.given_code:
        lines.append(f"\n{say('given', lang)}{colon(lang).rstrip()}")
        for finding in result.given_code:
            lines += failure_lines(finding, lang, first=False)
    if result.random_cases.get(lang):
        lines.append(f"\n{say('random_cases', lang)}{colon(lang)}{one_line(result.random_cases[lang], 200)}")
    return "\n".join(lines) + "\n"


def _item_line(item: ItemResult, lang: str) -> str:
    line = f"{MARK[item.status]} {item.id} {item.score:g}/{item.weight:g} {status_word(item.status, lang)}{blocked(item.blocked_by, lang)}"
    if item.failure is not None and item.status == FAILED:
        line += colon(lang) + one_line(item.failure.message.get(lang), 160)
    return line


def render_quiet(result: GradeResult, lang: str, *, numbering: str = "order", todos: Sequence[str] = ()) -> str:
    """One line per item (and per cell that raised, first)."""
    result = sanitized(result)
    if result.error is not None:
        return _not_graded(result, lang)
    lines = [_header(result, lang, todos)]
    for cell in cell_info.raised(result):
        lines.append(f"✗ {cell_info.where(cell, lang, numbering)}{colon(lang)}{one_line(cell_info.what(cell, lang), 160)}")
    lines += [f"! {word('tampering', lang)}{colon(lang)}{one_line(r.message.get(lang), 300)}" for r in result.tampering]
    lines += [_item_line(item, lang) for item in result.items]
    return "\n".join(lines) + "\n"
