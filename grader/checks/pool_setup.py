"""The judge's set-up steps on a submission's allocator, and what it does when one fails.

To build its cases the grader uses what the contract allows on the submission's objects
(docs/contract.md, "Set-up steps"): `free_blocks.pop(i)`, `m.free_blocks[:] = ...`, the given
constructor and release.  A changed given release or constructor is replaced by the state the
template's leaves (a note, no points); every set-up step's state is read back and checked
against what the step makes; a step that raises or does not take fails every item of the TODO.
Before (red teams 27 and 29) such a case was dropped, and a refusal placed just where a TODO's
bug shows hid the bug.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from grader.checks.base import Inconclusive
from grader.checks.pool_state import State
from grader.checks.script import Line
from grader.results import Text

if TYPE_CHECKING:
    from grader.checks.pool import Pool, Req


class PoolSetup:
    """The set-up steps that can fail on the submission's objects (a mixin of Pool)."""

    def _release_as_given(self: Pool, req: Req, before: State, start: int, guarded: bool, raised_class: str | None) -> None:
        """Where the submission's release_request (given code, changed) raised or left another
        state: that state set directly, as the template's release leaves it, and the case goes
        on.  A changed given method is a note, never a reason to drop a case: a release refused
        just where a TODO's bug would show hid that bug (red team 27)."""
        name = req.name
        if raised_class is not None:  # the reproduction runs past it, as the grading did (and a correct solution's refusal, once diverged)
            caught = raised_class if not guarded or raised_class == "ValueError" else f"({raised_class}, ValueError)"
            self.script.lines[start:] = self._guarded(f"m.release_request({name})", caught,
                                                      "your release_request (given code) raised: see the note on given code",
                                                      "你的 release_request（给定代码）抛出了异常：见给定代码的说明")
        self.script.lines.insert(start, Line(f"free_before, table_before = list(m.free_blocks), list({name}.block_table)"))
        code = "m.free_blocks[:] = sorted(free_before + table_before)"
        self.script.add(code, "what the template's release_request leaves; the case goes on from it", "模板的 release_request 留下的状态；用例从这里继续")
        self.script.add(f"{name}.block_table = []")
        want = sorted(before.free + req.table)
        reply = self.ctx.call("set_free", manager=self.manager, items=want)
        if not reply.ok:
            self._setup_refused(reply, code)
        reply = self._call("set_table", request=req.handle, table=[], seq_len=req.seq_len)
        after = self._observe(reply, f"{name}.block_table = []")
        if not reply.ok:
            self._setup_refused(reply, f"{name}.block_table = []")
        self._set_up(after, want, {name: []}, f"{name}.block_table = []", None,
                     f"m.free_blocks == sorted(free_before + table_before) and {name}.block_table == []")
        self._adopt(after)

    def _set_up(self: Pool, state: State, free: list[int], tables: dict[str, list[int]], code: str, capture: str | None, condition: str) -> None:
        """A set-up step's state as read back, against what the step makes of the state before it
        (`capture` and `condition` say so in the reproduction).  A difference is the step refused:
        a property that ignores the write, a getter that shows another list (red team 29)."""
        wrong = [] if state.free == free else [("free_blocks", state.free, free)]
        for name, table in tables.items():
            got = state.requests.get(name, (0, None))[1]
            if got != table:
                wrong.append((f"{name}.block_table", got, table))
        if not wrong:
            return
        if capture is not None:
            at = next((i for i in range(len(self.script.lines) - 1, -1, -1) if code in self.script.lines[i].code), len(self.script.lines) - 1)
            if at > 0 and self.script.lines[at - 1].code == "try:":  # a guarded step: before its block
                at -= 1
            self.script.lines.insert(at, Line(capture))
        self.script.expect(condition, f"{code}: not what it makes here", f"{code}：这里的结果不对")
        self._setup_refused(None, code, Text("；".join(f"{what} {_short(got)}，应为 {_short(want)}" for what, got, want in wrong),
                                             "; ".join(f"{what} {_short(got)}, expected {_short(want)}" for what, got, want in wrong)))

    def _setup_refused(self: Pool, reply: Any, code: str, left: Text | None = None) -> None:
        """A set-up step (an operation the contract allows on free_blocks as a list, the given
        constructor with legal arguments, the given release's state set directly) raised on the
        submission's objects: the cases the TODO needs cannot be built.  Unless a TODO call
        already left a container of the wrong type (its item was told), every item of the TODO
        fails on it: a refusal placed where a TODO's bug would show would otherwise hide that
        bug, as the case was dropped (red team 27)."""
        if self.type_broken:
            raise Inconclusive("a set-up step cannot use what an earlier call left")
        if left is not None:
            said = Text(left.zh[:400], left.en[:400])
            zh = (f"评分器搭建用例的一步在你的对象上没有生效：{code} 之后读到 {said.zh}。约定允许这一步（free_blocks、block_table "
                  "是普通列表属性，给定代码照模板行事）；搭不起用例，本 TODO 的各项就无法检查")
            en = (f"a set-up step of the grader's did not take on your objects: after {code}, read {said.en}. The contract allows it "
                  "(free_blocks and block_table are plain list attributes, the given code does what the template's does); without it "
                  "this TODO's cases cannot be built")
        else:
            error = reply.error or {}
            raised_text = f"{error.get('type')}: {str(error.get('message'))[:200]}"
            said = Text(raised_text, raised_text)
            zh = (f"评分器搭建用例的一步在你的对象上抛出了异常：{code} → {said.en}。约定允许这一步（free_blocks 是列表，"
                  "给定代码照模板行事）；搭不起用例，本 TODO 的各项就无法检查")
            en = (f"a set-up step of the grader's raised on your objects: {code} -> {said.en}. The contract allows it (free_blocks "
                  "is a list, the given code does what the template's does); without it this TODO's cases cannot be built")
        for prop in self.props.values():
            if self.ctx.focused(prop):
                raise self.ctx.fail("wrong", zh, en, expected=Text("这一步正常完成", "the step completes"), actual=said)
            self.ctx.record(prop, zh, en)
        raise Inconclusive(en)


def _short(values: list[int] | None) -> str:
    """A list as a card shows it: its first items and its length."""
    if values is None:
        return "(unreadable)"
    return str(values) if len(values) <= 12 else f"[{', '.join(map(str, values[:10]))}, ...] ({len(values)} items)"

