"""How a rubric item is run: its TODO's survey, corner cases, exploration, and confirmation.

An item runs in two phases (`run_item`):

1. its *corner cases*, a fixed list of small scenarios that must all finish: a submission
   too slow to finish them fails ("too slow"), so time can never buy a pass;
2. *exploration*: hypothesis draws more cases from the contract's domain until its example
   budget or the item's time budget ends, and shrinks the first failure it finds.

Items of one TODO share one *survey* (`grade_item`): the TODO's model runs once with every
property on and none failing the run; each item reads its verdict from it, and only an item
whose property broke runs again in focus, to find and shrink its failure.  A pass needs the
property checked enough times (`Need`).  Every reported failure is confirmed from a fresh
process first (`confirm`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hypothesis.errors import Unsatisfiable

from grader.checks.base import Abort, CheckFailure, Inconclusive, ItemContext, Need, Replay, Survey
from grader.checks.script import Script
from grader.results import Failure, Text
from grader.sandbox.protocol import BudgetExceeded

Plan = Callable[[ItemContext], tuple[Sequence[Callable[[], None]], Callable[[], None] | None]]


def grade_item(ctx: ItemContext, todo: str, items: int, plan: Plan, needs: Sequence[Need]) -> Failure | None:
    """An item's verdict from its TODO's survey; a focused run only where the survey saw it fail.

    `plan(ctx)` gives the corner cases and the exploration for a context: in a survey, those of
    every item of the TODO; in focus, the item's own (where its failure is found and shrunk).
    """
    survey = ctx.grading.surveys.get(todo)
    if survey is None:
        budget = ctx.config.limits.item_budget_s * items
        surveying = ItemContext(ctx.sandbox, ctx.config, todo, ctx.submission_deadline, ctx.grading, survey=True, budget_s=budget)
        corners, explore = plan(surveying)
        stopped = run_item(surveying, corners, explore)
        survey = Survey(surveying.counts, surveying.witness, surveying.recorded, stopped, surveying.examples)
        ctx.grading.surveys[todo] = survey
    ctx.counts.update(survey.counts)
    ctx.examples = survey.examples
    if survey.stopped is not None:
        return survey.stopped
    recorded = survey.recorded.get(ctx.item_id)
    if recorded is not None:
        corners, explore = plan(ctx)
        return run_item(ctx, corners, explore) or confirm(ctx, recorded)
    ctx.witness = {**survey.witness, **ctx.witness}
    return check_needs(ctx, needs)


def check_needs(ctx: ItemContext, needs: Sequence[Need]) -> Failure | None:
    for need in needs:
        seen = ctx.counts[need.key]
        if seen < need.minimum:
            witness = ctx.witness.get(need.key) or ctx.witness.get(need.key.split(":")[0])
            return ctx.failure(
                "not_exercised",
                f"{need.zh}（检查到 {seen} 次，至少需要 {need.minimum} 次）",
                f"{need.en} (checked {seen} {'time' if seen == 1 else 'times'}, at least {need.minimum} needed)",
                script=witness or Script(),
            )
    return None


def run_item(
    ctx: ItemContext,
    corners: Sequence[Callable[[], None]],
    explore: Callable[[], None] | None,
    needs: Sequence[Need] = (),
) -> Failure | None:
    """Corner cases (all must finish), then exploration (the budget may cut it), then the needs."""
    started = ctx.elapsed()
    done = 0
    try:
        for corner in corners:
            try:
                corner()
            except Inconclusive:
                pass
            done += 1
    except CheckFailure as failure:
        ctx.close()
        return confirm(ctx, failure)
    except Abort as abort:
        return abort.failure
    except BudgetExceeded:
        seconds = ctx.elapsed() - started
        return ctx.failure(
            "too_slow",
            f"太慢：{seconds:.0f} 秒内只完成了 {done}/{len(corners)} 个边界用例（每个用例都必须完成）",
            f"too slow: {done} of {len(corners)} corner cases in {seconds:.0f} s (every corner case must finish)",
        )
    finally:
        ctx.close()
    if explore is not None:
        failure = _explore(ctx, explore)
        if failure is not None:
            return failure
    return check_needs(ctx, needs)


def confirm(ctx: ItemContext, error: CheckFailure) -> Failure:
    """The failure as seen from a fresh process, with the calls it needs written out.

    Run alone, the example usually fails again: that run's reproduction is reported.  If it
    only fails after earlier examples of the same process (state kept between calls), it is
    run again after the one before it, then after the last few; what fails is reported with
    all of them.  A failure that never comes back is reported as it was seen.
    """
    if error.replay is None:
        return error.failure
    attempts: list[list[Replay]] = [[]]
    if error.history:
        attempts += [error.history[-1:], error.history[-4:]]
    for earlier in attempts:
        ctx.close()
        try:
            for run in earlier:
                try:
                    run(ctx)
                except (CheckFailure, Inconclusive):
                    pass
            error.replay(ctx)  # in this context: a survey's example replays in focus here
        except CheckFailure as again:
            if not earlier:
                return again.failure
            shown = Script([line for script in ctx.session_scripts for line in script.lines] + ctx.script.lines)
            limit = ctx.config.feedback.max_repro_lines
            again.failure.repro, again.failure.repro_zh = shown.render("en", limit), shown.render("zh", limit)
            return again.failure
        except (Abort, BudgetExceeded, Inconclusive):
            break
        finally:
            ctx.close()
    return error.failure


def _explore(ctx: ItemContext, run: Callable[[], None]) -> Failure | None:
    """A hypothesis run: the smallest failure it found, or None.  Time running out is no failure."""
    try:
        run()
    except CheckFailure as failure:
        ctx.close()
        return confirm(ctx, failure)
    except Abort as abort:
        return abort.failure
    except BudgetExceeded:
        # Found before the budget ended (while shrinking), else nothing.
        return confirm(ctx, ctx.last_error) if ctx.last_error is not None else None
    except Unsatisfiable:
        return None
    except Exception as error:  # Flaky and friends: keep the last real failure we saw
        if ctx.last_error is not None:
            ctx.close()
            return confirm(ctx, ctx.last_error)
        return Failure(
            "error",
            Text(f"检查无法完成：{type(error).__name__}", f"the check could not complete: {type(error).__name__}"),
            actual=str(error)[:500],
        )
    finally:
        ctx.close()
    return None
