"""The grader never fails on a submission's state: whatever an allocator leaves (an empty free
list, fewer blocks than the pool, duplicate or huge ids, a block the given code keeps back, a
block lost by a rollback), the strategies built from it stay valid and every item gets a
verdict of its own, never "a bug in the grader" (exit 3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.config import load_config
from grader.grade import grade_path
from grader.results import GRADER_ERROR
from tests.conftest import CORPUS, ROOT

pytestmark = pytest.mark.slow

SOURCE = (ROOT / "reference" / "paged_attention.py").read_text(encoding="utf-8")
FREE_LIST = "        self.free_blocks: list[int] = list(range(num_blocks))\n"
DECODE = "            req.block_table.append(self.free_blocks.pop(0))\n"

# What the given constructor's free list becomes: each an odd state the items start from.
ODD_FREE_LISTS = {
    "empty": "[]",
    "half_the_pool": "list(range(num_blocks // 2))",
    "duplicate_ids": "list(range(num_blocks)) + [0]",
    "huge_ids": "[10**18 + b for b in range(num_blocks)]",
    "past_64_bits": "[2**70 + b for b in range(num_blocks)]",
    "negative_ids": "[-1 - b for b in range(num_blocks)]",
    "reserved_block_zero": "list(range(1, num_blocks))",
}
# What a decode leaves behind after its call: each an odd state the next steps start from.
ODD_DECODES = {
    "frees_a_held_block": "            req.block_table.append(self.free_blocks.pop(0))\n            self.free_blocks.append(req.block_table.pop(0))\n",
    "empties_the_free_list": "            req.block_table.append(self.free_blocks.pop(0))\n            self.free_blocks.clear()\n",
    "free_list_as_tuple": "            req.block_table.append(self.free_blocks.pop(0))\n            self.free_blocks = tuple(self.free_blocks)\n",
}


def _no_grader_error(path: Path) -> None:
    result = grade_path(path, load_config(), "cpu", todos={"todo2", "todo3"}, alone=True)
    errors = [(i.id, i.failure.message.en) for i in result.items if i.failure is not None and i.failure.kind == GRADER_ERROR]
    assert not errors and result.error is None, errors
    assert not any(g.kind == GRADER_ERROR for g in result.given_code)
    assert all(i.status in ("passed", "failed") for i in result.items if i.todo in ("todo2", "todo3"))


@pytest.mark.parametrize("name", sorted(ODD_FREE_LISTS))
def test_odd_free_lists_from_the_constructor(name: str, tmp_path: Path) -> None:
    assert FREE_LIST in SOURCE
    path = tmp_path / f"{name}.py"
    path.write_text(SOURCE.replace(FREE_LIST, f"        self.free_blocks: list[int] = {ODD_FREE_LISTS[name]}\n"), encoding="utf-8")
    _no_grader_error(path)


@pytest.mark.parametrize("name", sorted(ODD_DECODES))
def test_odd_states_left_by_a_decode(name: str, tmp_path: Path) -> None:
    assert DECODE in SOURCE
    path = tmp_path / f"{name}.py"
    path.write_text(SOURCE.replace(DECODE, ODD_DECODES[name]), encoding="utf-8")
    _no_grader_error(path)


@pytest.mark.parametrize("path", [CORPUS / "buggy" / "todo3_oom_rollback_pops_unappended.py", CORPUS / "given" / "given_block_zero_reserved.py"],
                         ids=lambda p: p.stem)
def test_the_two_submissions_that_made_hypothesis_raise(path: Path) -> None:
    _no_grader_error(path)
