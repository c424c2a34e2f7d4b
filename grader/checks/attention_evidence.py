"""TODO 5: what a right call shows about the scale while plain attention is wrong.

A feature item is paid for right calls with its feature on.  While the base item fails, a call
may be right only because the plain mistake does not show in it: a softmax peaked on one token
hides a dropped or extra token, and so does a low-precision tolerance over thousands of tokens.
Such a call still checks GQA and paging (a wrong head or block reads other keys, and the peak
moves) and the dtype (judged against its own tolerance).  It does not check the scale: a
softmax peaked on one token picks that token whatever the scale's value.  So, once the base
item has failed, the scale's item counts a right call only where its *base counterpart* is
right too: the same call in float32, its softmax flat (queries not boosted; where it passes a
scale, 1/sqrt(head_dim), as a large given scale would peak it).  A scale wrong only by default
(given scales honoured) keeps its item, as its calls pass a scale; a token dropped everywhere
and a scale ignored cannot be paid for the scale on peaked calls.

Nothing here runs while plain attention passes: a correct submission costs no extra call.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from grader.checks.attention_cases import Case
from grader.checks.base import Abort, ItemContext
from grader.results import Failure, Text

BLIND_TO_LUCK = frozenset({"todo5.scale_and_stability"})  # items a call right by luck does not check


@dataclass
class RightCall:
    """A call of a survey whose result was right, and the feature items it would pay."""

    example: int  # the survey's example number (random evidence counts examples)
    random: bool  # drawn by hypothesis, not a corner case
    case: Case
    items: frozenset[str]
    counterpart_right: bool | None = None  # None: not asked yet


def counterpart(case: Case) -> Case:
    """The call in float32 with an unboosted softmax; where it passes a scale, 1/sqrt(head_dim).

    Its layout (heads, GQA, paging, sizes) stays: a plain mistake that shows only in another
    layout (one query head, say) is no reason to doubt this call."""
    scale = None if case.scale_style == "default" else 1.0 / math.sqrt(case.head_dim)
    return replace(case, dtype="float32", boost=1.0, scale=scale)


def counterpart_right(ctx: ItemContext, case: Case, is_right: Callable[[ItemContext, Case], bool]) -> bool:
    """Whether the call's base counterpart is right: asked in a side process kept for such
    questions; where it is wrong there, asked again alone (state kept from an earlier call is the
    base item's mistake, not a reason to doubt this call).  A hang or a dead process: not right."""
    twin = counterpart(case)
    try:
        with ctx.side_session(kept_alive=True):
            if is_right(ctx, twin):
                return True
        with ctx.side_session():
            return is_right(ctx, twin)
    except Abort:
        return False


def confirm(ctx: ItemContext, item: str, calls: list[RightCall], is_right: Callable[[ItemContext, Case], bool],
            min_calls: int) -> Failure | None:
    """None where enough of `item`'s right calls have a right base counterpart; else why not.

    Calls made before the base item failed were not asked during the survey: they are asked now,
    until the item has enough, or can no longer get enough."""
    need_random = ctx.config.evidence.minimum(item)
    mine = [call for call in calls if item in call.items]
    confirmed_calls, confirmed_random = 0, set()

    def enough() -> bool:
        return confirmed_calls >= min_calls and len(confirmed_random) >= need_random

    def reachable(rest: list[RightCall]) -> bool:
        return (confirmed_calls + len(rest) >= min_calls
                and len(confirmed_random | {c.example for c in rest if c.random}) >= need_random)

    try:
        for index, right_call in enumerate(mine):
            if enough() or not reachable(mine[index:]):
                break
            if right_call.counterpart_right is None:
                right_call.counterpart_right = counterpart_right(ctx, right_call.case, is_right)
            if right_call.counterpart_right:
                confirmed_calls += 1
                if right_call.random:
                    confirmed_random.add(right_call.example)
    finally:
        ctx.end_side_sessions()
    if enough():
        return None
    return ctx.failure(
        "not_exercised",
        f"普通注意力（todo5.mha_fp32）出错时，本项只有 {confirmed_calls} 次正确调用（{len(confirmed_random)} 个随机用例）改用 float32、softmax 不集中（scale 取 1/sqrt(head_dim)）后仍然正确；"
        "其余调用正确只是因为普通注意力的错误在其中显现不出来（softmax 集中在一个 token 上，或低精度容差覆盖了它），不能说明 scale 处理正确",
        f"while plain attention (todo5.mha_fp32) is wrong, only {confirmed_calls} right calls ({len(confirmed_random)} random cases) of this property are right "
        "again in float32 with a flat softmax (a scale of 1/sqrt(head_dim)); the others were right only because the plain mistake cannot show in them "
        "(a softmax peaked on one token, or a low-precision tolerance that covers it), which says nothing of the scale",
        expected=Text(f"至少 {min_calls} 次调用、{need_random} 个随机用例", f"at least {min_calls} calls and {need_random} random cases"),
        actual=Text(f"{confirmed_calls} 次调用、{len(confirmed_random)} 个随机用例", f"{confirmed_calls} calls, {len(confirmed_random)} random cases"),
    )
