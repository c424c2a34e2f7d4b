"""Pictures of a failing state, from `Failure.picture` (schema in grader/results.py).

* "pool": the block pool before and after the failing call. Blocks are coloured by the
  request that holds them, free blocks are grey, a block held twice (or held and free) is
  split between its owners, a block neither free nor held is drawn empty with "?", and the
  block the code mishandled is outlined.  Each request's seq_len is written under its table
  (a change marked), and where the failing call found the pool broken already, the earlier
  call that first broke it is drawn above it, the same way.
* "attention": the error per (sequence, query head) as a heatmap against the tolerance.

Drawn as inline SVG for the HTML scorecard and `grader.check()`, and as a few lines of text
for the terminal. Pictures come from the judge but may also come from an imported file:
`normalise_picture` checks the schema and bounds the sizes; anything else draws nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from html import escape
from typing import Any

from grader.report.labels import plural

MAX_BLOCKS = 256  # a larger pool is not drawn (the checks use small pools)
MAX_OWNERS = 16
MAX_SEQS, MAX_HEADS = 16, 32  # cells of a heatmap (the checks use a few sequences and heads)
PALETTE = ("#4a7bd0", "#e0a030", "#2f9e5b", "#9b59b6", "#17a2b8", "#d35400", "#8e6c4a", "#c2185b")
FREE, LOST, BAD = "#c9ced6", "#ffffff", "#d9534f"

WORDS = {
    "before": ("调用前", "before"),
    "after": ("调用后", "after"),
    "free": ("空闲", "free"),
    "lost": ("丢失（既不空闲也不属于任何请求）", "lost (neither free nor held)"),
    "shared": ("重复（同时在两处）", "in two places at once"),
    "mishandled": ("出错的块", "the block the code mishandled"),
    "pool": ("块池", "block pool"),
    "head": ("query 头", "query head"),
    "seq": ("序列", "sequence"),
    "tolerance": ("容差", "tolerance"),
    "within": ("在容差内", "within tolerance"),
    "beyond": ("超出容差", "beyond tolerance"),
    "not_finite": ("NaN 或 inf", "NaN or inf"),
    "worst": ("最大误差", "worst"),
    "error_of": ("误差", "error"),
    "earlier": ("① 最先出错的调用", "① the call that first went wrong"),
    "this_call": ("② 出错被发现的调用", "② the call where it was found"),
    "changed": ("改变", "changed"),
    "unchanged": ("调用前后", "before = after"),
}


def w(key: str, lang: str) -> str:
    zh, en = WORDS[key]
    return zh if lang == "zh" else en


def esc(value: object) -> str:
    return escape(str(value), quote=True)


# --- the schema --------------------------------------------------------------------------

def _ints(raw: Any, limit: int) -> list[int] | None:
    if not isinstance(raw, (list, tuple)):
        return None
    out = [v for v in list(raw)[:limit] if type(v) is int and abs(v) < 1 << 31]
    return out if len(out) == min(len(raw), limit) else None


def _state(raw: Any, safe_line: Callable[[object, int], str]) -> dict[str, Any] | None:
    if not isinstance(raw, dict):
        return None
    free = _ints(raw.get("free", []), 4 * MAX_BLOCKS)
    tables_raw = raw.get("tables", {})
    if free is None or not isinstance(tables_raw, dict):
        return None
    tables: dict[str, list[int]] = {}
    for name, blocks in list(tables_raw.items())[:MAX_OWNERS]:
        ints = _ints(blocks, 4 * MAX_BLOCKS)
        if ints is None:
            return None
        tables[safe_line(name, 40) or "?"] = ints  # "" stands for the free list below
    lens_raw = raw.get("lens", {})
    if not isinstance(lens_raw, dict):
        return None
    lens = {safe_line(name, 40) or "?": n for name, n in list(lens_raw.items())[:MAX_OWNERS] if type(n) is int and abs(n) < 1 << 62}
    return {"free": free, "tables": tables, "lens": lens}


def _call(raw: Any, safe_line: Callable[[object, int], str]) -> dict[str, Any] | None:
    """One call's states (before and/or after), its step and the blocks it mishandled."""
    if not isinstance(raw, dict):
        return None
    states = {key: _state(raw.get(key), safe_line) for key in ("before", "after") if key in raw}
    if not states or any(s is None for s in states.values()):
        return None
    highlight = _ints(raw.get("highlight", []), 16)
    return {"step": safe_line(raw.get("step", ""), 200), **states, "highlight": highlight or []}


def _error(value: Any) -> float | None:
    if type(value) not in (int, float) or not math.isfinite(value):
        return None  # NaN or inf in the output: drawn as such
    return float(f"{abs(value):.4g}")


def normalise_picture(raw: Any, safe_line: Callable[[object, int], str]) -> dict[str, Any] | None:
    """The picture if it follows the schema (bounded, and its strings made safe by `safe_line`,
    sanitize.py's: passed in, so that the drawing room does not depend on the sanitizing one,
    which depends on it), else None."""
    if not isinstance(raw, dict):
        return None
    if raw.get("kind") == "pool":
        n = raw.get("num_blocks")
        if type(n) is not int or not 0 < n <= MAX_BLOCKS:
            return None
        call = _call(raw, safe_line)
        if call is None:
            return None
        earlier = _call(raw["earlier"], safe_line) if "earlier" in raw else None
        return {"kind": "pool", "num_blocks": n, **call, **({"earlier": earlier} if earlier else {})}
    if raw.get("kind") == "attention":
        rows = raw.get("errors")
        tol = raw.get("tolerance")
        if not isinstance(rows, list) or not rows or type(tol) not in (int, float) or not (math.isfinite(tol) and tol > 0):
            return None
        if not all(isinstance(r, list) and r for r in rows[:MAX_SEQS]):
            return None
        width = min(min(len(r) for r in rows[:MAX_SEQS]), MAX_HEADS)
        errors = [[_error(v) for v in r[:width]] for r in rows[:MAX_SEQS]]
        worst = _ints(raw.get("worst"), 2)
        if not worst or len(worst) != 2 or not (0 <= worst[0] < len(errors) and 0 <= worst[1] < width):
            worst = None
        return {"kind": "attention", "errors": errors, "tolerance": float(tol), "dtype": safe_line(raw.get("dtype", ""), 20), "worst": worst}
    return None


# --- the block pool -------------------------------------------------------------------------

def _panels(call: dict[str, Any]) -> list[str]:
    """The states drawn for a call: before and after, or one panel where the call changed nothing."""
    if "before" in call and "after" in call and call["before"] == call["after"]:
        return ["unchanged"]
    return [key for key in ("before", "after") if key in call]


def _state_of(call: dict[str, Any], panel: str) -> dict[str, Any]:
    return call["before"] if panel == "unchanged" else call[panel]


def _calls(picture: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The calls drawn, in order: the earlier one that first broke the pool (if any), then the failing one."""
    if picture.get("earlier"):
        return [("earlier", picture["earlier"]), ("this_call", picture)]
    return [("", picture)]


def _owners(picture: dict[str, Any]) -> dict[str, str]:
    names: list[str] = []
    for _, call in _calls(picture):
        for key in ("before", "after"):
            for name in (call.get(key) or {}).get("tables", {}):
                if name not in names:
                    names.append(name)
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(names)}


def _holders(state: dict[str, Any], block: int) -> list[str]:
    """Who holds `block`: request names, and "" for the free list (each time it appears)."""
    out = [name for name, table in state["tables"].items() for b in table if b == block]
    return out + ["" for b in state["free"] if b == block]


def _requests(state: dict[str, Any], before: dict[str, Any] | None) -> list[tuple[str, bool]]:
    """Each request as "r0: [0, 1] seq_len=4", and whether it changed since `before` (None: not
    compared; a change reads "seq_len 3 → 4").  A request holding no blocks is listed only where it changed."""
    lens = state.get("lens", {})
    old_lens = (before or {}).get("lens", {})
    old_tables = (before or {}).get("tables", {})
    out = []
    for name in dict.fromkeys([*state["tables"], *lens]):
        table = state["tables"].get(name, [])
        moved_len = before is not None and name in lens and old_lens.get(name) != lens[name]
        moved_table = before is not None and old_tables.get(name, []) != table
        if not table and not (moved_len or moved_table):
            continue
        shown = f"{name}: {old_tables.get(name, [])} → {table}" if moved_table else f"{name}: {table}"
        if moved_len:
            shown += f" seq_len {old_lens.get(name, '?')} → {lens[name]}"
        elif name in lens:
            shown += f" seq_len={lens[name]}"
        out.append((shown, moved_len or moved_table))
    return out


def _state_lines(state: dict[str, Any], before: dict[str, Any] | None) -> list[tuple[str, bool]]:
    """What the summary and the changed line say: the free list where it changed, then each request."""
    free = _free_change(state, before)
    return [*([(free, True)] if free else []), *_requests(state, before)]


def _free_change(state: dict[str, Any], before: dict[str, Any] | None) -> str | None:
    """"free_blocks [0, 1, 3] → [3, 1, 0]" where the free list changed (its order too: the pool
    pictures, which show where blocks are, cannot show that)."""
    if before is None or before.get("free") == state.get("free"):
        return None
    return f"free_blocks {before.get('free')} → {state.get('free')}"


def _block_svg(x: float, y: float, size: float, holders: list[str], colours: dict[str, str], block: int, numbered: bool) -> str:
    fills = [colours.get(h, FREE) if h else FREE for h in holders] or [LOST]
    parts = []
    if len(fills) == 1:
        parts.append(f'<rect x="{x}" y="{y}" width="{size}" height="{size}" rx="3" fill="{fills[0]}" stroke="#7b8694"/>')
    else:  # held twice, or held and free: one slice per place it is in
        slice_w = size / len(fills)
        for i, fill in enumerate(fills):
            parts.append(f'<rect x="{x + i * slice_w:.1f}" y="{y}" width="{slice_w:.1f}" height="{size}" fill="{fill}"/>')
        parts.append(f'<rect x="{x}" y="{y}" width="{size}" height="{size}" rx="3" fill="none" stroke="{BAD}" stroke-width="2" stroke-dasharray="3 2"/>')
    label = "?" if not holders else str(block) if numbered else ""
    if label:  # white on a colour; a lost block is white itself, so its "?" is dark
        kind = "pa-num pa-lost" if not holders else "pa-num"
        parts.append(f'<text x="{x + size / 2}" y="{y + size / 2 + 4}" text-anchor="middle" class="{kind}">{label}</text>')
    where = ", ".join(h or "free" for h in holders) or "lost"
    return f'<g class="pa-block" data-block="{block}" data-holders="{esc(where)}"><title>{block}: {esc(where)}</title>{"".join(parts)}</g>'


def _summary_svg(x: float, y: float, state: dict[str, Any], before: dict[str, Any] | None, free: int, lang: str) -> str:
    """Free blocks and each request's table and seq_len; what changed since `before` in red."""
    spans = [f"<tspan>{esc(plural(free, 'free_block', lang))}</tspan>"]
    used = len(spans[0])
    for text, changed in _state_lines(state, before):
        if used > 400:
            break
        style = ' class="pa-changed" fill="#d9534f" font-weight="600"' if changed else ""
        spans.append(f"<tspan{style}>{esc(' · ' + text[:120])}</tspan>")
        used += len(text)
    return f'<text x="{x}" y="{y}" class="pa-small">{"".join(spans)}</text>'


def pool_svg(picture: dict[str, Any], lang: str) -> str:
    n = picture["num_blocks"]
    colours = _owners(picture)
    per_row = min(n, 16)
    rows = math.ceil(n / per_row)
    size, gap, left = 30, 4, 70
    panel_h = rows * (size + gap) + 26
    calls = _calls(picture)
    heights = [24 + len(_panels(call)) * panel_h for _, call in calls]
    legend_y = 4 + sum(heights)
    width = max(left + per_row * (size + gap) + 10, 520)
    height = legend_y + 24 * 3 + 10
    out = [
        f'<svg class="pa-picture pa-pool" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
        f'aria-label="{esc(w("pool", lang))}" xmlns="http://www.w3.org/2000/svg">'
    ]
    top_of_call = 0
    for (label, call), call_h in zip(calls, heights, strict=True):
        heading = f"{w(label, lang)}{'：' if lang == 'zh' else ': '}{call.get('step', '')}" if label else call.get("step", "")
        if heading:
            out.append(f'<text x="4" y="{top_of_call + 16}" class="pa-step">{esc(heading)}</text>')
        highlight = set(call.get("highlight") or [])
        for panel, key in enumerate(_panels(call)):
            state = _state_of(call, key)
            top = top_of_call + 28 + panel * panel_h
            free = sum(1 for b in range(n) if _holders(state, b) == [""])
            out.append(f'<text x="4" y="{top + size / 2 + 4}" class="pa-label">{esc(w(key, lang))}</text>')
            call_attr = f' data-call="{label}"' if label else ""
            out.append(f'<g class="pa-state" data-state="{key}"{call_attr}>')
            for block in range(n):
                x = left + (block % per_row) * (size + gap)
                y = top + (block // per_row) * (size + gap)
                out.append(_block_svg(x, y, size, _holders(state, block), colours, block, n <= 64))
                if block in highlight:
                    out.append(f'<rect class="pa-highlight" x="{x - 2}" y="{y - 2}" width="{size + 4}" height="{size + 4}" rx="4" fill="none" stroke="#111" stroke-width="3"/>')
            out.append("</g>")
            compared = call.get("before") if key == "after" else None
            out.append(_summary_svg(left, top + rows * (size + gap) + 12, state, compared, free, lang))
        top_of_call += call_h
    entries = [(colour, name) for name, colour in colours.items()] + [(FREE, w("free", lang))]
    x = 4
    for colour, name in entries:
        out.append(f'<rect x="{x}" y="{legend_y}" width="14" height="14" fill="{colour}" stroke="#7b8694"/><text x="{x + 18}" y="{legend_y + 12}" class="pa-small">{esc(name)}</text>')
        x += 30 + 7 * len(name)
    y2 = legend_y + 24
    out.append(f'<rect x="4" y="{y2}" width="14" height="14" fill="none" stroke="#111" stroke-width="3"/><text x="24" y="{y2 + 12}" class="pa-small">{esc(w("mishandled", lang))}</text>')
    out.append(f'<rect x="4" y="{y2 + 24}" width="14" height="14" fill="{LOST}" stroke="#7b8694"/><text x="24" y="{y2 + 36}" class="pa-small">? {esc(w("lost", lang))}</text>')
    out.append(f'<rect x="260" y="{y2 + 24}" width="14" height="14" fill="none" stroke="{BAD}" stroke-width="2" stroke-dasharray="3 2"/><text x="280" y="{y2 + 36}" class="pa-small">{esc(w("shared", lang))}</text>')
    out.append("</svg>")
    return "".join(out)


def pool_text(picture: dict[str, Any], lang: str) -> list[str]:
    """The pool as lines of text: one letter per request, "·" free, "?" lost, "!" held twice;
    then each request's table and seq_len where the call changed them."""
    n = picture["num_blocks"]
    letters = {name: chr(ord("A") + i % 26) for i, name in enumerate(_owners(picture))}
    lines = []
    for label, call in _calls(picture):
        if label:
            lines.append(f"{w(label, lang)}{'：' if lang == 'zh' else ': '}{call.get('step', '')}")
        highlight = set(call.get("highlight") or [])
        for key in _panels(call):
            marks = []
            for block in range(n):
                holders = _holders(_state_of(call, key), block)
                mark = "?" if not holders else "!" if len(holders) > 1 else "·" if holders == [""] else letters[holders[0]]
                marks.append(f"[{mark}]" if block in highlight else f" {mark} ")
            lines.append(f"{w(key, lang):>6}: {''.join(marks)}")
        if "before" in call and "after" in call:
            changed = [text for text, moved in _state_lines(call["after"], call["before"]) if moved]
            if changed:
                lines.append(f"{w('changed', lang):>6}: {'; '.join(changed)[:300]}")
    legend = ", ".join(f"{letter} = {name}" for name, letter in letters.items())
    lines.append(f"        {legend}{', ' if legend else ''}· = {w('free', lang)}, ? = {w('lost', lang)}, ! = {w('shared', lang)}, [ ] = {w('mishandled', lang)}")
    return lines


# --- attention error heatmap ----------------------------------------------------------------

def _heat(value: float | None, tol: float) -> str:
    if value is None:
        return "#222222"
    if value <= tol:
        share = 0.0 if value <= 0 else min(1.0, max(0.0, 1 + math.log10(value / tol) / 4))  # 1e-4·tol .. tol
        light = int(235 - 60 * share)
        return f"rgb({light - 40},{light},{light - 30})"
    share = min(1.0, math.log10(value / tol) / 6)  # tol .. 1e6·tol
    return f"rgb({230 - int(30 * share)},{int(170 - 150 * share)},{int(150 - 130 * share)})"


def attention_svg(picture: dict[str, Any], lang: str) -> str:
    errors, tol = picture["errors"], picture["tolerance"]
    seqs, heads = len(errors), len(errors[0])
    cell = max(12, min(32, 480 // max(heads, 1)))
    left, top = 80, 34
    grid_w, grid_h = heads * cell, seqs * cell
    width = max(left + grid_w + 20, left + 400 + 170)  # the grid, or the scale and its legend
    legend_y = top + grid_h + 34
    height = legend_y + 56
    worst = picture.get("worst")
    dtype = f" ({picture['dtype']})" if picture.get("dtype") else ""
    out = [
        f'<svg class="pa-picture pa-attention" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
        f'aria-label="{esc(w("error_of", lang))}" xmlns="http://www.w3.org/2000/svg">',
        f'<text x="{left}" y="14" class="pa-label">{esc(w("head", lang))} →</text>',
        f'<text x="4" y="{top + 12}" class="pa-label">{esc(w("seq", lang))} ↓</text>',
    ]
    for h in range(heads):
        if cell >= 18 or h % 4 == 0:
            out.append(f'<text x="{left + h * cell + cell / 2}" y="{top - 6}" text-anchor="middle" class="pa-small">{h}</text>')
    for s, row in enumerate(errors):
        out.append(f'<text x="{left - 6}" y="{top + s * cell + cell / 2 + 4}" text-anchor="end" class="pa-small">{s}</text>')
        for h, value in enumerate(row):
            x, y = left + h * cell, top + s * cell
            bad = value is None or value > tol
            shown = "NaN/inf" if value is None else f"{value:.3g}"
            out.append(
                f'<g class="pa-cell" data-seq="{s}" data-head="{h}" data-bad="{int(bad)}"><title>{esc(w("seq", lang))} {s}, {esc(w("head", lang))} {h}: '
                f'{esc(w("error_of", lang))} {shown}, {esc(w("tolerance", lang))} {tol:.3g}</title>'
                f'<rect x="{x}" y="{y}" width="{cell}" height="{cell}" fill="{_heat(value, tol)}" stroke="#fff"/>'
            )
            if bad and cell >= 16:  # not by colour alone
                out.append(f'<text x="{x + cell / 2}" y="{y + cell / 2 + 4}" text-anchor="middle" class="pa-mark">{"N" if value is None else "✗"}</text>')
            out.append("</g>")
    if worst:
        s, h = worst
        out.append(f'<rect class="pa-highlight" x="{left + h * cell - 1}" y="{top + s * cell - 1}" width="{cell + 2}" height="{cell + 2}" fill="none" stroke="#111" stroke-width="3"/>')
    # The scale: 1e-4·tol .. 1e6·tol on a log axis, with the tolerance marked.
    scale_w = 400
    steps = 40
    for i in range(steps):
        value = tol * 10 ** (-4 + 10 * (i + 0.5) / steps)
        out.append(f'<rect x="{left + i * scale_w / steps:.1f}" y="{legend_y}" width="{scale_w / steps + 0.5:.1f}" height="12" fill="{_heat(value, tol)}"/>')
    mark = left + scale_w * 0.4
    out.append(f'<line class="pa-tolerance" x1="{mark}" y1="{legend_y - 6}" x2="{mark}" y2="{legend_y + 18}" stroke="#111" stroke-width="2"/>')
    out.append(f'<text x="{mark}" y="{legend_y - 9}" text-anchor="middle" class="pa-small">{esc(w("tolerance", lang))} {tol:.3g}{esc(dtype)}</text>')
    out.append(f'<text x="{left}" y="{legend_y + 30}" class="pa-small">← {esc(w("within", lang))}</text>')
    out.append(f'<text x="{left + scale_w}" y="{legend_y + 30}" text-anchor="end" class="pa-small">{esc(w("beyond", lang))} ✗ →</text>')
    out.append(f'<rect x="{left + scale_w + 16}" y="{legend_y}" width="12" height="12" fill="#222222"/><text x="{left + scale_w + 32}" y="{legend_y + 11}" class="pa-small">N = {esc(w("not_finite", lang))}</text>')
    out.append("</svg>")
    return "".join(out)


def attention_text(picture: dict[str, Any], lang: str) -> list[str]:
    """One row per sequence: "·" within tolerance, "▒" up to 100×, "█" beyond, "N" NaN/inf."""
    errors, tol = picture["errors"], picture["tolerance"]

    def mark(value: float | None) -> str:
        return "N" if value is None else "·" if value <= tol else "▒" if value <= 100 * tol else "█"

    lines = [f"{w('seq', lang)} {s:>2} │{''.join(mark(v) for v in row)}│" for s, row in enumerate(errors[:16])]
    bad = sum(1 for row in errors for v in row if v is None or v > tol)
    total = sum(len(row) for row in errors)
    summary = (
        f"{bad}/{total} 个 (序列, 头) 超出容差 {tol:.3g}" if lang == "zh" else f"{bad} of {total} (sequence, head) pairs beyond the tolerance {tol:.3g}"
    )
    if picture.get("worst"):
        s, h = picture["worst"]
        value = errors[s][h]
        shown = "NaN/inf" if value is None else f"{value:.3g}"
        summary += f"；{w('worst', lang)}：{w('seq', lang)} {s}，{w('head', lang)} {h} = {shown}" if lang == "zh" else f"; worst: sequence {s}, head {h} = {shown}"
    tol_word = w("tolerance", lang) if lang == "zh" else "tol"
    return [summary, *lines, f"· ≤ {tol_word}   ▒ ≤ 100×{tol_word}   █ > 100×{tol_word}   N = NaN/inf"]


def picture_svg(picture: dict[str, Any] | None, lang: str) -> str:
    if not picture:
        return ""
    return pool_svg(picture, lang) if picture["kind"] == "pool" else attention_svg(picture, lang)


def picture_text(picture: dict[str, Any] | None, lang: str) -> list[str]:
    if not picture:
        return []
    return pool_text(picture, lang) if picture["kind"] == "pool" else attention_text(picture, lang)
