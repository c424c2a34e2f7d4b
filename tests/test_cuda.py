"""Paged attention on CUDA, where a GPU is present; skipped cleanly elsewhere."""

from __future__ import annotations

import pytest
import torch

from grader.config import load_config
from grader.grade import grade_path
from tests.conftest import ROOT, SOLUTION_NB, graded

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_cuda_item_is_not_run_and_not_counted_without_a_gpu() -> None:
    result = graded(SOLUTION_NB)  # graded with device="cpu"
    item = next(i for i in result.items if i.id == "todo5.cuda")
    assert item.status == "not_run" and result.score == 100


@cuda
def test_reference_passes_on_cuda() -> None:
    result = grade_path(SOLUTION_NB, load_config(), "cuda")
    item = next(i for i in result.items if i.id == "todo5.cuda")
    assert item.status == "passed", item.failure
    assert result.score == 100


@cuda
def test_wrong_dtype_fails_on_cuda_too() -> None:
    result = grade_path(ROOT / "tests" / "corpus" / "buggy" / "todo5_returns_float32.py", load_config(), "cuda")
    item = next(i for i in result.items if i.id == "todo5.cuda")
    assert item.status == "failed"
