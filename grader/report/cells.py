"""Errors first: the cells that raised, where (cell and line), and what they cost.

A cell that raised usually explains every failure below it ("paged_attention not defined"
because its cell had a SyntaxError), so reports show these cells at the top. With the
submission's sources at hand (`annotate`), tracebacks get the student's own lines and a
missing definition names the cell that should have made it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from grader.report.labels import skip_reason
from grader.results import CellReport, GradeResult, Text

if TYPE_CHECKING:
    from grader.submission import Cell

FRAME = re.compile(r'File "<cell (\d+)>", line (\d+)')
SYNTAX_AT = re.compile(r"\(<cell (\d+)>, line (\d+)\)")
CONTRACT = ("estimate_kv_cache_bytes", "Request", "KVCacheManager", "paged_attention")
BROKEN = ("error", "timeout", "crashed")


def raised(result: GradeResult) -> list[CellReport]:
    return [cell for cell in result.cells if cell.status in BROKEN]


def cell_line(cell: CellReport) -> int | None:
    """The line of the cell that was running when it raised (a SyntaxError names its line)."""
    match = SYNTAX_AT.search(cell.message)
    if match and int(match.group(1)) == cell.index:
        return int(match.group(2))
    for match in FRAME.finditer(cell.traceback):
        if int(match.group(1)) == cell.index:
            return int(match.group(2))  # the first frame in the cell is its top-level statement
    return None


def cell_name(index: int, lang: str, numbering: str = "order") -> str:
    """"cell 4" counts code cells from the top (a file); "cell [4]" is Jupyter's In [4]."""
    if numbering == "run":
        return f"代码单元 [{index}]" if lang == "zh" else f"cell [{index}]"
    return f"第 {index} 个代码单元" if lang == "zh" else f"cell {index}"


def where(cell: CellReport, lang: str, numbering: str = "order") -> str:
    line = cell_line(cell)
    name = cell_name(cell.index, lang, numbering)
    if line is None:
        return name
    return f"{name}第 {line} 行" if lang == "zh" else f"{name}, line {line}"


def what(cell: CellReport, lang: str) -> str:
    if cell.status == "timeout":
        return "运行超时" if lang == "zh" else "ran past the time limit"
    if cell.status == "crashed":
        return "进程崩溃" if lang == "zh" else "crashed the process"
    return f"{cell.error_type}: {cell.message}" if cell.message else cell.error_type or cell.status


def skipped_lines(result: GradeResult, lang: str, numbering: str = "order") -> list[tuple[str, str, str]]:
    """(where, the line as typed, why) for every line that did not run while grading."""
    out = []
    for skipped in result.skipped:
        name = cell_name(skipped.cell, lang, numbering)
        if skipped.line is not None:
            name = f"{name}第 {skipped.line} 行" if lang == "zh" else f"{name}, line {skipped.line}"
        out.append((name, skipped.text, skip_reason(skipped.reason, lang)))
    return out


# --- with the sources -----------------------------------------------------------------------

def _with_source(traceback: str, sources: dict[int, list[str]]) -> str:
    """Python's own traceback shows each frame's line; the worker could not (no files)."""
    out = []
    for line in traceback.splitlines():
        out.append(line)
        match = FRAME.search(line)
        if match:
            rows = sources.get(int(match.group(1)), [])
            number = int(match.group(2))
            if 0 < number <= len(rows) and rows[number - 1].strip():
                out.append("    " + rows[number - 1].strip())
    return "\n".join(out)


def _definers(name: str, cells: Sequence[Cell]) -> list[tuple[int, int]]:
    pattern = re.compile(rf"^[ \t]*(?:(?:async[ \t]+)?def|class)[ \t]+{name}\b|^{name}[ \t]*=", re.M)
    out = []
    for cell in cells:
        match = pattern.search(cell.source)
        if match:
            out.append((cell.index, cell.source.count("\n", 0, match.start()) + 1))
    return out


def annotate(result: GradeResult, cells: Sequence[Cell], numbering: str = "order") -> GradeResult:
    """Add what only the sources can tell: source lines in tracebacks, and for an item whose
    definition is missing, the cell that defines it (and raised) or that no cell defines it.
    Call sanitize_result afterwards: the lines added are the student's text."""
    sources = {cell.index: cell.source.splitlines() for cell in cells}
    broken = {cell.index: cell for cell in raised(result)}
    for cell in result.cells:
        if cell.traceback:
            cell.traceback = _with_source(cell.traceback, sources)
    pointers: dict[str, Text] = {}
    for item in result.items:
        failure = item.failure
        if failure is None:
            continue
        if failure.traceback:
            failure.traceback = _with_source(failure.traceback, sources)
        if failure.kind != "missing":
            continue
        key = failure.message.en
        if key not in pointers:
            pointers[key] = _pointer([n for n in CONTRACT if re.search(rf"\b{n}\b", key)], cells, broken, numbering)
        extra = pointers[key]
        if extra.en and extra.en not in failure.message.en:
            failure.message = Text(f"{failure.message.zh}。{extra.zh}", f"{failure.message.en}. {extra.en}")
    return result


def _pointer(names: list[str], cells: Sequence[Cell], broken: dict[int, CellReport], numbering: str) -> Text:
    zh: list[str] = []
    en: list[str] = []
    for name in names:
        found = _definers(name, cells)
        failed = [(index, line) for index, line in found if index in broken]
        if failed:
            index, line = failed[-1]
            cell = broken[index]
            zh.append(f"{name} 定义在{cell_name(index, 'zh', numbering)}第 {line} 行，但该单元运行出错（{cell.error_type or cell.status}，见最上方），请先修好它")
            en.append(f"{name} is defined in {cell_name(index, 'en', numbering)} (line {line}), which raised {cell.error_type or cell.status} (shown at the top): fix that cell first")
        elif not found and numbering == "run":  # grader.check(): the kernel's history so far
            zh.append(f"目前运行过的代码单元都没有定义 {name}：请先运行定义它的单元")
            en.append(f"none of the cells run so far defines {name}: run the cell that defines it first")
        elif not found:
            zh.append(f"没有任何代码单元定义 {name}：是否改了名字或删掉了它所在的单元？")
            en.append(f"no cell defines {name}: was it renamed, or its cell deleted?")
    return Text("；".join(zh), "; ".join(en))
