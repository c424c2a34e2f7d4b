"""What the scorecards tell a student: errors first, reproductions in the terminal, one line per
item with --quiet, Chinese throughout in Chinese, plurals in English, missing definitions
pointed at, and reports of bounded size whatever the submission did."""

from __future__ import annotations

import json
import re
from html import unescape as html_unescape

import pytest

from grader.checks.pool_diff import differing, misplaced, places, unchanged
from grader.checks.pool_state import State
from grader.report import cells, gradescope, html, markdown, text
from grader.report.budget import MAX_REPORT_BYTES
from grader.report.labels import plural
from grader.results import FAILED, CellReport, Failure, Text
from grader.submission import Cell
from tests.handmade import DECODE_REPRO, hostile_huge_result, picture_result
from tests.test_reports import assert_inert, parse

ENGLISH_LABELS = re.compile(
    r"\b(passed|failed|not run|Score|Total|expected|actual|[Rr]eproduction|[Cc]ells?|line|blocks?|before|after|free|"
    r"tolerance|sequence|head|Items?|Time|Device|Fix|first|raised|more|wrong|lost)\b"
)


def _without_code(report: str) -> str:
    """A text report minus what is code or an identifier (reproductions, item ids)."""
    kept = [line for line in report.splitlines() if not line.startswith(" " * 8)]
    # Python's own exception messages stay as Python wrote them.
    return re.sub(r"todo\d\.\w+|invalid syntax \(<cell \d+>, line \d+\)", "", "\n".join(kept))


def test_errors_come_first_with_cell_and_line() -> None:
    report = text.render(picture_result(), "en")
    lines = report.splitlines()
    first_todo = next(i for i, line in enumerate(lines) if line.startswith("TODO 1"))
    raised = next(i for i, line in enumerate(lines) if "cell 2, line 7: SyntaxError" in line)
    assert lines[raised - 1].startswith("⚠ Fix these first") and raised < first_todo
    assert "第 2 个代码单元第 7 行：SyntaxError" in text.render(picture_result(), "zh")
    page = html.render(picture_result(), "en")
    assert page.index('id="errors-first"') < page.index('id="todos"') and "cell 2, line 7" in page
    md = markdown.render(picture_result(), "en")
    assert md.index("Fix these first") < md.index("| TODO |") and "cell 2, line 7" in md


def test_cell_line_comes_from_the_syntax_error_or_the_cells_own_frame() -> None:
    assert cells.cell_line(CellReport(4, "error", "SyntaxError", "invalid syntax (<cell 4>, line 9)")) == 9
    frames = '  File "<cell 2>", line 5, in helper\n  File "<cell 4>", line 3, in <module>\n  File "<cell 2>", line 8, in f\n'
    assert cells.cell_line(CellReport(4, "error", "NameError", "name 'x' is not defined", frames)) == 3
    assert cells.cell_line(CellReport(4, "timeout")) is None


def test_terminal_shows_the_first_reproduction_in_full_and_shortens_the_others() -> None:
    report = text.render(picture_result(), "en")
    for line in DECODE_REPRO.splitlines():  # the first failure with a reproduction: every line
        assert "        " + line in report.splitlines()
    oom = report[report.index("todo3.oom_rollback") :]
    assert "Reproduction (first 6 of 13 lines):" in oom
    assert "step_5 = 5" in oom and "step_6 = 6" not in oom and "… 7 more lines" in oom
    assert "expected: r0.block_table == [0, 2]" in report and "actual: r0.block_table == [0, 1]" in report
    # The pool, also as text: block 1 held twice after the call, and outlined.
    assert re.search(r"after: +A +\[!\] +\? +· ", report), report


def test_reproductions_speak_the_students_language() -> None:
    zh, en = text.render(picture_result(), "zh"), text.render(picture_result(), "en")
    assert "# 块 1 属于 r1" in zh and "# block 1 belongs to r1" not in zh
    assert "# block 1 belongs to r1" in en and "块 1 属于" not in en
    assert "# 块 1 属于 r1" in html.render(picture_result(), "zh") and "# 块 1 属于 r1" in markdown.render(picture_result(), "zh")
    results = gradescope.to_results_json(picture_result(), "zh")
    decode = next(t for t in results["tests"] if t["name"].startswith("todo3.growth"))
    assert "# 块 1 属于 r1" in decode["counterexample"] and "# 块 1 属于 r1" in decode["output"]


def test_quiet_gives_one_line_per_item() -> None:
    result = picture_result()
    lines = text.render(result, "en", quiet=True).splitlines()
    assert lines[0].startswith("Score: ") and lines[1].startswith("✗ cell 2, line 7: SyntaxError")
    assert len(lines) == 2 + len(result.items)
    for line, item in zip(lines[2:], result.items, strict=True):
        assert line.split()[1] == item.id
        if item.status == FAILED:
            assert item.failure is not None and item.failure.message.en[:40] in line
        else:
            assert ": " not in line


@pytest.mark.parametrize("render", [text.render, markdown.render, html.render], ids=["text", "markdown", "html"])
def test_chinese_output_has_no_english_labels(render) -> None:  # type: ignore[no-untyped-def]
    report = render(picture_result(), "zh")
    if render is html.render:
        tags = parse(report)
        assert "text" in {tag for tag, _ in tags.tags}  # the pictures' labels are in it
        report = re.sub(r"<(pre|code|title|style)\b.*?</\1>|<text[^>]*class=\"pa-step\".*?</text>", "", report, flags=re.S)
        report = "".join(parse(report).text)
    elif render is markdown.render:
        report = html_unescape(re.sub(r"\\(.)", r"\1", re.sub(r"```.*?```|`[^`]*`", "", report, flags=re.S)))
    found = ENGLISH_LABELS.findall(_without_code(report))
    assert found == [], found
    english = render(picture_result(), "en")
    assert ENGLISH_LABELS.search(english)  # the same check finds them in English


def test_plurals() -> None:
    assert (plural(1, "block", "en"), plural(2, "block", "en"), plural(0, "block", "en")) == ("1 block", "2 blocks", "0 blocks")
    assert plural(1, "block", "zh") == "1 个块" and plural(2, "block", "zh") == "2 个块"
    one = picture_result()
    one.items = [i for i in one.items if i.status != FAILED or i.id == "todo3.growth"]
    page = html.render(one, "en")
    assert "1 failed item<" in page and "3 free blocks" in page and "4 free blocks" in page
    failed = sum(i.status == FAILED for i in picture_result().items)
    assert failed > 1
    assert f"{failed} failed items" in html.render(picture_result(), "en") and f"未通过的评分项（{failed} 项）" in html.render(picture_result(), "zh")
    assert "3.2 秒" in html.render(picture_result(), "zh") and "3.2 s" in html.render(picture_result(), "en")


def test_missing_definition_points_at_the_cell_that_should_make_it() -> None:
    result = picture_result()
    source = "import torch\n\ndef estimate_kv_cache_bytes(num_blocks,\n    return 1\n"
    cells.annotate(result, [Cell(1, "x = 1"), Cell(2, source), Cell(3, "y = 2")])
    first = result.items[0].failure
    assert first is not None
    assert "estimate_kv_cache_bytes is defined in cell 2 (line 3), which raised SyntaxError" in first.message.en
    assert "定义在第 2 个代码单元第 3 行" in first.message.zh
    assert "which raised SyntaxError" in text.render(result, "en")
    gone = picture_result()
    cells.annotate(gone, [Cell(1, "x = 1"), Cell(2, "def something_else(:"), Cell(3, "y = 2")])
    assert "no cell defines estimate_kv_cache_bytes" in gone.items[0].failure.message.en  # type: ignore[union-attr]
    ran = picture_result()
    cells.annotate(ran, [Cell(5, "x = 1")], numbering="run")
    assert "none of the cells run so far defines estimate_kv_cache_bytes" in ran.items[0].failure.message.en  # type: ignore[union-attr]
    assert "cell [2], line 7" in text.render(ran, "en", numbering="run")


def test_tracebacks_show_the_students_lines() -> None:
    result = picture_result()
    result.cells[1] = CellReport(2, "error", "ZeroDivisionError", "division by zero", '  File "<cell 2>", line 2, in <module>\n')
    cells.annotate(result, [Cell(2, "a = 1\nb = a / 0\n")])
    assert result.cells[1].traceback.splitlines() == ['  File "<cell 2>", line 2, in <module>', "    b = a / 0"]
    assert "cell 2, line 2: ZeroDivisionError: division by zero" in text.render(result, "en")


def test_hostile_results_give_bounded_safe_reports() -> None:
    result = hostile_huge_result(cells=40_000)
    for lang in ("zh", "en"):
        terminal = text.render(result, lang)
        outputs = {
            "text": terminal,
            "markdown": markdown.render(result, lang),
            "html": html.render(result, lang),
            "json": gradescope.to_json(gradescope.to_results_json(result, lang)),
        }
        for name, output in outputs.items():
            size = len(output.encode("utf-8"))
            assert size < MAX_REPORT_BYTES, (name, size)
            assert "\x1b" not in output and "\x9b" not in output and "\u202e" not in output, name
        label = "得分：" if lang == "zh" else "Score:"
        assert sum(1 for line in terminal.splitlines() if line.startswith(label)) == 1  # no forged score line
        assert not any(line.startswith("Score: 100") for line in terminal.splitlines())
        payload = json.loads(outputs["json"])
        assert sum(1 for line in payload["output"].splitlines() if line.startswith(label)) == 1
        assert payload["extra_data"]["grade_result"]["score"] == 0
        assert_inert(outputs["html"])
    assert "and 39980 more cells that raised not listed" in text.render(result, "en")


def test_every_renderer_is_safe_even_on_an_unsanitised_result() -> None:
    result = picture_result()
    result.cells.append(CellReport(9, "error", "ValueError", "bad\ud800\x1b[2J\nScore: 100 / 100", ""))
    for render in (text.render, markdown.render, html.render):
        out = render(result, "en")
        out.encode("utf-8")
        assert "\x1b" not in out and "\nScore: 100" not in out


def test_a_todo_not_written_says_it_once_in_the_terminal() -> None:
    result = picture_result()
    same = Failure("not_implemented", Text("TODO 4 还没有实现", "TODO 4 is not implemented yet"), repro="r = Request(request_id=0, prompt_len=1)\nm.get_physical_cache(r)")
    for item in result.items:
        if item.todo == "todo4":
            item.status, item.failure = FAILED, same
    report = text.render(result, "en")
    assert report.count("m.get_physical_cache(r)") == 1 and report.count("TODO 4 is not implemented yet") == 1
    assert report.split("todo4.truncate")[1].splitlines()[1].strip() == "↑ same as above"
    assert html.render(result, "en").count("m.get_physical_cache(r)") == 2  # the scorecard keeps every card whole


def test_given_code_findings_and_the_isolation_in_force_are_shown() -> None:
    result = picture_result()
    result.given_code = [Failure("given", Text("给定的 release_request 被改动了", "the given release_request was changed"), repro="m.release_request(r0)")]
    for lang, heading, finding, isolation in (
        ("en", "Given code (not part of a TODO)", "the given release_request was changed", "Isolation: own user and PID namespaces"),
        ("zh", "给定代码（不属于任何 TODO）", "给定的 release_request 被改动了", "隔离：独立的用户与进程命名空间"),
    ):
        page, terminal = html.render(result, lang), text.render(result, lang)
        md = markdown.render(result, lang).replace("\\", "")  # Markdown escapes release\_request
        for report in (page, md, terminal):
            assert heading in report and finding in report and "m.release_request(r0)" in report
        assert isolation in page and isolation in md


def test_later_tracebacks_keep_their_last_frames() -> None:
    result = picture_result()
    frames = "\n".join(f'  File "<cell 3>", line {n}, in f{n}' for n in range(1, 11))
    oom = next(i for i in result.items if i.id == "todo3.oom_rollback")
    oom.failure.traceback = frames  # type: ignore[union-attr]
    shown = text.render(result, "en").split("todo3.oom_rollback")[1].split("todo4")[0]
    assert "… 6 more lines" in shown and "in f10" in shown and "in f7" in shown and "in f6" not in shown


def test_expected_and_actual_are_the_fields_that_differ() -> None:
    """The issue's card: a decode that raised seq_len before its OOM showed the same free list and
    table as expected and as actual; the one field that changed is what both show now."""
    before = State([], {"r0": (3, [0, 1, 2]), "r1": (1, [])})
    after = State([], {"r0": (4, [0, 1, 2]), "r1": (1, [])})
    expected, actual = unchanged(before, after)
    assert (expected.en, actual.en) == ("as before the call: r0.seq_len=3", "r0.seq_len=4")
    assert (expected.zh, actual.zh) == ("与调用前相同：r0.seq_len=3", "r0.seq_len=4")
    # The free list in another order is a change (an OOM keeps it in its order).
    moved = State([2, 1], {"r0": (3, [0])})
    assert differing(State([1, 2], {"r0": (3, [0])}), moved) == ["free_blocks"]
    assert differing(State([1, 2], {"r0": (3, [0])}), moved, names=["r0"]) == []
    # Ownership: each block out of place, and where it is.
    broken = State([1, 1], {"r0": (2, [0]), "r1": (2, [0])})
    assert misplaced(broken, 4) == [0, 1, 2, 3]
    assert places(broken, [0, 3]).en == "block 0: r0.block_table, r1.block_table; block 3: nowhere"
    assert places(broken, [1]).zh == "块 1：free_blocks、free_blocks"


def test_cards_say_expected_and_actual_in_the_cards_language() -> None:
    failure = Failure("wrong", Text("失败", "failed"), expected="r0.seq_len=3", actual="r0.seq_len=4", expected_zh="与调用前相同：r0.seq_len=3")
    assert failure.expected_for("zh") == "与调用前相同：r0.seq_len=3" and failure.expected_for("en") == "r0.seq_len=3"
    assert failure.actual_for("zh") == "r0.seq_len=4"  # a value only: the same in both
    result = picture_result()
    result.items[0].failure = failure
    result.items[0].status = FAILED
    for render in (text.render, markdown.render, html.render):
        assert "与调用前相同：r0.seq_len=3" in render(result, "zh") and "与调用前相同" not in render(result, "en")
    assert "与调用前相同：r0.seq_len=3" in json.dumps(gradescope.to_results_json(result, "zh"), ensure_ascii=False)


def test_a_long_reproduction_is_cut_between_whole_statements_and_still_runs() -> None:
    """The middle of a long reproduction is left out, never inside a try/except (a cut after
    `except ...:` made one that did not compile), and the whole fits the scorecard's 40 lines,
    so its clip never takes the asserts at the end."""
    from grader.checks.script import Line, Script

    for offset in range(5):  # wherever the cut would fall in the five-line blocks
        script = Script([Line(f"x{i} = {i}") for i in range(offset)])
        for i in range(30):
            script.lines += [Line(f"r{i} = [{i}]"), Line("try:"), Line(f"    r{i}.pop(5)"), Line("except IndexError:  # expected"), Line("    pass")]
        script.expect("r29 == []", "r29 should be empty: {r29}")
        for lang in ("en", "zh"):
            shown = script.render(lang, 40)
            compile(shown, "<repro>", "exec")
            lines = shown.splitlines()
            assert len(lines) <= 40 and lines[-1].startswith("assert r29 == []"), lines[-3:]
            assert sum("lines cut" in line or "省略" in line for line in lines) == 1
