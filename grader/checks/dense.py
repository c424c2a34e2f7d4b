"""The plain references attention is judged by, in numpy (the judge never imports torch).

Inputs are exact in every dtype: `fill` makes multiples of 1/64 in [-2, 2] from an integer
hash, so the reproduction can make the same tensors with three lines of torch and the judge
knows every value without receiving it.  `dense_attention` computes softmax(scale q K^T) V
over the first seq_len tokens of each sequence, in float64 or in the arithmetic of another
dtype; the tolerance is what plain correct computations in the input's dtype miss by, times
a margin, with a floor per dtype (the approach of PyTorch's own SDPA tests).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from grader.checks.arrays import round_to

TOLERANCE_FLOOR = {"float32": 2e-5, "float16": 2e-3, "bfloat16": 1.6e-2}
TOLERANCE_MARGIN = 4.0


def fill(shape: tuple[int, ...], salt: int) -> np.ndarray:
    """Values exact in float32, float16 and bfloat16: multiples of 1/64 in [-2, 2].

    An integer hash of (position, salt), the same in numpy and torch (every product stays
    below 2**63); different salts give unrelated values.
    """
    a = (np.arange(math.prod(shape), dtype=np.int64) + salt * 1000003) % 2**31
    x = (a * 1103515245 + 12345) % 2**31
    x = ((x ^ (x >> 11)) * 1664525 + 1013904223) % 2**31
    return (((x >> 7) % 257 - 128).astype(np.float32) / np.float32(64)).reshape(shape)


FILL_SOURCE = (
    "def fill(shape, salt):",
    "    a = (torch.arange(math.prod(shape)) + salt * 1000003) % 2**31",
    "    x = (a * 1103515245 + 12345) % 2**31",
    "    x = ((x ^ (x >> 11)) * 1664525 + 1013904223) % 2**31",
    "    return ((x >> 7) % 257 - 128).reshape(shape) / 64",
)
# The reproduction's expected value: plain attention over one sequence's keys and values,
# given in logical order (the reproduction keeps them), so it never reads a block table.
ATTEND_SOURCE = (
    "def attend(q, k, v, scale):",
    "    group = q.shape[0] // k.shape[1]",
    "    return torch.stack([torch.softmax(scale * (k[:, h // group] @ q[h]), 0) @ v[:, h // group] for h in range(q.shape[0])])",
)


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


def tolerance(dtype: str, scale: float | None, values: dict[str, np.ndarray], reference: np.ndarray) -> float:
    """What plain, correct computations in the case's dtype miss by, times a margin, with a floor.

    Baselines: float32 arithmetic rounded to the dtype (what kernels do), and arithmetic done
    in the dtype itself, one rounding per operation (what a student who never upcasts does).
    Sums carried token by token or block by block in the dtype itself are not among them: over
    a few hundred tokens a bfloat16 sum stops growing (its step is larger than what is added),
    which is a mistake, not a rounding.
    """
    baselines = [round_to(dense_attention(values, scale, "float32"), dtype)]
    if dtype != "float32":
        baselines.append(dense_attention(values, scale, dtype))
    error = max(float(np.abs(b - reference).max()) for b in baselines)
    return max(TOLERANCE_FLOOR[dtype], TOLERANCE_MARGIN * error, logit_rounding_bound(values, scale))


def logit_rounding_bound(values: dict[str, np.ndarray], scale: float | None) -> float:
    """First-order effect on the output of rounding every logit to float32.

    With logits in the hundreds, float32 alone moves each logit by |logit| * 2^-24; a dot
    product summed in another order than the baselines' moves it by up to about sqrt(head_dim)
    * |q * k|_2 * 2^-24 more (a correct float32 solution summing head_dim in reverse missed a
    case by 1.04 times the old bound, which had the first part only).  The softmax passes that
    on times the spread of V.  Which correct order of summation a submission uses decides where
    in that band it lands, so the band is tolerated.
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
        keys, q = key_cache[blocks, slots][:, heads], query[i]
        logits = np.abs(np.einsum("hd,nhd->hn", q, keys))
        # A dot product summed in another order misses by about sqrt(head_dim) * |q * k|_2 roundings
        # (the terms' partial sums), which can be far more than the logit itself when they cancel.
        terms = np.sqrt(np.einsum("hd,nhd->hn", q * q, keys * keys))
        spread = np.abs(value_cache[blocks, slots]).max()
        bound = max(bound, 2 * 2.0**-24 * abs(scale) * float((logits + math.sqrt(head_dim) * terms).max()) * float(spread))
    return bound


def diagnose(case: Any, inputs: dict[str, np.ndarray], out: np.ndarray, tol: float) -> tuple[str, str] | None:
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


