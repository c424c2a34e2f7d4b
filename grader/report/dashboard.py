"""The class dashboard: one self-contained HTML page built from the gradebook's current results.

Score distribution, pass rate per TODO and per item, the most common failures with one
sample reproduction each, and a sortable table of students linking to their scorecards,
saying for each where the grade came from (graded here, or imported, marked) and when.
Students without a grade (file not gradable, grader error, left out) are in the table with
the reason and stay out of the statistics.
Charts are inline SVG; the one script (table sorting) is inline and allowed by its hash in
the page's Content-Security-Policy, so the page needs no network and runs nothing else.
The script records any error into #js-errors and marks <body data-ready> when it has run.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from dataclasses import dataclass

from grader import standing
from grader.config import TODOS
from grader.gradebook import GRADED, Entry
from grader.report.html import bar, esc, page
from grader.report.labels import colon, kind_word, paren, todo_name
from grader.report.markdown import say
from grader.results import FAILED, NOT_RUN, PASSED, ItemResult
from grader.sanitize import visible

WORDS = {
    "dashboard": ("班级成绩总览", "Class dashboard"),
    "students": ("学生", "Students"),
    "graded_n": ("已评分学生", "Students graded"),
    "mean": ("平均分", "Mean"),
    "median": ("中位数", "Median"),
    "full": ("满分人数", "Full marks"),
    "no_grade": ("无成绩（见原因）", "No grade (see reason)"),
    "imported_n": ("导入的成绩", "Imported grades"),
    "identical_n": ("与他人完全相同的提交", "Identical submissions"),
    "identical_note": (
        "以下学生提交的文件逐字节相同（sha256 相同），请助教核查；成绩照常保留",
        "These students submitted byte-for-byte identical files (same sha256): for the TA to look at; their grades stand",
    ),
    "identical_to": ("与以下提交相同：", "identical to"),
    "tampering_n": ("触碰评分器代码的提交", "Touched the grader's machinery"),
    "tampering": ("触碰评分器代码：", "touched the grader's machinery:"),
    "imported_note": (
        "{n} 个当前成绩是导入的（学生的 CI 运行或 Gradescope），并非本机评分：它们只和产生它们的运行一样可信；本机评分总是优先",
        "{n} current grades were imported (students' CI runs or Gradescope), not graded here: they are only as "
        "trustworthy as the runs that made them; a grade made here always takes precedence",
    ),
    "distribution": ("分数分布", "Score distribution"),
    "todo_rates": ("各 TODO 通过率（该 TODO 全部评分项通过的学生比例）", "Pass rate per TODO (students passing every item of it)"),
    "item_rates": ("各评分项通过率", "Pass rate per rubric item"),
    "common": ("最常见的错误", "Most common failures"),
    "count": ("人数", "Students"),
    "sample": ("示例", "Sample"),
    "student": ("学生", "Student"),
    "status": ("状态", "Status"),
    "graded_at": ("记录时间", "Recorded"),
    "submitted_at": ("提交时间", "Submitted"),
    "source": ("来源", "Source"),
    "item": ("评分项", "Item"),
    "rate": ("通过率", "Pass rate"),
    "message": ("说明", "Message"),
    "configs": ("注意：当前成绩来自 {n} 个不同的评分配置", "Note: current grades come from {n} different grading configurations"),
    "empty": ("成绩簿中还没有学生", "the gradebook holds no students yet"),
    "sort_hint": ("点击表头排序", "click a column header to sort"),
    "unattempted": ("未实现（学生人数）", "not implemented yet (students)"),
}

STYLE = """
.stats{display:flex;gap:12px;flex-wrap:wrap}.stat{background:#fff;border:1px solid #e4e7eb;border-radius:6px;padding:8px 14px}
.stat b{display:block;font-size:1.6em}
svg{background:#fff;border:1px solid #e4e7eb;border-radius:6px;max-width:100%;height:auto}
svg text{font:12px system-ui,sans-serif;fill:#1d2430}
th button{all:unset;cursor:pointer;font-weight:600}th[aria-sort=ascending] button::after{content:" ▲"}
th[aria-sort=descending] button::after{content:" ▼"}td.num,th.num{text-align:right}
tr.imported{background:#fff8e1}.badge{display:inline-block;border-radius:4px;padding:0 6px;font-size:.85em;background:#eef0f3}
.badge.imported{background:#f0c36d;color:#4a3500;font-weight:600}.badge.identical,.badge.tampering{background:#f6d0cd;color:#6b1510;margin-left:4px}.scroll{overflow-x:auto}.reason{display:block;color:#5f6b7a;font-size:.85em}
#js-errors{background:#fdecea;color:#8a1f1b}
"""

# Sorts the student table: header clicks, and ?sort=KEY&dir=asc|desc on load (used by the tests).
SCRIPT = r"""
(function () {
  "use strict";
  function report(message) {
    var box = document.getElementById("js-errors");
    box.hidden = false;
    box.textContent += message + "\n";
  }
  window.addEventListener("error", function (e) { report(String(e.message)); });
  window.addEventListener("unhandledrejection", function (e) { report(String(e.reason)); });
  var table = document.getElementById("students");
  if (!table) { document.body.setAttribute("data-ready", "1"); return; }
  var body = table.tBodies[0];
  var headers = Array.prototype.slice.call(table.tHead.rows[0].cells);
  function value(row, index, numeric) {
    var raw = row.cells[index].getAttribute("data-v");
    return numeric ? parseFloat(raw) : raw;
  }
  function sortBy(key, dir) {
    var index = -1;
    headers.forEach(function (th, i) { if (th.getAttribute("data-key") === key) { index = i; } });
    if (index < 0) { return false; }
    var numeric = headers[index].getAttribute("data-type") === "num";
    var sign = dir === "asc" ? 1 : -1;
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = value(a, index, numeric), y = value(b, index, numeric);
      var order = numeric ? x - y : String(x).localeCompare(String(y));
      if (order === 0) { order = value(a, 0, false).localeCompare(value(b, 0, false)); return order; }
      return sign * order;
    });
    rows.forEach(function (row) { body.appendChild(row); });
    headers.forEach(function (th) { th.removeAttribute("aria-sort"); });
    headers[index].setAttribute("aria-sort", dir === "asc" ? "ascending" : "descending");
    table.setAttribute("data-sorted", key + ":" + (dir === "asc" ? "asc" : "desc"));
    return true;
  }
  headers.forEach(function (th) {
    var button = th.querySelector("button");
    if (!button) { return; }
    button.addEventListener("click", function () {
      var now = th.getAttribute("aria-sort");
      var numeric = th.getAttribute("data-type") === "num";
      var dir = now ? (now === "descending" ? "asc" : "desc") : (numeric ? "desc" : "asc");
      sortBy(th.getAttribute("data-key"), dir);
    });
  });
  var query = new URLSearchParams(window.location.search);
  if (query.get("sort")) { sortBy(query.get("sort"), query.get("dir") === "asc" ? "asc" : "desc"); }
  document.body.setAttribute("data-ready", "1");
})();
"""


def w(key: str, lang: str, **fmt: object) -> str:
    if key in WORDS:
        zh, en = WORDS[key]
        text = zh if lang == "zh" else en
        return text.format(**fmt) if fmt else text
    return say(key, lang, **fmt)


UNATTEMPTED = ("not_implemented", "missing")


@dataclass
class CommonFailure:
    item: str
    kind: str
    message: str
    students: list[str]
    repro: str
    sample_student: str


def _pattern(message: str) -> str:
    """Messages quote concrete numbers; the same mistake should count once whatever they are."""
    return re.sub(r"-?\d+(\.\d+)?", "N", message)


def common_failures(entries: list[Entry], lang: str, limit: int = 10) -> list[CommonFailure]:
    groups: dict[tuple[str, str, str], CommonFailure] = {}
    for entry in entries:
        if entry.status != GRADED or entry.result.error is not None:
            continue
        for item in entry.result.items:
            # An unimplemented TODO is not a mistake to discuss; the per-TODO chart shows those.
            if item.status != FAILED or item.failure is None or item.failure.kind in UNATTEMPTED:
                continue
            key = (item.id, item.failure.kind, _pattern(item.failure.message.en))
            group = groups.setdefault(
                key, CommonFailure(item.id, item.failure.kind, item.failure.message.get(lang), [], item.failure.repro_for(lang), entry.student)
            )
            group.students.append(entry.student)
            # The shortest reproduction is the easiest one to read in class.
            repro = item.failure.repro_for(lang)
            if repro and (not group.repro or len(repro) < len(group.repro)):
                group.repro, group.sample_student, group.message = repro, entry.student, item.failure.message.get(lang)
    return sorted(groups.values(), key=lambda g: (-len(g.students), g.item))[:limit]


def histogram_svg(scores: list[float], lang: str) -> str:
    bins = [0] * 10
    for score in scores:
        bins[min(int(score // 10), 9)] += 1
    top = max(bins) or 1
    width, height, pad, bar_w = 640, 240, 30, 56
    parts = [f'<svg id="histogram" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" aria-label="{esc(w("distribution", lang))}">']
    for i, count in enumerate(bins):
        h = (height - 2 * pad - 10) * count / top
        x, y = pad + i * (bar_w + 4), height - pad - h
        label = f"{i * 10}–{i * 10 + 9}" if i < 9 else "90–100"
        parts.append(f'<rect x="{x}" y="{y:.1f}" width="{bar_w}" height="{h:.1f}" fill="#4a7bd0"><title>{label}: {count}</title></rect>')
        parts.append(f'<text x="{x + bar_w / 2}" y="{height - pad + 16}" text-anchor="middle">{label}</text>')
        if count:
            parts.append(f'<text x="{x + bar_w / 2}" y="{y - 4:.1f}" text-anchor="middle">{count}</text>')
    parts.append(f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad + 10}" y2="{height - pad}" stroke="#9aa4b1"/></svg>')
    return "".join(parts)


def rates_svg(rows: list[tuple[str, float]], svg_id: str) -> str:
    """Horizontal bars, one per (label, share passed)."""
    row_h, label_w, bar_w = 26, 260, 320
    height = row_h * len(rows) + 10
    parts = [f'<svg id="{svg_id}" viewBox="0 0 {label_w + bar_w + 70} {height}" width="{label_w + bar_w + 70}" height="{height}" role="img">']
    for i, (label, share) in enumerate(rows):
        y = 5 + i * row_h
        parts.append(f'<text x="{label_w - 8}" y="{y + 16}" text-anchor="end">{esc(label)}</text>')
        parts.append(f'<rect x="{label_w}" y="{y + 4}" width="{bar_w}" height="16" fill="#e4e7eb"/>')
        parts.append(f'<rect x="{label_w}" y="{y + 4}" width="{bar_w * share:.1f}" height="16" fill="#2f9e5b"><title>{share:.0%}</title></rect>')
        parts.append(f'<text x="{label_w + bar_w + 8}" y="{y + 16}">{share:.0%}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _ran(entries: list[Entry]) -> list[Entry]:
    return [e for e in entries if e.status == GRADED and e.result.error is None]


def _items_by_id(entries: list[Entry]) -> dict[str, list[ItemResult]]:
    out: dict[str, list[ItemResult]] = {}
    for entry in _ran(entries):
        for item in entry.result.items:
            if item.status != NOT_RUN:
                out.setdefault(item.id, []).append(item)
    return out


def render(entries: list[Entry], lang: str, scorecard_href: dict[str, str] | None = None) -> str:
    """entries: each student's latest gradebook entry; scorecard_href: student id -> link."""
    hrefs = scorecard_href or {}
    body = [f"<h1>{esc(w('dashboard', lang))}</h1>", '<pre id="js-errors" hidden></pre>']
    if not entries:
        body.append(f"<p>{esc(w('empty', lang))}</p>")
        return page(w("dashboard", lang), "".join(body), lang, STYLE, SCRIPT)
    standings = standing.all_of(entries, lang)
    # No grade (not gradable, grader error, left out) is not a zero the student earned: out of the statistics.
    scores = [s.total for s in standings if s.total is not None]
    imported = sum(1 for s in standings if s.imported)
    stats = [
        (w("graded_n", lang), str(len(scores))),
        (w("mean", lang), f"{statistics.fmean(scores):.1f}" if scores else "–"),
        (w("median", lang), f"{statistics.median(scores):g}" if scores else "–"),
        (w("full", lang), str(sum(1 for s in scores if s >= 100))),
        (w("no_grade", lang), str(len(standings) - len(scores))),
        (w("imported_n", lang), str(imported)),
        (w("identical_n", lang), str(sum(1 for s in standings if s.identical_to))),
        (w("tampering_n", lang), str(sum(1 for s in standings if s.tampering))),
    ]
    body.append('<div class="stats" id="stats">' + "".join(f'<div class="stat"><b>{esc(v)}</b>{esc(k)}</div>' for k, v in stats) + "</div>")
    if imported:
        body.append(f'<p class="flag" id="imported-note">{esc(w("imported_note", lang, n=imported))}</p>')
    groups = sorted({tuple(sorted((s.student, *s.identical_to))) for s in standings if s.identical_to})
    if groups:
        listed = "; ".join(", ".join(map(visible, group)) for group in groups)
        body.append(f'<p class="flag" id="identical-note">{esc(w("identical_note", lang))}: {esc(listed)}</p>')
    digests = Counter(e.result.config_digest for e in entries)
    if len(digests) > 1:
        body.append(f'<p class="flag">{esc(w("configs", lang, n=len(digests)))}: {esc(", ".join(sorted(digests)))}</p>')
    body.append(f"<h2>{esc(w('distribution', lang))}</h2>{histogram_svg(scores, lang)}")

    by_item = _items_by_id(entries)
    todo_rows = []
    for todo in TODOS:
        graded = [e for e in _ran(entries) if any(i.todo == todo and i.status != NOT_RUN for i in e.result.items)]
        if graded:
            full = sum(1 for e in graded if all(i.status == PASSED for i in e.result.items if i.todo == todo and i.status != NOT_RUN))
            todo_rows.append((todo_name(todo, lang), full / len(graded)))
    body.append(f"<h2>{esc(w('todo_rates', lang))}</h2>{rates_svg(todo_rows, 'todo-rates')}")
    unattempted = Counter(
        item.todo
        for e in _ran(entries)
        for item in {i.todo: i for i in e.result.items if i.failure is not None and i.failure.kind in UNATTEMPTED}.values()
    )
    if unattempted:
        counts = ", ".join(f"{todo_name(todo, lang)}: {n}" for todo, n in sorted(unattempted.items()))
        body.append(f'<p class="muted" id="unattempted">{esc(w("unattempted", lang))}: {esc(counts)}</p>')

    body.append(f'<h2>{esc(w("item_rates", lang))}</h2><table id="item-rates"><thead><tr><th>{esc(w("item", lang))}</th>'
                f'<th class="num">{esc(w("rate", lang))}</th><th></th></tr></thead><tbody>')
    for item_id, items in by_item.items():
        passed = sum(1 for i in items if i.status == PASSED)
        body.append(
            f'<tr><td><code>{esc(item_id)}</code> {esc(items[0].title.get(lang))}</td>'
            f'<td class="num">{passed}/{len(items)}</td><td>{bar(passed, len(items))}</td></tr>'
        )
    body.append("</tbody></table>")

    common = common_failures(entries, lang)
    if common:
        body.append(f'<h2>{esc(w("common", lang))}</h2><div id="common-failures">')
        for group in common:
            body.append(
                f'<div class="item"><b>{len(group.students)}</b> × <code>{esc(group.item)}</code>'
                f'<span class="kind" data-kind="{esc(group.kind)}">{esc(paren(kind_word(group.kind, lang), lang))}</span>{esc(colon(lang))}'
                f"{esc(group.message)}"
            )
            if group.repro:
                body.append(f'<details><summary>{esc(w("sample", lang) + paren(visible(group.sample_student), lang))}</summary><pre>{esc(group.repro)}</pre></details>')
            body.append("</div>")
        body.append("</div>")

    body.append(f'<h2>{esc(w("students", lang))}</h2><p class="muted">{esc(w("sort_hint", lang))}</p>')
    body.append(_student_table(standings, lang, hrefs))
    return page(w("dashboard", lang), "".join(body), lang, STYLE, SCRIPT)


def _student_table(standings: list[standing.Standing], lang: str, hrefs: dict[str, str]) -> str:
    head = [("student", w("student", lang), "text"), ("score", say("total", lang), "num")]
    head += [(todo, todo.upper().replace("TODO", "TODO "), "num") for todo in TODOS]
    head += [("status", w("status", lang), "text"), ("source", w("source", lang), "text")]
    head += [("submitted", w("submitted_at", lang), "text"), ("graded", w("graded_at", lang), "text")]
    cells = "".join(
        f'<th data-key="{key}" data-type="{kind}"{" class=num" if kind == "num" else ""}><button type="button">{esc(label)}</button></th>'
        for key, label, kind in head
    )
    rows = []
    for s in standings:
        href = hrefs.get(s.student)
        shown = esc(visible(s.student))  # ids are file names: no control character or bidi override shows raw
        name = f'<a href="{esc(href)}">{shown}</a>' if href else shown
        # No total: shown as a dash, sorted below every real score (-1).
        total = f"{s.total:g}" if s.total is not None else "–"
        row = [f'<td data-v="{shown}">{name}</td>', f'<td class="num" data-v="{s.total if s.total is not None else -1}">{total}</td>']
        for todo in TODOS:
            if s.total is None:
                row.append('<td class="num" data-v="-1">–</td>')
            else:
                got, possible = s.todos[todo], s.todo_possible[todo]
                row.append(f'<td class="num" data-v="{got}">{got:g}/{possible:g}</td>')
        status = esc(standing.word(standing.STATUS_WORDS, s.status, lang))
        reason = f'<span class="reason">{esc(s.reason)}</span>' if s.reason else ""
        if s.identical_to:
            reason += f'<span class="badge identical">{esc(w("identical_to", lang))} {esc(", ".join(map(visible, s.identical_to)))}</span>'
        if s.tampering:
            reason += f'<span class="badge tampering">{esc(w("tampering", lang))} {esc(s.tampering)}</span>'
        row.append(f'<td data-v="{esc(s.status)}">{status}{reason}</td>')
        source = esc(standing.word(standing.SOURCE_WORDS, s.source, lang))
        badge = "badge imported" if s.imported else "badge"
        row.append(f'<td data-v="{esc(s.source)}"><span class="{badge}">{source}</span></td>')
        for when in (s.submitted_at or "", s.recorded_at):
            row.append(f'<td data-v="{esc(when)}">{esc(when[:16].replace("T", " "))}</td>')
        classes = ' class="imported"' if s.imported else ""
        rows.append(f'<tr data-student="{shown}" data-source="{esc(s.source)}"{classes}>{"".join(row)}</tr>')
    return f'<div class="scroll"><table id="students"><thead><tr>{cells}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'
