"""The direct draws (grader/checks/choices.py) draw what the strategies they stand for draw,
reach every end, and shrink as hypothesis shrinks."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, find, given, seed, settings
from hypothesis import strategies as st

from grader.checks import choices

QUIET = settings(max_examples=400, database=None, deadline=None, suppress_health_check=list(HealthCheck))


def _collect(draw_one, examples: int = 400) -> list:
    seen = []

    @seed(5)
    @settings(QUIET, max_examples=examples)
    @given(st.data())
    def run(data: st.DataObject) -> None:
        seen.append(draw_one(data))

    run()
    return seen


@pytest.mark.parametrize(("low", "high"), [(0, 0), (1, 4), (0, 127), (1, 4096), (513, 4096)])
def test_integers_stay_in_range_and_reach_both_ends(low: int, high: int) -> None:
    seen = _collect(lambda data: choices.integer(data, low, high))
    assert all(low <= v <= high for v in seen)
    assert {low, high} <= set(seen)


def test_one_of_takes_every_alternative_and_only_them() -> None:
    seen = _collect(lambda data: choices.one_of(data, 7, (100, 110), [1000, 2000]))
    assert set(seen) <= {7, 1000, 2000} | set(range(100, 111))
    assert 7 in seen and 1000 in seen and 2000 in seen and any(100 <= v <= 110 for v in seen)


def test_a_permutation_is_one_and_every_order_of_three_comes() -> None:
    seen = _collect(lambda data: tuple(choices.permutation(data, 3)))
    assert all(sorted(p) == [0, 1, 2] for p in seen)
    assert len(Counter(seen)) == 6


def test_composite_draws_work_through_the_draw_function() -> None:
    @st.composite
    def pair(draw: st.DrawFn) -> tuple[int, bool]:
        return choices.integer(draw, 3, 9), choices.boolean(draw)

    seen = _collect(lambda data: data.draw(pair()))
    assert {v for v, _ in seen} == set(range(3, 10)) and {b for _, b in seen} == {True, False}


def test_failures_shrink_to_the_smallest_choices() -> None:
    @st.composite
    def sizes(draw: st.DrawFn) -> tuple[int, int, list[int]]:
        return choices.integer(draw, 1, 4096), choices.pick(draw, [5, 6, 7]), choices.permutation(draw, 4)

    found = find(sizes(), lambda s: s[0] >= 100, settings=settings(QUIET, max_examples=2000))
    assert found == (100, 5, [0, 1, 2, 3])


def test_without_the_choice_methods_the_strategies_draw() -> None:
    class Plain:
        """A source as another hypothesis might hand it: only a draw function."""

        def __init__(self, data: st.DataObject) -> None:
            self.data = data

        def __call__(self, strategy: st.SearchStrategy) -> object:
            return self.data.draw(strategy)

    seen = _collect(lambda data: (choices.integer(Plain(data), 2, 5), choices.boolean(Plain(data)), choices.should_stop(Plain(data), 3, 3)))
    assert {v for v, _, _ in seen} == {2, 3, 4, 5} and {b for _, b, _ in seen} == {True, False}
    assert all(stop for _, _, stop in seen)


def test_a_run_of_steps_ends_at_its_length_or_very_rarely_before() -> None:
    # As hypothesis's state machines: a stop is a choice made with odds 2**-16, so that shrinking
    # can end a run early; each step makes choices of its own.
    def run(data: st.DataObject) -> int:
        steps = 1
        while not choices.should_stop(data, steps, 25):
            steps += 1
            choices.integer(data, 0, 1000)
        return steps

    seen = _collect(run, 200)
    # Hypothesis's own runner ends 97 to 99% of them at full length; its generator tries some
    # short ones on purpose (between 2 and 16% here, by seed).
    assert set(seen) <= set(range(1, 26)) and Counter(seen)[25] >= 150
