"""What a submission did to the grader's own machinery in its worker, said and paid for.

The worker's audit hook (grader/sandbox/hook.py) denies, at the call, every operation through
which Python code reaches the grader's objects or the process's memory, and lists each one; the
judge refuses any frame on a grader thread's connection that the grader thread did not sign
(protocol.Forged).  Both come here as the worker's lists, `[kind, detail, where, while the cells
ran, in the grader thread]`, with the scope they happened in: "cells" (the notebook's run, from
which every session is forked), or the item, TODO (a survey) or "given" whose session it was.

Each becomes a `Tampering` record on the result: on every scorecard, in results.json, the CSV and
the dashboard.  What it costs is `[integrity] tamper` in grader/config.toml:

- "zero_items" (the default): the items whose evidence it could have changed get no points.  A
  denied operation changed nothing (it raised before it reached anything), so it costs nothing
  by itself, nor did a shared file grown past its end ("grown": read in older results only; the
  judge's files are sealed memfds now, which cannot grow); a frame forged on the grader's connection, or the grader's code in the worker
  found broken where it cannot fail ("broken": its memory written), or a torch operator it runs
  given a kernel of the submission's ("kernel": torch.library), could have changed what that
  session reported, so the items graded with that session (every item, if it happened while
  the cells ran) get no points;
- "zero_all": any of it, denied or not, and the whole grading gets no points (as an import of
  the answer key does: [integrity] zero_on_flag);
- "flag": listed, never a point taken.
"""

from __future__ import annotations

from typing import Any

from grader.results import FAILED, PASSED, Failure, ItemResult, Tampering, Text

POLICIES = ("zero_items", "zero_all", "flag")
KINDS = ("gc", "frames", "frame", "code", "trace", "audit", "memory", "forged", "broken", "grown", "kernel")
MAX_RECORDS = 50

WHAT = {
    "gc": ("{detail}() 被拒绝：它能拿到评分器自己的对象", "{detail}() denied: it reaches the grader's own objects"),
    "frames": ("sys._current_frames() 被拒绝：它能拿到评分器线程的帧", "sys._current_frames() denied: it reaches the grader thread's frames"),
    "frame": ("取评分器代码的帧（{detail}）被拒绝", "reaching a frame of the grader's code ({detail}) denied"),
    "code": ("读取或改写评分器函数的代码（{detail}）被拒绝", "reading or replacing the code of the grader's functions ({detail}) denied"),
    "trace": ("{detail}() 被拒绝：跟踪或性能分析函数（%prun、cProfile 也会设置）能改写任何帧的局部变量，包括评分器的",
              "{detail}() denied: a trace or profile function (%prun and cProfile set one) can rewrite any frame's locals, the grader's too"),
    "audit": ("{detail} 被拒绝：审计钩子及其状态只属于评分器（新的审计钩子会拿到评分器的对象）",
              "{detail} denied: the audit hook and its state are the grader's alone (a new audit hook would be handed the grader's objects)"),
    "memory": ("读写进程内存（{detail}）被拒绝", "reading or writing the process's memory ({detail}) denied"),
    "forged": ("在评分器的连接上写入了不是评分器写的数据：该会话的答复不可信，其评分的项目不计分",
               "wrote on the grader's connection a frame the grader did not write: that session's replies cannot be taken, and the items it graded get no points"),
    "grown": ("把评分器与它共享的文件写长到末尾之外（{detail}）：已截回；这会占用其他评分也看得到的磁盘空间",
              "wrote past the end of a file the judge shares with it ({detail}): cut back; it takes disk space other gradings can see"),
    "kernel": ("替换了评分器线程要用的 torch 算子的内核（{detail}，torch.library）：评分器读到的可能不是真实结果；该会话评分的项目不计分",
               "replaced the kernel of a torch operator the grader's thread uses ({detail}, torch.library): what the grader read may not be what was there, and the items that session graded get no points"),
    "broken": ("评分器在被评分进程中的代码在不可能失败的地方失败了（{detail}）：它被改动过（改写了内存？）；该会话评分的项目不计分",
               "the grader's own code in the graded process failed where it cannot fail ({detail}): it was changed (its memory written?), and the items that session graded get no points"),
}


def collect(cells: list[Any], sessions: list[tuple[str, Any]]) -> list[Tampering]:
    """Records from the worker's lists: those of the cells' run (`cells`) and of each session
    (`sessions`: (scope, list)); malformed entries (the worker's word) are dropped, the same
    operation at the same place kept once, with every scope it happened in."""
    records: dict[tuple[str, str, str], Tampering] = {}
    for scope, event in [("cells", e) for e in cells] + list(sessions):
        if not isinstance(event, list) or len(event) < 5 or event[0] not in KINDS:
            continue
        kind, detail, where = event[0], str(event[1])[:200], str(event[2])[:300]
        scope = "cells" if event[3] is True else str(scope)[:100]  # listed by a session, done while the cells ran
        record = records.get((kind, detail, where))
        if record is None:
            if len(records) >= MAX_RECORDS:
                continue
            record = records[(kind, detail, where)] = Tampering(kind, detail, where, [], denied=kind not in ("forged", "broken", "kernel"), message=Text("", ""))
        if scope not in record.scopes:
            record.scopes.append(scope)
    for record in records.values():
        record.message = _message(record)
    return list(records.values())


def _message(record: Tampering) -> Text:
    what_zh, what_en = (s.format(detail=record.detail) for s in WHAT[record.kind])
    at_zh, at_en = _where(record.where)
    when_zh = "运行代码单元时" if "cells" in record.scopes else f"评分 {', '.join(record.scopes)} 时"
    when_en = "while the cells ran" if "cells" in record.scopes else f"while grading {', '.join(record.scopes)}"
    return Text(f"{at_zh}（{when_zh}）：{what_zh}", f"{at_en} ({when_en}): {what_en}")


def _where(where: str) -> tuple[str, str]:
    cell, _, line = where.rpartition(":")
    if cell.startswith("<cell ") and cell.endswith(">") and line.isdigit():
        index = cell[6:-1]
        return f"第 {index} 个代码单元第 {line} 行", f"code cell {index}, line {line}"
    if where:
        return where, where
    return "提交的代码", "the submission"


def apply(items: list[ItemResult], records: list[Tampering], policy: str) -> list[ItemResult]:
    """The items, with those the policy takes points from failed (each record says which)."""
    if policy not in POLICIES:
        policy = "zero_items"
    costly = records if policy == "zero_all" else [r for r in records if not r.denied] if policy == "zero_items" else []
    if not costly:
        return items
    out = []
    for item in items:
        cause = next((r for r in costly if policy == "zero_all" or any(_covers(scope, item) for scope in r.scopes)), None)
        if cause is None or item.status != PASSED:
            out.append(item)
            continue
        cause.cost.append(item.id)
        failure = Failure(
            "integrity",
            Text(f"本项不计分：{cause.message.zh}", f"no credit for this item: {cause.message.en}"),
            actual=f"{cause.kind}: {cause.detail}",
        )
        out.append(ItemResult(item.id, item.todo, item.title, item.weight, FAILED, failure, item.examples, item.seconds,
                              item.exercised, item.random_cases))
    return out


def _covers(scope: str, item: ItemResult) -> bool:
    """Whether evidence gathered in `scope` (a session's) counted for `item`."""
    return scope in ("cells", item.id, item.todo)


def summary(records: list[Tampering], lang: str) -> str:
    """A short line for a table cell (the CSV's and the dashboard's): how many, and their kinds."""
    if not records:
        return ""
    kinds = sorted({r.kind for r in records})
    costly = sum(1 for r in records if r.cost)
    if lang == "zh":
        return f"{len(records)} 次（{', '.join(kinds)}）" + (f"，{costly} 次使项目不计分" if costly else "")
    return f"{len(records)} ({', '.join(kinds)})" + (f", {costly} cost points" if costly else "")
