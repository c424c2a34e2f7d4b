"""What an allocator call got wrong, said in both languages: the fields that differ, and no more.

A card's expected and actual (grader/results.py Failure) show the parts of the state a failing
call got wrong: `free_blocks`, each request's `seq_len` and `block_table`, compared field by
field, so that a decode that raised `seq_len` before its OOM shows `r0.seq_len=4` against
`r0.seq_len=5` and not two identical free lists.  Which blocks are out of place is said per
block.  Used by the judge's model of the allocator (grader/checks/pool.py).
"""

from __future__ import annotations

from collections import Counter
from itertools import chain
from typing import TYPE_CHECKING

from grader.results import Text

if TYPE_CHECKING:
    from grader.checks.pool_state import State


def fields(state: State) -> dict[str, list[int] | int]:
    """The state field by field, as the contract names them."""
    out: dict[str, list[int] | int] = {"free_blocks": list(state.free)}
    for name, (seq_len, table) in state.requests.items():
        out[f"{name}.seq_len"] = seq_len
        out[f"{name}.block_table"] = list(table)
    return out


def differing(want: State, got: State, names: list[str] | None = None) -> list[str]:
    """The fields whose values differ, the free list's order included (`names`: only requests of these names)."""
    a, b = fields(want), fields(got)
    keys = [k for k in a if k in b] + [k for k in b if k not in a]
    if names is not None:
        keys = [k for k in keys if k.split(".")[0] in names]
    return [k for k in keys if a.get(k) != b.get(k)]


def show(state: State, keys: list[str]) -> str:
    values = fields(state)
    return ", ".join(f"{k}={values.get(k, '-')}" for k in keys)


def unchanged(before: State, after: State, names: list[str] | None = None) -> tuple[Text, Text]:
    """Expected and actual for a call that must change nothing: the fields it changed, before and after."""
    keys = differing(before, after, names)
    if not keys:
        return Text("状态不变", "the state unchanged"), Text("状态不变", "the state unchanged")
    was, now = show(before, keys), show(after, keys)
    return Text(f"与调用前相同：{was}", f"as before the call: {was}"), Text(now, now)


def changes(before: State, after: State) -> Text:
    """What a call changed, for an actual that also says something else ("returned normally; ...")."""
    keys = differing(before, after)
    if not keys:
        return Text("状态不变", "nothing changed")
    return Text("、".join(f"{k} {fields(before).get(k)} -> {fields(after).get(k)}" for k in keys),
                ", ".join(f"{k} {fields(before).get(k)} -> {fields(after).get(k)}" for k in keys))


def misplaced(state: State, num_blocks: int) -> list[int]:
    """Blocks not in exactly one place (the free list or one block table), and out-of-range ones."""
    everywhere = [*state.free, *chain.from_iterable(table for _, table in state.requests.values())]
    if len(everywhere) == num_blocks and len(set(everywhere)) == num_blocks and (
            not everywhere or (min(everywhere) >= 0 and max(everywhere) < num_blocks)):
        return []  # each of the pool's blocks exactly once (most states: a quick answer for pools of 100,000)
    counts = Counter(everywhere)
    return sorted({b for b in counts if counts[b] != 1 or not 0 <= b < num_blocks} | {b for b in range(num_blocks) if not counts[b]})


def places(state: State, blocks: list[int]) -> Text:
    """Where each of `blocks` is: "block 3: nowhere; block 1: r0.block_table, r1.block_table"."""
    zh: list[str] = []
    en: list[str] = []
    for block in blocks[:8]:
        where = ["free_blocks"] * state.free.count(block)
        where += [f"{name}.block_table" for name, (_, table) in state.requests.items() for b in table if b == block]
        zh.append(f"块 {block}：{'、'.join(where) if where else '不在任何地方'}")
        en.append(f"block {block}: {', '.join(where) if where else 'nowhere'}")
    more = len(blocks) - 8
    if more > 0:
        zh.append(f"另有 {more} 个块")
        en.append(f"{more} more")
    return Text("；".join(zh), "; ".join(en))


def one_place(blocks: list[int]) -> Text:
    return Text(f"块 {blocks} 各自恰好在一处（free_blocks 或某一个块表）", f"block(s) {blocks} each in exactly one place (free_blocks or one block_table)")
