"""TODO 2 and TODO 3: the block allocator, driven by hypothesis state machines.

Each machine drives the student's KVCacheManager in the sandbox and keeps a model: which
blocks are free and which request holds which.  Block choice is the student's (any free
block will do); the model records what they chose and checks it against the contract.

TODO 3 machines never call the student's prefill: they place a request's blocks directly
(as the given release_request does, through `free_blocks` and `block_table`), so a prefill
bug cannot cost TODO 3 points.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

from hypothesis import seed
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule, run_state_machine_as_test

from grader.checks.base import ItemContext, hypothesis_settings, run_until_failure, student_error
from grader.results import Failure

MODES = {
    # item id -> mode: which rules the machine has and which invariants it checks
    "todo2.block_count": "prefill_count",
    "todo2.ownership": "prefill_ownership",
    "todo2.oom_atomic": "prefill_oom",
    "todo3.growth": "decode_growth",
    "todo3.ownership": "decode_ownership",
    "todo3.oom_rollback": "decode_oom",
}


@dataclass
class Req:
    handle: int
    name: str
    seq_len: int
    table: list[int]


@functools.lru_cache(maxsize=4096)
def _ints(low: int, high: int) -> st.SearchStrategy[int]:
    # Strategies are cached: building and validating a new one per draw costs more than the draw.
    return st.integers(low, high)


def draw_prompt_len(data: st.DataObject, block_size: int, most: int) -> int:
    """A length on or around a block boundary, or anywhere, between 1 and about `most`."""
    most = max(1, most)
    kind = data.draw(_ints(0, 4), label="length kind")
    if kind == 0:
        return 1
    if kind == 4:
        return data.draw(_ints(1, most), label="prompt_len")
    k = data.draw(_ints(1, max(1, most // block_size)), label="blocks")
    return max(1, k * block_size + (0, 0, 1, -1)[kind])


def draw_item(data: st.DataObject, items: list[Any], label: str) -> Any:
    return items[data.draw(_ints(0, len(items) - 1), label=label)]


def draw_blocks(data: st.DataObject, free: list[int], count: int) -> list[int]:
    pool, chosen = list(free), []
    for _ in range(count):
        chosen.append(pool.pop(data.draw(_ints(0, len(pool) - 1), label="block")))
    return chosen


def fmt_state(free: list[int], reqs: list[Req]) -> str:
    tables = ", ".join(f"{r.name}.block_table={r.table}" for r in reqs if r.table)
    return f"free_blocks={free}" + (f", {tables}" if tables else "")


def make_machine(ctx: ItemContext, mode: str) -> type[RuleBasedStateMachine]:
    prefill_mode = mode.startswith("prefill")
    todo = "TODO 2" if prefill_mode else "TODO 3"
    oom_mode = mode.endswith("_oom")
    check_ownership = mode.endswith("_ownership")

    class PoolMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.repro = ctx.new_example()
            self.manager = 0
            self.num_blocks = self.block_size = 0
            self.free: list[int] = []  # the student's free list, as last observed
            self.requests: list[Req] = []
            self.next_id = 0

        # -- plumbing ----------------------------------------------------------
        def held(self) -> list[Req]:
            return [r for r in self.requests if r.table]

        def pending(self) -> list[Req]:
            return [r for r in self.requests if not r.table]

        def need(self, seq_len: int) -> int:
            return math.ceil(seq_len / self.block_size)

        def observe(self, reply: Any, step: str) -> tuple[list[int], dict[str, tuple[int, list[int]]]]:
            state = reply.state or {}
            free = _read(state.get("free_blocks"))
            if free is None:
                raise ctx.fail("wrong", f"{step} 之后无法读取 free_blocks（应为 int 列表）", f"after {step}, free_blocks is not a list of ints", actual=str(state.get("free_blocks"))[:300])
            seen: dict[str, tuple[int, list[int]]] = {}
            for r in self.requests:
                raw = (state.get("requests") or {}).get(str(r.handle), {})
                seq_len, table = _read(raw.get("seq_len")), _read(raw.get("block_table"))
                if seq_len is None or table is None:
                    raise ctx.fail("wrong", f"{step} 之后 {r.name} 的 seq_len / block_table 类型不对", f"after {step}, {r.name}.seq_len / block_table have the wrong type", actual=str(raw)[:300])
                seen[r.name] = (seq_len, table)
            return free, seen

        def call(self, op: str, **fields: Any) -> Any:
            return ctx.call(op, snapshot={"manager": self.manager, "requests": [r.handle for r in self.requests]}, **fields)

        def expect_others_unchanged(self, step: str, seen: dict[str, tuple[int, list[int]]], target: Req | None) -> None:
            for r in self.requests:
                if r is target:
                    continue
                if seen[r.name] != (r.seq_len, r.table):
                    self.repro.add(f"# {r.name} changed: expected seq_len={r.seq_len}, block_table={r.table}; got {seen[r.name]}")
                    raise ctx.fail("wrong", f"{step} 改动了另一个请求 {r.name}", f"{step} changed another request, {r.name}", expected=str((r.seq_len, r.table)), actual=str(seen[r.name]))

        def expect_partition(self, step: str, free: list[int], seen: dict[str, tuple[int, list[int]]]) -> None:
            everything = list(free) + [b for _, table in seen.values() for b in table]
            counts = Counter(everything)
            duplicated = sorted(b for b, c in counts.items() if c > 1)
            missing = sorted(set(range(self.num_blocks)) - set(counts))
            foreign = sorted(b for b in counts if not 0 <= b < self.num_blocks)
            if duplicated or missing or foreign:
                where = fmt_state(free, [Req(0, n, s, t) for n, (s, t) in seen.items()])
                self.repro.add(f"# now: {where}")
                problems_zh, problems_en = [], []
                if duplicated:
                    problems_zh.append(f"块 {duplicated} 同时出现在多处")
                    problems_en.append(f"block(s) {duplicated} are in more than one place")
                if missing:
                    problems_zh.append(f"块 {missing} 既不空闲也不属于任何请求（泄漏）")
                    problems_en.append(f"block(s) {missing} are neither free nor held (leaked)")
                if foreign:
                    problems_zh.append(f"块号 {foreign} 超出池的范围")
                    problems_en.append(f"block id(s) {foreign} are outside the pool")
                raise ctx.fail(
                    "wrong",
                    f"{step} 之后块的归属出错：" + "；".join(problems_zh),
                    f"after {step} block ownership is broken: " + "; ".join(problems_en),
                    expected="every block free or in exactly one block_table",
                    actual=where,
                )

        # -- set-up -------------------------------------------------------------
        @initialize(
            num_blocks=st.integers(1, 6) if oom_mode else st.integers(1, 24),
            block_size=st.sampled_from([1, 1, 2, 3, 4, 8, 16]),
            head_dim=st.sampled_from([1, 2, 4]),
        )
        def create_pool(self, num_blocks: int, block_size: int, head_dim: int) -> None:
            self.num_blocks, self.block_size = num_blocks, block_size
            self.repro.add(f"m = KVCacheManager(num_blocks={num_blocks}, block_size={block_size}, head_dim={head_dim})")
            reply = ctx.call("new", cls="KVCacheManager", kwargs={"num_blocks": num_blocks, "block_size": block_size, "head_dim": head_dim})
            if not reply.ok:
                raise student_error(ctx, reply, "KVCacheManager(...)", todo)
            self.manager = int(reply.value)
            free, _ = self.observe(self.call("observe"), "KVCacheManager(...)")
            if sorted(free) != list(range(num_blocks)):
                raise ctx.fail("wrong", "新建的管理器应当所有块都空闲", "a new manager should have every block free", expected=str(list(range(num_blocks))), actual=str(free))
            self.free = free

        def new_request(self, prompt_len: int) -> Req:
            reply = ctx.call("new", cls="Request", kwargs={"request_id": self.next_id, "prompt_len": prompt_len})
            if not reply.ok:
                raise student_error(ctx, reply, "Request(...)", todo)
            req = Req(int(reply.value), f"r{self.next_id}", prompt_len, [])
            self.repro.add(f"{req.name} = Request(request_id={self.next_id}, prompt_len={prompt_len})")
            self.next_id += 1
            self.requests.append(req)
            return req

        # -- release (given code): only where reuse is the point; elsewhere a bug of another
        # item would surface here as a release error.
        @precondition(lambda self: (check_ownership or oom_mode) and self.held())
        @rule(data=st.data())
        def release(self, data: st.DataObject) -> None:
            req = draw_item(data, self.held(), "request")
            self.repro.add(f"m.release_request({req.name})")
            reply = self.call("method", target=self.manager, name="release_request", args=[req.handle])
            if not reply.ok:
                raise student_error(ctx, reply, f"m.release_request({req.name})", todo)
            free, seen = self.observe(reply, f"release_request({req.name})")
            if seen[req.name][1] != [] or sorted(free) != sorted(self.free + req.table):
                raise ctx.fail("wrong", "释放后块没有全部回到空闲列表", "after release the blocks did not all return to the free list", expected=str(sorted(self.free + req.table)), actual=str(sorted(free)))
            self.free, req.table = free, []
            self.requests.remove(req)

        # -- TODO 2 ------------------------------------------------------------------
        if prefill_mode:

            @rule(data=st.data())
            def prefill(self, data: st.DataObject) -> None:
                most = (self.num_blocks + 2) * self.block_size if oom_mode else max(1, len(self.free)) * self.block_size
                prompt_len = draw_prompt_len(data, self.block_size, most)
                needed = self.need(prompt_len)
                if not oom_mode and needed > len(self.free):
                    return
                req = self.new_request(prompt_len)
                step = f"m.allocate_for_prefill({req.name})"
                self.repro.add(step)
                before = list(self.free)
                reply = self.call("method", target=self.manager, name="allocate_for_prefill", args=[req.handle])
                free, seen = self.observe(reply, step)
                if needed > len(before):
                    self.expect_oom(reply, step, before, free, seen, req, needed)
                    self.requests.remove(req)
                    return
                if not reply.ok:
                    if oom_mode and reply.error and reply.error.get("type") == "RuntimeError":
                        self.repro.add(f"# pool has {len(before)} free blocks, {req.name} needs {needed}: no OOM expected")
                        raise ctx.fail("wrong", f"空闲块正好够用（需要 {needed}，空闲 {len(before)}）却报了 OOM", f"spurious OOM: {needed} blocks needed and {len(before)} free", expected="success", actual=str(reply.error.get("message")))
                    raise student_error(ctx, reply, step, todo)
                table = seen[req.name][1]
                if mode != "prefill_ownership":
                    if len(table) != needed:
                        self.repro.add(f"# expected {needed} blocks (ceil({prompt_len} / {self.block_size})), got {len(table)}: {table}")
                        raise ctx.fail("wrong", f"prompt_len={prompt_len}、block_size={self.block_size} 时应分配 {needed} 个块，实际 {len(table)} 个", f"prompt_len={prompt_len}, block_size={self.block_size}: expected {needed} blocks, got {len(table)}", expected=str(needed), actual=f"{len(table)}: {table}")
                if check_ownership or oom_mode:
                    if not set(table) <= set(before) or len(set(table)) != len(table):
                        self.repro.add(f"# free before: {before}; {req.name}.block_table = {table}")
                        raise ctx.fail("wrong", "prefill 分配的块必须来自空闲列表且互不重复", "prefill must take distinct blocks from the free list", expected=f"distinct blocks from {before}", actual=str(table))
                    self.expect_partition(step, free, seen)
                    self.expect_others_unchanged(step, seen, req)
                req.table = table
                self.free = free

            if check_ownership:

                @precondition(lambda self: self.held())
                @rule(data=st.data())
                def prefill_again(self, data: st.DataObject) -> None:
                    req = draw_item(data, self.held(), "request")
                    step = f"m.allocate_for_prefill({req.name})"
                    self.repro.add(step + "  # a second prefill of the same request")
                    reply = self.call("method", target=self.manager, name="allocate_for_prefill", args=[req.handle])
                    free, seen = self.observe(reply, step)
                    kind = (reply.error or {}).get("type") if not reply.ok else None
                    if kind != "ValueError" or free != self.free or seen[req.name] != (req.seq_len, req.table):
                        raise ctx.fail("wrong", "对同一请求重复 prefill 应抛出 ValueError 且不改变状态", "a second prefill of one request must raise ValueError and change nothing", expected="ValueError, state unchanged", actual=f"{kind or 'no exception'}; {fmt_state(free, [])}")

        # -- TODO 3 ------------------------------------------------------------------
        else:

            @precondition(lambda self: self.free)
            @rule(data=st.data())
            def place(self, data: st.DataObject) -> None:
                prompt_len = draw_prompt_len(data, self.block_size, len(self.free) * self.block_size)
                needed = self.need(prompt_len)
                if needed > len(self.free):
                    return
                blocks = draw_blocks(data, self.free, needed)
                req = self.new_request(prompt_len)
                self.repro.add(f"{req.name}.block_table = {blocks}  # set up directly, as a correct prefill would")
                self.repro.add(f"m.free_blocks[:] = [b for b in m.free_blocks if b not in {req.name}.block_table]")
                reply = self.call("place", manager=self.manager, request=req.handle, table=blocks, seq_len=prompt_len)
                if not reply.ok:
                    raise student_error(ctx, reply, "setting up a request", todo)
                req.table = list(blocks)
                self.free = [b for b in self.free if b not in set(blocks)]

            @precondition(lambda self: self.held())
            @rule(data=st.data())
            def decode(self, data: st.DataObject) -> None:
                choices = self.held()
                if not oom_mode:
                    choices = [r for r in choices if r.seq_len < len(r.table) * self.block_size or self.free]
                    if not choices:
                        return
                req = draw_item(data, choices, "request")
                step = f"m.allocate_for_decode({req.name})"
                self.repro.add(step)
                before_free, before_table = list(self.free), list(req.table)
                new_len = req.seq_len + 1
                grows = new_len > len(before_table) * self.block_size
                reply = self.call("method", target=self.manager, name="allocate_for_decode", args=[req.handle])
                free, seen = self.observe(reply, step)
                seq_len, table = seen[req.name]
                where = f"seq_len {req.seq_len} -> {new_len}, block_size={self.block_size}, {len(before_table)} blocks held, {len(before_free)} free"
                if grows and not before_free:
                    self.expect_oom(reply, step, before_free, free, seen, req, 1)
                    return
                if not reply.ok:
                    if reply.error and reply.error.get("type") == "RuntimeError":
                        self.repro.add(f"# {where}: " + ("a block is free" if grows else "no new block is needed"))
                        raise ctx.fail(
                            "wrong",
                            f"不应报 OOM：{'有空闲块可用' if grows else '新 token 放得进已有的块'}（{where}）",
                            f"spurious OOM: {'a block is free' if grows else 'the new token fits in the held blocks'} ({where})",
                            expected="success",
                            actual=str(reply.error.get("message"))[:200],
                        )
                    raise student_error(ctx, reply, step, todo)
                want_blocks = len(before_table) + (1 if grows else 0)
                # The ownership item checks only where blocks come from and go to: a wrong
                # growth decision is the growth item's, so it is not counted twice.
                wrong_growth = seq_len != new_len or len(table) != want_blocks or table[: len(before_table)] != before_table
                if wrong_growth and not check_ownership:
                    self.repro.add(f"# {where}: expected seq_len={new_len} and {want_blocks} blocks; got seq_len={seq_len}, block_table={table}")
                    raise ctx.fail(
                        "wrong",
                        f"decode 后应为 seq_len={new_len}、{want_blocks} 个块（原有块保持不变{'，追加一个新块' if grows else '，不追加'}），实际 seq_len={seq_len}、块表 {table}",
                        f"after decode expected seq_len={new_len} and {want_blocks} blocks (held blocks kept{', one appended' if grows else ', none added'}); got seq_len={seq_len}, block_table={table}",
                        expected=f"seq_len={new_len}, {want_blocks} blocks starting {before_table}",
                        actual=f"seq_len={seq_len}, block_table={table}",
                    )
                if check_ownership or oom_mode:
                    added = [b for b in table if b not in before_table]
                    stolen = [b for b in added if b not in before_free]
                    if stolen:
                        self.repro.add(f"# free before: {before_free}; appended block {stolen[0]}")
                        raise ctx.fail("wrong", f"decode 追加的块 {stolen[0]} 不在空闲列表中", f"decode appended block {stolen[0]}, which was not free", expected=f"one of {before_free}", actual=str(stolen[0]))
                    expected_free = sorted(set(before_free) - set(added))
                    if sorted(free) != expected_free or (not added and free != before_free):
                        self.repro.add(f"# free_blocks before {before_free}, after {free}")
                        raise ctx.fail("wrong", "decode 之后空闲列表不对", "the free list is wrong after decode", expected=str(expected_free), actual=str(free))
                    self.expect_partition(step, free, seen)
                    self.expect_others_unchanged(step, seen, req)
                # The model follows what the submission did where only ownership is judged.
                req.seq_len, req.table, self.free = (seq_len if check_ownership else new_len), table, free

        # -- shared: OOM ----------------------------------------------------------------
        def expect_oom(self, reply: Any, step: str, before: list[int], free: list[int], seen: dict[str, tuple[int, list[int]]], req: Req, needed: int) -> None:
            context = f"# {len(before)} free blocks, {needed} needed: expected RuntimeError('...OOM...') and no change"
            if reply.ok:
                self.repro.add(context)
                raise ctx.fail("wrong", f"空闲块只有 {len(before)} 个、需要 {needed} 个，应抛出 RuntimeError('OOM')，却正常返回了", f"{len(before)} free blocks and {needed} needed: expected RuntimeError('OOM'), but the call returned", expected="RuntimeError mentioning OOM", actual="no exception; " + fmt_state(free, []))
            error = reply.error or {}
            if error.get("not_implemented"):
                raise student_error(ctx, reply, step, todo)
            if error.get("type") != "RuntimeError" or "OOM" not in str(error.get("message", "")):
                self.repro.add(context)
                raise ctx.fail("wrong", "空闲块不足时应抛出信息含 OOM 的 RuntimeError", "with too few free blocks the call must raise a RuntimeError whose message contains OOM", expected="RuntimeError: ...OOM...", actual=f"{error.get('type')}: {error.get('message')}")
            seq_len, table = seen[req.name]
            if free != before or table != req.table or seq_len != req.seq_len:
                self.repro.add(context)
                self.repro.add(f"# after the OOM: free_blocks={free}, {req.name}.seq_len={seq_len}, {req.name}.block_table={table}")
                raise ctx.fail(
                    "wrong",
                    "OOM 之后状态被改动了：应当与调用前完全相同（原子性/回滚）",
                    "state changed by the failed call: it must be exactly as before (atomicity / rollback)",
                    expected=f"free_blocks={before}, {req.name}.seq_len={req.seq_len}, {req.name}.block_table={req.table}",
                    actual=f"free_blocks={free}, {req.name}.seq_len={seq_len}, {req.name}.block_table={table}",
                )
            self.expect_others_unchanged(step, seen, req)

    PoolMachine.__name__ = f"PoolMachine_{mode}"
    return PoolMachine


def _read(observed: Any) -> Any:
    """The value of an observation {"ok": value}, or None when the worker could not read it."""
    if isinstance(observed, dict) and "ok" in observed:
        return observed["ok"]
    return None


def check_machine(ctx: ItemContext) -> Failure | None:
    machine = seed(ctx.config.hypothesis.seed)(make_machine(ctx, MODES[ctx.item_id]))
    settings = hypothesis_settings(ctx.config, ctx.config.hypothesis.stateful_examples, stateful=True)
    return run_until_failure(ctx, lambda: run_state_machine_as_test(machine, settings=settings))
