"""Scorecards (Markdown, HTML) and the GitHub Actions output: complete, and safe against hostile submissions."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from grader.config import load_config
from grader.report import github, gradescope, html, labels, markdown
from grader.report import text as text_report
from grader.results import (
    FAILED,
    NOT_RUN,
    PASSED,
    CellReport,
    Failure,
    GradeResult,
    ItemResult,
    SkippedLine,
    Text,
    not_graded,
)
from tests.conftest import ROOT

# What a student controls: exception messages, printed values, output, file names.
HOSTILE = "<script>alert(1)</script><img src=x onerror=alert(2)> ``` | [x](javascript:alert(3)) 100% \r\n::error::pwned"


def hostile_result() -> GradeResult:
    config = load_config()
    items = []
    for number, rubric in enumerate(config.items):
        status = NOT_RUN if rubric.device == "cuda" else FAILED if number % 3 == 0 else PASSED
        failure = None
        if status == FAILED:
            failure = Failure("wrong", Text("错 " + HOSTILE, "wrong " + HOSTILE), repro="x = '```'\n" + HOSTILE, expected=HOSTILE, actual="`" + HOSTILE, traceback=HOSTILE)
        elif status == NOT_RUN:
            failure = Failure("not_run", Text("没有可用的 GPU", "no GPU here"))
        items.append(ItemResult(rubric.id, rubric.todo, Text(rubric.zh, rubric.en), rubric.weight, status, failure))
    return GradeResult(
        submission=f"/home/x/{HOSTILE[:30]}.ipynb",
        sha256="ab" * 32,
        config_digest=config.digest,
        items=items,
        cells=[CellReport(1, "ok"), CellReport(3, "error", "ZeroDivisionError", HOSTILE, HOSTILE)],
        notes=[Text(HOSTILE, HOSTILE)],
        flags=[Text("诚信 " + HOSTILE, "integrity " + HOSTILE)],
        output_excerpt=HOSTILE,
        skipped=[SkippedLine(3, 2, "!" + HOSTILE, "shell")],
    )


class Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(page: str) -> Tags:
    parser = Tags()
    parser.feed(page)
    return parser


def assert_inert(page: str) -> None:
    """No element or attribute the submission could have smuggled in."""
    tags = parse(page).tags
    names = {tag for tag, _ in tags}
    assert not names & {"script", "img", "iframe", "object", "embed", "a", "form", "link"}, names
    for _, attrs in tags:
        assert not any(name.startswith("on") for name in attrs), attrs
        assert not any("javascript:" in (value or "") for value in attrs.values()), attrs


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_html_scorecard_escapes_everything_and_is_self_contained(lang: str) -> None:
    result = hostile_result()
    page = html.render(result, lang)
    assert_inert(page)
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    csp = next(attrs["content"] for tag, attrs in parse(page).tags if tag == "meta" and attrs.get("http-equiv") == "Content-Security-Policy")
    assert "default-src 'none'" in csp and "script-src" not in csp  # no script may run at all
    assert "http://" not in page and "https://" not in page  # nothing to fetch: opens offline
    text = "".join(parse(page).text)
    assert f"{result.score:g} / 100" in text
    failed = [i for i in result.items if i.status == FAILED]
    for item in failed:
        assert item.id in text
    assert text.count("x = '```'") == len(failed)  # every reproduction, verbatim
    assert "ZeroDivisionError" in text  # the cell that raised
    assert ("未运行" if lang == "zh" else "not run") in text.lower() or "Items not run" in text
    assert "todo5.cuda" in text


@pytest.mark.parametrize(
    ("lang", "heading", "where", "why"),
    [
        ("en", "Lines not run while grading", "cell 4, line 2", "an install: the course's packages are there already"),
        ("zh", "评分时没有运行的行", "第 4 个代码单元第 2 行", "安装包：课程用到的包已装好"),
    ],
)
def test_every_report_names_the_lines_not_run_and_why(lang: str, heading: str, where: str, why: str) -> None:
    from grader.report import text
    from grader.sanitize import sanitize_result

    result = hostile_result()
    result.skipped = [SkippedLine(4, 2, "%pip install tqdm", "install"), SkippedLine(5, None, "%debug", "debugger"), SkippedLine(6, 1, "x", "made-up")]
    result = sanitize_result(result)
    assert [s.reason for s in result.skipped] == ["install", "debugger"]  # an unknown reason is no record of ours
    for drawn in (text.render(result, lang), markdown.render(result, lang), html.render(result, lang)):
        report = unescape(drawn.replace("\\", ""))  # Markdown's and HTML's escapes
        assert heading in report and where in report and "%pip install tqdm" in report and why in report
        assert ("debugger" if lang == "en" else "调试器") in report


def test_markdown_scorecard_renders_without_html_injection() -> None:
    result = hostile_result()
    text = markdown.render(result, "en")
    rendered = MarkdownIt("commonmark").enable("table").render(text)  # GitHub allows raw HTML too
    assert_inert(rendered)
    # Each reproduction stays one code block with the student's ``` inside it.
    blocks = re.findall(r'<pre><code class="language-python">(.*?)</code></pre>', rendered, re.S)
    assert len(blocks) == sum(1 for i in result.items if i.status == FAILED)
    assert all("x = '```'" in block for block in blocks)
    assert "<table>" in rendered and rendered.count("<tr>") == 1 + 5  # header + one row per TODO
    assert "Items not run" in text and "` todo5.cuda `" in text
    assert "Cells that raised" in rendered or "cells that raised" in rendered
    assert "**Total: " in text


def test_markdown_scorecard_in_chinese_and_for_an_ungradable_file() -> None:
    result = hostile_result()
    assert "总分" in markdown.render(result, "zh")
    result.error = Failure("unreadable", Text("不是有效的笔记本", "not a valid notebook"))
    text = markdown.render(result, "en")
    assert "Not graded" in text and "not a valid notebook" in text and "Total" not in text  # no score: nothing was graded
    assert "未评分" in markdown.render(result, "zh") and "总分" not in markdown.render(result, "zh")


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_gradescope_shows_every_string_as_plain_text(lang: str) -> None:
    """Gradescope's default (simple_format) lets <a href> and <img src> through: results.json asks for
    "text" for the output, every test's output and every name, so the submission's text stays text."""
    payload = gradescope.to_results_json(hostile_result(), lang)
    assert (payload["output_format"], payload["test_output_format"], payload["test_name_format"]) == ("text", "text", "text")
    assert payload["tests"] and all((t["output_format"], t["name_format"]) == ("text", "text") for t in payload["tests"])
    assert "<img src=x onerror=alert(2)>" in payload["output"]  # shown as written, as text
    assert "\r" not in payload["output"] and "\x1b" not in payload["output"]


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_an_ungradable_file_is_not_graded_in_every_report(lang: str) -> None:
    """No 0/100 and no 17 failed items for a file that was never graded: the reason, everywhere."""
    result = not_graded("empty.ipynb", load_config().digest, load_config().items,
                        Failure("unreadable", Text("提交的文件是空的", "the submission is empty")))
    sentence = {"zh": "未评分：提交的文件是空的", "en": "Not graded: the submission is empty"}[lang]
    payload = gradescope.to_results_json(result, lang)
    assert payload["score"] == 0 and payload["tests"] == [] and payload["output"].startswith(sentence)
    assert payload["output_format"] == "text" and payload["extra_data"]["graded"] is False
    assert sentence in text_report.render(result, lang) and "/ 100" not in text_report.render(result, lang)
    assert sentence in text_report.render(result, lang, quiet=True)
    card = html.render(result, lang)
    assert 'id="not-graded"' in card and 'id="total"' not in card and "/ 100" not in card
    assert all(item.status == NOT_RUN and item.failure is None for item in result.items)


def _failure_kinds() -> set[str]:
    """Every Failure.kind the grader writes: first argument of fail()/failure()/Failure()/Verdict(),
    kind= keywords, error_result()'s kind, and `kind = "..."` defaults."""
    kinds: set[str] = set()
    for path in (ROOT / "grader").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "attr", getattr(node.func, "id", ""))
                position = {"fail": 0, "failure": 0, "Failure": 0, "Verdict": 0, "error_result": 2}.get(name)
                if position is None:
                    continue
                if len(node.args) > position:
                    kinds |= _strings(node.args[position])
                kinds |= {s for k in node.keywords if k.arg == "kind" for s in _strings(k.value)}
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and "checks" in path.parts:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(getattr(t, "id", getattr(t, "attr", "")) == "kind" for t in targets) and node.value is not None:
                    kinds |= _strings(node.value)
    return kinds


def _strings(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.IfExp):
        return _strings(node.body) | _strings(node.orelse)
    return set()


def test_every_failure_kind_has_words_in_both_languages() -> None:
    kinds = _failure_kinds() - {"class", "list"}  # `kind = ...` of a reply's shape (checks/replies.py), not a failure
    assert {"wrong", "error", "not_implemented", "not_exercised", "timeout", "unreadable", "left_out"} <= kinds
    missing = sorted(kinds - set(labels.KINDS))
    assert not missing, f"failure kinds without words in grader/report/labels.py KINDS: {missing}"
    for kind, (zh, en) in labels.KINDS.items():
        assert zh and en and zh != en and not re.search(r"[A-Za-z]{3,}", zh), kind


def test_annotation_escaping() -> None:
    assert github.escape_data("100%\r\nnext") == "100%25%0D%0Anext"
    assert github.escape_property("a:b,c%\n") == "a%3Ab%2Cc%25%0A"
    line = github.command("error", "line1\nline2", file="nb.ipynb", title="t: x, y")
    assert line == "::error file=nb.ipynb,title=t%3A x%2C y::line1%0Aline2"


def test_annotations_points_first_then_one_line_per_failure() -> None:
    result = hostile_result()
    lines = github.annotations(result, "en", "sub/nb.ipynb")
    assert lines[0] == f"::notice title=Points::Points {result.score:g}/100"
    assert all("\n" not in line and "\r" not in line for line in lines)
    errors = [line for line in lines if line.startswith("::error ")]
    failed = [i for i in result.items if i.status == FAILED]
    assert len(errors) == min(len(failed), github.MAX_ANNOTATIONS)
    assert all(line.startswith("::error file=sub/nb.ipynb,title=") for line in errors)
    assert any(line.startswith("::warning ") and "ZeroDivisionError" in line for line in lines)


def test_grade_in_github_actions_writes_summary_points_and_annotations(tmp_path: Path) -> None:
    # A cell that prints workflow commands in its exception: they must stay inert text.
    submission = tmp_path / "nb.py"
    submission.write_text("raise RuntimeError('boom\\n::error title=fake::pwned\\n::add-mask::x')\n", encoding="utf-8")
    summary, outputs = tmp_path / "summary.md", tmp_path / "outputs"
    env = {**os.environ, "GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary), "GITHUB_OUTPUT": str(outputs), "GITHUB_WORKSPACE": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-m", "grader", "grade", str(submission), "--lang", "en", "--markdown", str(tmp_path / "s.md"), "--html", str(tmp_path / "s.html")],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("::stop-commands::"))
    token = lines[start].removeprefix("::stop-commands::")
    end = lines.index(f"::{token}::")
    assert len(token) >= 16 and start < end
    outside = lines[:start] + lines[end + 1 :]
    # The student's text appears only inside the stopped region, flattened onto one line;
    # outside, only our own commands, escaped.
    assert any("::error title=fake::pwned" in line for line in lines[start:end])
    assert not any(line.startswith("::error title=fake") for line in lines)
    assert all(line.startswith(("::notice title=Points::", "::error file=", "::warning file=")) for line in outside if line)
    # Sanitised once, before any report: the message's newlines are folded ("⏎"), never a line of their own.
    assert any("boom ⏎ ::error title=fake::pwned ⏎ ::add-mask::x" in line for line in outside if line.startswith("::warning "))
    assert "::notice title=Points::Points 0/100" in outside
    assert any(line.startswith("::error file=nb.py,title=todo1.") for line in outside)
    assert "Scorecard" in summary.read_text(encoding="utf-8")
    assert "points=0\nmax-points=100\n" in outputs.read_text(encoding="utf-8")
    assert (tmp_path / "s.md").read_text(encoding="utf-8").startswith("## Scorecard")
    assert "<!doctype html>" in (tmp_path / "s.html").read_text(encoding="utf-8")


def test_grade_outside_github_actions_prints_no_workflow_commands(tmp_path: Path) -> None:
    submission = tmp_path / "nb.py"
    submission.write_text("x = 1\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_ACTIONS"}
    proc = subprocess.run([sys.executable, "-m", "grader", "grade", str(submission)], capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert proc.returncode == 0 and "::" not in proc.stdout


def _blocked_result() -> GradeResult:
    from grader.checks.running import mark_blocked

    def item(item_id: str, failure: Failure) -> ItemResult:
        return ItemResult(item_id, "todo4", Text("题", "title"), 7.0, FAILED, failure)

    order = item("todo4.table_order", Failure("wrong", Text("顺序错了", "read out of order"), repro="assert out_is_right", expected="rows 0..3", actual="rows 3..0"))
    truncate = item("todo4.truncate", Failure("not_exercised", Text("只有 3/20 个", "only 3 of 20 random cases"), repro="witness"))
    result = GradeResult(submission="s.py", sha256="0" * 64, config_digest="d", items=[order, truncate])
    mark_blocked(result.items)
    return result


def test_an_item_another_one_blocks_says_which_and_shows_its_reproduction() -> None:
    from grader.report import text

    result = _blocked_result()
    blocked = result.items[1]
    assert blocked.blocked_by == "todo4.table_order" and result.items[0].blocked_by == ""
    assert blocked.failure.repro == "assert out_is_right" and blocked.failure.actual == "rows 3..0"  # the blocking item's
    assert "todo4.table_order" in blocked.failure.message.en and "todo4.table_order" in blocked.failure.message.zh
    assert "only 3 of 20 random cases" in blocked.failure.message.en  # and why it could not be judged
    for lang, said in (("en", "(blocked by todo4.table_order)"), ("zh", "（被 todo4.table_order 阻塞）")):
        assert said in text.render(result, lang)
        assert said in unescape(re.sub("<[^>]+>", "", MarkdownIt().render(markdown.render(result, lang))))
        assert said in unescape(html.render(result, lang))
    assert GradeResult.from_dict(result.to_dict()).items[1].blocked_by == "todo4.table_order"  # results.json keeps it


def test_an_unexercised_item_with_no_failing_neighbour_is_not_blocked() -> None:
    from grader.checks.running import mark_blocked

    lone = ItemResult("todo2.ownership", "todo2", Text("题", "t"), 7.0, FAILED, Failure("not_exercised", Text("无", "never took a block")))
    passed = ItemResult("todo2.block_count", "todo2", Text("题", "t"), 6.0, PASSED)
    mark_blocked([passed, lone])
    assert lone.blocked_by == "" and lone.failure.message.en == "never took a block"
