"""TODO 5's base counterparts (grader/checks/attention_evidence.py): the call in float32 with a
flat softmax, its layout kept; where a dropped token hid, it shows."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from grader.checks.attention_cases import GQA, LOW_PRECISION, PAGING, SCALE, Case, make_inputs
from grader.checks.attention_evidence import counterpart
from grader.checks.dense import dense_attention, tolerance


def _last_token_shows(case: Case) -> bool:
    """Whether leaving out each sequence's last token moves the result past the case's tolerance."""
    values = {name: array.values() for name, array in make_inputs(case).items()}
    reference = dense_attention(values, case.scale)
    dropped = dense_attention(values, case.scale, length_of=lambda i, n: max(1, n - 1))
    return float(np.abs(dropped - reference).max()) > tolerance(case.dtype, case.scale, values, reference)


def test_a_counterpart_keeps_the_layout_and_flattens_the_softmax() -> None:
    case = Case(seq_lens=(20, 3), block_size=5, head_dim=16, num_kv_heads=2, group=4, shuffle=9, padding=2, poison=True,
                dtype="bfloat16", scale=2.0, scale_style="positional", boost=30.0)
    assert case.has(GQA) and case.has(PAGING) and case.has(SCALE) and case.has(LOW_PRECISION)
    twin = counterpart(case)
    assert (twin.dtype, twin.boost, twin.scale, twin.scale_style) == ("float32", 1.0, 1 / math.sqrt(16), "positional")
    assert (twin.seq_lens, twin.block_size, twin.head_dim, twin.num_kv_heads, twin.group, twin.tables) == \
        (case.seq_lens, case.block_size, case.head_dim, case.num_kv_heads, case.group, case.tables)
    assert counterpart(replace(case, scale=None, scale_style="default")).scale is None  # no scale passed: none passed


def test_a_dropped_last_token_hidden_by_a_peaked_softmax_or_a_loose_dtype_shows_in_the_counterpart() -> None:
    # Calls that paid feature items to a submission dropping the last token (seed 1, before counterparts).
    hidden = [
        Case(seq_lens=(12,), block_size=4, head_dim=32, boost=100.0),
        Case(seq_lens=(20, 3), block_size=5, head_dim=16, scale=1.0, scale_style="keyword", boost=30.0),
        Case(seq_lens=(4096, 4096), block_size=4096, head_dim=8, group=4, scale=-1.0, scale_style="keyword", dtype="float16"),
    ]
    for case in hidden:
        assert not _last_token_shows(case), case
        assert _last_token_shows(counterpart(case)), case
