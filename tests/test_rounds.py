"""Exploration rounds go on while any item still lacking random evidence gains some.

Red team 15's GQA mistake cost `todo5.inputs_unchanged` too: after GQA's failure, the survey's
later rounds (GQA off) raised inputs' evidence from 7 to 19 of 20, and the next round was never
run, because the round's counts were compared with the previous round's list position by
position, and that list had named other items (paging's 19 stood where inputs' now did)."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace
from typing import Any

from grader.checks.running import _explore_rounds


class _Evidence:
    max_rounds = 6

    @staticmethod
    def minimum(item: str) -> int:
        return 20


class _Context(SimpleNamespace):
    def close_example(self) -> None: ...
    def abandon_example(self) -> None: ...
    def close(self) -> None: ...


def _context() -> Any:
    return _Context(config=SimpleNamespace(evidence=_Evidence()), recorded={}, evidence=Counter(), focus=None,
                    out_of_time=False, random=False, last_error=None)


def _rounds(gains: list[dict[str, int]], items: list[str]) -> tuple[Any, int]:
    ctx, ran = _context(), []

    def explore(round_: int, examples: int) -> None:
        ran.append(round_)
        ctx.evidence.update(gains[round_] if round_ < len(gains) else {})

    assert _explore_rounds(ctx, explore, items) is None
    return ctx, len(ran)


def test_a_round_runs_while_an_item_still_lacking_gains() -> None:
    # Round 0: paging 19, inputs 7; round 1: paging 20 (done), inputs 19 -- the same count
    # paging had, at the same position of the lacking list; round 2 tops inputs up.
    gains = [{"paging": 19, "inputs": 7}, {"paging": 1, "inputs": 12}, {"inputs": 1}]
    ctx, ran = _rounds(gains, ["paging", "inputs"])
    assert ctx.evidence == {"paging": 20, "inputs": 20} and ran == 3


def test_rounds_stop_when_a_round_adds_nothing() -> None:
    gains = [{"a": 5, "b": 3}, {"a": 1}, {}, {"a": 14, "b": 17}]
    ctx, ran = _rounds(gains, ["a", "b"])
    assert ran == 3 and ctx.evidence == {"a": 6, "b": 3}  # round 2 added nothing: round 3 is not run


def test_rounds_stop_when_every_item_has_its_evidence() -> None:
    ctx, ran = _rounds([{"a": 20, "b": 25}], ["a", "b"])
    assert ran == 1


def test_rounds_end_at_the_configured_number() -> None:
    ctx, ran = _rounds([{"a": 1}] * 10, ["a"])
    assert ran == _Evidence.max_rounds and ctx.evidence["a"] == _Evidence.max_rounds
