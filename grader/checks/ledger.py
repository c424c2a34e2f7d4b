"""TODO 1: the KV-cache capacity ledger, as properties over random dimensions."""

from __future__ import annotations

from typing import Any

from hypothesis import given, seed
from hypothesis import strategies as st

from grader.checks.base import ItemContext, hypothesis_settings, run_until_failure, student_error
from grader.results import Failure

FIELDS = ("num_blocks", "block_size", "num_layers", "num_kv_heads", "head_dim", "dtype_bytes")
LABEL = "TODO 1"

# Distinct small primes per dimension would hide nothing; random ranges include 1 and
# values large enough that a float result loses exactness.
dims = st.fixed_dictionaries(
    {
        "num_blocks": st.integers(1, 100_000),
        "block_size": st.integers(1, 256),
        "num_layers": st.integers(1, 128),
        "num_kv_heads": st.integers(1, 64),
        "head_dim": st.integers(1, 512),
        "dtype_bytes": st.sampled_from([1, 2, 4, 8]),
    }
)


def expected(d: dict[str, int]) -> dict[str, Any]:
    per_token = 2 * d["num_layers"] * d["num_kv_heads"] * d["head_dim"] * d["dtype_bytes"]
    per_block = per_token * d["block_size"]
    return {
        "kv_bytes_per_token": per_token,
        "kv_bytes_per_block": per_block,
        "total_cache_bytes": per_block * d["num_blocks"],
        "layout_shape": [d["num_layers"], 2, d["num_kv_heads"], d["block_size"], d["head_dim"]],
    }


def _call_text(d: dict[str, int]) -> str:
    return "ledger = estimate_kv_cache_bytes(" + ", ".join(f"{k}={d[k]}" for k in FIELDS) + ")"


def _as_dict(value: Any) -> dict[str, Any] | None:
    if isinstance(value, dict) and "__dict__" in value:
        return {str(k): v for k, v in value["__dict__"] if isinstance(k, str)}
    return None


def _show(value: Any) -> str:
    """A returned value (as the worker described it) the way a student would print it."""
    if isinstance(value, dict):
        if "__list__" in value or "__tuple__" in value:
            return "[" + ", ".join(_show(v) for v in value.get("__list__", value.get("__tuple__"))) + "]"
        if "__dict__" in value:
            return "{" + ", ".join(f"{_show(k)}: {_show(v)}" for k, v in value["__dict__"]) + "}"
        if "__object__" in value:
            return f"{value.get('repr')} ({value['__object__']})"
        if "__float__" in value:
            return str(value["__float__"])
        return repr(value)
    return repr(value)


def check_ledger(ctx: ItemContext, fields: tuple[str, ...]) -> Failure | None:
    """The given fields of the ledger equal the exact integers for random dimensions."""

    @seed(ctx.config.hypothesis.seed)
    @hypothesis_settings(ctx.config, ctx.config.hypothesis.max_examples)
    @given(dims)
    def prop(d: dict[str, int]) -> None:
        repro = ctx.new_example()
        repro.add(_call_text(d))
        reply = ctx.call("ledger", kwargs=d)
        if not reply.ok:
            raise student_error(ctx, reply, "estimate_kv_cache_bytes", LABEL)
        got = _as_dict(reply.value)
        if got is None:
            raise ctx.fail("wrong", "返回值应当是 dict", "the result should be a dict", expected="dict", actual=_show(reply.value))
        want = expected(d)
        for name in fields:
            value, target = got.get(name), want[name]
            if name == "layout_shape":
                shown = value.get("__list__", value.get("__tuple__")) if isinstance(value, dict) else None
                if shown != target:
                    repro.add(f"ledger[{name!r}]  # expected {target}, got {_show(value)}")
                    raise ctx.fail("wrong", f"{name} 不正确", f"{name} is wrong", expected=repr(target), actual=_show(value))
                continue
            if type(value) is not int:
                repro.add(f"type(ledger[{name!r}])  # expected int, got {_show(value)}")
                raise ctx.fail(
                    "wrong",
                    f"{name} 应当是精确的 int（不要用 / 做除法或得到 float）",
                    f"{name} should be an exact int (no / division, no float)",
                    expected=f"int {target}",
                    actual=_show(value),
                )
            if value != target:
                repro.add(f"ledger[{name!r}]  # expected {target}, got {value}")
                raise ctx.fail(
                    "wrong",
                    f"{name} 计算错误：应为 {target}，实际 {value}",
                    f"{name} is wrong: expected {target}, got {value}",
                    expected=str(target),
                    actual=str(value),
                )

    return run_until_failure(ctx, prop)


def check_per_token(ctx: ItemContext) -> Failure | None:
    return check_ledger(ctx, ("kv_bytes_per_token",))


def check_per_block_and_total(ctx: ItemContext) -> Failure | None:
    return check_ledger(ctx, ("kv_bytes_per_block", "total_cache_bytes", "layout_shape"))


def check_rejects_nonpositive(ctx: ItemContext) -> Failure | None:
    @seed(ctx.config.hypothesis.seed)
    @hypothesis_settings(ctx.config, ctx.config.hypothesis.max_examples)
    @given(dims, st.sampled_from(FIELDS), st.integers(-5, 0))
    def prop(d: dict[str, int], field: str, bad: int) -> None:
        d = {**d, field: bad}
        repro = ctx.new_example()
        repro.add(_call_text(d))
        reply = ctx.call("ledger", kwargs=d)
        if reply.ok:
            repro.add("# expected ValueError, but it returned normally")
            raise ctx.fail(
                "wrong",
                f"{field}={bad} 时应抛出 ValueError，却正常返回了",
                f"{field}={bad} should raise ValueError, but the call returned",
                expected="ValueError",
                actual="returned " + _show(reply.value)[:200],
            )
        error = reply.error or {}
        if error.get("not_implemented"):
            raise student_error(ctx, reply, "estimate_kv_cache_bytes", LABEL)
        if error.get("type") != "ValueError":
            repro.add(f"# expected ValueError, got {error.get('type')}")
            raise ctx.fail(
                "wrong",
                f"{field}={bad} 时应抛出 ValueError，实际抛出 {error.get('type')}",
                f"{field}={bad} should raise ValueError, got {error.get('type')}",
                expected="ValueError",
                actual=f"{error.get('type')}: {error.get('message')}",
            )

    return run_until_failure(ctx, prop)
