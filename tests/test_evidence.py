"""Points only with evidence, in both directions: time can neither pay for an item nor cost a
correct one.  A submission that is right but paces its calls, or that stalls outside the corner
cases, gets nothing; the reference gets 100 while the machine is loaded."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from grader.config import load_config
from grader.grade import grade_path
from tests.conftest import ROOT

pytestmark = pytest.mark.slow
REFERENCE = (ROOT / "reference" / "paged_attention.py").read_text(encoding="utf-8")


def _short_budget():
    config = load_config()
    return dataclasses.replace(config, limits=dataclasses.replace(config.limits, item_budget_s=4, total_budget_s=120), digest=config.digest + "-short")


def test_a_right_ledger_that_paces_its_calls_earns_nothing(tmp_path: Path) -> None:
    """Right answers, half a second each: the corners (25 calls) finish, the random cases do not reach N in the budget.
    (A sleep costs no CPU: what ends it is the item's wall-clock backstop, 3 times its CPU budget.)"""
    marker = "    layout_shape = [num_layers, 2, num_kv_heads, block_size, head_dim]\n"
    assert marker in REFERENCE
    path = tmp_path / "paced.py"
    path.write_text("import time\n" + REFERENCE.replace(marker, "    time.sleep(0.5)\n" + marker), encoding="utf-8")
    result = grade_path(path, _short_budget(), "cpu", todos={"todo1"})
    for item in result.items:
        assert item.status == "failed" and item.failure is not None and item.failure.kind == "too_slow", item
        assert "random cases" in item.failure.message.en and "of 20" in item.failure.message.en


def test_the_reference_gets_100_on_a_loaded_machine(tmp_path: Path) -> None:
    """Two busy processes per core beside the grading (harder than a `-j 2` batch): the corners
    and N random cases of every item still finish well inside the default budgets."""
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        for _ in range(2 * (os.cpu_count() or 1))
    ]
    try:
        result = grade_path(ROOT / "reference" / "paged_attention.py", load_config(), "cpu")
    finally:
        for hog in hogs:
            os.killpg(hog.pid, signal.SIGKILL)
            hog.wait()
    assert result.score == 100, [(i.id, i.failure and i.failure.message.en) for i in result.items if i.status == "failed"]
    config = load_config()
    for item in result.items:
        if item.status == "passed":
            assert item.random_cases >= config.evidence.minimum(item.id), item
            assert item.seconds < config.limits.item_budget_s, item


def test_evidence_is_counted_once_per_example_and_item() -> None:
    """An example that checks an item's property in several ways counts once for it."""
    from collections import Counter

    from grader.checks.base import ItemContext

    ctx = ItemContext.__new__(ItemContext)
    ctx.counts, ctx.evidence, ctx._open = Counter(), Counter(), Counter()
    ctx.counts.update({"todo2.block_count": 2, "todo2.block_count:multi": 1, "todo2.ownership": 1})
    ctx.close_example()
    assert ctx.evidence == Counter({"todo2.block_count": 1, "todo2.ownership": 1})
    ctx.close_example()  # nothing open: nothing counted
    assert sum(ctx.evidence.values()) == 2
