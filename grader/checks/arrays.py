"""Tensors on the judge's side, as numpy arrays: the judge never imports torch.

Importing torch costs the judge most of a second, as much as the checks themselves; numpy
is enough to make inputs, read answers and compute dense references.  bfloat16, which numpy
lacks, is held as its raw 16-bit patterns and rounded exactly as torch rounds it (to
nearest, ties to even).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import numpy as np

NUMPY_DTYPES: dict[str, Any] = {
    "float64": np.float64,
    "float32": np.float32,
    "float16": np.float16,
    "bfloat16": np.uint16,  # raw bit patterns
    "int64": np.int64,
    "int32": np.int32,
    "int16": np.int16,
    "int8": np.int8,
    "uint8": np.uint8,
    "bool": np.bool_,
}


@dataclass(frozen=True)
class Array:
    """Values of one dtype: `raw` is what travels (for bfloat16, uint16 bit patterns)."""

    raw: np.ndarray
    dtype: str

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.raw.shape)

    def values(self) -> np.ndarray:
        """The exact values as float64 (ints stay ints)."""
        if self.dtype == "bfloat16":
            return bf16_bits_to_float32(self.raw).astype(np.float64)
        if self.raw.dtype.kind == "f":
            return self.raw.astype(np.float64)
        return self.raw

    def payload(self) -> dict[str, Any]:
        data = np.ascontiguousarray(self.raw).tobytes()
        return {"dtype": self.dtype, "shape": list(self.raw.shape), "data": base64.b64encode(data).decode()}


def float32_to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """Round float32 to bfloat16 (nearest, ties to even), as torch's `.to(torch.bfloat16)` does."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    rounded[np.isnan(values)] = 0x7FC0  # torch's NaN, whatever the payload of the float32 one
    return rounded


def bf16_bits_to_float32(bits: np.ndarray) -> np.ndarray:
    return (np.ascontiguousarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def from_float32(values: np.ndarray, dtype: str) -> Array:
    """float32 values converted to `dtype` the way torch converts them."""
    if dtype == "bfloat16":
        return Array(float32_to_bf16_bits(values), dtype)
    with np.errstate(over="ignore"):  # out of range becomes inf, as in torch
        return Array(np.asarray(values, dtype=np.float32).astype(NUMPY_DTYPES[dtype]), dtype)


def round_to(values: np.ndarray, dtype: str) -> np.ndarray:
    """Values rounded to what `dtype` can hold, back as float64."""
    return from_float32(np.asarray(values, dtype=np.float32), dtype).values()


def decode(payload: Any) -> Array:
    """An array from an untrusted payload; TypeError when it is not a well-formed one."""
    if not isinstance(payload, dict):
        raise TypeError("not a tensor payload")
    dtype, shape, data = payload.get("dtype"), payload.get("shape"), payload.get("data")
    if dtype not in NUMPY_DTYPES or not isinstance(shape, list) or not isinstance(data, str):
        raise TypeError("malformed tensor payload")
    if len(shape) > 8 or not all(type(d) is int and d >= 0 for d in shape):
        raise TypeError("malformed tensor shape")
    raw = base64.b64decode(data.encode(), validate=True)
    numpy_dtype = np.dtype(NUMPY_DTYPES[dtype])
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if len(raw) != count * numpy_dtype.itemsize:
        raise TypeError("tensor payload size does not match its shape")
    return Array(np.frombuffer(raw, dtype=numpy_dtype).reshape(shape).copy(), dtype)
