"""TODO 5: decode-time paged attention against a plain dense reference in float64.

Each example is one to three calls in a fresh process (so state kept between calls shows,
and the reproduction holds every call that ran).  Every call is checked in full: shape,
dtype and device, no NaN, the dense reference within the dtype's tolerance, and inputs left
unchanged (read by the judge from memory it shares with the submission).  Which item a
failing call costs is decided by ablation (grader/checks/attention_cases.py): the item that
owns a feature (GQA, paging, scale, low precision) takes the failure only if the same call
without that feature passes; the base item takes what fails with every feature off.  A
changed input is the inputs item's, wherever it happens.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
from hypothesis import given, seed

from grader.checks.arrays import Array, decode
from grader.checks.attention_cases import (
    GQA,
    Case,
    call_args,
    expected_line,
    histories,
    make_inputs,
    preamble,
    setup_lines,
)
from grader.checks.attention_corners import BASE, CUDA, FEATURE_OF, INPUTS, corners
from grader.checks.attention_evidence import BLIND_TO_LUCK, RightCall, confirm, counterpart_right
from grader.checks.base import AN_ALLOWED_VALUE, RETURNS_NORMALLY, Abort, ItemContext, Need, hypothesis_settings
from grader.checks.dense import TOLERANCE_FLOOR, dense_attention, diagnose, tolerance
from grader.checks.frame import tensor_digest
from grader.checks.running import Explore, grade_item, run_item
from grader.checks.script import Line, Script
from grader.results import Failure, Text

LABEL = "TODO 5"
PASSED = "todo5:right"  # calls whose result was right, whatever their features
MIN_PASSED = 6


@dataclass
class Verdict:
    """What went wrong in one call (None fields: nothing), as the judge and the script say it."""

    kind: str
    zh: str
    en: str
    expected: str | Text = ""
    actual: str | Text = ""
    asserts: tuple[tuple[str, str], ...] = ()
    picture: dict | None = None
    traceback: str = ""


def digest(array: Array) -> str:
    return hashlib.sha256(np.ascontiguousarray(array.raw).tobytes()).hexdigest()


@dataclass
class Called:
    """One call of paged_attention as the judge saw it."""

    verdict: Verdict | None  # None: right
    changed: list[str]  # inputs it modified
    out: np.ndarray | None  # the output as float64, when it was a tensor of the right shape
    digest: str = ""  # of the output as received (grader/checks/frame.py's tensor_digest)
    earlier_changed: list[str] = field(default_factory=list)  # outputs of earlier calls it changed


def call(ctx: ItemContext, case: Case, keep: int | None = None) -> Called:
    """One call of paged_attention: its verdict, the inputs it changed, its output.  With `keep`,
    the session keeps the output, and says how the outputs kept before are after the call."""
    inputs = make_inputs(case)
    fields = {name: a.payload() for name, a in inputs.items()}
    asked = ctx.kept.spec() if keep is not None else None
    if keep is not None:
        fields["keep"] = keep
    if asked:
        fields["snapshot"] = {"kept": asked}
    if case.scale_style != "default":
        fields.update(scale=case.scale, scale_style=case.scale_style)
    if case.reuse_caches:
        fields["reuse_caches"] = True
    reply = ctx.call("attention", device=case.device, **fields)
    if not reply.ok:
        error = reply.error or {}
        if error.get("not_implemented") and ctx.nothing_yet():
            raise Abort(ctx.failure("not_implemented", f"{LABEL} 还没有实现（paged_attention 抛出 NotImplementedError）", f"{LABEL} is not implemented yet (paged_attention raised NotImplementedError)"))
        what = f"{error.get('type')}: {str(error.get('message'))[:300]}"
        # NotImplementedError for part of the domain only; a value the worker would not send is an answer.
        kind = "not_implemented" if error.get("not_implemented") else "wrong" if error.get("rejected_return") else "error"
        if error.get("rejected_return"):  # our words, not the submission's: said in both languages
            said = Text(str(error.get("message_zh") or error.get("message"))[:300], str(error.get("message"))[:300])
            return Called(Verdict(kind, f"paged_attention 的返回值不符合要求：{said.zh}", f"paged_attention returned a value the contract does not allow: {said.en}",
                                  expected=AN_ALLOWED_VALUE, actual=said), [], None)
        return Called(Verdict(kind, f"paged_attention 意外抛出 {what}", f"paged_attention raised {what}", expected=RETURNS_NORMALLY, actual=what,
                              traceback=str(error.get("traceback", ""))), [], None)
    value = reply.value if isinstance(reply.value, dict) else {}
    digests = value.get("input_digests") or {}
    changed = [n for n, a in inputs.items() if n in digests and digests[n] != digest(a)] if digests else []
    try:
        out = decode(value.get("output")).values().astype(np.float64)
    except (TypeError, ValueError):
        out = None
    if out is not None and list(out.shape) != list(inputs["query"].shape):
        out = None
    output = value.get("output")
    earlier = ctx.kept.changed_in(reply.state, asked)
    return Called(judge(case, inputs, value), changed, out, tensor_digest(output) if isinstance(output, dict) else "", earlier)


def _is_right(ctx: ItemContext, case: Case) -> bool:
    return call(ctx, case).verdict is None


def judge(case: Case, inputs: dict[str, Array], value: dict) -> Verdict | None:
    shape_assert = ("out.shape == query.shape and out.dtype == query.dtype and out.device == query.device", "expected shape {tuple(query.shape)}, {query.dtype} on {query.device}; got {tuple(out.shape)}, {out.dtype} on {out.device}", "期望形状 {tuple(query.shape)}、{query.dtype}、设备 {query.device}；实际 {tuple(out.shape)}、{out.dtype}、{out.device}")
    try:
        answer = decode(value.get("output"))
    except (TypeError, ValueError):
        return Verdict("wrong", "paged_attention 应返回 torch.Tensor", "paged_attention should return a torch.Tensor", expected="torch.Tensor", actual=str(value)[:200], asserts=(("isinstance(out, torch.Tensor)", "expected a tensor, got {type(out).__name__}", "应返回张量，实际 {type(out).__name__}"),))
    want_shape = list(inputs["query"].shape)
    if list(answer.shape) != want_shape:
        return Verdict("wrong", f"输出形状应为 {want_shape}，实际 {list(answer.shape)}", f"the output shape should be {want_shape}, got {list(answer.shape)}", str(want_shape), str(list(answer.shape)), (shape_assert,))
    out_device = (value.get("output") or {}).get("device")
    if answer.dtype != case.dtype or out_device != case.device:
        return Verdict(
            "wrong",
            f"输出应与 query 同 dtype、同设备（{case.dtype}, {case.device}），实际 {answer.dtype}, {out_device}",
            f"the output should have the query's dtype and device ({case.dtype}, {case.device}); got {answer.dtype}, {out_device}",
            Text(f"{case.dtype}，设备 {case.device}", f"{case.dtype} on {case.device}"),
            Text(f"{answer.dtype}，设备 {out_device}", f"{answer.dtype} on {out_device}"),
            (shape_assert,),
        )
    if not case.seq_lens:
        return None  # a batch of no sequences: an empty tensor of the query's shape and dtype is the answer
    out = answer.values()
    values = {name: a.values() for name, a in inputs.items()}
    reference = dense_attention(values, case.scale)
    error_map = np.abs(out - reference).max(axis=2)  # [seq, head]; NaN where the output has NaN
    worst_error = np.where(np.isnan(error_map), np.inf, error_map)
    if float(worst_error.max()) <= TOLERANCE_FLOOR[case.dtype]:
        return None  # within the floor, which no tolerance is below: the baselines need not be computed
    tol = tolerance(case.dtype, case.scale, values, reference)
    worst = tuple(int(x) for x in np.unravel_index(int(np.argmax(worst_error)), worst_error.shape))
    if float(worst_error.max()) <= tol:
        return None
    picture = {
        "kind": "attention",
        "errors": [[None if np.isnan(e) else float(e) for e in row] for row in error_map],
        "tolerance": tol,
        "dtype": case.dtype,
        "worst": list(worst),
    }
    value_assert = (
        f"(error := (out.double().cpu() - expected).abs().max().item()) <= {tol:.3g}",
        f"max |out - expected| = {{error:.3g}}, tolerance {tol:.3g} ({case.dtype})",
        f"最大误差 |out - expected| = {{error:.3g}}，容差 {tol:.3g}（{case.dtype}）",
    )
    i, h = worst
    where = f"seq {i} (seq_len={case.seq_lens[i]}), head {h} (kv head {h // case.group})"
    where_zh = f"序列 {i}（seq_len={case.seq_lens[i]}）、头 {h}（KV 头 {h // case.group}）"
    if np.isnan(out).any():
        # Where no slot holds NaN, the computation made it: never blame a slot read then.
        why_zh = ("读到了不该读的位置（多余表项或尾块，它们填的是 NaN），或 softmax 溢出" if case.poison
                  else "这里没有任何槽位是 NaN，是计算产生的（softmax 溢出、inf - inf，或 -inf 乘以 0 的 scale）")
        why_en = ("a slot that must not be read (a padding entry or block tail, filled with NaN) leaked in, or the softmax overflowed" if case.poison
                  else "no slot holds NaN here, so the computation made it (the softmax overflowed, inf - inf, or -inf times a scale of 0)")
        return Verdict(
            "wrong",
            f"输出含 NaN（{where_zh}）：{why_zh}",
            f"the output has NaN ({where}): {why_en}",
            Text("有限值", "finite values"),
            Text(f"NaN，位于 [{i}, {h}]", f"NaN at [{i}, {h}]"),
            (shape_assert, value_assert),
            picture,
        )
    worst_value = float(error_map[i, h])
    hint = diagnose(case, values, out, tol)
    hint_zh, hint_en = (f"。提示：{hint[0]}", f". Hint: {hint[1]}") if hint else ("", "")
    return Verdict(
        "wrong",
        f"与稠密注意力不一致：{where_zh} 最大误差 {worst_value:.3g}，容差 {tol:.3g}（{case.dtype}）{hint_zh}",
        f"differs from dense attention at {where}: max error {worst_value:.3g}, tolerance {tol:.3g} ({case.dtype}){hint_en}",
        *_worst_values(reference[i, h], out[i, h], i, h),
        (shape_assert, value_assert),
        picture,
    )


def _worst_values(want: np.ndarray, got: np.ndarray, seq: int, head: int) -> tuple[str, str]:
    """Expected and actual at the worst (sequence, head): the few dims around the worst one, with as
    many digits as it takes for the two to differ (they always do: the error is past the tolerance)."""
    dim = int(np.argmax(np.abs(got - want)))
    lo = max(0, min(dim - 1, want.shape[0] - 4))
    hi = min(want.shape[0], lo + 4)
    where = f"[{seq}, {head}, {lo}:{hi}]"
    for digits in (6, 9, 12, 17):
        shown = [f"{where} = [{', '.join(f'{float(x):.{digits}g}' for x in values[lo:hi])}]" for values in (want, got)]
        if shown[0] != shown[1]:
            break
    return shown[0], shown[1]


def write_call(script: Script, case: Case, number: int, total: int) -> None:
    if total > 1:
        script.note(f"call {number} of {total} in one process", f"同一进程中的第 {number}/{total} 次调用")
    for code, en, zh in setup_lines(case):
        script.add(code, en, zh)


def _ablated(ctx: ItemContext, history: list[Case], index: int, case: Case) -> Called:
    """`case` called after the example's earlier calls, in a fresh process."""
    with ctx.side_session():
        for earlier in history[:index]:
            call(ctx, earlier)
        return call(ctx, case)


AFTER_BASE_LOOKS = 12  # wrong calls a survey looks into after plain attention failed (owners)


def owners(ctx: ItemContext, history: list[Case], index: int, out: np.ndarray | None = None) -> tuple[set[str], set[str], bool]:
    """The items a failing call belongs to (only the focus item's, when there is one), the feature
    items that a right call with their feature still showed handled, and whether the call failed
    only for state kept from earlier calls.

    Every item needs right values on its own cases, and a wrong call costs only the items whose
    property it breaks.  The base item owns a wrong call that is still wrong with every feature
    off (its property, plain attention, is broken there); no feature item does, and the call
    checks none of them (a feature cannot be judged where plain attention is wrong: its item
    needs right calls of its own, and says what blocks it if it has too few).  Where the plain
    call is right, a feature's item owns the wrong call unless the same call, with the feature
    kept and some other feature taken away, is right (then the feature taken away is to blame,
    and that right call is evidence for the kept one).  A wrong value is never the inputs
    item's: it is paid for calls that are right and leave their inputs alone.  So a mistake of
    one feature costs that item, one of plain attention costs the base item, and output wrong
    everywhere leaves no item paid (the others are blocked by the base item's failure).
    """
    case = history[index]
    if ctx.focus == CUDA:
        return {CUDA}, set(), False
    # In a survey, an item that already failed needs no more evidence: its own run finds the
    # failure again.  (Ablations are fresh processes; they are most of a failing TODO 5's cost.)
    candidates = [ctx.focus] if ctx.focus is not None else [i for i in (BASE, *FEATURE_OF) if i not in ctx.recorded]
    if not candidates:
        return set(), set(), False
    if ctx.focus is None and BASE in ctx.recorded:
        # Plain attention failed already: a wrong call now is most likely its mistake again, but
        # where its plain counterpart is right, a feature is to blame, and those feature items
        # would otherwise be paid on their right calls alone (red team 25: GQA right at ratio 2
        # only, paid while plain attention failed on head_dim 1).  Each such look costs a fresh
        # process call or two, so a survey takes a few of them.
        if ctx.looked_after_base >= AFTER_BASE_LOOKS:
            return set(), set(), False
        ctx.looked_after_base += 1
    if (index or ctx.history) and _ablated(ctx, [case], 0, case).verdict is None:
        # Right when called alone in a fresh process: state kept from an earlier call (of this
        # example, or of an earlier one in the same process), which is the base item's.
        return ({BASE} if ctx.focus in (None, BASE) and BASE in candidates else set()), set(), True
    verdicts: dict[Case, bool] = {}

    def right(variant: Case) -> bool:
        if variant not in verdicts:
            verdicts[variant] = _ablated(ctx, history, index, variant).verdict is None
        return verdicts[variant]

    on = [feature for feature in FEATURE_OF.values() if case.has(feature)]
    shown: set[str] = set()
    plain = case.plain()

    def base_broken() -> bool:
        """The same call with every feature off is wrong too (or this call has no feature)."""
        return plain == case or not right(plain)

    def owns(item: str) -> bool:
        if item == BASE:
            if base_broken():
                return True
            shown.add(BASE)  # the plain case, right: evidence for the base item
            return False
        if base_broken():
            return False
        feature = FEATURE_OF[item]
        kept = [_without(case, other, out) for other in on if other != feature]
        if len(on) > 2:
            kept.append(_only(case, feature))
        if any(right(variant) for variant in dict.fromkeys(kept)):
            shown.add(item)
            return False
        return True

    features = [item for item, feature in FEATURE_OF.items() if feature in on]
    found = {item for item in candidates if item in (BASE, *features) and owns(item)}
    if not found and not base_broken():
        # Plain attention is right and no feature owns the call alone: the mistake needs several
        # features.  Those it needs (taken away, the call is right) share it; where no single one
        # is needed, all of them (in focus, the focused one, if it is among them).  A float16
        # mistake that shows only with a large scale or NaN padding is the dtype's and the
        # scale's or the paging's, never GQA's (red team 13).
        needed = {item for item in features if right(_without(case, FEATURE_OF[item], out))}
        sharing = needed or set(features)
        if ctx.focus is None and sharing <= set(candidates):
            found = sharing
        elif ctx.focus in sharing and not any(owns(item) for item in features if item != ctx.focus):
            found = {ctx.focus}
    return found, shown - found, False


def _without(case: Case, feature: str, out: np.ndarray | None) -> Case:
    without = case.without(feature)
    if feature == GQA:  # keep the query head that failed: a mistake on one head is not GQA's
        without = replace(without, member=_first_failing_member(case, out))
    return without


def _only(case: Case, feature: str) -> Case:
    """The case with every feature off but `feature`."""
    for other in FEATURE_OF.values():
        if other != feature:
            case = case.without(other)
    return case


def _first_failing_member(case: Case, out: np.ndarray | None) -> int:
    """Which member of its group the first query head outside the tolerance is (0 if unknown)."""
    if out is None or not case.seq_lens:
        return 0
    values = {name: array.values() for name, array in make_inputs(case).items()}
    reference = dense_attention(values, case.scale)
    if out.shape != reference.shape:
        return 0
    with np.errstate(invalid="ignore"):
        error = np.nan_to_num(np.abs(out - reference), nan=np.inf).max(axis=(0, 2))
    bad = np.flatnonzero(error > tolerance(case.dtype, case.scale, values, reference))
    return int(bad[0]) % case.group if bad.size else 0


def check_history(ctx: ItemContext, history: list[Case]) -> None:
    script = ctx.begin(lambda c: check_history(c, history))
    for code, en, zh in preamble(dense=True):
        script.add(code, en, zh)
    several = len(history) > 1
    if several:
        script.add("outs = []", "each call's result and a copy: a later call must not change it", "每次调用的结果及其副本：之后的调用不能改变它")
    for index, case in enumerate(history):
        write_call(script, case, index + 1, len(history))
        script.add(f"out = paged_attention({call_args(case)})")
        key = ctx.kept.key()
        called = call(ctx, case, key)
        if called.digest:
            ctx.kept.add(key, called.digest, f"call {index + 1}")
        ctx.session_log.append(case)
        if called.changed:
            _record_mutation(ctx, script, called.changed)
        verdict = called.verdict
        if verdict is not None:
            found, exercised, state_kept = owners(ctx, history, index, called.out)
            if ctx.focus in found and index == 0 and ctx.history and state_kept:
                _fail_after_one_earlier_call(ctx, case)  # state from an earlier example: show it in two calls
            if ctx.focus in found:
                if any("expected" in check[0] for check in verdict.asserts):
                    script.add(*expected_line(case))
                for check in verdict.asserts:
                    script.expect(*check)
                raise ctx.fail(verdict.kind, verdict.zh, verdict.en, expected=verdict.expected, actual=verdict.actual, picture=verdict.picture, traceback=verdict.traceback)
            for item in found:
                ctx.record(item, verdict.zh, verdict.en)
            for item in exercised:
                ctx.count(item)
            if exercised & set(FEATURE_OF) and ctx.focus is None:
                # shown by a right ablation whose plain call was right too: already its own counterpart
                ctx.grading.attention_right.append(RightCall(ctx.examples, ctx.random, case, frozenset(exercised & set(FEATURE_OF)), True))
            # Where a property could not be checked, this call shows why (its result is wrong).
            witness = script.copy()
            if any("expected" in check[0] for check in verdict.asserts):
                witness.add(*expected_line(case))
            for check in verdict.asserts:
                witness.expect(*check)
            unchecked = [item for item, feature in FEATURE_OF.items() if case.has(feature) and item not in found | exercised]
            for key in (*unchecked, BASE, PASSED, INPUTS + ":clean"):
                ctx.missed(key, witness)
            return  # nothing more to learn from this example
        ctx.count(CUDA if case.device != "cpu" else BASE)
        ctx.count(PASSED)
        features = frozenset(item for item, feature in FEATURE_OF.items() if case.has(feature))
        if features and ctx.focus is None:
            right = RightCall(ctx.examples, ctx.random, case, features)
            ctx.grading.attention_right.append(right)
            if BASE in ctx.recorded and features & BLIND_TO_LUCK:
                # Plain attention is wrong: the scale's item counts this call only where its base
                # counterpart is right too (attention_evidence.py).
                right.counterpart_right = counterpart_right(ctx, case, _is_right)
                features = features if right.counterpart_right else features - BLIND_TO_LUCK
        for item in features:
            ctx.count(item)
        if not called.changed and max(case.seq_lens, default=0) > 1:
            # Evidence only where the result weighed several tokens: an empty batch, or sequences of
            # one token (the answer is that token's value), leave inputs alone without computing anything.
            ctx.count(INPUTS + ":clean")
        if several:
            script.add("outs.append((out, out.clone()))")
        if called.earlier_changed:
            _earlier_output_changed(ctx, script)
            return


def _earlier_output_changed(ctx: ItemContext, script: Script) -> None:
    """A later call changed a tensor an earlier one returned (an output buffer used again): a
    result belongs to its caller; state kept between calls, the base item's."""
    zh, en = "paged_attention 再次调用时改写了之前返回的张量（复用了输出缓冲区？返回值属于调用者）", "calling paged_attention again changed a tensor an earlier call returned (an output buffer used again? a result belongs to its caller)"
    if not ctx.focused(BASE):
        ctx.record(BASE, zh, en)
        return
    script.expect(
        "all(torch.equal(a, b) for a, b in outs)",
        "an earlier result changed: calls {[i + 1 for i, (a, b) in enumerate(outs) if not torch.equal(a, b)]}",
        "之前的结果被改写：第 {[i + 1 for i, (a, b) in enumerate(outs) if not torch.equal(a, b)]} 次调用",
    )
    raise ctx.fail("wrong", zh, en, expected=Text("之前的结果不变", "earlier results unchanged"), actual=Text("被之后的调用改写", "changed by a later call"))


def _fail_after_one_earlier_call(ctx: ItemContext, case: Case) -> None:
    """A call that fails only after calls of earlier examples: find one earlier call that is
    enough, and fail as the two-call example [that call, this one] (a short reproduction).
    Returns when none is (the failure is then shown with the examples it needs)."""
    for earlier in list(reversed(ctx.session_log[:-1]))[:40]:
        # [earlier, case] must fail at its second call only, or it would show another failure
        if _ablated(ctx, [earlier, case], 1, case).verdict is not None and _ablated(ctx, [earlier], 0, earlier).verdict is None:
            ctx.close()
            check_history(ctx, [earlier, case])  # raises, with its own script and replay
            return


def _record_mutation(ctx: ItemContext, script: Script, changed: list[str]) -> None:
    if ctx.grading.mutations:
        return
    shown = script.copy()
    if not any(line.code.startswith("saved = ") for line in shown.lines[-2:]):
        shown.lines.insert(len(shown.lines) - 1, Line("saved = [t.clone() for t in (query, key_cache, value_cache, block_tables, seq_lens)]"))
    shown.add("for name, before, after in zip(['query', 'key_cache', 'value_cache', 'block_tables', 'seq_lens'], saved, (query, key_cache, value_cache, block_tables, seq_lens)):")
    # Bits, so that NaN equals NaN; contiguous first, as an input may be a strided view (a flattened view of it has no stride 1).
    shown.add("    assert torch.equal(before.contiguous().view(-1).view(torch.uint8), after.contiguous().view(-1).view(torch.uint8)), f'paged_attention modified {name}'")
    ctx.grading.mutations.append(
        ctx.failure(
            "wrong",
            f"paged_attention 修改了输入：{changed}",
            f"paged_attention modified its inputs: {changed}",
            expected=Text("输入不变", "inputs unchanged"),
            actual=Text(f"被修改：{changed}", f"changed: {changed}"),
            script=shown,
        )
    )


SURVEYED = (BASE, *FEATURE_OF, INPUTS)


def plan(run: ItemContext) -> tuple[list[Callable[[], None]], Explore]:
    device = "cuda" if run.focus == CUDA else "cpu"
    if run.focus is None:
        histories_ = [h for item in SURVEYED for h in corners(item, seed=run.seed())]
        unique = list(dict.fromkeys(tuple(h) for h in histories_))
        chosen = [list(h) for h in unique]
    else:
        chosen = corners(run.focus, device, run.seed())

    def explore(round_: int, count: int) -> None:
        force, avoid = FEATURE_OF.get(run.focus or ""), frozenset[str]()
        if round_ and force is None:
            # A later round of a survey: the features of items that failed already off (they need no
            # more evidence, and their calls would be wrong), the one lagging most always on.
            avoid = frozenset(FEATURE_OF[item] for item in run.recorded if item in FEATURE_OF)
            lagging = [item for item in FEATURE_OF if FEATURE_OF[item] not in avoid]
            if lagging:
                force = FEATURE_OF[min(lagging, key=lambda item: run.evidence[item] - run.config.evidence.minimum(item))]

        @seed(run.seed(round_))
        @hypothesis_settings(run.config, count or run.config.hypothesis.attention_examples)
        @given(histories(force, device, avoid))
        def test(history: list[Case]) -> None:
            check_history(run, history)

        test()

    return [lambda history=history: check_history(run, history) for history in chosen], explore


NEEDS = {
    item: [Need(item, MIN_PASSED, "这一性质被检查的调用不够多（其余调用因为其他问题失败）", "too few calls could check this property (the others failed for other reasons)")]
    for item in (BASE, *FEATURE_OF, CUDA)
}
NEEDS[INPUTS] = [Need(INPUTS + ":clean", MIN_PASSED, "对多于一个 token 的序列结果正确且未修改输入的调用不够多", "too few calls returned a correct result over sequences of more than one token without touching their inputs")]


def check_attention(ctx: ItemContext) -> Failure | None:
    if ctx.item_id == CUDA:  # its own process (a CUDA context cannot be forked), its own run
        corner_runs, explore = plan(ctx)
        return run_item(ctx, corner_runs, explore, NEEDS[CUDA])
    failure = grade_item(ctx, "todo5", SURVEYED, plan, NEEDS[ctx.item_id])
    if ctx.item_id == INPUTS and ctx.grading.mutations:
        return ctx.grading.mutations[0]  # a changed input, wherever it happened, before anything else
    survey = ctx.grading.surveys.get("todo5")
    if failure is None and ctx.item_id in BLIND_TO_LUCK and survey is not None and BASE in survey.recorded:
        # Plain attention is wrong: a right call counts only where its base counterpart is right too.
        return confirm(ctx, ctx.item_id, ctx.grading.attention_right, _is_right, MIN_PASSED)
    return failure


check_mha_fp32 = check_gqa = check_paging = check_scale_and_stability = check_low_precision = check_inputs_unchanged = check_cuda = check_attention
