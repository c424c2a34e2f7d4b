"""The student's scorecard as one self-contained HTML page (no CDN, no script, opens offline).

Every string is passed through esc(); on top of that the page's Content-Security-Policy
allows no script at all, so even a missed escape could not run student code in a browser.
"""

from __future__ import annotations

import base64
import hashlib
from html import escape
from pathlib import PurePath

from grader.report.labels import status_word, todo_name
from grader.report.markdown import FIELD_LIMIT, clip, say
from grader.results import FAILED, NOT_RUN, GradeResult, ItemResult

STYLE = """
body{font:15px/1.5 system-ui,-apple-system,"Segoe UI","Noto Sans CJK SC","PingFang SC",sans-serif;margin:0;background:#f6f7f9;color:#1d2430}
main{max-width:980px;margin:0 auto;padding:24px}
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #d9dde3;padding-bottom:.2em}
.total{font-size:2.4em;font-weight:700}.muted{color:#5f6b7a;font-size:.9em}
table{border-collapse:collapse;width:100%;background:#fff}th,td{padding:6px 8px;border-bottom:1px solid #e4e7eb;text-align:left;vertical-align:top}
.bar{background:#e4e7eb;border-radius:4px;height:12px;min-width:120px;overflow:hidden}.bar>span{display:block;height:100%;background:#2f9e5b}
.bar.low>span{background:#d9534f}.bar.mid>span{background:#e0a030}
.item{background:#fff;border:1px solid #e4e7eb;border-left:4px solid #d9534f;border-radius:6px;padding:10px 14px;margin:12px 0}
.item.item-not_run{border-left-color:#9aa4b1}
pre{background:#0f1720;color:#e6edf3;padding:10px;border-radius:6px;overflow:auto;white-space:pre-wrap;word-break:break-word}
code{background:#eef0f3;padding:0 4px;border-radius:3px;word-break:break-word}
.flag{background:#fff4e5;border:1px solid #f0c36d;padding:8px 12px;border-radius:6px;margin:8px 0}
.passed{color:#2f9e5b}.failed{color:#d9534f}.not_run{color:#7b8694}
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


def _item_card(item: ItemResult, lang: str) -> str:
    failure = item.failure
    parts = [
        f'<div class="item item-{esc(item.status)}" id="{esc(item.id)}">',
        f'<b class="{esc(item.status)}">{"✗" if item.status == FAILED else "–"} {esc(item.id)}</b> '
        f"({item.score:g}/{item.weight:g}) {esc(item.title.get(lang))}",
    ]
    if failure is not None:
        parts.append(f"<p>{esc(failure.message.get(lang))}</p>")
        if failure.expected or failure.actual:
            parts.append(
                f"<p>{esc(say('expected', lang))}: <code>{esc(failure.expected)}</code><br>"
                f"{esc(say('actual', lang))}: <code>{esc(failure.actual)}</code></p>"
            )
        if failure.repro:
            parts.append(f"<p>{esc(say('repro', lang))}:</p><pre>{esc(clip(failure.repro, FIELD_LIMIT, lang))}</pre>")
        if failure.traceback:
            parts.append(f"<details><summary>{esc(say('traceback', lang))}</summary><pre>{esc(clip(failure.traceback, FIELD_LIMIT, lang))}</pre></details>")
    parts.append("</div>")
    return "".join(parts)


def render(result: GradeResult, lang: str) -> str:
    name = PurePath(result.submission).name
    body = [f"<h1>{esc(say('scorecard', lang))}: {esc(name)}</h1>"]
    body.append(f'<div class="total" id="total">{result.score:g} / {result.max_score:g}</div>')
    not_run = [item for item in result.items if item.status == NOT_RUN]
    if not_run and result.error is None:
        body.append(f'<p class="muted">{esc(say("scaled", lang))}</p>')
    if result.error is not None:
        body.append(f'<p class="flag"><b>{esc(say("unreadable", lang))}</b>: {esc(result.error.message.get(lang))}</p>')
        return page(f"{say('scorecard', lang)}: {name}", "".join(body) + _footer(result, lang), lang)
    for flag in result.flags:
        body.append(f'<p class="flag">⚠️ <b>{esc(say("flags", lang))}</b>: {esc(flag.get(lang))}</p>')
    for note in result.notes:
        body.append(f'<p class="muted">{esc(note.get(lang))}</p>')
    rows = "".join(
        f"<tr><td>{esc(todo_name(todo, lang))}</td><td>{got:g} / {possible:g}</td><td>{bar(got, possible)}</td></tr>"
        for todo, (got, possible) in result.todo_scores().items()
    )
    body.append(f'<table id="todos"><tr><th>{esc(say("todo", lang))}</th><th>{esc(say("points", lang))}</th><th></th></tr>{rows}</table>')
    failed = [item for item in result.items if item.status == FAILED]
    if failed:
        body.append(f'<h2>{esc(say("failed_items", lang))} ({len(failed)})</h2>')
        body += [_item_card(item, lang) for item in failed]
    else:
        body.append(f'<p class="passed">✓ {esc(say("all_passed", lang))}</p>')
    if not_run:
        body.append(f'<h2>{esc(say("not_run_items", lang))}</h2>')
        body += [_item_card(item, lang) for item in not_run]
    body.append(f'<h2>{esc(say("items", lang))}</h2><table id="items">')
    for item in result.items:
        body.append(
            f'<tr><td><code>{esc(item.id)}</code></td><td class="{esc(item.status)}">{esc(status_word(item.status, lang))}</td>'
            f"<td>{item.score:g}/{item.weight:g}</td><td>{esc(item.title.get(lang))}</td></tr>"
        )
    body.append("</table>")
    broken = [cell for cell in result.cells if cell.status not in ("ok", "not_run")]
    if broken:
        body.append(f'<h2>{esc(say("cells", lang))}</h2>')
        for cell in broken:
            body.append(
                f'<div class="item" id="cell-{cell.index}"><b>{esc(say("cell", lang))} {cell.index}</b>: '
                f"<code>{esc(cell.error_type or cell.status)}</code> {esc(cell.message)}"
            )
            if cell.traceback:
                body.append(f"<pre>{esc(clip(cell.traceback, FIELD_LIMIT, lang))}</pre>")
            body.append("</div>")
    if result.output_excerpt:
        body.append(f'<details><summary>{esc(say("output", lang))}</summary><pre>{esc(clip(result.output_excerpt, FIELD_LIMIT, lang))}</pre></details>')
    return page(f"{say('scorecard', lang)}: {name}", "".join(body) + _footer(result, lang), lang)


def _footer(result: GradeResult, lang: str) -> str:
    return (
        f'<p class="muted">{esc(say("config", lang))} {esc(result.config_digest)} · {esc(say("device", lang))} {esc(result.device)}'
        f" · {esc(say('seconds', lang))} {result.seconds:.1f} s" + (f" · sha256 {esc(result.sha256[:12])}" if result.sha256 else "") + "</p>"
    )

