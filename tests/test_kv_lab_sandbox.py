"""`kv-lab --submission`: a student's allocator served in the sandbox, as grading runs it; and the
judge's reading of what the sandbox answers, whatever it answers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from grader import cli
from grader.kvlab.memory import AllocatorError, StepPlan, Unfinished
from grader.kvlab.sandboxed import SandboxDriver
from grader.sandbox.protocol import Reply, WorkerLost
from tests.conftest import CORPUS, ROOT, STUDENT_NB

SMALL = ["--requests", "150", "--pool-blocks", "256", "--max-model-len", "512", "--lang", "en", "--quiet"]


# --- the judge's side, against a session that answers anything ------------------------------------

def _error(kind: str, isa: list[str], not_implemented: bool = False) -> dict[str, Any]:
    return {"type": kind, "message": "m", "traceback": "", "isa": isa, "not_implemented": not_implemented}


class FakeSession:
    """Answers `new` with a handle, then each kv_lab_step with the next scripted value."""

    def __init__(self, *steps: Any):
        self.steps = list(steps)
        self.sent: list[dict[str, Any]] = []
        self.ended = False

    def call(self, op: str, **fields: Any) -> Reply:
        self.sent.append({"op": op, **fields})
        if op == "new":
            return Reply(ok=True, value=1)
        step = self.steps.pop(0)
        if isinstance(step, BaseException):
            raise step
        return step if isinstance(step, Reply) else Reply(ok=True, value=step)

    def end(self) -> None:
        self.ended = True


PLAN = StepPlan(release_first=[], decode=[0, 1], release_after=[], admit=[(2, 5, 9)], keep=[0, 1])
GOOD = {"decoded": 2, "admitted": 1, "free": 3, "tables": [1, 2, 1], "seqs": [4, 6, 5]}


def _step(value: Any, plan: StepPlan = PLAN) -> Any:
    return SandboxDriver(FakeSession(value), num_blocks=8, block_size=4).step(plan)  # type: ignore[arg-type]


def test_a_well_formed_step_is_read_as_it_came() -> None:
    session = FakeSession(GOOD)
    driver = SandboxDriver(session, num_blocks=8, block_size=4)  # type: ignore[arg-type]
    outcome, seen = driver.step(PLAN)
    assert (outcome.decoded, outcome.admitted) == (2, 1)
    assert seen is not None and (seen.free, seen.tables, seen.seqs) == (3, [1, 2, 1], [4, 6, 5])
    assert session.sent[1] == {"op": "kv_lab_step", "manager": 1, "release_first": [], "decode": [0, 1], "release_after": [],
                               "admit": [[2, 5]], "keep": [0, 1], "audit": False}
    driver.close()
    assert session.ended


def test_out_of_blocks_is_told_from_every_other_failure() -> None:
    oom = {"decoded": 1, "admitted": 0, "failed": {"call": "allocate_for_decode", "request": 1, "error": _error("OOMError", ["RuntimeError", "Exception"])}}
    outcome, seen = _step(oom)
    assert (outcome.decoded, outcome.admitted, seen) == (1, 0, None)
    unfinished = {**oom, "failed": {**oom["failed"], "error": _error("NotImplementedError", ["NotImplementedError", "RuntimeError"], True)}}
    with pytest.raises(Unfinished):
        _step(unfinished)
    other = {**oom, "failed": {**oom["failed"], "error": _error("KeyError", ["KeyError", "LookupError"])}}
    with pytest.raises(AllocatorError, match="allocate_for_decode on request 1 raised KeyError"):
        _step(other)
    admit_oom = {**GOOD, "admitted": 0, "tables": [1, 2], "seqs": [4, 6], "admit_stopped": {"request": 2, "error": _error("RuntimeError", ["RuntimeError"])}}
    assert _step(admit_oom)[0].admitted == 0
    admit_bad = {**admit_oom, "admit_stopped": {"request": 2, "error": _error("ValueError", ["ValueError"])}}
    with pytest.raises(AllocatorError, match="allocate_for_prefill on request 2 raised ValueError"):
        _step(admit_bad)


@pytest.mark.parametrize("value", [
    None, [], "x", {}, {**GOOD, "decoded": 3}, {**GOOD, "decoded": True}, {**GOOD, "decoded": 1}, {**GOOD, "admitted": -1},
    {**GOOD, "free": 9}, {**GOOD, "free": 2.0}, {**GOOD, "free": None}, {**GOOD, "tables": [1, 2]}, {**GOOD, "tables": "abc"},
    {**GOOD, "tables": [1, 2, "1"]}, {**GOOD, "seqs": [4, 6, -5]}, {**GOOD, "seqs": [4, 6, 1 << 80]}, {**GOOD, "failed": "x"},
    {**GOOD, "admit_stopped": {"request": 7, "error": _error("RuntimeError", ["RuntimeError"])}},
    {**GOOD, "admit_stopped": ["x"]},
    {"decoded": 0, "admitted": 0, "failed": {"call": "allocate_for_decode", "request": 9, "error": _error("RuntimeError", ["RuntimeError"])}},
])
def test_a_malformed_answer_stops_the_lab_with_a_message(value: Any) -> None:
    with pytest.raises(AllocatorError) as caught:
        _step(value)
    assert caught.value.text("en") and caught.value.text("zh")


def test_an_audit_answer_is_read_and_checked() -> None:
    plan = StepPlan([], [0, 1], [], [(2, 5, 9)], [0, 1], audit=True)
    audited = {**GOOD, "free_list": [5, 6, 7], "table_lists": [[0], [1, 2], [3]]}
    seen = _step(audited, plan)[1]
    assert seen.free_list == [5, 6, 7] and seen.table_lists == [[0], [1, 2], [3]]
    for bad in ({**audited, "free_list": [5, 6]}, {**audited, "table_lists": [[0], [1, 2]]}, {**audited, "table_lists": [[0], [1], [3]]}, {**GOOD}):
        with pytest.raises(AllocatorError, match="malformed"):
            _step(bad, plan)


def test_a_session_that_dies_or_fails_is_a_message() -> None:
    with pytest.raises(AllocatorError, match="stopped answering"):
        _step(WorkerLost("exited", "gone"))
    with pytest.raises(AllocatorError, match="a lab step raised"):
        _step(Reply(ok=False, error=_error("TypeError", ["TypeError"])))


# --- through the sandbox ----------------------------------------------------------------------------

def _lab(tmp_path: Path, *argv: str) -> tuple[int, dict[str, Any]]:
    out = tmp_path / "lab.json"
    status = cli.main(["kv-lab", *SMALL, "--json", str(out), *argv])
    return status, json.loads(out.read_text(encoding="utf-8")) if out.exists() else {}


@pytest.mark.slow
def test_a_correct_submission_in_the_sandbox_gives_the_references_figures(tmp_path: Path) -> None:
    status, sandboxed = _lab(tmp_path, "--submission", str(ROOT / "reference" / "paged_attention.py"), "--block-size", "16,32")
    assert status == 0
    status, local = _lab(tmp_path, "--block-size", "16,32")
    assert status == 0
    assert sandboxed.pop("allocator") == "submission paged_attention.py" and local.pop("allocator") == "reference"
    assert [row["block_size"] for row in sandboxed["sweep"]] == [16, 32]
    assert sandboxed == local  # the same scheduler, the same calls: the same figures, step for step


@pytest.mark.slow
def test_a_leaking_or_unfinished_submission_is_shown_and_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Prefill takes blocks one at a time and keeps them when it runs out: each failed admission leaks.
    status, figures = _lab(tmp_path, "--submission", str(CORPUS / "buggy" / "todo2_alloc_before_check.py"))
    paged = figures["policies"]["paged"]
    assert status == 1 and paged["leaked_fraction"] > 0 and "lost" in paged["error"]
    assert "lost" in capsys.readouterr().err
    status, figures = _lab(tmp_path, "--submission", str(STUDENT_NB))
    assert status == 1 and "finish TODO 2 and TODO 3" in figures["policies"]["paged"]["error"]
    nothing = tmp_path / "nothing.py"
    nothing.write_text("x = 1\n", encoding="utf-8")
    assert _lab(tmp_path, "--submission", str(nothing))[0] == 2
    assert "defines no class KVCacheManager or Request" in capsys.readouterr().err


@pytest.mark.slow
def test_a_fresh_checkout_shows_paging_against_static_reservation(tmp_path: Path) -> None:
    """The issue's bar, with every default: the ShareGPT-like trace through the reference allocator."""
    proc = subprocess.run([sys.executable, "-m", "grader", "kv-lab", "--lang", "en", "--json", str(tmp_path / "lab.json"),
                           "--svg", str(tmp_path / "lab.svg")], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr
    policies = json.loads((tmp_path / "lab.json").read_text(encoding="utf-8"))["policies"]
    assert policies["paged"]["token_state_fraction"] >= 0.9 and policies["static"]["token_state_fraction"] <= 0.45
    assert policies["paged"]["mean_running"] >= 2 * policies["static"]["mean_running"]
    assert (tmp_path / "lab.svg").read_text(encoding="utf-8").startswith("<svg") and "Paging keeps" in proc.stdout
