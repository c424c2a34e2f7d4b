"""Grade one submission: load it, run it in the sandbox, run every rubric item, collect results.

Never raises for anything a submission does: every path ends in a GradeResult.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import functools
import gc
import threading
import time
import traceback
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grader import environment, given_code, integrity, judge_fork, seeds, skipped_values, tampering
from grader.config import Config, RubricItem
from grader.draws import pin_local_constants
from grader.folder import FolderCopy
from grader.folder import plan as plan_folder
from grader.results import (
    FAILED,
    GRADER_ERROR,
    NOT_RUN,
    PASSED,
    CellReport,
    Failure,
    GradeResult,
    ItemResult,
    Text,
    not_graded,
)
from grader.sandbox.client import LoadReport, Sandbox
from grader.sanitize import sanitize_result
from grader.submission import Submission, SubmissionError, load_submission, looks_loadable

if TYPE_CHECKING:
    from grader.checks import Check
    from grader.checks.base import Grading


def cuda_available() -> bool:
    # Without an NVIDIA device node there is no CUDA, and no need to import torch (most of a
    # second of the judge's start-up) to find that out.
    if not any(Path("/dev").glob("nvidia[0-9]*")):
        return False
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # a broken CUDA install means no CUDA, not a crash
        return False


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if cuda_available() else "cpu"
    return device


def with_seed(config: Config, seed: int | None) -> Config:
    if seed is None:
        return config
    return dataclasses.replace(config, hypothesis=dataclasses.replace(config.hypothesis, seed=seed), seed_source="command line")


def grade_path(path: Path, config: Config, device: str = "auto", todos: Collection[str] | None = None,
               folder: Path | None = None, alone: bool = False) -> GradeResult:
    """`folder`: the folder the notebook runs in (a copy of it; default the submission's own);
    `alone`: none, the submission only (grader/folder.py)."""
    started = time.monotonic()
    device = resolve_device(device)
    # A file that is not there or not a file never gets its folder walked: load_submission says why.
    planned = plan_folder(path, None if alone else folder or path.parent, config.notebook) if path.is_file() else None
    sandbox = _started_early(path, planned, config, device) if planned is not None else None
    try:
        try:
            submission = load_submission(path, config.limits.max_file_mb << 20)
            submission.folder = planned
        except SubmissionError as error:
            failure = Failure(kind="unreadable", message=Text(error.zh, error.en))
            result = not_graded(str(path), config.digest, config.items, failure, device)
            result.seconds = round(time.monotonic() - started, 3)
            return result
        result = grade_submission(submission, config, device, todos, sandbox=sandbox)
    finally:
        if sandbox is not None:
            sandbox.close()  # (done already where grade_submission ran)
    result.seconds = round(time.monotonic() - started, 3)
    return sanitize_result(result)  # every string the submission controls, made safe once, here


def _started_early(path: Path, folder: FolderCopy, config: Config, device: str) -> Sandbox | None:
    """A sandbox for a file that looks gradable, its worker already starting (Sandbox.start_early):
    the worker's start (torch's import) overlaps the judge's reading of the notebook and its
    imports.  None where it cannot be made: grade_submission then makes one itself."""
    suffix = path.suffix.lower()
    if suffix not in (".ipynb", ".py") or not looks_loadable(path, config.limits.max_file_mb << 20):
        return None  # (closing a sandbox waits for its worker to connect: a second or so)
    try:
        sandbox = Sandbox([], config.limits, allow_cuda=device == "cuda", folder=folder, notebook=suffix == ".ipynb")
    except Exception:  # the same failure, where it was always met, in grade_submission
        return None
    sandbox.start_early()
    return sandbox


def grade_submission(submission: Submission, config: Config, device: str, todos: Collection[str] | None = None,
                     sandbox: Sandbox | None = None) -> GradeResult:
    """Grade every rubric item, or only the items of `todos` (e.g. {"todo3"}) when given.
    `sandbox`: one made for this submission, its worker maybe started (grade_path); closed here."""
    config, random_cases = seeds.seeded(config, submission.sha256)  # cases the student cannot know in advance
    result = GradeResult(
        submission=str(submission.path),
        sha256=submission.sha256,
        config_digest=config.digest,
        items=[],
        notes=[Text(zh, en) for zh, en in submission.notes],
        device=device,
        random_cases=seeds.describe_both(random_cases, config),
    )
    deadline = time.monotonic() + config.limits.total_budget_s
    if sandbox is None:
        sandbox = Sandbox(submission.cells, config.limits, allow_cuda=device == "cuda", folder=submission.folder,
                          notebook=submission.kind == "notebook")
    sandbox.cells = submission.cells
    with sandbox, _unfrozen_after():
        # The worker starts (imports torch, runs the cells) while this process imports the
        # checks (hypothesis, numpy): on two cores the two start-ups overlap.
        loader = threading.Thread(target=sandbox.load, daemon=True)
        loader.start()
        # What needs only the submission's text is done here too, off the grading's critical path.
        result.flags = integrity.scan(submission)
        result.notes += environment.folder_notes(submission.folder) + environment.package_notes(config.notebook)
        shell_values = skipped_values.analyse(submission.cells)
        from grader.checks import CHECKS, REQUIRED_NAMES
        from grader.checks.base import Grading

        pin_local_constants()  # the same examples however this process was started (grader/draws.py)
        loader.join()
        # The imports' objects (hypothesis, numpy, the checks) live as long as the process: the
        # collector stops scanning them, which halved its share of the judge's CPU (0.25 -> 0.1 s).
        gc.freeze()
        result.isolation = sandbox.isolation_report()
        report = sandbox.report
        assert report is not None
        result.skipped = environment.skipped_lines(report.skipped)
        result.cells = [
            CellReport(
                index=c.index,
                status=c.status,
                error_type=str((c.error or {}).get("type", "")),
                message=str((c.error or {}).get("message", ""))[:1000],
                traceback=str((c.error or {}).get("traceback", ""))[:4000],
            )
            for c in report.cells
        ]
        stopped = next((c.index for c in result.cells if c.error_type == "SystemExit"), None)
        if stopped is not None and any(c.status == "not_run" and c.index > stopped for c in result.cells):
            result.notes.append(
                Text(
                    f"第 {stopped} 个代码单元调用了 sys.exit()：与 Jupyter 的“全部运行”一样，其后的单元没有运行",
                    f"code cell {stopped} called sys.exit(): as Jupyter's Run All does, the cells after it were not run",
                )
            )
        if report.blocked_imports:
            result.flags.append(
                Text(
                    f"运行时尝试导入被禁止的模块：{report.blocked_imports}",
                    f"tried to import forbidden modules at run time: {report.blocked_imports}",
                )
            )
        grading = Grading()
        wanted = [item for item in config.items if todos is None or item.todo in todos]
        # TODOs are independent: two groups are graded side by side (a thread here and a copy of
        # this process, below), each with its own sessions, so that the judge's work overlaps the
        # submission's on two cores.
        by_todo: dict[str, list[RubricItem]] = {}
        for item in wanted:
            by_todo.setdefault(item.todo, []).append(item)
        groups = _balanced(list(by_todo), 2)
        run = functools.partial(_run_todos, by_todo=by_todo, checks=CHECKS, required_names=REQUIRED_NAMES,
                                sandbox=sandbox, report=report, config=config, device=device, deadline=deadline, grading=grading)
        # The given code's checks take the place of whichever group finishes first.  Where it
        # pays, the last group is graded in a forked copy of the judge, which has a GIL of its
        # own (judge_fork.py); before any thread starts here, so that the copy has none.
        copy = _fork_last_group(groups, run, sandbox, grading) if len(groups) > 1 and not report.failed else None
        threaded = groups[:-1] if copy is not None else groups
        with _one_compile_at_a_time(), ThreadPoolExecutor(max_workers=max(1, len(groups)), thread_name_prefix="pa-grade-todos") as pool:
            futures = [pool.submit(run, group) for group in threaded]
            given = pool.submit(_given_code, submission, sandbox, report, config, deadline, grading)
            outcomes = {o.id: o for future in futures for o in future.result()}
            notes, broken = given.result()
            if copy is not None:
                outcomes.update({o.id: o for o in _join_copy(copy, groups[-1], run, sandbox, grading, deadline)})
        # In the order of their keys: findings of the TODO threads and of the given checks, whichever came first.
        result.given_code = [Failure("given_changed", note) for note in notes] + [grading.given[key] for key in sorted(grading.given)] + broken
        result.items = [outcomes[item.id] for item in wanted]
        result.output_excerpt, result.output_bytes = sandbox.output()
        result.tampering = tampering.collect(sandbox.tamper, grading.tampering)
        result.items = tampering.apply(result.items, result.tampering, config.tamper_policy)
        # A line that does not run here but whose value the definitions read: Jupyter's path is not graded.
        result.notes += skipped_values.notes(shell_values, REQUIRED_NAMES)
        result.items = skipped_values.apply(result.items, shell_values, REQUIRED_NAMES)
    if result.flags and config.zero_on_flag:
        flagged = Failure(
            kind="integrity",
            message=Text("提交使用了答案或评分器的代码，本次不计分", "the submission uses the answer key or the grader's code; no credit is given"),
        )
        result.items = [_item(config.item(i.id), FAILED, flagged) if i.status == PASSED else i for i in result.items]
    return result


@contextlib.contextmanager
def _unfrozen_after() -> Iterator[None]:
    """What the grading froze (gc.freeze) is collected again after it, in a process that grades again (the tests)."""
    try:
        yield
    finally:
        gc.unfreeze()


class _SerialCompile:
    """CPython 3.11 keeps the AST converter's recursion depth in interpreter-wide state: two
    threads that parse at once can fail with SystemError("AST constructor recursion depth
    mismatch").  Hypothesis parses source as it runs (ast.parse calls compile), so while the
    grading threads run, compile() takes a lock.  Overlapping gradings share one wrapper."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.users = 0
        self.original: Callable[..., Any] = builtins.compile

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        with self.lock:
            if self.users == 0:
                self.original = original = builtins.compile

                def compile_one_at_a_time(*args: Any, **kwargs: Any) -> Any:
                    with self.lock:
                        return original(*args, **kwargs)

                builtins.compile = compile_one_at_a_time
            self.users += 1
        try:
            yield
        finally:
            with self.lock:
                self.users -= 1
                if self.users == 0:
                    builtins.compile = self.original


_one_compile_at_a_time = _SerialCompile()


def _fork_last_group(groups: list[list[str]], run: Callable[[list[str]], list[ItemResult]], sandbox: Sandbox,
                     grading: Grading) -> judge_fork.Copy | None:
    if not judge_fork.available():
        return None
    lock = judge_fork.TokenLock()
    sandbox.share_sessions(lock)
    try:
        return judge_fork.Copy(functools.partial(run, groups[-1]), sandbox, grading, lock)
    except OSError:  # no fork (out of processes): the threads grade it
        sandbox.share_sessions(threading.Lock())
        lock.close()
        return None


def _join_copy(copy: judge_fork.Copy, group: list[str], run: Callable[[list[str]], list[ItemResult]], sandbox: Sandbox,
               grading: Grading, deadline: float) -> list[ItemResult]:
    """The copy's items, or, where the copy failed (the worker gone, a crash), the group graded here."""
    result = copy.join(deadline + JOIN_GRACE_S)
    sandbox.share_sessions(threading.Lock())  # the copy has ended: the judge's threads alone
    copy.lock.close()
    if result is not None:
        return judge_fork.merge(result, sandbox, grading)
    return run(group)


JOIN_GRACE_S = 30.0  # past the submission's deadline, the copy's items end on their own budgets first

# Rough cost of each TODO's checks, to split them evenly between the two groups.
COST = {"todo1": 1, "todo2": 4, "todo3": 3, "todo4": 1, "todo5": 3}


def _balanced(todos: list[str], ways: int) -> list[list[str]]:
    """TODOs in `ways` groups of about equal cost (each group graded by one thread)."""
    groups: list[list[str]] = [[] for _ in range(min(ways, len(todos)) or 1)]
    for todo in sorted(todos, key=lambda t: -COST.get(t, 1)):
        min(groups, key=lambda g: sum(COST.get(t, 1) for t in g)).append(todo)
    return [sorted(g) for g in groups if g]


def _run_todos(todos: list[str], *, by_todo: dict[str, list[RubricItem]], checks: dict[str, Check], required_names: dict[str, tuple[str, ...]],
               sandbox: Sandbox, report: LoadReport, config: Config, device: str, deadline: float, grading: Grading) -> list[ItemResult]:
    """The items of some TODOs, in order (one thread's share)."""
    from grader.checks.running import mark_blocked

    outcomes = []
    for todo in todos:
        start = len(outcomes)
        for item in by_todo[todo]:
            if item.device == "cuda" and device != "cuda":
                # Never counted on a machine without a GPU, whatever the submission did.
                outcomes.append(_item(item, NOT_RUN, _no_gpu()))
                continue
            try:
                outcomes.append(_run_item(item, checks, required_names, sandbox, report, config, device, deadline, grading))
            except Exception as error:  # a grader bug outside the check itself: still this item alone
                outcomes.append(_item(item, FAILED, grader_error(error)))
        mark_blocked(outcomes[start:])  # an item that could not be judged says which failing item blocks it
    return outcomes


def _given_code(submission: Submission, sandbox: Sandbox, report: LoadReport, config: Config, deadline: float,
                grading: Grading) -> tuple[list[Text], list[Failure]]:
    """Edits of given code (by the AST and by the code bound when graded), and its behaviour
    checked (findings into grading.given); with a grader error of these checks, if any."""
    from grader.checks.base import ItemContext
    from grader.checks.given import bound_methods, check_given

    notes = given_code.changed([c.python for c in submission.cells])
    broken: list[Failure] = []
    if not report.failed and time.monotonic() < deadline:
        ctx = ItemContext(sandbox, config, "given", deadline, grading)
        try:
            bound = bound_methods(ctx, set(report.names))
            if any(event[:1] == ["forged"] for scope, event in grading.tampering if scope == "given"):
                bound = {}  # the given session's connection was written to: its word is not taken
            notes += given_code.bound_changes(bound, notes)
            check_given(ctx, set(report.names))
        except Exception as error:  # a grader bug in a courtesy check: said, and nothing else lost
            broken.append(grader_error(error))
        finally:
            ctx.close()
    return notes, broken


def _run_item(
    item: RubricItem,
    checks: dict[str, Check],
    required_names: dict[str, tuple[str, ...]],
    sandbox: Sandbox,
    report: LoadReport,
    config: Config,
    device: str,
    deadline: float,
    grading: Grading,
) -> ItemResult:
    if report.failed:
        return _item(item, FAILED, Failure("crashed", Text("提交的代码无法加载运行", "the submission's code could not be loaded"), actual=report.failed))
    missing = [name for name in required_names[item.todo] if name not in report.names]
    if missing:
        return _item(item, FAILED, _missing(missing, report))
    if time.monotonic() > deadline:
        return _item(item, FAILED, Failure("budget", Text("整份提交的时间预算已用完，本项未评", "the submission's total time budget ran out before this item")))
    started = time.monotonic()
    if item.device == "cuda" and report.cuda_initialized:
        # The loaded worker already holds a CUDA context, which a forked child cannot use.
        left = dataclasses.replace(config.limits, total_budget_s=max(1.0, deadline - started))
        with Sandbox(sandbox.cells, left, allow_cuda=True, folder=sandbox.folder, notebook=sandbox.notebook) as fresh:
            fresh.load()
            try:
                return _timed(item, checks[item.id], fresh, config, started, deadline, grading)
            finally:
                grading.tampering += [("cells", event) for event in fresh.tamper]
    return _timed(item, checks[item.id], sandbox, config, started, deadline, grading)


def _timed(item: RubricItem, check: Check, sandbox: Sandbox, config: Config, started: float, deadline: float, grading: Grading) -> ItemResult:
    from grader.checks.base import ItemContext

    ctx = ItemContext(sandbox, config, item.id, deadline, grading)
    try:
        failure = check(ctx)
    except Exception as error:  # the check's own bug: this item alone, in the grader's words
        failure = grader_error(error)
    finally:
        try:
            ctx.close()
        except Exception:
            pass
    result = _item(item, PASSED if failure is None else FAILED, failure)
    result.examples = ctx.examples
    result.exercised = sum(n for key, n in ctx.counts.items() if key.split(":")[0] == item.id)
    result.random_cases = ctx.evidence[item.id]
    result.seconds = round(time.monotonic() - started, 3)
    return result


def grader_error(error: BaseException) -> Failure:
    """An item whose own check raised: a grader bug, said in the grader's words only.

    The exception's text may quote what the submission returned, so it is never shown; its type
    and where in the grader it was raised are enough for a bug report.
    """
    frames = [f for f in traceback.extract_tb(error.__traceback__) if "/grader/" in f.filename.replace("\\", "/")]
    where = f"{Path(frames[-1].filename).name}:{frames[-1].lineno} ({frames[-1].name})" if frames else "?"
    kind = type(error).__name__
    return Failure(
        GRADER_ERROR,
        Text(
            f"评分器在检查本项时出错（{kind}，{where}）：这是评分器的问题，不是你的；本项暂不计分，请告诉助教",
            f"the grader failed while checking this item ({kind} at {where}): a bug in the grader, not in your code; this item is not scored, please tell the TAs",
        ),
        actual=f"{kind} at {where}",
    )


def _no_gpu() -> Failure:
    return Failure("not_run", Text("没有可用的 GPU：本项未运行，不计入总分", "no GPU here: not run, and not counted in the total"))


def _missing(names: list[str], report: LoadReport) -> Failure:
    broken = [c for c in report.cells if c.status != "ok"]
    hint_zh = f"（有 {len(broken)} 个代码单元运行出错，定义可能在其中）" if broken else ""
    hint_en = f" ({len(broken)} code cell(s) failed; the definition may be in one of them)" if broken else ""
    shown = ", ".join(names)
    return Failure(
        "missing",
        Text(f"没有找到 {shown} 的定义{hint_zh}", f"{shown} not defined{hint_en}"),
        repro=f"{shown}  # a NameError here: the cell defining it did not run to the end (restart and run all)",
        repro_zh=f"{shown}  # 这里出现 NameError：定义它的单元没有完整运行（重启并全部运行）",
    )


def _item(item: RubricItem, status: str, failure: Failure | None) -> ItemResult:
    return ItemResult(id=item.id, todo=item.todo, title=Text(item.zh, item.en), weight=item.weight, status=status, failure=failure)
