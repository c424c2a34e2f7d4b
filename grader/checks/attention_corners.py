"""TODO 5's corner cases, per item: the feature alone on the domain's edges, then with others;
and the grading's far cases that concern the item (grader/checks/attention_cases.py)."""

from __future__ import annotations

from dataclasses import replace

from grader.checks.attention_cases import GQA, LOW_PRECISION, PAGING, SCALE, Case, far_cases

BASE, INPUTS, CUDA = "todo5.mha_fp32", "todo5.inputs_unchanged", "todo5.cuda"
FEATURE_OF = {"todo5.gqa": GQA, "todo5.paging": PAGING, "todo5.scale_and_stability": SCALE, "todo5.low_precision": LOW_PRECISION}


# Corner cases per item: the feature alone, on the domain's edges; then with others.
_PLAIN = Case()


def corners(item_id: str, device: str = "cpu", seed: int | None = None) -> list[list[Case]]:
    """The item's corner cases, then (with a seed) the grading's far cases that concern it."""
    far = [[case] for case in far_cases(seed, device)] if seed is not None else []
    feature = FEATURE_OF.get(item_id)
    mine = [h for h in far if feature is None or h[0].has(feature)]
    return _fixed(item_id, device) + mine


def _fixed(item_id: str, device: str) -> list[list[Case]]:
    r = replace
    base = [
        [r(_PLAIN, seq_lens=(1,), block_size=1, head_dim=1)],
        # a batch of no sequences: an empty [0, num_heads, head_dim] tensor of the query's dtype
        [r(_PLAIN, seq_lens=(), block_size=3, head_dim=5, num_kv_heads=2)],
        [r(_PLAIN, seq_lens=(3, 2), block_size=2, head_dim=1, num_kv_heads=3)],  # head_dim 1, several heads
        [r(_PLAIN, seq_lens=(7, 3), block_size=3, head_dim=5, index_dtype="int64")],
        [r(_PLAIN, seq_lens=(16, 1, 9), block_size=16, head_dim=64)],
        [r(_PLAIN, seq_lens=(10,), block_size=5, head_dim=3, num_kv_heads=2)],
        [r(_PLAIN, seq_lens=(4, 8), block_size=4, head_dim=16)],
        [r(_PLAIN, seq_lens=(5, 2), block_size=7, head_dim=8, salt=7), r(_PLAIN, seq_lens=(9,), block_size=2, head_dim=4, num_kv_heads=2, salt=9)],
        [r(_PLAIN, seq_lens=(33,), block_size=33, head_dim=128, salt=3), r(_PLAIN, seq_lens=(3, 3), block_size=1, head_dim=2, salt=5)],
        # a scale passed once must not stick: the next call leaves it to its default
        [r(_PLAIN, seq_lens=(6,), block_size=2, scale=3.0, scale_style="keyword", salt=8), r(_PLAIN, seq_lens=(6,), block_size=2, salt=8)],
        # the same shapes with other values: nothing may be cached from the first call
        [r(_PLAIN, seq_lens=(5, 3), block_size=4, salt=21), r(_PLAIN, seq_lens=(5, 3), block_size=4, salt=22)],
        # the same cache tensors written in place between two calls, as decode steps write them
        [r(_PLAIN, seq_lens=(6, 2), block_size=4, salt=41), r(_PLAIN, seq_lens=(6, 2), block_size=4, salt=42, reuse_caches=True)],
        [r(_PLAIN, seq_lens=(5,), block_size=2, dtype="float16", salt=43), r(_PLAIN, seq_lens=(5,), block_size=2, dtype="float16", salt=44, reuse_caches=True)],
        # a long sequence
        [r(_PLAIN, seq_lens=(300, 17), block_size=16, head_dim=8, salt=51)],
    ]
    extra = {
        "todo5.gqa": [
            [r(_PLAIN, seq_lens=(5,), block_size=2, num_kv_heads=1, group=2)],
            [r(_PLAIN, seq_lens=(9, 4), block_size=3, num_kv_heads=2, group=3, head_dim=4)],
            [r(_PLAIN, seq_lens=(8,), block_size=4, num_kv_heads=2, group=4)],
            [r(_PLAIN, seq_lens=(6, 1), block_size=5, num_kv_heads=4, group=8, head_dim=4, index_dtype="int64")],
            [r(_PLAIN, seq_lens=(3,), block_size=1, num_kv_heads=3, group=2, head_dim=6)],
            [r(_PLAIN, seq_lens=(12,), block_size=4, num_kv_heads=2, group=2, dtype="float16")],
            [r(_PLAIN, seq_lens=(7,), block_size=3, num_kv_heads=2, group=2, shuffle=5, padding=2, poison=True)],
        ],
        "todo5.paging": [
            [r(_PLAIN, seq_lens=(1,), block_size=1, shuffle=3, padding=2, poison=True)],
            [r(_PLAIN, seq_lens=(5, 2), block_size=3, shuffle=11, padding=1, poison=True)],
            [r(_PLAIN, seq_lens=(8, 4), block_size=4, shuffle=2, padding=3, poison=True, index_dtype="int64")],
            [r(_PLAIN, seq_lens=(7,), block_size=7, padding=2, poison=True)],
            [r(_PLAIN, seq_lens=(11, 6, 1), block_size=5, shuffle=9, poison=True)],
            [r(_PLAIN, seq_lens=(9, 3), block_size=2, shuffle=4, padding=1, poison=True, dtype="float16")],
            [r(_PLAIN, seq_lens=(6, 10), block_size=4, shuffle=6, padding=2, poison=True, dtype="bfloat16")],
            [r(_PLAIN, seq_lens=(5,), block_size=3, shuffle=8, padding=1, poison=True, num_kv_heads=2, group=2)],
        ],
        "todo5.scale_and_stability": [
            [r(_PLAIN, seq_lens=(6,), block_size=4, scale=0.5, scale_style="keyword")],
            # scale=0.0 is a scale like any other (uniform weights), never "no scale given"
            [r(_PLAIN, seq_lens=(3,), block_size=4, scale=0.0, scale_style="keyword")],
            [r(_PLAIN, seq_lens=(6,), block_size=4, scale=2.0, scale_style="positional")],
            [r(_PLAIN, seq_lens=(9, 2), block_size=3, scale=0.05, scale_style="keyword", head_dim=16)],
            [r(_PLAIN, seq_lens=(12,), block_size=4, boost=100.0, head_dim=32)],
            # short sequences, logits in the hundreds: some heads have only very negative
            # ones (a running max that starts at 0 underflows every exp to 0 there)
            [r(_PLAIN, seq_lens=(1, 2, 1, 1, 3), block_size=2, boost=100.0, head_dim=32, num_kv_heads=2)],
            [r(_PLAIN, seq_lens=(20, 3), block_size=5, boost=30.0, scale=1.0, scale_style="keyword", head_dim=16)],
            [r(_PLAIN, seq_lens=(8,), block_size=2, scale=0.3, scale_style="positional", dtype="float16")],
            [r(_PLAIN, seq_lens=(4,), block_size=4, salt=4), r(_PLAIN, seq_lens=(4,), block_size=4, scale=0.5, scale_style="keyword", salt=4)],
            # a batch of different lengths at scale 0 (a mask of -inf times 0 is NaN) and at a
            # negative scale with logits in the hundreds (the max of the unscaled logits is no max)
            [r(_PLAIN, seq_lens=(1, 6, 3), block_size=2, scale=0.0, scale_style="keyword", head_dim=4)],
            [r(_PLAIN, seq_lens=(2, 7), block_size=3, scale=-1.0, scale_style="positional", boost=100.0, head_dim=16)],
            [r(_PLAIN, seq_lens=(5, 1), block_size=4, scale=-0.3, scale_style="keyword", head_dim=8, shuffle=7, padding=2, poison=True)],
        ],
        "todo5.low_precision": [
            [r(_PLAIN, seq_lens=(7,), block_size=3, dtype="float16")],
            [r(_PLAIN, seq_lens=(7,), block_size=3, dtype="bfloat16")],
            [r(_PLAIN, seq_lens=(40, 5), block_size=8, dtype="float16", head_dim=32)],
            [r(_PLAIN, seq_lens=(40, 5), block_size=8, dtype="bfloat16", head_dim=32)],
            [r(_PLAIN, seq_lens=(5, 3), block_size=2, dtype="float16", shuffle=3, padding=2, poison=True)],
            [r(_PLAIN, seq_lens=(5, 3), block_size=2, dtype="bfloat16", shuffle=3, padding=2, poison=True)],
            [r(_PLAIN, seq_lens=(9,), block_size=4, dtype="bfloat16", num_kv_heads=2, group=2, index_dtype="int64")],
            # hundreds of tokens summing to about 1: a sum carried in bfloat16 stops growing
            [r(_PLAIN, seq_lens=(512,), block_size=1, head_dim=8, dtype="bfloat16", offset=1.0, salt=61)],
            [r(_PLAIN, seq_lens=(400, 37), block_size=2, head_dim=16, dtype="bfloat16", offset=1.0, salt=62)],
            [r(_PLAIN, seq_lens=(300,), block_size=3, head_dim=8, dtype="float16", offset=1.0, salt=63)],
            # past 256 tokens positions round in bfloat16 (a mask built in the query's dtype drops tokens)
            [r(_PLAIN, seq_lens=(333,), block_size=16, head_dim=8, dtype="bfloat16", padding=1, poison=True, salt=3)],
            [r(_PLAIN, seq_lens=(301,), block_size=7, head_dim=8, dtype="bfloat16", scale=1.0, scale_style="keyword", padding=1, poison=True, salt=2)],
            # no sequences: still the query's dtype
            [r(_PLAIN, seq_lens=(), block_size=2, head_dim=4, num_kv_heads=2, group=2, dtype="bfloat16")],
        ],
    }
    if item_id == INPUTS:
        every = [cs for group in extra.values() for cs in group[:2]]
        return [*base[:4], next(h for h in base if len(h) > 1), *every]
    if item_id == "todo5.cuda":
        chosen = [*base[:4], *(cs for group in extra.values() for cs in group[:2])]
        return [[_on(c, device) for c in cs] for cs in chosen]
    return base if item_id == BASE else extra[item_id]


def _on(case: Case, device: str) -> Case:
    return replace(case, device=device)
