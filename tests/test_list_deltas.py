"""The allocator's lists travel as changes from the last one sent (answers._sent_list), and the
judge rebuilds them from its own copy (session.expand_lists): whatever the lists, the judge
sees exactly what the worker read, and a change that does not fit is the protocol broken."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grader.sandbox.protocol import WorkerLost
from grader.sandbox.session import expand_lists
from tests import machinery_kit

ANSWERS = machinery_kit.machinery().MODULES["answers"]

ids = st.integers(-3, 300)
# A list changed the ways an allocator changes it: popped at either end or anywhere, appended,
# sorted back, replaced whole, emptied.
edits = st.one_of(
    st.tuples(st.just("pop_end"), st.integers(0, 40)),
    st.tuples(st.just("pop_front"), st.integers(0, 40)),
    st.tuples(st.just("pop_at"), st.integers(0, 400)),
    st.tuples(st.just("append"), st.lists(ids, max_size=30)),
    st.tuples(st.just("sort"), st.none()),
    st.tuples(st.just("replace"), st.lists(ids, max_size=80)),
)


def _edit(items: list[int], edit: tuple[str, Any]) -> list[int]:
    kind, arg = edit
    if kind == "pop_end":
        return items[: max(0, len(items) - arg)]
    if kind == "pop_front":
        return items[arg:]
    if kind == "pop_at":
        return items[:arg % len(items)] + items[arg % len(items) + 1:] if items else items
    if kind == "append":
        return items + arg
    if kind == "sort":
        return sorted(items)
    return list(arg)


def _worker_session() -> dict[str, Any]:
    return {"lists": {}, "latest": {}, "sending": {}}


def _state(session: dict[str, Any], free: tuple[str, list[int]] | None, tables: dict[str, list[int]]) -> dict[str, Any]:
    """A snapshot's state as answers.snapshot builds it (free list first, then each request's table)."""
    state: dict[str, Any] = {}
    if free is not None:
        state["free_blocks"] = ANSWERS._sent_list(session, free[0], list(free[1]))
    state["requests"] = {h: {"seq_len": {"ok": 1}, "block_table": ANSWERS._sent_list(session, f"t{h}", list(t))} for h, t in tables.items()}
    ANSWERS.remember_sent(session)
    return state


@settings(max_examples=150, deadline=None)
@given(start=st.lists(ids, max_size=300), steps=st.lists(st.tuples(st.integers(0, 2), edits, edits), min_size=1, max_size=25))
def test_the_judge_rebuilds_every_list_the_worker_read(start: list[int], steps: list[tuple[int, Any, Any]]) -> None:
    worker, judge = _worker_session(), {}
    free = {f"f{m}": list(start) for m in range(3)}  # three managers: a new one's list changes from the last long one
    tables: dict[str, list[int]] = {"1": start[:7], "2": start[7:40]}
    sent_whole = 0
    for manager, edit, table_edit in steps:
        key = f"f{manager}"
        free[key] = _edit(free[key], edit)
        tables = {h: _edit(t, table_edit) for h, t in tables.items()}
        tables[str(len(tables) + 1)] = free[key][:5]  # a request new in this state
        state = _state(worker, (key, free[key]), tables)
        batched = len(tables) % 2 == 0  # as a batch's sub-reply, or a reply of its own
        reply = {"ok": True, "value": [{"ok": True, "state": state}]} if batched else {"ok": True, "state": state}
        sent_whole += "ok" in state["free_blocks"]
        expand_lists(reply, judge, batch=batched)
        assert state["free_blocks"] == {"ok": free[key], "type": "list"}
        assert {h: r["block_table"] for h, r in state["requests"].items()} == {h: {"ok": t, "type": "list"} for h, t in tables.items()}
    assert judge == worker["lists"]


def test_a_long_list_that_changes_little_travels_as_its_change() -> None:
    worker, judge = _worker_session(), {}
    pool = list(range(500))
    for popped in range(1, 6):
        state = _state(worker, ("f1", pool[: 500 - popped]), {})
        delta = state["free_blocks"].get("delta")
        assert (delta is None) == (popped == 1)  # the first time whole, then the change
        expand_lists({"ok": True, "state": state}, judge, batch=False)
        assert state["free_blocks"]["ok"] == pool[: 500 - popped]
    assert delta == [495, [], 0, 496, "f1"]
    # A new manager's list: a change from the last long one of its kind.
    state = _state(worker, ("f2", pool), {})
    assert state["free_blocks"]["delta"][4] == "f1"


@pytest.mark.parametrize("delta", [
    [0, [], 0, 99, "f1"],  # not the length remembered
    [600, [], 0, 500, "f1"],  # more kept than there is
    [0, [], 0, 500, "f9"],  # a list never sent
    [0, "x", 0, 500, "f1"],
    [-1, [], 0, 500, "f1"],
    [True, [], 0, 500, "f1"],
    [0, [], 0, 500],
])
def test_a_change_that_does_not_fit_is_the_protocol_broken(delta: list[Any]) -> None:
    judge = {"f1": list(range(500))}
    with pytest.raises(WorkerLost):
        expand_lists({"ok": True, "state": {"free_blocks": {"delta": delta, "type": "list", "key": "f1"}}}, judge, batch=False)
    assert judge == {"f1": list(range(500))}


def test_a_value_a_call_returned_is_never_read_as_a_state() -> None:
    """A call's result shaped like a batch of states (a submission's list of dicts) changes nothing."""
    judge = {"f1": list(range(500))}
    forged = [{"state": {"free_blocks": {"ok": [7] * 500, "type": "list", "key": "f1"}}}]
    expand_lists({"ok": True, "value": forged}, judge, batch=False)
    assert judge == {"f1": list(range(500))} and "key" in forged[0]["state"]["free_blocks"]
