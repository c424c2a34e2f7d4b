"""The examples a grading draws depend on the configuration's seed and the checks' strategies alone.

Hypothesis, now and then, draws a constant found in the source of a "local" module (not the
standard library, not site-packages) loaded at that moment.  For the grader those are its own
modules when it runs from a checkout (none when installed from a wheel), plus whatever else the
process happens to have loaded: `grade` has the CLI and every verb, `grader.check()`'s grading
process does not, a warm batch's judge has what its server imported, pytest has the tests.  The
same submission could then meet other examples, and get another grade, depending on how it was
graded.  So a grading draws from no local constants at all: the checks' corners are written out
(grader/checks/), and the random cases come from the contract's domain.
"""

from __future__ import annotations

_PINNED = False


def pin_local_constants() -> None:
    """Make hypothesis find no local constants in this process, once and for all (idempotent)."""
    global _PINNED
    if _PINNED:
        return
    try:
        from hypothesis.internal.conjecture import providers
        from hypothesis.internal.constants_ast import Constants
    except ImportError:  # another hypothesis, without local constants: nothing to pin
        _PINNED = True
        return
    none = Constants()

    def no_local_constants() -> Constants:
        return none

    providers._get_local_constants = no_local_constants
    providers.CONSTANTS_CACHE.cache.clear()
    _PINNED = True
