"""The corner cases every item must finish reach the corners of the contract's domain.

docs/contract.md's domain table lists them; each assertion here names one and finds it among the
explicit corner cases (which run before any random exploration, on every grading).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from grader.checks import allocation, ledger, reconstruct_cases
from grader.checks.attention import corners as attention_corners
from grader.checks.attention_cases import GQA, LOW_PRECISION, PAGING, SCALE, Case, make_inputs

ATTENTION_ITEMS = ("todo5.mha_fp32", "todo5.gqa", "todo5.paging", "todo5.scale_and_stability", "todo5.low_precision", "todo5.inputs_unchanged")


def simulate(program: allocation.Program) -> set[str]:
    """Run a corner program on a correct allocator and name the situations it met."""
    seen: set[str] = set()
    free: list[int] = []
    block_size = 0
    requests: list[dict] = []
    released_ids: set[int] = set()
    for op, *args in program:
        if op == "pool":
            free, block_size = list(range(args[0])), args[1]
            seen.add("block_size 1" if block_size == 1 else "block_size a power of two" if block_size & (block_size - 1) == 0 else "block_size not a power of two")
        elif op == "new":
            if args[1] in released_ids:
                seen.add("request id used again after release")
            if any(r["gone"] for r in requests):
                seen.add("a new request after one was dropped")
            requests.append({"len": args[0], "id": args[1], "table": [], "released": False, "decoded": False, "gone": False})
        elif op == "place":
            req = requests[-1 if args[0] is None else args[0]]
            req["table"] = [free.pop(i) for i in args[1]]
        elif op == "other":
            seen.add("another manager between calls")
        elif op == "forget":
            assert requests[args[0]]["released"] and not requests[args[0]]["table"], "only a released request is dropped"
            requests[args[0]]["gone"] = True
        elif op == "permute":
            free = [free[i] for i in args[0]]
        elif op == "prefill":
            req = requests[args[0]]
            need = math.ceil(req["len"] / block_size)
            if req["released"]:
                seen.add("a released request prefilled again")
            if need > len(free):
                seen.add("prefill OOM" + (" with blocks still free" if free else " on an empty pool"))
                if len(free) >= 100_000:
                    seen.add("prefill OOM in a pool of 100,000 blocks")
                if free != sorted(free):
                    seen.add("prefill OOM on a free list out of order")
                continue
            seen.add("prefill exactly enough" if need == len(free) else "prefill fits")
            if need == len(free) and len(free) + sum(len(r["table"]) for r in requests) >= 100:
                seen.add("prefill takes every free block of a pool of hundreds")
            if any(b >= 32768 for b in free[:need]):
                seen.add("prefill hands out ids past 32767")
            if need > 1024 and len(free) >= 100_000:
                seen.add("prefill gives a table of over 1,024 blocks in a pool of 100,000")
            if block_size >= 256 and req["len"] % block_size == 1:
                seen.add("prompt one token over a block of hundreds")
            if block_size == allocation.LARGEST_BLOCK and req["len"] % block_size == 1 and req["len"] > block_size:
                seen.add("prompt k blocks and one token over the largest block size")
            if req["len"] % block_size == 0:
                seen.add("prompt an exact multiple of block_size")
            if req["len"] % block_size == 1 and req["len"] > 1:
                seen.add("prompt just over a block")
            if free != sorted(free) or (free and free[-1] - free[0] + 1 != len(free)):
                seen.add("non-contiguous free list")
            req["table"], free = free[:need], free[need:]
        elif op == "decode":
            req = requests[args[0]]
            grows = req["len"] + 1 > len(req["table"]) * block_size
            if grows and not free:
                seen.add("decode OOM")
                if sum(len(r["table"]) for r in requests) >= 100_000:
                    seen.add("decode OOM on a full pool of 100,000 blocks")
                continue
            if not free and not grows:
                seen.add("decode on a full pool that needs no block")
            if any(r["id"] == req["id"] and r is not req and r["released"] and r["decoded"] for r in requests):
                seen.add("decode of a request whose id a released, decoded request had")
            if grows:
                seen.add("decode opens a block" + (" with block_size 1" if block_size == 1 else " of hundreds of slots" if block_size >= 256 else ""))
                if block_size == allocation.LARGEST_BLOCK and len(req["table"]) > 1:
                    seen.add("decode opens a block after several of the largest size")
                if free != sorted(free):
                    seen.add("decode opens a block from a free list out of order")
                if len(free) == 1 and len(free) + sum(len(r["table"]) for r in requests) >= 100:
                    seen.add("decode takes the last free block of a pool of hundreds")
                if free[0] >= 4096:
                    seen.add("decode hands out an id past 4095")
                req["table"].append(free.pop(0))
            else:
                seen.add("decode within a block")
            req["len"] += 1
            req["decoded"] = True
        elif op == "release":
            req = requests[args[0]]
            free = sorted(free + req["table"])
            req["table"], req["released"] = [], True
            released_ids.add(req["id"])
        if sum(1 for r in requests if r["table"]) >= 2:
            seen.add("several requests hold blocks")
    return seen


def _all(programs: tuple[allocation.Program, ...]) -> set[str]:
    return set().union(*(simulate(p) for p in programs))


@pytest.mark.parametrize(
    "corner",
    ["block_size 1", "block_size not a power of two", "prefill OOM with blocks still free", "prefill OOM on an empty pool", "prefill exactly enough",
     "prompt an exact multiple of block_size", "prompt just over a block", "non-contiguous free list", "request id used again after release",
     "a released request prefilled again", "several requests hold blocks", "prefill OOM on a free list out of order",
     "prompt one token over a block of hundreds", "prompt k blocks and one token over the largest block size",
     "a new request after one was dropped"],
)
def test_prefill_corners(corner: str) -> None:
    assert corner in _all(allocation.PREFILL_CORNERS)


def test_prefill_corners_meet_another_manager() -> None:
    assert "another manager between calls" in _all(allocation.PREFILL_CORNERS)
    assert "another manager between calls" in _all(allocation.DECODE_CORNERS)


@pytest.mark.parametrize(
    "corner",
    ["block_size 1", "block_size not a power of two", "decode opens a block", "decode opens a block with block_size 1", "decode opens a block of hundreds of slots", "decode within a block",
     "decode OOM", "decode on a full pool that needs no block", "request id used again after release", "several requests hold blocks",
     "decode of a request whose id a released, decoded request had", "decode opens a block after several of the largest size",
     "decode opens a block from a free list out of order", "a new request after one was dropped"],
)
def test_decode_corners(corner: str) -> None:
    assert corner in _all(allocation.DECODE_CORNERS)


def test_block_sizes_are_drawn_up_to_the_largest_and_at_its_boundaries() -> None:
    """Strategies reach the ends of every size they draw: the largest block size and the ones
    around it are drawn on purpose, not left to chance."""
    from hypothesis import find, settings

    for size in (allocation.LARGEST_BLOCK, allocation.LARGEST_BLOCK - 1, 2049, 1):
        assert find(allocation.BLOCK_SIZES, lambda b, size=size: b == size, settings=settings(max_examples=2000, database=None)) == size


def test_ledger_corners() -> None:
    styles = {style for _, style in ledger.CORNERS}
    assert styles == {"keyword", "positional", "default_dtype"}
    products = [ledger.expected(d, style)["total_cache_bytes"] for d, style in ledger.CORNERS]
    assert any(p > 2**53 for p in products) and any(p > 2**63 for p in products)  # past float and int64
    for field in ("kv_bytes_per_token", "kv_bytes_per_block"):  # each field past int64 on its own, not only the total
        assert any(ledger.expected(d, style)[field] > 2**64 for d, style in ledger.CORNERS), field
    assert any(all(v == 1 for v in d.values()) for d, _ in ledger.CORNERS)
    assert {d["dtype_bytes"] for d, _ in ledger.CORNERS} >= {1, 2, 4, 8, 3}
    # The same arguments again after the caller changed the first result (an lru_cache'd dict).
    assert any(len(calls) > 1 and calls[-1][0] == calls[0][0] for calls in ledger.EDITED_CALLS)


def test_reconstruction_corners() -> None:
    corners = reconstruct_cases.CORNERS
    assert any(ex.block_size == 1 for ex in corners)
    assert any(ex.block_size not in (1, 2, 4, 8, 16) for ex in corners)
    assert any(ex.seq_len % ex.block_size for ex in corners)  # a partial last block
    assert any(list(ex.table) != sorted(ex.table) for ex in corners)  # table order is not physical order
    assert any(list(ex.table) == sorted(ex.table) and ex.seq_len % ex.block_size for ex in corners)  # truncation alone
    assert any(("write", 0) in ex.events and ex.events.count(("read", 0)) > 1 for ex in corners)  # read, write, read
    assert any(any(kind == "grow" for kind, _ in ex.events) for ex in corners)  # read, grow, read
    assert {ex.head_dim for ex in corners} >= {1, 2, 3, 5}


@pytest.mark.parametrize("item_id", ATTENTION_ITEMS)
def test_attention_corners(item_id: str) -> None:
    histories = attention_corners(item_id)
    calls = [case for history in histories for case in history]
    feature = {"todo5.gqa": GQA, "todo5.paging": PAGING, "todo5.scale_and_stability": SCALE, "todo5.low_precision": LOW_PRECISION}.get(item_id)
    if feature is not None:
        assert all(history[-1].has(feature) for history in histories), "every corner of a feature item has its feature"
        # the feature alone, and together with another
        assert any(sum(c.has(f) for f in (GQA, PAGING, SCALE, LOW_PRECISION)) == 1 for c in calls)
        assert any(sum(c.has(f) for f in (GQA, PAGING, SCALE, LOW_PRECISION)) > 1 for c in calls)
    if item_id in ("todo5.mha_fp32", "todo5.inputs_unchanged"):
        assert any(len(history) > 1 for history in histories), "several calls in one process"
        assert {c.index_dtype for c in calls} == {"int32", "int64"}
        assert any(c.block_size == 1 for c in calls) and any(c.block_size not in (1, 2, 4, 8, 16, 32) for c in calls)
        assert any(1 in c.seq_lens for c in calls) and any(any(n % c.block_size == 0 for n in c.seq_lens) for c in calls)
    if item_id == "todo5.paging":
        assert any(c.dtype == "float16" and c.poison for c in calls) and any(c.dtype == "bfloat16" and c.poison for c in calls)
        assert any(c.padding > 0 for c in calls) and any(c.block_size == 1 for c in calls)
    if item_id == "todo5.scale_and_stability":
        assert {c.scale_style for c in calls} >= {"keyword", "positional"} and any(c.boost >= 100 for c in calls)
        assert any(len(h) > 1 and h[0].scale_style != h[1].scale_style for h in histories), "scale passed, then left to its default"
    if item_id == "todo5.scale_and_stability":
        assert any(_lowest_max_logit(c) < -110 for c in calls), "a head whose logits are all very negative (exp underflows without the max)"
    if item_id == "todo5.gqa":
        assert {c.group for c in calls} >= {2, 3, 4, 8}
    if item_id == "todo5.inputs_unchanged":
        assert any(c.scale_style == "default" for c in calls) and any(c.scale_style != "default" for c in calls)
        assert {c.dtype for c in calls} >= {"float32", "float16", "bfloat16"}


def _lowest_max_logit(case: Case) -> float:
    """The smallest, over sequences and heads, of a head's largest logit in `case`."""
    values = {name: array.values() for name, array in make_inputs(case).items()}
    query, keys = values["query"], values["key_cache"]
    scale = 1 / math.sqrt(case.head_dim) if case.scale is None else case.scale
    lowest = math.inf
    for i, n in enumerate(case.seq_lens):
        positions = np.arange(n)
        k = keys[values["block_tables"][i, positions // case.block_size], positions % case.block_size]  # [n, kv, d]
        for h in range(case.num_heads):
            logits = scale * (k[:, h // case.group] @ query[i, h])
            lowest = min(lowest, float(logits.max()))
    return lowest


@pytest.mark.slow
def test_the_corner_cases_alone_never_pay_for_an_item(monkeypatch: pytest.MonkeyPatch) -> None:
    """Corners are necessary, not sufficient: with no random exploration at all, even the
    reference earns nothing, each item saying how many random cases it lacked."""
    from pathlib import Path

    from grader.checks import running
    from grader.config import load_config
    from grader.grade import grade_path

    monkeypatch.setattr(running, "_explore", lambda ctx, run: None)
    result = grade_path(Path(__file__).resolve().parent.parent / "reference" / "paged_attention.py", load_config(), "cpu")
    ran = [i for i in result.items if i.status != "not_run"]
    assert result.score == 0 and ran
    for item in ran:
        assert item.failure is not None and item.failure.kind == "not_exercised", (item.id, item.failure)
        assert "0 of 20 random cases" in item.failure.message.en, (item.id, item.failure.message.en)


# -- far cases: every grading reaches each size's far end, at a size its seed draws ---------------

SEEDS = range(24)


@functools.cache
def _far_seen(todo: str) -> list[set[str]]:
    """What each grading's far programs meet, one set per seed."""
    return [_all(allocation.far_programs(seed, todo)) for seed in SEEDS]


@pytest.mark.parametrize(
    "corner",
    ["prefill takes every free block of a pool of hundreds", "prefill hands out ids past 32767", "prefill OOM in a pool of 100,000 blocks",
     "prefill gives a table of over 1,024 blocks in a pool of 100,000"],
)
def test_every_grading_meets_the_far_allocator_cases_in_prefill(corner: str) -> None:
    assert all(corner in seen for seen in _far_seen("TODO 2"))


@pytest.mark.parametrize(
    "corner",
    ["decode takes the last free block of a pool of hundreds", "decode hands out an id past 4095", "decode OOM on a full pool of 100,000 blocks"],
)
def test_every_grading_meets_the_far_allocator_cases_in_decode(corner: str) -> None:
    assert all(corner in seen for seen in _far_seen("TODO 3"))


def test_far_pool_sizes_come_from_the_seed() -> None:
    """No pool size is safe to special-case: each grading draws its own, over a wide range."""
    for todo in ("TODO 2", "TODO 3"):
        sizes = [[program[0][1] for program in allocation.far_programs(seed, todo)] for seed in SEEDS]
        hundreds, huge = [s[0] for s in sizes], [s[1] for s in sizes]
        assert min(hundreds) >= 100 and max(hundreds) > 1000 and len(set(hundreds)) > 15
        assert min(huge) >= allocation.FAR_POOL and len(set(huge)) > 18
        assert allocation.far_programs(7, todo) == allocation.far_programs(7, todo)  # the same grading, the same cases


def test_every_grading_meets_the_far_attention_cases() -> None:
    from grader.checks.attention_cases import FAR, far_cases

    seen: dict[str, list[int]] = {"seq_len": [], "block_size": [], "head_dim": [], "num_seqs": [], "width": []}
    for seed in SEEDS:
        cases = far_cases(seed)
        assert max(max(c.seq_lens) for c in cases) >= FAR["seq_len"]
        assert max(c.width for c in cases) >= FAR["num_blocks"]  # a table of 1,000 blocks and more
        assert max(c.block_size for c in cases) > 1024 and max(c.head_dim for c in cases) > 128
        assert max(len(c.seq_lens) for c in cases) >= FAR["num_seqs"]
        seen["seq_len"].append(max(max(c.seq_lens) for c in cases))
        seen["block_size"].append(max(c.block_size for c in cases))
        seen["head_dim"].append(max(c.head_dim for c in cases))
        seen["num_seqs"].append(max(len(c.seq_lens) for c in cases))
        seen["width"].append(max(c.width for c in cases))
    assert max(seen["block_size"]) == FAR["block_size"] and max(seen["head_dim"]) == FAR["head_dim"]  # the contract's largest, reached
    # Thresholds from the seed (block_size and head_dim are the contract's largest one grading in two)
    assert all(len(set(values)) > (2 if key in ("block_size", "head_dim") else 10) for key, values in seen.items()), {k: len(set(v)) for k, v in seen.items()}


def test_far_attention_cases_are_cases_their_reproduction_writes_short() -> None:
    from grader.checks.attention_cases import far_cases, make_inputs, setup_lines

    for case in far_cases(3):
        inputs = make_inputs(case)
        assert inputs["block_tables"].shape == (len(case.seq_lens), case.width)
        assert sum(len(code) for code, _, _ in setup_lines(case)) < 2000, case  # formulas, not lists of thousands of ids


def test_every_grading_meets_the_far_reconstruction_examples() -> None:
    widths, lengths, blocks, heads, pools = [], [], [], [], []
    for seed in SEEDS:
        examples = reconstruct_cases.far_examples(seed)
        widths.append(max(len(ex.table) for ex in examples))
        lengths.append(max(ex.seq_len for ex in examples))
        blocks.append(max(ex.block_size for ex in examples))
        heads.append(max(ex.head_dim for ex in examples))
        pools.append(max(max(ex.table) for ex in examples))
        for ex in examples:
            assert ex.readable or ex.num_blocks * ex.block_size * ex.head_dim <= reconstruct_cases.FLAT_WRITE  # exact in float32
            assert list(ex.table) != sorted(ex.table)  # never physical order
    assert min(widths) >= reconstruct_cases.FAR["table"] and min(lengths) >= reconstruct_cases.FAR["seq_len"]
    assert min(blocks) > 1024 and max(blocks) == reconstruct_cases.FAR["block_size"] and min(heads) > 128 and max(heads) == reconstruct_cases.FAR["head_dim"]
    assert sum(p > 32767 for p in pools) > len(SEEDS) // 4  # ids past int16, often
    assert len(set(widths)) > 10 and len(set(lengths)) > 10 and len(set(blocks)) > 2 and len(set(heads)) > 2


def _reaches(strategy, condition) -> bool:
    from hypothesis import find, settings

    try:
        find(strategy, condition, settings=settings(max_examples=2000, database=None))
    except Exception:  # NoSuchExample
        return False
    return True


@pytest.mark.slow
def test_drawn_attention_cases_reach_each_drawn_maximum() -> None:
    from grader.checks.attention_cases import DRAWN_MAX, cases

    assert _reaches(cases(), lambda c: max(c.seq_lens) == DRAWN_MAX["seq_len"])
    assert _reaches(cases(), lambda c: c.block_size == DRAWN_MAX["block_size"])
    assert _reaches(cases(), lambda c: c.head_dim == DRAWN_MAX["head_dim"])
    assert _reaches(cases(), lambda c: len(c.seq_lens) == DRAWN_MAX["num_seqs"])


@pytest.mark.slow
def test_drawn_reconstruction_examples_reach_each_drawn_maximum() -> None:
    from grader.checks.reconstruct_cases import DRAWN_MAX, examples

    assert _reaches(examples(0.7), lambda ex: ex.num_blocks == DRAWN_MAX["num_blocks"] and len(ex.table) > 100)
    assert _reaches(examples(0.7), lambda ex: ex.block_size == DRAWN_MAX["block_size"])
    assert _reaches(examples(0.7), lambda ex: ex.head_dim == DRAWN_MAX["head_dim"])
    assert _reaches(examples(0.7, ordered=True), lambda ex: len(ex.table) > 1)
    assert not _reaches(examples(0.7, ordered=True), lambda ex: list(ex.table) != sorted(ex.table))  # physical order only


def test_drawn_allocator_pools_reach_hundreds_of_blocks_and_wide_heads() -> None:
    assert _reaches(allocation.NUM_BLOCKS, lambda n: n == 600)
    assert _reaches(allocation.HEAD_DIMS, lambda d: d == 256)
    assert allocation._bounded(600, 4096, 256) == (16, 1)  # the pool tensor stays under POOL_SLOTS values
    assert allocation._bounded(12, 1, 256) == (12, 256)


def test_attention_base_corners_hold_an_empty_batch() -> None:
    histories = attention_corners("todo5.mha_fp32")
    empty = [c for h in histories for c in h if not c.seq_lens]
    assert empty and not any(c.has(f) for c in empty for f in (GQA, PAGING, SCALE, LOW_PRECISION))
    inputs = make_inputs(empty[0])
    assert inputs["query"].shape == (0, empty[0].num_heads, empty[0].head_dim) and inputs["block_tables"].shape[0] == 0

