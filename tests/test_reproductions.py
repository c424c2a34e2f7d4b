"""A reproduction of one mistake made here, run both ways.

The corpus's reproductions are run both ways by the corpus modules that grade them
(tests/corpus_cases.py, check_reproductions): each file is graded once in the suite.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ROOT, graded
from tests.repro_runner import run_scripts

pytestmark = pytest.mark.slow

REFERENCE = (ROOT / "reference" / "paged_attention.py").read_text(encoding="utf-8")


LOSES_A_BLOCK_ON_OOM = """        if needed > len(self.free_blocks):
            self.free_blocks.pop(0)  # the mistake: a block lost on the way out of an OOM
"""


def test_a_block_lost_on_oom_costs_the_oom_item_alone(tmp_path: Path) -> None:
    """A prefill that loses a block when it runs out of memory: one mistake, the OOM item's.  The
    ownership item does not blame a later call for the block (issue 20: one mistake, its own
    item); the OOM card draws the call that lost it, and its reproduction hides no exception."""
    check = "        if needed > len(self.free_blocks):\n"
    assert check in REFERENCE
    path = tmp_path / "loses_a_block_on_oom.py"
    path.write_text(REFERENCE.replace(check, LOSES_A_BLOCK_ON_OOM), encoding="utf-8")
    items = {i.id: i for i in graded(path).items}
    assert items["todo2.ownership"].status == "passed", items["todo2.ownership"].failure
    failure = items["todo2.oom_atomic"].failure
    assert items["todo2.oom_atomic"].status == "failed" and failure is not None and failure.picture is not None
    assert failure.picture["step"].startswith("m.allocate_for_prefill(")
    assert "OOM" in failure.message.en and failure.expected != failure.actual  # the call itself: its own OOM went wrong
    repro = failure.repro
    assert "except Exception" not in repro, repro
    code = path.read_text(encoding="utf-8")
    (on_submission, line), (on_reference, _) = run_scripts([f"{code}\n\n{repro}\n", f"{REFERENCE}\n\n{repro}\n"])
    # An assert with the expected and actual value, or the mistake's own error (with no block
    # free, the lost block's pop raises first: the card says so).
    assert on_submission == 1 and line.startswith(("AssertionError", "IndexError")), line
    assert on_reference == 0
