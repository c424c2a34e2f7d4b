"""What every check shares: the failure it raises, the session it drives, the way it runs hypothesis.

A check runs in the judge.  It sends operations to a sandbox session, keeps its own model
of what should happen, and raises CheckFailure with a reproduction when the two disagree.
Hypothesis shrinks that failure; the last one raised is the smallest, and is what we report.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, Phase, settings

from grader.config import Config
from grader.results import Failure, Text
from grader.sandbox.client import BudgetExceeded, Reply, Sandbox, Session, WorkerLost


class CheckFailure(AssertionError):
    """The submission did something the contract forbids."""

    def __init__(self, failure: Failure):
        super().__init__(failure.message.en)
        self.failure = failure


class Abort(BaseException):
    """Stop the item now, without shrinking (a hang, a dead process, a TODO not written yet)."""

    def __init__(self, failure: Failure):
        super().__init__(failure.message.en)
        self.failure = failure


@dataclass
class Repro:
    """The reproduction of the current example, as the lines a student would type."""

    lines: list[str] = field(default_factory=list)

    def add(self, line: str) -> None:
        self.lines.append(line)

    def text(self, limit: int) -> str:
        if len(self.lines) <= limit:
            return "\n".join(self.lines)
        head = self.lines[: limit // 4]
        tail = self.lines[-(limit - len(head) - 1) :]
        return "\n".join([*head, f"# ... {len(self.lines) - len(head) - len(tail)} more steps ...", *tail])


class ItemContext:
    """The sandbox, configuration and bookkeeping one rubric item runs with."""

    def __init__(self, sandbox: Sandbox, config: Config, item_id: str, submission_deadline: float | None = None):
        self.sandbox = sandbox
        self.config = config
        self.item_id = item_id
        self.deadline = time.monotonic() + config.limits.item_budget_s
        if submission_deadline is not None:
            self.deadline = min(self.deadline, submission_deadline)
        self._session: Session | None = None
        self.repro = Repro()
        self.examples = 0
        self.last_failure: Failure | None = None

    def new_example(self) -> Repro:
        self.examples += 1
        self.repro = Repro()
        return self.repro

    def session(self) -> Session:
        if self._session is None or not self._session.alive:
            self._session = self.sandbox.session(self.deadline)
        return self._session

    def close(self) -> None:
        if self._session is not None:
            self._session.end()

    def call(self, op: str, **fields: Any) -> Reply:
        """One operation.  A dead or hung worker stops the item with the steps so far."""
        try:
            return self.session().call(op, **fields)
        except WorkerLost as lost:
            raise Abort(lost_failure(lost, self.repro, self.config)) from None

    def fail(self, kind: str, zh: str, en: str, *, expected: str = "", actual: str = "", traceback: str = "") -> CheckFailure:
        failure = Failure(
            kind=kind,
            message=Text(zh, en),
            repro=self.repro.text(self.config.feedback.max_repro_lines),
            expected=expected,
            actual=actual,
            traceback=traceback if self.config.feedback.show_traceback else "",
        )
        self.last_failure = failure
        return CheckFailure(failure)


def lost_failure(lost: WorkerLost, repro: Repro, config: Config) -> Failure:
    limit = config.limits.call_timeout_s
    messages = {
        "timeout": Text(
            f"最后一步运行超过 {limit:g} 秒没有返回（死循环？），已终止",
            f"the last step ran for more than {limit:g} s without returning (an endless loop?) and was stopped",
        ),
        "exited": Text(
            "最后一步让进程退出或崩溃了（sys.exit / os._exit / 内存耗尽？）",
            "the last step made the process exit or crash (sys.exit / os._exit / out of memory?)",
        ),
        "too_large": Text("返回的数据过大", "the returned data was too large"),
        "protocol": Text("提交的代码干扰了评分通道", "the submission interfered with the grading channel"),
    }
    message = messages.get(lost.reason, messages["protocol"])
    return Failure(
        kind="timeout" if lost.reason == "timeout" else "crashed",
        message=message,
        repro=repro.text(config.feedback.max_repro_lines),
        actual=lost.detail,
    )


def student_error(ctx: ItemContext, reply: Reply, what: str, todo_label: str) -> BaseException:
    """The exception to raise when a student's call raised unexpectedly."""
    error = reply.error or {}
    etype, message = str(error.get("type", "Error")), str(error.get("message", ""))[:500]
    if error.get("not_implemented"):
        return Abort(
            Failure(
                kind="not_implemented",
                message=Text(f"{todo_label} 还没有实现（{what} 抛出 NotImplementedError）", f"{todo_label} is not implemented yet ({what} raised NotImplementedError)"),
                repro=ctx.repro.text(ctx.config.feedback.max_repro_lines),
            )
        )
    if error.get("rejected_return"):
        return ctx.fail(
            "wrong",
            f"{what} 的返回值不符合要求：{message}",
            f"{what} returned a value the contract does not allow: {message}",
            actual=message,
        )
    hint_zh = hint_en = ""
    if etype == "TypeError" and "argument" in message:
        hint_zh, hint_en = "（函数签名与模板一致吗？）", " (does the signature match the template's?)"
    return ctx.fail(
        "error",
        f"{what} 意外抛出 {etype}: {message}{hint_zh}",
        f"{what} raised {etype}: {message}{hint_en}",
        actual=f"{etype}: {message}",
        traceback=str(error.get("traceback", "")),
    )


def hypothesis_settings(config: Config, max_examples: int, stateful: bool = False) -> settings:
    kwargs: dict[str, Any] = {}
    if stateful:
        kwargs["stateful_step_count"] = config.hypothesis.stateful_steps
    return settings(
        max_examples=max_examples,
        database=None,
        deadline=None,
        derandomize=False,  # the seed comes from the configuration, through @seed
        phases=(Phase.explicit, Phase.generate, Phase.shrink),
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
        print_blob=False,
        verbosity=settings.default.verbosity.quiet,
        **kwargs,
    )


def run_until_failure(ctx: ItemContext, run: Callable[[], None]) -> Failure | None:
    """Run a hypothesis test; return the smallest failure it found, or None when it passed."""
    try:
        run()
    except CheckFailure as failure:
        return failure.failure
    except Abort as abort:
        return abort.failure
    except BudgetExceeded:
        if ctx.last_failure is not None:
            return ctx.last_failure
        if ctx.examples > 1:
            # Slow but never wrong: every case that finished passed.  Time limits only stop
            # code that hangs (a hung call fails by its own, shorter, limit).
            return None
        limit = ctx.config.limits.item_budget_s
        return Failure(
            "budget",
            Text(f"这一项的检查超过了 {limit:g} 秒的时间预算", f"this item's checks ran past its {limit:g} s time budget"),
            repro=ctx.repro.text(ctx.config.feedback.max_repro_lines),
        )
    except Exception as error:  # Flaky and friends: keep the last real failure we saw
        if ctx.last_failure is not None:
            return ctx.last_failure
        return Failure(
            "error",
            Text(f"检查无法完成：{type(error).__name__}", f"the check could not complete: {type(error).__name__}"),
            actual=str(error)[:500],
        )
    return None
