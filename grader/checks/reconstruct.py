"""TODO 4: rebuilding the logical cache from a block table.

The pool holds recognisable values (100 * block + slot, plus head_dim / 100 along the last
axis) and NaN everywhere a correct read never looks: blocks outside the table and the
unused tail of the last block.  Reading the wrong block, in the wrong order, or too far,
shows as a wrong value or a NaN.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, seed
from hypothesis import strategies as st

from grader.checks.arrays import Array, decode
from grader.checks.base import ItemContext, hypothesis_settings, run_until_failure, student_error
from grader.results import Failure

LABEL = "TODO 4"


@st.composite
def layouts(draw: st.DrawFn, full_blocks: bool, shuffled: bool) -> tuple[int, int, int, int, list[int]]:
    block_size = draw(st.sampled_from([1, 2, 3, 4, 8]), label="block_size")
    num_blocks = draw(st.integers(1, 10), label="num_blocks")
    head_dim = draw(st.sampled_from([1, 2, 3]), label="head_dim")
    used = draw(st.integers(1, num_blocks), label="blocks used")
    if full_blocks:
        seq_len = used * block_size
    else:
        seq_len = draw(st.integers((used - 1) * block_size + 1, used * block_size), label="seq_len")
    if shuffled:
        table = draw(st.permutations(range(num_blocks)), label="table")[:used]
        if used > 1 and table == sorted(table):
            table = table[::-1]  # make sure physical order and table order differ
    else:
        table = sorted(draw(st.permutations(range(num_blocks)), label="table")[:used])
    return num_blocks, block_size, head_dim, seq_len, table


def make_pool(num_blocks: int, block_size: int, head_dim: int, seq_len: int, table: list[int]) -> np.ndarray:
    pool = np.full((num_blocks, block_size, head_dim), np.nan, dtype=np.float32)
    values = (
        100 * np.arange(num_blocks).reshape(-1, 1, 1)
        + np.arange(block_size).reshape(1, -1, 1)
        + np.arange(head_dim).reshape(1, 1, -1) / 100
    ).astype(np.float32)
    for position in range(seq_len):
        block, slot = table[position // block_size], position % block_size
        pool[block, slot] = values[block, slot]
    return pool


def repro_lines(num_blocks: int, block_size: int, head_dim: int, seq_len: int, table: list[int]) -> list[str]:
    return [
        f"m = KVCacheManager(num_blocks={num_blocks}, block_size={block_size}, head_dim={head_dim})",
        "m.physical_kv_cache.fill_(float('nan'))  # slots a correct read never touches",
        f"for position in range({seq_len}):",
        f"    block, slot = {table}[position // {block_size}], position % {block_size}",
        f"    m.physical_kv_cache[block, slot] = 100 * block + slot + torch.arange({head_dim}) / 100",
        f"r = Request(request_id=0, prompt_len={seq_len})",
        f"r.block_table = {table}",
        "out = m.get_physical_cache(r)",
    ]


def check_reconstruction(ctx: ItemContext, full_blocks: bool, shuffled: bool) -> Failure | None:
    @seed(ctx.config.hypothesis.seed)
    @hypothesis_settings(ctx.config, ctx.config.hypothesis.max_examples)
    @given(layouts(full_blocks, shuffled))
    def prop(layout: tuple[int, int, int, int, list[int]]) -> None:
        num_blocks, block_size, head_dim, seq_len, table = layout
        repro = ctx.new_example()
        for line in repro_lines(*layout):
            repro.add(line)
        made = ctx.call("new", cls="KVCacheManager", kwargs={"num_blocks": num_blocks, "block_size": block_size, "head_dim": head_dim})
        if not made.ok:
            raise student_error(ctx, made, "KVCacheManager(...)", LABEL)
        req = ctx.call("new", cls="Request", kwargs={"request_id": 0, "prompt_len": seq_len})
        if not req.ok:
            raise student_error(ctx, req, "Request(...)", LABEL)
        pool = make_pool(*layout)
        for op, fields in (
            ("set_pool", {"manager": made.value, "tensor": Array(pool, "float32").payload()}),
            ("set_table", {"request": req.value, "table": table, "seq_len": seq_len}),
        ):
            reply = ctx.call(op, **fields)
            if not reply.ok:
                raise student_error(ctx, reply, "setting up the pool", LABEL)
        reply = ctx.call("get_cache", manager=made.value, request=req.value)
        if not reply.ok:
            raise student_error(ctx, reply, "m.get_physical_cache(r)", LABEL)
        try:
            answer = decode(reply.value)
        except (TypeError, ValueError):
            raise ctx.fail("wrong", "get_physical_cache 应返回 torch.Tensor", "get_physical_cache should return a torch.Tensor", actual=str(reply.value)[:200]) from None
        want = np.stack([pool[table[p // block_size], p % block_size] for p in range(seq_len)])
        if answer.shape != want.shape:
            repro.add(f"out.shape  # expected {want.shape}, got {answer.shape}")
            raise ctx.fail(
                "wrong",
                f"形状应为 [seq_len, head_dim] = {list(want.shape)}，实际 {list(answer.shape)}",
                f"the shape should be [seq_len, head_dim] = {list(want.shape)}, got {list(answer.shape)}",
                expected=str(list(want.shape)),
                actual=str(list(answer.shape)),
            )
        out = answer.values().astype(np.float32) if answer.dtype in ("float64", "float32", "float16", "bfloat16") else None
        if out is None or not np.array_equal(out, want):
            bad = _first_bad_row(out, want)
            block, slot = table[bad // block_size], bad % block_size
            got = out[bad].tolist() if out is not None else f"dtype {answer.dtype}"
            repro.add(f"out[{bad}]  # expected block {block} slot {slot}: {want[bad].tolist()}, got {got}")
            raise ctx.fail(
                "wrong",
                f"第 {bad} 个逻辑位置应来自物理块 {block} 的第 {slot} 个槽（按块表顺序），实际读到 {_describe(got)}",
                f"logical position {bad} should come from physical block {block}, slot {slot} (block-table order); got {_describe(got)}",
                expected=str(want[bad].tolist()),
                actual=str(got),
            )

    return run_until_failure(ctx, prop)


def _first_bad_row(out: np.ndarray | None, want: np.ndarray) -> int:
    if out is None:
        return 0
    for row in range(want.shape[0]):
        if not np.array_equal(out[row], want[row]):
            return row
    return 0


def _describe(values: list[float] | str) -> str:
    if isinstance(values, str):
        return values
    if values and all(math.isnan(v) for v in values):
        return "NaN (a slot that should never be read)"
    first = values[0] if values else float("nan")
    if not math.isfinite(first):
        return str(values)
    return f"block {int(first // 100)} slot {int(round(first % 100))} ({values})"


def check_table_order(ctx: ItemContext) -> Failure | None:
    return check_reconstruction(ctx, full_blocks=True, shuffled=True)


def check_truncate(ctx: ItemContext) -> Failure | None:
    return check_reconstruction(ctx, full_blocks=False, shuffled=False)
