"""The student's scorecard as HTML: a self-contained page (no CDN, no script, opens offline),
and the same card as a fragment that `grader.check()` shows inline in a notebook.

Every string is passed through esc(); on top of that the page's Content-Security-Policy
allows no script at all, so even a missed escape could not run student code in a browser.
The card's styles are all scoped under .pa-card, so shown inside a notebook they restyle
nothing of the notebook's own.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Sequence
from html import escape

from grader import rules as item_rules
from grader.report import cells as cell_info
from grader.report import scope
from grader.report.budget import fit, utf8_size
from grader.report.labels import blocked, colon, failed_heading, paren, seconds, status_word, todo_name
from grader.report.markdown import say
from grader.report.pictures import picture_svg
from grader.results import FAILED, NOT_RUN, Failure, GradeResult, ItemResult

# The page around a card, and the dashboard (grader/report/dashboard.py) use these.
STYLE = """
body{font:15px/1.5 system-ui,-apple-system,"Segoe UI","Noto Sans CJK SC","PingFang SC",sans-serif;margin:0;background:#f6f7f9;color:#1d2430}
main{max-width:980px;margin:0 auto;padding:24px}
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #d9dde3;padding-bottom:.2em}
.total{font-size:2.4em;font-weight:700}.muted{color:#5f6b7a;font-size:.9em}
table{border-collapse:collapse;width:100%;background:#fff}th,td{padding:6px 8px;border-bottom:1px solid #e4e7eb;text-align:left;vertical-align:top}
.bar{background:#e4e7eb;border-radius:4px;height:12px;min-width:120px;overflow:hidden}.bar>span{display:block;height:100%;background:#2f9e5b}
.bar.low>span{background:#d9534f}.bar.mid>span{background:#e0a030}
.item{background:#fff;border:1px solid #e4e7eb;border-left:4px solid #d9534f;border-radius:6px;padding:10px 14px;margin:12px 0}
pre{background:#0f1720;color:#e6edf3;padding:10px;border-radius:6px;overflow:auto;white-space:pre-wrap;word-break:break-word}
code{background:#eef0f3;padding:0 4px;border-radius:3px;word-break:break-word}
.flag{background:#fff4e5;border:1px solid #f0c36d;padding:8px 12px;border-radius:6px;margin:8px 0}
.passed{color:#2f9e5b}.failed{color:#d9534f}.not_run{color:#7b8694}
"""

# The card itself: every selector under .pa-card (safe inside a notebook's page).
CARD_STYLE = """
.pa-card{font:15px/1.5 system-ui,-apple-system,"Segoe UI","Noto Sans CJK SC","PingFang SC",sans-serif;color:#1d2430;max-width:980px;
 background:#f6f7f9;padding:12px 16px;border-radius:8px;text-align:left}
.pa-card .pa-nowrap{white-space:nowrap}
.pa-card h1{font-size:1.5em;margin:.2em 0}.pa-card h2{font-size:1.2em;margin-top:1.4em;border-bottom:1px solid #d9dde3;padding-bottom:.2em}
.pa-card .total{font-size:2.4em;font-weight:700}.pa-card .muted{color:#5f6b7a;font-size:.9em}
.pa-card table{border-collapse:collapse;width:100%;background:#fff}
.pa-card th,.pa-card td{padding:6px 8px;border-bottom:1px solid #e4e7eb;text-align:left;vertical-align:top}
.pa-card .scroll{overflow-x:auto}
.pa-card .bar{background:#e4e7eb;border-radius:4px;height:12px;min-width:120px;overflow:hidden}
.pa-card .bar>span{display:block;height:100%;background:#2f9e5b}.pa-card .bar.low>span{background:#d9534f}.pa-card .bar.mid>span{background:#e0a030}
.pa-card .item{background:#fff;border:1px solid #e4e7eb;border-left:4px solid #d9534f;border-radius:6px;padding:10px 14px;margin:12px 0}
.pa-card .item.item-not_run{border-left-color:#9aa4b1}.pa-card .item.given{border-left-color:#e0a030}
.pa-card .errors-first{border:2px solid #d9534f;border-radius:6px;padding:6px 14px;background:#fdecea;margin:12px 0}
.pa-card .errors-first h2{margin-top:.4em;border:0;color:#8a1f1b}
.pa-card pre{background:#0f1720;color:#e6edf3;padding:10px;border-radius:6px;overflow:auto;white-space:pre-wrap;word-break:break-word;text-align:left}
.pa-card code{background:#eef0f3;padding:0 4px;border-radius:3px;overflow-wrap:anywhere}
.pa-card code.pa-id{white-space:nowrap;overflow-wrap:normal;word-break:keep-all}
.pa-card td.pa-idcol{white-space:nowrap}
.pa-card .flag{background:#fff4e5;border:1px solid #f0c36d;padding:8px 12px;border-radius:6px;margin:8px 0}
.pa-card .passed{color:#2f9e5b}.pa-card .failed{color:#d9534f}.pa-card .not_run{color:#7b8694}
.pa-card .pa-picture{display:block;max-width:100%;height:auto;background:#fff;border:1px solid #e4e7eb;border-radius:6px;margin:8px 0}
.pa-card .pa-picture text{font:12px system-ui,sans-serif;fill:#1d2430}.pa-card .pa-picture .pa-small{font-size:11px;fill:#5f6b7a}
.pa-card .pa-picture .pa-label{font-weight:600}.pa-card .pa-picture .pa-step{font-family:ui-monospace,monospace}
.pa-card .pa-picture .pa-num{font-size:11px;fill:#fff;font-weight:600}.pa-card .pa-picture .pa-lost{fill:#d9534f;font-size:14px}.pa-card .pa-picture .pa-mark{font-size:12px;fill:#fff}
"""


def esc(value: object) -> str:
    return escape(str(value), quote=True)


def csp(script: str | None = None) -> str:
    """No network at all; inline style only, plus exactly the page's own script if it has one."""
    policy = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
    if script is not None:
        digest = hashlib.sha256(script.encode("utf-8")).digest()
        policy += f"; script-src 'sha256-{base64.b64encode(digest).decode()}'"
    return policy


def page(title: str, body: str, lang: str, style: str = "", script: str | None = None) -> str:
    html_lang = "zh-CN" if lang == "zh" else "en"
    script_tag = f"<script>{script}</script>" if script is not None else ""
    return (
        f'<!doctype html>\n<html lang="{html_lang}"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{esc(csp(script))}">'
        f'<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{esc(title)}</title><style>{STYLE}{style}</style></head>"
        f"<body><main>{body}</main>{script_tag}</body></html>\n"
    )


def bar(got: float, possible: float) -> str:
    share = got / possible if possible else 0.0
    level = "low" if share < 0.5 else "mid" if share < 1 else ""
    return f'<div class="bar {level}" role="img" aria-label="{share:.0%}"><span style="width:{100 * share:.1f}%"></span></div>'


def item_id(value: str) -> str:
    # One unbreakable unit: "todo1.per_token" never wraps as "todo1.per_toke|n".
    return f'<code class="pa-id">{esc(value)}</code>'


def _failure_body(failure: Failure, lang: str) -> list[str]:
    parts = [f"<p>{esc(failure.message.get(lang))}</p>"]
    if failure.expected or failure.actual:
        parts.append(
            f"<p>{esc(say('expected', lang))}{colon(lang)}<code>{esc(failure.expected_for(lang))}</code><br>"
            f"{esc(say('actual', lang))}{colon(lang)}<code>{esc(failure.actual_for(lang))}</code></p>"
        )
    repro = failure.repro_for(lang)
    if repro:
        parts.append(f'<p>{esc(say("repro", lang))}{colon(lang).rstrip()}</p><pre class="repro">{esc(repro)}</pre>')
    if failure.picture:
        parts.append(picture_svg(failure.picture, lang))
    if failure.traceback:
        parts.append(f"<details><summary>{esc(say('traceback', lang))}</summary><pre>{esc(failure.traceback)}</pre></details>")
    return parts


def rule_html(text: str) -> str:
    """A rule as the notebook's Markdown shows it: escaped, its `code spans` as <code>."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", esc(text))


def _item_card(item: ItemResult, lang: str) -> str:
    parts = [
        f'<div class="item item-{esc(item.status)}" id="{esc(item.id)}">',
        f'<b class="{esc(item.status)}">{"✗" if item.status == FAILED else "–"} {item_id(item.id)}</b> '
        f"({item.score:g}/{item.weight:g}){esc(blocked(item.blocked_by, lang))} {esc(item.title.get(lang))}",
    ]
    if item.failure is not None:
        parts += _failure_body(item.failure, lang)
    rules = item_rules.for_item(item.id, item.todo) if item.status == FAILED else []
    if rules:  # what the notebook told the student this item checks (grader/rules.toml)
        rows = "".join(f"<li>{rule_html(rule.text(lang))}</li>" for rule in rules)
        parts.append(f'<details class="pa-rules"><summary>{esc(item_rules.say("on_card", lang))}</summary><ul>{rows}</ul></details>')
    parts.append("</div>")
    return "".join(parts)


def _errors_first(result: GradeResult, lang: str, numbering: str) -> str:
    broken = cell_info.raised(result)
    if not broken:
        return ""
    out = [f'<section class="errors-first" id="errors-first"><h2>⚠ {esc(say("fix_first", lang))}</h2>']
    for cell in broken:
        out.append(
            f'<div class="cell" id="cell-{cell.index}"><b>{esc(cell_info.where(cell, lang, numbering))}</b>{colon(lang)}'
            f"<code>{esc(cell.error_type or cell.status)}</code> {esc(cell.message)}"
        )
        if cell.traceback:
            out.append(f"<pre>{esc(cell.traceback)}</pre>")
        out.append("</div>")
    out.append("</section>")
    return "".join(out)


def _footer(result: GradeResult, lang: str) -> str:
    parts = [f"{esc(say('config', lang))} {esc(result.config_digest)}", f"{esc(say('device', lang))} {esc(result.device)}"]
    parts.append(f"{esc(say('seconds', lang))} {esc(seconds(result.seconds, lang))}")
    if result.sha256:
        parts.append(f"sha256 {esc(result.sha256[:12])}")
    summary = (result.isolation or {}).get("summary")
    if isinstance(summary, dict) and summary.get(lang):
        parts.append(f"{esc(say('isolation', lang))}{colon(lang)}{esc(summary[lang])}")
    if result.random_cases.get(lang):
        parts.append(f"{esc(say('random_cases', lang))}{colon(lang)}{esc(result.random_cases[lang])}")
    return f'<p class="muted" id="footer">{" · ".join(parts)}</p>'


def _card(result: GradeResult, lang: str, numbering: str, todos: Sequence[str] = ()) -> str:
    name = result.shown_name
    body = [f'<h1>{esc(say("scorecard", lang) + colon(lang) + name)}</h1>']
    if result.error is not None:  # no total: nothing was graded
        body.append(f'<p class="flag" id="not-graded"><b>{esc(say("unreadable", lang))}</b>{colon(lang)}{esc(result.error.message.get(lang))}</p>')
        return "".join(body) + _footer(result, lang)
    if scope.total(result, todos, lang):  # grader.check("todo3"): that TODO's points, not a score out of 100
        body.append(f'<div class="total" id="total">{esc(scope.total(result, todos, lang))}</div><p class="muted" id="scope">{esc(scope.note(result, todos, lang))}</p>')
    else:
        body.append(f'<div class="total" id="total">{result.score:g} / {result.max_score:g}</div>')
    not_run = [item for item in result.items if item.status == NOT_RUN]
    if not_run:
        body.append(f'<p class="muted">{esc(say("scaled", lang))}</p>')
    body.append(_errors_first(result, lang, numbering))
    body += [f'<p class="flag">⚠️ <b>{esc(say("flags", lang))}</b>{colon(lang)}{esc(flag.get(lang))}</p>' for flag in result.flags]
    body += [f'<p class="flag tampering">⚠️ <b>{esc(say("tampering", lang))}</b>{colon(lang)}{esc(r.message.get(lang))}</p>' for r in result.tampering]
    body += [f'<p class="muted">{esc(note.get(lang))}</p>' for note in result.notes]
    skipped = cell_info.skipped_lines(result, lang, numbering)
    if skipped:
        rows = "".join(f"<li>{esc(where)}{colon(lang)}<code>{esc(text)}</code>{esc(paren(why, lang))}</li>" for where, text, why in skipped)
        body.append(f'<div class="muted" id="skipped"><b>{esc(say("skipped", lang))}</b><ul>{rows}</ul></div>')
    rows = "".join(
        f"<tr><td>{esc(todo_name(todo, lang))}</td><td>{got:g} / {possible:g}</td><td>{bar(got, possible)}</td></tr>"
        for todo, (got, possible) in result.todo_scores().items()
    )
    body.append(f'<table id="todos"><tr><th>{esc(say("todo", lang))}</th><th>{esc(say("points", lang))}</th><th></th></tr>{rows}</table>')
    failed = [item for item in result.items if item.status == FAILED]
    if failed:
        body.append(f'<h2>{esc(failed_heading(len(failed), lang))}</h2>')
        body += [_item_card(item, lang) for item in failed]
    else:
        body.append(f'<p class="passed">✓ {esc(say("all_passed", lang))}</p>')
    if result.given_code:
        body.append(f'<h2>{esc(say("given", lang))}</h2>')
        body += ['<div class="item given">' + "".join(_failure_body(f, lang)) + "</div>" for f in result.given_code]
    if not_run:
        body.append(f'<h2>{esc(say("not_run_items", lang))}</h2>')
        body += [_item_card(item, lang) for item in not_run]
    body.append(f'<h2>{esc(say("items", lang))}</h2><div class="scroll"><table id="items">')
    for item in result.items:
        body.append(
            f'<tr><td class="pa-idcol">{item_id(item.id)}</td><td class="{esc(item.status)} pa-nowrap">{esc(status_word(item.status, lang))}</td>'
            f"<td>{item.score:g}/{item.weight:g}</td><td>{esc(item.title.get(lang))}</td></tr>"
        )
    body.append("</table></div>")
    if result.output_excerpt:
        body.append(f'<details><summary>{esc(say("output", lang))}</summary><pre>{esc(result.output_excerpt)}</pre></details>')
    return "".join(body) + _footer(result, lang)


def fragment(result: GradeResult, lang: str, numbering: str = "order", todos: Sequence[str] = ()) -> str:
    """The card alone, styles included and scoped: what a notebook shows inline.  `todos`: the
    TODOs a check was limited to (grader.check("todo3")): the total is their points."""

    def draw(clean: GradeResult) -> str:
        lang_attr = "zh-CN" if lang == "zh" else "en"
        return f'<div class="pa-card" lang="{lang_attr}"><style>{CARD_STYLE}</style>{_card(clean, lang, numbering, todos)}</div>'

    return fit(draw, utf8_size, result)


def render(result: GradeResult, lang: str) -> str:
    """The scorecard as a page of its own, under about 1 MiB whatever the submission did."""

    def draw(clean: GradeResult) -> str:
        title = f"{say('scorecard', lang)}{colon(lang)}{clean.shown_name}"
        return page(title, f'<div class="pa-card">{_card(clean, lang, "order")}</div>', lang, CARD_STYLE)

    return fit(draw, utf8_size, result)
