"""A batch's stop signal never cuts a scorecard's write in two (grader/stopping.py).

CI once found a `.tmp` file in the class folder after a batch was killed: SIGTERM's
KeyboardInterrupt came between mkstemp and the rename.  Here the signal is sent at exactly
that point, in this process, and the write must finish before the interrupt is raised.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from grader import classfolder
from grader.stopping import held, stop_on_signals

pytestmark = pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signal handlers run in the main thread only")


def _let_handlers_run() -> None:
    # The Python-level handler runs at a bytecode boundary soon after the signal: give it many.
    for _ in range(200):
        time.sleep(0.001)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_is_raised_at_once_outside_a_held_block(sig: signal.Signals) -> None:
    steps = []
    with pytest.raises(KeyboardInterrupt), stop_on_signals():
        os.kill(os.getpid(), sig)
        _let_handlers_run()
        steps.append("not stopped")
    assert steps == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_waits_for_the_end_of_a_held_block(sig: signal.Signals) -> None:
    steps = []
    with pytest.raises(KeyboardInterrupt), stop_on_signals():
        with held():
            with held():  # nested: raised when the outer one ends
                os.kill(os.getpid(), sig)
                _let_handlers_run()
                steps.append("inner finished")
            steps.append("outer finished")
        steps.append("after the block")
    assert steps == ["inner finished", "outer finished"]


def test_an_error_in_a_held_block_does_not_swallow_the_stop() -> None:
    with pytest.raises(KeyboardInterrupt), stop_on_signals():
        with held():
            os.kill(os.getpid(), signal.SIGTERM)
            _let_handlers_run()
            raise OSError("disk full")


def test_a_scorecard_write_interrupted_mid_way_finishes_and_leaves_no_temporary_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fsync = os.fsync

    def signalled_fsync(fd: int) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        _let_handlers_run()
        fsync(fd)

    monkeypatch.setattr(os, "fsync", signalled_fsync)
    target = tmp_path / "students" / "a.json"
    target.parent.mkdir()
    target.write_text("old")
    with pytest.raises(KeyboardInterrupt), stop_on_signals():
        classfolder.write_atomic(target, "new")
    assert target.read_text() == "new"
    assert sorted(p.name for p in target.parent.iterdir()) == ["a.json"]
