"""Paging through an allocator in this process: the reference's, or a notebook's own classes.

The allocator is used only through the exercise's contract: `KVCacheManager(num_blocks=,
block_size=, head_dim=)`, `Request(request_id=, prompt_len=)`, `allocate_for_prefill(req)`,
`allocate_for_decode(req)`, `release_request(req)`, and reads of `free_blocks`,
`req.block_table` and `req.seq_len`.  "Raises RuntimeError" (any subclass) means out of
memory; NotImplementedError (a RuntimeError too) means an unfinished TODO; anything else
stops the lab with what was raised.  Every admission builds a new Request: one that failed
(an allocator that is not all-or-nothing may have given it blocks) is dropped with whatever
it holds, as a server drops a request object it could not schedule.
"""

from __future__ import annotations

import operator
from typing import Any

from grader.kvlab.memory import AllocatorError, Observation, StepOutcome, StepPlan, Unfinished

HEAD_DIM = 1  # the pool's values are never read here: the smallest pool tensor will do


def raised(method: str, request: int | None, error: BaseException) -> AllocatorError:
    what = f"{type(error).__name__}: {str(error)[:300]}"
    on = "" if request is None else f" on request {request}"
    on_zh = "" if request is None else f"（请求 {request}）"
    return AllocatorError(f"{method}{on} raised {what}", f"{method}{on_zh} 抛出了 {what}", request=request)


class LocalDriver:
    def __init__(self, manager_cls: Any, request_cls: Any, num_blocks: int, block_size: int):
        try:
            self.manager = manager_cls(num_blocks=num_blocks, block_size=block_size, head_dim=HEAD_DIM)
        except Exception as error:
            raise raised("KVCacheManager(...)", None, error) from error
        self.request_cls = request_cls
        self.live: dict[int, Any] = {}

    def _release(self, request: int) -> None:
        req = self.live.pop(request)
        try:
            self.manager.release_request(req)
        except NotImplementedError:
            raise Unfinished("release_request") from None
        except Exception as error:
            raise raised("release_request", request, error) from error

    def step(self, plan: StepPlan) -> tuple[StepOutcome, Observation | None]:
        manager, live = self.manager, self.live
        for request in plan.release_first:
            self._release(request)
        decode = manager.allocate_for_decode
        decoded = 0
        for request in plan.decode:
            try:
                decode(live[request])
            except NotImplementedError:
                raise Unfinished("allocate_for_decode") from None
            except RuntimeError:
                break  # out of blocks: the scheduler preempts
            except Exception as error:
                raise raised("allocate_for_decode", request, error) from error
            decoded += 1
        if decoded < len(plan.decode):
            return StepOutcome(decoded, 0), None
        for request in plan.release_after:
            self._release(request)
        admitted = 0
        for request, length, _final in plan.admit:
            try:
                req = self.request_cls(request_id=request, prompt_len=length)
                manager.allocate_for_prefill(req)
            except NotImplementedError:
                raise Unfinished("allocate_for_prefill") from None
            except RuntimeError:
                break  # does not fit: it waits (FCFS: so does everyone behind it)
            except Exception as error:
                raise raised("allocate_for_prefill", request, error) from error
            live[request] = req
            admitted += 1
        observed = [live[r] for r in plan.keep] + [live[r] for r, _, _ in plan.admit[:admitted]]
        return StepOutcome(decoded, admitted), self._observe(observed, plan.audit)

    def _observe(self, observed: list[Any], audit: bool) -> Observation:
        try:
            free = self.manager.free_blocks
            seqs = [req.seq_len for req in observed]
            if set(map(type, seqs)) - {int}:  # rare: converted one by one (a numpy integer), or refused
                seqs = [_count(seq) for seq in seqs]
            seen = Observation(
                free=len(free),
                tables=[len(req.block_table) for req in observed],
                seqs=seqs,
                free_list=[_count(b) for b in free] if audit else None,
                table_lists=[[_count(b) for b in req.block_table] for req in observed] if audit else None,
            )
        except Exception as error:
            raise raised("reading free_blocks / block_table / seq_len", None, error) from error
        return seen

    def close(self) -> None:
        self.live.clear()


def _count(value: Any) -> int:
    """An exact integer (an int, a numpy integer, a 0-d integer tensor), else TypeError."""
    if isinstance(value, bool):
        raise TypeError(f"expected an int, got {value!r}")
    return operator.index(value)
