"""Reading an allocator's state back, as the contract fixes it: the types of its parts, and the pool.

The part of the judge's model (grader/checks/pool.py) that turns a snapshot into State, or
into the failure of the item that read a broken part of it: `free_blocks` a list of ints,
each request's `seq_len` an int and `block_table` a list of ints, the pool's contents the
judge reads itself from the file it shares with the session (grader/checks/frame.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from grader.checks.base import Inconclusive, student_error
from grader.checks.frame import SharedPool
from grader.checks.script import Line
from grader.results import Text

if TYPE_CHECKING:
    from grader.checks.pool import Pool, Req


class Listed(list):  # type: ignore[type-arg]
    """A list of block ids that a message shows whole when short, and as its ends when long."""

    def __repr__(self) -> str:
        if len(self) <= SHOWN:
            return super().__repr__()
        head, tail = ", ".join(map(str, self[: SHOWN // 2])), ", ".join(map(str, self[-4:]))
        return f"[{head}, ... {tail}] ({len(self)} in all)"

    __str__ = __repr__


SHOWN = 24  # ids a message shows of a list


@dataclass
class State:
    free: list[int]
    requests: dict[str, tuple[int, list[int]]]  # name -> (seq_len, block_table)

    def __post_init__(self) -> None:
        self.free = Listed(self.free)
        self.requests = {name: (seq_len, Listed(table)) for name, (seq_len, table) in self.requests.items()}

    def picture(self) -> dict[str, Any]:
        return {
            "free": list(self.free),
            "tables": {name: list(t) for name, (_, t) in self.requests.items() if t},
            "lens": {name: n for name, (n, _) in self.requests.items()},
        }



class ContractState:
    """Methods of Pool (grader/checks/pool.py) that read its state back and judge its types."""

    def _share_pool(self: Pool) -> SharedPool | None:
        """Distinct values in every slot of the pool, in a file the judge reads itself after each call
        (grader/checks/frame.py): prefill and decode must never change KV data."""
        values = np.arange(math.prod(self.shape), dtype=np.float32)
        pool = self.ctx.share_pool(values.tobytes())
        if pool is None:
            return None
        self.script.add(
            f"m.physical_kv_cache = torch.arange({math.prod(self.shape)}, dtype=torch.float32).view{self.shape}",
            "distinct values in every slot of the pool", "池中每个位置的值都不同",
        )
        def shared(reply: Any) -> None:
            if not reply.ok:
                raise student_error(self.ctx, reply, "m.physical_kv_cache = ...", self.todo)

        # Sent with the next call, which the frame checks read the pool after: a round trip fewer.
        self.ctx.defer("share_pool", shared, manager=self.manager, shared=pool.spec, shape=list(self.shape), dtype="float32")
        return pool

    def _observe(self: Pool, reply: Any, step: str, req: Req | None = None, oom: bool = False) -> State:
        """The state after a step, every part of it the contract fixes: free_blocks a list of ints,
        each request's seq_len an int and block_table a list of ints, the pool's contents.

        A part that cannot be read, or has the wrong type, fails the item that reads it: after a
        TODO call, the call's own item for its request's table and length, its ownership item for
        the free list, the other requests and the pool (its OOM item for all of it, on an OOM);
        after a set-up step, every item of the TODO.  Unreadable state ends the example; a wrong
        container type with readable values is adopted and the example goes on.
        """
        state = reply.state or {}
        problems: list[tuple[str, str, Text, bool]] = []  # (part, label, what is wrong, whether the values are lost)
        wrong: set[str] = set()
        free, why = _read_list(state.get("free_blocks"), "free_blocks")
        if why:
            wrong.add("free_blocks")
            if "free_blocks" not in self.wrong_now or free is None:
                problems.append(("free", "free_blocks", why, free is None))
        requests: dict[str, tuple[int, list[int]]] = {}
        for r in self.live():
            raw = (state.get("requests") or {}).get(str(r.handle), {})
            seq_len, why_len = _read_int(raw.get("seq_len"), f"{r.name}.seq_len")
            table, why_table = _read_list(raw.get("block_table"), f"{r.name}.block_table")
            part = "own" if r is req else "others"
            for label, why_part, value in ((f"{r.name}.seq_len", why_len, seq_len), (f"{r.name}.block_table", why_table, table)):
                if why_part:
                    wrong.add(label)
                    if label not in self.wrong_now or value is None:  # a step is blamed only for what it broke
                        problems.append((part, label, why_part, value is None))
            if seq_len is not None and table is not None:
                requests[r.name] = (seq_len, table)
        pool_problem = self._pool_problem(state) if req is not None else None
        if pool_problem:
            problems.append(("pool", "pool", pool_problem, False))
        self.wrong_now = wrong
        if not problems:
            return State(free, requests)
        self._blame(problems, step, req, oom)
        if any(lost for *_, lost in problems):
            raise Inconclusive(problems[0][2].en)
        return State(free, requests)  # wrong types, readable values: the example goes on from them

    def _pool_problem(self: Pool, state: dict[str, Any]) -> Text | None:
        """What a TODO call did to the pool: replaced it, or wrote into it (read by the judge itself)."""
        if self.pool is None:
            return None
        same = (state.get("pool") or {}).get("same")
        if not (isinstance(same, dict) and same.get("ok") is True):
            self.pool = None  # not the judge's tensor any more: nothing more to read
            return Text("m.physical_kv_cache 被换成了另一个张量（这里绝不能改变 KV 数据）",
                        "m.physical_kv_cache was replaced by another tensor (KV data must never change here)")
        now = self.pool.read()
        if now == self.pool.data:
            return None
        before = np.frombuffer(self.pool.data, dtype=np.float32).reshape(self.shape)
        after = np.frombuffer(now, dtype=np.float32).reshape(self.shape)
        blocks = sorted({int(b) for b in np.argwhere(~((before == after) | (np.isnan(before) & np.isnan(after))))[:, 0]})
        self.pool.data = now  # adopted: later calls are judged from here
        return Text(f"块 {blocks[:10]} 的 KV 数据被改变了（prefill 与 decode 绝不改变 KV 数据）",
                    f"KV data of block(s) {blocks[:10]} changed (prefill and decode never change KV data)")

    def _blame(self: Pool, problems: list[tuple[str, str, Text, bool]], step: str, req: Req | None, oom: bool) -> None:
        """Each problem to the item that read that part of the state (see `_observe`)."""
        blamed: dict[str, list[tuple[str, Text]]] = {}
        for part, label, why, _ in problems:
            if req is None:
                props = list(self.props.values())
            elif oom:
                props = [self.props["oom"]]
            else:
                props = [self.props["count"] if part == "own" else self.props["own"]]
            for prop in props:
                blamed.setdefault(prop, []).append((label, why))
            if part != "pool":
                self.type_broken = True
        for prop, found in blamed.items():
            what = Text("；".join(why.zh for _, why in found), "; ".join(why.en for _, why in found))
            zh = f"{step} 之后状态不符合约定（free_blocks 为 int 列表、seq_len 为 int、block_table 为 int 列表、不改 KV 数据）：{what.zh}"
            en = f"after {step}, the state breaks the contract (free_blocks a list of ints, seq_len an int, block_table a list of ints, KV data unchanged): {what.en}"
            if not self.ctx.focused(prop):
                self.ctx.record(prop, zh, en)
                self.diverged = True
                continue
            if req is not None and any(label == "pool" for label, _ in found):
                self.script.lines.insert(len(self.script.lines) - 1, Line("pool_before, pool_object = m.physical_kv_cache.clone(), m.physical_kv_cache"))
            if req is not None and self.script.lines and self.script.lines[-1].code == step:
                # The state must keep to the contract whether the call returns or runs out of
                # blocks: the reproduction holds for a correct allocator that raises OOM here.
                self.script.lines[-1:] = [
                    Line("try:"),
                    Line(f"    {step}"),
                    Line("except RuntimeError as error:", "an OOM may be right here; the state must keep to the contract either way",
                         "这里报 OOM 可能是对的；无论如何状态都必须符合约定"),
                    Line('    assert "OOM" in str(error), error'),
                ]
            for label, _ in found:
                self.script.expect(*_contract_assert(label))
            expected = Text("、".join(_CONTRACT[label].zh for label in _parts(found)), ", ".join(_CONTRACT[label].en for label in _parts(found)))
            raise self.ctx.fail("wrong", zh, en, expected=expected, actual=what)


# What the contract fixes of each part of the state (a card's expected shows the parts that broke).
_CONTRACT = {
    "free_blocks": Text("free_blocks 为 int 列表", "free_blocks: a list of ints"),
    "seq_len": Text("seq_len 为 int", "seq_len: an int"),
    "block_table": Text("block_table 为 int 列表", "block_table: a list of ints"),
    "pool": Text("池（m.physical_kv_cache）是同一个张量、数据不变", "the pool (m.physical_kv_cache) the same tensor, its data unchanged"),
}


def _parts(found: list[tuple[str, Text]]) -> list[str]:
    """The kinds of state part that broke, in the contract's order: "r0.seq_len" -> "seq_len"."""
    kinds = {label.rsplit(".", 1)[-1] for label, _ in found}
    return [kind for kind in _CONTRACT if kind in kinds]


def _contract_assert(label: str) -> tuple[str, str, str]:
    """The reproduction's assert for one part of the state the contract fixes."""
    if label == "pool":
        return (
            "m.physical_kv_cache is pool_object and torch.equal(m.physical_kv_cache, pool_before)",
            "prefill and decode never change KV data: the pool was replaced or written",
            "prefill 与 decode 绝不改变 KV 数据：池被替换或被写入",
        )
    target = "m.free_blocks" if label == "free_blocks" else label
    if label.endswith(".seq_len"):
        return (f"isinstance({target}, int)", f"{label} should be an int, got {{{target}!r}}", f"{label} 应为 int，实际 {{{target}!r}}")
    return (
        f"isinstance({target}, list) and all(isinstance(b, int) for b in {target})",
        f"{label} should be a list of ints, got {{{target}!r}}",
        f"{label} 应为 int 列表，实际 {{{target}!r}}",
    )


def _read_list(observed: Any, what: str) -> tuple[list[int] | None, Text | None]:
    """A list of ints from an observation, and what is wrong with it (None if nothing).

    The values come back when they could be read (a tuple of ints: the values, and "a tuple")."""
    if isinstance(observed, dict) and "ok" in observed:
        kind = observed.get("type", "list")
        if kind == "list":
            return observed["ok"], None
        return observed["ok"], Text(f"{what} 是 {kind}，不是 list：{observed['ok']}", f"{what} is a {kind}, not a list: {observed['ok']}")
    shown = _shown(observed)
    return None, Text(f"{what} 无法作为 int 列表读取：{shown.zh}", f"{what} cannot be read as a list of ints: {shown.en}")


def _read_int(observed: Any, what: str) -> tuple[int | None, Text | None]:
    if isinstance(observed, dict) and "ok" in observed:
        return observed["ok"], None
    shown = _shown(observed)
    return None, Text(f"{what} 不是 int：{shown.zh}", f"{what} is not an int: {shown.en}")


def _shown(observed: Any) -> Text:
    error = observed.get("error") if isinstance(observed, dict) else None
    if not isinstance(error, dict):
        return Text("缺失", "missing")
    shown, message = str(error.get("shown", "")), str(error.get("message", ""))
    if shown:
        return Text(f"{shown}（{message}）", f"{shown} ({message})")
    return Text(message or "无法读取", message or "unreadable")
