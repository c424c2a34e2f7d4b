"""TODO 5: decode-time paged attention against a plain dense reference in float64.

Inputs are generated here from a seed (so the reproduction can regenerate them exactly),
sent to the sandbox, and the student's output is compared with dense attention computed
in float64 over the first seq_len tokens of each sequence.  Tolerances follow what a
correct computation in the input dtype gets wrong against float64, times a margin, with a
floor per dtype (the approach of PyTorch's own SDPA tests).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from hypothesis import given, seed
from hypothesis import strategies as st

from grader.checks.arrays import Array, decode, from_float32, round_to
from grader.checks.base import ItemContext, hypothesis_settings, run_until_failure, student_error
from grader.results import Failure

LABEL = "TODO 5"
TOLERANCE_FLOOR = {"float32": 2e-5, "float16": 2e-3, "bfloat16": 1.6e-2}
TOLERANCE_MARGIN = 4.0


@dataclass(frozen=True)
class Case:
    seed: int
    dtype: str
    num_heads: int
    num_kv_heads: int
    head_dim: int
    block_size: int
    num_blocks: int
    seq_lens: tuple[int, ...]
    tables: tuple[tuple[int, ...], ...]
    poisoned: tuple[int, ...] = ()  # whole blocks no sequence reads, filled with NaN
    poison_tails: bool = False  # unused slots of each last block, filled with NaN
    scale: float | None = None
    boost: float = 1.0  # query magnitude: large values give large logits
    device: str = "cpu"
    notes: tuple[str, ...] = field(default=())


@st.composite
def cases(
    draw: st.DrawFn,
    *,
    dtypes: tuple[str, ...] = ("float32",),
    ratios: tuple[int, ...] = (1,),
    paging: bool = False,
    custom_scale: bool = False,
    boost: bool = False,
    device: str = "cpu",
) -> Case:
    dtype = draw(st.sampled_from(dtypes), label="dtype")
    num_kv_heads = draw(st.sampled_from([1, 2, 4]), label="num_kv_heads")
    ratio = draw(st.sampled_from(ratios), label="gqa ratio")
    head_dim = draw(st.sampled_from([4, 8, 16, 32]), label="head_dim")
    block_size = draw(st.sampled_from([1, 2, 4, 8, 16] if paging else [2, 4, 8, 16]), label="block_size")
    num_seqs = draw(st.integers(1, 4), label="num_seqs")
    if paging:
        lengths = st.one_of(
            st.just(1),
            st.integers(1, 6).map(lambda k: k * block_size),
            st.integers(1, 64),
            st.integers(65, 200),
        )
    else:
        lengths = st.integers(1, 48)
    seq_lens = tuple(draw(st.lists(lengths, min_size=num_seqs, max_size=num_seqs), label="seq_lens"))
    needs = [math.ceil(n / block_size) for n in seq_lens]
    spare = draw(st.integers(1, 3), label="spare blocks")
    num_blocks = sum(needs) + spare
    width = max(needs) + draw(st.integers(0, 2), label="padding columns")
    if paging:
        order = draw(st.permutations(range(num_blocks)), label="block order")
    else:
        order = list(range(num_blocks))
    tables, start = [], 0
    spares = order[sum(needs) :]
    for need in needs:
        row = list(order[start : start + need])
        start += need
        # Entries past what a sequence needs are valid ids that must not matter.
        row += [spares[(len(row) + i) % len(spares)] for i in range(width - need)]
        tables.append(tuple(row))
    scale = draw(st.sampled_from([0.05, 0.5, 2.0]), label="scale") if custom_scale else None
    return Case(
        seed=draw(st.integers(0, 2**31 - 1), label="seed"),
        dtype=dtype,
        num_heads=num_kv_heads * ratio,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        block_size=block_size,
        num_blocks=num_blocks,
        seq_lens=seq_lens,
        tables=tuple(tables),
        poisoned=tuple(spares) if paging else (),
        poison_tails=paging,
        scale=scale,
        boost=draw(st.sampled_from([30.0, 100.0]), label="boost") if boost else 1.0,
        device=device,
    )


def make_inputs(case: Case) -> dict[str, Array]:
    """The case's inputs, exactly as the reproduction's code makes them with numpy and torch."""
    rng = np.random.default_rng(case.seed)
    num_seqs = len(case.seq_lens)
    query = rng.standard_normal((num_seqs, case.num_heads, case.head_dim), dtype=np.float32) * case.boost
    shape = (case.num_blocks, case.block_size, case.num_kv_heads, case.head_dim)
    key_cache = rng.standard_normal(shape, dtype=np.float32)
    value_cache = rng.standard_normal(shape, dtype=np.float32)
    for cache in (key_cache, value_cache):
        for block in case.poisoned:
            cache[block] = np.nan
        if case.poison_tails:
            for length, row in zip(case.seq_lens, case.tables, strict=True):
                if length % case.block_size:
                    cache[row[math.ceil(length / case.block_size) - 1], length % case.block_size :] = np.nan
    return {
        "query": from_float32(query, case.dtype),
        "key_cache": from_float32(key_cache, case.dtype),
        "value_cache": from_float32(value_cache, case.dtype),
        "block_tables": Array(np.array(case.tables, dtype=np.int32), "int32"),
        "seq_lens": Array(np.array(case.seq_lens, dtype=np.int32), "int32"),
    }


def _arithmetic(kind: str) -> tuple[type, Callable[[np.ndarray], np.ndarray]]:
    """The numpy type to compute in and the rounding after each step (bfloat16 is emulated)."""
    if kind == "bfloat16":
        return np.float32, lambda x: round_to(x, "bfloat16").astype(np.float32)
    return {"float64": np.float64, "float32": np.float32, "float16": np.float16}[kind], lambda x: x


def dense_attention(
    values: dict[str, np.ndarray],
    scale: float | None,
    arithmetic: str = "float64",
    *,
    kv_head: Callable[[int, int, int], int] | None = None,
    length_of: Callable[[int, int], int] | None = None,
    sequential: bool = False,
) -> np.ndarray:
    """softmax(scale * q K^T) V per sequence over its first seq_len tokens, as float64.

    `arithmetic` names the precision every step is computed in; `sequential` sums token by
    token in it (unnormalised weights, one division at the end), the least accurate correct
    way there is. `kv_head` and `length_of` exist for diagnosis only: they compute what
    common mistakes compute.
    """
    query, key_cache, value_cache = values["query"], values["key_cache"], values["value_cache"]
    num_seqs, num_heads, head_dim = query.shape
    block_size, num_kv_heads = key_cache.shape[1], key_cache.shape[2]
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    kv_head = kv_head or (lambda h, heads, kv_heads: h // (heads // kv_heads))
    heads = np.array([kv_head(h, num_heads, num_kv_heads) for h in range(num_heads)])
    work, step = _arithmetic(arithmetic)
    out = np.empty((num_seqs, num_heads, head_dim))
    for i in range(num_seqs):
        length = int(values["seq_lens"][i])
        if length_of is not None:
            length = length_of(i, length)
        positions = np.arange(length)
        blocks, slots = values["block_tables"][i, positions // block_size], positions % block_size
        keys = key_cache[blocks, slots][:, heads].astype(work)  # [length, heads, d]
        vals = value_cache[blocks, slots][:, heads].astype(work)
        if sequential:
            products = step(query[i].astype(work)[None] * keys)  # [length, heads, d]
            scores = step(step(products.sum(axis=2).T) * work(scale))  # [heads, length]
            weights = step(np.exp(step(scores - scores.max(axis=1, keepdims=True))))
            total, acc = np.zeros(num_heads, dtype=work), np.zeros((num_heads, head_dim), dtype=work)
            for j in range(length):
                total = step(total + weights[:, j])
                acc = step(acc + step(weights[:, j, None] * vals[j]))
            out[i] = step(acc / total[:, None])
            continue
        scores = step(np.einsum("hd,nhd->hn", query[i].astype(work), keys) * work(scale))
        scores = scores - scores.max(axis=1, keepdims=True)
        weights = step(np.exp(scores))
        weights = step(weights / step(weights.sum(axis=1, keepdims=True)))
        out[i] = step(np.einsum("hn,nhd->hd", weights, vals))
    return out


def diagnose(case: Case, inputs: dict[str, np.ndarray], out: np.ndarray, tol: float) -> tuple[str, str] | None:
    """Name the common mistakes whose result the output matches, if any (several can fit one case)."""
    head_dim = case.head_dim
    default = 1.0 / math.sqrt(head_dim)
    width = len(case.tables[0]) * case.block_size
    candidates: list[tuple[str, str, Callable[[], np.ndarray]]] = [
        ("看起来没有乘 scale", "it looks like the scores are not scaled", lambda: dense_attention(inputs, 1.0)),
        ("看起来 scale 用成了 1/head_dim", "it looks like scale is 1/head_dim", lambda: dense_attention(inputs, 1.0 / head_dim)),
        (
            "看起来忽略了传入的 scale 参数",
            "it looks like the scale argument is ignored",
            lambda: dense_attention(inputs, default),
        ),
        (
            "看起来 query 头映射成了 h % num_kv_heads（应为 h // (num_heads // num_kv_heads)，即 repeat_interleave）",
            "it looks like query head h reads kv head h % num_kv_heads (it should be h // (num_heads // num_kv_heads), as repeat_interleave gives)",
            lambda: dense_attention(inputs, case.scale, kv_head=lambda h, heads, kv_heads: h % kv_heads),
        ),
        (
            "看起来少读了最后一个 token（只用了 seq_len - 1 个）",
            "it looks like the last token is left out (seq_len - 1 tokens used)",
            lambda: dense_attention(inputs, case.scale, length_of=lambda i, n: max(1, n - 1)),
        ),
        (
            "看起来读了块表中的所有位置，没有按 seq_len 截断",
            "it looks like every slot of every table entry is read, ignoring seq_len",
            lambda: dense_attention(inputs, case.scale, length_of=lambda i, n: width),
        ),
        (
            "看起来所有序列都用了第一个序列的长度",
            "it looks like every sequence uses the first sequence's length",
            lambda: dense_attention(inputs, case.scale, length_of=lambda i, n: min(int(inputs["seq_lens"][0]), width)),
        ),
    ]
    matches: list[tuple[str, str]] = []
    for zh, en, compute in candidates:
        if zh.startswith("看起来忽略了传入的 scale") and case.scale is None:
            continue
        try:
            variant = compute()
        except (IndexError, RuntimeError):
            continue
        if np.isfinite(variant).all() and float(np.abs(out - variant).max()) <= tol:
            matches.append((zh, en))
    if not matches:
        return None
    return "；或".join(zh for zh, _ in matches), "; or ".join(en for _, en in matches)


def tolerance(case: Case, values: dict[str, np.ndarray], reference: np.ndarray) -> float:
    """What plain, correct computations in the case's dtype miss by, times a margin, with a floor.

    Baselines: float32 arithmetic rounded to the dtype (what kernels do), and arithmetic done
    in the dtype itself, batched and token by token (what a student who never upcasts does);
    all are correct.
    """
    baselines = [round_to(dense_attention(values, case.scale, "float32"), case.dtype)]
    if case.dtype != "float32":
        baselines.append(dense_attention(values, case.scale, case.dtype))
        baselines.append(dense_attention(values, case.scale, case.dtype, sequential=True))
    error = max(float(np.abs(b - reference).max()) for b in baselines)
    return max(TOLERANCE_FLOOR[case.dtype], TOLERANCE_MARGIN * error, logit_rounding_bound(values, case.scale))


def logit_rounding_bound(values: dict[str, np.ndarray], scale: float | None) -> float:
    """First-order effect on the output of rounding every logit to float32.

    With logits in the hundreds, float32 alone moves each logit by |logit| * 2^-24, and the
    softmax passes that on times the spread of V.  Which correct order of summation a
    submission uses decides where in that band it lands, so the band is tolerated.
    """
    query, key_cache, value_cache = values["query"], values["key_cache"], values["value_cache"]
    num_heads, head_dim = query.shape[1], query.shape[2]
    block_size, num_kv_heads = key_cache.shape[1], key_cache.shape[2]
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    heads = np.arange(num_heads) // (num_heads // num_kv_heads)
    bound = 0.0
    for i in range(query.shape[0]):
        positions = np.arange(int(values["seq_lens"][i]))
        blocks, slots = values["block_tables"][i, positions // block_size], positions % block_size
        logits = np.einsum("hd,nhd->hn", query[i], key_cache[blocks, slots][:, heads]) * scale
        spread = np.abs(value_cache[blocks, slots]).max()
        bound = max(bound, 2 * 2.0**-24 * float(np.abs(logits).max()) * float(spread))
    return bound


def digest(array: Array) -> str:
    return hashlib.sha256(np.ascontiguousarray(array.raw).tobytes()).hexdigest()


def repro_text(case: Case) -> list[str]:
    dt = f"torch.{case.dtype}"
    shape = f"({case.num_blocks}, {case.block_size}, {case.num_kv_heads}, {case.head_dim})"
    lines = [
        "import numpy as np",
        f"rng = np.random.default_rng({case.seed})",
        f"query = torch.from_numpy(rng.standard_normal(({len(case.seq_lens)}, {case.num_heads}, {case.head_dim}), dtype=np.float32) * {case.boost}).to({dt})",
        f"key_cache = torch.from_numpy(rng.standard_normal({shape}, dtype=np.float32)).to({dt})",
        f"value_cache = torch.from_numpy(rng.standard_normal({shape}, dtype=np.float32)).to({dt})",
        f"block_tables = torch.tensor({[list(r) for r in case.tables]}, dtype=torch.int32)",
        f"seq_lens = torch.tensor({list(case.seq_lens)}, dtype=torch.int32)",
    ]
    if case.poisoned:
        lines.append("for cache in (key_cache, value_cache):  # blocks no sequence reads")
        lines.append(f"    cache[{list(case.poisoned)}] = float('nan')")
    if case.poison_tails:
        lines.append(f"for length, row in zip({list(case.seq_lens)}, block_tables.tolist()):  # unused tail slots")
        lines.append(f"    if length % {case.block_size}:")
        lines.append("        for cache in (key_cache, value_cache):")
        lines.append(f"            cache[row[(length - 1) // {case.block_size}], length % {case.block_size}:] = float('nan')")
    if case.device != "cpu":
        lines.append(f"query, key_cache, value_cache, block_tables, seq_lens = (t.to('{case.device}') for t in (query, key_cache, value_cache, block_tables, seq_lens))")
    scale = "" if case.scale is None else f", scale={case.scale}"
    lines.append(f"out = paged_attention(query, key_cache, value_cache, block_tables, seq_lens{scale})")
    lines.append("# dense float64 reference for sequence i, query head h:")
    lines.append("#   K, V = first seq_lens[i] rows of key_cache/value_cache read through block_tables[i], kv head h // (num_heads // num_kv_heads)")
    lines.append(f"#   expected[i, h] = softmax({'scale' if case.scale else '1/sqrt(head_dim)'} * K @ q[i, h]) @ V")
    return lines


def _where(case: Case, index: tuple[int, ...]) -> str:
    i, h = index[0], index[1]
    return f"seq {i} (seq_len={case.seq_lens[i]}), head {h} (kv head {h // (case.num_heads // case.num_kv_heads)})"


def check_attention(ctx: ItemContext, strategy: st.SearchStrategy[Case], *, mutation_only: bool = False) -> Failure | None:
    @seed(ctx.config.hypothesis.seed)
    @hypothesis_settings(ctx.config, ctx.config.hypothesis.attention_examples)
    @given(strategy)
    def prop(case: Case) -> None:
        repro = ctx.new_example()
        for line in repro_text(case):
            repro.add(line)
        inputs = make_inputs(case)
        reply = ctx.call("attention", device=case.device, scale=case.scale, **{name: a.payload() for name, a in inputs.items()})
        if not reply.ok:
            raise student_error(ctx, reply, "paged_attention(...)", LABEL)
        value = reply.value if isinstance(reply.value, dict) else {}
        if mutation_only:
            changed = [n for n, a in inputs.items() if (value.get("input_digests") or {}).get(n) != digest(a)]
            if changed:
                repro.add(f"# after the call these inputs differ from before: {changed}")
                raise ctx.fail("wrong", f"paged_attention 修改了输入：{changed}", f"paged_attention modified its inputs: {changed}", expected="inputs unchanged", actual=f"changed: {changed}")
            return
        try:
            answer = decode(value.get("output"))
        except (TypeError, ValueError):
            raise ctx.fail("wrong", "paged_attention 应返回 torch.Tensor", "paged_attention should return a torch.Tensor", actual=str(value)[:200]) from None
        want_shape = list(inputs["query"].shape)
        if list(answer.shape) != want_shape:
            repro.add(f"out.shape  # expected {tuple(want_shape)}, got {tuple(answer.shape)}")
            raise ctx.fail("wrong", f"输出形状应为 {want_shape}，实际 {list(answer.shape)}", f"output shape should be {want_shape}, got {list(answer.shape)}", expected=str(want_shape), actual=str(list(answer.shape)))
        out_device = (value.get("output") or {}).get("device")
        if answer.dtype != case.dtype or out_device != case.device:
            repro.add(f"out.dtype, out.device  # expected torch.{case.dtype} on {case.device}, got torch.{answer.dtype} on {out_device}")
            raise ctx.fail(
                "wrong",
                f"输出应与 query 同 dtype、同设备（{case.dtype}, {case.device}），实际 {answer.dtype}, {out_device}",
                f"the output should have the query's dtype and device ({case.dtype}, {case.device}); got {answer.dtype}, {out_device}",
                expected=f"{case.dtype} on {case.device}",
                actual=f"{answer.dtype} on {out_device}",
            )
        out = answer.values()
        values = {name: a.values() for name, a in inputs.items()}
        if np.isnan(out).any():
            index = tuple(int(x) for x in np.argwhere(np.isnan(out))[0])
            repro.add(f"out[{index[0]}, {index[1]}]  # contains NaN")
            raise ctx.fail(
                "wrong",
                f"输出含 NaN（{_where(case, index)}）：读到了不该读的位置（多余表项或尾块，它们填的是 NaN），或 softmax 溢出",
                f"the output has NaN ({_where(case, index)}): a slot that must not be read (a padding entry or block tail, filled with NaN) leaked in, or the softmax overflowed",
                expected="finite values",
                actual="NaN",
            )
        reference = dense_attention(values, case.scale)
        tol = tolerance(case, values, reference)
        diff = np.abs(out - reference)
        worst = float(diff.max())
        if worst > tol:
            index = tuple(int(x) for x in np.unravel_index(int(np.argmax(diff)), diff.shape))
            repro.add(f"out[{index[0]}, {index[1]}]  # max |out - expected| = {worst:.3g}, tolerance {tol:.3g}")
            hint = diagnose(case, values, out, tol)
            hint_zh, hint_en = (f"。提示：{hint[0]}", f". Hint: {hint[1]}") if hint else ("", "")
            raise ctx.fail(
                "wrong",
                f"与稠密注意力不一致：{_where(case, index)} 最大误差 {worst:.3g}，容差 {tol:.3g}（{case.dtype}）{hint_zh}",
                f"differs from dense attention at {_where(case, index)}: max error {worst:.3g}, tolerance {tol:.3g} ({case.dtype}){hint_en}",
                expected=f"{reference[index[0], index[1], :4].tolist()} ...",
                actual=f"{out[index[0], index[1], :4].tolist()} ...",
            )

    return run_until_failure(ctx, prop)


def check_mha_fp32(ctx: ItemContext) -> Failure | None:
    return check_attention(ctx, cases())


def check_gqa(ctx: ItemContext) -> Failure | None:
    return check_attention(ctx, cases(ratios=(2, 3, 4, 8)))


def check_paging(ctx: ItemContext) -> Failure | None:
    return check_attention(ctx, cases(ratios=(1, 2), paging=True))


def check_scale_and_stability(ctx: ItemContext) -> Failure | None:
    return check_attention(ctx, cases(custom_scale=True, boost=True))


def check_low_precision(ctx: ItemContext) -> Failure | None:
    return check_attention(ctx, cases(dtypes=("float16", "bfloat16"), ratios=(1, 2, 4)))


def check_inputs_unchanged(ctx: ItemContext) -> Failure | None:
    return check_attention(ctx, cases(dtypes=("float32", "float16"), ratios=(1, 2), paging=True, custom_scale=True), mutation_only=True)


def check_cuda(ctx: ItemContext) -> Failure | None:
    return check_attention(ctx, cases(dtypes=("float32", "float16", "bfloat16"), ratios=(1, 2, 4), paging=True, device="cuda"))
