"""Stopping a batch on SIGINT or SIGTERM without leaving half of anything behind.

A stop signal raises KeyboardInterrupt in the main thread, at whatever bytecode it is on.  Code
that must not be cut in two (a scorecard's write and rename: a cut between mkstemp and the
rename leaves a `.tmp` file in the class folder) runs under `held()`: the interrupt is raised
when the block ends instead.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _Held:
    depth = 0  # nesting of held() blocks in the main thread
    pending = False  # a stop signal came while held


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    if _Held.depth:
        _Held.pending = True
        return
    raise KeyboardInterrupt


@contextmanager
def _handling(handler: object) -> Iterator[None]:
    """STOP_SIGNALS handled by `handler` in the block (the main thread only sets handlers), then as before."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}  # type: ignore[arg-type]
    try:
        yield
    finally:
        for sig, previous in saved.items():
            signal.signal(sig, previous if previous is not None else signal.SIG_DFL)


def stop_on_signals() -> AbstractContextManager[None]:
    """SIGINT and SIGTERM (Ctrl-C, `kill`, a CI cancel) raise KeyboardInterrupt in the main thread.

    Installed for SIGINT too, not left to Python: a process that starts with SIGINT ignored
    (a background job of a script, `cmd &` under nohup or cron) keeps it ignored, and so would
    every grader it starts.  A handler of our own is reset to the default in each grader at
    exec, so the graders also stop on the SIGINT the batch sends them.
    """
    return _handling(_raise_interrupt)


def signals_ignored() -> AbstractContextManager[None]:
    return _handling(signal.SIG_IGN)


@contextmanager
def held() -> Iterator[None]:
    """The block runs to its end; a stop signal that came meanwhile is raised after it.

    Only our own handler (stop_on_signals) waits; Python's default SIGINT handler still
    raises at once, and signal handlers only ever run in the main thread, so elsewhere this
    changes nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _Held.depth += 1
    try:
        yield
    finally:
        _Held.depth -= 1
        if not _Held.depth and _Held.pending:  # also after an error in the block: the stop wins
            _Held.pending = False
            raise KeyboardInterrupt
