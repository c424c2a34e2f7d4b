"""The given code's behaviour: validation, allocation_report, release_request, bounds checks.

Given code earns no points.  These scripted checks run once per grading, after the items,
and each difference from the template's behaviour becomes a finding on the scorecard (with a
reproduction), whether or not the code was edited.  The allocator items record given-code
differences they meet on the way (grader/checks/pool.py) into the same list.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from grader.checks.arrays import Array
from grader.checks.base import Abort, CheckFailure, ItemContext, raised
from grader.checks.script import Script
from grader.checks.values import as_dict, show
from grader.sandbox.protocol import BudgetExceeded

Check = Callable[[ItemContext, Script], None]


class Differs(Exception):
    def __init__(self, key: str, zh: str, en: str, expected: str, actual: str, assert_: tuple[str, str] | None = None):
        super().__init__(en)
        self.key, self.zh, self.en, self.expected, self.actual, self.assert_ = key, zh, en, expected, actual, assert_


def _new(ctx: ItemContext, script: Script, var: str, cls: str, **kwargs: Any) -> int | None:
    script.add(f"{var} = {cls}(" + ", ".join(f"{k}={v!r}" for k, v in kwargs.items()) + ")")
    reply = ctx.call("new", cls=cls, kwargs=kwargs)
    return int(reply.value) if reply.ok else None


def _must_raise(ctx: ItemContext, script: Script, key: str, code: str, what: str, op: str, **fields: Any) -> None:
    script.add("try:")
    script.add(f"    {code}")
    script.add("except ValueError:")
    script.add("    pass")
    script.add("else:")
    script.add(f"    raise AssertionError('{what}: ValueError expected')")
    reply = ctx.call(op, **fields)
    if not raised(reply, "ValueError"):
        got = "returned normally" if reply.ok else f"raised {(reply.error or {}).get('type')}"
        raise Differs(key, f"{what} 时应抛出 ValueError，实际 {got}", f"{what}: ValueError expected, but it {got}", "ValueError", got)


def ledger_validation(ctx: ItemContext, script: Script) -> None:
    dims = {"num_blocks": 4, "block_size": 2, "num_layers": 3, "num_kv_heads": 2, "head_dim": 8, "dtype_bytes": 2}
    for name in dims:
        for bad in (0, -1):
            call = {**dims, name: bad}
            code = "estimate_kv_cache_bytes(" + ", ".join(f"{k}={v}" for k, v in call.items()) + ")"
            _must_raise(ctx, script, "ledger_validation", code, f"{name}={bad}", "ledger", kwargs=call)


def ledger_layout(ctx: ItemContext, script: Script) -> None:
    dims = {"num_blocks": 4, "block_size": 2, "num_layers": 3, "num_kv_heads": 2, "head_dim": 8}
    script.add("ledger = estimate_kv_cache_bytes(" + ", ".join(f"{k}={v}" for k, v in dims.items()) + ")")
    reply = ctx.call("ledger", kwargs=dims)
    if not reply.ok:
        return  # the TODO is not written, or fails: the TODO 1 items say so
    got = as_dict(reply.value) or {}
    want = [3, 2, 2, 2, 8]
    shape = got.get("layout_shape")
    values = shape.get("__list__", shape.get("__tuple__")) if isinstance(shape, dict) else None
    if values != want:
        script.expect(f"list(ledger['layout_shape']) == {want}", "layout_shape: expected [num_layers, 2, num_kv_heads, block_size, head_dim], got {ledger['layout_shape']}")
        raise Differs("layout_shape", "layout_shape 应为 [num_layers, 2, num_kv_heads, block_size, head_dim]", "layout_shape should be [num_layers, 2, num_kv_heads, block_size, head_dim]", str(want), show(shape))


def request_validation(ctx: ItemContext, script: Script) -> None:
    for kwargs in ({"request_id": -1, "prompt_len": 3}, {"request_id": 0, "prompt_len": 0}):
        code = "Request(" + ", ".join(f"{k}={v}" for k, v in kwargs.items()) + ")"
        _must_raise(ctx, script, "request_validation", code, code, "new", cls="Request", kwargs=kwargs)


def manager_validation(ctx: ItemContext, script: Script) -> None:
    for kwargs in ({"num_blocks": 0, "block_size": 4, "head_dim": 8}, {"num_blocks": 4, "block_size": 0, "head_dim": 8}, {"num_blocks": 4, "block_size": 4, "head_dim": 0}):
        code = "KVCacheManager(" + ", ".join(f"{k}={v}" for k, v in kwargs.items()) + ")"
        _must_raise(ctx, script, "manager_validation", code, code, "new", cls="KVCacheManager", kwargs=kwargs)


def initial_state(ctx: ItemContext, script: Script) -> None:
    """A new manager's free list is every block in order; a new request holds no block."""
    manager = _new(ctx, script, "m", "KVCacheManager", num_blocks=5, block_size=2, head_dim=3)
    req = _new(ctx, script, "r", "Request", request_id=3, prompt_len=4)
    if manager is None or req is None:
        return
    state = ctx.call("observe", snapshot={"manager": manager, "requests": [req]}).state or {}
    free = (state.get("free_blocks") or {}).get("ok")
    seen = (state.get("requests") or {}).get(str(req), {})
    seq_len, table = (seen.get("seq_len") or {}).get("ok"), (seen.get("block_table") or {}).get("ok")
    if free != [0, 1, 2, 3, 4] or seq_len != 4 or table != []:
        script.expect("m.free_blocks == [0, 1, 2, 3, 4] and (r.seq_len, r.block_table) == (4, [])", "expected free_blocks [0, 1, 2, 3, 4], seq_len 4, an empty table; got {m.free_blocks}, {r.seq_len}, {r.block_table}")
        raise Differs(
            "initial_state",
            "新建的 KVCacheManager 的空闲列表应为 list(range(num_blocks))，新建的 Request 应为 seq_len=prompt_len、空块表",
            "a new KVCacheManager's free list should be list(range(num_blocks)), a new Request's seq_len its prompt_len and its table empty",
            "free_blocks=[0, 1, 2, 3, 4], seq_len=4, block_table=[]",
            f"free_blocks={free}, seq_len={seq_len}, block_table={table}",
        )


def _manager_with_request(ctx: ItemContext, script: Script, table: list[int], seq_len: int) -> tuple[int, int] | None:
    manager = _new(ctx, script, "m", "KVCacheManager", num_blocks=4, block_size=4, head_dim=2)
    req = _new(ctx, script, "r", "Request", request_id=0, prompt_len=seq_len)
    if manager is None or req is None:
        return None
    script.add(f"r.block_table = {table}")
    if not ctx.call("set_table", request=req, table=table, seq_len=seq_len).ok:
        return None
    return manager, req


def second_prefill(ctx: ItemContext, script: Script) -> None:
    made = _manager_with_request(ctx, script, [2], 3)
    if made is None:
        return
    script.add("m.free_blocks.remove(2)")
    manager, req = made
    ctx.call("place", manager=manager, request=req, indices=[2])
    _must_raise(ctx, script, "second_prefill", "m.allocate_for_prefill(r)", "a second prefill of a request that holds blocks", "method", target=manager, name="allocate_for_prefill", args=[req])


def allocation_report(ctx: ItemContext, script: Script) -> None:
    made = _manager_with_request(ctx, script, [3, 0], 5)
    if made is None:
        return
    script.add("report = m.allocation_report(r)")
    reply = ctx.call("method", target=made[0], name="allocation_report", args=[made[1]])
    want = {"logical_tokens": 5, "allocated_tokens": 8, "unused_tail_tokens": 3, "utilization": 0.625}
    got = as_dict(reply.value) if reply.ok else None
    if got is None or any(not isinstance(got.get(k), (int, float)) or abs(got[k] - v) > 1e-12 for k, v in want.items()):
        literal = str(want).replace("{", "{{").replace("}", "}}")  # braces of a dict inside an f-string
        script.expect(f"report == {want}", f"expected {literal}, got {{report}}")
        raise Differs("allocation_report", "allocation_report 的结果与给定代码不同", "allocation_report gives other values than the given code", str(want), show(reply.value) if reply.ok else str((reply.error or {}).get("type")))


def release_checks(ctx: ItemContext, script: Script) -> None:
    cases = [([], "a request that holds no blocks"), ([1, 1], "a block table with a duplicate"), ([7], "a block outside the pool"), ([0], "a block that is already free")]
    for table, what in cases:
        made = _manager_with_request(ctx, script, table, max(1, len(table)))
        if made is None:
            return
        _must_raise(ctx, script, "release_checks", "m.release_request(r)", f"release_request with {what}", "method", target=made[0], name="release_request", args=[made[1]])


def release_returns(ctx: ItemContext, script: Script) -> None:
    made = _manager_with_request(ctx, script, [3, 1], 6)
    if made is None:
        return
    manager, req = made
    script.add("m.free_blocks[:] = [0, 2]")
    ctx.call("place", manager=manager, request=req, indices=[3, 1])  # pops 3, then 1: free list [0, 2]
    script.add("m.release_request(r)")
    reply = ctx.call("method", target=manager, name="release_request", args=[req], snapshot={"manager": manager, "requests": [req]})
    state = reply.state or {}
    free = (state.get("free_blocks") or {}).get("ok")
    table = ((state.get("requests") or {}).get(str(req), {}).get("block_table") or {}).get("ok")
    if not reply.ok or free != [0, 1, 2, 3] or table != []:
        script.expect("m.free_blocks == [0, 1, 2, 3] and r.block_table == []", "expected free_blocks [0, 1, 2, 3] and an empty table, got {m.free_blocks} and {r.block_table}")
        raise Differs("release_returns", "release_request 应把块还回空闲列表（排好序）并清空块表", "release_request should return the blocks to the free list (sorted) and empty the table", "free_blocks=[0, 1, 2, 3], block_table=[]", f"free_blocks={free}, block_table={table}")


def cache_bounds(ctx: ItemContext, script: Script) -> None:
    for table, what in (([], "a request that holds no blocks"), ([9], "a block outside the pool")):
        made = _manager_with_request(ctx, script, table, 1)
        if made is None:
            return
        _must_raise(ctx, script, "cache_bounds", "m.get_physical_cache(r)", f"get_physical_cache of {what}", "get_cache", manager=made[0], request=made[1])


def attention_heads(ctx: ItemContext, script: Script) -> None:
    script.add("query = torch.zeros(1, 3, 4); key_cache = value_cache = torch.zeros(2, 2, 2, 4)")
    script.add("block_tables, seq_lens = torch.tensor([[0, 1]]), torch.tensor([3])")
    fields = {
        "query": Array(np.zeros((1, 3, 4), np.float32), "float32").payload(),
        "key_cache": Array(np.zeros((2, 2, 2, 4), np.float32), "float32").payload(),
        "value_cache": Array(np.zeros((2, 2, 2, 4), np.float32), "float32").payload(),
        "block_tables": Array(np.array([[0, 1]], np.int64), "int64").payload(),
        "seq_lens": Array(np.array([3], np.int64), "int64").payload(),
    }
    _must_raise(ctx, script, "attention_heads", "paged_attention(query, key_cache, value_cache, block_tables, seq_lens)", "3 query heads and 2 KV heads", "attention", **fields)


CHECKS: dict[str, tuple[str, ...]] = {
    # name needed -> checks
    "estimate_kv_cache_bytes": ("ledger_validation", "ledger_layout"),
    "Request": ("request_validation",),
    "KVCacheManager": ("manager_validation", "initial_state", "second_prefill", "allocation_report", "release_checks", "release_returns", "cache_bounds"),
    "paged_attention": ("attention_heads",),
}


def check_given(ctx: ItemContext, names: set[str]) -> None:
    """Run every given-code check whose definitions exist; findings go to ctx.grading.given."""
    for needed, checks in CHECKS.items():
        if needed not in names or (needed == "KVCacheManager" and "Request" not in names):
            continue
        for name in checks:
            script = ctx.begin(None)
            if name == "attention_heads":
                script.add("import torch")
            try:
                globals()[name](ctx, script)
            except Differs as differs:
                ctx.given_finding(differs.key, differs.zh, differs.en, expected=differs.expected, actual=differs.actual, script=script)
            except (Abort, CheckFailure):
                continue  # a hang or crash here is the items' business; nothing to say about given code
            except BudgetExceeded:
                ctx.close()
                return  # out of time: the given checks are a courtesy, never a grade
    ctx.close()
