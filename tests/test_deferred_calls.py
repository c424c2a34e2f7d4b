"""Calls sent ahead in the next call's frame (Session.defer): answered in order, their replies read
before that call returns, and nothing run after one that failed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from grader.config import load_config
from grader.sandbox.client import Sandbox
from grader.sandbox.protocol import Reply, WorkerLost
from grader.sandbox.session import Session
from grader.submission import load_submission
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    config = load_config()
    submission = load_submission(ROOT / "reference" / "paged_attention.py", config.limits.max_file_mb << 20)
    with Sandbox(submission.cells, config.limits, notebook=False) as box:
        assert not box.load().failed
        yield box


@pytest.fixture
def session(sandbox: Sandbox) -> Iterator[Session]:
    opened = sandbox.session(time.monotonic() + 60)
    yield opened
    opened.end()


class Failed(Exception):
    pass


def _seq_len(reply: Reply, handle: int) -> Any:
    return ((reply.state or {}).get("requests", {}).get(str(handle), {}).get("seq_len") or {}).get("ok")


def test_deferred_requests_run_first_in_one_frame(session: Session) -> None:
    seen: list[Reply] = []
    frames = session._frames
    session.defer("reseed")
    first, second = session.new_handle(), session.new_handle()
    session.defer("new", seen.append, cls="Request", kwargs={"request_id": 1, "prompt_len": 5}, handle=first)
    session.defer("new", seen.append, cls="Request", kwargs={"request_id": 2, "prompt_len": 9}, handle=second)
    reply = session.call("observe", snapshot={"requests": [first, second]})
    assert session._frames == frames + 1  # one round trip for all four
    assert [(r.ok, r.value) for r in seen] == [(True, first), (True, second)]
    assert (_seq_len(reply, first), _seq_len(reply, second)) == (5, 9)


def test_nothing_runs_after_a_deferred_request_that_failed(session: Session) -> None:
    def refuse(reply: Reply) -> None:
        if not reply.ok:
            raise Failed((reply.error or {}).get("type"))

    taken = session.new_handle()
    session.defer("new", refuse, cls="Request", kwargs={"request_id": 1, "prompt_len": -3, "nonsense": True}, handle=taken)
    after = session.new_handle()
    with pytest.raises(Failed):
        session.call("new", cls="Request", kwargs={"request_id": 2, "prompt_len": 4}, handle=after)
    # The call after the failed one never ran: its handle is still free.
    assert session.call("new", cls="Request", kwargs={"request_id": 3, "prompt_len": 4}, handle=after).ok


def test_a_handle_the_worker_already_holds_is_refused(session: Session) -> None:
    handle = session.new_handle()
    assert session.call("new", cls="Request", kwargs={"request_id": 1, "prompt_len": 1}, handle=handle).ok
    again = session.call("new", cls="Request", kwargs={"request_id": 2, "prompt_len": 1}, handle=handle)
    assert not again.ok and (again.error or {}).get("type") == "TypeError"


@pytest.mark.parametrize("value", [None, [], "x", [1, 2], [{"ok": True}] * 5], ids=["none", "empty", "text", "not dicts", "too many"])
def test_a_batch_reply_of_the_wrong_form_is_a_protocol_error(value: Any) -> None:
    session = Session.__new__(Session)  # only _unbatch, no process
    pending = [({"op": "reseed"}, None), ({"op": "new"}, None)]
    with pytest.raises(WorkerLost) as lost:
        session._unbatch({"ok": True, "value": value}, pending)
    assert lost.value.reason == "protocol"


def test_a_batch_cut_short_without_a_failure_is_a_protocol_error() -> None:
    session = Session.__new__(Session)
    with pytest.raises(WorkerLost):
        session._unbatch({"ok": True, "value": [{"ok": True, "value": None}]}, [({"op": "reseed"}, None)])


def test_attention_is_never_deferred(session: Session) -> None:
    with pytest.raises(ValueError):
        session.defer("attention")
