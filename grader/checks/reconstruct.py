"""TODO 4: rebuilding the logical cache from a block table.

Domain (grader/checks/reconstruct_cases.py): any positive block_size, num_blocks and head_dim;
a block table in any order (not physical order), seq_len anywhere in its last block; and reads
interleaved with writes of the pool and with the request growing (as decode grows it), so
that a result cached from an earlier call shows.

Attribution: a failing read is the truncation item's when it needs a partial last block to
fail (the same example with every block full passes); anything else is the table-order
item's (reading the right blocks in table order, and the current pool and table).  Once table
order failed, truncation is drawn where table order cannot interfere (one block, physical
order).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
from hypothesis import given, seed

from grader.checks.arrays import Array, decode
from grader.checks.base import CheckFailure, ItemContext, Need, hypothesis_settings, student_error
from grader.checks.frame import SharedPool, tensor_digest
from grader.checks.reconstruct_cases import (
    CORNERS,
    FLAT_WRITE,
    Example,
    examples,
    far_examples,
    pool_values,
    set_up_lines,
)
from grader.checks.running import Explore, grade_item
from grader.checks.script import Line, Script
from grader.results import Failure, Text
from grader.sandbox.protocol import Reply

LABEL = "TODO 4"
ORDER, TRUNCATE = "todo4.table_order", "todo4.truncate"


@dataclass
class Problem:
    read: int  # which read failed (0 = first)
    zh: str
    en: str
    expected: str | Text
    actual: str | Text
    asserts: list[tuple[str, ...]]
    kind: str = "wrong"  # "error" when the read raised
    same_slots: bool = False  # exactly the live slots were read, in another order: truncation held
    tail: bool = False  # the read had a partly used last block
    frame: str = ""  # "read": a read changed the pool or the request; "results": an earlier result changed
    cut_only: int | None = None  # the answer's rows: the table's slots in table order, cut at the wrong length
    as_before: bool = False  # and as many as an earlier read of the example returned
    table: list[int] = field(default_factory=list)  # the table of the read that failed


def run_example(ctx: ItemContext, ex: Example, script: Script, count: bool = True) -> Problem | None:
    """Drive one example in a fresh session; the first read that goes wrong, or None.

    After every read and every write, the frame: a read changes nothing (the pool, which the
    judge reads itself, and the request), and what an earlier read returned is the caller's
    (neither a later read nor a write to the pool may change it)."""
    # Both sent with the first call (the judge chooses their handles): two round trips fewer.
    manager = ctx.new_object(lambda reply: student_error(ctx, reply, "KVCacheManager(...)", LABEL),
                             cls="KVCacheManager", kwargs={"num_blocks": ex.num_blocks, "block_size": ex.block_size, "head_dim": ex.head_dim})
    request = ctx.new_object(lambda reply: student_error(ctx, reply, "Request(...)", LABEL),
                             cls="Request", kwargs={"request_id": 0, "prompt_len": ex.seq_len})
    cache = _Cache(ctx, ex, manager, request)
    table, seq_len, write = list(ex.table), ex.seq_len, 0
    cache.set(table, seq_len, write, rebind=True)
    reads = 0
    for kind, n in ex.events:
        if kind == "write":
            write += 1
            script.add(f"fill({write})", "the pool is written again", "池被重新写入")
            cache.set(table, seq_len, write)
            if (problem := cache.kept_after_write(reads)) is not None:
                return problem
        elif kind == "rebind":
            write += 1
            script.add(f"m.physical_kv_cache = torch.zeros_like(m.physical_kv_cache); fill({write})", "a new pool tensor", "换成一个新的池张量")
            cache.set(table, seq_len, write, rebind=True)
            if (problem := cache.kept_after_write(reads)) is not None:
                return problem
        elif kind == "swap":
            write += 1
            table = _swapped(table, ex.num_blocks)
            script.add(f"r.block_table = {table}; fill({write})", "another table of the same length (a release and a new prefill leave one)",
                       "换成同样长度的另一个块表（释放后再 prefill 就是这样）")
            cache.set(table, seq_len, write)
            if (problem := cache.kept_after_write(reads)) is not None:
                return problem
        elif kind == "grow":
            seq_len += n
            held = set(table)
            grown = [b for b in range(ex.num_blocks) if b not in held][: max(0, math.ceil(seq_len / ex.block_size) - len(table))]
            table += grown
            script.add(f"r.block_table += {grown}; r.seq_len = {seq_len}; fill({write})", "the request grows, as decode grows it", "请求增长（如 decode）")
            cache.set(table, seq_len, write)
            if (problem := cache.kept_after_write(reads)) is not None:
                return problem
        else:
            script.add("out = m.get_physical_cache(r)")
            problem = _read(ctx, cache, table, seq_len, write, reads)
            if problem is not None and not problem.frame:
                problem.tail = bool(seq_len % ex.block_size)
                return problem
            if count:
                if len(table) > 1 and table != sorted(table):
                    ctx.count(ORDER)
                if seq_len % ex.block_size:
                    ctx.count(TRUNCATE)
            if problem is not None:
                return problem
            reads += 1
    return None


def _swapped(table: list[int], num_blocks: int) -> list[int]:
    """Another table of the same length: blocks it does not hold first, then its own in another
    order (a pool with no other block: the same blocks rotated; one block alone stays)."""
    held = set(table)
    others = [b for b in range(num_blocks) if b not in held]
    return (others + table[1:] + table[:1])[: len(table)]


class _Cache:
    """The example's manager and request in the session, and the pool the judge shares with it."""

    def __init__(self, ctx: ItemContext, ex: Example, manager: int, request: int):
        self.ctx, self.ex, self.manager, self.request = ctx, ex, manager, request
        self.pool: SharedPool | None = None
        self.lens: list[int] = []  # seq_len at each read so far

    def set(self, table: list[int], seq_len: int, write: int, rebind: bool = False) -> None:
        """The request's table and length, and the pool's values (in place, or a new tensor)."""
        data = pool_values(self.ex, table, seq_len, write)
        reply = self.ctx.call("set_table", request=self.request, table=table, seq_len=seq_len)
        if reply.ok and not rebind and self.pool is not None:
            self.pool.write(data.tobytes())  # in place, as fill() writes it
            return
        if reply.ok and rebind:
            self.pool = self.ctx.share_pool(data.tobytes())
        if reply.ok and self.pool is not None:
            shape = [self.ex.num_blocks, self.ex.block_size, self.ex.head_dim]
            reply = self.ctx.call("share_pool", manager=self.manager, shared=self.pool.spec, shape=shape, dtype="float32")
        elif reply.ok:  # no shared directory: the values travel, and the frame is not watched
            reply = self.ctx.call("set_pool", manager=self.manager, tensor=Array(data, "float32").payload(), rebind=rebind)
        if not reply.ok:
            raise student_error(self.ctx, reply, "setting up the pool", LABEL)

    def kept_after_write(self, index: int) -> Problem | None:
        """The earlier results right after the pool was written, before any more of the submission's
        code runs (a later call could point a view it handed out elsewhere): a write of the pool
        must not have changed them.  The digests are read with torch's C functions only."""
        asked = self.ctx.kept.spec()
        if not asked:
            return None
        reply = self.ctx.call("observe", snapshot={"kept": asked})
        return self.earlier_results(self.ctx.kept.changed_in(reply.state, asked), index)

    def frame(self, table: list[int], seq_len: int, state: dict | None, index: int) -> Problem | None:
        """After a read: the pool, its identity, the request's table and length all as they were."""
        state = state or {}
        wrong: list[Text] = []
        kept: list[Text] = []  # what each wrong part should have stayed
        if self.pool is not None:
            same = (state.get("pool") or {}).get("same")
            if not (isinstance(same, dict) and same.get("ok") is True):
                wrong.append(Text("池张量被换掉了（m.physical_kv_cache 被重新赋值）", "the pool tensor was replaced (m.physical_kv_cache rebound)"))
                kept.append(Text("池是同一个张量", "the pool the same tensor"))
            elif self.pool.changed():
                before = np.frombuffer(self.pool.data, np.uint32).reshape(self.ex.num_blocks, -1)
                after = np.frombuffer(self.pool.read(), np.uint32).reshape(self.ex.num_blocks, -1)
                blocks = sorted({int(b) for b in np.argwhere(before != after)[:, 0]})
                wrong.append(Text(f"池被写入了（块 {blocks[:10]}）", f"the pool was written (block(s) {blocks[:10]})"))
                kept.append(Text(f"块 {blocks[:10]} 的数据不变", f"block(s) {blocks[:10]} unchanged"))
        seen = (state.get("requests") or {}).get(str(self.request), {})
        table_now, seq_len_now = seen.get("block_table") or {}, seen.get("seq_len") or {}
        if table_now.get("ok") != table or table_now.get("type", "list") != "list":
            kind = table_now.get("type", "list")
            shown = f"r.block_table={table_now.get('ok')}" + (f" ({kind})" if kind != "list" else "")
            wrong.append(Text(f"请求被改动：{shown}", f"the request changed: {shown}"))
            kept.append(Text(f"r.block_table={table}", f"r.block_table={table}"))
        if seq_len_now.get("ok") != seq_len:
            shown = f"r.seq_len={seq_len_now.get('ok')}"
            wrong.append(Text(f"请求被改动：{shown}", f"the request changed: {shown}"))
            kept.append(Text(f"r.seq_len={seq_len}", f"r.seq_len={seq_len}"))
        if not wrong:
            return None
        what = Text("；".join(t.zh for t in wrong), "; ".join(t.en for t in wrong))
        return Problem(
            index,
            f"get_physical_cache 是只读操作，却改变了状态：{what.zh}",
            f"get_physical_cache is a read, yet it changed state: {what.en}",
            Text("读取前后相同：" + "，".join(t.zh for t in kept), "as before the read: " + ", ".join(t.en for t in kept)),
            what,
            [("torch.equal(m.physical_kv_cache.view(torch.int32), pool_before.view(torch.int32)) and (r.seq_len, r.block_table) == state_before",
              "a read must change nothing: pool equal {torch.equal(m.physical_kv_cache.view(torch.int32), pool_before.view(torch.int32))}, request {(r.seq_len, r.block_table)} (was {state_before})",
              "读取不能改变任何状态：池不变 {torch.equal(m.physical_kv_cache.view(torch.int32), pool_before.view(torch.int32))}，请求 {(r.seq_len, r.block_table)}（之前 {state_before}）")],
            frame="read",
        )

    @staticmethod
    def earlier_results(changed: list[str], index: int) -> Problem | None:
        """What earlier reads returned is the caller's: unchanged by later reads and by writes to the pool."""
        if not changed:
            return None
        return Problem(
            index,
            "之后的读取或对池的写入改变了 get_physical_cache 之前返回的张量（返回了池的视图或复用的缓冲区？返回值属于调用者）",
            "a later read or write to the pool changed a tensor get_physical_cache returned earlier (a view of the pool, or a buffer used again? a result belongs to its caller)",
            Text("之前的结果不变", "earlier results unchanged"),
            Text(f"被改变：{'、'.join(label.replace('read ', '第 ') + ' 次读取' for label in changed)}", f"changed: {', '.join(changed)}"),  # labels "read 1", ...
            # Then the last result, the caller's to change, is filled: an earlier one that changes with
            # it shares its memory (the grader thread saw them shared: red team 23).
            [("all(torch.equal(a.nan_to_num(1e30), b.nan_to_num(1e30)) for a, b in kept)"
              " and kept[-1][0].fill_(123.0) is not None and all(torch.equal(a.nan_to_num(1e30), b.nan_to_num(1e30)) for a, b in kept[:-1])",
              "an earlier result changed: {[i for i, (a, b) in enumerate(kept) if not torch.equal(a.nan_to_num(1e30), b.nan_to_num(1e30))]}",
              "之前的返回值被改变：{[i for i, (a, b) in enumerate(kept) if not torch.equal(a.nan_to_num(1e30), b.nan_to_num(1e30))]}")],
            frame="results",
        )


def _read(ctx: ItemContext, cache: _Cache, table: list[int], seq_len: int, write: int, index: int) -> Problem | None:
    key, asked = ctx.kept.key(), ctx.kept.spec()
    snapshot = {"manager": cache.manager, "requests": [cache.request], **({"kept": asked} if asked else {})}
    reply = ctx.call("get_cache", manager=cache.manager, request=cache.request, keep=key, snapshot=snapshot)
    earlier = cache.earlier_results(ctx.kept.changed_in(reply.state, asked), index)
    if not reply.ok:
        error = reply.error or {}
        if error.get("not_implemented") and ctx.nothing_yet():
            raise student_error(ctx, reply, "m.get_physical_cache(r)", LABEL)
        if error.get("rejected_return"):  # a value the worker would not send: an answer, not a crash
            message, message_zh = str(error.get("message"))[:300], str(error.get("message_zh") or error.get("message"))[:300]
            return Problem(index, f"get_physical_cache 的返回值不符合要求：{message_zh}", f"get_physical_cache returned a value the contract does not allow: {message}",
                           Text("形状为 [seq_len, head_dim] 的张量", "a tensor of shape [seq_len, head_dim]"), Text(message_zh, message), [])
        what = f"{error.get('type')}: {str(error.get('message'))[:300]}"
        return Problem(index, f"get_physical_cache 意外抛出 {what}", f"get_physical_cache raised {what}", Text("返回一个张量", "a tensor returned"), what, [], "error")
    ctx.kept.add(key, tensor_digest(reply.value), f"read {index + 1}")
    problem = _answer(ctx, reply, cache.ex, table, seq_len, write, index, cache.lens)
    cache.lens.append(seq_len)
    # Right values from a read that changed state: the values count, the frame fails table order.
    return problem or cache.frame(table, seq_len, reply.state, index) or earlier


def _answer(ctx: ItemContext, reply: Reply, ex: Example, table: list[int], seq_len: int, write: int, index: int,
            earlier_lens: list[int]) -> Problem | None:
    pool = pool_values(ex, table, seq_len, write)
    positions = np.arange(seq_len)
    want = pool[np.asarray(table, dtype=np.int64)[positions // ex.block_size], positions % ex.block_size]
    try:
        answer = decode(reply.value)
    except (TypeError, ValueError):
        return Problem(index, "get_physical_cache 应返回 torch.Tensor", "get_physical_cache should return a torch.Tensor", "torch.Tensor", str(reply.value)[:200], [("isinstance(out, torch.Tensor)", "expected a tensor, got {type(out).__name__}", "应返回张量，实际 {type(out).__name__}")])
    shape_check = ("tuple(out.shape) == tuple(expected().shape)", "expected shape [seq_len, head_dim] = {list(expected().shape)}, got {list(out.shape)}", "形状应为 [seq_len, head_dim] = {list(expected().shape)}，实际 {list(out.shape)}")
    if answer.shape != want.shape:
        return Problem(
            index,
            f"形状应为 [seq_len, head_dim] = {list(want.shape)}，实际 {list(answer.shape)}",
            f"the shape should be [seq_len, head_dim] = {list(want.shape)}, got {list(answer.shape)}",
            str(list(want.shape)),
            str(list(answer.shape)),
            [shape_check],
            cut_only=(cut := _cut_only(answer, pool, ex, table, seq_len)),
            as_before=cut is not None and cut in earlier_lens,
            table=list(table),
        )
    out = answer.values().astype(np.float32) if answer.dtype in ("float64", "float32", "float16", "bfloat16") else None
    if out is not None and np.array_equal(out, want):
        return None
    # Every slot value is distinct (write, block, slot), so equal rows in another order mean the
    # live slots and nothing else were read: the truncation was right, the order is table order's.
    same_slots = out is not None and sorted(map(tuple, out.tolist())) == sorted(map(tuple, want.tolist()))
    bad = _first_bad_row(out, want)
    block, slot = table[bad // ex.block_size], bad % ex.block_size
    got = out[bad].tolist() if out is not None else f"dtype {answer.dtype}"
    return Problem(
        index,
        f"第 {bad} 个逻辑位置应来自物理块 {block} 的第 {slot} 个槽（按块表顺序、当前的池），实际读到 {_describe(got, 'zh', ex)}",
        f"logical position {bad} should come from physical block {block}, slot {slot} (block-table order, the pool as it is now); got {_describe(got, 'en', ex)}",
        str(_row(want[bad].tolist())),
        str(_row(got) if isinstance(got, list) else got),
        [shape_check, ("torch.equal(out.float(), expected())", f"row {bad} should be block {block} slot {slot}: expected {{expected()[{bad}].tolist()}}, got {{out[{bad}].tolist()}}", f"第 {bad} 行应来自块 {block} 槽 {slot}：期望 {{expected()[{bad}].tolist()}}，实际 {{out[{bad}].tolist()}}")],
        same_slots=same_slots,
    )


def _only_the_read(ex: Example, read: int) -> Example:
    """`ex` up to its read number `read`, without the reads before it."""
    events: list[tuple[str, int]] = []
    reads = 0
    for kind, n in ex.events:
        if kind == "read":
            if reads == read:
                break
            reads += 1
            continue
        events.append((kind, n))
    return replace(ex, events=(*events, ("read", 0)))


def _cut_only(answer: Array, pool: np.ndarray, ex: Example, table: list[int], seq_len: int) -> int | None:
    """The answer's row count when its rows are the table's slots in table order (NaN where the
    pool holds it), cut at another length than seq_len: the shape rule broken, and nothing else.
    None otherwise."""
    if len(answer.shape) != 2 or answer.shape[1] != ex.head_dim or answer.dtype not in ("float64", "float32", "float16", "bfloat16"):
        return None
    rows = answer.shape[0]
    if rows > len(table) * ex.block_size or rows == seq_len:
        return None
    slots = pool[np.asarray(table, dtype=np.int64)].reshape(-1, ex.head_dim)[:rows]
    return rows if np.array_equal(answer.values().astype(np.float32), slots, equal_nan=True) else None


def _first_bad_row(out: np.ndarray | None, want: np.ndarray) -> int:
    if out is None:
        return 0
    for row in range(want.shape[0]):
        if not np.array_equal(out[row], want[row]):
            return row
    return 0


def _describe(values: list[float] | str, lang: str, ex: Example) -> str:
    if isinstance(values, str):
        return values
    if values and all(math.isnan(v) for v in values):
        return "NaN（一个不该读的位置）" if lang == "zh" else "NaN (a slot that should never be read)"
    first = values[0] if values else float("nan")
    if not math.isfinite(first):
        return str(values)
    shown = values if len(values) <= 8 else [*values[:8], "..."]
    if ex.readable:
        write, rest = divmod(first, 10000)
        block, slot = divmod(rest, 100)
        block, slot = int(block), int(round(slot))
    else:
        write, rest = divmod(int(first), FLAT_WRITE)
        block, slot = divmod(rest // ex.head_dim, ex.block_size)
    if lang == "zh":
        return f"第 {int(write)} 次写入的块 {block} 槽 {slot}（{shown}）"
    return f"block {block} slot {slot} of write {int(write)} ({shown})"


def check_example(ctx: ItemContext, ex: Example) -> None:
    script = ctx.begin(lambda c: check_example(c, ex))
    for code, en, zh in set_up_lines(ex):
        script.add(code, en, zh)
    problem = run_example(ctx, ex, script)
    if problem is None:
        return
    if ctx.focus is None and ORDER in ctx.recorded and TRUNCATE in ctx.recorded:
        return  # a survey that already failed both items needs no more evidence
    if problem.frame:  # what a read must never change: the table-order item's ("the pool as it is now")
        if not ctx.focused(ORDER):
            ctx.record(ORDER, problem.zh, problem.en)
            return
        _write_frame_captures(script, problem.frame)
        for check in problem.asserts:
            script.expect(*check)
        raise ctx.fail(problem.kind, problem.zh, problem.en, expected=problem.expected, actual=problem.actual)
    # Whose failure is it?  Truncation's when the rows are right and only cut at the wrong
    # length, or when a partial last block is needed for it to fail.
    needs_tail = False
    after_others = bool(ctx.history)  # earlier examples ran in this process
    if problem.cut_only is not None and problem.as_before:
        # As long as an earlier read: a result kept from before the request grew (the rule to
        # read seq_len at the call, table order's) unless the read alone is cut the same way.
        with ctx.side_session():
            try:
                alone = run_example(ctx, _only_the_read(ex, problem.read), Script(), count=False)
            except CheckFailure:
                alone = None
        if alone is None or alone.cut_only is None:
            problem.cut_only = None
    if problem.cut_only is not None:
        # Every row right, in table order, only cut at the wrong length: the shape rule is
        # truncation's (a read of more than one block in another order counts for table order).
        needs_tail = True
        if problem.cut_only > ex.block_size and len(problem.table) > 1 and problem.table != sorted(problem.table):
            ctx.count(ORDER)
    elif ex.full() != ex:
        with ctx.side_session():
            try:
                alone = not after_others or run_example(ctx, ex, Script(), count=False) is not None
            except CheckFailure:
                alone = True
        # A failure that needs earlier examples (state kept between calls) is table order's.
        if alone:
            with ctx.side_session():
                try:
                    needs_tail = run_example(ctx, ex.full(), Script(), count=False) is None
                except CheckFailure:
                    needs_tail = False
            full = ex.full()
            if needs_tail and len(full.table) > 1 and list(full.table) != sorted(full.table):
                ctx.count(ORDER)  # the same reads with every block full were right, in table order
    owner = TRUNCATE if needs_tail else ORDER
    if owner == ORDER and problem.tail:
        if problem.same_slots:
            ctx.count(TRUNCATE)
        else:
            witness = script.copy()
            for check in problem.asserts:
                witness.expect(*check)
            ctx.missed(TRUNCATE, witness)
    if not ctx.focused(owner):
        ctx.record(owner, problem.zh, problem.en)
        return
    for check in problem.asserts:
        script.expect(*check)
    raise ctx.fail(problem.kind, problem.zh, problem.en, expected=problem.expected, actual=problem.actual)


def _write_frame_captures(script: Script, frame: str) -> None:
    """The copies a frame assert compares with: of the pool and the request before the last read,
    or of every result as it was returned."""
    reads = [i for i, line in enumerate(script.lines) if line.code == "out = m.get_physical_cache(r)"]
    if frame == "read":
        script.lines.insert(reads[-1], Line("pool_before, state_before = m.physical_kv_cache.clone(), (r.seq_len, list(r.block_table))"))
        return
    for i in reversed(reads):
        script.lines.insert(i + 1, Line("kept.append((out, out.clone()))", "what this read returned, and a copy", "这次读取的返回值及其副本"))
    script.lines.insert(reads[0], Line("kept = []"))


def _row(values: list[float]) -> list[float | str]:
    """A row as a message shows it: whole up to 8 values (head_dim reaches 256)."""
    return values if len(values) <= 8 else [*values[:8], "..."]


NEEDS = {
    ORDER: [Need(ORDER, 4, "按块表顺序读取（块表与物理顺序不同时）被检查的次数不够", "too few reads through a table out of physical order could be checked")],
    TRUNCATE: [Need(TRUNCATE, 4, "带未用尾部的读取被检查的次数不够", "too few reads with a partly used last block could be checked")],
}


TAILS = {ORDER: 0.5, TRUNCATE: 0.9, None: 0.7}  # how often a drawn example has a partial last block


def plan(run: ItemContext) -> tuple[list[Callable[[], None]], Explore]:
    def explore(round_: int, count: int) -> None:
        tails, ordered = TAILS[run.focus], run.focus == TRUNCATE
        if round_ and run.focus is None and TRUNCATE in run.recorded:
            tails = 0.0  # a later round of a survey where truncation failed: table order's evidence, without tails
        if round_ and run.focus is None and ORDER in run.recorded:
            # Table order failed: truncation's evidence, where table order cannot interfere (one
            # block, or blocks in physical order).
            tails, ordered = TAILS[TRUNCATE], True

        @seed(run.seed(round_))
        @hypothesis_settings(run.config, count or run.config.hypothesis.max_examples)
        @given(examples(tails, ordered))
        def test(ex: Example) -> None:
            check_example(run, ex)

        test()

    chosen = [*CORNERS, *far_examples(run.seed())]
    return [lambda ex=ex: check_example(run, ex) for ex in chosen], explore


def check_reconstruction(ctx: ItemContext) -> Failure | None:
    return grade_item(ctx, "todo4", [ORDER, TRUNCATE], plan, NEEDS[ctx.item_id])


check_table_order = check_truncate = check_reconstruction
