"""The given code's behaviour, over its whole domain: validation, allocation_report,
release_request, the bounds checks, and the given methods as bound when graded.

Given code earns no points.  These checks run once per grading, after the items; each is a
hypothesis run over the given code's domain (every block size, tables of every length, the
last block exactly full and not, every way a release can be refused), with the probes of
the template's own examples run first.  Each difference from the template's behaviour becomes
a finding on the scorecard, with a reproduction, whether or not the code was edited.  The
allocator items record given-code differences they meet on the way (grader/checks/pool.py)
into the same list.  Edits that do not show in the source (a decorator, a subclass bound by a
later assignment, setattr) are found by comparing the code of the methods bound to the
contract's names with the template's (grader/given_code.py, `bound_changes`).
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
from hypothesis import example, given, seed
from hypothesis import strategies as st
from hypothesis.errors import Flaky, Unsatisfiable

from grader.checks.arrays import Array
from grader.checks.base import Abort, CheckFailure, Inconclusive, ItemContext, hypothesis_settings, raised
from grader.checks.script import Line, Script
from grader.checks.values import as_dict, as_list, show
from grader.given_code import bound_digest, wholly_given
from grader.results import Text
from grader.sandbox.protocol import BudgetExceeded

Check = Callable[[ItemContext], None]
EXAMPLES = 12  # per given check: the given code is small, and earns nothing


class Differs(Exception):
    def __init__(self, key: str, zh: str, en: str, expected: str | Text, actual: str | Text):
        super().__init__(en)
        self.key, self.zh, self.en, self.expected, self.actual = key, zh, en, expected, actual


def _new(ctx: ItemContext, script: Script, var: str, cls: str, **kwargs: Any) -> int | None:
    script.add(f"{var} = {cls}(" + ", ".join(f"{k}={v!r}" for k, v in kwargs.items()) + ")")
    reply = ctx.call("new", cls=cls, kwargs=kwargs)
    return reply.value if reply.ok else None  # a handle (checked by the reply's schema)


def _must_raise(ctx: ItemContext, script: Script, key: str, code: str, what: str, op: str, **fields: Any) -> None:
    script.add("try:")
    script.add(f"    {code}")
    script.add("except ValueError:")
    script.add("    pass")
    script.add("else:")
    script.lines.append(Line(f"    raise AssertionError('{what}: ValueError expected')", code_zh=f"    raise AssertionError('{what}：应抛出 ValueError')"))
    reply = ctx.call(op, **fields)
    if not raised(reply, "ValueError"):
        got = "returned normally" if reply.ok else f"raised {(reply.error or {}).get('type')}"
        got_zh = "正常返回" if reply.ok else f"抛出 {(reply.error or {}).get('type')}"
        raise Differs(key, f"{what} 时应抛出 ValueError，实际 {got_zh}", f"{what}: ValueError expected, but it {got}", "ValueError", Text(got_zh, got))


def _state(ctx: ItemContext, manager: int, request: int) -> tuple[Any, Any, Any]:
    """free_blocks, the request's seq_len and block_table, each None where it cannot be read."""
    state = ctx.call("observe", snapshot={"manager": manager, "requests": [request]}).state or {}
    seen = (state.get("requests") or {}).get(str(request), {})
    return (state.get("free_blocks") or {}).get("ok"), (seen.get("seq_len") or {}).get("ok"), (seen.get("block_table") or {}).get("ok")


# -- strategies ---------------------------------------------------------------------------------

_DIMS = ("num_blocks", "block_size", "num_layers", "num_kv_heads", "head_dim", "dtype_bytes")
_positive = st.one_of(st.integers(1, 8), st.integers(1, 10**6))
_not_positive = st.one_of(st.just(0), st.integers(-10**6, -1))
_block_size = st.one_of(st.sampled_from([1, 2, 3, 16, 1000, 4096]), st.integers(1, 4096))


@st.composite
def _tables(draw: st.DrawFn) -> tuple[int, int, list[int], int]:
    """(num_blocks, block_size, a table of distinct blocks, a seq_len in its last block: often exactly full)."""
    num_blocks = draw(st.integers(1, 10))
    block_size = draw(_block_size)
    table = draw(st.permutations(range(num_blocks)))[: draw(st.integers(1, num_blocks))]
    used = len(table)
    kind = draw(st.sampled_from(["full", "one over", "anywhere"]))
    low = (used - 1) * block_size + 1
    seq_len = used * block_size if kind == "full" else low if kind == "one over" else draw(st.integers(low, used * block_size))
    return num_blocks, block_size, list(table), seq_len


# -- the checks ------------------------------------------------------------------------------------


def _must_accept(ctx: ItemContext, script: Script, key: str, code: str, op: str, **fields: Any) -> Any:
    """A valid call: the given validation must let it through (a ValueError here is the given
    code's; other errors are the TODO's business, and its items say so).  Returns the reply."""
    script.add(code)
    reply = ctx.call(op, **fields)
    if raised(reply, "ValueError"):
        message = str((reply.error or {}).get("message", ""))[:200]
        raise Differs(key, f"{code} 是合法调用，却抛出 ValueError：{message}", f"{code} is a valid call, yet it raised ValueError: {message}", Text("不抛 ValueError", "no ValueError"), f"ValueError: {message}")
    return reply


def ledger_validation(ctx: ItemContext) -> None:
    @given(st.sampled_from(_DIMS), _not_positive, st.fixed_dictionaries({k: st.integers(1, 64) for k in _DIMS}))
    @example("num_blocks", 0, dict.fromkeys(_DIMS, 2))
    def run(name: str, bad: int, dims: dict[str, int]) -> None:
        script = ctx.begin(None)
        call = {**dims, name: bad}
        code = "estimate_kv_cache_bytes(" + ", ".join(f"{k}={v}" for k, v in call.items()) + ")"
        _must_raise(ctx, script, "ledger_validation", code, f"{name}={bad}", "ledger", kwargs=call)
        valid = {**dims, name: 1}  # the smallest valid value of the same dimension
        code = "ledger = estimate_kv_cache_bytes(" + ", ".join(f"{k}={v}" for k, v in valid.items()) + ")"
        _must_accept(ctx, script, "ledger_validation", code, "ledger", kwargs=valid)

    _run(ctx, run)


def ledger_layout(ctx: ItemContext) -> None:
    @given(st.fixed_dictionaries({k: _positive for k in _DIMS[:5]}))
    @example({"num_blocks": 4, "block_size": 2, "num_layers": 3, "num_kv_heads": 2, "head_dim": 8})
    def run(dims: dict[str, int]) -> None:
        script = ctx.begin(None)
        script.add("ledger = estimate_kv_cache_bytes(" + ", ".join(f"{k}={v}" for k, v in dims.items()) + ")")
        reply = ctx.call("ledger", kwargs=dims)
        if not reply.ok:
            return  # the TODO is not written, or fails: the TODO 1 items say so
        got = as_dict(reply.value) or {}
        keys = ["kv_bytes_per_token", "kv_bytes_per_block", "total_cache_bytes", "layout_shape"]
        if sorted(got) != sorted(keys):
            script.expect(f"sorted(ledger) == {sorted(keys)}", "the ledger's keys: expected the four of the given code, got {sorted(ledger)}",
                          "账本的键：应为给定代码的四个键，实际 {sorted(ledger)}")
            raise Differs("ledger_keys", "账本返回的 dict 应恰好含给定代码的四个键", "the ledger's dict should hold exactly the given code's four keys", str(keys), str(sorted(got)))
        want = [dims["num_layers"], 2, dims["num_kv_heads"], dims["block_size"], dims["head_dim"]]
        shape = got.get("layout_shape")
        if as_list(shape) != want:
            script.expect(f"list(ledger['layout_shape']) == {want}", "layout_shape: expected [num_layers, 2, num_kv_heads, block_size, head_dim], got {ledger['layout_shape']}",
                          "layout_shape：应为 [num_layers, 2, num_kv_heads, block_size, head_dim]，实际 {ledger['layout_shape']}")
            raise Differs("layout_shape", "layout_shape 应为 [num_layers, 2, num_kv_heads, block_size, head_dim]", "layout_shape should be [num_layers, 2, num_kv_heads, block_size, head_dim]", str(want), show(shape))

    _run(ctx, run)


def request_validation(ctx: ItemContext) -> None:
    @given(st.one_of(st.tuples(_not_positive.map(lambda v: v - 1), st.integers(1, 100)), st.tuples(st.integers(0, 100), _not_positive)))
    @example((-1, 3))
    @example((0, 0))
    def run(args: tuple[int, int]) -> None:
        script = ctx.begin(None)
        kwargs = {"request_id": args[0], "prompt_len": args[1]}
        code = "Request(" + ", ".join(f"{k}={v}" for k, v in kwargs.items()) + ")"
        _must_raise(ctx, script, "request_validation", code, code, "new", cls="Request", kwargs=kwargs)
        valid = {"request_id": max(0, args[0]) if args[1] <= 0 else 0, "prompt_len": max(1, args[1])}  # the edge beside it
        _must_accept(ctx, script, "request_validation", "Request(" + ", ".join(f"{k}={v}" for k, v in valid.items()) + ")", "new", cls="Request", kwargs=valid)

    _run(ctx, run)


def manager_validation(ctx: ItemContext) -> None:
    @given(st.sampled_from(["num_blocks", "block_size", "head_dim"]), _not_positive)
    @example("num_blocks", 0)
    @example("block_size", 0)
    @example("head_dim", 0)
    def run(name: str, bad: int) -> None:
        script = ctx.begin(None)
        kwargs = {"num_blocks": 4, "block_size": 4, "head_dim": 8, name: bad}
        code = "KVCacheManager(" + ", ".join(f"{k}={v}" for k, v in kwargs.items()) + ")"
        _must_raise(ctx, script, "manager_validation", code, code, "new", cls="KVCacheManager", kwargs=kwargs)
        valid = {**kwargs, name: 1}  # the smallest valid size
        code = "KVCacheManager(" + ", ".join(f"{k}={v}" for k, v in valid.items()) + ")"
        _must_accept(ctx, script, "manager_validation", code, "new", cls="KVCacheManager", kwargs=valid)

    _run(ctx, run)


def initial_state(ctx: ItemContext) -> None:
    """A new manager's free list is every block in order; a new request holds no block."""

    @given(st.integers(1, 40), _block_size, st.integers(1, 8), st.integers(0, 10**6), st.integers(1, 10**6))
    @example(5, 2, 3, 3, 4)
    def run(num_blocks: int, block_size: int, head_dim: int, request_id: int, prompt_len: int) -> None:
        script = ctx.begin(None)
        manager = _new(ctx, script, "m", "KVCacheManager", num_blocks=num_blocks, block_size=block_size, head_dim=head_dim)
        req = _new(ctx, script, "r", "Request", request_id=request_id, prompt_len=prompt_len)
        if manager is None or req is None:
            return
        free, seq_len, table = _state(ctx, manager, req)
        kept_id = ctx.call("request_meta", request=req)
        if not kept_id.ok or kept_id.value != request_id:
            script.expect(f"r.request_id == {request_id}", "expected the request id kept, got {r.request_id}", "应保存 request_id，实际 {r.request_id}")
            raise Differs("initial_state", "新建的 Request 应保存 request_id", "a new Request should keep its request_id", str(request_id),
                          show(kept_id.value) if kept_id.ok else Text("缺失", "missing"))
        meta = ctx.call("manager_meta", manager=manager)
        got = as_dict(meta.value) if meta.ok else None
        sizes, pool = (as_list(got.get("sizes")), as_list(got.get("pool"))) if got else (None, None)
        shape = as_list(pool[0]) if pool and len(pool) == 3 else None
        # The pool's dtype is torch's default (a notebook may change that), so it is not compared.
        if sizes != [num_blocks, block_size, head_dim] or shape != [num_blocks, block_size, head_dim] or pool[2] is not True:
            script.expect(f"(m.num_blocks, m.block_size, m.head_dim) == ({num_blocks}, {block_size}, {head_dim}) and tuple(m.physical_kv_cache.shape) == ({num_blocks}, {block_size}, {head_dim})"
                          " and not m.physical_kv_cache.any()",
                          "expected the sizes kept and a zero pool of [num_blocks, block_size, head_dim]; got {(m.num_blocks, m.block_size, m.head_dim)}, {m.physical_kv_cache.shape}",
                          "应保存三个尺寸，并有 [num_blocks, block_size, head_dim] 的全零池；实际 {(m.num_blocks, m.block_size, m.head_dim)}，{m.physical_kv_cache.shape}")
            raise Differs(
                "initial_state",
                "新建的 KVCacheManager 应保存 num_blocks、block_size、head_dim，并有形状 [num_blocks, block_size, head_dim] 的全零池",
                "a new KVCacheManager should keep num_blocks, block_size and head_dim, with a zero pool of shape [num_blocks, block_size, head_dim]",
                Text(f"尺寸 {[num_blocks, block_size, head_dim]}，同形状的全零池", f"sizes {[num_blocks, block_size, head_dim]}, a zero pool of that shape"),
                Text(f"尺寸 {sizes}，池 {shape}（全零：{pool[2] if pool else None}）", f"sizes {sizes}, pool {shape} (all zero: {pool[2] if pool else None})"),
            )
        if free != list(range(num_blocks)) or seq_len != prompt_len or table != []:
            script.expect(f"m.free_blocks == list(range({num_blocks})) and (r.seq_len, r.block_table) == ({prompt_len}, [])",
                          "expected every block free in order, seq_len the prompt's, an empty table; got {m.free_blocks}, {r.seq_len}, {r.block_table}",
                          "应为所有块按序空闲、seq_len 等于 prompt 长度、空块表；实际 {m.free_blocks}、{r.seq_len}、{r.block_table}")
            raise Differs(
                "initial_state",
                "新建的 KVCacheManager 的空闲列表应为 list(range(num_blocks))，新建的 Request 应为 seq_len=prompt_len、空块表",
                "a new KVCacheManager's free list should be list(range(num_blocks)), a new Request's seq_len its prompt_len and its table empty",
                f"free_blocks={list(range(num_blocks))}, seq_len={prompt_len}, block_table=[]",
                f"free_blocks={free}, seq_len={seq_len}, block_table={table}",
            )

    _run(ctx, run)


def _manager_with_request(ctx: ItemContext, script: Script, num_blocks: int, block_size: int, table: list[int], seq_len: int) -> tuple[int, int] | None:
    manager = _new(ctx, script, "m", "KVCacheManager", num_blocks=num_blocks, block_size=block_size, head_dim=2)
    req = _new(ctx, script, "r", "Request", request_id=0, prompt_len=seq_len)
    if manager is None or req is None:
        return None
    script.add(f"r.block_table = {table}")
    if not ctx.call("set_table", request=req, table=table, seq_len=seq_len).ok:
        return None
    return manager, req


def _holding(ctx: ItemContext, script: Script, num_blocks: int, block_size: int, table: list[int], seq_len: int) -> tuple[int, int, int] | None:
    """A new manager and a request holding `table`, its blocks taken off the free list as a prefill
    takes them: (manager, request, how many blocks stay free), or None if that cannot be set up."""
    made = _manager_with_request(ctx, script, num_blocks, block_size, [], seq_len)
    if made is None:
        return None
    manager, req = made
    free = list(range(num_blocks))
    indices = []
    for block in table:
        indices.append(free.index(block))
        free.remove(block)
    script.add(f"r.block_table = [m.free_blocks.pop(i) for i in {tuple(indices)!r}]")
    if not ctx.call("place", manager=manager, request=req, indices=indices).ok:
        return None
    return manager, req, len(free)


def second_prefill(ctx: ItemContext) -> None:
    @given(_tables())
    @example((4, 4, [2], 3))
    def run(case: tuple[int, int, list[int], int]) -> None:
        num_blocks, block_size, table, seq_len = case
        script = ctx.begin(None)
        held = _holding(ctx, script, num_blocks, block_size, table, seq_len)
        if held is None:
            return
        manager, req, _ = held
        _must_raise(ctx, script, "second_prefill", "m.allocate_for_prefill(r)", "a second prefill of a request that holds blocks", "method", target=manager, name="allocate_for_prefill", args=[req])

    _run(ctx, run)


def allocation_report(ctx: ItemContext) -> None:
    @given(_tables(), st.booleans())
    @example((4, 4, [3, 0], 5), False)
    @example((4, 4, [3, 0], 8), False)  # the last block exactly full
    @example((2, 3, [1], 2), True)  # a request holding no block
    def run(case: tuple[int, int, list[int], int], empty: bool) -> None:
        num_blocks, block_size, table, seq_len = case
        table = [] if empty else table
        script = ctx.begin(None)
        made = _manager_with_request(ctx, script, num_blocks, block_size, table, seq_len)
        if made is None:
            return
        script.add("report = m.allocation_report(r)")
        reply = ctx.call("method", target=made[0], name="allocation_report", args=[made[1]])
        slots = len(table) * block_size
        want = {"logical_tokens": seq_len, "allocated_tokens": slots, "unused_tail_tokens": slots - seq_len, "utilization": Fraction(seq_len, slots) if slots else Fraction(0)}
        got = as_dict(reply.value) if reply.ok else None
        if got is None or any(not _close(got.get(k), v) for k, v in want.items()):
            shown = {k: float(v) if isinstance(v, Fraction) else v for k, v in want.items()}
            literal = str(shown).replace("{", "{{").replace("}", "}}")  # braces of a dict inside an f-string
            checks = " and ".join(f"abs(report[{k!r}] - {float(v)!r}) <= 1e-9" for k, v in want.items())
            script.expect(checks, f"expected {literal}, got {{report}}", f"应为 {literal}，实际 {{report}}")
            raise Differs("allocation_report", "allocation_report 的结果与给定代码不同", "allocation_report gives other values than the given code", str(shown),
                          show(reply.value) if reply.ok else str((reply.error or {}).get("type")))

    _run(ctx, run)


def _close(got: Any, want: Fraction | int) -> bool:
    """An exact int where the template gives an int; a finite number within 1e-12 of a ratio."""
    if isinstance(want, int) and not isinstance(want, Fraction):
        return type(got) is int and got == want
    if type(got) is bool or not isinstance(got, (int, float)):
        return False
    if isinstance(got, int):
        return Fraction(got) == want
    return abs(Fraction(got) - want) <= Fraction(1, 10**12) if got == got and abs(got) != float("inf") else False


def release_checks(ctx: ItemContext) -> None:
    """The given release refuses every invalid table: none, a duplicate, a block outside the pool, a free block."""

    @given(st.integers(1, 8), st.sampled_from(["empty", "duplicate", "outside", "free"]), st.integers(0, 7),
           st.one_of(st.integers(0, 100), st.integers(-100, -1)))
    @example(4, "empty", 1, 3)
    @example(4, "duplicate", 1, 3)
    @example(4, "outside", 1, 0)  # block num_blocks: one past the last
    @example(4, "outside", 1, -1)
    @example(4, "free", 0, 3)
    def run(num_blocks: int, kind: str, held: int, past: int) -> None:
        held %= num_blocks
        if kind == "empty":
            table, what = [], "a request that holds no blocks"
        elif kind == "duplicate":
            table, what = [held, held], "a block table with a duplicate"
        elif kind == "outside":
            table, what = [held, num_blocks + past if past >= 0 else past], "a block outside the pool"
        else:
            table, what = [held], "a block that is already free"
        script = ctx.begin(None)
        made = _manager_with_request(ctx, script, num_blocks, 4, [], max(1, len(table)))
        if made is None:
            return
        manager, req = made
        if kind != "free":  # the block the request holds is off the free list, as a prefill leaves it
            script.add(f"m.free_blocks.remove({held})")
            if not ctx.call("place", manager=manager, request=req, indices=[held]).ok:
                return
        script.add(f"r.block_table = {table}")
        if not ctx.call("set_table", request=req, table=table, seq_len=max(1, len(table))).ok:
            return
        _must_raise(ctx, script, "release_checks", "m.release_request(r)", f"release_request with {what}", "method", target=manager, name="release_request", args=[req])

    _run(ctx, run)


def release_returns(ctx: ItemContext) -> None:
    """A release gives every block back, the free list sorted, and empties the table."""

    @given(_tables(), st.randoms(use_true_random=False))
    @example((4, 4, [3, 1], 6), None)
    def run(case: tuple[int, int, list[int], int], rng: Any) -> None:
        num_blocks, block_size, table, seq_len = case
        script = ctx.begin(None)
        held = _holding(ctx, script, num_blocks, block_size, table, seq_len)
        if held is None:
            return
        manager, req, left = held
        if rng is not None and left > 1:  # the rest of the free list in any order
            order = list(range(left))
            rng.shuffle(order)
            script.add(f"m.free_blocks[:] = [m.free_blocks[i] for i in {tuple(order)!r}]")
            if not ctx.call("permute", manager=manager, order=order).ok:
                return
        script.add("m.release_request(r)")
        reply = ctx.call("method", target=manager, name="release_request", args=[req], snapshot={"manager": manager, "requests": [req]})
        state = reply.state or {}
        got_free = (state.get("free_blocks") or {}).get("ok")
        got_table = ((state.get("requests") or {}).get(str(req), {}).get("block_table") or {}).get("ok")
        want = list(range(num_blocks))
        if not reply.ok or got_free != want or got_table != []:
            script.expect(f"m.free_blocks == {want} and r.block_table == []", "expected every block free (sorted) and an empty table, got {m.free_blocks} and {r.block_table}",
                          "应为所有块空闲（排好序）且块表为空，实际 {m.free_blocks} 与 {r.block_table}")
            raise Differs("release_returns", "release_request 应把块还回空闲列表（排好序）并清空块表", "release_request should return the blocks to the free list (sorted) and empty the table",
                          f"free_blocks={want}, block_table=[]", f"free_blocks={got_free}, block_table={got_table}")

    _run(ctx, run)


def cache_bounds(ctx: ItemContext) -> None:
    @given(st.integers(1, 8), st.one_of(st.just(None), st.integers(-50, -1), st.integers(0, 100)))
    @example(4, None)
    @example(4, 0)  # block num_blocks: one past the last
    @example(4, -1)
    def run(num_blocks: int, bad: int | None) -> None:
        table, what = ([], "a request that holds no blocks") if bad is None else ([0, num_blocks + bad if bad >= 0 else bad], "a block outside the pool")
        script = ctx.begin(None)
        made = _manager_with_request(ctx, script, num_blocks, 4, table, 1)
        if made is None:
            return
        _must_raise(ctx, script, "cache_bounds", "m.get_physical_cache(r)", f"get_physical_cache of {what}", "get_cache", manager=made[0], request=made[1])

    _run(ctx, run)


def attention_heads(ctx: ItemContext) -> None:
    @given(st.integers(2, 4), st.integers(0, 3), st.integers(1, 3), st.integers(1, 3))
    @example(2, 1, 1, 1)
    def run(kv_heads: int, groups: int, rest: int, head_dim: int) -> None:
        heads = kv_heads * groups + 1 + rest % (kv_heads - 1)  # never a multiple of kv_heads
        script = ctx.begin(None)
        script.add("import torch")
        script.add(f"query = torch.zeros(1, {heads}, {head_dim}); key_cache = value_cache = torch.zeros(2, 2, {kv_heads}, {head_dim})")
        script.add("block_tables, seq_lens = torch.tensor([[0, 1]]), torch.tensor([3])")
        zeros = Array(np.zeros((2, 2, kv_heads, head_dim), np.float32), "float32").payload()
        fields = {
            "query": Array(np.zeros((1, heads, head_dim), np.float32), "float32").payload(),
            "key_cache": zeros,
            "value_cache": zeros,
            "block_tables": Array(np.array([[0, 1]], np.int64), "int64").payload(),
            "seq_lens": Array(np.array([3], np.int64), "int64").payload(),
        }
        _must_raise(ctx, script, "attention_heads", "paged_attention(query, key_cache, value_cache, block_tables, seq_lens)",
                    f"{heads} query heads and {kv_heads} KV heads", "attention", **fields)

    _run(ctx, run)


def _run(ctx: ItemContext, test: Callable[..., None]) -> None:
    """A given check's hypothesis run, from the grading's seed; its smallest difference is raised."""
    seed(ctx.seed())(hypothesis_settings(ctx.config, EXAMPLES)(test))()


CHECKS: dict[str, tuple[Check, ...]] = {
    # name needed -> checks
    "estimate_kv_cache_bytes": (ledger_validation, ledger_layout),
    "Request": (request_validation,),
    "KVCacheManager": (manager_validation, initial_state, second_prefill, allocation_report, release_checks, release_returns, cache_bounds),
    "paged_attention": (attention_heads,),
}


def check_given(ctx: ItemContext, names: set[str]) -> None:
    """Run every given-code check whose definitions exist; findings go to ctx.grading.given.

    The checks share a process while none finds anything (a fork each cost more than most of
    them); a check that finds a difference in a process an earlier check used runs again in a
    fresh one, and only what it finds there is reported, as when each had its own."""
    for needed, checks in CHECKS.items():
        if needed not in names or (needed == "KVCacheManager" and "Request" not in names):
            continue
        for check in checks:
            fresh = not ctx.has_session()
            while True:
                try:
                    check(ctx)
                except Differs as differs:
                    ctx.close()
                    if not fresh:
                        fresh = True
                        continue  # confirmed from a fresh process, or not reported
                    ctx.given_finding(differs.key, differs.zh, differs.en, expected=differs.expected, actual=differs.actual, script=ctx.script)
                except (Abort, CheckFailure, Inconclusive, Flaky, Unsatisfiable):
                    ctx.close()  # a hang or crash here is the items' business; nothing to say about given code
                except BudgetExceeded:
                    ctx.close()
                    return  # out of time: the given checks are a courtesy, never a grade
                break
    ctx.close()


def bound_methods(ctx: ItemContext, names: set[str]) -> dict[str, str]:
    """The digest of each wholly given method's code as bound now (see grader/given_code.py): the
    worker's grader thread reads the code's parts, the judge takes their fingerprint."""
    methods = {name: found for name, found in wholly_given().items() if name in names}
    if not methods:
        return {}
    try:
        reply = ctx.call("given_methods", methods=methods)
    except (Abort, BudgetExceeded):
        ctx.close()
        return {}
    # The process goes on to the given checks (check_given), which read nothing before this.
    found = reply.value if reply.ok and isinstance(reply.value, dict) else {}
    return {k: bound_digest(v) for k, v in found.items() if isinstance(k, str)}

