"""The scheduler: iteration-level (continuous) batching over one pool, as vLLM's default does.

Each step:

1. requests whose arrival has come join the waiting queue (first come, first served);
2. every running request gets room for one more token, oldest first.  One that finds no room
   preempts the latest-admitted running request (which may be itself): its memory is freed
   and it goes back to the front of the queue, keeping the tokens it generated, which are
   computed again (recompute) as part of its prompt when it is admitted again;
3. requests that generated their last token are released;
4. if nothing was preempted in this step, waiting requests are admitted in order (their
   prompt is prefilled) while they fit and fewer than `max_running` run; the first that does
   not fit stops admission (no overtaking);
5. the pool says where its slots are (memory.Parts), and the step is recorded.

A request admitted in one step generates its first token in the next.  Steps where nothing
runs and nothing waits are skipped (the clock jumps to the next arrival): they hold nothing.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import islice

from grader.kvlab.memory import AllocatorError, Memory, Stalled, StepPlan
from grader.kvlab.trace import Trace

AUDIT_EVERY = 256  # steps between block-by-block audits of a paged pool (and one at the end)
PROGRESS_EVERY = 256  # steps between progress reports
Progress = Callable[[str, int, int], None]  # (policy, finished, requests)


@dataclass
class Timeline:
    """One entry per recorded step; slot counts are of the pool after the step."""

    step: list[int] = field(default_factory=list)
    token: list[int] = field(default_factory=list)
    reserved: list[int] = field(default_factory=list)
    never: list[int] = field(default_factory=list)
    tail: list[int] = field(default_factory=list)
    leaked: list[int] = field(default_factory=list)
    free: list[int] = field(default_factory=list)
    entries: list[int] = field(default_factory=list)  # block-table entries in all
    running: list[int] = field(default_factory=list)
    waiting: list[int] = field(default_factory=list)  # arrived, not running
    prefill: list[int] = field(default_factory=list)  # prompt tokens computed (recomputed ones too)
    decode: list[int] = field(default_factory=list)  # tokens generated
    preempted: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.step)


@dataclass
class Run:
    policy: str
    block_size: int
    pool_slots: int
    requests: int
    timeline: Timeline
    finished: int = 0
    preemptions: int = 0
    recomputed_tokens: int = 0
    leaked_at_end: int = 0  # slots the pool did not get back once every request finished
    error: AllocatorError | None = None


class _Scheduler:
    def __init__(self, trace: Trace, memory: Memory, max_running: int, progress: Progress | None):
        self.reqs = trace.requests
        self.memory = memory
        self.max_running = max_running
        self.progress = progress
        n = len(self.reqs)
        self.prompt = [r.prompt_len for r in self.reqs]
        self.out = [r.output_len for r in self.reqs]
        self.length = [0] * n  # tokens in the cache while running
        self.generated = [0] * n  # output tokens so far (kept across a preemption)
        self.served = [False] * n  # admitted at least once
        self.waiting: deque[int] = deque()
        self.running: list[int] = []  # in admission order: the last is the first to be preempted
        self.due: dict[int, list[int]] = {}  # step -> requests that generate their last token in it
        self.tokens = 0  # tokens the running requests hold
        self.run = Run(memory.policy, memory.block_size, memory.pool_slots, n, Timeline())
        # A correct allocator always lets the oldest request progress; this bounds everything else.
        last = max((r.arrival for r in self.reqs), default=0.0)
        self.step_limit = math.ceil(last) + 4 * sum(r.final_len + 1 for r in self.reqs) + 1000

    def serve(self) -> Run:
        n, t, arrived = len(self.reqs), -1, 0
        try:
            while self.run.finished < n:
                t += 1
                if not self.running and not self.waiting:
                    t = max(t, math.ceil(self.reqs[arrived].arrival))
                while arrived < n and self.reqs[arrived].arrival <= t:
                    self.waiting.append(arrived)
                    arrived += 1
                self._step(t)
                if t > self.step_limit:
                    raise Stalled(f"no end after {t} steps", f"{t} 步后仍未结束")
                if self.progress is not None and t % PROGRESS_EVERY == 0:
                    self.progress(self.run.policy, self.run.finished, n)
            self._final_check()
        except AllocatorError as error:
            error.step = t
            self.run.error = error
        if self.progress is not None:
            self.progress(self.run.policy, self.run.finished, n)
        return self.run

    def _step(self, t: int) -> None:
        running, generated, out, length, memory = self.running, self.generated, self.out, self.length, self.memory
        # Who generates their last token in this step (a preempted request's old date is stale:
        # its count tells).  Only a preemption in the middle of the step makes this be worked out again.
        finishing = [r for r in self.due.pop(t, ()) if length[r] and generated[r] + 1 == out[r]]
        pending = running
        decoded: list[int] = []
        victims: list[int] = []  # preempted in this step, released by the next call
        preempted: list[int] = []
        while True:
            done = set(finishing)
            keep = [r for r in running if r not in done] if done else running
            admit = [] if preempted else self._candidates(keep, finishing)
            outcome = memory.step(StepPlan(victims, pending, finishing, admit, keep, audit=t % AUDIT_EVERY == 0))
            victims = []
            if outcome.decoded == len(pending):
                for r in pending:
                    length[r] += 1
                    generated[r] += 1
                decoded += pending
                break
            for r in pending[: outcome.decoded]:
                length[r] += 1
                generated[r] += 1
            decoded += pending[: outcome.decoded]
            failed = pending[outcome.decoded]
            running = running[:-1]  # the latest admitted goes
            victim = pending[-1]
            if not running:
                raise Stalled(
                    f"request {failed} cannot grow even alone in the pool ({self._lost()})",
                    f"请求 {failed} 即使独占整个池也无法增长（{self._lost('zh')}）", request=failed)
            victims.append(victim)
            preempted.append(victim)
            self.tokens -= length[victim]
            length[victim] = 0
            pending = pending[outcome.decoded : -1]  # the victim was the last of them
            finishing = [r for r in decoded if generated[r] == out[r]] + [r for r in pending if generated[r] + 1 == out[r]]
        self.tokens += len(decoded)
        for r in finishing:
            self.tokens -= length[r]
            length[r] = 0
        admitted = [r for r, _, _ in admit[: outcome.admitted]]
        self.running = running = keep + admitted if admitted else keep
        prefill = 0
        for r in admitted:
            self.waiting.popleft()
            length[r] = self.prompt[r] + generated[r]
            prefill += length[r]
            if self.served[r]:  # preempted before: all of it is computed again
                self.run.recomputed_tokens += length[r]
            self.served[r] = True
            self.due.setdefault(t + out[r] - generated[r], []).append(r)
        self.tokens += prefill
        self.run.finished += len(finishing)
        if preempted:
            self.waiting.extendleft(sorted(preempted, reverse=True))  # back to the front, oldest first
            self.run.preemptions += len(preempted)
        if not running and self.waiting and not preempted:  # admission was tried on an empty pool
            raise Stalled(
                f"request {self.waiting[0]} does not fit in the empty pool ({self._lost()})",
                f"请求 {self.waiting[0]} 在空池中也放不下（{self._lost('zh')}）", request=self.waiting[0])
        self._record(t, prefill, len(decoded), len(preempted))

    def _candidates(self, keep: list[int], finishing: list[int]) -> list[tuple[int, int, int]]:
        """The head of the queue, as far as it could possibly fit: (request, tokens now, final tokens)."""
        room = self.max_running - len(keep)
        if room <= 0 or not self.waiting:
            return []
        bound = self.memory.admission_bound(keep, finishing, self.length)
        out = []
        for r in islice(self.waiting, room):
            now = self.prompt[r] + self.generated[r]
            out.append((r, now, self.prompt[r] + self.out[r]))
            bound -= now
            if bound < 0:  # this one cannot fit: it is the last asked
                break
        return out

    def _lost(self, lang: str = "en") -> str:
        line = self.run.timeline.leaked
        lost = line[-1] if line else 0
        return f"{lost} 个槽位已丢失" if lang == "zh" else f"{lost} slots lost"

    def _record(self, t: int, prefill: int, decoded: int, preempted: int) -> None:
        parts = self.memory.parts(self.running, self.length, self.tokens)
        if parts.total() != self.memory.pool_slots:
            raise AssertionError(f"step {t}: the parts add up to {parts.total()}, not {self.memory.pool_slots}")
        line = self.run.timeline
        line.step.append(t)
        line.token.append(parts.token)
        line.reserved.append(parts.reserved)
        line.never.append(parts.never)
        line.tail.append(parts.tail)
        line.leaked.append(parts.leaked)
        line.free.append(parts.free)
        line.entries.append(parts.entries)
        line.running.append(len(self.running))
        line.waiting.append(len(self.waiting))
        line.prefill.append(prefill)
        line.decode.append(decoded)
        line.preempted.append(preempted)

    def _final_check(self) -> None:
        """Every request finished: the pool must have all of it back."""
        outcome = self.memory.step(StepPlan([], [], [], [], [], audit=True))
        assert outcome.decoded == 0
        parts = self.memory.parts([], self.length, 0)
        self.run.leaked_at_end = parts.leaked


def simulate(trace: Trace, memory: Memory, *, max_running: int = 256, progress: Progress | None = None) -> Run:
    """Serve `trace` on `memory`; an allocator that fails ends the run early (Run.error)."""
    if max_running < 1:
        raise ValueError(f"max_running must be at least 1, got {max_running}")
    return _Scheduler(trace, memory, max_running, progress).serve()
