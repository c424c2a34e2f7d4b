"""Small draws straight from hypothesis's choice sequence: the allocator's state machines and the
attention cases make some 8,000 of them a grading.

`data.draw(st.integers(a, b))` validates the strategy, opens a span and labels it, about 30 µs
a draw; `draw_integer(a, b)` on the example's own data makes the same choice (an integer in
[a, b], its ends weighted as st.integers weights them, shrinking towards a) in a fifth of that.
one_of and sampled_from are a choice of an index, as hypothesis makes them.  Shrinking works on
the choices either way; the reproductions come from the cases the checks record, not from
hypothesis's report.  A hypothesis without these methods gets the strategies.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, TypeVar

from hypothesis import strategies as st

try:
    from hypothesis.internal.conjecture.engine import BUFFER_SIZE
    from hypothesis.stateful import STATE_MACHINE_RUN_LABEL as STEP_LABEL
except ImportError:  # another hypothesis: its usual size and a label of our own
    BUFFER_SIZE, STEP_LABEL = 8 * 1024, 0x5EED

T = TypeVar("T")


Source = Any  # st.data()'s object, or the `draw` a @composite strategy is given
Alternative = int | tuple[int, int] | Sequence[int]  # a constant, a range [low, high], options


@functools.lru_cache(maxsize=4096)
def _ints(low: int, high: int) -> st.SearchStrategy[int]:
    return st.integers(low, high)


def _choices(source: Source) -> Any:
    """The example's ConjectureData: st.data()'s holds it, a composite's `draw` is its method."""
    choices = getattr(source, "conjecture_data", None) or getattr(source, "__self__", None)
    return choices if hasattr(choices, "draw_integer") and hasattr(choices, "draw_boolean") else None


def _draw(source: Source, strategy: st.SearchStrategy[T]) -> T:
    return source.draw(strategy) if isinstance(source, st.DataObject) else source(strategy)


def integer(source: Source, low: int, high: int) -> int:
    """An int in [low, high], as st.integers(low, high) draws it: over a range of more than 128,
    the ends and their neighbours more often (6 draws in 128)."""
    choices = _choices(source)
    if choices is None:
        return _draw(source, _ints(low, high))
    if high - low > 127:
        ends = {low: 2 / 128, low + 1: 1 / 128, high - 1: 1 / 128, high: 2 / 128}
        return int(choices.draw_integer(low, high, weights=ends))
    return int(choices.draw_integer(low, high))


def boolean(source: Source) -> bool:
    choices = _choices(source)
    if choices is None:
        return _draw(source, st.booleans())
    return bool(choices.draw_boolean())


def pick(source: Source, items: Sequence[T]) -> T:
    """One of `items` (not empty), shrinking towards the first: st.sampled_from's choice."""
    return items[integer(source, 0, len(items) - 1)]


def one_of(source: Source, *alternatives: Alternative) -> int:
    """st.one_of of st.just(constant), st.integers(low, high) and st.sampled_from(options), flat:
    a branch, then a value from it."""
    chosen = alternatives[integer(source, 0, len(alternatives) - 1)] if len(alternatives) > 1 else alternatives[0]
    if isinstance(chosen, int):
        return chosen
    if isinstance(chosen, tuple):
        return integer(source, chosen[0], chosen[1])
    return pick(source, chosen)


def permutation(source: Source, n: int) -> list[int]:
    """An order of range(n): each place in turn takes one of the values not yet placed (the
    identity when every choice is 0, where shrinking leads)."""
    rest, order = list(range(n)), []
    while rest:
        order.append(rest.pop(integer(source, 0, len(rest) - 1)))
    return order


def should_stop(data: Source, steps: int, max_steps: int) -> bool:
    """Whether a run of steps ends here: at max_steps, or (rarely, so that shrinking can drop steps
    from the end) earlier, as hypothesis's state machines decide it.  `steps`: the rules run so
    far, the state's making the first of them (1 at the first decision).  Each step is a span of
    their label, as theirs are (the shrinker deletes and copies steps whole); it ends when the
    next one's decision is drawn, or is left open at the last, as theirs is."""
    choices = _choices(data)
    if choices is not None:
        if steps > 1:
            choices.stop_span()
        choices.start_span(STEP_LABEL)
    if steps >= max_steps:
        forced: bool | None = True
    elif steps == 0:
        forced = False
    elif getattr(choices, "length", 0) > 0.8 * BUFFER_SIZE:  # better fewer steps than an overrun, as hypothesis says
        forced = True
    else:
        forced = None
    if choices is None:
        return forced if forced is not None else False
    return bool(choices.draw_boolean(p=2**-16, forced=forced))
