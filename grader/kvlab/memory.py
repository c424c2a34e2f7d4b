"""The KV pool under one policy: what a scheduler step asks of it, and where every slot is.

A step (simulate.py) hands the pool one `StepPlan`: release the requests preempted so far,
give every running request room for one more token (in order, stopping at the first that
finds none), then, if all of them got it, release the finished requests and admit waiting
ones (in order, stopping at the first that does not fit).  Asked afterwards, the pool splits
its slots into six parts that add up to the pool (`Parts`).

Reservation policies (Orca in the paper) give each request one contiguous region when it is
admitted, sized by a rule: the model's maximum length (static), the final length rounded up
to a power of two, or the final length itself (an oracle that knows the output length).
They never run out mid-request, so they never preempt.  External fragmentation is not
modelled (any free slots count as usable): that flatters them.

Paging asks an allocator (drivers.py, sandboxed.py) for blocks and reads back what it holds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol


class AllocatorError(Exception):
    """The allocator under test did something the lab cannot serve past.  `en`/`zh` say what."""

    def __init__(self, en: str, zh: str, *, request: int | None = None):
        super().__init__(en)
        self.en, self.zh, self.request = en, zh, request
        self.step: int | None = None  # set by the scheduler

    def text(self, lang: str) -> str:
        where = "" if self.step is None else (f"第 {self.step} 步：" if lang == "zh" else f"step {self.step}: ")
        return where + (self.zh if lang == "zh" else self.en)


class Unfinished(AllocatorError):
    """allocate_for_prefill or allocate_for_decode raised NotImplementedError."""

    def __init__(self, method: str):
        super().__init__(f"{method} is not implemented yet: finish TODO 2 and TODO 3 first",
                         f"{method} 还没有实现：请先完成 TODO 2 和 TODO 3")


class Stalled(AllocatorError):
    """Nothing can run any more: the pool lost the room that even one request needs."""


@dataclass(frozen=True)
class StepPlan:
    release_first: list[int]  # preempted: their memory goes back before anything else
    decode: list[int]  # room for one more token each, in this order
    release_after: list[int]  # finished (only once every decode got its room)
    admit: list[tuple[int, int, int]]  # (request, tokens it holds now, tokens it will hold at the end)
    keep: list[int]  # the running requests left after release_after (observed, with the admitted)
    audit: bool = False  # also check, block by block, that every block is in exactly one place


@dataclass(frozen=True)
class StepOutcome:
    decoded: int  # how many of plan.decode got their room (all, or up to the first that did not)
    admitted: int  # how many of plan.admit were admitted (0 unless every decode got its room)


@dataclass(frozen=True)
class Parts:
    """Where the pool's slots are after a step (each in slots; the six add up to the pool)."""

    token: int  # hold a token's K and V
    reserved: int  # reserved for a request, holding nothing yet (`never` of them never will)
    never: int
    tail: int  # in a request's blocks past its tokens (the last block's unfilled slots)
    leaked: int  # neither free nor in any running request's block table
    free: int
    entries: int = 0  # block-table entries in all (paging)

    def total(self) -> int:
        return self.token + self.reserved + self.tail + self.leaked + self.free


class Memory(Protocol):
    policy: str
    pool_slots: int
    block_size: int

    def step(self, plan: StepPlan) -> StepOutcome: ...

    def parts(self, running: list[int], length: list[int], tokens: int) -> Parts:
        """Where the slots are, with `running` holding `length[r]` tokens each, `tokens` in all."""
        ...

    def admission_bound(self, keep: list[int], finishing: list[int], length: list[int]) -> int:
        """At most how many tokens could be admitted once `finishing` is released and `keep`
        runs (a bound: the scheduler asks no further down the queue than this allows)."""
        ...

    def close(self) -> None: ...


def _next_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


RULES: dict[str, Callable[[int, int], int]] = {
    "static": lambda final, max_len: max_len,
    "pow2": lambda final, max_len: min(_next_pow2(final), max_len),
    "oracle": lambda final, max_len: final,
}


@dataclass
class ReservationMemory:
    """One region per request, sized by RULES[policy] when it is admitted."""

    policy: str
    pool_slots: int
    max_model_len: int
    block_size: int = 1
    free: int = 0
    never: int = 0  # reserved slots past the final lengths: they will never hold a token
    held: dict[int, tuple[int, int]] = field(default_factory=dict)  # request -> (slots, final length)

    def __post_init__(self) -> None:
        self.rule = RULES[self.policy]
        self.free = self.pool_slots

    def _release(self, request: int) -> None:
        slots, final = self.held.pop(request)
        self.free += slots
        self.never -= slots - final

    def step(self, plan: StepPlan) -> StepOutcome:
        for request in plan.release_first:
            self._release(request)
        for request in plan.release_after:
            self._release(request)
        admitted = 0
        for request, _now, final in plan.admit:
            slots = self.rule(final, self.max_model_len)
            if slots > self.free:
                break
            self.free -= slots
            self.never += slots - final
            self.held[request] = (slots, final)
            admitted += 1
        return StepOutcome(len(plan.decode), admitted)

    def parts(self, running: list[int], length: list[int], tokens: int) -> Parts:
        reserved = self.pool_slots - self.free - tokens
        return Parts(token=tokens, reserved=reserved, never=self.never, tail=0, leaked=0, free=self.free)

    def admission_bound(self, keep: list[int], finishing: list[int], length: list[int]) -> int:
        return self.free + sum(self.held[r][0] for r in finishing)

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class Observation:
    """What an allocator holds after a step, as read from it: its free list's length, and each
    observed request's block-table length and seq_len (in the order asked); with an audit,
    the lists themselves."""

    free: int
    tables: list[int]
    seqs: list[int]
    free_list: list[int] | None = None
    table_lists: list[list[int]] | None = None


class Driver(Protocol):
    """An allocator to page through: in this process (drivers.py) or in the sandbox (sandboxed.py)."""

    def step(self, plan: StepPlan) -> tuple[StepOutcome, Observation | None]: ...

    def close(self) -> None: ...


class PagedMemory:
    """Blocks from an allocator; every step's parts read back from it and checked."""

    policy = "paged"

    def __init__(self, driver: Driver, num_blocks: int, block_size: int):
        self.driver = driver
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.pool_slots = num_blocks * block_size
        self.seen: Observation | None = None

    def step(self, plan: StepPlan) -> StepOutcome:
        outcome, seen = self.driver.step(plan)
        if outcome.decoded == len(plan.decode):
            self.seen = seen
        return outcome

    def parts(self, running: list[int], length: list[int], tokens: int) -> Parts:
        seen = self.seen
        assert seen is not None and len(seen.tables) == len(running) == len(seen.seqs)
        bs = self.block_size
        for request, table, seq in zip(running, seen.tables, seen.seqs, strict=True):
            want = length[request]
            if seq != want:
                raise AllocatorError(
                    f"request {request} should hold {want} tokens, its seq_len is {seq}",
                    f"请求 {request} 应有 {want} 个 token，它的 seq_len 是 {seq}", request=request)
            if table * bs < want:
                raise AllocatorError(
                    f"request {request} holds {want} tokens in {table} blocks of {bs} slots: no room for them",
                    f"请求 {request} 有 {want} 个 token，却只有 {table} 个大小为 {bs} 的块：放不下", request=request)
        held = sum(seen.tables)
        leaked = self.num_blocks - seen.free - held
        if leaked < 0:
            raise AllocatorError(
                f"the free list ({seen.free}) and the block tables ({held}) hold more blocks than the pool has ({self.num_blocks})",
                f"空闲列表（{seen.free}）和块表（{held}）里的块比池中的块（{self.num_blocks}）还多")
        if seen.free_list is not None and seen.table_lists is not None:
            self._audit(running, seen.free_list, seen.table_lists)
        token = tokens
        return Parts(token=token, reserved=0, never=0, tail=held * bs - token, leaked=leaked * bs,
                     free=seen.free * bs, entries=held)

    def admission_bound(self, keep: list[int], finishing: list[int], length: list[int]) -> int:
        return self.pool_slots - sum(length[r] for r in keep)  # whatever the allocator does, these need their slots

    def _audit(self, running: list[int], free: list[int], tables: list[list[int]]) -> None:
        where: dict[int, tuple[str, str]] = {}
        owners = [(("the free list", "空闲列表"), free)]
        owners += [((f"request {r}", f"请求 {r}"), t) for r, t in zip(running, tables, strict=True)]
        for (en, zh), blocks in owners:
            for block in blocks:
                if not 0 <= block < self.num_blocks:
                    raise AllocatorError(f"{en} holds block {block}, outside the pool (0..{self.num_blocks - 1})",
                                         f"{zh} 持有池外的块 {block}（0..{self.num_blocks - 1}）")
                if block in where:
                    raise AllocatorError(f"block {block} is in {where[block][0]} and in {en} at once",
                                         f"块 {block} 同时在{where[block][1]}和{zh}中")
                where[block] = (en, zh)

    def close(self) -> None:
        self.driver.close()
