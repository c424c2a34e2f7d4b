"""The student's scorecard as Markdown: small enough for $GITHUB_STEP_SUMMARY (1 MiB a step).

Everything that comes from the submission (messages quoting its exceptions, printed values,
reproductions, cell errors) is untrusted: inline text is escaped, code goes into fences or
code spans longer than any backtick run inside it, so nothing can turn into HTML or links.
"""

from __future__ import annotations

import re

from grader.report import cells
from grader.report.budget import fit, utf8_size
from grader.report.labels import blocked, colon, failed_heading, paren, seconds, status_word, todo_name, word
from grader.results import FAILED, NOT_RUN, Failure, GradeResult, ItemResult

# Words the scorecards need beyond labels.WORDS (shared with html.py and dashboard.py).
WORDS = {
    "scorecard": ("评分报告", "Scorecard"),
    "total": ("总分", "Total"),
    "todo": ("TODO", "TODO"),
    "points": ("得分", "Points"),
    "items": ("评分项", "Rubric items"),
    "failed_items": ("未通过的评分项", "Failed items"),
    "not_run_items": ("未运行的评分项（不计入总分）", "Items not run (left out of the total)"),
    "scaled": ("总分按已运行的评分项折算为百分制", "the total is scaled to 100 over the items that ran"),
    "all_passed": ("所有已运行的评分项都通过了", "every item that ran passed"),
    "submission": ("提交", "Submission"),
    "config": ("评分配置", "Grading configuration"),
    "device": ("设备", "Device"),
    "seconds": ("用时", "Time"),
    "truncated": ("（已截断）", "(truncated)"),
    "more": ("还有 {n} 项未列出", "{n} more not listed"),
}

SUMMARY_LIMIT = 900_000  # stay under GitHub's 1 MiB step-summary cap with room for other steps


def say(key: str, lang: str, **fmt: object) -> str:
    if key in WORDS:
        zh, en = WORDS[key]
        text = zh if lang == "zh" else en
    else:
        text = word(key, lang)
    return text.format(**fmt) if fmt else text


def clip(text: str, limit: int, lang: str) -> str:
    return text if len(text) <= limit else text[:limit] + "\n… " + say("truncated", lang)


_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~:@])")


def inline(text: str) -> str:
    """Untrusted text as one Markdown line: HTML entities for <>&, backslashes for Markdown."""
    text = " ".join(text.split())
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_SPECIAL.sub(r"\\\1", text)


def code_span(text: str) -> str:
    text = " ".join(text.split())
    if not text:
        return ""
    ticks = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    return f"{ticks} {text} {ticks}"


def fence(text: str, lang_tag: str = "") -> str:
    ticks = "`" * max(3, max((len(run) for run in re.findall(r"`{3,}", text)), default=0) + 1)
    return f"{ticks}{lang_tag}\n{text.rstrip()}\n{ticks}"


def bar(got: float, possible: float, width: int = 10) -> str:
    filled = round(width * got / possible) if possible else 0
    return "█" * filled + "░" * (width - filled)


def details(summary: str, body: str) -> str:
    # <details> is the one piece of HTML used; the summary is our own (escaped) text.
    return f"<details><summary>{summary}</summary>\n\n{body}\n\n</details>"


def _failure_body(failure: Failure, lang: str) -> list[str]:
    out = [inline(failure.message.get(lang))]
    if failure.expected or failure.actual:
        out += ["", f"- {say('expected', lang)}{colon(lang)}{code_span(failure.expected_for(lang))}", f"- {say('actual', lang)}{colon(lang)}{code_span(failure.actual_for(lang))}"]
    repro = failure.repro_for(lang)
    if repro:
        out += ["", f"{say('repro', lang)}{colon(lang).rstrip()}", "", fence(repro, "python")]
    if failure.traceback:
        out += ["", details(say("traceback", lang), fence(failure.traceback))]
    out.append("")
    return out


def _failure_block(item: ItemResult, lang: str) -> list[str]:
    note = blocked(item.blocked_by, lang)
    note = (" " if note.startswith(" ") else "") + inline(note.strip()) if note else ""
    head = f"#### ✗ {code_span(item.id)} ({item.score:g}/{item.weight:g}){note}: {inline(item.title.get(lang))}"
    if item.failure is None:
        return [head, ""]
    return [head, "", *_failure_body(item.failure, lang)]


def _errors_first(result: GradeResult, lang: str) -> list[str]:
    broken = cells.raised(result)
    if not broken:
        return []
    lines = [f"### ⚠ {say('fix_first', lang)}", ""]
    for cell in broken:
        lines.append(f"- **{inline(cells.where(cell, lang))}**{colon(lang)}{code_span(cell.error_type or cell.status)} {inline(cell.message)}")
        if cell.traceback:
            lines += ["", "  " + details(say("traceback", lang), fence(cell.traceback)).replace("\n", "\n  "), ""]
    return lines + [""]


def render(result: GradeResult, lang: str) -> str:
    """The scorecard as Markdown, under SUMMARY_LIMIT bytes whatever the submission did."""
    return fit(lambda clean: _render(clean, lang), utf8_size, result, SUMMARY_LIMIT)


def _render(result: GradeResult, lang: str) -> str:
    name = result.shown_name
    lines = [f"## {say('scorecard', lang)}{colon(lang)}{inline(name)}", ""]
    if result.error is not None:  # no total: nothing was graded
        lines += [f"**{say('unreadable', lang)}**{colon(lang)}{inline(result.error.message.get(lang))}", ""]
        return _finish(lines, result, lang)
    lines.append(f"**{say('total', lang)}{colon(lang)}{result.score:g} / {result.max_score:g}**")
    not_run = [item for item in result.items if item.status == NOT_RUN]
    if not_run:
        lines[-1] += f" ({say('scaled', lang)})"
    lines.append("")
    lines += _errors_first(result, lang)
    for flag in result.flags:
        lines.append(f"> ⚠️ **{say('flags', lang)}**{colon(lang)}{inline(flag.get(lang))}")
    for record in result.tampering:
        lines.append(f"> ⚠️ **{say('tampering', lang)}**{colon(lang)}{inline(record.message.get(lang))}")
    for note in result.notes:
        lines.append(f"> {inline(note.get(lang))}")
    if result.flags or result.notes or result.tampering:
        lines.append("")
    skipped = cells.skipped_lines(result, lang)
    if skipped:
        lines += [f"**{say('skipped', lang)}**", ""]
        lines += [f"- {inline(where)}{colon(lang)}{code_span(text)}{paren(inline(why), lang)}" for where, text, why in skipped]
        lines.append("")
    lines += [f"| {say('todo', lang)} | {say('points', lang)} | |", "|---|---:|---|"]
    for todo, (got, possible) in result.todo_scores().items():
        lines.append(f"| {inline(todo_name(todo, lang))} | {got:g} / {possible:g} | `{bar(got, possible)}` |")
    lines.append("")
    failed = [item for item in result.items if item.status == FAILED]
    if failed:
        lines += [f"### {failed_heading(len(failed), lang)}", ""]
        for item in failed:
            lines += _failure_block(item, lang)
    else:
        lines += [f"✓ {say('all_passed', lang)}", ""]
    if result.given_code:
        lines += [f"### {say('given', lang)}", ""]
        for finding in result.given_code:
            lines += _failure_body(finding, lang)
    if not_run:
        lines += [f"### {say('not_run_items', lang)}", ""]
        for item in not_run:
            reason = item.failure.message.get(lang) if item.failure else status_word(NOT_RUN, lang)
            lines.append(f"- {code_span(item.id)}{colon(lang)}{inline(item.title.get(lang))} — {inline(reason)}")
        lines.append("")
    if result.output_excerpt:
        lines += [details(say("output", lang), fence(result.output_excerpt)), ""]
    return _finish(lines, result, lang)


def _finish(lines: list[str], result: GradeResult, lang: str) -> str:
    footer = [f"{say('config', lang)} {inline(result.config_digest)}", f"{say('device', lang)} {inline(result.device)}"]
    footer.append(f"{say('seconds', lang)} {seconds(result.seconds, lang)}")
    if result.sha256:
        footer.append(f"sha256 {inline(result.sha256[:12])}")
    summary = (result.isolation or {}).get("summary")
    if isinstance(summary, dict) and summary.get(lang):
        footer.append(f"{say('isolation', lang)}{colon(lang)}{inline(str(summary[lang]))}")
    if result.random_cases.get(lang):
        footer.append(f"{say('random_cases', lang)}{colon(lang)}{inline(result.random_cases[lang])}")
    lines.append("<sub>" + " · ".join(footer) + "</sub>")
    return "\n".join(lines) + "\n"
