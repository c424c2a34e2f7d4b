"""TODO 4's domain: an example (a table, a length, reads, writes and growth), the values the pool
holds, and how the reproduction writes it; the corner examples, the drawn ones and the far ones.

The slots the request reads hold recognisable values (10000 * write + 100 * block + slot +
d / 100; in a large pool, write * 2**22 + (block * block_size + slot) * head_dim + d, exact in
float32); every other slot is NaN.  Sizes reach across orders of magnitude: hypothesis draws
tables of hundreds of blocks, blocks of thousands of slots and heads of hundreds of dims now
and then, and every grading adds one example per size far past those (`far_examples`, from
the grading's seed): tables of 1,000 to 5,000 blocks in pools of up to 70,000, sequences of 32k
to 80k tokens, block_size to 4096, head_dim to 256.  A long table is an affine permutation,
(stride * i + shift) % num_blocks, which its reproduction writes as that formula.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

import numpy as np
from hypothesis import strategies as st

from grader.checks import choices


@dataclass(frozen=True)
class Example:
    num_blocks: int
    block_size: int
    head_dim: int
    table: tuple[int, ...]
    seq_len: int
    events: tuple[tuple[str, int], ...] = (("read", 0),)  # ("read" | "write" | "rebind" | "swap", 0), ("grow", tokens)

    @property
    def readable(self) -> bool:
        """Values 10000 * write + 100 * block + slot + d / 100 (else the flat numbering, exact in float32)."""
        return self.num_blocks < 100 and self.block_size < 100 and self.head_dim < 100

    @property
    def formula(self) -> tuple[int, int] | None:
        """(stride, shift) when the table is (stride * i + shift) % num_blocks and long enough to write so."""
        table, n = self.table, self.num_blocks
        if len(table) <= 16:
            return None
        stride, shift = (table[1] - table[0]) % n, table[0]
        if all(b == (stride * i + shift) % n for i, b in enumerate(table)):
            return stride, shift
        return None

    def full(self) -> Example:
        """The same example with every block full: no tail for truncation to cut."""
        bs, used = self.block_size, len(self.table)
        events: list[tuple[str, int]] = []
        for kind, n in self.events:
            if kind == "grow":
                blocks = min(-(-n // bs), self.num_blocks - used)
                if not blocks:
                    continue
                used += blocks
                n = blocks * bs
            events.append((kind, n))
        return replace(self, seq_len=len(self.table) * bs, events=tuple(events))


FLAT_WRITE = 1 << 22  # the flat numbering: write * 2**22 + slot number (a pool of at most 2**22 values, writes 0 to 3)


def pool_values(ex: Example, table: list[int], seq_len: int, write: int) -> np.ndarray:
    pool = np.full((ex.num_blocks, ex.block_size, ex.head_dim), np.nan, dtype=np.float32)
    positions = np.arange(seq_len)
    blocks, slots = np.asarray(table, dtype=np.int64)[positions // ex.block_size], positions % ex.block_size
    if ex.readable:
        fraction = np.arange(ex.head_dim, dtype=np.float32) / np.float32(100)
        pool[blocks, slots] = (10000 * write + 100 * blocks + slots).astype(np.float32)[:, None] + fraction
    else:
        pool[blocks, slots] = (write * FLAT_WRITE + (blocks * ex.block_size + slots) * ex.head_dim)[:, None] + np.arange(ex.head_dim)
    return pool


def set_up_lines(ex: Example) -> list[tuple[str, str, str]]:
    bs, hd = ex.block_size, ex.head_dim
    formula = ex.formula
    table = f"[({formula[0]} * i + {formula[1]}) % {ex.num_blocks} for i in range({len(ex.table)})]" if formula else str(list(ex.table))
    plain = [
        f"m = KVCacheManager(num_blocks={ex.num_blocks}, block_size={bs}, head_dim={hd})",
        f"r = Request(request_id=0, prompt_len={ex.seq_len})",
        f"r.block_table = {table}",
    ]
    if not ex.readable:
        body = [
            "    m.physical_kv_cache.fill_(float('nan'))",
            f"    p = torch.arange(r.seq_len); b, s = torch.tensor(r.block_table)[p // {bs}], p % {bs}",
            f"    m.physical_kv_cache[b, s] = ((write * 2**22 + (b * {bs} + s) * {hd})[:, None] + torch.arange({hd})).float()",
            "def expected():",
            f"    p = torch.arange(r.seq_len); return m.physical_kv_cache[torch.tensor(r.block_table)[p // {bs}], p % {bs}]",
            "fill(0)",
        ]
        comment = ("the slots r reads hold write * 2**22 + (block * block_size + slot) * head_dim + d; every other slot NaN",
                   "r 读取的槽位为 2**22 * write + (块 * block_size + 槽) * head_dim + d；其余槽位为 NaN")
        return [*((line, "", "") for line in plain), ("def fill(write):", *comment), *((line, "", "") for line in body)]
    body = [
        "    m.physical_kv_cache.fill_(float('nan'))",
        "    for p in range(r.seq_len):",
        f"        b, s = r.block_table[p // {bs}], p % {bs}",
        f"        m.physical_kv_cache[b, s] = 10000 * write + 100 * b + s + torch.arange({hd}) / 100",
        "def expected():",
        f"    return torch.stack([m.physical_kv_cache[r.block_table[p // {bs}], p % {bs}] for p in range(r.seq_len)])",
        "fill(0)",
    ]
    return [
        *((line, "", "") for line in plain),
        ("def fill(write):", "the slots r reads hold 10000 * write + 100 * block + slot + d / 100; every other slot NaN", "r 读取的槽位为 10000 * write + 100 * 块 + 槽 + d / 100；其余槽位为 NaN"),
        *((line, "", "") for line in body),
    ]


def _affine(n: int, used: int, stride: int, shift: int) -> list[int]:
    """`used` distinct blocks of n: (stride * i + shift) % n, stride made prime to n."""
    stride = max(1, stride % n)
    while math.gcd(stride, n) != 1:
        stride += 1
    return [(stride * i + shift) % n for i in range(used)]


# What a drawn example's sizes look like: small most often; now and then one size far out
# (far_examples goes further still, every grading).
SMALL, LONG_TABLE, BIG_BLOCK, WIDE_HEAD = "small", "long table", "big block", "wide head"
SIZE_CLASSES = (SMALL,) * 5 + (LONG_TABLE, BIG_BLOCK, WIDE_HEAD)
DRAWN_MAX = {"num_blocks": 600, "block_size": 4096, "head_dim": 256}


@st.composite
def examples(draw: st.DrawFn, tails: float, ordered: bool = False) -> Example:
    """`ordered`: one block, or blocks in physical order (truncation judged where table order broke)."""
    # Drawn as choices.py says why: the same choices as the strategies they stand for.
    size = choices.pick(draw, SIZE_CLASSES)
    block_size = choices.one_of(draw, [1, 2, 3, 4, 5, 8], (1, 20))
    num_blocks = choices.integer(draw, 1, 10)
    head_dim = choices.integer(draw, 1, 5)
    if size == LONG_TABLE:
        num_blocks = choices.one_of(draw, (11, DRAWN_MAX["num_blocks"]), DRAWN_MAX["num_blocks"])
        block_size, head_dim = min(block_size, 8), min(head_dim, 3)
    elif size == BIG_BLOCK:
        block_size = choices.one_of(draw, (21, DRAWN_MAX["block_size"]), [2049, 4095, DRAWN_MAX["block_size"]])
        num_blocks, head_dim = min(num_blocks, 3), min(head_dim, 2)
    elif size == WIDE_HEAD:
        head_dim = choices.one_of(draw, (6, DRAWN_MAX["head_dim"]), DRAWN_MAX["head_dim"])
    # One block a fifth of the time (a result that is a view of it shows there); several otherwise.
    single = choices.integer(draw, 0, 4 if not ordered else 1) == 0
    used = 1 if single else choices.integer(draw, min(2, num_blocks), num_blocks)
    if num_blocks > 10:  # a long table: an affine permutation, written as its formula
        table = _affine(num_blocks, used, choices.integer(draw, 1, num_blocks), choices.integer(draw, 0, num_blocks - 1))
    else:
        table = choices.permutation(draw, num_blocks)[:used]
    if ordered or choices.integer(draw, 0, 3) == 0:  # physical order a quarter of the time
        table = sorted(table)
    elif table == sorted(table):
        table = table[::-1]  # otherwise never physical order
    tail = draw(st.floats(0, 1), label="tail?") < tails
    seq_len = choices.integer(draw, (used - 1) * block_size + 1, used * block_size) if tail else used * block_size
    first = seq_len
    events: list[tuple[str, int]] = [("read", 0)]
    for _ in range(choices.integer(draw, 0, 3)):
        kind = choices.pick(draw, ["read", "write", "grow", "rebind", "swap"])
        if kind == "grow":
            room = (num_blocks - used) * block_size + (used * block_size - seq_len)
            if room <= 0:
                continue
            n = choices.integer(draw, 1, room)
            used = math.ceil((seq_len + n) / block_size)
            seq_len += n
            events += [("grow", n), ("read", 0)]
        else:
            events.append((kind, 0))
    if events[-1][0] != "read":
        events.append(("read", 0))
    return Example(num_blocks, block_size, head_dim, tuple(table), first, tuple(events))


# -- far examples: one per size, every grading, their sizes from the grading's seed --------------

FAR = {"table": 1000, "seq_len": 32768, "block_size": 4096, "head_dim": 256}  # what each reaches (block_size, head_dim: at most)


def far_examples(seed: int) -> list[Example]:
    """Four examples, each one size far out, the others small: a table of 1,000 to 5,000 blocks in
    a pool of up to 70,000 (ids past 32,767 one grading in two); 32k to 80k tokens; blocks of
    1025 to 4096 slots (4096 itself one grading in two) with a prompt one token over a block or
    anywhere; heads of 129 to 256 dims (256 one in two).  Tables are shuffled (an affine
    permutation), the last block partly used but where a grading draws it full."""
    rng = random.Random(f"reconstruction far examples {seed}")
    found = []
    read_write_read = (("read", 0), ("write", 0), ("read", 0))

    def example(num_blocks: int, block_size: int, head_dim: int, used: int, seq_len: int, events: tuple[tuple[str, int], ...] = (("read", 0),)) -> Example:
        table = _affine(num_blocks, used, rng.randint(2, max(2, num_blocks - 1)), rng.randrange(num_blocks))
        if table == sorted(table):
            table.reverse()  # never physical order
        return Example(num_blocks, block_size, head_dim, tuple(table), seq_len, events)

    used = int(2 ** rng.uniform(math.log2(FAR["table"]), math.log2(5000)))
    bs = rng.randint(1, 4)
    found.append(example(rng.randint(used, 70_000), bs, rng.randint(1, 2), used, used * bs - rng.randint(0, bs - 1), read_write_read))
    tokens = int(2 ** rng.uniform(15, 16.3))
    bs = rng.randint(8, 64)
    used = math.ceil(tokens / bs)
    found.append(example(used + rng.randint(0, used), bs, 1, used, tokens))
    bs = rng.choice([4096, 4096, 4095, rng.randint(1025, 4096)])
    used = rng.randint(2, 4)
    seq_len = rng.choice([(used - 1) * bs + 1, rng.randint((used - 1) * bs + 1, used * bs)])
    found.append(example(used + rng.randint(0, 2), bs, rng.randint(1, 2), used, seq_len, read_write_read))
    hd = rng.choice([256, 256, rng.randint(129, 256)])
    bs = rng.randint(1, 20)
    used = rng.randint(2, 8)
    found.append(example(used + rng.randint(0, 8), bs, hd, used, used * bs - rng.randint(0, bs - 1), (("read", 0), ("rebind", 0), ("read", 0))))
    return found


# Corner cases: block size 1; a tail; a shuffled table; reads after the pool is written
# again, after the request grows and after its table is replaced; sorted tables with a tail
# (truncation alone).
CORNERS = (
    Example(3, 1, 2, (2, 0, 1), 3),
    Example(5, 3, 2, (4, 1), 4),
    Example(4, 4, 1, (0,), 1),
    Example(4, 2, 3, (3, 1, 0, 2), 8),
    Example(6, 3, 1, (5, 0, 2), 9, (("read", 0), ("write", 0), ("read", 0))),
    Example(6, 4, 2, (3, 1), 6, (("read", 0), ("grow", 3), ("read", 0), ("write", 0), ("read", 0))),
    Example(5, 3, 2, (0, 1), 4),
    Example(6, 5, 1, (0, 1, 2), 11, (("read", 0), ("grow", 2), ("read", 0))),
    Example(5, 7, 3, (2, 4, 0), 15),
    Example(3, 2, 5, (0, 1, 2), 5, (("read", 0), ("write", 0), ("read", 0))),
    Example(4, 3, 2, (2, 0), 5, (("read", 0), ("rebind", 0), ("read", 0))),
    # one block, read, then the pool written or the request grown: the first result must not follow
    Example(3, 4, 2, (1,), 3, (("read", 0), ("write", 0), ("read", 0))),
    Example(3, 3, 1, (2,), 2, (("read", 0), ("grow", 2), ("read", 0))),
    # the table replaced by another of the same length: a result kept for the old table must not be read again
    Example(5, 2, 1, (0, 1), 3, (("read", 0), ("swap", 0), ("read", 0))),
    Example(2, 3, 1, (1, 0), 6, (("read", 0), ("swap", 0), ("read", 0))),
)
