"""TODO 1's one-mistake-one-item rule (grader/checks/ledger.py, `_derived`): the per-block and total
figures are right where they follow from the submission's own per-token and per-block figures,
negative ones (an int64 product that wrapped) included, but never from a 0 (a stub's)."""

from __future__ import annotations

from grader.checks.ledger import _derived, _problem

DIMS = {"num_blocks": 3, "block_size": 5, "num_layers": 7, "num_kv_heads": 11, "head_dim": 13, "dtype_bytes": 2}
WANT = {"kv_bytes_per_token": 4004, "kv_bytes_per_block": 20020, "total_cache_bytes": 60060}
FIELDS = ("kv_bytes_per_block", "total_cache_bytes")


def _verdict(per_token: int, per_block: int, total: int) -> object:
    got = {"kv_bytes_per_token": per_token, "kv_bytes_per_block": per_block, "total_cache_bytes": total}
    return _problem(got, WANT, FIELDS, _derived(got, WANT, DIMS))


def test_figures_from_the_submissions_own_wrong_figure_are_right() -> None:
    assert _verdict(4000, 20000, 60000) is None
    assert _verdict(-6014632636601934448, -6014632636601934448 * 5, -6014632636601934448 * 15) is None  # wrapped, negative


def test_a_zero_figure_pays_nothing_and_other_figures_are_wrong() -> None:
    assert _verdict(0, 0, 0) is not None  # a stub's zeros
    assert _verdict(4000, 20020 + 1, 60063) is not None  # neither right nor from its own figure
