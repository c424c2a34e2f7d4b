"""TODO 2 and TODO 3: the block allocator, in corner cases and in hypothesis state machines.

Every item drives the same model (grader/checks/pool.py) with every invariant on; the item
only decides which property fails it.  Domain: any positive num_blocks, block_size and
head_dim; prompts on and around block boundaries and anywhere; several requests interleaved;
release and reuse of blocks; request ids used again after their request was released; a
released request prefilled again.

TODO 3 items never call the student's prefill: a request's blocks are set up directly
(`r.block_table = [m.free_blocks.pop(i) for i in ...]`, what a correct prefill leaves), so a
prefill bug never costs TODO 3 points.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

from hypothesis import given, reject, seed
from hypothesis import strategies as st

from grader.checks import choices
from grader.checks.base import Inconclusive, ItemContext, Need, hypothesis_settings
from grader.checks.pool import Pool, Req
from grader.checks.running import Explore, grade_item
from grader.results import Failure

# Corner cases, as small programs (the form Pool.program records, so any example can be run
# again): ("pool", num_blocks, block_size, head_dim), ("new", prompt_len, request_id),
# ("prefill" | "decode" | "release", request index), ("place", request index, free-list
# indices popped in order), ("permute", the free list's new order as indices), ("other",
# num_blocks, block_size, prompt_len, request_id): another manager and the TODO's call on it.
Program = tuple[tuple[Any, ...], ...]


def _placed(*requests: tuple[int, int, tuple[int, ...]]) -> tuple[tuple[Any, ...], ...]:
    """New requests given blocks directly: (prompt_len, request_id, free-list indices) each."""
    ops: list[tuple[Any, ...]] = []
    for prompt_len, request_id, indices in requests:
        ops += [("new", prompt_len, request_id), ("place", None, indices)]
    return tuple(ops)


PREFILL_CORNERS: tuple[Program, ...] = (
    # block_size 1: one block per token; exactly enough; then nothing left
    (("pool", 3, 1, 2), ("new", 1, 0), ("prefill", 0), ("new", 2, 1), ("prefill", 1), ("new", 1, 2), ("prefill", 2)),
    # exact multiple, just over, under one block; then OOM with blocks still free
    (("pool", 4, 4, 1), ("new", 4, 0), ("prefill", 0), ("new", 5, 1), ("prefill", 1), ("new", 3, 2), ("prefill", 2), ("new", 5, 3), ("prefill", 3)),
    # block size 3 (not a power of two); the whole pool in one request; OOM on an empty pool
    (("pool", 5, 3, 3), ("new", 15, 0), ("prefill", 0), ("new", 1, 1), ("prefill", 1), ("release", 0), ("new", 7, 2), ("prefill", 2), ("new", 6, 3), ("prefill", 3)),
    # release makes the free list non-contiguous; OOM there must leave it exactly as it was
    (("pool", 5, 2, 1), ("new", 2, 0), ("prefill", 0), ("new", 2, 1), ("prefill", 1), ("new", 2, 2), ("prefill", 2), ("release", 1),
     ("new", 7, 3), ("prefill", 3), ("new", 6, 4), ("prefill", 4)),
    # request ids used again after release; a released request prefilled again
    (("pool", 4, 2, 2), ("new", 3, 0), ("prefill", 0), ("new", 4, 1), ("prefill", 1), ("release", 0), ("new", 4, 0), ("prefill", 2),
     ("release", 1), ("prefill", 0), ("new", 1, 1), ("prefill", 3)),
    # a large block size and a prompt just over it
    (("pool", 2, 16, 1), ("new", 17, 0), ("prefill", 0), ("new", 1, 1), ("prefill", 1)),
    # the free list in another order (any order is legal): an OOM must leave it exactly so
    (("pool", 6, 2, 1), ("new", 2, 0), ("prefill", 0), ("permute", (3, 0, 4, 1, 2)), ("new", 11, 1), ("prefill", 1),
     ("new", 4, 2), ("prefill", 2), ("permute", (2, 1, 0)), ("new", 7, 3), ("prefill", 3)),
    # a block size in the thousands: one token over a block still needs one more
    (("pool", 3, 1000, 1), ("new", 1001, 0), ("prefill", 0), ("new", 1000, 1), ("prefill", 1)),
    # the largest block size drawn: k * 4096 + 1 tokens need k + 1 blocks (a float ceiling is off there)
    (("pool", 5, 4096, 1), ("new", 4097, 0), ("prefill", 0), ("new", 2 * 4096 + 1, 1), ("prefill", 1), ("new", 4095, 2), ("prefill", 2)),
    # block sizes 5 and 7 over bigger pools
    (("pool", 9, 5, 1), ("new", 11, 5), ("prefill", 0), ("new", 25, 9), ("prefill", 1), ("new", 10, 3), ("prefill", 2), ("new", 5, 4), ("prefill", 3)),
    (("pool", 3, 7, 1), ("new", 14, 0), ("prefill", 0), ("new", 8, 1), ("prefill", 1), ("new", 7, 1), ("prefill", 2)),
    # block sizes whose reciprocal is inexact (91, 1200): n * (1 / bs) lands above k at n = k * bs
    (("pool", 4, 91, 1), ("new", 3 * 91, 0), ("prefill", 0), ("new", 1, 1), ("prefill", 1)),
    (("pool", 8, 1200, 1), ("new", 7 * 1200, 0), ("prefill", 0), ("new", 1200, 1), ("prefill", 1)),
    # a request released and let go of (`del r0`): the next Request, maybe at its address, is a stranger
    (("pool", 4, 2, 1), ("new", 3, 0), ("prefill", 0), ("release", 0), ("forget", 0), ("new", 5, 1), ("prefill", 1), ("release", 1),
     ("forget", 1), ("new", 8, 2), ("prefill", 2)),
    # another manager, its request with the same id, between two calls on this one: managers share nothing
    (("pool", 4, 2, 1), ("new", 3, 0), ("prefill", 0), ("other", 3, 2, 5, 0), ("new", 4, 1), ("prefill", 1), ("other", 2, 4, 1, 1),
     ("new", 1, 2), ("prefill", 2)),
)

DECODE_CORNERS: tuple[Program, ...] = (
    # block_size 1: every decode takes a block, until the pool is full
    (("pool", 3, 1, 2), *_placed((1, 0, (0,))), ("decode", 0), ("decode", 0), ("decode", 0)),
    # from an exact multiple: the first decode opens a block, the next ones fit, then OOM
    (("pool", 2, 4, 1), *_placed((4, 0, (0,))), *(("decode", 0),) * 5),
    # two requests, block size 3; OOM for one; release of the other lets it grow
    (("pool", 3, 3, 1), *_placed((2, 0, (2,)), (3, 1, (0,))), ("decode", 0), ("decode", 0), ("decode", 1), ("release", 0), ("decode", 1)),
    # a block size in the thousands: the decode past the block's last slot takes one more
    (("pool", 2, 1000, 1), *_placed((999, 0, (1,))), ("decode", 0), ("decode", 0), ("decode", 0)),
    # the largest block size drawn, from an exact multiple
    (("pool", 3, 4096, 1), *_placed((2 * 4096 - 1, 0, (2, 0))), ("decode", 0), ("decode", 0), ("decode", 0)),
    # a full pool: decodes that need no block succeed, the one that needs a block is an OOM
    (("pool", 1, 4, 1), *_placed((2, 0, (0,))), ("decode", 0), ("decode", 0), ("decode", 0)),
    # a request id used again after release
    (("pool", 3, 2, 2), *_placed((2, 0, (1,))), ("release", 0), *_placed((1, 0, (0,))), ("decode", 1), ("decode", 1), ("decode", 1)),
    # a request decoded, released, and its id used again: nothing of the old request may stick
    (("pool", 4, 2, 1), *_placed((3, 7, (0, 1))), ("decode", 0), ("release", 0), *_placed((1, 7, (2,))), ("decode", 1), ("decode", 1), ("decode", 1)),
    # a request grown, released and let go of (`del r0`): the next Request, maybe at its address, is a stranger
    (("pool", 4, 2, 1), *_placed((3, 0, (0, 1))), ("decode", 0), ("decode", 0), ("release", 0), ("forget", 0), *_placed((1, 1, (0,))),
     ("decode", 1), ("decode", 1), ("decode", 1), ("decode", 1)),
    # the same, then the pool filled: the new request's decode past its blocks is an OOM, whatever the dead one held
    (("pool", 3, 2, 1), *_placed((3, 0, (0, 1))), ("decode", 0), ("decode", 0), ("release", 0), ("forget", 0),
     *_placed((4, 1, (0, 0)), (1, 2, (0,))), ("decode", 1), ("decode", 2), ("decode", 1)),
    # block size 5, interleaved, non-contiguous free list
    (("pool", 4, 5, 1), *_placed((5, 0, (2,)), (9, 1, (0, 1))), ("decode", 0), ("decode", 1), ("decode", 1), *(("decode", 0),) * 5),
    # block size 7, a long run of decodes in one block
    (("pool", 2, 7, 1), *_placed((1, 3, (1,))), *(("decode", 0),) * 7),
    # the free list in another order (any order is legal): the block taken is the one removed
    (("pool", 6, 2, 1), *_placed((2, 0, (1,))), ("permute", (3, 0, 4, 2, 1)), ("decode", 0), ("decode", 0), ("permute", (2, 0, 1, 3)),
     ("decode", 0), ("decode", 0), ("decode", 0)),
    (("pool", 4, 1, 2), *_placed((1, 0, (0,))), ("permute", (2, 0, 1)), ("decode", 0), ("decode", 0)),
    # block sizes whose reciprocal is inexact (91, 1200): the decode to k * bs tokens fits, the next one grows
    (("pool", 4, 91, 1), *_placed((3 * 91 - 1, 0, (0, 0, 0))), ("decode", 0), ("decode", 0)),
    (("pool", 8, 1200, 1), *_placed((7 * 1200 - 1, 0, (0,) * 7)), ("decode", 0), ("decode", 0)),
    # another manager, its request with the same id, between decodes on this one: managers share nothing
    (("pool", 3, 2, 1), *_placed((2, 0, (1,))), ("other", 2, 2, 2, 0), ("decode", 0), ("other", 3, 1, 1, 0), ("decode", 0), ("decode", 0),
     ("decode", 0)),
)


# -- far cases: every grading, pools of hundreds to thousands and of 100,000 blocks and more ----

FAR_POOL = 100_000  # blocks a grading's largest pool has at least
HUNDREDS = (100, 4096)  # a pool where an exact fit is taken whole (a watermark of 1% refuses it from 100 blocks)
BIG_TABLE = (1100, 8192)  # blocks of the huge pool's last prefill: past a cap of 1,024 blocks per sequence


def far_programs(seed: int, todo: str) -> tuple[Program, ...]:
    """Two programs drawn from the grading's seed: a pool of 100 to 4096 blocks where every free
    block is taken at once (an exact fit), and a pool of 100,000 to 125,000 blocks, its free list
    shuffled, where blocks with ids in the tens of thousands are handed out and the pool is
    refused (prefill: far too many blocks asked, then a table of thousands of blocks; decode: the
    whole pool held).  Block sizes are small there, so that the pool tensor stays small."""
    rng = random.Random(f"allocation far cases {todo} {seed}")
    hundreds = max(HUNDREDS[0], int(2 ** rng.uniform(math.log2(HUNDREDS[0]), math.log2(HUNDREDS[1]))))
    huge = rng.randint(FAR_POOL, FAR_POOL * 5 // 4)
    if todo == "TODO 2":
        return _far_prefill_hundreds(rng, hundreds), _far_prefill_huge(rng, huge)
    return _far_decode_hundreds(rng, hundreds), _far_decode_huge(rng, huge)


def _affine(rng: random.Random, n: int) -> tuple[int, ...]:
    """A shuffled order of n items that the reproduction writes as a formula, (a * i + b) % n; its
    first item in the upper half (the first block handed out has an id past n / 2)."""
    a = rng.randint(2, max(2, n - 1))
    while math.gcd(a, n) != 1:
        a += 1
    b = rng.randrange(n // 2, n)
    return tuple([(a * i + b) % n for i in range(n)])


def _tokens(rng: random.Random, blocks: int, block_size: int) -> int:
    """A prompt that needs exactly `blocks` blocks (its last one full or not)."""
    return blocks * block_size - rng.randint(0, block_size - 1)


def _far_prefill_hundreds(rng: random.Random, n: int) -> Program:
    bs = rng.choice([1, 2, 3, 5, 8, 16])
    first = rng.randint(1, n // 3)
    return (("pool", n, bs, 1), ("new", _tokens(rng, first, bs), 0), ("prefill", 0),
            ("new", _tokens(rng, n - first, bs), 1), ("prefill", 1),  # every free block: an exact fit
            ("new", 1, 2), ("prefill", 2),  # an empty pool
            ("release", 0), ("new", first * bs + 1, 3), ("prefill", 3),  # one block short
            ("new", _tokens(rng, first, bs), 0), ("prefill", 4))  # an exact fit again, the id used again


def _far_prefill_huge(rng: random.Random, n: int) -> Program:
    bs = rng.choice([1, 2, 4])
    # Four calls (each reads back the whole free list): blocks with ids anywhere in the pool,
    # more than the whole pool (an OOM with every block free but a few, the list shuffled: it must
    # come back in the same order), then a table past any small cap (a thousand to 8,192 blocks:
    # `max_blocks_per_seq = 1024` refuses it; a pop(0) loop or a set difference takes it well
    # inside a call's 10 s).
    big = int(2 ** rng.uniform(math.log2(BIG_TABLE[0]), math.log2(BIG_TABLE[1])))
    return (("pool", n, bs, 1), ("permute", _affine(rng, n)),
            ("new", _tokens(rng, rng.randint(4, 16), bs), 0), ("prefill", 0),
            ("new", (n + 1) * bs, 1), ("prefill", 1),
            ("new", _tokens(rng, big, bs), 2), ("prefill", 2))


def _far_decode_hundreds(rng: random.Random, n: int) -> Program:
    bs = rng.choice([1, 2, 3, 5, 8])
    # Every block but the last held, the request's last block full: the decode takes the last free block.
    return (("pool", n, bs, 1), ("new", (n - 1) * bs, 0), ("place", None, (0,) * (n - 1)),
            *(("decode", 0),) * (bs + 1),  # the last free block, decodes on a full pool, then an OOM
            ("release", 0), ("new", 1, 0), ("place", None, (-1,)), ("decode", 1), ("decode", 1))


def _far_decode_huge(rng: random.Random, n: int) -> Program:
    bs = rng.choice([1, 2])
    # The free list shuffled, every block but its first held, the request's last block full: the
    # decode takes the one block left (its id anywhere in the pool), then the pool is full.
    return (("pool", n, bs, 1), ("permute", _affine(rng, n)), ("new", (n - 1) * bs, 0), ("place", None, (-1,) * (n - 1)),
            *(("decode", 0),) * (bs + 1))


def run_program(ctx: ItemContext, program: Program, todo: str) -> None:
    ctx.begin(lambda c: run_program(c, program, todo))
    pool: Pool | None = None
    for op, *args in program:
        if op == "pool":
            pool = Pool(ctx, todo, *args)
        elif pool is None:
            return
        elif op == "new":
            pool.new_request(args[0], args[1])
        elif op == "place":
            index = len(pool.requests) - 1 if args[0] is None else args[0]
            if len(args[1]) <= len(pool.free):
                pool.place(pool.requests[index], list(args[1]))
        elif op == "permute":
            if sorted(args[0]) == list(range(len(pool.free))):
                pool.permute(list(args[0]))
        elif op == "other":
            pool.other_manager(*args)
        elif op == "forget":
            req = pool.requests[args[0]]
            if not req.table and not req.gone:
                pool.forget(req)
        else:
            # A step that no longer applies (the submission's earlier steps left the request
            # holding blocks, or none) is left out, as the state machines' preconditions do.
            req = pool.requests[args[0]]
            if (op == "prefill") != (not req.table) or req.gone:
                continue
            getattr(pool, op)(req)


# Small sizes most often; large ones too, up to the largest drawn, where a fraction like
# 1/4096 of a block decides whether one more block is needed (int(x + 0.999) is not a
# ceiling there).  Every range's ends are drawn on purpose, not left to chance.
LARGEST_BLOCK = 4096
BLOCK_SIZES = st.one_of(
    st.sampled_from([1, 2, 3, 4, 5, 7, 8, 16]),
    st.integers(1, 40),
    st.sampled_from([41, 256, 1000, 2048, 2049, 3000, LARGEST_BLOCK - 1, LARGEST_BLOCK]),
    st.integers(41, LARGEST_BLOCK),
)


# Pools of a few blocks most often (where a run of steps reaches a full pool), up to hundreds;
# head_dim up to 256.  The pool tensor stays under POOL_SLOTS values (num_blocks and head_dim
# are cut down where a large block size would pass it); far_programs go further.
NUM_BLOCKS = st.one_of(st.integers(1, 12), st.integers(1, 12), st.integers(13, 600))
# TODO 3's OOM rollback needs a decode on a full pool: tiny pools more often there (with pools of
# hundreds a third of the time, about one case in six reached it, and a correct decode could end
# its budget short of 20 such cases).  Large pools stay drawn, and far_programs adds the far ones.
DECODE_NUM_BLOCKS = st.one_of(st.integers(1, 3), st.integers(1, 12), st.integers(1, 12), st.integers(13, 600))
HEAD_DIMS = st.sampled_from([1, 2, 3, 1, 2, 3, 64, 256])
POOL_SLOTS = 2**16


def _bounded(num_blocks: int, block_size: int, head_dim: int) -> tuple[int, int]:
    num_blocks = max(1, min(num_blocks, POOL_SLOTS // block_size))
    return num_blocks, max(1, min(head_dim, POOL_SLOTS // (num_blocks * block_size)))


def draw_length(data: st.DataObject, block_size: int, blocks: int) -> int:
    """A prompt of about `blocks` blocks: on a boundary, one over, one under, or anywhere."""
    blocks = max(1, blocks)
    kind = choices.integer(data, 0, 4)
    if kind == 0:
        return 1
    if kind == 4:
        return choices.integer(data, 1, blocks * block_size)
    k = choices.integer(data, 1, blocks)
    return max(1, k * block_size + (0, 0, 1, -1)[kind])


DRAWN_ONE_BY_ONE = 16  # a longer free list is reordered, or taken from, by a formula drawn whole


def _order(data: st.DataObject, n: int) -> list[int]:
    """A new order of n free blocks: any permutation for a few, an affine one, (a * i + b) % n, for many."""
    if n <= DRAWN_ONE_BY_ONE:
        return choices.permutation(data, n)
    a, b = choices.integer(data, 1, n - 1), choices.integer(data, 0, n - 1)
    while math.gcd(a, n) != 1:
        a += 1
    return [(a * i + b) % n for i in range(n)]


def _live_ids(pool: Pool) -> set[int]:
    return {r.request_id for r in pool.held()}


def _request_id(data: st.DataObject, pool: Pool) -> int:
    """A new id, or the id of a request that holds no blocks (released, or refused by an OOM).

    Ids may be used again after release, never by two requests holding blocks at once: the
    contract does not say what that would mean.
    """
    reusable = sorted({r.request_id for r in pool.requests if not r.table} - _live_ids(pool))
    if reusable and choices.boolean(data):  # an id used again
        return choices.pick(data, reusable)
    return 1 + max((r.request_id for r in pool.requests), default=-1)


# What a step may do, by TODO.  Swarm testing (as hypothesis's own feature flags do for rules):
# each example turns each action on with odds 3 in 4, so that some run long without a release
# (a pool fills up) or without a decode.  Unlike those flags, a step never finds nothing to do:
# it takes an action that is on and can run, else any that can run, else nothing.  Hypothesis
# threw away an example whose flags left no rule able to run, after running its earlier steps
# (a third of TODO 3's examples).
ACTIONS = {"TODO 2": ("prefill_new", "permute", "prefill_again", "release"), "TODO 3": ("place", "decode", "release")}


class PoolMachine:
    """One example: a pool of drawn sizes, then a run of steps (`run_steps`).

    What hypothesis's RuleBasedStateMachine did with one rule, without its strategy draws per
    step (about half of the allocator's judge CPU went to choosing the one rule): the run's
    length is decided as that runner decides it (choices.should_stop), so shrinking drops steps
    the same way."""

    def __init__(self, ctx: ItemContext, todo: str) -> None:
        self.todo = todo
        self.pool: Pool | None = None
        self.enabled: set[str] = set()
        ctx.begin(lambda c: run_program(c, tuple(self.pool.program) if self.pool else (), todo))  # the program as it is at replay
        self.ctx = ctx

    def create(self, data: st.DataObject) -> None:
        todo = self.todo
        num_blocks = data.draw(NUM_BLOCKS if todo == "TODO 2" else DECODE_NUM_BLOCKS)
        block_size, head_dim = data.draw(BLOCK_SIZES), data.draw(HEAD_DIMS)
        num_blocks, head_dim = _bounded(num_blocks, block_size, head_dim)
        self._do(lambda: setattr(self, "pool", Pool(self.ctx, todo, num_blocks, block_size, head_dim)))
        self.enabled = {name for name in ACTIONS[todo] if choices.integer(data, 0, 3) > 0}
        if self.pool is not None:
            (self._first_prefill if todo == "TODO 2" else self._nearly_full)(data)

    def _do(self, action: Callable[[], None]) -> None:
        try:
            action()
        except Inconclusive:
            reject()

    def _held(self) -> list[Req]:
        return self.pool.held() if self.pool else []

    def _can(self, action: str) -> bool:
        pool = self.pool
        assert pool is not None
        if action == "release" or action == "decode":
            return bool(self._held())
        if action == "permute":
            return len(pool.free) > 1
        if action == "prefill_again":
            return bool(self._again())
        if action == "place":
            return bool(pool.free)
        return True  # prefill_new: a new request can always be prefilled

    def step(self, data: st.DataObject) -> None:
        # What the submission did decides what can run: with no free block and no request
        # holding one (a block leaked, a block the given code keeps back), nothing can.
        if self.pool is None:
            return
        can = [action for action in ACTIONS[self.todo] if self._can(action)]
        chosen = [action for action in can if action in self.enabled] or can
        if chosen:
            getattr(self, choices.pick(data, chosen) if len(chosen) > 1 else chosen[0])(data)

    def release(self, data: st.DataObject) -> None:
        assert self.pool is not None
        req = choices.pick(data, self._held())
        self._do(lambda: self.pool.release(req))
        # The caller may drop a finished request (`del r`): the next Request may be made at
        # its address, which a cache keyed by id(req) mistakes for the old one.
        if not req.table and choices.boolean(data):
            self._do(lambda: self.pool.forget(req))

    # -- TODO 2 --------------------------------------------------------------------------
    def _first_prefill(self, data: st.DataObject) -> None:
        """Every example starts with a prefill that fits (each one then checks the prefill items)."""
        pool = self.pool
        assert pool is not None
        # An empty free list (a pool the given code keeps a block of) makes this an OOM.
        length = draw_length(data, pool.block_size, choices.integer(data, 1, max(1, len(pool.free))))
        req = pool.new_request(length, _request_id(data, pool))
        self._do(lambda: pool.prefill(req))

    def prefill_new(self, data: st.DataObject) -> None:
        pool = self.pool
        assert pool is not None
        free = len(pool.free)
        # Around what is free: fits, exactly enough, one block too many, far too many.
        blocks = choices.pick(data, [free, free, free + 1, max(1, free // 2), pool.num_blocks + 2])
        length = draw_length(data, pool.block_size, blocks)
        req = pool.new_request(length, _request_id(data, pool))
        self._do(lambda: pool.prefill(req))

    def _again(self) -> list[Req]:
        """Requests holding no blocks (released, or refused by an OOM) that may be prefilled again."""
        if self.pool is None:
            return []
        live = _live_ids(self.pool)
        return [r for r in self.pool.requests if not r.table and not r.gone and r.request_id not in live]

    # The free list in any order (legal; the given release keeps it sorted, so only this
    # shows a prefill that takes some blocks and removes others).  TODO 3's reordered lists
    # are its corners': an action of its own there took the steps that reach an OOM and a
    # full pool, and cost a grading 0.7 to 1.4 s.
    def permute(self, data: st.DataObject) -> None:
        assert self.pool is not None
        order = _order(data, len(self.pool.free))
        self._do(lambda: self.pool.permute(order))

    def prefill_again(self, data: st.DataObject) -> None:
        assert self.pool is not None
        req = choices.pick(data, self._again())
        self._do(lambda: self.pool.prefill(req))

    # -- TODO 3 --------------------------------------------------------------------------
    def _nearly_full(self, data: st.DataObject) -> None:
        """Half the examples start with a request holding every free block but one (a pool of
        one block: that block), its last block full: its decodes take the last free block,
        then meet a full pool, as growth, ownership and OOM rollback each need."""
        pool = self.pool
        assert pool is not None
        if not pool.free or not choices.boolean(data):
            return
        n = max(1, len(pool.free) - 1)
        self._place(data, n * pool.block_size, n)

    def _place(self, data: st.DataObject, length: int, needed: int) -> None:
        pool = self.pool
        assert pool is not None
        if needed <= DRAWN_ONE_BY_ONE:
            indices = [choices.integer(data, 0, len(pool.free) - 1 - i) for i in range(needed)]
        else:  # many blocks: from the front or from the end of the free list (a draw per block costs more than the step)
            indices = [choices.pick(data, (0, -1))] * needed
        req = pool.new_request(length, _request_id(data, pool))
        self._do(lambda: pool.place(req, indices))

    def place(self, data: st.DataObject) -> None:
        pool = self.pool
        assert pool is not None
        length = draw_length(data, pool.block_size, len(pool.free))
        needed = pool.need(length)
        if needed <= len(pool.free):
            self._place(data, length, needed)

    def decode(self, data: st.DataObject) -> None:
        assert self.pool is not None
        req = choices.pick(data, self._held())
        self._do(lambda: self.pool.decode(req))


def run_steps(machine: PoolMachine, data: st.DataObject, max_steps: int) -> None:
    """An example: the pool made, then steps until choices.should_stop says so; `max_steps`
    counts the pool's making too (`stateful_steps`, as hypothesis counted its initialize rule)."""
    machine.create(data)
    steps = 1
    while not choices.should_stop(data, steps, max_steps):
        steps += 1
        machine.step(data)


NEEDS = {
    "todo2.block_count": [
        Need("todo2.block_count", 8, "prefill 分配的块数被检查的次数不够", "too few prefills could be checked for their block count"),
        Need("todo2.block_count:multi", 3, "需要多个块的 prefill 被检查的次数不够", "too few prefills needing several blocks could be checked"),
    ],
    "todo2.ownership": [
        Need("todo2.ownership", 6, "prefill 从未（或很少）从空闲列表取走块", "prefill never (or too rarely) took blocks from the free list"),
        Need("todo2.ownership:multi", 3, "prefill 很少一次取走多个空闲块", "prefill too rarely took several free blocks at once"),
    ],
    "todo2.oom_atomic": [
        Need("todo2.oom_atomic:oom", 4, "空闲块不足时 prefill 正确报 OOM 的次数不够", "too few prefills raised a correct OOM when blocks ran short"),
        Need("todo2.oom_atomic:exact", 3, "空闲块正好够用时 prefill 成功的次数不够", "too few prefills succeeded with exactly enough blocks free"),
    ],
    "todo3.growth": [
        Need("todo3.growth:grow", 5, "decode 正确追加新块的次数不够", "too few decodes correctly opened a new block"),
        Need("todo3.growth:stay", 5, "decode 在块内正确增长的次数不够", "too few decodes correctly grew within a block"),
    ],
    "todo3.ownership": [Need("todo3.ownership", 5, "decode 从未（或很少）从空闲列表取走块", "decode never (or too rarely) took a block from the free list")],
    "todo3.oom_rollback": [
        Need("todo3.oom_rollback:oom", 3, "没有空闲块时 decode 正确报 OOM 的次数不够", "too few decodes raised a correct OOM with no block free"),
        Need("todo3.oom_rollback:full", 2, "池满但不需要新块时 decode 成功的次数不够", "too few decodes succeeded on a full pool when no block was needed"),
    ],
}


def check_machine(ctx: ItemContext) -> Failure | None:
    todo = "TODO 2" if ctx.item_id.startswith("todo2") else "TODO 3"

    def plan(run: ItemContext) -> tuple[list[Callable[[], None]], Explore]:
        programs = (*(PREFILL_CORNERS if todo == "TODO 2" else DECODE_CORNERS), *far_programs(run.seed(), todo))
        corners = [lambda program=program: run_program(run, program, todo) for program in programs]

        def explore(round_: int, examples: int) -> None:
            @seed(run.seed(round_))
            @hypothesis_settings(run.config, examples or run.config.hypothesis.stateful_examples)
            @given(st.data())
            def test(data: st.DataObject) -> None:
                run_steps(PoolMachine(run, todo), data, run.config.hypothesis.stateful_steps)

            test()

        return corners, explore

    todo_id = ctx.item_id.split(".")[0]
    return grade_item(ctx, todo_id, [item for item in NEEDS if item.startswith(todo_id)], plan, NEEDS[ctx.item_id])
