"""The lab's picture: a stacked area over time per policy (where the pool's slots are, step by
step, with the running requests as a line), and bars for a block-size sweep.

Self-contained SVG (its own style, no script, nothing fetched), drawn like the scorecards'
pictures (grader/report/pictures.py); `lab_html` puts it in a page with the figures.
"""

from __future__ import annotations

from html import escape
from typing import Any

from grader.kvlab.lab import LabResult
from grader.kvlab.simulate import Timeline
from grader.kvlab.words import COLOURS, PARTS, describe, headline, pct, table, w

WIDTH = 760
LEFT, RIGHT = 58, 46  # room for the axes' labels
PANEL_H, GAP = 112, 46
STYLE = (
    "text{font:12px system-ui,-apple-system,'Segoe UI','Noto Sans CJK SC','PingFang SC',sans-serif;fill:#1d2430}"
    ".pa-small{font-size:11px;fill:#5f6b7a}.pa-label{font-weight:600}.pa-axis{stroke:#7b8694;stroke-width:1}"
    ".pa-grid{stroke:#e4e7eb;stroke-width:1}.pa-running{fill:none;stroke:#1d2430;stroke-width:1.4}"
    ".pa-mark{stroke:#1d2430;stroke-width:1;stroke-dasharray:4 3}.pa-note{paint-order:stroke;stroke:#fff;stroke-width:3px}"
)


def esc(value: object) -> str:
    return escape(str(value), quote=True)


def _layers(line: Timeline, i: int) -> dict[str, int]:
    return {
        "token": line.token[i],
        "tail": line.tail[i],
        "later": line.reserved[i] - line.never[i],
        "never": line.never[i],
        "leaked": line.leaked[i],
        "free": line.free[i],
    }


def _buckets(line: Timeline, span: int, width: int) -> list[tuple[float, dict[str, float], float]]:
    """(x, mean of each part, mean running) per pixel column that has recorded steps."""
    sums: dict[int, list[float]] = {}
    for i, step in enumerate(line.step):
        column = min(width - 1, step * width // max(span, 1))
        acc = sums.setdefault(column, [0.0] * (len(PARTS) + 2))
        for k, value in enumerate(_layers(line, i).values()):
            acc[k] += value
        acc[-2] += line.running[i]
        acc[-1] += 1
    out = []
    for column in sorted(sums):
        acc = sums[column]
        n = acc[-1]
        out.append((column + 0.5, {part: acc[k] / n for k, part in enumerate(PARTS)}, acc[-2] / n))
    return out


def _panel(name: str, run: Any, row: dict[str, Any], top: float, span: int, max_running: int, lang: str) -> list[str]:
    plot_w = WIDTH - LEFT - RIGHT
    pool = run.pool_slots
    out = [f'<g class="pa-policy" data-policy="{esc(name)}">']
    title = f"{w(name, lang)} · {w('token', lang)} {pct(row['token_state_fraction'])} · {w('running', lang)} {row['mean_running']:.1f}"
    out.append(f'<text x="{LEFT}" y="{top - 8}" class="pa-label">{esc(title)}</text>')
    for share in (0, 0.5, 1):
        y = top + PANEL_H * (1 - share)
        out.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{LEFT + plot_w}" y2="{y:.1f}" class="pa-grid"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" class="pa-small">{int(share * 100)}%</text>')
    columns = _buckets(run.timeline, span, plot_w)
    if columns:
        below = [0.0] * len(columns)
        for part in PARTS:
            above = [b + c[1][part] / pool for b, c in zip(below, columns, strict=True)]
            if any(a - b > 1e-9 for a, b in zip(above, below, strict=True)):
                upper = " ".join(f"{LEFT + c[0]:.1f},{top + PANEL_H * (1 - a):.1f}" for c, a in zip(columns, above, strict=True))
                lower = " ".join(f"{LEFT + c[0]:.1f},{top + PANEL_H * (1 - b):.1f}" for c, b in reversed(list(zip(columns, below, strict=True))))
                out.append(f'<polygon class="pa-part" data-part="{part}" points="{upper} {lower}" fill="{COLOURS[part]}"/>')
            below = above
        if max_running:
            points = " ".join(f"{LEFT + c[0]:.1f},{top + PANEL_H * (1 - c[2] / max_running):.1f}" for c in columns)
            out.append(f'<polyline class="pa-running" points="{points}"/>')
    busy = [step for step, waiting in zip(run.timeline.step, run.timeline.waiting, strict=True) if waiting]
    if busy:
        x = LEFT + plot_w * min(1.0, (busy[-1] + 1) / max(span, 1))
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + PANEL_H}" class="pa-mark"/>')
        anchor, dx = ("end", -3) if x > LEFT + plot_w * 0.8 else ("start", 3)
        out.append(f'<text x="{x + dx:.1f}" y="{top + 11}" text-anchor="{anchor}" class="pa-small pa-note">{esc(w("queue_empty", lang))}</text>')
    out.append(f'<line x1="{LEFT}" y1="{top + PANEL_H}" x2="{LEFT + plot_w}" y2="{top + PANEL_H}" class="pa-axis"/>')
    out.append(f'<text x="{WIDTH - RIGHT + 6}" y="{top + 4}" class="pa-small">{max_running}</text>')
    out.append(f'<text x="{WIDTH - RIGHT + 6}" y="{top + PANEL_H + 4}" class="pa-small">0</text>')
    if row.get("error"):
        message = row["error_zh"] if lang == "zh" else row["error"]
        out.append(f'<text x="{LEFT + 6}" y="{top + PANEL_H - 8}" class="pa-label" fill="#d9534f">{esc(message[:110])}</text>')
    out.append("</g>")
    return out


def _legend(top: float, lang: str) -> tuple[list[str], float]:
    out, x, y = [], LEFT, top
    for part in (*PARTS, "running"):
        label = w(part, lang)
        width = 24 + 7 * len(label) if lang == "en" else 24 + 12 * len(label)
        if x + width > WIDTH - 10:
            x, y = LEFT, y + 18
        if part == "running":
            out.append(f'<line x1="{x}" y1="{y + 7}" x2="{x + 14}" y2="{y + 7}" class="pa-running"/>')
        else:
            out.append(f'<rect x="{x}" y="{y}" width="14" height="14" fill="{COLOURS[part]}" stroke="#7b8694"/>')
        out.append(f'<text x="{x + 18}" y="{y + 12}" class="pa-small">{esc(label)}</text>')
        x += width
    return out, y + 18


def _sweep(rows: list[dict[str, Any]], top: float, lang: str) -> tuple[list[str], float]:
    """Two bar charts side by side: the pool's parts per block size, and the block tables' length."""
    out = [f'<text x="{LEFT}" y="{top}" class="pa-label">{esc(w("sweep", lang))}</text>']
    chart_h, half = 130, (WIDTH - LEFT - RIGHT) // 2
    base = top + 40 + chart_h
    slot = (half - 30) / max(len(rows), 1)
    bar = min(34.0, slot * 0.7)
    out.append(f'<text x="{LEFT}" y="{top + 16}" class="pa-small">{esc(w("share", lang))}</text>')
    longest = max((r["mean_table_length"] or 0 for r in rows), default=0) or 1
    right = LEFT + half + 30
    out.append(f'<text x="{right}" y="{top + 16}" class="pa-small">{esc(w("table_len", lang))}</text>')
    for i, row in enumerate(rows):
        x = LEFT + i * slot + (slot - bar) / 2
        below = 0.0
        shares = {"token": row["token_state_fraction"], "tail": row["tail_waste_fraction"], "leaked": row["leaked_fraction"], "free": row["free_fraction"]}
        for part, share in shares.items():
            if share > 0:
                y = base - chart_h * (below + share)
                out.append(f'<rect class="pa-bar" data-block-size="{row["block_size"]}" data-part="{part}" x="{x:.1f}" y="{y:.1f}" '
                           f'width="{bar:.1f}" height="{chart_h * share:.1f}" fill="{COLOURS[part]}"><title>{esc(w(part, lang))}: {pct(share)}</title></rect>')
            below += share
        out.append(f'<text x="{x + bar / 2:.1f}" y="{base + 14}" text-anchor="middle" class="pa-small">{row["block_size"]}</text>')
        out.append(f'<text x="{x + bar / 2:.1f}" y="{base - chart_h * min(1.0, below) - 4:.1f}" text-anchor="middle" class="pa-small">{pct(row["token_state_fraction"])}</text>')
        length = row["mean_table_length"] or 0
        x2 = right + i * slot + (slot - bar) / 2
        h = chart_h * length / longest
        out.append(f'<rect class="pa-bar" data-block-size="{row["block_size"]}" data-part="table" x="{x2:.1f}" y="{base - h:.1f}" width="{bar:.1f}" height="{h:.1f}" fill="#4a7bd0"/>')
        out.append(f'<text x="{x2 + bar / 2:.1f}" y="{base - h - 4:.1f}" text-anchor="middle" class="pa-small">{length:.0f}</text>')
        out.append(f'<text x="{x2 + bar / 2:.1f}" y="{base + 14}" text-anchor="middle" class="pa-small">{row["block_size"]}</text>')
    for x in (LEFT, right):
        out.append(f'<line x1="{x}" y1="{base}" x2="{x + half - 30}" y2="{base}" class="pa-axis"/>')
        out.append(f'<text x="{x + (half - 30) / 2:.0f}" y="{base + 30}" text-anchor="middle" class="pa-small">{esc(w("block_size", lang))}</text>')
    return out, base + 40


def _wrap(text: str, width: int) -> list[str]:
    """Lines of at most about `width` characters, broken after a separator."""
    lines, line = [], ""
    for piece in text.replace("; ", ";\0").replace("；", "；\0").replace("，", "，\0").split("\0"):
        if line and len(line) + len(piece) > width:
            lines.append(line.rstrip())
            line = ""
        line += piece + (" " if piece.endswith(";") else "")
    return [*lines, line.rstrip()] if line else lines


def lab_svg(result: LabResult, lang: str = "en") -> str:
    summary = result.summary()
    runs = result.runs
    span = max((run.timeline.step[-1] + 1 for run in runs.values() if len(run.timeline)), default=1)
    max_running = max((max(run.timeline.running, default=0) for run in runs.values()), default=0)
    body: list[str] = [f'<text x="{LEFT}" y="20" class="pa-label">{esc(w("title", lang))}</text>']
    for i, words in enumerate(_wrap(describe(summary, lang), 105 if lang == "en" else 60)[:3]):
        body.append(f'<text x="{LEFT}" y="{38 + 15 * i}" class="pa-small">{esc(words)}</text>')
    top = 100.0
    for name, run in runs.items():
        body += _panel(name, run, summary["policies"][name], top, span, max_running, lang)
        top += PANEL_H + GAP
    axis_y = top - GAP + 14
    body.append(f'<text x="{LEFT}" y="{axis_y + 4}" class="pa-small">0</text>')
    body.append(f'<text x="{WIDTH - RIGHT}" y="{axis_y + 4}" text-anchor="end" class="pa-small">{span} {esc(w("step", lang))}</text>')
    legend, top = _legend(axis_y + 16, lang)
    body += legend
    top += 24
    if summary["sweep"]:
        bars, top = _sweep(summary["sweep"], top, lang)
        body += bars
    height = int(top + 10)
    return (f'<svg class="pa-picture pa-kv-lab" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" role="img" '
            f'aria-label="{esc(w("title", lang))}" xmlns="http://www.w3.org/2000/svg"><style>{STYLE}</style>'
            f'<rect width="{WIDTH}" height="{height}" fill="#fff"/>{"".join(body)}</svg>\n')


def lab_html(result: LabResult, lang: str = "en") -> str:
    summary = result.summary()
    rows = "\n".join(esc(line) for line in table(summary, lang))
    return (
        f'<!DOCTYPE html>\n<html lang="{"zh-CN" if lang == "zh" else "en"}"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{esc(w("title", lang))}</title>'
        "<style>body{font:15px/1.5 system-ui,-apple-system,'Segoe UI','Noto Sans CJK SC','PingFang SC',sans-serif;"
        "margin:0;background:#f6f7f9;color:#1d2430}main{max-width:980px;margin:0 auto;padding:24px}"
        "pre{background:#fff;border:1px solid #e4e7eb;border-radius:6px;padding:12px;overflow-x:auto;font-size:13px}"
        ".pa-picture{display:block;max-width:100%;height:auto;border:1px solid #e4e7eb;border-radius:6px}</style></head>"
        f"<body><main><h1>{esc(w('title', lang))}</h1><p>{esc(headline(summary, lang))}</p>"
        f"{lab_svg(result, lang)}<pre>{rows}</pre></main></body></html>\n"
    )
