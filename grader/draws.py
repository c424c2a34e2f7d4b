"""The examples a grading draws depend on the configuration's seed and the checks alone.

Hypothesis, now and then, draws a constant found in the source of a "local" module (not the
standard library, not site-packages) loaded at that moment.  Left to itself, that set depends on
how the grader was started: `grade` has the CLI and every verb loaded, `grader.check()`'s grading
process does not, a warm batch's judge has what its server imported, pytest has the tests, and an
installed grader (in site-packages) has none.  The same submission could then meet other
examples, and get another grade, depending on how it was graded.

So every grading draws from one fixed set: the constants written in the checks' own source
(`grader/checks/*.py`: the contract's corners, block sizes, lengths), read from those files
whatever is loaded and wherever the grader is installed.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CHECKS = Path(__file__).with_name("checks")
_PINNED: Any = None


def checks_constants() -> Any:
    """The constants of the checks' source files, in hypothesis' own sorted sets (a fixed order)."""
    from hypothesis.internal.constants_ast import Constants, _constants_from_source
    from hypothesis.internal.floats import float_to_int
    from sortedcontainers import SortedSet

    found = Constants(integers=SortedSet(), floats=SortedSet(key=float_to_int), bytes=SortedSet(), strings=SortedSet())
    for path in sorted(CHECKS.glob("*.py")):
        try:
            found |= _constants_from_source(path.read_bytes(), limit=True)
        except Exception:  # a file hypothesis cannot read gives nothing, the same way every time
            continue
    return found


def pin_local_constants() -> None:
    """Make hypothesis draw from the checks' constants and no others, in this process (idempotent)."""
    global _PINNED
    if _PINNED is not None:
        return
    _skip_global_random_check()
    _digest_by_name()
    try:
        from hypothesis.internal.conjecture import providers

        pinned = checks_constants()
    except ImportError:  # another hypothesis, without local constants: nothing to pin
        _PINNED = True
        return

    def the_checks_constants() -> Any:
        return pinned

    providers._get_local_constants = the_checks_constants
    providers.CONSTANTS_CACHE.cache.clear()
    _PINNED = pinned


def _skip_global_random_check() -> None:
    """`data.draw` compares the global `random` module's state before and after each draw, to warn
    a strategy that uses it (two copies of 625 words a draw: 7% of the allocator's judge CPU).
    The checks' strategies never use it (their own `random.Random` only), and the warning would
    say nothing a grading acts on; the examples drawn are the same."""
    try:
        from hypothesis.strategies._internal import core
    except ImportError:
        return
    if hasattr(core, "deprecate_random_in_strategy"):
        core.deprecate_random_in_strategy = _no_check


@contextlib.contextmanager
def _no_check(*args: Any) -> Iterator[None]:
    yield


def _digest_by_name() -> None:
    """Hypothesis keys its example database by a digest of each test's source: it reads the
    source file and tokenizes the function (for a state machine, the whole class) each time a
    test runs, some 20 times a grading (0.15 CPU s).  The checks run without a database
    (base.hypothesis_settings), where the key is never used; and under @seed it does not choose
    the examples either.  A digest of the test's name serves."""
    try:
        from hypothesis import core, stateful
    except ImportError:
        return
    for module in (core, stateful):
        if hasattr(module, "function_digest"):
            module.function_digest = _name_digest


def _name_digest(function: Any) -> bytes:
    name = f"{getattr(function, '__module__', '')}.{getattr(function, '__qualname__', repr(type(function)))}"
    return hashlib.sha384(name.encode("utf-8", "surrogatepass")).digest()
