"""Rubric item id -> the check that grades it.  Each check returns None or the smallest failure."""

from __future__ import annotations

from collections.abc import Callable

from grader.checks import allocation, attention, ledger, reconstruct
from grader.checks.base import ItemContext
from grader.results import Failure

Check = Callable[[ItemContext], "Failure | None"]

CHECKS: dict[str, Check] = {
    "todo1.per_token": ledger.check_per_token,
    "todo1.per_block_and_total": ledger.check_per_block_and_total,
    **{item_id: allocation.check_machine for item_id in allocation.NEEDS},
    "todo4.table_order": reconstruct.check_table_order,
    "todo4.truncate": reconstruct.check_truncate,
    "todo5.mha_fp32": attention.check_mha_fp32,
    "todo5.gqa": attention.check_gqa,
    "todo5.paging": attention.check_paging,
    "todo5.scale_and_stability": attention.check_scale_and_stability,
    "todo5.low_precision": attention.check_low_precision,
    "todo5.inputs_unchanged": attention.check_inputs_unchanged,
    "todo5.cuda": attention.check_cuda,
}

# The names a TODO's items need the submission to define.
REQUIRED_NAMES: dict[str, tuple[str, ...]] = {
    "todo1": ("estimate_kv_cache_bytes",),
    "todo2": ("Request", "KVCacheManager"),
    "todo3": ("Request", "KVCacheManager"),
    "todo4": ("Request", "KVCacheManager"),
    "todo5": ("paged_attention",),
}
