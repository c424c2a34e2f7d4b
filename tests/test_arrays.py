"""The judge's numpy tensors agree bit for bit with torch, so reproductions regenerate the inputs."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from grader.checks.arrays import Array, decode, from_float32, round_to
from grader.checks.attention_cases import Case, make_inputs, preamble, setup_lines
from grader.checks.dense import fill
from tests.conftest import ROOT


def _awkward_float32() -> np.ndarray:
    rng = np.random.default_rng(0)
    values = np.concatenate(
        [
            rng.standard_normal(4096).astype(np.float32) * 1000,
            rng.standard_normal(4096).astype(np.float32) * 1e-6,
            np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 65504.0, 65520.0, 1e-8, 3.4e38], dtype=np.float32),
            # exact ties between two bfloat16 values: round half to even
            (np.arange(1, 200, dtype=np.uint32) << 16 | 0x8000).view(np.float32),
        ]
    )
    return values.astype(np.float32)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_conversion_matches_torch_bit_for_bit(dtype: str) -> None:
    values = _awkward_float32()
    ours = from_float32(values, dtype)
    theirs = torch.from_numpy(values).to(getattr(torch, dtype))
    theirs_bits = theirs.view(torch.int16 if dtype != "float32" else torch.int32).numpy()
    numbers = ~np.isnan(values)  # a NaN stays a NaN; its payload bits are torch's own business
    assert np.array_equal(ours.raw.view(theirs_bits.dtype)[numbers], theirs_bits[numbers])
    assert np.array_equal(ours.values(), theirs.double().numpy(), equal_nan=True)
    assert np.array_equal(round_to(values, dtype), theirs.double().numpy(), equal_nan=True)


def test_payload_round_trips_and_rejects_lies() -> None:
    array = from_float32(_awkward_float32()[:12].reshape(3, 4), "bfloat16")
    again = decode(array.payload())
    assert again.dtype == "bfloat16" and np.array_equal(again.raw, array.raw)
    for bad in ({"dtype": "float32", "shape": [5], "data": array.payload()["data"]}, {"dtype": "object", "shape": [1], "data": ""}, [1, 2]):
        with pytest.raises(TypeError):
            decode(bad)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_inputs_are_what_the_reproduction_code_makes(dtype: str, index_dtype: str) -> None:
    case = Case(seq_lens=(3, 6, 1), block_size=4, head_dim=8, num_kv_heads=2, group=2, dtype=dtype, shuffle=9, padding=2,
                poison=True, scale=0.5, scale_style="keyword", boost=30.0, index_dtype=index_dtype, salt=77)
    namespace: dict = {"paged_attention": lambda *a, **k: None}
    exec("\n".join(code for code, _, _ in [*preamble(dense=False), *setup_lines(case)]), namespace)
    for name, array in make_inputs(case).items():
        tensor = namespace[name]
        assert str(tensor.dtype) == f"torch.{array.dtype}"
        assert np.array_equal(tensor.view(torch.int16).numpy().view(np.uint16) if array.dtype == "bfloat16" else tensor.numpy(), array.raw, equal_nan=True), name


def test_the_fill_values_are_exact_in_every_dtype() -> None:
    values = fill((4096,), 5)
    assert set(np.unique(values * 64).astype(int)) <= set(range(-128, 129))
    for dtype in ("float16", "bfloat16"):
        assert np.array_equal(round_to(values, dtype), values.astype(np.float64))


def test_the_judge_does_not_import_torch() -> None:
    code = "import sys, grader.grade, grader.checks; assert 'torch' not in sys.modules, 'torch imported'"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_array_values_keep_ints() -> None:
    table = Array(np.array([[1, 2]], dtype=np.int32), "int32")
    assert table.values().dtype == np.int32
