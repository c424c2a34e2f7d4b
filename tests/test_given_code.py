"""Given code: edits are found on the AST, changed behaviour by running it; both are said, neither pays."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.config import load_config
from grader.given_code import changed
from grader.grade import grade_path
from tests.conftest import ROOT

REFERENCE = (ROOT / "reference" / "paged_attention.py").read_text(encoding="utf-8")
EDITS = {
    "floor_report": ('"utilization": req.seq_len / slots if slots else 0.0', '"utilization": req.seq_len // slots if slots else 0.0'),
    "no_free_check": (
        "        if any(b in free for b in blocks):\n            raise ValueError(\"块表含空闲块 / block table has a block that is already free\")\n",
        "",
    ),
    "no_bounds_check": (
        "        if any(not 0 <= b < self.num_blocks for b in req.block_table):\n            raise ValueError(\"块表含越界块 / block table has an out-of-range block\")\n        ordered",
        "        ordered",
    ),
}


def _edited(name: str) -> str:
    old, new = EDITS[name]
    assert old in REFERENCE, name
    return REFERENCE.replace(old, new)


def test_the_reference_changes_no_given_code() -> None:
    assert changed([REFERENCE]) == []


def test_formatting_comments_docstrings_and_annotations_do_not_count() -> None:
    source = REFERENCE.replace("        self.block_table: list[int] = []", "        self.block_table = []  # filled by the manager")
    source = source.replace('    """Return every block of a finished request to the pool and empty its table."""\n', "")
    assert changed([source]) == []


@pytest.mark.parametrize(
    "name, where",
    [("floor_report", "KVCacheManager.allocation_report"), ("no_free_check", "KVCacheManager.release_request"), ("no_bounds_check", "KVCacheManager.get_physical_cache")],
)
def test_edits_of_given_code_are_named(name: str, where: str) -> None:
    notes = changed([_edited(name)])
    assert len(notes) == 1 and where in notes[0].en and "given code" in notes[0].en and "给定代码" in notes[0].zh


def test_a_given_method_nested_past_the_recursion_limit_is_an_edit_not_a_grader_error() -> None:
    """A chain of 1,500 `+` parses, but walking it recursively does not (red team 13: exit 3)."""
    deep = "        _ = " + " + ".join(["1"] * 1_500) + "\n"
    source = REFERENCE.replace("        blocks = list(req.block_table)\n", deep + "        blocks = list(req.block_table)\n", 1)
    assert source != REFERENCE
    assert [n.en.split(":")[1].split()[0] for n in changed([source])] == ["KVCacheManager.release_request"]


def test_an_added_attribute_in_init_is_an_edit_but_the_last_definition_counts() -> None:
    source = REFERENCE.replace("        self.free_blocks: list[int] = list(range(num_blocks))", "        self.free_blocks: list[int] = list(range(num_blocks))\n        self.owner = {}")
    assert [n.en.split(":")[1].split()[0] for n in changed([source])] == ["KVCacheManager.__init__"]
    assert changed([source, REFERENCE]) == []  # redefined unchanged in a later cell


@pytest.mark.slow
@pytest.mark.parametrize("name, words", [("floor_report", "allocation_report"), ("no_free_check", "already free"), ("no_bounds_check", "outside the pool")])
def test_changed_given_behaviour_is_a_finding_and_costs_no_points(tmp_path: Path, name: str, words: str) -> None:
    path = tmp_path / f"{name}.py"
    path.write_text(_edited(name), encoding="utf-8")
    result = grade_path(path, load_config(), "cpu")
    assert result.score == 100  # the TODOs are right; given code earns and costs nothing
    findings = [g.message.en for g in result.given_code]
    assert any(f.startswith("given code changed") for f in findings), findings
    assert any(f.startswith("given code:") and words in f for f in findings), findings


@pytest.mark.parametrize(
    ("patch", "where"),
    [
        ("KVCacheManager.release_request = lambda self, req: None", "KVCacheManager.release_request"),
        ("setattr(Request, '__init__', lambda self, request_id, prompt_len: None)", "Request.__init__"),
        ("def _patch():\n    KVCacheManager.allocation_report = lambda self, req: {}\n_patch()", "KVCacheManager.allocation_report"),
    ],
)
def test_a_given_method_replaced_from_outside_its_class_is_named(patch: str, where: str) -> None:
    notes = [n.en for n in changed([REFERENCE + "\n" + patch + "\n"])]
    assert notes == [f"given code changed: {where} is replaced from outside the class (graded as submitted; the given behaviour is checked separately)"]


def test_a_todo_method_written_outside_its_class_is_the_students_own_way() -> None:
    patch = "def _prefill(self, req):\n    pass\nKVCacheManager.allocate_for_prefill = _prefill\nm = KVCacheManager(2, 2, 2)\nm.free_blocks = [1, 0]\n"
    assert changed([REFERENCE + "\n" + patch]) == []
