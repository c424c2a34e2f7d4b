"""What every check shares: failures, the context an item runs in, its session, its verdicts.

A check runs in the judge.  It sends operations to a sandbox session, keeps its own model of
what should happen, and raises CheckFailure when the two disagree.  How an item is run
(corner cases, exploration, surveys, confirmation) is in grader/checks/running.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, Phase, settings

from grader.checks.frame import Kept, SharedPool
from grader.checks.replies import checked
from grader.checks.script import Script
from grader.config import Config
from grader.results import Failure, Text
from grader.sandbox.client import Sandbox
from grader.sandbox.clock import Budget
from grader.sandbox.protocol import Reply, WorkerLost
from grader.sandbox.session import Session

# An example run again in a context (a survey's example is confirmed in its item's focus).
Replay = Callable[["ItemContext"], None]

class CheckFailure(AssertionError):
    """The submission did something the contract forbids.

    It remembers how to run its example again (`replay`) and which examples ran before it in
    the same process (`history`), so that the item can confirm it from a fresh process.
    """

    def __init__(self, failure: Failure, replay: Replay | None = None, history: Sequence[Replay] = ()):
        super().__init__(failure.message.en)
        self.failure = failure
        self.replay = replay
        self.history = list(history)


class Abort(BaseException):
    """Stop the item now, without shrinking (a hang, a dead process, a TODO not written yet)."""

    def __init__(self, failure: Failure):
        super().__init__(failure.message.en)
        self.failure = failure


class Inconclusive(Exception):
    """This example cannot go on (another property broke the state beyond reading): no verdict."""


@dataclass
class Need:
    """A pass needs the property behind `key` checked at least `minimum` times."""

    key: str
    minimum: int
    zh: str  # what was not seen, e.g. "decode 从未取走空闲块"
    en: str


@dataclass
class Survey:
    """One run of a TODO's model with every property on and none failing the run.

    Each rubric item of the TODO reads its verdict from it: the checks that passed (counts),
    the first example that broke its property (run again, with the item in focus, to find and
    shrink the failure), or a reason that stops every item (not implemented, too slow, a hang).
    """

    counts: Counter[str]
    witness: dict[str, Script]
    recorded: dict[str, CheckFailure]
    stopped: Failure | None
    examples: int
    evidence: Counter[str] = field(default_factory=Counter)  # per item: random examples completed and checked
    random_tried: int = 0  # random examples begun
    out_of_time: bool = False  # the budget ended the random exploration
    seconds: float = 0.0


@dataclass
class Grading:
    """What items of one grading share: surveys, findings about given code and attention's inputs."""

    given: dict[str, Failure] = field(default_factory=dict)  # by finding key, first one kept
    mutations: list[Failure] = field(default_factory=list)  # paged_attention changed an input
    surveys: dict[str, Survey] = field(default_factory=dict)  # by TODO
    # What the worker denied or the judge refused in each session, with the item (or TODO, in a
    # survey; "given") whose evidence it served: (scope, the worker's list) (grader/tampering.py).
    tampering: list[tuple[str, list[Any]]] = field(default_factory=list)
    attention_right: list[Any] = field(default_factory=list)  # TODO 5's right calls with a feature (attention_evidence.RightCall)


class ItemContext:
    """The sandbox, configuration and bookkeeping one rubric item runs with."""

    def __init__(
        self,
        sandbox: Sandbox,
        config: Config,
        item_id: str,
        submission_deadline: float | None = None,
        grading: Grading | None = None,
        *,
        survey: bool = False,
        budget_s: float | None = None,
    ):
        self.sandbox = sandbox
        self.config = config
        self.item_id = item_id  # in a survey, the TODO ("todo2")
        self.focus = None if survey else item_id  # the property whose violation fails the run
        self.submission_deadline = submission_deadline
        # CPU seconds of this item's judge thread and sessions, with a wall-clock backstop
        # (grader/sandbox/clock.py); read it through elapsed() and remaining().
        self.budget = Budget(budget_s or config.limits.item_budget_s, wall_backstop=config.limits.wall_backstop, wall_deadline=submission_deadline)
        self.recorded: dict[str, CheckFailure] = {}
        self.looked_after_base = 0  # wrong calls looked into after plain attention failed (attention.owners)
        self.grading = grading or Grading()
        self._session: Session | None = None
        self.script = Script()
        self.examples = 0
        self.counts: Counter[str] = Counter()
        self.witness: dict[str, Script] = {}  # per Need key: a case where the property should have been seen
        self.last_failure: Failure | None = None
        self.last_error: CheckFailure | None = None
        self._replay: Replay | None = None  # how to run the current example again, in a given context
        self.history: list[Replay] = []  # earlier examples in the current session
        self.session_scripts: list[Script] = []  # and what they wrote
        self.session_log: list[Any] = []  # what a check wants to remember of the session's calls
        self.kept = Kept()  # what the current example's calls returned (frame: earlier results)
        self._pools: list[SharedPool] = []  # pool files shared with the current session
        self._kept_alive: Session | None = None  # side_session(kept_alive=True)'s process
        # Evidence: random (hypothesis-drawn) examples completed, and per item those that checked it.
        self.random = False  # the examples begun now are random ones (set while exploring)
        self.evidence: Counter[str] = Counter()
        self.random_tried = 0
        self.out_of_time = False  # the budget ended the exploration
        self._open: Counter[str] | None = None  # the counts when the current random example began

    def restart_clock(self, budget_s: float | None = None) -> None:
        """A new budget from now (never past the submission's deadline): an item's focused run
        after the survey it shared.  A live session counts toward the budget it began with: ended."""
        if self._session is not None:
            self.close()
        self.budget = Budget(budget_s or self.config.limits.item_budget_s, wall_backstop=self.config.limits.wall_backstop,
                             wall_deadline=self.submission_deadline)

    def seed(self, round_: int = 0) -> int:
        """Hypothesis's seed for an exploration round (round 0: the grading's own seed)."""
        return self.config.hypothesis.seed + round_ * 1_000_003

    # -- evidence ------------------------------------------------------------------------
    def close_example(self) -> None:
        """The current random example ran to its end: each item whose property it checked gains one."""
        if self._open is not None:
            checked = {item_of(key) for key, n in self.counts.items() if n > self._open.get(key, 0)}
            self.evidence.update(checked)
            self._open = None

    def abandon_example(self) -> None:
        """The current random example was cut (by the clock): it checked nothing."""
        self._open = None

    # -- time ----------------------------------------------------------------------------
    def elapsed(self) -> float:
        """What the item has used of its time budget: CPU seconds of its judge thread and
        sessions, or wall-clock seconds once its wall-clock backstop ran out (clock.Budget.used)."""
        return self.budget.used()

    def remaining(self) -> float:
        """What is left of it (CPU seconds, never more than its wall-clock backstop leaves)."""
        return self.budget.remaining()

    @property
    def deadline(self) -> float:
        """The wall-clock moment (time.monotonic()) the item ends at the latest."""
        return self.budget.wall_deadline

    # -- sessions ----------------------------------------------------------------------
    def begin(self, replay: Replay | None) -> Script:
        """Start an example in the current session (a forked child, shared by the item's examples).

        Examples share a process because a fork per example costs more than all the checks;
        a failure is confirmed from a fresh process before it is reported (`confirm`).
        """
        if self._replay is not None:
            self.history.append(self._replay)
            self.session_scripts.append(self.script)
        self.close_example()  # a new example begins only once the last one has ended
        if self.random:
            self._open = Counter(self.counts)
            self.random_tried += 1
        self._replay = replay
        self.examples += 1
        self.script = Script()
        self.kept = Kept()
        self.defer("reseed")  # every example starts from the same random state, wherever it runs (sent with its first call)
        return self.script

    def session(self) -> Session:
        if self._session is None or not self._session.alive:
            self.history, self.session_scripts, self.session_log, self._replay = [], [], [], None
            self._close_pools()
            self._session = self.sandbox.session(self.budget)
            self._session.attach(self.grading.tampering, self.item_id)
        return self._session

    def has_session(self) -> bool:
        """Whether a process of this item's is open (the next example would run after earlier ones)."""
        return self._session is not None and self._session.alive

    def close(self) -> None:
        if self._session is not None:
            self._session.end()
            self._session = None
        self._close_pools()
        self.history, self.session_scripts, self.session_log, self._replay = [], [], [], None

    def share_pool(self, data: bytes) -> SharedPool | None:
        """A pool in a sealed memfd the current session maps shared (None where sessions map no files of the judge's)."""
        session = self.session()
        if not session.shares_files:
            return None
        pool = SharedPool(session, data)
        self._pools.append(pool)
        return pool

    def _close_pools(self) -> None:
        for pool in self._pools:
            pool.close()
        self._pools = []

    @contextmanager
    def side_session(self, kept_alive: bool = False) -> Iterator[None]:
        """A fresh process for a side question (would this case pass without a feature?).

        `kept_alive`: the same side process each time, until `end_side_sessions` (questions that
        need no fresh process each, asked many times: a fork each would cost more than they do)."""
        saved = (self._session, self.history, self.session_scripts, self.session_log, self._replay, self.script, self.kept, self._pools)
        self._session, self.kept, self._pools = (self._kept_alive if kept_alive else None), Kept(), []
        try:
            yield
        finally:
            if kept_alive:
                self._kept_alive = self._session
            elif self._session is not None:
                self._session.end()
            self._close_pools()
            (self._session, self.history, self.session_scripts, self.session_log, self._replay, self.script, self.kept,
             self._pools) = saved

    def end_side_sessions(self) -> None:
        if self._kept_alive is not None:
            self._kept_alive.end()
            self._kept_alive = None

    def call(self, op: str, **fields: Any) -> Reply:
        """One operation, its reply checked against the operation's schema (grader/checks/replies.py).

        A dead or hung worker stops the item with the steps so far.
        """
        try:
            return checked(op, self.session().call(op, **fields))
        except WorkerLost as lost:
            raise Abort(lost_failure(lost, self.script, self.config)) from None

    def defer(self, op: str, on_reply: Callable[[Reply], None] | None = None, **fields: Any) -> None:
        """`op` sent ahead with the next call (Session.defer); its reply, checked against the
        operation's schema, goes to `on_reply`, which raises where it failed."""
        handler = None if on_reply is None else (lambda reply: on_reply(checked(op, reply)))
        self.session().defer(op, handler, **fields)

    def new_object(self, on_failure: Callable[[Reply], BaseException], **fields: Any) -> int:
        """A constructor sent ahead with the next call (`new`), under a handle the judge chooses:
        the handle, at once; `on_failure(reply)` is raised if the constructor failed."""
        session = self.session()
        handle = session.new_handle()

        def made(reply: Reply) -> None:
            if not reply.ok:
                raise on_failure(reply)

        session.defer("new", lambda reply: made(checked("new", reply)), handle=handle, **fields)
        return handle

    def broken(self, detail: str) -> None:
        """The grader's code in the worker failed where it cannot fail (Session.note_broken)."""
        self.session().note_broken(detail)

    # -- verdicts -------------------------------------------------------------------------
    def focused(self, prop: str) -> bool:
        """Whether a violation of `prop` fails this run (in a survey, none does)."""
        return prop == self.focus

    def record(self, prop: str, zh: str, en: str) -> None:
        """In a survey: remember the first example that broke `prop`, to run again for its item."""
        if self.focus is None and prop not in self.recorded:
            failure = self.failure("wrong", zh, en)
            self.recorded[prop] = CheckFailure(failure, self._replay, self.history)

    def nothing_yet(self) -> bool:
        """Whether nothing has worked yet: a NotImplementedError now means the TODO is not written.

        Later (say, only for GQA) it is an ordinary error of the items it breaks.
        """
        return self.examples <= 1 and not self.counts

    def count(self, key: str, n: int = 1) -> None:
        self.counts[key] += n

    def missed(self, key: str, script: Script) -> None:
        """Remember the first case where `key`'s property should have been exercised but was not."""
        self.witness.setdefault(key, script.copy())

    def failure(
        self,
        kind: str,
        zh: str,
        en: str,
        *,
        expected: str | Text = "",
        actual: str | Text = "",
        traceback: str = "",
        picture: dict[str, Any] | None = None,
        script: Script | None = None,
    ) -> Failure:
        """`expected` and `actual`: a Text where they hold words, a str where they are values only."""
        shown = script or self.script
        limit = self.config.feedback.max_repro_lines
        expected_text = expected if isinstance(expected, Text) else Text("", expected)
        actual_text = actual if isinstance(actual, Text) else Text("", actual)
        return Failure(
            kind=kind,
            message=Text(zh, en),
            repro=shown.render("en", limit),
            repro_zh=shown.render("zh", limit),
            expected=expected_text.en,
            actual=actual_text.en,
            expected_zh=expected_text.zh if expected_text.zh != expected_text.en else "",
            actual_zh=actual_text.zh if actual_text.zh != actual_text.en else "",
            traceback=traceback if self.config.feedback.show_traceback else "",
            picture=picture,
        )

    def fail(self, kind: str, zh: str, en: str, **details: Any) -> CheckFailure:
        failure = self.failure(kind, zh, en, **details)
        self.last_failure = failure
        error = CheckFailure(failure, self._replay, self.history)
        self.last_error = error
        return error

    def given_finding(self, key: str, zh: str, en: str, **details: Any) -> None:
        """Given (non-TODO) code behaves differently from the template's: no points, a note."""
        if key not in self.grading.given:
            self.grading.given[key] = self.failure("given", f"给定代码：{zh}", f"given code: {en}", **details)


def item_of(key: str) -> str:
    """The rubric item a count key belongs to ("todo2.block_count:multi" -> "todo2.block_count")."""
    return key.split(":")[0]


def lost_failure(lost: WorkerLost, script: Script, config: Config) -> Failure:
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
    lines = config.feedback.max_repro_lines
    return Failure(
        kind="timeout" if lost.reason == "timeout" else "crashed",
        message=message,
        repro=script.render("en", lines),
        repro_zh=script.render("zh", lines),
        actual=lost.detail,
    )


def raised(reply: Reply, builtin: str) -> bool:
    """Whether the call raised an instance of a built-in exception class (subclasses count)."""
    error = reply.error or {}
    return not reply.ok and (builtin in error.get("isa", []) or error.get("type") == builtin)


# What a call that raised, or returned what the contract rules out, should have done (a card's "expected").
RETURNS_NORMALLY = Text("正常返回（不抛异常）", "returns normally (no exception)")
AN_ALLOWED_VALUE = Text("约定允许的返回值", "a value the contract allows")


def student_error(ctx: ItemContext, reply: Reply, what: str, todo_label: str) -> BaseException:
    """The exception to raise when a student's call raised unexpectedly."""
    error = reply.error or {}
    etype, message = str(error.get("type", "Error")), str(error.get("message", ""))[:500]
    if error.get("not_implemented") and ctx.nothing_yet():
        return Abort(
            ctx.failure(
                "not_implemented",
                f"{todo_label} 还没有实现（{what} 抛出 NotImplementedError）",
                f"{todo_label} is not implemented yet ({what} raised NotImplementedError)",
            )
        )
    if error.get("rejected_return"):
        message_zh = str(error.get("message_zh") or message)[:500]
        return ctx.fail(
            "wrong",
            f"{what} 的返回值不符合要求：{message_zh}",
            f"{what} returned a value the contract does not allow: {message}",
            expected=AN_ALLOWED_VALUE,
            actual=Text(message_zh, message),
        )
    hint_zh = hint_en = ""
    if etype == "TypeError" and "argument" in message:
        hint_zh, hint_en = "（函数签名与模板一致吗？）", " (does the signature match the template's?)"
    return ctx.fail(
        "error",
        f"{what} 意外抛出 {etype}: {message}{hint_zh}",
        f"{what} raised {etype}: {message}{hint_en}",
        expected=RETURNS_NORMALLY,
        actual=f"{etype}: {message}",
        traceback=str(error.get("traceback", "")),
    )


def hypothesis_settings(config: Config, max_examples: int) -> settings:
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
    )


