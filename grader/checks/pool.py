"""The judge's model of one KVCacheManager, shared by every TODO 2 and TODO 3 item.

One model, its invariants always on (reading the state back, and the contract's types of
it: grader/checks/pool_state.py).  After every operation the model reads the student's
state back (free list, each request's seq_len and block table) and checks every property
the contract states.  Each property belongs to one rubric item:

    prefill: blocks taken, seq_len kept        -> todo2.block_count
             where blocks come from and go     -> todo2.ownership
             OOM: RuntimeError, nothing changed -> todo2.oom_atomic
    decode:  seq_len + 1, a block iff needed   -> todo3.growth
             where blocks come from and go     -> todo3.ownership
             OOM: RuntimeError, nothing changed -> todo3.oom_rollback
    release, constructors                      -> given code (a finding, no points)

A violation of the item being graded fails it; a violation of another item's property is
that item's business: the model adopts what the student's code did and goes on, so one
mistake costs the items it breaks and not the others.  Each check that passes is counted,
and an item passes only with enough of them (a no-op method never takes a block, so it is
never "right by default").

Which free block a submission takes, and the order of its free list, are its own business;
only an OOM must leave the free list exactly as it was.

Reproductions and failures are written by grader/checks/pool_script.py; a failing call's
expected and actual are the fields that differ (grader/checks/pool_diff.py).  A call is blamed only
for what it broke itself: a block an earlier call lost is that call's item's failure.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from grader.checks.base import Inconclusive, ItemContext, raised, student_error
from grader.checks.frame import SharedPool
from grader.checks.pool_diff import changes, misplaced, one_place, places, unchanged
from grader.checks.pool_script import DIVERGED, Assert, Outcome, PoolScript, _builtin_class
from grader.checks.pool_setup import PoolSetup, _short
from grader.checks.pool_state import ContractState, Listed, State, _read_list
from grader.checks.script import Line, Script
from grader.results import Text

PROPS = {
    "prefill": {"count": "todo2.block_count", "own": "todo2.ownership", "oom": "todo2.oom_atomic"},
    "decode": {"count": "todo3.growth", "own": "todo3.ownership", "oom": "todo3.oom_rollback"},
}


@dataclass
class Req:
    name: str  # the variable in the reproduction: r0, r1, ...
    handle: int  # the object in the sandbox session
    request_id: int
    seq_len: int
    table: list[int] = field(default_factory=list)
    gone: bool = False  # let go of (`del r`): no longer read, named or called


class Pool(ContractState, PoolScript, PoolSetup):
    """A KVCacheManager in the sandbox, the requests made on it, and what they should hold."""

    def __init__(self, ctx: ItemContext, todo_label: str, num_blocks: int, block_size: int, head_dim: int):
        self.ctx, self.todo = ctx, todo_label
        self.num_blocks, self.block_size = num_blocks, block_size
        self.script: Script = ctx.script
        self.requests: list[Req] = []
        self.forgotten: list[int] = []  # handles the worker lets go of before it makes the next Request
        self.diverged = False  # a step broke another item's property: later steps are guarded
        # What ran, as a program run_program() can run again (grader/checks/allocation.py).
        self.program: list[tuple[Any, ...]] = [("pool", num_blocks, block_size, head_dim)]
        self.script.add(f"m = KVCacheManager(num_blocks={num_blocks}, block_size={block_size}, head_dim={head_dim})")
        # Sent with the first call below (the judge chooses the handle): a round trip fewer.
        self.manager = ctx.new_object(lambda reply: student_error(ctx, reply, "KVCacheManager(...)", todo_label),
                                      cls="KVCacheManager", kwargs={"num_blocks": num_blocks, "block_size": block_size, "head_dim": head_dim})
        self.props = PROPS["prefill" if todo_label == "TODO 2" else "decode"]
        self.type_broken = False  # a call left a container of the wrong type (its item was told)
        self.wrong_now: set[str] = set()  # parts of the state wrong after the last step (told once, when they went wrong)
        state = self._observe(self._call("observe"), "KVCacheManager(...)")
        if sorted(state.free) != list(range(num_blocks)):
            self._given("init", "新建的管理器应当所有块都空闲", "a new manager should have every block free", str(list(range(num_blocks))), str(state.free))
            # The template's state, set directly: a changed given constructor is a note, and never
            # empties the cases (red team 29: pools of large blocks that started with nothing free).
            code = f"m.free_blocks[:] = list(range({num_blocks}))"
            self.script.add(code, "what the template's constructor leaves; the case goes on from it", "模板的构造函数留下的状态；用例从这里继续")
            reply = self._call("set_free", manager=self.manager, items=list(range(num_blocks)))
            state = self._observe(reply, code)
            if not reply.ok:
                self._setup_refused(reply, code)
            self._set_up(state, list(range(num_blocks)), {}, code, None, f"m.free_blocks == list(range({num_blocks}))")
        self.free = state.free
        self.shape = (num_blocks, block_size, head_dim)
        self.pool: SharedPool | None = self._share_pool()

    # -- reading the student's state ------------------------------------------------------
    def _call(self, op: str, **fields: Any) -> Any:
        spec = {"manager": self.manager, "requests": [r.handle for r in self.live()]}
        return self.ctx.call(op, snapshot=spec, **fields)

    def _state(self) -> State:
        return State(list(self.free), {r.name: (r.seq_len, list(r.table)) for r in self.live()})

    def _adopt(self, state: State) -> None:
        self.free = list(state.free)
        for r in self.live():
            r.seq_len, r.table = state.requests[r.name][0], list(state.requests[r.name][1])

    def _others(self, req: Req | None = None) -> str:
        names = [r.name for r in self.live() if r is not req]
        return "(" + ", ".join(names) + ("," if len(names) == 1 else "") + ")"

    # -- requests ---------------------------------------------------------------------------
    def new_request(self, prompt_len: int, request_id: int) -> Req:
        self.program.append(("new", prompt_len, request_id))
        name = f"r{len(self.requests)}"
        self.script.add(f"{name} = Request(request_id={request_id}, prompt_len={prompt_len})")
        forget, self.forgotten = self.forgotten, []
        # Sent with the call that uses it (the judge chooses the handle): a round trip fewer.
        handle = self.ctx.new_object(lambda reply: student_error(self.ctx, reply, "Request(...)", self.todo),
                                     cls="Request", kwargs={"request_id": request_id, "prompt_len": prompt_len}, forget=forget)
        req = Req(name, handle, request_id, prompt_len)
        self.requests.append(req)
        return req

    def need(self, seq_len: int) -> int:
        return math.ceil(seq_len / self.block_size)

    def held(self) -> list[Req]:
        return [r for r in self.requests if r.table]

    def live(self) -> list[Req]:
        """The requests the caller still holds (the reproduction's names that still exist)."""
        return [r for r in self.requests if not r.gone]

    def forget(self, req: Req) -> None:
        """`del r` of a released request: the worker lets go of its object when the next Request
        is made, in the same job, so that one may be made at its address (a cache keyed by
        `id(req)` then meets a stranger)."""
        self.program.append(("forget", self.requests.index(req)))
        self.script.add(f"del {req.name}", "the request is let go of; a new Request may reuse its memory", "请求对象被释放；新建的请求对象可能复用它的内存")
        req.gone = True
        self.forgotten.append(req.handle)

    def _run(self, req: Req, method: str, comment: tuple[str, str] = ("", "")) -> tuple[Outcome, Any]:
        self.program.append(({"allocate_for_prefill": "prefill", "allocate_for_decode": "decode"}[method], self.requests.index(req)))
        step = f"m.{method}({req.name})"
        before = self._state()
        start = self._begin(step, comment)
        reply = self._call("method", target=self.manager, name=method, args=[req.handle])
        if not reply.ok and (reply.error or {}).get("not_implemented") and self.ctx.nothing_yet():
            raise student_error(self.ctx, reply, step, self.todo)
        oom = not reply.ok and raised(reply, "RuntimeError")
        after = self._observe(reply, step, req, oom)
        others = [r.name for r in self.live() if r is not req and after.requests[r.name] != (r.seq_len, r.table)]
        capture = f"free_before, table_before, len_before = list(m.free_blocks), list({req.name}.block_table), {req.name}.seq_len"
        if len(self.live()) > 1:
            capture += f"\nothers_before = [(r.seq_len, list(r.block_table)) for r in {self._others(req)}]"
        return Outcome(step, start, capture, before, after, req, others, None if reply.ok else dict(reply.error or {})), reply

    def other_manager(self, num_blocks: int, block_size: int, prompt_len: int, request_id: int) -> None:
        """Another manager with a request of its own, and the TODO's call on it: nothing of this
        manager may change (managers share no state), and what this one does next must not
        depend on it (the later steps check that)."""
        self.program.append(("other", num_blocks, block_size, prompt_len, request_id))
        method = "allocate_for_prefill" if self.todo == "TODO 2" else "allocate_for_decode"
        step = f"m_other.{method}(other)"
        before = self._state()
        self.script.add(f"m_other = KVCacheManager(num_blocks={num_blocks}, block_size={block_size}, head_dim=1)",
                        "another manager, with a request of its own: nothing it does may change m", "另一个管理器及其请求：它做的任何事都不能改变 m")
        self.script.add(f"other = Request(request_id={request_id}, prompt_len={prompt_len})")
        made = self.ctx.call("new", cls="KVCacheManager", kwargs={"num_blocks": num_blocks, "block_size": block_size, "head_dim": 1})
        other = self.ctx.call("new", cls="Request", kwargs={"request_id": request_id, "prompt_len": prompt_len})
        if not (made.ok and other.ok):
            self._setup_refused(made if not made.ok else other, "m_other = KVCacheManager(...)" if not made.ok else "other = Request(...)")
        if self.todo == "TODO 3":
            count = min(num_blocks, math.ceil(prompt_len / block_size))
            code = f"other.block_table = [m_other.free_blocks.pop(0) for _ in range({count})]"
            self.script.add(code)
            # Its free list as the template's constructor leaves it, set directly (a changed
            # constructor, or a getter that shows another list, must not drop the case: red team 29).
            self.script.lines.insert(len(self.script.lines) - 1, Line(f"m_other.free_blocks[:] = list(range({num_blocks}))"))
            spec = {"manager": made.value, "requests": [other.value]}
            reset = self.ctx.call("set_free", manager=made.value, items=list(range(num_blocks)), snapshot=spec)
            if not reset.ok:
                self._setup_refused(reset, f"m_other.free_blocks[:] = list(range({num_blocks}))")
            placed = self.ctx.call("place", manager=made.value, request=other.value, indices=[0] * count, snapshot=spec)
            if not placed.ok:
                self._setup_refused(placed, code)
            state = placed.state or {}
            free, _ = _read_list(state.get("free_blocks"), "m_other.free_blocks")
            table, _ = _read_list(((state.get("requests") or {}).get(str(other.value)) or {}).get("block_table"), "other.block_table")
            if free != list(range(count, num_blocks)) or table != list(range(count)):
                self.script.expect(f"m_other.free_blocks == list(range({count}, {num_blocks})) and other.block_table == list(range({count}))",
                                   f"{code}: not what it makes here", f"{code}：这里的结果不对")
                read = f"m_other.free_blocks {_short(free)}, other.block_table {_short(table)}"
                self._setup_refused(None, code, Text(read, read))
        start = len(self.script.lines)
        call = self._guarded(step, "Exception", "whatever it does there", "无论它在那里做什么")
        self.script.lines.extend(call)
        reply = self._call("method", target=made.value, name=method, args=[other.value])
        after = self._observe(reply, step)
        if after.free != before.free or after.requests != before.requests:
            names = [r.name for r in self.live()]
            state = f"(m.free_blocks, [(r.seq_len, r.block_table) for r in {self._others()}])" if names else "m.free_blocks"
            capture = f"state_before = copy.deepcopy({state})"
            o = Outcome(step, start, "import copy\n" + capture, before, after, Req("other", 0, request_id, prompt_len), [])
            self._violation(
                self.props["own"], o,
                [(f"{state} == state_before", "a call on another manager changed this one: {state_before} -> " + "{" + state + "}",
                  "对另一个管理器的调用改变了这个管理器：{state_before} -> " + "{" + state + "}")],
                "对另一个管理器的调用改变了这个管理器的状态（管理器之间不能共享状态）",
                "a call on another manager changed this one's state (managers share no state)",
                expected=before.text(), actual=after.text(), highlight=sorted(set(after.free) ^ set(before.free)), call=call,
            )
            self._adopt(after)

    # -- TODO 2 ------------------------------------------------------------------------------
    def prefill(self, req: Req) -> None:
        props = PROPS["prefill"]
        needed = self.need(req.seq_len)
        o, reply = self._run(req, "allocate_for_prefill")
        free = len(o.before.free)
        where = f"prompt_len={req.seq_len}, block_size={self.block_size}: {_blocks(needed)} needed, {free} free"
        where_zh = f"prompt_len={req.seq_len}、block_size={self.block_size}：需要 {needed} 块，空闲 {free} 块"
        short = f"({req.name}.seq_len + {self.block_size - 1}) // {self.block_size} > len(free_before)"  # too few blocks free
        o.oom_expected = needed > free
        if needed > free:
            self._expect_oom(props["oom"], o, reply, short, where, where_zh)
        elif not reply.ok:
            self._unexpected(props, o, reply, short, where, where_zh)
        else:
            self._check_prefill(o, needed)
        self._adopt(o.after)

    def _check_prefill(self, o: Outcome, needed: int) -> None:
        props, req, n = PROPS["prefill"], o.req, o.req.name
        seq_len, table = o.after.requests[n]
        if needed == len(o.before.free):
            self.ctx.count(props["oom"] + ":exact")
        if len(table) != needed or seq_len != req.seq_len:
            wrong_table = (table, Text(f"{n}.block_table：{needed} 个块", f"{n}.block_table: {_blocks(needed)}")) if len(table) != needed else None
            expected, actual = _fields(n, (seq_len, req.seq_len), wrong_table)
            self._violation(
                props["count"], o,
                [(f"len({n}.block_table) == {needed}", f"ceil({req.seq_len} / {self.block_size}) = {needed} blocks expected, got {{{n}.block_table}}", f"应分配 ceil({req.seq_len} / {self.block_size}) = {needed} 个块，实际 {{{n}.block_table}}"),
                 (f"{n}.seq_len == {req.seq_len}", f"prefill must not change seq_len: {req.seq_len} -> {{{n}.seq_len}}", f"prefill 不能改变 seq_len：{req.seq_len} -> {{{n}.seq_len}}")],
                f"prompt_len={req.seq_len}、block_size={self.block_size} 时 prefill 应分配 ceil({req.seq_len} / {self.block_size}) = {needed} 个块且不改 seq_len，实际块表 {table}、seq_len={seq_len}",
                f"prompt_len={req.seq_len}, block_size={self.block_size}: prefill should take ceil({req.seq_len} / {self.block_size}) = {_blocks(needed)} and leave seq_len alone; got block_table={table}, seq_len={seq_len}",
                expected=expected, actual=actual, highlight=table,
            )
        else:
            self.ctx.count(props["count"])
            if needed > 1:
                self.ctx.count(props["count"] + ":multi")
        if not table:
            self._missed(props["own"], o, [(f"len({n}.block_table) > 0", f"prefill should take blocks from the free list: {n}.block_table = {{{n}.block_table}}", f"prefill 应从空闲列表取块：{n}.block_table = {{{n}.block_table}}")])
        elif self._check_ownership(props["own"], o, table, f"{n}.block_table", "prefill"):
            self.ctx.count(props["own"])
            if len(table) > 1:
                self.ctx.count(props["own"] + ":multi")
        self._finish(o.start, self._written(o, expected_oom=False))

    def permute(self, order: list[int]) -> None:
        """Put the free list in another order: legal, but one the API never makes (release sorts)."""
        self.program.append(("permute", tuple(order)))
        code = f"m.free_blocks[:] = [m.free_blocks[i] for i in {_indices(order)}]"
        comment = ("the free list in another order: any order is legal", "空闲列表换一个顺序：任何顺序都合法")
        if self.diverged:
            self.script.lines.extend(self._guarded(code, "IndexError", *comment))
        else:
            self.script.add(code, *comment)
        reply = self._call("permute", manager=self.manager, order=order)
        state = self._observe(reply, code)
        if reply.ok and sorted(order) == list(range(len(self.free))):
            self._set_up(state, [self.free[i] for i in order], {}, code, "setup_before = list(m.free_blocks)",
                         f"m.free_blocks == [setup_before[i] for i in {_indices(order)}]")
        if not reply.ok:
            if sorted(order) != list(range(len(self.free))):  # not a reordering of the list as read: the grader's case, not the list's refusal
                raise Inconclusive("the free list is not as long as the case assumed")
            self._setup_refused(reply, code)
        self._adopt(state)

    # -- TODO 3 ------------------------------------------------------------------------------
    def place(self, req: Req, indices: list[int]) -> None:
        """Give `req` blocks directly, as a correct prefill would (TODO 3 never relies on TODO 2)."""
        self.program.append(("place", self.requests.index(req), tuple(indices)))
        code = f"{req.name}.block_table = [m.free_blocks.pop(i) for i in {_indices(indices)}]"
        comment = ("set up directly, as a correct prefill would", "直接设置，与正确的 prefill 结果相同")
        if self.diverged:
            self.script.lines.extend(self._guarded(code, "IndexError", *comment))
        else:
            self.script.add(code, *comment)
        reply = self._call("place", manager=self.manager, request=req.handle, indices=indices)
        state = self._observe(reply, code)
        if reply.ok:
            free = list(self.free)
            taken = [free.pop(i) for i in indices] if all(-(len(self.free) - k) <= i < len(self.free) - k for k, i in enumerate(indices)) else None
            if taken is not None:
                self._set_up(state, free, {req.name: taken}, code,
                             f"setup_free = list(m.free_blocks); setup_taken = [setup_free.pop(i) for i in {_indices(indices)}]",
                             f"m.free_blocks == setup_free and {req.name}.block_table == setup_taken")
        if not reply.ok:
            if not all(-(len(self.free) - k) <= i < len(self.free) - k for k, i in enumerate(indices)):
                # An index past the list as read (a changed given constructor keeps a block back,
                # say): the grader's case does not fit, the list refused nothing.
                raise Inconclusive("the free list is shorter than the case assumed")
            self._setup_refused(reply, code)
        self._adopt(state)

    def decode(self, req: Req) -> None:
        props = PROPS["decode"]
        old_len, old_table = req.seq_len, Listed(req.table)
        grows = old_len + 1 > len(old_table) * self.block_size
        o, reply = self._run(req, "allocate_for_decode")
        free = len(o.before.free)
        where = f"seq_len {old_len} -> {old_len + 1}, block_size={self.block_size}, {_blocks(len(old_table))} held, {free} free"
        where_zh = f"seq_len {old_len} -> {old_len + 1}，block_size={self.block_size}，持有 {len(old_table)} 块，空闲 {free} 块"
        short = f"len_before + 1 > len(table_before) * {self.block_size} and not free_before"  # a block needed, none free
        o.oom_expected = grows and not free
        if grows and not free:
            self._expect_oom(props["oom"], o, reply, short, where, where_zh)
        elif not reply.ok:
            self._unexpected(props, o, reply, short, where, where_zh)
        else:
            self._check_decode(o, old_len, old_table, grows)
        self._adopt(o.after)

    def _check_decode(self, o: Outcome, old_len: int, old_table: list[int], grows: bool) -> None:
        props, n, bs = PROPS["decode"], o.req.name, self.block_size
        seq_len, table = o.after.requests[n]
        if not o.before.free and not grows:
            self.ctx.count(props["oom"] + ":full")
        want = len(old_table) + grows
        if seq_len != old_len + 1 or table[: len(old_table)] != old_table or len(table) != want:
            wrong_table = None
            if table[: len(old_table)] != old_table or len(table) != want:
                wrong_table = (table, Text(f"{n}.block_table={old_table}{'，再追加一个空闲块' if grows else '（不追加）'}",
                                           f"{n}.block_table={old_table}{' + one free block' if grows else ' (none added)'}"))
            expected, actual = _fields(n, (seq_len, old_len + 1), wrong_table)
            self._violation(
                props["count"], o,
                [(f"{n}.seq_len == len_before + 1", f"decode adds one token: seq_len {{len_before}} -> {{{n}.seq_len}}", f"decode 应增加一个 token：seq_len {{len_before}} -> {{{n}.seq_len}}"),
                 (f"{n}.block_table[:len(table_before)] == table_before", f"decode must keep the blocks held: {{table_before}} -> {{{n}.block_table}}", f"decode 必须保留已持有的块：{{table_before}} -> {{{n}.block_table}}"),
                 (f"len({n}.block_table) == len(table_before) + (len_before + 1 > len(table_before) * {bs})",
                  f"block_size={bs}: one more block exactly when the new token does not fit; seq_len {{len_before}}, block_table {{table_before}} -> {{{n}.block_table}}",
                  f"block_size={bs}：只有新 token 放不下时才多一个块；seq_len {{len_before}}，块表 {{table_before}} -> {{{n}.block_table}}")],
                f"decode 后应为 seq_len={old_len + 1}、{want} 个块（原有块保持不变{'，追加一个新块' if grows else '，不追加'}；block_size={bs}），实际 seq_len={seq_len}、块表 {table}",
                f"after decode expected seq_len={old_len + 1} and {_blocks(want)} (held blocks kept{', one appended' if grows else ', none added'}; block_size={bs}); got seq_len={seq_len}, block_table={table}",
                expected=expected, actual=actual,
                highlight=sorted(set(table) - set(old_table)),
            )
        else:
            self.ctx.count(props["count"] + (":grow" if grows else ":stay"))
        held = set(old_table)  # a set: tables of 100,000 blocks are checked too
        added = [b for b in table if b not in held]
        if not added:
            if grows:
                self._missed(props["own"], o, [("len(m.free_blocks) == len(free_before) - 1", "decode past a full block should take one free block: free_blocks {free_before} -> {m.free_blocks}", "块已满时 decode 应取走一个空闲块：free_blocks {free_before} -> {m.free_blocks}")])
            elif self._check_ownership(props["own"], o, [], "[]", "decode"):
                self.ctx.count(props["own"] + ":kept")  # took nothing, and nothing moved: ownership checked too
        elif self._check_ownership(props["own"], o, added, f"[b for b in {n}.block_table if b not in table_before]", "decode"):
            self.ctx.count(props["own"])
        self._finish(o.start, self._written(o, expected_oom=False))

    # -- checks shared by prefill and decode ----------------------------------------------------
    def _check_ownership(self, prop: str, o: Outcome, taken: list[int], taken_expr: str, what: str) -> bool:
        """Blocks taken were free and distinct, left the free list, and every block is in one place."""
        before, after = o.before, o.after
        free_before = set(before.free)
        not_free = [b for b in taken if b not in free_before]
        # (the assert, message zh, en, blocks to outline, expected, actual)
        problem: tuple[Assert, str, str, list[int], Text, Text] | None = None
        remaining = _Remaining(before.free, taken)
        if not_free or len(set(taken)) != len(taken):
            twice = sorted({b for b in taken if taken.count(b) > 1})
            problem = (
                (f"all(b in free_before for b in {taken_expr}) and len(set({taken_expr})) == len({taken_expr})", f"blocks taken must be distinct and free before the call: took {{{taken_expr}}}, free_blocks was {{free_before}}", f"取走的块必须互不重复且调用前空闲：取走 {{{taken_expr}}}，调用前 free_blocks 为 {{free_before}}"),
                f"取走的块 {taken} 必须互不重复，且调用前在空闲列表中（{before.free}）",
                f"the blocks taken, {taken}, must be distinct and free before the call (free_blocks {before.free})",
                not_free or taken,
                Text(f"取走的块互不重复，且都在调用前的 free_blocks={before.free} 中", f"blocks taken distinct, each in free_blocks={before.free} before the call"),
                Text(f"取走 {taken}" + (f"，其中 {not_free} 调用前不空闲" if not_free else "") + (f"，{twice} 取了两次" if twice else ""),
                     f"took {taken}" + (f": {not_free} not free before the call" if not_free else "") + (f"{',' if not_free else ':'} {twice} taken twice" if twice else "")),
            )
        elif not _lost_exactly(before.free, free_before, after.free, taken) and sorted(after.free) != (want := _without(before.free, taken, remaining.counter)):
            problem = (
                (f"sorted(m.free_blocks) == sorted(b for b in free_before if b not in {taken_expr})", "free_blocks should lose exactly the blocks taken: {free_before} -> {m.free_blocks}", "空闲列表应当恰好去掉取走的块：{free_before} -> {m.free_blocks}"),
                f"空闲列表应当恰好去掉取走的块：{before.free} -> {after.free}",
                f"free_blocks should lose exactly the blocks taken: {before.free} -> {after.free}",
                sorted(set(after.free) ^ set(remaining.counter.elements())),
                Text(f"free_blocks={Listed(want)}（{before.free} 去掉取走的 {taken}，顺序不限）", f"free_blocks={Listed(want)} ({before.free} less the blocks taken, {taken}; in any order)"),
                Text(f"free_blocks={after.free}", f"free_blocks={after.free}"),
            )
        elif o.others_changed:
            others = self._others(o.req)
            problem = (
                (f"[(r.seq_len, r.block_table) for r in {others}] == others_before", f"other requests changed: {{others_before}} -> {{[(r.seq_len, r.block_table) for r in {others}]}}", f"其他请求被改动：{{others_before}} -> {{[(r.seq_len, r.block_table) for r in {others}]}}"),
                f"改动了其他请求 {o.others_changed}",
                f"it changed other requests: {o.others_changed}",
                [b for name in o.others_changed for b in after.requests[name][1]],
                *unchanged(before, after, o.others_changed),
            )
        elif (wrong := misplaced(after, self.num_blocks)) and (bad := sorted(set(wrong) - set(misplaced(before, self.num_blocks)))):
            # Only what this call misplaced: a block lost by an earlier call (another item's
            # failure, which that item's card shows) or kept back by the given code is not this call's doing.
            everyone = self._others()
            where = f"(m.free_blocks + [b for r in {everyone} for b in r.block_table])"
            problem = (
                (f"all({where}.count(b) == 1 for b in {bad})",
                 f"every block must be free or in exactly one block_table: free_blocks={{m.free_blocks}}, tables={{[r.block_table for r in {everyone}]}}",
                 f"每个块要么空闲、要么恰好在一个块表中：free_blocks={{m.free_blocks}}，块表 {{[r.block_table for r in {everyone}]}}"),
                f"块 {bad} 没有恰好出现在一处（空闲列表或某一个块表）",
                f"block(s) {bad} are not in exactly one place (the free list or one block_table)",
                bad,
                one_place(bad),
                places(after, bad),
            )
        if problem is None:
            return True
        check, zh, en, highlight, expected, actual = problem
        self._violation(prop, o, [check], f"{what} 之后块的归属出错：{zh}", f"after {what}, block ownership is broken: {en}", expected=expected, actual=actual,
                        highlight=highlight)
        return False

    def _expect_oom(self, prop: str, o: Outcome, reply: Any, condition: str, where: str, where_zh: str) -> None:
        """Too few free blocks: a RuntimeError mentioning OOM, and nothing changed."""
        n, req = o.req.name, o.req
        seq_len, table = o.after.requests[n]
        # The rule says "same blocks, same order", and the grader may reorder the free list between
        # calls (a legal state): an OOM that sorts, or puts back in another order, changed it.
        changed = o.after.free != o.before.free or (seq_len, table) != (req.seq_len, req.table) or bool(o.others_changed)
        right_error = raised(reply, "RuntimeError") and "OOM" in str((reply.error or {}).get("message", ""))
        if right_error and not changed:
            self.ctx.count(prop + ":oom")
            self._finish(o.start, self._written(o, expected_oom=True))
            return
        error = reply.error or {}
        if reply.ok:
            zh, en = f"{where_zh}：应抛出 RuntimeError('OOM')，却正常返回了", f"{where}: expected RuntimeError('OOM'), but the call returned"
            did = changes(o.before, o.after)
            expected = Text("RuntimeError（信息含 OOM），状态不变", "RuntimeError mentioning OOM, the state unchanged")
            actual = Text(f"正常返回，没有异常；{did.zh}", f"returned normally, no exception; {did.en}")
        elif not right_error:
            got = f"{error.get('type')}: {str(error.get('message', ''))[:200]}"
            zh, en = f"{where_zh}：应抛出信息含 OOM 的 RuntimeError，实际抛出 {got}", f"{where}: the call must raise a RuntimeError whose message contains OOM; it raised {got}"
            expected, actual = Text("RuntimeError，信息含 OOM", "RuntimeError with OOM in its message"), Text(got, got)
        else:
            zh = f"{where_zh}：OOM 之后状态被改动了，应当与调用前完全相同（原子性 / 回滚）"
            en = f"{where}: the failed call changed state; it must leave everything exactly as before (atomicity / rollback)"
            expected, actual = unchanged(o.before, o.after)
        call = [
            Line("try:"),
            Line(f"    {o.step}"),
            Line("except RuntimeError as error:"),
            Line('    assert "OOM" in str(error), f"the message should contain OOM: {error}"', code_zh='    assert "OOM" in str(error), f"错误信息应包含 OOM：{error}"'),
            Line("else:"),
            Line(f"    assert not ({condition}), f\"{where}: RuntimeError('OOM ...') expected\"", code_zh=f"    assert not ({condition}), f\"{where_zh}：应抛出 RuntimeError('OOM ...')\""),
        ]
        asserts = [
            (f"m.free_blocks == free_before and ({n}.seq_len, {n}.block_table) == (len_before, table_before)",
             f"a failed call must change nothing: free_blocks {{free_before}} -> {{m.free_blocks}}, {n}: ({{len_before}}, {{table_before}}) -> ({{{n}.seq_len}}, {{{n}.block_table}})",
             f"失败的调用不能改变任何状态：free_blocks {{free_before}} -> {{m.free_blocks}}，{n}：({{len_before}}, {{table_before}}) -> ({{{n}.seq_len}}, {{{n}.block_table}})"),
        ]
        if len(self.live()) > 1:
            asserts.append((f"[(r.seq_len, r.block_table) for r in {self._others(req)}] == others_before", "a failed call must not change other requests", "失败的调用不能改动其他请求"))
        if self.diverged:
            # After an earlier mistake a correct solution is elsewhere by now, and may have no OOM
            # here: the checks hold where the situation is the one the student's code was in.
            asserts = [(f"not ({condition}) or ({check})", *messages) for check, *messages in asserts]
            # It may also have given this request its blocks already (where the student's first
            # prefill of it raised): a second prefill of it would then be refused, rightly.
            call = [Line("if not table_before:", "a correct solution may have given this request its blocks by now: nothing to retry then",
                         "正确的实现此时可能已经给这个请求分配了块：那就无需重试"),
                    *[Line("    " + line.code, line.en, line.zh, ("    " + line.code_zh) if line.code_zh else "") for line in call]]
        held = set(req.table)
        highlight = sorted(set(o.after.free) ^ set(o.before.free)) + [b for b in table if b not in held]
        self._violation(prop, o, asserts, zh, en, expected=expected, actual=actual, highlight=highlight, call=call)

    def _unexpected(self, props: dict[str, str], o: Outcome, reply: Any, short: str, where: str, where_zh: str) -> None:
        """The call raised where it should have succeeded: a spurious OOM, or an error."""
        error = reply.error or {}
        message = str(error.get("message", ""))[:300]
        if raised(reply, "RuntimeError"):
            call = [Line("try:"), Line(f"    {o.step}"), Line("except RuntimeError as error:"), Line(f'    assert {short}, f"spurious OOM ({where}): {{error}}"', code_zh=f'    assert {short}, f"不应报 OOM（{where_zh}）：{{error}}"')]
            # Refusing what it should have done breaks both: the call's own property (it took no
            # block it should have) and the OOM property (no OOM when blocks are there).
            for prop in (props["count"], props["oom"]):
                self._violation(prop, o, [], f"不应报 OOM（{where_zh}）", f"spurious OOM ({where})", expected=RETURNS, actual=f"{error.get('type')}: {message}", highlight=[], call=call)
            self._missed(props["own"], o, [], call)  # nothing taken, so nothing to check ownership on
            return
        if not self.ctx.focused(props["count"]):
            for prop in (props["own"], props["oom"]):  # the call itself raises: nothing else could be checked
                self._missed(prop, o, [])
            self._violation(props["count"], o, [], f"{o.step} 意外抛出 {error.get('type')}", f"{o.step} raised {error.get('type')}", expected="", actual="", highlight=[])
            return
        self._finish(o.start, [Line(o.step)])
        raise self.ctx.fail(
            "not_implemented" if error.get("not_implemented") else "error",
            f"{o.step} 意外抛出 {error.get('type')}: {message}（{where_zh}）",
            f"{o.step} raised {error.get('type')}: {message} ({where})",
            expected=RETURNS,
            actual=f"{error.get('type')}: {message}",
            traceback=str(error.get("traceback", "")),
        )

    # -- given code ---------------------------------------------------------------------------
    def release(self, req: Req) -> None:
        self.program.append(("release", self.requests.index(req)))
        step = f"m.release_request({req.name})"
        before = self._state()
        start = len(self.script.lines)
        guarded = self.diverged
        if guarded:  # the student's release returned (or the example ends here): only a correct solution may refuse it
            self.script.lines.extend(self._guarded(step, "ValueError", *DIVERGED))
        else:
            self.script.add(step)
        reply = self._call("method", target=self.manager, name="release_request", args=[req.handle])
        table = req.table
        free = set(before.free)
        refused = not table or len(set(table)) != len(table) or any(not 0 <= b < self.num_blocks or b in free for b in table)
        if refused:
            # A TODO's bug left a state the given release refuses (as the template's does):
            # nothing to learn from going on.
            if not raised(reply, "ValueError"):
                self._given("release", "release_request 没有拒绝无效的块表（ValueError）", "release_request did not refuse an invalid block table with ValueError", "ValueError",
                            Text("没有 ValueError" if reply.ok else str((reply.error or {}).get("type")), "no ValueError" if reply.ok else str((reply.error or {}).get("type"))))
            raise Inconclusive("the state left by an earlier step cannot be released")
        if not reply.ok:
            if self.type_broken:  # a TODO call left a tuple (say) where the given code needs a list: its item was told
                raise Inconclusive("release_request cannot use what an earlier call left")
            error = reply.error or {}
            self._given("release", f"release_request 意外抛出 {error.get('type')}", f"release_request raised {error.get('type')}: {str(error.get('message'))[:200]}", RETURNS, str(error.get("type")))
            self._release_as_given(req, before, start, guarded, _builtin_class(error))
            return
        after = self._observe(reply, step)
        want = sorted(before.free + req.table)
        if after.requests[req.name][1] != [] or after.free != want:
            n = req.name
            self._given(
                "release",
                "release_request 没有把块全部（排好序）还回空闲列表并清空块表",
                "release_request did not return every block to the free list (sorted) and empty the table",
                f"free_blocks={want}, block_table=[]",
                f"free_blocks={after.free}, block_table={after.requests[n][1]}",
                [(f"m.free_blocks == sorted(free_before + table_before) and {n}.block_table == []", f"release_request should give back {{table_before}} (free_blocks sorted) and empty the table: free_blocks={{m.free_blocks}}, {n}.block_table={{{n}.block_table}}", f"release_request 应归还 {{table_before}}（空闲列表排好序）并清空块表：free_blocks={{m.free_blocks}}，{n}.block_table={{{n}.block_table}}")],
                None if guarded else start,
            )
            self._release_as_given(req, before, start, guarded, None)
            return
        self._adopt(after)


def _blocks(count: int) -> str:
    return f"{count} block" if count == 1 else f"{count} blocks"


def _indices(indices: list[int]) -> str:
    """Indices as the reproduction writes them: a tuple, or for a long list its formula (the
    same index each time, or an affine permutation (a * i + b) % n)."""
    n = len(indices)
    if n <= 16:
        return repr(tuple(indices))
    if len(set(indices)) == 1:
        return f"[{indices[0]}] * {n}"
    a, b = (indices[1] - indices[0]) % n, indices[0]
    if list(indices) == [(a * i + b) % n for i in range(n)]:
        return f"(({a} * i + {b}) % {n} for i in range({n}))"
    return repr(tuple(indices))


class _Remaining:
    """The free list less the blocks taken, as a multiset, counted only if a message needs it."""

    def __init__(self, free: list[int], taken: list[int]):
        self.free, self.taken = free, taken

    @functools.cached_property
    def counter(self) -> Counter[int]:
        remaining = Counter(self.free)
        remaining.subtract(self.taken)
        return remaining


def _lost_exactly(free: list[int], free_set: set[int], after: list[int], taken: list[int]) -> bool:
    """Quick (sets, no sort): a free list without duplicates lost exactly the blocks taken, and
    has no duplicate after.  False only says "look closer" (_without decides)."""
    return (len(free_set) == len(free) and len(after) == len(free) - len(taken)
            and len(after_set := set(after)) == len(after) and after_set == free_set.difference(taken))


def _without(free: list[int], taken: list[int], remaining: Counter[int]) -> list[int]:
    """The free list less the blocks taken, sorted (a set difference where the list has no
    duplicate, the common case, quick for 100,000 blocks; else the multiset `remaining`)."""
    if len(set(free)) == len(free):
        return sorted(set(free) - set(taken))
    return sorted(remaining.elements())


RETURNS = Text("正常返回（不抛异常）", "returns normally (no exception)")
def _fields(name: str, lengths: tuple[int, int], table: tuple[list[int], Text] | None) -> tuple[Text, Text]:
    """Expected and actual of a call's own request: only the fields that are wrong.
    lengths: (seq_len, the one expected); table: (block_table, what was expected of it), if wrong."""
    expected: list[Text] = []
    actual: list[str] = []
    if lengths[0] != lengths[1]:
        expected.append(Text(f"{name}.seq_len={lengths[1]}", f"{name}.seq_len={lengths[1]}"))
        actual.append(f"{name}.seq_len={lengths[0]}")
    if table is not None:
        expected.append(table[1])
        actual.append(f"{name}.block_table={table[0]}")
    return Text("，".join(t.zh for t in expected), ", ".join(t.en for t in expected)), Text(", ".join(actual), ", ".join(actual))
