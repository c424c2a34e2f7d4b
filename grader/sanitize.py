"""Make every string a submission controls safe, once, before any report sees it.

A submission controls far more than its code: exception messages, printed output, the values
quoted as "expected"/"actual", the file name, and, for imported results, every field. Each of
those may carry ANSI escapes (a fake "Score: 100 / 100" drawn over the terminal), lone
surrogates (which crash any UTF-8 writer), newlines (a second, forged score block) or megabytes.

`sanitize_result(result)` is the one pass over a GradeResult that fixes all of that in place:

* control characters (C0, C1, DEL, bidirectional overrides) are shown escaped (``\\x1b``);
* lone surrogates become U+FFFD;
* newlines are folded (`` ⏎ ``) wherever one line is expected;
* every value is clipped (about 2 KiB; tracebacks and output to 40 lines, reproductions to 160), with
  a count of what was cut;
* lists are capped: the first cells that raised, then "and K more" (a note), and so on;
* numbers and statuses that are not what the records promise (imported results) are replaced.

It is idempotent: sanitising a sanitised result changes nothing, so every boundary (grading,
the `grade` command, `grader.check()`, importing results) may call it without care.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any

from grader.report.pictures import normalise_picture
from grader.results import (
    FAILED,
    NOT_RUN,
    PASSED,
    CellReport,
    Failure,
    GradeResult,
    ItemResult,
    SkippedLine,
    Tampering,
    Text,
)

FOLD = " ⏎ "  # where a newline was, in text that must stay on one line
CELL_STATUSES = ("ok", "error", "timeout", "crashed", "not_run")
SKIP_REASONS = ("shell", "install", "debugger", "network", "program")


@dataclass(frozen=True)
class FieldLimits:
    """How much of each kind of value survives. `scaled` shrinks them to fit a size budget."""

    value: int = 2048  # characters of one value (a message, expected, a traceback, ...)
    code: int = 8192  # characters of a reproduction (cut, it would not run; the record of 17 items stays under 1 MiB)
    short: int = 200  # ids, exception type names, statuses, digests
    lines: int = 40  # lines of a traceback, the printed output
    repro_lines: int = 160  # lines of a reproduction: the longest a check writes (max_repro_lines)
    cells: int = 20  # cells that raised, listed one by one
    flags: int = 20  # integrity flags, notes, findings about the given code
    items: int = 64  # rubric items (the rubric has 17; an imported result may claim thousands)
    pictures: int = 8  # failures that keep their picture (each is up to ~150 KB of SVG)

    def scaled(self, factor: float) -> FieldLimits:
        def shrink(value: int, floor: int) -> int:
            return max(floor, int(value * factor))

        return FieldLimits(
            value=shrink(self.value, 120),
            code=shrink(self.code, 480),
            short=shrink(self.short, 60),
            lines=shrink(self.lines, 6),
            repro_lines=shrink(self.repro_lines, 6),
            cells=shrink(self.cells, 3),
            flags=shrink(self.flags, 3),
            items=self.items,
            pictures=shrink(self.pictures, 1),
        )


DEFAULT_LIMITS = FieldLimits()

# Characters that move the cursor, recolour, or reorder what is shown. Tabs and newlines are
# handled on their own; everything here is written as a visible escape.
_BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f" + _BIDI + "]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_NEWLINES = re.compile(r"[ \t]*(?:\r\n|\r|\n|\u2028|\u2029)\s*")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _text(value: object, one_line: bool) -> str:
    """Any value as text without lone surrogates or raw control characters. A block keeps its
    newlines (a lone carriage return, which redraws a terminal line, is escaped); a line folds them."""
    if not isinstance(value, str):
        value = "" if value is None else str(value)
    value = _SURROGATE.sub("\ufffd", value)
    if one_line:
        value = _NEWLINES.sub(FOLD, value.strip()).replace("\t", " ")
    else:
        value = value.replace("\r\n", "\n").replace("\u2028", "\n").replace("\u2029", "\n")
        value = value.replace("\r", "\\r").replace("\t", "    ")
    return _CONTROL.sub(_escape, value)


_ANY_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f" + _BIDI + "\ud800-\udfff]")


def visible(value: object) -> str:
    """A name (a student id, a path) for a terminal, a CSV cell or a page, on one line: every
    control character, line break, tab, bidirectional override and lone surrogate shown as its
    escape (``\\x1b``, ``\\x0d``, ``\\udcff``), so nothing in it moves the cursor, starts a record
    or an escape sequence, or reorders what is shown.  Nothing else changes; different names
    stay different unless one spells out the other's escapes."""
    text = value if isinstance(value, str) else "" if value is None else str(value)
    return _ANY_CONTROL.sub(_escape, text)


def _cut_note(count: int, unit: str) -> str:
    # Bilingual: this pass runs once for both languages.
    zh = "个字符" if unit == "chars" else "行"
    return f"[… 截去 {count} {zh} / {count} {unit} cut]"


def _head(value: object, limit: int, tail: bool = False, count_lines: bool = False) -> tuple[str, int, int]:
    """The part of a value worth cleaning (its start, or with tail=True its end), and the size
    and line count of the rest, which is only counted: a 100 MB message costs little more than
    a 10 KB one."""
    text = value if isinstance(value, str) else "" if value is None else str(value)
    room = 8 * limit + 64
    if len(text) <= room:
        return text, 0, 0
    if not count_lines:
        return (text[-room:] if tail else text[:room]), len(text) - room, 0
    lines = text.count("\n") + (not text.endswith("\n"))  # of the whole value: what a cut is counted against
    return (text[-room:] if tail else text[:room]), len(text) - room, lines


def safe_line(value: object, limit: int = DEFAULT_LIMITS.value) -> str:
    """One line of text: newlines folded, at most `limit` characters (the cut is counted)."""
    head, rest, _ = _head(value, limit)
    text = _text(head, one_line=True)
    if len(text) <= limit and not rest:
        return text
    # The note is counted inside the limit, so a second pass finds nothing to cut.
    total = len(text) + rest
    note = _cut_note(total, "chars")
    if limit < 2 * len(note):  # a short field (a dtype, an id): an ellipsis is all that fits
        return text[: max(0, limit - 1)] + "…"
    keep = limit - len(note) - 1
    return text[:keep] + " " + _cut_note(total - keep, "chars")


def safe_block(value: object, limit: int = DEFAULT_LIMITS.value, lines: int = DEFAULT_LIMITS.lines, keep: str = "head") -> str:
    """Text of several lines: at most `lines` lines and `limit` characters, cut at line boundaries
    and ended (or, keep="tail", begun) by a comment saying what was cut. "head" keeps the start
    (code, output: a reproduction stays pasteable), "tail" the end (the last frames of a traceback)."""
    head, rest, all_rows = _head(value, limit, tail=keep == "tail", count_lines=True)
    text = _text(head, one_line=False).rstrip("\n")
    rows = text.split("\n")
    if len(rows) <= lines and len(text) <= limit and not rest:
        return text
    if keep == "tail":
        rows.reverse()
    budget = limit - len(_cut_note(len(text), "chars")) - 3
    kept: list[str] = []
    size = 0
    for row in rows[: max(1, lines - 1)]:
        if size + len(row) + 1 > budget:
            break
        kept.append(row)
        size += len(row) + 1
    if kept:
        note = "# " + _cut_note((all_rows if rest else len(rows)) - len(kept), "lines")
    else:  # one huge first line: keep its beginning
        kept = [rows[0][: max(0, budget)]]
        note = "# " + _cut_note(len(text) + rest - len(kept[0]), "chars")
    if keep == "tail":
        return "\n".join([note, *reversed(kept)])
    return "\n".join([*kept, note])


def _number(value: object, default: float = 0.0) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return default
    return number if math.isfinite(number) else default


def _int(value: object) -> int:
    number = _number(value)
    return int(max(-(2**53), min(2**53, number)))


def safe_text(text: object, limit: int) -> Text:
    zh = getattr(text, "zh", "")
    en = getattr(text, "en", "")
    return Text(safe_line(zh, limit), safe_line(en, limit))


def _failure(failure: Failure | None, limits: FieldLimits) -> Failure | None:
    if failure is None:
        return None
    if not isinstance(failure, Failure):
        return Failure("error", Text("结果记录损坏", "malformed result record"))
    return replace(
        failure,
        kind=safe_line(failure.kind, limits.short),
        message=safe_text(failure.message, limits.value),
        repro=safe_block(failure.repro, limits.code, limits.repro_lines),
        repro_zh=safe_block(failure.repro_zh, limits.code, limits.repro_lines),
        expected=safe_line(failure.expected, limits.value),
        actual=safe_line(failure.actual, limits.value),
        expected_zh=safe_line(failure.expected_zh, limits.value),
        actual_zh=safe_line(failure.actual_zh, limits.value),
        traceback=safe_block(failure.traceback, limits.value, limits.lines, keep="tail"),
        picture=normalise_picture(failure.picture, safe_line),  # the renderers' own schema check
    )


def _item(item: ItemResult, limits: FieldLimits) -> ItemResult:
    status = item.status if item.status in (PASSED, FAILED, NOT_RUN) else FAILED
    return replace(
        item,
        id=safe_line(item.id, limits.short),
        todo=safe_line(item.todo, limits.short),
        title=safe_text(item.title, limits.value),
        weight=max(0.0, _number(item.weight)),
        status=status,
        failure=_failure(item.failure, limits),
        examples=max(0, _int(item.examples)),
        seconds=max(0.0, _number(item.seconds)),
        exercised=max(0, _int(item.exercised)),
        blocked_by=safe_line(item.blocked_by, limits.short) if isinstance(item.blocked_by, str) else "",
    )


def _cell(cell: CellReport, limits: FieldLimits) -> CellReport:
    return CellReport(
        index=_int(cell.index),
        status=cell.status if cell.status in CELL_STATUSES else "error",
        error_type=safe_line(cell.error_type, limits.short),
        message=safe_line(cell.message, limits.value),
        traceback=safe_block(cell.traceback, limits.value, limits.lines, keep="tail"),
    )


OK_CELLS_KEPT = 500  # cells that ran fine say nothing once there are thousands of them


def _cells(cells: list[CellReport], limits: FieldLimits) -> tuple[list[CellReport], int]:
    """The cells that raised, up to the cap and in order, and the cells that ran fine while
    few. Returns the kept reports and how many cells that raised were left out."""
    keep_ok = len(cells) <= OK_CELLS_KEPT
    kept: list[CellReport] = []
    raised = 0
    for cell in cells:
        if not isinstance(cell, CellReport):
            continue
        if cell.status in ("ok", "not_run"):
            if keep_ok:
                kept.append(_cell(cell, limits))
            continue
        raised += 1
        if raised <= limits.cells:
            kept.append(_cell(cell, limits))
    return kept, max(0, raised - limits.cells)


def _skipped(lines: list[Any], limits: FieldLimits) -> tuple[list[SkippedLine], int]:
    """The lines not run while grading, up to the cap, with a known reason each; and how many more."""
    valid = [s for s in lines or [] if isinstance(s, SkippedLine) and s.reason in SKIP_REASONS]
    kept = [
        SkippedLine(
            cell=_int(s.cell),
            line=None if s.line is None or _int(s.line) <= 0 else _int(s.line),
            text=safe_line(s.text, limits.value // 8),
            reason=s.reason,
        )
        for s in valid[: limits.flags]
    ]
    return kept, len(valid) - len(kept)


def _data(value: Any, limits: FieldLimits, depth: int = 0) -> Any:
    """Plain JSON data (the isolation record) with safe strings and bounded size."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, int):
        return _int(value)
    if depth >= 4:
        return safe_line(value, limits.short)
    if isinstance(value, dict):
        return {safe_line(k, limits.short): _data(v, limits, depth + 1) for k, v in list(value.items())[:32]}
    if isinstance(value, (list, tuple)):
        return [_data(v, limits, depth + 1) for v in list(value)[:32]]
    return safe_line(value, limits.value // 4)


def more_note(count: int, what_zh: str, what_en: str) -> Text:
    return Text(f"……还有 {count} 个{what_zh}未列出", f"… and {count} more {what_en} not listed")


def _texts(values: list[Any], room: int, limits: FieldLimits, zh: str, en: str) -> list[Text]:
    """At most `room` Texts: the first ones, then one saying how many more there were."""
    values = [v for v in values or [] if v is not None]
    if len(values) <= room:
        return [safe_text(v, limits.value) for v in values]
    shown = max(0, room - 1)
    return [safe_text(v, limits.value) for v in values[:shown]] + [more_note(len(values) - shown, zh, en)]


def sanitized_copy(result: GradeResult, limits: FieldLimits = DEFAULT_LIMITS) -> GradeResult:
    """A safe copy; `result` is left as it was. (Every nested record is rebuilt, never edited,
    so a shallow copy is enough.)"""
    return sanitize_result(replace(result), limits)


TAMPER_KINDS = ("gc", "frames", "frame", "code", "trace", "audit", "memory", "forged", "broken", "grown", "kernel")


def _tampering(records: list[Any], limits: FieldLimits) -> list[Tampering]:
    """Records of what the submission did to the grader's machinery (its file names and paths are its own text)."""
    out = []
    for record in records[: limits.flags]:
        if not isinstance(record, Tampering) or record.kind not in TAMPER_KINDS:
            continue
        out.append(Tampering(
            kind=record.kind,
            detail=safe_line(record.detail, limits.short),
            where=safe_line(record.where, limits.short),
            scopes=[safe_line(c, limits.short) for c in list(record.scopes or [])[: limits.items] if isinstance(c, str)],
            denied=record.denied is True,
            message=safe_text(record.message, limits.value),
            cost=[safe_line(c, limits.short) for c in list(record.cost or [])[: limits.items] if isinstance(c, str)],
        ))
    return out


def sanitize_result(result: GradeResult, limits: FieldLimits = DEFAULT_LIMITS) -> GradeResult:
    """Make `result` safe to render, in place, and return it. Idempotent.

    Call it wherever results enter: after grading (the `grade` command, `grader.check()`) and
    after reading results back (`GradeResult.from_dict` of an imported results.json)."""
    result.submission = safe_line(result.submission, limits.value // 4)
    result.submission_name = safe_line(result.submission_name, limits.value // 4)
    result.sha256 = safe_line(result.sha256, limits.short)
    result.config_digest = safe_line(result.config_digest, limits.short)
    result.device = safe_line(result.device, limits.short)
    result.seconds = max(0.0, _number(result.seconds))
    result.output_bytes = max(0, _int(result.output_bytes))
    result.output_excerpt = safe_block(result.output_excerpt, limits.value, limits.lines)
    items = [item for item in result.items or [] if isinstance(item, ItemResult)]
    result.items = [_item(item, limits) for item in items[: limits.items]]
    result.error = _failure(result.error, limits)
    result.cells, cells_cut = _cells(list(result.cells or []), limits)
    given = [g for g in result.given_code or [] if isinstance(g, Failure)]
    result.given_code = [f for f in (_failure(g, limits) for g in given[: limits.flags]) if f is not None]
    result.flags = _texts(result.flags, limits.flags, limits, "诚信提示", "integrity flags")
    result.skipped, skipped_cut = _skipped(list(result.skipped or []), limits)
    result.tampering = _tampering(list(result.tampering or []), limits)
    extra = [
        more_note(count, zh, en)
        for count, zh, en in (
            (cells_cut, "出错的代码单元", "cells that raised"),
            (len(given) - len(result.given_code), "关于给定代码的发现", "findings about the given code"),
            (len(items) - len(result.items), "评分项", "rubric items"),
            (skipped_cut, "评分时未运行的行", "lines not run while grading"),
        )
        if count > 0
    ]
    result.notes = _texts(result.notes, limits.flags - len(extra), limits, "说明", "notes") + extra
    result.isolation = _data(result.isolation, limits) if isinstance(result.isolation, dict) else {}
    drawn = 0
    for failure in [i.failure for i in result.items] + list(result.given_code):
        if failure is not None and failure.picture is not None:
            drawn += 1
            if drawn > limits.pictures:
                failure.picture = None
    return result
