"""Paging through a submission's allocator, run in the sandbox as grading runs it.

The scheduler stays here, in the judge: it decides every call.  The submission's cells are
loaded once (grader/sandbox/client.py); each paged run forks a session child of its own,
builds a KVCacheManager there, and sends one `kv_lab_step` operation per scheduler step
(grader/sandbox/answers.py): the calls of that step, in order, and a reading of the free
list, the block tables and the lengths they left.  What comes back is the submission's word:
its shape is checked here before anything uses it, and what it says is checked against what
the scheduler knows (memory.PagedMemory).  Anything malformed stops the lab with a message,
never with a traceback.  Limits are grading's own (grader/config.toml [limits]): a call may
use `call_timeout_s` of CPU, the whole lab `total_budget_s`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from grader.config import Config
from grader.folder import plan as plan_folder
from grader.kvlab.memory import AllocatorError, Observation, StepOutcome, StepPlan, Unfinished
from grader.sandbox.client import Sandbox
from grader.sandbox.clock import Budget
from grader.sandbox.protocol import BudgetExceeded, WorkerLost, _clean_error
from grader.sandbox.session import Session
from grader.submission import load_submission

NEEDED = ("KVCacheManager", "Request")
HEAD_DIM = 1


class SubmissionUnusable(Exception):
    """The submission cannot be served at all (unreadable, or without the allocator's classes)."""


def _malformed(what: str) -> AllocatorError:
    return AllocatorError(f"the submission's process answered something malformed ({what})",
                          f"提交的进程返回了格式不对的结果（{what}）")


def _is_oom(error: dict[str, Any]) -> bool:
    return "RuntimeError" in error["isa"] and not error["not_implemented"]


def _raised(call: str, request: Any, error: dict[str, Any]) -> AllocatorError:
    if error["not_implemented"] and call in ("allocate_for_prefill", "allocate_for_decode", "release_request"):
        return Unfinished(call)
    on = f" on request {request}" if type(request) is int else ""
    on_zh = f"（请求 {request}）" if type(request) is int else ""
    what = f"{error['type']}: {error['message'][:300]}"
    return AllocatorError(f"{call}{on} raised {what}", f"{call}{on_zh} 抛出了 {what}", request=request if type(request) is int else None)


def _ints(value: Any, count: int | None, what: str, limit: int) -> list[int]:
    if not isinstance(value, list) or (count is not None and len(value) != count):
        raise _malformed(what)
    if not all(type(v) is int and 0 <= v <= limit for v in value):
        raise _malformed(what)
    return value


class SandboxDriver:
    """One paged run's allocator: a session child holding a KVCacheManager of the submission."""

    def __init__(self, session: Session, num_blocks: int, block_size: int):
        self.session = session
        self.num_blocks = num_blocks
        reply = self._call("new", cls="KVCacheManager", kwargs={"num_blocks": num_blocks, "block_size": block_size, "head_dim": HEAD_DIM})
        if not reply.ok or type(reply.value) is not int:
            self.close()
            raise _raised("KVCacheManager(...)", None, reply.error or _clean_error({}) or {})
        self.manager = reply.value

    def _call(self, op: str, **fields: Any) -> Any:
        try:
            return self.session.call(op, **fields)
        except BudgetExceeded:
            raise AllocatorError("the lab used up the time grading allows a submission",
                                 "实验用完了评分给一份提交的时间") from None
        except WorkerLost as lost:
            raise AllocatorError(f"the submission's process stopped answering ({lost})",
                                 f"提交的进程不再响应（{lost}）") from None

    def step(self, plan: StepPlan) -> tuple[StepOutcome, Observation | None]:
        reply = self._call(
            "kv_lab_step", manager=self.manager, release_first=plan.release_first, decode=plan.decode,
            release_after=plan.release_after, admit=[[r, now] for r, now, _ in plan.admit], keep=plan.keep, audit=plan.audit,
        )
        if not reply.ok:
            raise _raised("a lab step", None, reply.error or {"type": "?", "message": "", "isa": [], "not_implemented": False})
        value = reply.value
        if not isinstance(value, dict):
            raise _malformed("not an object")
        decoded, admitted = value.get("decoded"), value.get("admitted")
        if type(decoded) is not int or not 0 <= decoded <= len(plan.decode):
            raise _malformed("decoded")
        if type(admitted) is not int or not 0 <= admitted <= len(plan.admit):
            raise _malformed("admitted")
        failed = value.get("failed")
        if failed is not None:
            if not isinstance(failed, dict):
                raise _malformed("failed")
            error = _clean_error(failed.get("error")) or _clean_error({})
            assert error is not None
            call = str(failed.get("call", "?"))[:80]
            request = failed.get("request")
            at_decode = call == "allocate_for_decode" and decoded < len(plan.decode) and request == plan.decode[decoded]
            if at_decode and _is_oom(error):
                return StepOutcome(decoded, 0), None  # out of blocks: the scheduler preempts
            raise _raised(call, request, error)
        if decoded != len(plan.decode):
            raise _malformed("decoded")
        stopped = value.get("admit_stopped")
        if stopped is not None:
            error = _clean_error(stopped.get("error")) if isinstance(stopped, dict) else None
            if error is None or admitted >= len(plan.admit) or stopped.get("request") != plan.admit[admitted][0]:
                raise _malformed("admit_stopped")
            if not _is_oom(error):
                raise _raised("allocate_for_prefill", stopped.get("request"), error)
        observed = len(plan.keep) + admitted
        seen = Observation(
            free=_ints([value.get("free")], 1, "free", self.num_blocks)[0],
            tables=_ints(value.get("tables"), observed, "tables", self.num_blocks),
            seqs=_ints(value.get("seqs"), observed, "seqs", 1 << 40),
        )
        if plan.audit:
            table_lists = value.get("table_lists")
            if not isinstance(table_lists, list) or len(table_lists) != observed:
                raise _malformed("table_lists")
            seen = Observation(
                seen.free, seen.tables, seen.seqs,
                free_list=_ints(value.get("free_list"), seen.free, "free_list", 1 << 40),
                table_lists=[_ints(t, n, "table_lists", 1 << 40) for t, n in zip(table_lists, seen.tables, strict=True)],
            )
        return StepOutcome(decoded, admitted), seen

    def close(self) -> None:
        self.session.end()


@contextlib.contextmanager
def sandboxed_allocator(path: Path, config: Config) -> Iterator[SandboxAllocator]:
    """A factory of SandboxDrivers for the submission at `path`, its cells loaded once.

    Raises SubmissionUnusable when the file cannot be read or defines no allocator."""
    from grader.submission import SubmissionError

    try:
        submission = load_submission(path, config.limits.max_file_mb << 20)
        submission.folder = plan_folder(path, path.parent, config.notebook)
    except SubmissionError as error:
        raise SubmissionUnusable(error.en) from None
    deadline = time.monotonic() + config.limits.total_budget_s
    with Sandbox(submission.cells, config.limits, folder=submission.folder, notebook=submission.kind == "notebook") as sandbox:
        report = sandbox.load()
        if report.failed is not None:
            raise SubmissionUnusable(f"the submission could not be run: {report.failed}")
        missing = [name for name in NEEDED if (report.names.get(name) or {}).get("kind") != "class"]
        if missing:
            raise SubmissionUnusable(f"the submission defines no class {' or '.join(missing)} (after running its cells)")
        yield SandboxAllocator(sandbox, Budget(float(config.limits.total_budget_s), wall_backstop=config.limits.wall_backstop, wall_deadline=deadline))


class SandboxAllocator:
    """Makes a SandboxDriver per paged run, each in a session child of its own; `budget` counts
    the CPU of the judge's thread and of every session (the lab's, against grading's limits)."""

    def __init__(self, sandbox: Sandbox, budget: Budget):
        self.sandbox, self.budget = sandbox, budget

    def __call__(self, num_blocks: int, block_size: int) -> SandboxDriver:
        try:
            session = self.sandbox.session(self.budget)
        except WorkerLost as lost:
            raise AllocatorError(f"the submission's process could not start a session ({lost})",
                                 f"无法为提交启动会话（{lost}）") from None
        return SandboxDriver(session, num_blocks, block_size)
