"""A kernel of the submission's registered over an ATen operator (torch.library) runs wherever that
operator runs, the grader thread included (red team 20).  So the grader thread reads a CPU
tensor's memory without running any torch operator, checks what aten::view hands it, and says
when a kernel it would still run was replaced (tampering "kernel").  Quick tests, no grading.
"""

from __future__ import annotations

import base64
import contextlib
import mmap
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from grader.sandbox import wire
from tests import machinery_kit

pytestmark = pytest.mark.filterwarnings("ignore:Warning only once for all operators")

KIT = machinery_kit.machinery()
READINGS = KIT.MODULES["readings"]
ANSWERS = KIT.MODULES["answers"]
DTYPES = ["float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool"]


@contextlib.contextmanager
def lying_kernels() -> Iterator[Any]:
    """Python kernels at the CPU key that answer zeros: what a submission's cell can register.
    Removed after, with what they made the grader thread find."""
    library = torch.library.Library("aten", "IMPL")

    def zeros_like_input(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return torch.zeros(tuple(tensor.shape), dtype=tensor.dtype)

    for op in ("detach", "alias", "contiguous", "clone", "_to_copy", "view", "view.dtype", "reshape", "_reshape_alias", "eq.Scalar"):
        library.impl(op, zeros_like_input, "CPU")
    found_before = list(READINGS.FOUND)
    try:
        yield library
    finally:
        library._destroy()
        READINGS.FOUND[:] = found_before
        READINGS.COMPARED[0] = False


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_cpu_tensor_is_read_from_its_memory_under_lying_kernels(dtype: str) -> None:
    strided = (torch.arange(1, 25) % 7).to(getattr(torch, dtype)).reshape(2, 3, 4).transpose(0, 2)  # read in C order all the same
    expected = wire.tensor_payload(strided)
    with lying_kernels():
        reading = READINGS.tensor_reading(strided)
        facts = READINGS.tensor_facts(strided)
    assert reading == expected
    assert base64.b64decode(reading["data"]).count(0) < len(base64.b64decode(reading["data"]))  # not the kernels' zeros
    assert facts == ([4, 3, 2], dtype, False)


@pytest.mark.parametrize("dtype", DTYPES)
def test_readings_match_what_the_judge_receives(dtype: str) -> None:
    """Without kernels: the same payload as wire.tensor_payload (the judge's side), for views with offsets and strides."""
    base = (torch.arange(60) % 11).to(getattr(torch, dtype))
    for tensor in (base[5:29].reshape(4, 6), base[5:29].reshape(4, 6)[:, ::2], base.reshape(3, 20)[1:, 3:].t(), base[:0].reshape(0, 3), base[7]):
        assert READINGS.tensor_reading(tensor) == wire.tensor_payload(tensor)


def test_zero_is_read_by_value() -> None:
    for dtype in ("float32", "float16", "bfloat16", "float64"):
        negative_zero = torch.full((3, 2), -0.0, dtype=getattr(torch, dtype))
        assert READINGS.tensor_facts(negative_zero)[2] is True
        assert READINGS.tensor_facts(torch.full((2,), float("nan"), dtype=getattr(torch, dtype)))[2] is False
        tiny = torch.zeros(4, dtype=getattr(torch, dtype))
        tiny[3] = torch.finfo(getattr(torch, dtype)).tiny
        assert READINGS.tensor_facts(tiny)[2] is False
    assert READINGS.tensor_facts(torch.zeros(0, 4))[2] is True
    assert READINGS.tensor_facts(torch.tensor([False, True]))[2] is False


def test_a_tensor_whose_memory_is_not_its_value_is_refused() -> None:
    negative_view = torch._neg_view(torch.ones(3))
    assert READINGS.tensor_reading(negative_view)["rejected_return"] is True
    assert READINGS.tensor_facts(negative_view)[2] is None
    shrunk = torch.ones(1000)
    shrunk.untyped_storage().resize_(16)  # the tensor still says 1000 elements: its strides reach past its storage
    assert READINGS.tensor_reading(shrunk)["rejected_return"] is True


def test_a_replaced_kernel_is_found_before_an_operator_runs() -> None:
    READINGS.COMPARED[0] = False
    with lying_kernels():
        assert READINGS.operators_intact() is False
        found = {tuple(e) for e in READINGS.FOUND}
    assert ("kernel", "aten::view", "", False, True) in found and ("kernel", "aten::detach", "", False, True) in found


def test_operators_intact_without_kernels_and_after_torch_imports() -> None:
    import torch._dynamo  # noqa: F401  (a notebook may import it: it registers Python kernels on other keys)
    import torch._meta_registrations  # noqa: F401

    READINGS.COMPARED[0] = False
    assert READINGS.operators_intact() is True


def test_a_view_of_the_judges_file_is_checked_to_be_one() -> None:
    mapped = mmap.mmap(-1, 4 * 24)
    payload = {"dtype": "float32", "shape": [2, 3, 4], "offset": 0}
    with lying_kernels(), pytest.raises(LookupError) as refused:
        try:
            ANSWERS.tensor_from(payload, "cpu", mapped)
        finally:
            found = list(READINGS.FOUND)
    assert "aten::view" in READINGS.described(refused.value)["message"]
    assert ["kernel", "aten::view", "", False, True] in found


def test_a_view_of_the_judges_file_writes_through() -> None:
    mapped = mmap.mmap(-1, 4 * 24 + 8)
    view = ANSWERS.tensor_from({"dtype": "float32", "shape": [2, 3, 4], "offset": 8}, "cpu", mapped)
    view.mul_(0).add_(2.5)
    assert torch.frombuffer(mapped, dtype=torch.float32, offset=8).eq(2.5).all()
    one = ANSWERS.tensor_from({"dtype": "bfloat16", "shape": [1, 5, 1], "data": base64.b64encode(bytes(10)).decode()}, "cpu")
    assert tuple(one.shape) == (1, 5, 1) and one.dtype == torch.bfloat16


def test_a_pool_set_by_the_judge_is_written_without_copy_() -> None:
    pool, data = torch.zeros(3, 2, 4), torch.arange(24, dtype=torch.float32).reshape(3, 2, 4)
    with lying_kernels() as library:
        library.impl("copy_", lambda self, src, non_blocking=False: self, "CPU")  # a copy_ that writes nothing
        target = ANSWERS._same_memory_layout(pool, data)
        assert target is not None
        ANSWERS.COPY_TO(target, READINGS.memory_of(data, READINGS.BYTES_TYPE[4]))
    assert pool.numpy().tobytes() == data.numpy().tobytes()


class _Spy(torch.Tensor):
    """A tensor whose size and stride its class answers (red team 21's route to the grader thread)."""

    asked: list[str] = []  # noqa: RUF012

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        cls.asked.append(str(func))
        if func is torch.ops.aten.sym_size.default:
            return [3]
        if func is torch.ops.aten.sym_stride.default:
            return [1]
        raise NotImplementedError(str(func))


@pytest.mark.parametrize("plain_type", [False, True])
def test_a_tensor_that_dispatches_to_python_is_refused_before_it_is_asked_anything(plain_type: bool) -> None:
    spy = torch.Tensor._make_subclass(_Spy, torch.ones(3), False, dispatch_sizes_strides_policy="sizes")
    if plain_type:
        spy.__class__ = torch.Tensor  # type() says torch.Tensor; the Python key stays
    _Spy.asked.clear()
    assert READINGS.python_keyed(spy) is True and READINGS.python_keyed(torch.ones(3)) is False
    assert READINGS.tensor_reading(spy)["rejected_return"] is True
    assert READINGS.digest({"caller": machinery_kit.caller(), "grave": []}, spy) is None
    assert READINGS.tensor_facts(spy) == (None, "a tensor subclass with __torch_dispatch__", None)
    assert _Spy.asked == []  # its class ran nothing
