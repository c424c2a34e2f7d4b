"""The lab's words in both languages, its colours, and its figures as text for a terminal."""

from __future__ import annotations

from typing import Any

# Colours of the parts of the pool (the scorecards' palette: grader/report/pictures.py).
PARTS = ("token", "tail", "later", "never", "leaked", "free")  # bottom to top of a stacked area
COLOURS = {
    "token": "#2f9e5b",
    "tail": "#9b59b6",
    "later": "#e0a030",
    "never": "#d35400",
    "leaked": "#d9534f",
    "free": "#c9ced6",
}

WORDS = {
    "title": ("KV Cache 利用率：同一批请求，四种显存策略", "KV-cache utilisation: one trace, four memory policies"),
    "token": ("存着 token 的 K/V", "holding token states (K/V)"),
    "tail": ("块内尾部空位", "empty slots in a request's last block"),
    "later": ("已预留，之后才会用到", "reserved, used by later tokens"),
    "never": ("已预留，永远用不到", "reserved, never used"),
    "leaked": ("丢失（既不空闲也不在任何块表中）", "lost (neither free nor in any block table)"),
    "free": ("空闲", "free"),
    "static": ("静态预留 max_model_len", "static: reserve max_model_len"),
    "pow2": ("预留 2 的幂（真实长度向上取整）", "reserve the next power of two"),
    "oracle": ("预留真实最终长度（预知）", "oracle: reserve the true final length"),
    "paged": ("分页（块表）", "paging (block tables)"),
    "running": ("运行中的请求", "running requests"),
    "step": ("调度步", "step"),
    "queue_empty": ("队列清空", "queue empties"),
    "sweep": ("块大小扫描（池的大小不变）", "block-size sweep (same pool)"),
    "table_len": ("平均块表长度（项 / 请求）", "mean block-table length (entries per request)"),
    "share": ("池中占比（忙碌时段平均）", "share of the pool (busy steps)"),
    "block_size": ("块大小", "block size"),
}


def w(key: str, lang: str) -> str:
    zh, en = WORDS[key]
    return zh if lang == "zh" else en


def pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def headline(summary: dict[str, Any], lang: str) -> str:
    """One sentence: paging against static reservation."""
    policies = summary["policies"]
    paged, static = policies.get("paged"), policies.get("static")
    if not paged or not static or paged.get("error"):
        return ""
    ratio = paged["mean_running"] / static["mean_running"] if static["mean_running"] else 0.0
    if lang == "zh":
        return (f"分页时 {pct(paged['token_state_fraction'])} 的 KV Cache 存着 token，静态预留只有 "
                f"{pct(static['token_state_fraction'])}；同样的显存同时运行 {ratio:.1f} 倍的请求"
                f"（{paged['mean_running']:.1f} 对 {static['mean_running']:.1f}）。")
    return (f"Paging keeps {pct(paged['token_state_fraction'])} of the KV cache holding token states, static reservation "
            f"{pct(static['token_state_fraction'])}: the same memory runs {ratio:.1f}x the requests at once "
            f"({paged['mean_running']:.1f} against {static['mean_running']:.1f}).")


def describe(summary: dict[str, Any], lang: str) -> str:
    trace, pool = summary["trace"], summary["pool"]
    if lang == "zh":
        return (f"请求序列 {trace['name']}：{trace['requests']} 个请求，prompt 平均 {trace['mean_prompt']:.0f}、输出平均 "
                f"{trace['mean_output']:.0f} 个 token；池 {pool['blocks']} 块 × {pool['block_size']} = {pool['slots']} 个槽位；"
                f"max_model_len {summary['max_model_len']}，最多同时运行 {summary['max_running']} 个；分配器：{summary['allocator']}")
    return (f"trace {trace['name']}: {trace['requests']} requests, prompts {trace['mean_prompt']:.0f} and outputs "
            f"{trace['mean_output']:.0f} tokens on average; pool {pool['blocks']} blocks x {pool['block_size']} = "
            f"{pool['slots']} slots; max_model_len {summary['max_model_len']}, at most {summary['max_running']} running; "
            f"allocator: {summary['allocator']}")


def table(summary: dict[str, Any], lang: str) -> list[str]:
    """The figures as lines of text for a terminal."""
    head = ("policy", "tokens", "reserved", "never", "tail", "lost", "free", "running", "steps", "preempted")
    lines = [describe(summary, lang), "", "  ".join(f"{h:>9}" for h in head)]
    for name, row in summary["policies"].items():
        lines.append(_row(name, row))
        if row.get("error"):
            lines.append(f"{'':>9}  {row['error_zh'] if lang == 'zh' else row['error']}")
    if summary["sweep"]:
        lines += ["", w("sweep", lang), "  ".join(f"{h:>9}" for h in ("block", "tokens", "tail", "free", "table", "running", "steps", "preempted"))]
        for row in summary["sweep"]:
            table_len = "-" if row["mean_table_length"] is None else f"{row['mean_table_length']:.1f}"
            cells = (str(row["block_size"]), pct(row["token_state_fraction"]), pct(row["tail_waste_fraction"]), pct(row["free_fraction"]),
                     table_len, f"{row['mean_running']:.1f}", str(row["steps"]), str(row["preemptions"]))
            lines.append("  ".join(f"{c:>9}" for c in cells))
    for note in summary.get("sweep_skipped", []):
        lines.append(f"  ({note})")
    line = headline(summary, lang)
    return [*lines, "", line] if line else lines


def _row(name: str, row: dict[str, Any]) -> str:
    cells = (name, pct(row["token_state_fraction"]), pct(row["reserved_fraction"]), pct(row["never_used_fraction"]),
             pct(row["tail_waste_fraction"]), pct(row["leaked_fraction"]), pct(row["free_fraction"]),
             f"{row['mean_running']:.1f}", str(row["steps"]), str(row["preemptions"]))
    return "  ".join(f"{c:>9}" for c in cells)
