"""How a rubric item is run: its TODO's survey, corner cases, exploration, and confirmation.

An item runs in two phases (`run_item`):

1. its *corner cases*, a fixed list of small scenarios that must all finish: a submission
   too slow to finish them fails ("too slow");
2. *exploration*: hypothesis draws cases from the contract's domain, from a seed the student
   cannot know (grader/seeds.py), and shrinks the first failure it finds.

An item passes only on evidence: every corner case passed, and at least N random cases
(`[evidence]` in the configuration) completed and checked its property.  Neither the corners
nor the clock can pay for an item: if the budget ends first, it fails ("too slow: k of N
random cases in S s").  Exploration goes on in rounds (new seeds) until every item has its N
or the rounds run out, so that a correct submission always gets there, whatever its seed.

Items of one TODO share one *survey* (`grade_item`): the TODO's model runs once with every
property on and none failing the run; each item reads its verdict from it, and only an item
whose property broke runs again in focus, to find and shrink its failure.  A pass also needs
the property checked enough times in the ways `Need` lists.  Every reported failure is
confirmed from a fresh process first (`confirm`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hypothesis.errors import Flaky, Unsatisfiable

from grader.checks.base import Abort, CheckFailure, Inconclusive, ItemContext, Need, Replay, Survey
from grader.checks.script import Script
from grader.results import FAILED, Failure, ItemResult, Text
from grader.sandbox.protocol import BudgetExceeded

# One hypothesis run: (round, examples) -> None.  Round 0 is the configured run; later rounds
# (another seed each) only top up the items that still lack random evidence.
Explore = Callable[[int, int], None]
Plan = Callable[[ItemContext], tuple[Sequence[Callable[[], None]], Explore | None]]


def grade_item(ctx: ItemContext, todo: str, items: Sequence[str], plan: Plan, needs: Sequence[Need]) -> Failure | None:
    """An item's verdict from its TODO's survey; a focused run only where the survey saw it fail.

    `plan(ctx)` gives the corner cases and the exploration for a context: in a survey, those of
    every item of the TODO; in focus, the item's own (where its failure is found and shrunk).
    """
    survey = ctx.grading.surveys.get(todo)
    if survey is None:
        budget = ctx.config.limits.item_budget_s * len(items)
        surveying = ItemContext(ctx.sandbox, ctx.config, todo, ctx.submission_deadline, ctx.grading, survey=True, budget_s=budget)
        corners, explore = plan(surveying)
        try:
            stopped = run_item(surveying, corners, explore, items=items)
        finally:
            surveying.end_side_sessions()
        survey = Survey(surveying.counts, surveying.witness, surveying.recorded, stopped, surveying.examples,
                        surveying.evidence, surveying.random_tried, surveying.out_of_time, surveying.elapsed())
        ctx.grading.surveys[todo] = survey
    ctx.counts.update(survey.counts)
    ctx.examples = survey.examples
    ctx.evidence.update(survey.evidence)
    if survey.stopped is not None:
        return survey.stopped
    recorded = survey.recorded.get(ctx.item_id)
    if recorded is not None:
        ctx.restart_clock()  # the item's own budget, for finding its failure, from now
        corners, explore = plan(ctx)
        return run_item(ctx, corners, explore) or confirm(ctx, recorded)
    ctx.witness = {**survey.witness, **ctx.witness}
    return check_evidence(ctx, survey.out_of_time, survey.seconds, survey.random_tried) or check_needs(ctx, needs)


def check_evidence(ctx: ItemContext, out_of_time: bool, seconds: float, tried: int) -> Failure | None:
    """At least N random cases completed and checked this item's property."""
    need = ctx.config.evidence.minimum(ctx.item_id)
    got = ctx.evidence[ctx.item_id]
    if got >= need:
        return None
    expected, actual = _cases(got, need, tried)
    if out_of_time:
        return ctx.failure(
            "too_slow",
            f"太慢：{seconds:.0f} 秒内只完成并检查了 {got}/{need} 个随机用例（通过需要至少 {need} 个）",
            f"too slow: {got} of {need} random cases in {seconds:.0f} s (a pass needs at least {need} completed and checked)",
            expected=expected,
            actual=actual,
            script=_witness(ctx),
        )
    return ctx.failure(
        "not_exercised",
        f"随机用例中只有 {got}/{need} 个完成并检查了这一性质（其余用例没能检查它）",
        f"only {got} of {need} random cases completed and checked this property (the others could not check it)",
        expected=expected,
        actual=actual,
        script=_witness(ctx),
    )


def _cases(got: int, need: int, tried: int) -> tuple[Text, Text]:
    """Expected and actual of an item short of random evidence."""
    return (Text(f"至少 {need} 个随机用例完成并检查了这一性质", f"at least {need} random cases completed and checked"),
            Text(f"{got} 个（共开始 {tried} 个）", f"{got} ({tried} begun)"))


def _witness(ctx: ItemContext) -> Script:
    """A case where the item's property should have been checked and could not be (its first)."""
    keys = [key for key in ctx.witness if key == ctx.item_id or key.startswith(ctx.item_id + ":")]
    return ctx.witness[keys[0]] if keys else Script()


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
    explore: Explore | None,
    needs: Sequence[Need] = (),
    items: Sequence[str] = (),
) -> Failure | None:
    """Corner cases (all must finish), then exploration (in rounds, until each of `items` has its
    random evidence), then the needs.  Items read the evidence from `ctx` (a survey's, or their own)."""
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
        wanted = list(items) or ([ctx.focus] if ctx.focus else [])
        failure = _explore_rounds(ctx, explore, wanted)
        if failure is not None:
            return failure
    if not items and ctx.focus is not None and needs:
        return check_evidence(ctx, ctx.out_of_time, ctx.elapsed(), ctx.random_tried) or check_needs(ctx, needs)
    return check_needs(ctx, needs)


def _explore_rounds(ctx: ItemContext, explore: Explore, items: Sequence[str]) -> Failure | None:
    """Hypothesis runs until every item has its N random cases, the rounds end, or the clock does.

    A focused run (an item the survey saw fail) needs one round: it looks for the failure.
    """
    evidence = ctx.config.evidence
    before: dict[str, int] = {}
    for round_ in range(evidence.max_rounds if ctx.focus is None or len(items) > 1 else 1):
        # An item whose property broke needs no more evidence: its own run finds the failure.
        lacking = [item for item in items if item not in ctx.recorded and ctx.evidence[item] < evidence.minimum(item)]
        short = [evidence.minimum(item) - ctx.evidence[item] for item in lacking]
        if round_ and not short:
            break
        now = {item: ctx.evidence[item] for item in lacking}
        if round_ > 1 and all(before.get(item) == count for item, count in now.items()):
            # The last round added nothing to any item still lacking (compared item by item: the
            # lacking ones change from round to round): more would not either.
            break
        before = now
        examples = 0 if round_ == 0 else max(8, max(short))  # 0: the plan's configured number
        failure = _explore(ctx, lambda round_=round_, examples=examples: explore(round_, examples))
        if failure is not None or ctx.out_of_time:
            return failure
    return None


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
    """One hypothesis run: the smallest failure it found, or None.  Time running out is no
    failure here, and no pass either: the random cases that did not complete count for nothing."""
    ctx.random = True
    try:
        run()
        ctx.close_example()
    except CheckFailure as failure:
        ctx.abandon_example()
        ctx.close()
        return confirm(ctx, failure)
    except Abort as abort:
        ctx.abandon_example()
        return abort.failure
    except BudgetExceeded:
        ctx.abandon_example()
        ctx.out_of_time = True
        # Found before the budget ended (while shrinking), else nothing.
        return confirm(ctx, ctx.last_error) if ctx.last_error is not None else None
    except Unsatisfiable:
        ctx.close_example()
        return None
    except Flaky as error:  # the submission answered a replayed case otherwise: keep the last real failure
        ctx.abandon_example()
        if ctx.last_error is not None:
            ctx.close()
            return confirm(ctx, ctx.last_error)
        if ctx.focus is None:
            return None  # a survey: what it recorded stands, and each item decides on it
        return ctx.failure(
            "error",
            "同一个用例再次运行时结果不同（提交的代码不确定？）",
            "the same case gave another result when run again (is the submission nondeterministic?)",
            expected=Text("再次运行时结果相同", "the same result when run again"),
            actual=Text("结果不同", f"another result ({type(error).__name__})"),
        )
    finally:
        ctx.random = False
        ctx.close()
    return None


# Failures that show an item's own property broken (a reproduction of its own).
OWN_FAILURES = ("wrong", "error")


def mark_blocked(items: Sequence[ItemResult]) -> None:
    """An item of a TODO that could not be judged (too few of its cases could check it) while
    another item of the same TODO failed on a case of its own is blocked by that item: its card
    says so and shows that item's reproduction (fix it first; this one is judged then).

    The first such item in rubric order blocks it (the base item of TODO 5, the count items of
    TODO 2 and 3, table order in TODO 4: the properties the others' cases rest on)."""
    for item in items:
        failure = item.failure
        if item.status != FAILED or failure is None or failure.kind != "not_exercised":
            continue
        blocker = next((other for other in items if other is not item and other.todo == item.todo and other.status == FAILED
                        and other.failure is not None and other.failure.kind in OWN_FAILURES), None)
        if blocker is None or blocker.failure is None:
            continue
        item.blocked_by = blocker.id
        shown = blocker.failure
        item.failure = Failure(
            kind=failure.kind,
            message=Text(
                f"无法评判：{blocker.id} 未通过，它的错误让本项的用例无法检查（{failure.message.zh}）。先修好 {blocker.id}（下面是它的复现），本项才能评判",
                f"cannot be judged while {blocker.id} fails: its mistake keeps this item's cases from being checked ({failure.message.en}). "
                f"Fix {blocker.id} first (its reproduction is below); this item is judged then",
            ),
            repro=shown.repro,
            repro_zh=shown.repro_zh,
            expected=shown.expected,
            actual=shown.actual,
            expected_zh=shown.expected_zh,
            actual_zh=shown.actual_zh,
            picture=shown.picture,
        )
