"""TODO 1: the KV-cache capacity ledger, over its whole domain.

Domain: every dimension is any positive int (Python ints are unbounded: products past 2**53
lose exactness in a float, past 2**63 overflow in numpy or torch), `dtype_bytes` defaults to
2 and may be left out, and the function may be called positionally or by keyword.  Each
field must be the exact int.  Validation and `layout_shape` are given code: they earn no
points here and are checked with the rest of the given code (grader/checks/given.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import given, seed
from hypothesis import strategies as st

from grader.checks.base import ItemContext, Need, hypothesis_settings, student_error
from grader.checks.frame import plain_digest
from grader.checks.running import Explore, grade_item
from grader.checks.script import Script
from grader.checks.values import as_dict, as_list, show
from grader.results import Failure, Text

FIELDS = ("num_blocks", "block_size", "num_layers", "num_kv_heads", "head_dim", "dtype_bytes")
LABEL = "TODO 1"
MIN_CHECKED = 10

_dimension = st.one_of(st.integers(1, 8), st.integers(1, 4096), st.integers(1, 10**12))
dims = st.fixed_dictionaries(
    {
        "num_blocks": _dimension,
        "block_size": _dimension,
        "num_layers": _dimension,
        "num_kv_heads": _dimension,
        "head_dim": _dimension,
        "dtype_bytes": st.one_of(st.sampled_from([1, 2, 4, 8]), st.integers(1, 64)),
    }
)
# How the call is written: keywords, positionally, or leaving dtype_bytes to its default of 2.
styles = st.sampled_from(["keyword", "positional", "default_dtype"])

# Distinct primes expose a missing or doubled factor; the big ones break float and int64.
CORNERS: tuple[tuple[dict[str, int], str], ...] = (
    ({"num_blocks": 1, "block_size": 1, "num_layers": 1, "num_kv_heads": 1, "head_dim": 1, "dtype_bytes": 1}, "keyword"),
    ({"num_blocks": 3, "block_size": 5, "num_layers": 7, "num_kv_heads": 11, "head_dim": 13, "dtype_bytes": 2}, "keyword"),
    ({"num_blocks": 17, "block_size": 16, "num_layers": 32, "num_kv_heads": 8, "head_dim": 128, "dtype_bytes": 2}, "default_dtype"),
    ({"num_blocks": 3, "block_size": 5, "num_layers": 7, "num_kv_heads": 11, "head_dim": 13, "dtype_bytes": 4}, "positional"),
    ({"num_blocks": 2, "block_size": 3, "num_layers": 5, "num_kv_heads": 7, "head_dim": 11, "dtype_bytes": 1}, "default_dtype"),
    ({"num_blocks": 10**6 + 3, "block_size": 4099, "num_layers": 997, "num_kv_heads": 193, "head_dim": 8191, "dtype_bytes": 8}, "keyword"),
    ({"num_blocks": 10**12 + 39, "block_size": 10**6 + 3, "num_layers": 10**4 + 7, "num_kv_heads": 10**3 + 9, "head_dim": 10**5 + 3, "dtype_bytes": 8}, "positional"),
    ({"num_blocks": 5, "block_size": 1, "num_layers": 3, "num_kv_heads": 1, "head_dim": 64, "dtype_bytes": 3}, "keyword"),
    ({"num_blocks": 2**20, "block_size": 2**11, "num_layers": 2**7, "num_kv_heads": 2**6, "head_dim": 2**9, "dtype_bytes": 16}, "positional"),
    ({"num_blocks": 9, "block_size": 7, "num_layers": 1, "num_kv_heads": 64, "head_dim": 3, "dtype_bytes": 2}, "keyword"),
    # Every field past 2**64, the per-token bytes too: a product in int64 (or uint64) wraps in each.
    ({"num_blocks": 3, "block_size": 2, "num_layers": 10**7 + 19, "num_kv_heads": 10**6 + 3, "head_dim": 10**6 + 33, "dtype_bytes": 8}, "keyword"),
)


# Every field 2**61: Python hashes an int modulo 2**61 - 1, so these hash as the all-ones corner
# does.  After it, a cache keyed by hash() hands back the all-ones answer.
HASH_TWIN = ({name: 2**61 for name in FIELDS}, "keyword")

# Each corner alone, then two and three calls in one process (a result must not change after).
CORNER_CALLS: tuple[tuple[tuple[dict[str, int], str], ...], ...] = (
    *((corner,) for corner in CORNERS),
    (CORNERS[1], CORNERS[3]),
    (CORNERS[2], CORNERS[5], CORNERS[0]),
    (CORNERS[0], HASH_TWIN),
)
# The caller zeroes what each call returned (its own to change), then calls again with the
# same arguments: a result kept and handed out again (an lru_cache) shows.
EDITED_CALLS: tuple[tuple[tuple[dict[str, int], str], ...], ...] = (
    (CORNERS[1], CORNERS[1]),
    (CORNERS[2], CORNERS[5], CORNERS[2]),
    (CORNERS[3], (CORNERS[3][0], "keyword")),
)
# Only the second of two equal calls edited, the first compared after a third: one dict handed
# to both (a cache that hands its dict out again until a caller edits it) shows.
EDITED_SECOND = ((CORNERS[1], CORNERS[1], CORNERS[3]), frozenset({2}))


def expected(d: dict[str, int], style: str) -> dict[str, int]:
    dtype_bytes = 2 if style == "default_dtype" else d["dtype_bytes"]
    per_token = 2 * d["num_layers"] * d["num_kv_heads"] * d["head_dim"] * dtype_bytes
    per_block = per_token * d["block_size"]
    return {"kv_bytes_per_token": per_token, "kv_bytes_per_block": per_block, "total_cache_bytes": per_block * d["num_blocks"]}


def call_fields(d: dict[str, int], style: str) -> dict[str, Any]:
    if style == "positional":
        return {"args": [d[k] for k in FIELDS]}
    return {"kwargs": {k: d[k] for k in FIELDS if not (style == "default_dtype" and k == "dtype_bytes")}}


def call_text(d: dict[str, int], style: str) -> str:
    if style == "positional":
        return "ledger = estimate_kv_cache_bytes(" + ", ".join(str(d[k]) for k in FIELDS) + ")"
    names = [k for k in FIELDS if not (style == "default_dtype" and k == "dtype_bytes")]
    return "ledger = estimate_kv_cache_bytes(" + ", ".join(f"{k}={d[k]}" for k in names) + ")"


FIELDS_OF = {"todo1.per_token": ("kv_bytes_per_token",), "todo1.per_block_and_total": ("kv_bytes_per_block", "total_cache_bytes")}


def check_calls(ctx: ItemContext, calls: tuple[tuple[dict[str, int], str], ...], edit: bool | frozenset[int] = False) -> None:
    """One to four calls in one process; each field is checked for the item it belongs to (every
    item in a survey), and what a call returned must not change when the function is called again.
    `edit`: the caller zeroes each result but the last (its own to change) before the next call,
    or those of the calls numbered (from 1) in it; what it left there must not change either."""
    script = ctx.begin(lambda c: check_calls(c, calls, edit))
    several = len(calls) > 1
    if several:
        script.add("import copy")
    edited: list[int] = []
    edited_any = False
    for number, (d, style) in enumerate(calls, start=1):
        editing = number in edit if isinstance(edit, frozenset) else edit and number < len(calls)
        changed, reading = _check_call(ctx, script, d, style, number if several else 0, save=not editing)
        if not changed and edited_any and _shows_the_edit(reading):
            _edit_seen(ctx, script, number)
            return
        if changed:
            _earlier_changed(ctx, script, number, edited, changed)
            return
        if editing:
            key = ctx.kept.last()
            script.add("[value.__setitem__(slice(None), [0] * len(value)) for value in ledger.values() if type(value) is list]",
                       "the caller's to change, lists in place: later calls must neither see nor undo it",
                       "返回值属于调用者，可以修改（列表原地修改）：之后的调用既不应受影响，也不能把它改回去")
            script.add("for name in ledger: ledger[name] = ledger[name] if type(ledger[name]) is list else 0")
            zeroed = _zeroed(reading)
            edited_any = True
            ctx.kept.forget(key)
            edited_reply = ctx.call("edit_kept", key=key)
            if not edited_reply.ok:
                # The edit runs none of the submission's code (dict and list slots, called directly):
                # it fails only where the grader's code in the worker was changed.
                ctx.broken("edit_kept")
                return
            if edited_reply.value is not True:  # the caller's own change raised (anything but True: not made)
                _edit_refused(ctx)
                return
            if zeroed is not None:  # what the caller left in it: a later call must not change that either
                ctx.kept.add(key, plain_digest(zeroed), f"call {number}")
                script.add(f"ledger{number}, saved{number} = ledger, copy.deepcopy(ledger)", "what the caller left in it, and a copy",
                           "调用者改过的返回值及其副本")
            else:
                edited.append(number)


def _check_call(ctx: ItemContext, script: Script, d: dict[str, int], style: str, number: int, save: bool = True) -> tuple[list[str], Any]:
    """One call, its fields checked; the earlier results of the example it changed (frame), and
    the result as the judge received it."""
    comment = ("dtype_bytes left to its default, 2", "dtype_bytes 使用默认值 2") if style == "default_dtype" else ("", "")
    script.add(call_text(d, style), *comment)
    key, asked = ctx.kept.key(), ctx.kept.spec()
    reply = ctx.call("ledger", keep=key, **({"snapshot": {"kept": asked}} if asked else {}), **call_fields(d, style))
    changed = ctx.kept.changed_in(reply.state, asked)
    if not reply.ok:
        raise student_error(ctx, reply, "estimate_kv_cache_bytes", LABEL)
    ctx.kept.add(key, plain_digest(reply.value), f"call {number}")
    got = as_dict(reply.value)
    if got is None:
        script.expect("isinstance(ledger, dict)", "expected a dict, got {type(ledger).__name__}", "应返回 dict，实际 {type(ledger).__name__}")
        raise ctx.fail("wrong", "返回值应当是 dict", "the result should be a dict", expected="dict", actual=show(reply.value))
    want = expected(d, style)
    for item, fields in FIELDS_OF.items():
        if ctx.focus not in (None, item):
            continue
        problem = _problem(got, want, fields, _derived(got, want, d))
        if problem is None:
            ctx.count(item)
            continue
        if not ctx.focused(item):
            ctx.record(item, problem[2], problem[3])
            continue
        condition, messages, zh, en, expected_text, actual = problem
        script.expect(condition, *messages)
        raise ctx.fail("wrong", zh, en, expected=expected_text, actual=actual)
    if number and save:
        script.add(f"ledger{number}, saved{number} = ledger, copy.deepcopy(ledger)", "what this call returned, and a copy", "这次调用的返回值及其副本")
    return changed, reply.value


def _zeroed(reading: Any) -> dict[str, Any] | None:
    """A returned dict as the caller leaves it after zeroing it (what `edit_kept` does: plain lists
    in place, every other entry replaced by 0), in the form the judge received it; None when the judge cannot say (a key that
    is not a plain str: the edit may skip it)."""
    pairs = reading.get("__dict__") if isinstance(reading, dict) else None
    if not isinstance(pairs, list) or not all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) for p in pairs):
        return None
    def zero(value: Any) -> Any:  # a plain list zeroed in place, anything else replaced by 0
        if isinstance(value, dict) and list(value) == ["__list__"] and isinstance(value["__list__"], list):
            return {"__list__": [0] * len(value["__list__"])}
        return 0

    return {"__dict__": [[name, zero(value)] for name, value in pairs]}


def _shows_the_edit(reading: Any) -> bool:
    """A result whose `layout_shape` is all zeros: the caller's in-place edit of an earlier result
    (no layout has a zero dimension), so a part of it is shared with what an earlier call returned."""
    got = as_dict(reading)
    layout = as_list(got.get("layout_shape")) if got is not None else None
    return bool(layout) and all(v == 0 for v in layout)


def _edit_seen(ctx: ItemContext, script: Script, number: int) -> None:
    zh = "之后的调用返回了调用者对之前返回值的修改（返回值的一部分，例如 layout_shape 列表，在两次调用之间共享；返回值属于调用者）"
    en = ("a later call returned the caller's change to an earlier result (a part of it, such as the layout_shape list, is shared"
          " between calls; a result belongs to its caller)")
    for item in FIELDS_OF:
        if not ctx.focused(item):
            ctx.record(item, zh, en)
    if ctx.focus in FIELDS_OF:
        script.expect("0 not in ledger['layout_shape']", "this call's layout_shape holds the caller's edit of an earlier result: {ledger['layout_shape']}",
                      "这次调用的 layout_shape 带着调用者对之前返回值的修改：{ledger['layout_shape']}")
        raise ctx.fail("wrong", zh, en, expected=Text("layout_shape 为这次调用自己的新列表", "layout_shape a new list of this call's own"),
                       actual=Text(f"第 {number} 次调用的 layout_shape 全为 0（调用者的修改）", f"call {number}'s layout_shape all zeros (the caller's edit)"))


def _edit_refused(ctx: ItemContext) -> None:
    """The caller could not change what a call gave it: setting an entry raised (the reproduction's
    line that sets them raises as it did here)."""
    zh = "调用者无法修改返回的 dict：给它的某个键赋值时抛出了异常（返回值属于调用者，调用者可以修改它）"
    en = "the caller could not change the returned dict: setting one of its entries raised (a result belongs to its caller, who may change it)"
    for item in FIELDS_OF:
        if not ctx.focused(item):
            ctx.record(item, zh, en)
    if ctx.focus in FIELDS_OF:
        raise ctx.fail("wrong", zh, en, expected=Text("每个键都可以赋值", "every entry can be set"),
                       actual=Text("赋值时抛出异常", "setting an entry raised"))


def _earlier_changed(ctx: ItemContext, script: Script, number: int, edited: list[int], changed: list[str]) -> None:
    """A later call changed the dict an earlier one returned (one dict used again): the result
    belongs to the caller, so every field of it is wrong from then on."""
    zh = "再次调用 estimate_kv_cache_bytes 改变了之前返回的 dict，或把调用者对它的修改改了回去（每次都返回同一个对象？返回值属于调用者）"
    en = ("calling estimate_kv_cache_bytes again changed the dict an earlier call returned, or undid the caller's change to it"
          " (the same object returned each time? a result belongs to its caller)")
    for item in FIELDS_OF:
        if not ctx.focused(item):
            ctx.record(item, zh, en)
    if ctx.focus in FIELDS_OF:
        saved = [k for k in range(1, number) if k not in edited]
        checks = " and ".join(f"ledger{k} == saved{k}" for k in saved)
        numbers = [int(label.removeprefix("call ")) for label in changed if label.removeprefix("call ").isdigit()]
        first = next((k for k in numbers if k in saved), saved[0] if saved else 1)
        # The caller changes the last result (its own): an earlier result that changes with it is the
        # same object, or shares a list with it (the grader thread saw them shared: red team 23).
        script.add("[value.__setitem__(slice(None), [-1] * len(value)) for value in ledger.values() if type(value) is list]",
                   "the last result is the caller's to change: an earlier one must not change with it",
                   "最后一个返回值属于调用者，可以修改：之前的返回值不应随之改变")
        script.add("for name in ledger: ledger[name] = ledger[name] if type(ledger[name]) is list else -1")
        script.expect(checks, f"an earlier result changed: now {{ledger{first}}}, was {{saved{first}}}",
                      f"之前的返回值被改变：现在 {{ledger{first}}}，之前 {{saved{first}}}")
        calls = [label.removeprefix("call ") for label in changed][:4]  # the labels kept: "call 1", ...
        raise ctx.fail("wrong", zh, en,
                       expected=Text(f"第 {'、'.join(calls)} 次调用的返回值（或调用者改过后的样子）不变",
                                     f"what call {', '.join(calls)} returned (or the caller left in it) unchanged"),
                       actual=Text(f"第 {number} 次调用改变了第 {'、'.join(calls)} 次调用的返回值", f"call {number} changed what call {', '.join(calls)} returned"))


def _derived(got: dict[str, Any], want: dict[str, int], d: dict[str, int]) -> dict[str, tuple[int, str]]:
    """What a field also may be where the field it is counted from is a wrong exact int: the
    bytes of `block_size` of the submission's own tokens, of `num_blocks` of its own blocks.
    One mistake, one item: a wrong kv_bytes_per_token costs todo1.per_token only."""
    derived = {}
    for name, source, times in (("kv_bytes_per_block", "kv_bytes_per_token", d["block_size"]),
                                ("total_cache_bytes", "kv_bytes_per_block", d["num_blocks"])):
        value = got.get(source)
        # Not 0: 0 (a stub, a constant) times anything is 0, which pays nothing.  A negative figure
        # (an int64 product that wrapped) is the submission's own as much as a positive one (blind 38, 40).
        if type(value) is int and value != 0 and value != want[source]:
            derived[name] = (value * times, f"ledger[{source!r}] * {times}")
    return derived


def _problem(got: dict[str, Any], want: dict[str, int], fields: tuple[str, ...],
             derived: dict[str, tuple[int, str]] | None = None) -> tuple[str, tuple[str, str], str, str, str, str] | None:
    for name in fields:
        value, target = got.get(name), want[name]
        if name in (derived or {}) and type(value) is int and value != target:
            other, formula = (derived or {})[name]
            if value == other:
                continue
            return (
                f"ledger[{name!r}] in ({target}, {formula})",
                (f"{name}: expected {target} (or {formula} = {other}), got {{ledger[{name!r}]}}",
                 f"{name}：应为 {target}（或 {formula} = {other}），实际 {{ledger[{name!r}]}}"),
                f"{name} 计算错误：应为 {target}（或按你自己的数 {formula} = {other}），实际 {value}",
                f"{name} is wrong: expected {target} (or from your own figure, {formula} = {other}), got {value}",
                f"{target} (or {other})",
                str(value),
            )
        if type(value) is not int:
            return (
                f"type(ledger[{name!r}]) is int",
                (f"{name} should be an exact int, got {{ledger[{name!r}]!r}}", f"{name} 应为精确的 int，实际 {{ledger[{name!r}]!r}}"),
                f"{name} 应当是精确的 int（不要用 / 做除法、不要转成 float 或张量）",
                f"{name} should be an exact int (no / division, no float, no tensor)",
                f"int {target}",
                show(value),
            )
        if value != target:
            return (
                f"ledger[{name!r}] == {target}",
                (f"{name}: expected {target}, got {{ledger[{name!r}]}}", f"{name}：应为 {target}，实际 {{ledger[{name!r}]}}"),
                f"{name} 计算错误：应为 {target}，实际 {value}",
                f"{name} is wrong: expected {target}, got {value}",
                str(target),
                str(value),
            )
    return None


def plan(run: ItemContext) -> tuple[list[Callable[[], None]], Explore]:
    def explore(round_: int, examples: int) -> None:
        @seed(run.seed(round_))
        @hypothesis_settings(run.config, examples or run.config.hypothesis.max_examples)
        @given(st.lists(st.tuples(dims, styles), min_size=1, max_size=3), st.booleans())
        def test(calls: list[tuple[dict[str, int], str]], edit: bool) -> None:
            # Edited: the first call's arguments once more at the end, after the caller's edits.
            check_calls(run, (*calls, calls[0]) if edit else tuple(calls), edit)

        test()

    corners = [lambda calls=calls: check_calls(run, calls) for calls in CORNER_CALLS]
    edited = [lambda calls=calls: check_calls(run, calls, edit=True) for calls in EDITED_CALLS]
    second = [lambda: check_calls(run, EDITED_SECOND[0], edit=EDITED_SECOND[1])]
    return [*corners, *edited, *second], explore


def check_ledger(ctx: ItemContext) -> Failure | None:
    need = Need(ctx.item_id, MIN_CHECKED, "账本的值被检查的次数不够", "too few ledger values could be checked")
    return grade_item(ctx, "todo1", list(FIELDS_OF), plan, [need])


check_per_token = check_per_block_and_total = check_ledger
