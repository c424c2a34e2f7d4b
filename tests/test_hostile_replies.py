"""The judge never crashes on what a worker sends back.

Every check runs here against the reference, answered in this process by the worker's own
grader code (grader/sandbox/machinery.py, loaded as the worker loads it: tests/machinery_kit.py),
except that one reply, drawn by hypothesis, is replaced by something hostile: wrong types, huge
ints, NaN, nested junk, strings where ints belong, malformed tensors and state snapshots.  No
exception may escape an item's check: each reply is a wrong answer of that call, or nothing at all.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Flaky

from grader.checks import CHECKS
from grader.checks import given as given_checks
from grader.checks.base import Grading, ItemContext
from grader.checks.given import bound_methods
from grader.config import load_config
from grader.results import Failure
from grader.sandbox.protocol import Reply, _clean_error
from grader.sandbox.session import JUDGE_HANDLES, Session, with_fds
from tests import machinery_kit
from tests.conftest import ROOT

MACHINERY = machinery_kit.machinery()
NAMESPACE: dict[str, Any] = {"__name__": "submission"}
exec(compile((ROOT / "reference" / "paged_attention.py").read_text(encoding="utf-8"), "<cell 1>", "exec"), NAMESPACE)

# Hostile JSON: everything a forged reply could hold.
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=10**300, max_value=10**1000), st.integers(max_value=-(10**300)),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
)
junk = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=12)
shaped = st.one_of(
    st.fixed_dictionaries({"__dict__": st.lists(st.lists(junk, max_size=3), max_size=4)}),
    st.fixed_dictionaries({"__list__": st.lists(junk, max_size=4)}),
    st.fixed_dictionaries({"dtype": st.sampled_from(["float32", "bfloat16", "int64", "bogus"]) | junk, "shape": st.lists(st.integers(-5, 10**20), max_size=9) | junk,
                           "data": st.sampled_from(["", "AAAA", "!!"]) | junk, "device": junk}),
    st.fixed_dictionaries({"output": junk}),
    st.fixed_dictionaries({"free_blocks": junk, "requests": st.dictionaries(st.text(max_size=3), junk, max_size=3) | junk, "pool": junk}),
    st.fixed_dictionaries({"ok": junk, "type": junk}),
)
hostile = st.one_of(junk, shaped)


@dataclasses.dataclass
class Corruption:
    at: int  # which reply of the item (counted from 0)
    part: str  # "value", "state", "error", "ok"
    value: Any


class FakeSession:
    """A session child in this process: the worker's own grader code, one reply corrupted."""

    def __init__(self, plan: Corruption, counter: list[int]):
        self.child = machinery_kit.session(NAMESPACE)
        self.plan, self.counter = plan, counter
        self.alive = True
        self.shares_files = True
        self.pending: list[tuple[dict[str, Any], Any]] = []
        self.handles = JUDGE_HANDLES

    def attach(self, sink: list[Any], scope: str) -> None:
        pass

    def new_handle(self) -> int:
        self.handles += 1
        return self.handles

    def defer(self, op: str, on_reply: Any = None, **fields: Any) -> None:
        self.pending.append(({"op": op, "id": 1, **fields, **({"must_succeed": True} if on_reply else {})}, on_reply))

    def _corrupt(self, reply: dict[str, Any]) -> None:
        number = self.counter[0]
        self.counter[0] += 1
        if number == self.plan.at:
            if self.plan.part == "ok":
                reply["ok"] = not reply.get("ok")
            else:
                reply[self.plan.part] = self.plan.value

    def call(self, op: str, **fields: Any) -> Reply:
        message = {"op": op, "id": 1, **fields}
        pending, self.pending = self.pending, []
        if pending:  # as Session.call sends them: one batch, each reply of it counted and maybe corrupted
            message = {"op": "batch", "id": 1, "ops": [m for m, _ in pending] + [message]}
        message, fds = with_fds(message)  # as the worker receives them: its own descriptors, closed after the request
        self.child["fds"] = [os.dup(fd) for fd in fds]
        try:
            reply = json.loads(json.dumps(MACHINERY.answer(self.child, json.loads(json.dumps(message))), allow_nan=True))
        finally:
            for fd in self.child["fds"]:
                os.close(fd)
            self.child["fds"] = []
        if pending:
            for sub in reply.get("value") or []:
                self._corrupt(sub)
            reply = Session._unbatch(self, reply, pending)  # type: ignore[arg-type]
        else:
            self._corrupt(reply)
        return Reply(
            ok=reply.get("ok") is True,
            value=reply.get("value"),
            error=_clean_error(reply.get("error")),
            state=reply.get("state") if isinstance(reply.get("state"), dict) else None,
        )

    def end(self) -> None:
        self.alive = False

    kill = end


class FakeSandbox:
    def __init__(self, plan: Corruption):
        self.plan, self.counter = plan, [0]

    def session(self, deadline: float) -> FakeSession:
        return FakeSession(self.plan, self.counter)


def _small_config():
    """Few examples: this test is about crashes, not verdicts."""
    config = load_config()
    return dataclasses.replace(
        config,
        hypothesis=dataclasses.replace(config.hypothesis, max_examples=3, stateful_examples=2, stateful_steps=6, attention_examples=2),
        evidence=dataclasses.replace(config.evidence, min_random=1, max_rounds=1),
    )


CONFIG = _small_config()
ITEMS = sorted({i.id for i in CONFIG.items if i.device == "cpu"})
# One item of each TODO family is enough to reach every check (a survey runs them all); the
# given code's checks one by one.
GIVEN = {f"given.{check.__name__}": check for checks in given_checks.CHECKS.values() for check in checks}
FAMILIES = ["todo1.per_token", "todo2.block_count", "todo3.growth", "todo4.table_order", "todo5.mha_fp32", "given.bound", *GIVEN]


def _run(item: str, plan: Corruption) -> None:
    sandbox = FakeSandbox(plan)
    ctx = ItemContext(sandbox, CONFIG, item, None, Grading())  # type: ignore[arg-type]
    try:
        if item == "given.bound":
            bound_methods(ctx, {"Request", "KVCacheManager", "estimate_kv_cache_bytes", "paged_attention"})
        elif item in GIVEN:
            try:
                GIVEN[item](ctx)
            except (given_checks.Differs, Flaky):
                pass  # a finding about given code (as check_given takes it): the call's answer, not a crash
        else:
            failure = CHECKS[item](ctx)
            assert failure is None or isinstance(failure, Failure)
    finally:
        ctx.close()


@settings(max_examples=30, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(FAMILIES), st.integers(0, 40), st.sampled_from(["value", "value", "state", "error", "ok"]), hostile)
def test_no_hostile_reply_escapes_an_item(item: str, at: int, part: str, value: Any) -> None:
    _run(item, Corruption(at, part, value))


@pytest.mark.parametrize(
    "item, value",
    [
        ("todo2.block_count", "seven"),  # a handle that is not an int (int(reply.value) raised)
        ("todo2.block_count", 10**400),
        ("given.allocation_report", {"__dict__": [["logical_tokens", 5], ["allocated_tokens", 8], ["unused_tail_tokens", 3], ["utilization", 10**400]]}),
        ("given.bound", {"__dict__": [["Request.__init__", {"__list__": [1]}]]}),
        ("todo5.mha_fp32", {"output": {"dtype": "float32", "shape": [10**30], "data": ""}}),
        ("todo4.table_order", {"dtype": "float32", "shape": [2, -1], "data": "AAAA"}),
    ],
)
def test_the_replies_that_crashed_the_judge(item: str, value: Any) -> None:
    for at in range(0, 8):
        _run(item, Corruption(at, "value", value))
