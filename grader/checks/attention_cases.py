"""TODO 5's domain: attention cases, the features that vary them, and how a case is written.

A case is one call of paged_attention.  Its domain (docs/contract.md's table): any number of
sequences, any head_dim, any positive block_size, query heads a multiple of the KV heads,
seq_lens from 1 up, block tables in any physical order and wider than needed (padding entries
name other blocks, NaN-filled or another sequence's), NaN in every slot no sequence reads,
float32 / float16 / bfloat16, int32 or int64 index tensors, scale left to its default or
passed by keyword or position, and logits from small to hundreds.  An empty batch returns an
empty [0, num_heads, head_dim] tensor of the query's dtype.

Sizes reach across orders of magnitude: hypothesis draws a size class per call (small most
often; long sequences, large blocks, wide heads, many sequences now and then), and every
grading adds one case per size far past those (`far_cases`): 32k tokens and more, thousands
of blocks, block_size to 4096, head_dim to 256, dozens of sequences, each size drawn from the
grading's seed, so that no threshold is safe to special-case.  A large case's layout (its
physical block order, its tables) is written as a formula, so its reproduction stays short.

Features, each owned by one rubric item, can be switched off (`ablate`): when a case fails,
the item that owns a feature takes the failure only if the same case without that feature
passes (the base item takes it when the case with every feature off still fails).
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from hypothesis import strategies as st

from grader.checks import choices
from grader.checks.arrays import Array, from_float32
from grader.checks.dense import ATTEND_SOURCE, FILL_SOURCE, fill

GQA, PAGING, SCALE, LOW_PRECISION = "gqa", "paging", "scale", "low_precision"
FEATURES = (GQA, PAGING, SCALE, LOW_PRECISION)
INPUT_NAMES = ("query", "key_cache", "value_cache", "block_tables", "seq_lens")
MAX_GROUP = 8  # query heads are drawn for 8 per KV head and the first `group` kept
WRITTEN_OUT = 64  # blocks: up to here a case's layout is written out in full; past it, as a formula


@dataclass(frozen=True)
class Case:
    seq_lens: tuple[int, ...] = (5,)
    block_size: int = 4
    head_dim: int = 8
    num_kv_heads: int = 1
    group: int = 1  # query heads per KV head
    member: int = 0  # which of the 8 drawn query heads per KV head come first (GQA's ablation keeps one)
    dtype: str = "float32"
    shuffle: int = 0  # 0: blocks in physical order; else the seed of a permutation
    padding: int = 0  # table columns beyond what the longest sequence needs
    poison: bool = False  # NaN in every slot no sequence reads
    scale: float | None = None
    scale_style: str = "default"  # "default" (left out), "keyword", "positional"
    boost: float = 1.0  # query magnitude: large values give logits in the hundreds
    index_dtype: str = "int32"
    salt: int = 1
    device: str = "cpu"
    reuse_caches: bool = False  # the previous call's cache tensors, written in place (a decode step)
    offset: float = 0.0  # added to every value: outputs near 1, where sums in a low precision drift

    @property
    def num_heads(self) -> int:
        return self.num_kv_heads * self.group

    @property
    def needs(self) -> list[int]:
        return [math.ceil(n / self.block_size) for n in self.seq_lens]

    @property
    def spare(self) -> int:
        return 1 + self.padding  # blocks no sequence reads (at least one)

    @property
    def used(self) -> int:
        """Blocks the sequences read, all together (logical blocks 0 to used - 1, sequence by sequence)."""
        return sum(self.needs)

    @property
    def num_blocks(self) -> int:
        return self.used + self.spare

    @property
    def width(self) -> int:
        """Columns of the block tables (one at least, for an empty batch too)."""
        return max([*self.needs, 1]) + self.padding

    @property
    def compact(self) -> bool:
        """A large case: its layout is a formula (`order`, `tables`), and so is its reproduction's."""
        return self.num_blocks > WRITTEN_OUT or len(self.seq_lens) > 8

    @property
    def starts(self) -> list[int]:
        """Each sequence's first logical block."""
        starts, start = [], 0
        for need in self.needs:
            starts.append(start)
            start += need
        return starts

    @property
    def stride(self) -> int:
        """A large case's permutation: logical block l lies at (stride * l + shift) % num_blocks."""
        n = self.num_blocks
        a = 2 + self.shuffle % max(1, n - 2)
        while math.gcd(a, n) != 1:
            a += 1
        return a

    @functools.cached_property
    def order(self) -> list[int]:
        """Where each logical block lies: the sequences' blocks in turn, then the spare ones."""
        if not self.shuffle:
            return list(range(self.num_blocks))
        if self.compact:
            n, a, b = self.num_blocks, self.stride, (self.shuffle * 7919) % self.num_blocks
            return [(a * logical + b) % n for logical in range(n)]
        return [int(b) for b in np.random.default_rng(self.shuffle).permutation(self.num_blocks)]

    @functools.cached_property
    def holds(self) -> list[int]:
        """The logical block each physical block holds (the inverse of `order`)."""
        inverse = [0] * self.num_blocks
        for logical, physical in enumerate(self.order):
            inverse[physical] = logical
        return inverse

    @functools.cached_property
    def tables(self) -> list[list[int]]:
        """Each sequence's blocks, then padding entries: spare blocks or other sequences' blocks.

        A large case's row i is order[(starts[i] + j) % used] for every column j: its own blocks,
        then the next sequences' (a formula its reproduction writes in one line)."""
        order = self.order
        if self.compact:
            used = max(1, self.used)
            return [[order[(start + j) % used] for j in range(self.width)] for start in self.starts]
        rows, start = [], 0
        spares = order[self.used :]
        for i, need in enumerate(self.needs):
            row = order[start : start + need]
            start += need
            for j in range(self.width - need):
                # Alternate: a NaN-filled spare block, or a block another sequence really uses.
                if j % 2 == 0 or len(self.needs) == 1:
                    row.append(spares[(i + j) % len(spares)])
                else:
                    row.append(order[(start + j) % self.used])
            rows.append(row)
        return rows

    @property
    def unread(self) -> list[int]:
        read = {b for row, need in zip(self.tables, self.needs, strict=True) for b in row[:need]}
        return [b for b in range(self.num_blocks) if b not in read]

    def has(self, feature: str) -> bool:
        if feature == GQA:
            return self.group > 1
        if feature == PAGING:
            return bool(self.shuffle or self.padding or self.poison)
        if feature == SCALE:
            return self.scale_style != "default" or self.boost != 1.0
        return self.dtype != "float32"

    def without(self, feature: str) -> Case:
        if feature == GQA:
            return replace(self, group=1)
        if feature == PAGING:
            return replace(self, shuffle=0, padding=0, poison=False)
        if feature == SCALE:
            return replace(self, scale=None, scale_style="default", boost=1.0)
        return replace(self, dtype="float32")

    def plain(self) -> Case:
        case = self
        for feature in FEATURES:
            case = case.without(feature)
        return case


def make_inputs(case: Case) -> dict[str, Array]:
    """The case's tensors, exactly as its reproduction makes them."""
    kv_shape = (case.num_blocks, case.block_size, case.num_kv_heads, case.head_dim)
    num_seqs = len(case.seq_lens)
    # Values belong to logical positions, not to where the table puts them, so that a case and
    # its ablations (GQA off, paging off, float32) attend over the same numbers.
    query = fill((num_seqs, case.num_kv_heads, MAX_GROUP, case.head_dim), case.salt)[:, :, case.member : case.member + case.group]
    query = query.reshape(num_seqs, case.num_heads, case.head_dim) * np.float32(case.boost)
    key_cache, value_cache = fill(kv_shape, case.salt + 1)[case.holds], (fill(kv_shape, case.salt + 2) + np.float32(case.offset))[case.holds]
    if case.poison:
        for cache in (key_cache, value_cache):
            cache[case.unread] = np.nan
            for n, row in zip(case.seq_lens, case.tables, strict=True):
                if n % case.block_size:
                    cache[row[(n - 1) // case.block_size], n % case.block_size :] = np.nan
    index = np.int32 if case.index_dtype == "int32" else np.int64
    return {
        "query": from_float32(query, case.dtype),
        "key_cache": from_float32(key_cache, case.dtype),
        "value_cache": from_float32(value_cache, case.dtype),
        "block_tables": Array(np.array(case.tables, dtype=index).reshape(num_seqs, case.width), case.index_dtype),
        "seq_lens": Array(np.array(case.seq_lens, dtype=index), case.index_dtype),
    }


def call_args(case: Case) -> str:
    args = "query, key_cache, value_cache, block_tables, seq_lens"
    if case.scale_style == "keyword":
        return f"{args}, scale={case.scale!r}"
    if case.scale_style == "positional":
        return f"{args}, {case.scale!r}"
    return args


Commented = tuple[str, str, str]  # (code, English comment, Chinese comment)


def setup_lines(case: Case) -> list[Commented]:
    """Code making the case's inputs (after the `fill` helper), one call's worth."""
    dt = f"torch.{case.dtype}"
    kv = (case.num_blocks, case.block_size, case.num_kv_heads, case.head_dim)
    n = len(case.seq_lens)
    boost = f" * {case.boost:g}" if case.boost != 1.0 else ""
    lines: list[Commented] = [
        (f"query = (fill({(n, case.num_kv_heads, MAX_GROUP, case.head_dim)}, {case.salt})[:, :, {case.member or ''}:{case.member + case.group}].reshape({n}, {case.num_heads}, {case.head_dim}){boost}).to({dt})", "", ""),
        (f"keys, values = fill({kv}, {case.salt + 1}), fill({kv}, {case.salt + 2}){f' + {case.offset:g}' if case.offset else ''}", "logical order: sequence 0's blocks, then sequence 1's, ...", "逻辑顺序：先是序列 0 的块，再是序列 1 的，……"),
    ]
    if case.compact:
        return lines + _compact_lines(case, dt)
    where = "" if not case.shuffle else f"[{case.holds}]"
    lines.append((f"key_cache, value_cache = keys{where}.to({dt}), values{where}.to({dt})", *(("the blocks in shuffled physical order", "块按打乱的物理顺序存放") if where else ("", ""))))
    if case.reuse_caches:
        lines[-1] = (
            f"key_cache.copy_(keys{where}.to({dt})); value_cache.copy_(values{where}.to({dt}))",
            "the same cache tensors, written in place, as a decode step writes them",
            "同一组缓存张量，就地写入（如同一次 decode）",
        )
    if case.poison:
        lines.append((f"key_cache[{case.unread}] = value_cache[{case.unread}] = float('nan')", "blocks no sequence reads", "没有序列读取的块"))
        for n_, row in zip(case.seq_lens, case.tables, strict=True):
            if n_ % case.block_size:
                slot = f"{row[(n_ - 1) // case.block_size]}, {n_ % case.block_size}:"
                lines.append((f"key_cache[{slot}] = value_cache[{slot}] = float('nan')", "unused tail slots", "未使用的尾部槽位"))
    if n:
        lines.append((f"block_tables = torch.tensor({case.tables}, dtype=torch.{case.index_dtype})", "", ""))
        lines.append((f"seq_lens = torch.tensor({list(case.seq_lens)}, dtype=torch.{case.index_dtype})", "", ""))
    else:
        lines.append((f"block_tables = torch.zeros((0, {case.width}), dtype=torch.{case.index_dtype})", "a batch of no sequences", "一个序列也没有的批"))
        lines.append((f"seq_lens = torch.zeros(0, dtype=torch.{case.index_dtype})", "", ""))
    return lines + _to_device(case)


def _compact_lines(case: Case, dt: str) -> list[Commented]:
    """A large case's layout as formulas: the physical order, the tables, the NaN slots."""
    bs, used = case.block_size, max(1, case.used)
    if case.shuffle:
        shift = case.order[0]
        lines: list[Commented] = [(f"order = ({case.stride} * torch.arange({case.num_blocks}) + {shift}) % {case.num_blocks}",
                                   "the physical block of each logical block (shuffled)", "每个逻辑块所在的物理块（打乱的）")]
    else:
        lines = [(f"order = torch.arange({case.num_blocks})", "the physical block of each logical block", "每个逻辑块所在的物理块")]
    if case.reuse_caches:
        lines.append((f"key_cache.copy_(keys[order.argsort()].to({dt})); value_cache.copy_(values[order.argsort()].to({dt}))",
                      "the same cache tensors, written in place, as a decode step writes them", "同一组缓存张量，就地写入（如同一次 decode）"))
    else:
        lines.append((f"key_cache, value_cache = keys[order.argsort()].to({dt}), values[order.argsort()].to({dt})", "", ""))
    lines.append((f"block_tables = order[(torch.tensor({case.starts})[:, None] + torch.arange({case.width})) % {used}].to(torch.{case.index_dtype})",
                  "row i: its own blocks, then the next sequences' (padding)", "第 i 行：自己的块，然后是后面序列的块（多余表项）"))
    lines.append((f"seq_lens = torch.tensor({list(case.seq_lens)}, dtype=torch.{case.index_dtype})", "", ""))
    if case.poison:
        lines += [
            (f"key_cache[order[{case.used}:]] = value_cache[order[{case.used}:]] = float('nan')", "blocks no sequence reads", "没有序列读取的块"),
            (f"for row, n in ((row, n) for row, n in zip(block_tables.tolist(), seq_lens.tolist()) if n % {bs}):", "unused tail slots", "未使用的尾部槽位"),
            (f"    key_cache[row[(n - 1) // {bs}], n % {bs}:] = value_cache[row[(n - 1) // {bs}], n % {bs}:] = float('nan')", "", ""),
        ]
    return lines + _to_device(case)


def _to_device(case: Case) -> list[Commented]:
    if case.device == "cpu":
        return []
    return [(f"query, key_cache, value_cache, block_tables, seq_lens = (t.to('{case.device}') for t in (query, key_cache, value_cache, block_tables, seq_lens))", "", "")]


def preamble(dense: bool) -> list[Commented]:
    fill, *fill_body = FILL_SOURCE
    lines: list[Commented] = [
        ("import math, torch", "", ""),
        (fill, "exact in every dtype: multiples of 1/64 in [-2, 2]", "在每种 dtype 中都精确：[-2, 2] 中 1/64 的整数倍"),
        *((line, "", "") for line in fill_body),
    ]
    if dense:
        attend, *attend_body = ATTEND_SOURCE
        lines.append((attend, "one sequence, float64: q [heads, d]; k, v [tokens, kv_heads, d]", "一个序列，float64：q [heads, d]；k、v [tokens, kv_heads, d]"))
        lines += [(line, "", "") for line in attend_body]
    return lines


def expected_line(case: Case) -> Commented:
    """Code computing the expected output in float64 from the logical keys and values."""
    scale = case.scale if case.scale is not None else 1.0 / math.sqrt(case.head_dim)
    spans, start = [], 0
    for n, need in zip(case.seq_lens, case.needs, strict=True):
        spans.append((start * case.block_size, n))
        start += need
    if not case.seq_lens:
        return (f"expected = torch.zeros(0, {case.num_heads}, {case.head_dim}, dtype=torch.float64)", "no sequences, no rows", "没有序列，就没有行")
    return (
        "expected = torch.stack([attend(query[i].double().cpu(), keys.flatten(0, 1)[a:a + n].double(), "
        f"values.flatten(0, 1)[a:a + n].double(), {scale!r}) for i, (a, n) in enumerate({spans})])",
        "each sequence's tokens, in logical order",
        "每个序列的 token，按逻辑顺序",
    )


# -- strategies ---------------------------------------------------------------------------

# Sizes as choices.one_of alternatives: a constant, a range [low, high], options (a list).
_LENGTHS: tuple[choices.Alternative, ...] = (1, (1, 64), (65, 512))
_BLOCK_SIZES: tuple[choices.Alternative, ...] = ([1, 2, 3, 4, 5, 7, 8, 16], (1, 33))
_HEAD_DIMS: tuple[choices.Alternative, ...] = ([1, 2, 4, 8, 16, 32, 64, 128], (1, 40))

# What a drawn call's sizes look like: small most often; now and then one size far out, the
# others kept small so that the tensors stay a few MB (far_cases goes further still).
SMALL, LONG, BIG_BLOCK, WIDE_HEAD, MANY = "small", "long", "big block", "wide head", "many sequences"
SIZE_CLASSES = (SMALL,) * 8 + (LONG, BIG_BLOCK, WIDE_HEAD, MANY)
DRAWN_MAX = {"seq_len": 4096, "block_size": 4096, "head_dim": 256, "num_seqs": 48}  # the ends hypothesis draws up to


def _sizes(draw: st.DrawFn) -> tuple[int, list[int], int, int]:
    """(block_size, seq_lens, head_dim, num_kv_heads) of one size class (drawn as choices.py says why)."""
    size = choices.pick(draw, SIZE_CLASSES)
    head_dim = choices.one_of(draw, *_HEAD_DIMS)
    kv_heads = choices.pick(draw, [1, 2, 3, 4])
    num_seqs = choices.integer(draw, 1, 4)
    lengths = _LENGTHS
    if size == LONG:
        block_size = choices.one_of(draw, *_BLOCK_SIZES, (34, 64))
        lengths = ((513, DRAWN_MAX["seq_len"]), DRAWN_MAX["seq_len"])
        head_dim, kv_heads, num_seqs = min(head_dim, 16), min(kv_heads, 2), min(num_seqs, 2)
    elif size == BIG_BLOCK:
        block_size = choices.one_of(draw, (34, DRAWN_MAX["block_size"]), [2048, 2049, 4095, DRAWN_MAX["block_size"]])
        lengths = ((1, 2 * block_size + 1),)
        head_dim, kv_heads, num_seqs = min(head_dim, 8), min(kv_heads, 2), min(num_seqs, 2)
    elif size == WIDE_HEAD:
        block_size = choices.one_of(draw, *_BLOCK_SIZES)
        head_dim = choices.one_of(draw, (129, DRAWN_MAX["head_dim"]), DRAWN_MAX["head_dim"])
        lengths = ((1, 64),)
    elif size == MANY:
        block_size = choices.one_of(draw, *_BLOCK_SIZES)
        num_seqs = choices.one_of(draw, (5, DRAWN_MAX["num_seqs"]), DRAWN_MAX["num_seqs"])
        lengths = ((1, 64),)
        head_dim, kv_heads = min(head_dim, 16), min(kv_heads, 2)
    else:
        block_size = choices.one_of(draw, *_BLOCK_SIZES)
    seq_lens = []
    for _ in range(num_seqs):
        if choices.boolean(draw):  # on a block boundary
            seq_lens.append(block_size * choices.integer(draw, 1, max(1, 64 // block_size)))
        else:
            seq_lens.append(choices.one_of(draw, *lengths))
    return block_size, seq_lens, head_dim, kv_heads


@st.composite
def cases(draw: st.DrawFn, force: str | None = None, device: str = "cpu", avoid: frozenset[str] = frozenset()) -> Case:
    """A case from the whole domain; `force` keeps one feature on, `avoid` some off, the others are drawn."""

    def on(feature: str) -> bool:
        # Each feature on three times in four: every feature item needs its own random cases.
        return force == feature or (feature not in avoid and choices.integer(draw, 0, 3) > 0)

    block_size, seq_lens, head_dim, kv_heads = _sizes(draw)
    case = Case(
        seq_lens=tuple(seq_lens),
        block_size=block_size,
        head_dim=head_dim,
        num_kv_heads=kv_heads,
        index_dtype=choices.pick(draw, ["int32", "int64"]),
        salt=choices.integer(draw, 1, 2**20),
        device=device,
        offset=choices.pick(draw, [0.0, 1.0]),
    )
    return _with_features(case, on, lambda label, options: choices.pick(draw, options),
                          lambda label, low, high: choices.integer(draw, low, high))


Pick = Callable[[str, Sequence[Any]], Any]  # (label, options) -> one of them
Number = Callable[[str, int, int], int]  # (label, low, high) -> an int in [low, high]


def _with_features(case: Case, on: Callable[[str], bool], pick: Pick, number: Number) -> Case:
    """The case with each feature `on` says, its settings from `pick` and `number`."""
    if on(GQA):
        case = replace(case, group=pick("group", [2, 3, 4, MAX_GROUP]))
    if on(PAGING):
        case = replace(case, shuffle=number("shuffle", 1, 2**16), padding=number("padding", 0, 3), poison=True)
    if on(LOW_PRECISION):
        case = replace(case, dtype=pick("dtype", ["float16", "bfloat16"]))
    if on(SCALE):
        style = pick("scale style", ["keyword", "positional"])
        # Any float: negative ones too, as the contract says.  Not 0.0 (uniform weights, its own
        # corners): there the logits do not count, so a scale applied twice, or to the wrong
        # thing, is right, and such cases would pay the feature items for it.
        scale = pick("scale", [0.05, 0.3, 1.0, 2.0, round(1 / math.sqrt(case.head_dim), 6), -0.3, -1.0])
        # Logits in the hundreds test the softmax's stability in float32.  Not in float16 or
        # bfloat16: there a computation in the dtype itself (accepted: dense.tolerance) rounds
        # such a logit by 0.05 to 0.5, as rounding its inputs to the dtype would move it, and a
        # tolerance wide enough for that would pass almost anything.
        boosts = [1.0, 30.0, 100.0, -100.0] if case.dtype == "float32" else [1.0]
        case = replace(case, scale=scale, scale_style=style, boost=pick("boost", boosts))
    return case


# -- far cases: one per size, every grading, its sizes from the grading's seed ------------------

FAR = {"seq_len": 32768, "num_blocks": 1000, "block_size": 4096, "head_dim": 256, "num_seqs": 24}  # what each reaches at least (block_size, head_dim: at most)


@functools.lru_cache(maxsize=8)
def far_cases(seed: int, device: str = "cpu") -> tuple[Case, ...]:
    """Four calls, each one size far out: a sequence of 32k to 80k tokens over thousands of blocks;
    blocks of 1025 to 4096 slots (4096 itself one grading in two), the first sequence one token
    over a multiple of the block; heads of 129 to 256 dims (256 one in two); 24 to 80 sequences.
    The other sizes stay small.  Features are drawn too: every one for the last two; GQA and
    paging for the first two, whose last token must count (`_salient`): in float32 at the
    default scale, with the salt among eight that gives that token the most weight."""
    rng = random.Random(f"attention far cases {seed}")

    def on(feature: str) -> bool:
        return rng.random() < 0.5

    def on_layout(feature: str) -> bool:
        return feature in (GQA, PAGING) and rng.random() < 0.5

    def pick(label: str, options: Sequence[Any]) -> Any:
        return rng.choice(options)

    def number(label: str, low: int, high: int) -> int:
        return rng.randint(low, high)

    salt = rng.randint(1, 2**20)
    long_len = int(2 ** rng.uniform(15, 16.3))
    long = Case(seq_lens=(long_len, rng.randint(1, 300))[: rng.randint(1, 2)], block_size=rng.randint(8, 32), head_dim=rng.choice([1, 2, 4, 8, 16]),
                num_kv_heads=rng.choice([1, 2]), index_dtype=rng.choice(["int32", "int64"]), device=device)
    block = rng.choice([4096, 4096, 4095, rng.randint(1025, 4096)])
    # The first sequence one token over a multiple of the block (int(n / block_size + 0.999) is short there).
    lengths = (block * rng.randint(1, 2) + 1, *(rng.randint(1, 3 * block) for _ in range(rng.randint(0, 2))))
    big_block = Case(seq_lens=lengths, block_size=block, head_dim=rng.randint(1, 8), num_kv_heads=rng.choice([1, 2]), device=device)
    wide = Case(seq_lens=tuple(rng.randint(1, 160) for _ in range(rng.randint(1, 3))), block_size=rng.randint(1, 33),
                head_dim=rng.choice([256, 256, rng.randint(129, 256)]), num_kv_heads=rng.randint(1, 4), salt=salt + 2, device=device)
    many_bs = rng.randint(1, 16)
    many = Case(seq_lens=tuple(rng.choice([rng.randint(1, 300), many_bs * rng.randint(1, 8)]) for _ in range(rng.randint(24, 80))),
                block_size=many_bs, head_dim=rng.choice([2, 4, 8, 16, 32]), num_kv_heads=rng.choice([1, 2]), salt=salt + 3, device=device)
    salient = [_salient(_with_features(case, on_layout, pick, number), [rng.randint(1, 2**20) for _ in range(8)]) for case in (long, big_block)]
    return (*salient, *(_with_features(case, on, pick, number) for case in (wide, many)))


def _salient(case: Case, salts: list[int]) -> Case:
    """The case with the salt that gives its first sequence's last token the most weight (in the
    query head where it weighs most): leaving out the last token, or a few, shows there even
    among 80,000 tokens, where one token of about equal weight would be under the tolerance."""
    n = case.seq_lens[0]
    best, best_weight = salts[0], -1.0
    for salt in salts:
        query = fill((1, case.num_kv_heads, MAX_GROUP, case.head_dim), salt)[0, :, case.member : case.member + case.group]  # [kv, g, d]
        keys = _prefix(n * case.num_kv_heads * case.head_dim, salt + 1).reshape(n, case.num_kv_heads, case.head_dim)
        logits = np.einsum("kgd,nkd->kgn", query, keys) / math.sqrt(case.head_dim)
        weights = np.exp(logits - logits.max(axis=2, keepdims=True))
        weight = float((weights[:, :, -1] / weights.sum(axis=2)).max())
        if weight > best_weight:
            best, best_weight = salt, weight
    return replace(case, salt=best)


def _prefix(count: int, salt: int) -> np.ndarray:
    """The first `count` values `fill` gives any shape with this salt (it numbers values in order)."""
    return fill((count,), salt)


def histories(force: str | None = None, device: str = "cpu", avoid: frozenset[str] = frozenset()) -> st.SearchStrategy[list[Case]]:
    """One to three calls in one process: state kept between calls must not change a result."""
    return st.lists(cases(force, device, avoid), min_size=1, max_size=3)
